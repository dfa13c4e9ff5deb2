#![no_main]
//! CUDA_VISIBLE_DEVICES and the GPU settings: never panics; every task's
//! slice has the promised size and only Slurm's own tokens.

use libfuzzer_sys::fuzz_target;
use tf_cluster_core::Settings;
use tf_cluster_core::gpus::{GpuBind, GpuPlan, NodeGpus, Rules, Visible};

fuzz_target!(|input: (Option<u8>, Option<u8>, u8, Option<u8>, &str, &str, u8)| {
    let (per_node, per_task, tasks, probed, list, bind, which) = input;
    let rules = Rules {
        whole: (which & 2 != 0).then_some("torch-cluster"),
        own_ids: (which & 4 != 0).then_some("jax-cluster"),
    };
    let bind = GpuBind::parse(bind);
    let settings = Settings {
        gpus_per_node: per_node.map(u32::from),
        gpus_per_task: per_task.map(u32::from),
        ..Settings::default()
    };
    let tasks = u32::from(tasks.max(1));
    for visible in [None, Some(list)] {
        let lists = Visible::from_pairs(visible.map(|v| ("CUDA_VISIBLE_DEVICES", v)));
        let node = NodeGpus { visible: &lists, bind: bind.as_ref(), probed: probed.map(u32::from), local_tasks: tasks, node_tasks: tasks, gpus_on_node: None };
        let Ok(plan) = GpuPlan::new(&settings, rules, node) else { continue };
        for local in 0..tasks {
            let _ = plan.jax_ids(local);
        }
        for local in 0..tasks {
            if let (Some(slice), Some(visible)) = (plan.for_local(local), visible) {
                if !visible.is_empty() {
                    assert!(slice.split(',').all(|t| visible.split(',').any(|v| v == t)));
                }
            }
        }
    }
});
