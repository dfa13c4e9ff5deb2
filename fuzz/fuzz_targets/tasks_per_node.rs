#![no_main]
//! SLURM_STEP_TASKS_PER_NODE: never panics; counts are positive and bounded.

use libfuzzer_sys::fuzz_target;
use tf_cluster_core::tasks_per_node;

fuzz_target!(|text: &str| {
    let Ok(counts) = tasks_per_node::parse(text, 4096) else { return };
    assert!(!counts.is_empty() && counts.len() <= 4096);
    assert!(counts.iter().all(|&c| c >= 1));
});
