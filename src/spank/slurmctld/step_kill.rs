//! Ends a step a task refused, on every node: slurmctld is asked to kill the
//! step, `slurm_kill_job_step(job, step, SIGKILL)`, the RPC srun itself sends
//! when it aborts a step (step_launch.c) and, with SIG_TERM_KILL, for
//! `--kill-on-bad-exit`. A node sees facts of its own (its GPUs, Slurm's
//! binding of its tasks), so a refusal made on one node may not be made on
//! another; without this the other nodes' tasks would run on, waiting for
//! ranks that never come. slurmctld has each node's slurmstepd kill the
//! step's tasks and tells srun the step is over. Killed tasks are not a node
//! fault: no node leaves service.
//!
//! Who sends it: slurmstepd, once per node. A refusing task only raises a
//! flag in a page it shares with slurmstepd ([`HostKill`], mapped in
//! `user_init` before any task is forked), and slurmstepd itself, which
//! never enters a container, sends the kill as root from the SPANK
//! `task_exit` hook of the task's exit ([`end_from_host`]; slurmctld allows
//! root and SlurmUser as it allows the owner). So a step of thousands of
//! refusing tasks costs slurmctld three RPCs per node (the job's record, two
//! kills), not three per task; a task behind a container plugin (pyxis),
//! where munged's socket is not mounted, needs no signature; and what the
//! kill names is slurmstepd's own ids and slurmctld's record of the step's
//! job (its heterogeneous leader, the step's user's: super::job_record),
//! never a variable srun sent or an image's environment reached. Only where the page could not be mapped does a task
//! on the host send the kill itself ([`end_refused_step`]).
//!
//! Measured on the testbed (proctrack/linuxproc): a kill sent at once, as
//! the step starts, missed tasks still between fork and exec on other nodes
//! (slurmstepd's child drops a pending signal as it unblocks them, linuxproc
//! passes over processes named slurmstepd), and made a srun still launching
//! wait KillWait + 2 s; SIG_TERM_KILL let `sh -c 'sleep 60; echo finished'`
//! lose its sleep but run on to `finished`. So the sender waits 1 s for the
//! step to start everywhere, then sends SIGKILL, twice.
//!
//! Only a refused step pays: 1 s and one RPC, then again, each RPC bounded by
//! Slurm's MessageTimeout (connecting is retried once a second for up to
//! MessageTimeout seconds, the answer is awaited up to MessageTimeout); in
//! the task also by [`WATCHDOG`]. slurmstepd takes no alarm (it is
//! slurmstepd's own process): there the second RPC is skipped when the
//! first failed or took longer than [`WATCHDOG`].

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::super::bindings as sys;
use super::super::handle::Spank;
use super::api;
use super::job_record::Targets;
use crate::core::Result;

/// Longest a refusing task waits on the RPC: the task is a child forked from
/// a multi-threaded slurmstepd, so a lock another thread held at the fork
/// must not hold it for ever. It then dies of SIGALRM instead of exit 1. In
/// slurmstepd: a first RPC slower than this is not sent again.
const WATCHDOG: Duration = Duration::from_secs(10);

/// How long the refusing task lets the step's other tasks start first.
const SETTLE: Duration = Duration::from_secs(1);

/// In the refusing task, on the host (only where the page could not be
/// mapped): ends the step on every node. The jobs named are slurmctld's
/// record of the step's job, the step's user's ([`Targets`]). The error
/// line was printed before: the kill also ends this very task.
pub fn end_refused_step(spank: &Spank) {
    let (step, targets) = match spank
        .step_id()
        .and_then(|step| Ok((step, watched(|| Targets::of_step(spank))?)))
    {
        Ok(found) => found,
        Err(e) => {
            log::warn!("cannot end the refused step on its other nodes: {e}");
            return;
        }
    };
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
        for job in targets.jobs() {
            if let Err(e) = watched(|| rpc(job, step, libc::SIGKILL as u16)) {
                // slurmd's log only: the user already has the refusal's line.
                log::warn!("{e}");
            }
        }
    }
}

/// In slurmstepd (`task_exit`, as root, on the host): ends the step a task
/// of this node refused from inside a container, as [`end_refused_step`]
/// does, without an alarm: each RPC is bounded by Slurm's own timeouts, and
/// the second round is skipped when the first failed or was slow. What is
/// named is slurmstepd's own ids and slurmctld's record of the job (one
/// RPC more, only for a refused step). Logged to slurmd's log only.
pub fn end_from_host(spank: &Spank) {
    match spank
        .step_id()
        .and_then(|step| Ok((step, Targets::of_step(spank)?)))
    {
        Ok((step, targets)) => end_twice(targets, step, "slurmstepd"),
        Err(e) => log::warn!("cannot end the refused step on its other nodes: {e}"),
    }
}

/// In srun, on a thread of its own, after it refused a heterogeneous step
/// inside an existing allocation: srun's word reaches one component only,
/// so srun ends the step once it is launched, on every component (the
/// leader's step, then this component's, as slurmctld records them for the
/// user), as slurmstepd does after a task's refusal. srun ends with the
/// step; failures are said at `-v`.
pub fn end_from_srun(targets: Targets, step: u32) {
    end_twice(targets, step, "srun");
}

fn end_twice(targets: Targets, step: u32, from: &str) {
    for round in 0..2 {
        std::thread::sleep(SETTLE);
        let started = Instant::now();
        let mut failed = false;
        for job in targets.jobs() {
            if let Err(e) = rpc(job, step, libc::SIGKILL as u16) {
                failed = true;
                // srun: the step may have ended already (its tasks fail
                // fast), which the user need not read; slurmd's log keeps
                // slurmstepd's.
                match from {
                    "srun" => log::debug!("{e} from {from}"),
                    _ => log::warn!("{e} from {from}"),
                }
            }
        }
        if round == 0 && (failed || started.elapsed() > WATCHDOG) {
            return;
        }
    }
}

/// The page a refusing task shares with slurmstepd: a task behind a
/// container asks in it for the kill, slurmstepd's `task_exit` sends it once
/// per node. Mapped `MAP_SHARED | MAP_ANONYMOUS` in `user_init` (slurmstepd's
/// memory: its CLONE_VM child, or itself), before any task is forked, so
/// every task shares it; a task loses it when it execs its program. Never
/// unmapped: slurmstepd serves one step and exits.
pub struct HostKill(NonNull<Shared>);

#[repr(C)]
struct Shared {
    /// [`IDLE`], [`ASKED`] or [`SENT`]. Only a flag: what the kill names
    /// (this step's ids, slurmctld's record of its job) slurmstepd reads
    /// itself, on the host, never from a task.
    state: AtomicU32,
}

const IDLE: u32 = 0;
const ASKED: u32 = 1;
const SENT: u32 = 2;

// SAFETY: the page lives as long as the process and is only reached through
// atomics.
unsafe impl Send for HostKill {}
// SAFETY: as above.
unsafe impl Sync for HostKill {}

impl HostKill {
    /// The shared page; None when it cannot be mapped (the tasks then send
    /// the kill themselves, as without a container).
    pub fn map() -> Option<HostKill> {
        // SAFETY: a fresh anonymous mapping of one small zeroed region; no
        // existing memory is touched.
        let page = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                std::mem::size_of::<Shared>(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if page == libc::MAP_FAILED {
            log::warn!(
                "cannot map the page slurmstepd shares with the tasks: {}",
                std::io::Error::last_os_error()
            );
            return None;
        }
        // Zeroed by the kernel: IDLE, no leader.
        NonNull::new(page.cast::<Shared>()).map(HostKill)
    }

    fn shared(&self) -> &Shared {
        // SAFETY: mapped for the process's life, aligned (a page), zeroed
        // (valid atomics), only used through atomics.
        unsafe { self.0.as_ref() }
    }

    /// In the refusing task: asks slurmstepd to end the step (once).
    pub fn ask(&self) {
        let _ =
            self.shared()
                .state
                .compare_exchange(IDLE, ASKED, Ordering::Release, Ordering::Relaxed);
    }

    /// In slurmstepd: whether a task of this node refused (asked, whether
    /// or not the kill was sent since).
    pub fn refused_here(&self) -> bool {
        self.shared().state.load(Ordering::Acquire) != IDLE
    }

    /// In slurmstepd: whether a task asked and this node has not sent the
    /// kill yet (then it is this caller's to send).
    pub fn take(&self) -> bool {
        self.shared()
            .state
            .compare_exchange(ASKED, SENT, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

/// `f` (requests to slurmctld) under the watchdog, in a refusing task.
fn watched<T>(f: impl FnOnce() -> T) -> T {
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
    let done = f();
    // SAFETY: cancels the alarm set above.
    unsafe { libc::alarm(0) };
    done
}

/// Asks slurmctld to signal step `job`.`step` on every node.
fn rpc(job: u32, step: u32, signal: u16) -> Result<()> {
    // SAFETY: integers only (25.11 on: a valid step id Slurm only reads);
    // libslurm (linked into slurmstepd) sends the RPC.
    #[cfg(not(slurm_kill_step_flags))]
    let rc = unsafe { sys::slurm_kill_job_step(job, step, signal) };
    // 23.11 to 25.05: no flags (not the whole job, not OOM).
    #[cfg(all(slurm_kill_step_flags, not(slurm_kill_step_by_id)))]
    let rc = unsafe { sys::slurm_kill_job_step(job, step, signal, 0) };
    // 25.11 on: the step by its id (any het component).
    #[cfg(slurm_kill_step_by_id)]
    let rc = unsafe { sys::slurm_kill_job_step(&mut api::step_id(job, step), signal, 0) };
    api::check(rc, || {
        format!("could not end step {job}.{step} on its other nodes")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One kill per node, whichever task asks first; a forked child writes
    /// where its parent reads.
    #[test]
    fn a_task_asks_and_the_host_sends_once() {
        let host = HostKill::map().expect("mmap");
        assert!(!host.take(), "nothing asked yet");
        // SAFETY: the child only touches the shared page, then _exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            host.ask();
            host.ask();
            // SAFETY: leaves the forked test process at once.
            unsafe { libc::_exit(0) };
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(host.take());
        assert!(!host.take(), "sent once");
        host.ask();
        assert!(!host.take(), "a later ask sends nothing more");
    }
}
