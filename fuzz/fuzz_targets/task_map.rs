#![no_main]
//! SLURM_TF_CLUSTER_MAP as a task reads it: never panics, never expands
//! beyond the task bound, and a map it accepts encodes back to itself.

use libfuzzer_sys::fuzz_target;
use tf_cluster_core::MAX_TASKS;
use tf_cluster_core::task_map::{Found, TaskMap};

fuzz_target!(|text: &str| {
    let Ok(Found::Ours(map)) = TaskMap::decode(text, 7, 3) else { return };
    assert!(map.runs.len() <= MAX_TASKS);
    let hosts = text.split(';').nth(2).unwrap();
    let again = map.encode(hosts);
    assert_eq!(TaskMap::decode(&again, 7, 3).unwrap(), Found::Ours(map));
});
