//! Ends a step a task refused, on every node: the refusing task asks
//! slurmctld to kill its step with `slurm_kill_job_step(job, step,
//! SIG_TERM_KILL)`, exactly what srun itself sends for `--kill-on-bad-exit`
//! (launch_slurm.c / launch.c `_step_signal`, 22.05 to 26.05). A node sees
//! facts of its own (its GPUs, Slurm's binding of its tasks), so a refusal
//! made on one node may not be made on another; without this the other
//! nodes' tasks would run on, waiting for ranks that never come. The task
//! runs as the job's owner, whom slurmctld lets signal the step; each node's
//! slurmstepd sends its tasks SIGCONT and SIGTERM, then SIGKILL after
//! KillWait; srun sees the tasks end as after any failed task. (SIGKILL
//! instead makes slurmctld tell srun the step is complete, and a srun still
//! launching then waits KillWait + 2 s and leaves the step listed.) Killed
//! tasks are not a node fault: no node leaves service.
//!
//! Only a refusing task pays: one RPC, bounded by Slurm's MessageTimeout
//! (connecting is retried once a second for up to MessageTimeout seconds,
//! the answer is awaited up to MessageTimeout) and by [`WATCHDOG`].

use std::time::Duration;

use super::bindings as sys;
use super::handle::{Spank, slurm_errno_text};
use crate::core::task_map::{self, Verdict};

/// Longest a refusing task waits on the RPC: the task is a child forked from
/// a multi-threaded slurmstepd, so a lock another thread held at the fork
/// must not hold it for ever. It then dies of SIGALRM instead of exit 1.
const WATCHDOG: Duration = Duration::from_secs(10);

/// After task_init refused the task: ends the step on every node, unless
/// srun refused it already (then every task of it fails alike). The error
/// line was printed before: the kill also ends this very task.
pub fn end_refused_step(spank: &Spank) {
    let ids = spank.job_id().and_then(|j| Ok((j, spank.step_id()?)));
    let (job, step) = match ids {
        Ok(ids) => ids,
        Err(e) => {
            log::warn!("cannot end the refused step on its other nodes: {e}");
            return;
        }
    };
    let refused_by_srun = Verdict::Refused.encode(job, step);
    if matches!(spank.getenv(task_map::VAR), Ok(Some(v)) if v == refused_by_srun) {
        return;
    }
    // In a heterogeneous job S_JOB_ID is this component's job and
    // SLURM_JOB_ID (set by slurmstepd) the leader's: both are ended.
    let leader = spank
        .getenv("SLURM_JOB_ID")
        .ok()
        .flatten()
        .and_then(|id| id.parse::<u32>().ok())
        .filter(|&id| id != job);
    for job in leader.into_iter().chain([job]) {
        if let Err(why) = kill(job, step) {
            // slurmd's log only: the user already has the refusal's line.
            log::warn!("could not end step {job}.{step} on its other nodes: {why}");
        }
    }
}

/// `slurm_kill_job_step(job, step, SIG_TERM_KILL)` under the watchdog.
fn kill(job: u32, step: u32) -> Result<(), String> {
    // SAFETY: plain libc calls on this process's own signal state; the task
    // fails right after, so nothing else relies on SIGALRM.
    unsafe {
        libc::signal(libc::SIGALRM, libc::SIG_DFL);
        let mut alarm = std::mem::zeroed::<libc::sigset_t>();
        libc::sigemptyset(&mut alarm);
        libc::sigaddset(&mut alarm, libc::SIGALRM);
        libc::sigprocmask(libc::SIG_UNBLOCK, &alarm, std::ptr::null_mut());
        libc::alarm(WATCHDOG.as_secs() as libc::c_uint);
    }
    let rc = rpc(job, step);
    let why = (rc != 0).then(slurm_errno_text);
    // SAFETY: cancels the alarm set above.
    unsafe { libc::alarm(0) };
    match why {
        None => Ok(()),
        Some(why) => Err(why),
    }
}

/// SIGCONT, SIGTERM, SIGKILL after KillWait (slurm_protocol_defs.h: 991 in
/// 22.05, 24.11 and 26.05; not in slurm.h).
const SIG_TERM_KILL: u16 = 991;

/// Slurm 22.05 to 23.02.
#[cfg(not(slurm_kill_step_flags))]
fn rpc(job: u32, step: u32) -> i32 {
    // SAFETY: integers only; libslurm (linked into slurmstepd) sends the RPC.
    unsafe { sys::slurm_kill_job_step(job, step, SIG_TERM_KILL) }
}

/// Slurm 23.11 to 25.05: no flags (not the whole job, not OOM).
#[cfg(all(slurm_kill_step_flags, not(slurm_kill_step_by_id)))]
fn rpc(job: u32, step: u32) -> i32 {
    // SAFETY: integers only; libslurm (linked into slurmstepd) sends the RPC.
    unsafe { sys::slurm_kill_job_step(job, step, SIG_TERM_KILL, 0) }
}

/// Slurm 25.11 on: the step by its id (any het component: NO_VAL).
#[cfg(slurm_kill_step_by_id)]
fn rpc(job: u32, step: u32) -> i32 {
    // SAFETY: plain integers; `sluid` stays 0 (unknown).
    let mut id: sys::slurm_step_id_t = unsafe { std::mem::zeroed() };
    id.job_id = job;
    id.step_id = step;
    id.step_het_comp = sys::NO_VAL;
    // SAFETY: `id` is a valid step id Slurm only reads.
    unsafe { sys::slurm_kill_job_step(&mut id, SIG_TERM_KILL, 0) }
}
