//! `--tf-requeue-on=CODE`: when a task of the step exits with CODE,
//! slurmstepd requeues the job, as `scontrol requeue` would, so that a
//! training that checkpoints and exits with CODE comes back without
//! scontrol in its image (containers usually lack it) and without the
//! cluster-wide `RequeueExit=` only admins set.
//!
//! In `task_exit`: slurmstepd itself, as root, on the host, after the task
//! was reaped. The job is slurmctld's record of the step's job, the step's
//! user's (in a heterogeneous job its leader, super::job_record), never a
//! variable srun, a task or an image could set; the exit code is
//! slurmstepd's own wait status.
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
use super::exclude::Plan;
use super::job_record::{JobRecord, Targets, load};
use crate::core::{Result, Settings};

/// Whether this node already decided (slurmstepd serves one step of one
/// incarnation).
static SENT: AtomicBool = AtomicBool::new(false);

/// How long a node other than the step's node 0 leaves node 0 to requeue
/// the job before it asks itself; it looks at the job every
/// [`GRACE_POLL`] meanwhile and stops as soon as the job is requeued.
const GRACE: Duration = Duration::from_secs(5);
const GRACE_POLL: Duration = Duration::from_secs(1);

/// Whether this node requeued the job (the kill of a refused step is then
/// not sent: the requeue ended every step of the job).
static REQUEUED: AtomicBool = AtomicBool::new(false);

/// Why the job is requeued.
#[derive(Clone, Copy)]
enum Cause {
    /// A task of this node exited with the step's code.
    Code(u8),
    /// The preflight refused the step on this node.
    Refused(u8),
}

impl Cause {
    fn words(self) -> String {
        match self {
            Cause::Code(code) => format!("a task exited with {code} (--tf-requeue-on={code})"),
            Cause::Refused(code) => {
                format!("the preflight refused this node (--tf-requeue-on={code})")
            }
        }
    }
}

/// Whether this node requeued the job.
pub fn requeued() -> bool {
    REQUEUED.load(Ordering::SeqCst)
}

/// After each task of the node exits: requeues the job when it exited with
/// the step's CODE, below the cap, unless another node already did.
/// `node`: slurmstepd's own name of this node, the one excluded.
pub fn task_exit(spank: &Spank, settings: &Settings, node: Option<&str>) {
    let Some(code) = settings.requeue_on else {
        return;
    };
    let Ok(status) = spank.task_exit_status() else {
        return;
    };
    if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == i32::from(code)) {
        return;
    }
    requeue(spank, settings, node, Cause::Code(code));
}

/// After a task the preflight refused exits, in a step with
/// `--tf-requeue-on`: requeues the job, without this node, below the cap.
/// Staggered as a task's code is: node 0 at once, any other refusing node
/// after giving node 0 [`GRACE`], so that several nodes refusing one step
/// make one requeue RPC, not one each.
pub fn refused(spank: &Spank, settings: &Settings, node: Option<&str>) {
    if let Some(code) = settings.requeue_on {
        requeue(spank, settings, node, Cause::Refused(code));
    }
}

/// Node 0 of the step (`first`) asks at once, any other node after
/// giving node 0 [`GRACE`], whatever the cause.
fn requeue(spank: &Spank, settings: &Settings, node: Option<&str>, cause: Cause) {
    let first = spank.node_id().map_or(true, |n| n == 0);
    if SENT.swap(true, Ordering::SeqCst) {
        return;
    }
    let why = cause.words();
    // The job as slurmctld records it for the step's user (in a
    // heterogeneous job its leader), never a variable.
    let (targets, own) = match Targets::with_record(spank) {
        // The step's own job's record is the first look at a plain job.
        Ok((targets, record)) => (targets, targets.is_own().then_some(record)),
        Err(e) => {
            log::error!("{why} but the job was not requeued: {e}");
            return;
        }
    };
    let job = targets.whole();
    let seen = match wait_for_node0(job, first, own) {
        Ok(Some(seen)) => seen,
        // Another node requeued it, or the job is ending anyway.
        Ok(None) => return,
        Err(e) => {
            log::error!("{why} but job {job} was not requeued: {e}");
            return;
        }
    };
    let max = settings.requeue_max;
    if seen.restarts >= max {
        let line = format!(
            "{why} but job {job} was not requeued: Slurm restarted it {} times already, the most --tf-requeue-max allows ({max})",
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
    // Read before the requeue, sent after it (slurmctld changes the
    // excluded nodes of a pending job only).
    let plan = node.and_then(|node| Plan::read(targets, node, settings));
    // SAFETY: integers only; libslurm (linked into slurmstepd) sends the RPC.
    #[cfg(not(slurm_requeue_by_id))]
    let rc = unsafe { sys::slurm_requeue(job, 0) };
    // 26.05 on: the job named by a step id (the whole job: no step).
    #[cfg(slurm_requeue_by_id)]
    let rc = unsafe { sys::slurm_requeue(api::step_id(job, sys::NO_VAL), 0) };
    match api::check(rc, || format!("{why} but job {job} was not requeued")) {
        Ok(()) => {
            REQUEUED.store(true, Ordering::SeqCst);
            let excluded = plan.map(|p| p.send(&why)).unwrap_or_default();
            log::warn!(
                "job {job} requeued ({} of at most {max}): {why}{excluded}",
                seen.restarts + 1
            );
        }
        Err(e) => log::error!("{e}"),
    }
}

/// The job as it is when this node may ask: at once on the step's node 0
/// (`first`), else after node 0 had [`GRACE`] to requeue it. None: the job
/// is no longer the running incarnation (requeued, or ending). `seen`: the
/// job's record already read, the first look.
fn wait_for_node0(job: u32, first: bool, mut seen: Option<JobRecord>) -> Result<Option<JobRecord>> {
    let until = Instant::now() + if first { Duration::ZERO } else { GRACE };
    loop {
        let seen = match seen.take() {
            Some(seen) => seen,
            None => load(job)?,
        };
        if !seen.running {
            return Ok(None);
        }
        if Instant::now() >= until {
            return Ok(Some(seen));
        }
        std::thread::sleep(GRACE_POLL);
    }
}
