//! `--tf-requeue-on=CODE`: when a task of the step exits with CODE,
//! slurmstepd requeues the job, as `scontrol requeue` would, so that a
//! training that checkpoints and exits with CODE comes back without
//! scontrol in its image (containers usually lack it) and without the
//! cluster-wide `RequeueExit=` only admins set.
//!
//! In `task_exit`: slurmstepd itself, as root, on the host, after the task
//! was reaped. The job is Slurm's SPANK item (in a heterogeneous job the
//! leader's, read on the host by `user_init`), never a variable a task or
//! an image could set; the exit code is slurmstepd's own wait status.
//!
//! At most `requeue-max` restarts (`--tf-requeue-max`, default 3): the
//! count is slurmctld's own record of the job (`slurm_load_job`'s
//! restart_cnt, every requeue whatever made it), never a variable; at the
//! cap, one line in the step's stderr says so (node 0's; another node's
//! goes to slurmd's log only) and the job ends as its tasks did.
//!
//! One requeue RPC per event for the whole step: the step's node 0 (the
//! SPANK item, Slurm's own) asks as soon as one of its tasks exits with
//! CODE; any other node whose task exits with CODE first gives node 0
//! [`GRACE`] to do it (the usual case: every rank checkpoints and exits with
//! CODE), watching slurmctld's record of the job, and asks only if the job
//! is still running as it was. Whoever asks first looks at the record
//! first: a job slurmctld is already requeueing (pending again, or
//! completing) is never asked again, so slurmctld and slurmd log no refusal
//! for a requeue that happens. slurmctld decides the rest as for the job's
//! user: a job submitted with `--no-requeue` (or under `JobRequeue=0`
//! without `--requeue`) is refused to root too ("Requested operation is
//! presently disabled"), and the refusal is said in one line.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::super::bindings as sys;
use super::super::handle::Spank;
use super::api;
use crate::core::{Error, Result, Settings};

/// Whether this node already decided (slurmstepd serves one step of one
/// incarnation).
static SENT: AtomicBool = AtomicBool::new(false);

/// How long a node other than the step's node 0 leaves node 0 to requeue
/// the job before it asks itself; it looks at the job every
/// [`GRACE_POLL`] meanwhile and stops as soon as the job is requeued.
const GRACE: Duration = Duration::from_secs(5);
const GRACE_POLL: Duration = Duration::from_secs(1);

/// slurm.h's job states (enum job_states and the state flags, macros
/// bindgen cannot read), the same from 22.05 to 26.05.
const JOB_STATE_BASE: u32 = 0xff;
const JOB_RUNNING: u32 = 1;
const JOB_REQUEUE: u32 = 1 << 10;
const JOB_REQUEUE_HOLD: u32 = 1 << 11;
const JOB_SPECIAL_EXIT: u32 = 1 << 12;
const JOB_COMPLETING: u32 = 1 << 15;
const JOB_REQUEUE_FED: u32 = 1 << 20;

/// What slurmctld's record says of the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Job {
    /// Running, neither being requeued nor completing: the incarnation
    /// whose task just exited.
    running: bool,
    /// Slurm's count of the job's restarts.
    restarts: u32,
}

/// Frees the response whatever happens while it is read.
struct Owned(*mut sys::job_info_msg_t);

impl Drop for Owned {
    fn drop(&mut self) {
        // SAFETY: a response slurm_load_job filled, freed once.
        unsafe { sys::slurm_free_job_info_msg(self.0) }
    }
}

/// Job `job` as slurmctld records it (one RPC, bounded by MessageTimeout).
fn load(job: u32) -> Result<Job> {
    let mut resp: *mut sys::job_info_msg_t = std::ptr::null_mut();
    #[cfg(not(slurm_load_job_by_id))]
    // SAFETY: `resp` is written with NULL or a response we own.
    let rc = unsafe { sys::slurm_load_job(&mut resp, job, 0) };
    // 26.05 on: the job named by a step id (the whole job: no step).
    #[cfg(slurm_load_job_by_id)]
    // SAFETY: a valid step id; `resp` is written with NULL or a response we
    // own.
    let rc = unsafe { sys::slurm_load_job(&mut resp, api::step_id(job, sys::NO_VAL), 0) };
    let what = || format!("slurmctld gave no record of job {job}");
    api::check(rc, what)?;
    let resp = Owned(api::non_null(resp, what)?.as_ptr());
    // SAFETY: non-NULL, filled by Slurm: record_count records.
    let r = unsafe { &*resp.0 };
    if r.job_array.is_null() {
        return Err(Error::new(format!("slurmctld has no job {job}")));
    }
    // SAFETY: job_array holds record_count records.
    let jobs = unsafe { std::slice::from_raw_parts(r.job_array, r.record_count as usize) };
    let Some(j) = jobs.iter().find(|j| j.job_id == job) else {
        return Err(Error::new(format!("slurmctld has no job {job}")));
    };
    Ok(Job {
        running: is_running(j.job_state),
        restarts: u32::from(j.restart_cnt),
    })
}

/// Running, with no requeue or completion under way.
fn is_running(state: u32) -> bool {
    let busy = JOB_REQUEUE | JOB_REQUEUE_HOLD | JOB_SPECIAL_EXIT | JOB_COMPLETING | JOB_REQUEUE_FED;
    state & JOB_STATE_BASE == JOB_RUNNING && state & busy == 0
}

/// After each task of the node exits: requeues the job when it exited with
/// the step's CODE, below the cap, unless another node already did.
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
    let first = spank.node_id().map_or(true, |n| n == 0);
    let seen = match wait_for_node0(job, first) {
        Ok(Some(seen)) => seen,
        // Another node requeued it, or the job is ending anyway.
        Ok(None) => return,
        Err(e) => {
            log::error!(
                "a task exited with {code} (--tf-requeue-on={code}) but job {job} was not requeued: {e}"
            );
            return;
        }
    };
    let max = settings.requeue_max;
    if seen.restarts >= max {
        let line = format!(
            "a task exited with {code} (--tf-requeue-on={code}) but job {job} was not requeued: Slurm restarted it {} times already, the most --tf-requeue-max allows ({max})",
            seen.restarts
        );
        // One line in the step's stderr, node 0's (every rank usually
        // exits with the code); the other nodes' in slurmd's log only.
        match first {
            true => log::error!("{line}"),
            false => log::warn!("{line}"),
        }
        return;
    }
    // SAFETY: integers only; libslurm (linked into slurmstepd) sends the RPC.
    #[cfg(not(slurm_requeue_by_id))]
    let rc = unsafe { sys::slurm_requeue(job, 0) };
    // 26.05 on: the job named by a step id (the whole job: no step).
    #[cfg(slurm_requeue_by_id)]
    let rc = unsafe { sys::slurm_requeue(api::step_id(job, sys::NO_VAL), 0) };
    match api::check(rc, || {
        format!("a task exited with {code} (--tf-requeue-on={code}) but job {job} was not requeued")
    }) {
        Ok(()) => log::warn!(
            "job {job} requeued ({} of at most {max}): a task exited with {code} (--tf-requeue-on)",
            seen.restarts + 1
        ),
        Err(e) => log::error!("{e}"),
    }
}

/// The job as it is when this node may ask: at once on the step's node 0
/// (`first`), else after node 0 had [`GRACE`] to requeue it. None: the job
/// is no longer the running incarnation (requeued, or ending).
fn wait_for_node0(job: u32, first: bool) -> Result<Option<Job>> {
    let until = Instant::now() + if first { Duration::ZERO } else { GRACE };
    loop {
        let seen = load(job)?;
        if !seen.running {
            return Ok(None);
        }
        if Instant::now() >= until {
            return Ok(Some(seen));
        }
        std::thread::sleep(GRACE_POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// slurm.h's values of the states read here.
    #[test]
    fn a_job_is_running_only_with_no_requeue_or_completion_under_way() {
        assert!(is_running(JOB_RUNNING));
        assert!(!is_running(0)); // pending: requeued already
        assert!(!is_running(JOB_RUNNING | JOB_COMPLETING));
        assert!(!is_running(JOB_RUNNING | JOB_REQUEUE));
        assert!(!is_running(JOB_COMPLETING | JOB_REQUEUE));
        assert!(!is_running(5)); // failed
        assert_eq!(sys::job_states_JOB_RUNNING, JOB_RUNNING);
    }
}
