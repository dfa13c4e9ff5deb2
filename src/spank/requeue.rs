//! `--tf-requeue-on=CODE`: when a task of the step exits with CODE,
//! slurmstepd requeues the job, as `scontrol requeue` would, so that a
//! training that checkpoints and exits with CODE comes back without
//! scontrol in its image (containers usually lack it) and without the
//! cluster-wide `RequeueExit=` only admins set.
//!
//! In `task_exit`: slurmstepd itself, as root, on the host, after the task
//! was reaped. The job is Slurm's SPANK item (in a heterogeneous job the
//! leader's, read on the host by `user_init`), never a variable a task or
//! an image could set; the exit code is slurmstepd's own wait status. One
//! RPC per node and incarnation at most: the first task of the node to exit
//! with CODE sends it, the others see it sent. slurmctld decides the rest
//! as for the job's user: a job submitted with `--no-requeue` (or under
//! `JobRequeue=0` without `--requeue`) is refused to root too ("Requested
//! operation is presently disabled"), and the refusal is said in one line;
//! a requeue already under way (another node sent it) is not sent again by
//! slurmctld.

use std::sync::atomic::{AtomicBool, Ordering};

use super::bindings as sys;
use super::handle::Spank;
use super::slurm_api;
use crate::core::Settings;

/// Whether this node already asked (slurmstepd serves one step of one
/// incarnation).
static SENT: AtomicBool = AtomicBool::new(false);

/// After each task of the node exits: requeues the job when it exited with
/// the step's CODE.
pub fn task_exit(spank: &Spank, settings: &Settings, leader: Option<u32>) {
    let Some(code) = settings.requeue_on else {
        return;
    };
    let Ok(status) = spank.task_exit_status() else {
        return;
    };
    if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == i32::from(code)) {
        return;
    }
    if SENT.swap(true, Ordering::SeqCst) {
        return;
    }
    let Ok(job) = spank.job_id() else {
        return;
    };
    let job = leader.unwrap_or(job);
    // SAFETY: integers only; libslurm (linked into slurmstepd) sends the RPC.
    #[cfg(not(slurm_requeue_by_id))]
    let rc = unsafe { sys::slurm_requeue(job, 0) };
    // 26.05 on: the job named by a step id (the whole job: no step).
    #[cfg(slurm_requeue_by_id)]
    let rc = unsafe { sys::slurm_requeue(slurm_api::step_id(job, sys::NO_VAL), 0) };
    match slurm_api::check(rc, || {
        format!("a task exited with {code} (--tf-requeue-on={code}) but job {job} was not requeued")
    }) {
        Ok(()) => log::warn!("job {job} requeued: a task exited with {code} (--tf-requeue-on)"),
        Err(e) => log::error!("{e}"),
    }
}
