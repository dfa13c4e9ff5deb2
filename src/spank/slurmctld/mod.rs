//! What the plugin asks of slurmctld, one file per request: a step's record
//! (`step_info`), its layout (`step_layout`), the end of a refused step
//! (`step_kill`), the job's requeue (`requeue`) and the exclusion of its bad node
//! (`exclude`), and the job's record, the
//! one source of the jobs those two name (`job_record`); `api` holds what
//! they share (Slurm's ids, return codes, freed responses).

pub mod api;
pub mod exclude;
pub mod job_record;
pub mod requeue;
pub mod step_info;
pub mod step_kill;
pub mod step_layout;
