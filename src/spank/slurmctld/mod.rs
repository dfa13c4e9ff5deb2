//! What the plugin asks of slurmctld, one file per request: a step's record
//! (`step_info`), its layout (`step_layout`), the end of a refused step
//! (`step_kill`), the job's record and its requeue (`requeue`); `api` holds
//! what they share (Slurm's ids, return codes, freed responses).

pub mod api;
pub mod requeue;
pub mod step_info;
pub mod step_kill;
pub mod step_layout;
