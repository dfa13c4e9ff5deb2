#![no_main]
//! CUDA_VISIBLE_DEVICES and the GPU settings: never panics; every task's
//! slice has the promised size and only Slurm's own tokens.

use libfuzzer_sys::fuzz_target;
use tf_cluster_core::Settings;
use tf_cluster_core::gpus::GpuPlan;

fuzz_target!(|input: (Option<u8>, Option<u8>, u8, Option<u8>, &str)| {
    let (per_node, per_task, tasks, probed, list) = input;
    let settings = Settings {
        gpus_per_node: per_node.map(u32::from),
        gpus_per_task: per_task.map(u32::from),
        ..Settings::default()
    };
    let tasks = u32::from(tasks.max(1));
    for visible in [None, Some(list)] {
        let Ok(plan) = GpuPlan::new(&settings, visible, probed.map(u32::from), tasks) else { continue };
        for local in 0..tasks {
            if let (Some(slice), Some(visible)) = (plan.for_local(local), visible) {
                if !visible.is_empty() {
                    assert!(slice.split(',').all(|t| visible.split(',').any(|v| v == t)));
                }
            }
        }
    }
});
