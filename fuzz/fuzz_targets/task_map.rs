#![no_main]
//! srun's hand-off (SLURM_TF_CLUSTER, the task map in it) as a task reads
//! it: never panics, never expands beyond the task bound, and a hand-off it
//! accepts encodes back to one that decodes to the same.

use libfuzzer_sys::fuzz_target;
use tf_cluster_core::MAX_TASKS;
use tf_cluster_core::handoff::{Handoff, Verdict};

fuzz_target!(|text: &str| {
    let Ok(Some(handoff)) = Handoff::decode(text, 7, 3) else { return };
    if let Verdict::Map { map, .. } = handoff.verdict() {
        assert!(map.runs.len() <= MAX_TASKS);
    }
    let again = handoff.encode();
    assert_eq!(Handoff::decode(&again, 7, 3).unwrap(), Some(handoff));
});
