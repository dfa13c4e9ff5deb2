//! tf-cluster: a Slurm SPANK plugin that gives every task of
//! `srun --tf-cluster=ps:1,worker:3 …` its TF_CONFIG and CUDA_VISIBLE_DEVICES.
//!
//! [`core`] computes them from the step's facts and is plain Rust; `spank` is
//! the thin shell slurmstepd and srun call into.

use tf_cluster_core as core;
mod build_id;
mod spank;

/// build.rs's rules on the Slurm version, tested here (build.rs includes
/// the same file).
#[cfg(test)]
mod slurm_version_rules {
    #![allow(dead_code)]
    include!("../slurm_version.rs");

    /// Block steps follow the topology from 26.05 only: 25.05 and 25.11
    /// (25.11.7 measured under topology/tree) lay them out by node name,
    /// as 22.05 and 24.11 do.
    #[test]
    fn blocks_follow_the_topology_from_26_05() {
        for (version, follows) in [
            (0x16_05_08, false), // 22.05.8
            (0x18_0b_05, false), // 24.11.5
            (0x19_05_00, false), // 25.05.0
            (0x19_0b_07, false), // 25.11.7
            (0x1a_05_00, true),  // 26.05.0
            (0x1a_05_05, true),  // 26.05.5
            (0x1a_0b_00, true),  // 26.11
        ] {
            assert_eq!(blocks_follow_topology(version), follows, "{version:#x}");
        }
    }
}
