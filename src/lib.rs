//! tf-cluster: a Slurm SPANK plugin that gives every task of
//! `srun --tf-cluster=ps:1,worker:3 …` its TF_CONFIG and CUDA_VISIBLE_DEVICES.
//!
//! [`core`] computes them from the step's facts and is plain Rust; `spank` is
//! the thin shell slurmstepd and srun call into.

use tf_cluster_core as core;
mod build_id;
mod spank;
