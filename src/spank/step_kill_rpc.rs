//! Ends a step a task refused, on every node: the refusing task asks
//! slurmctld to kill its step, `slurm_kill_job_step(job, step, SIGKILL)`,
//! the RPC srun itself sends when it aborts a step (step_launch.c) and, with
//! SIG_TERM_KILL, for `--kill-on-bad-exit`. A node sees facts of its own (its
//! GPUs, Slurm's binding of its tasks), so a refusal made on one node may not
//! be made on another; without this the other nodes' tasks would run on,
//! waiting for ranks that never come. The task runs as the job's owner, whom
//! slurmctld lets signal the step; slurmctld has each node's slurmstepd kill
//! the step's tasks and tells srun the step is over. Killed tasks are not a
//! node fault: no node leaves service.
//!
//! Measured on the testbed (proctrack/linuxproc): a kill sent at once, as
//! the step starts, missed tasks still between fork and exec on other nodes
//! (slurmstepd's child drops a pending signal as it unblocks them, linuxproc
//! passes over processes named slurmstepd), and made a srun still launching
//! wait KillWait + 2 s; SIG_TERM_KILL let `sh -c 'sleep 60; echo finished'`
//! lose its sleep but run on to `finished`. So the task waits 1 s for the
//! step to start everywhere, then sends SIGKILL.
//!
//! Only a refusing task pays: 1 s and one RPC, bounded by Slurm's MessageTimeout
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

/// How long the refusing task lets the step's other tasks start first.
const SETTLE: Duration = Duration::from_secs(1);

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
    // The other nodes' tasks must have started their program: a task still
    // between fork and exec misses the signal (slurmstepd's child drops a
    // pending signal as it unblocks them, proctrack/linuxproc passes over
    // processes named slurmstepd), and a shell just started was seen to
    // lose its child but run on. srun knows the race: it kills an aborted
    // step a second time.
    // Twice, as srun does: proctrack/linuxproc walks /proc once per signal
    // and was seen to pass over a task's shell while killing its child.
    // This task, not exec'd, is named slurmstepd: linuxproc passes over it
    // too, so it lives to send the second.
    for _ in 0..2 {
        std::thread::sleep(SETTLE);
        for job in leader.into_iter().chain([job]) {
            if let Err(why) = kill(job, step, libc::SIGKILL as u16) {
                // slurmd's log only: the user already has the refusal's line.
                log::warn!("could not end step {job}.{step} on its other nodes: {why}");
            }
        }
    }
}

/// `slurm_kill_job_step(job, step, signal)` under the watchdog.
fn kill(job: u32, step: u32, signal: u16) -> Result<(), String> {
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
    let rc = rpc(job, step, signal);
    let why = (rc != 0).then(slurm_errno_text);
    // SAFETY: cancels the alarm set above.
    unsafe { libc::alarm(0) };
    match why {
        None => Ok(()),
        Some(why) => Err(why),
    }
}

/// Slurm 22.05 to 23.02.
#[cfg(not(slurm_kill_step_flags))]
fn rpc(job: u32, step: u32, signal: u16) -> i32 {
    // SAFETY: integers only; libslurm (linked into slurmstepd) sends the RPC.
    unsafe { sys::slurm_kill_job_step(job, step, signal) }
}

/// Slurm 23.11 to 25.05: no flags (not the whole job, not OOM).
#[cfg(all(slurm_kill_step_flags, not(slurm_kill_step_by_id)))]
fn rpc(job: u32, step: u32, signal: u16) -> i32 {
    // SAFETY: integers only; libslurm (linked into slurmstepd) sends the RPC.
    unsafe { sys::slurm_kill_job_step(job, step, signal, 0) }
}

/// Slurm 25.11 on: the step by its id (any het component: NO_VAL).
#[cfg(slurm_kill_step_by_id)]
fn rpc(job: u32, step: u32, signal: u16) -> i32 {
    // SAFETY: plain integers; `sluid` stays 0 (unknown).
    let mut id: sys::slurm_step_id_t = unsafe { std::mem::zeroed() };
    id.job_id = job;
    id.step_id = step;
    id.step_het_comp = sys::NO_VAL;
    // SAFETY: `id` is a valid step id Slurm only reads.
    unsafe { sys::slurm_kill_job_step(&mut id, signal, 0) }
}
