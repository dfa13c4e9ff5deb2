//! Ctrl-C in srun, as the plugin can see it: a sentinel child in srun's
//! process group. srun keeps SIGINT for its own signal thread (blocked in
//! every other thread, taken by `sigwait`; from 26.05 a handler that only
//! records it), so no plugin thread sees it, and taking it would steal
//! srun's own. A terminal's Ctrl-C (Ctrl-\, a hang-up) goes to every process
//! of the foreground process group: the sentinel, started with no signal
//! blocked and these signals at their default, dies of it, and `waitpid`
//! tells. srun still gets its own copy. A signal sent to srun's pid alone is
//! not seen.

use std::cell::Cell;
use std::ffi::{CStr, c_char, c_int};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The signals a terminal sends the foreground group that end srun.
const SIGNALS: [c_int; 4] = [libc::SIGINT, libc::SIGQUIT, libc::SIGHUP, libc::SIGTERM];

/// What the sentinel is known to be.
#[derive(Clone, Copy, PartialEq)]
enum State {
    /// Running, ours to end.
    Running,
    /// Ended of one of [`SIGNALS`], and reaped.
    Interrupted,
    /// Gone otherwise (reaped, or reaped by the system: SIGCHLD ignored):
    /// its pid is no longer ours to signal.
    Gone,
}

/// A `cat` reading a pipe only the plugin writes to: it ends at EOF, so it
/// cannot outlive srun, and it is ended by its pid when dropped.
pub struct Sentinel {
    pid: libc::pid_t,
    state: Cell<State>,
    /// The pipe's write end, O_CLOEXEC: closing it ends the sentinel.
    _pipe: OwnedFd,
}

impl Sentinel {
    /// Starts the sentinel in srun's process group. None (logged at debug
    /// level) when it cannot start: the lookups' deadline alone bounds them.
    pub fn start() -> Option<Sentinel> {
        match spawn() {
            Ok(s) => Some(s),
            Err(e) => {
                log::debug!("no Ctrl-C sentinel for the host-template lookups: {e}");
                None
            }
        }
    }

    /// The sentinel died of a signal sent to srun's process group (Ctrl-C).
    pub fn interrupted(&self) -> bool {
        if self.state.get() == State::Running {
            let mut status = 0;
            // SAFETY: waits on our own child only, without blocking.
            let rc = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
            if rc == self.pid {
                let by_signal =
                    libc::WIFSIGNALED(status) && SIGNALS.contains(&libc::WTERMSIG(status));
                self.state.set(match by_signal {
                    true => State::Interrupted,
                    false => State::Gone,
                });
                if !by_signal {
                    log::debug!("the Ctrl-C sentinel ended by itself (status {status})");
                }
            } else if rc != 0 {
                // ECHILD: srun ignores SIGCHLD, so the system reaped it and
                // how it ended is unknown: not an interrupt.
                self.state.set(State::Gone);
            }
        }
        self.state.get() == State::Interrupted
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        if self.interrupted() || self.state.get() != State::Running {
            return;
        }
        // SAFETY: our own child, not yet reaped, so the pid is still its.
        unsafe { libc::kill(self.pid, libc::SIGKILL) };
        let mut status = 0;
        // SAFETY: reaps our own child; EINTR (a handler of srun's) retries.
        while unsafe { libc::waitpid(self.pid, &mut status, 0) } == -1
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
        {}
    }
}

/// `posix_spawn` of `cat` with an empty signal mask and [`SIGNALS`] at
/// their default (std's `Command` keeps srun's mask, where SIGINT is
/// blocked), stdin the pipe, stdout and stderr /dev/null.
fn spawn() -> std::io::Result<Sentinel> {
    let mut fds = [0; 2];
    // SAFETY: two fds written into `fds`.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fresh fds from pipe2, owned here only.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let mut last = std::io::Error::from(std::io::ErrorKind::NotFound);
    for path in [c"/bin/cat", c"/usr/bin/cat"] {
        match spawn_at(path, read.as_raw_fd()) {
            Ok(pid) => {
                return Ok(Sentinel {
                    pid,
                    state: Cell::new(State::Running),
                    _pipe: write,
                });
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

fn spawn_at(path: &CStr, stdin: c_int) -> std::io::Result<libc::pid_t> {
    let check = |rc: c_int| match rc {
        0 => Ok(()),
        e => Err(std::io::Error::from_raw_os_error(e)),
    };
    // SAFETY: the attributes and file actions are initialised before use
    // and destroyed after; every pointer outlives the posix_spawn call.
    unsafe {
        let mut attr: libc::posix_spawnattr_t = std::mem::zeroed();
        let mut actions: libc::posix_spawn_file_actions_t = std::mem::zeroed();
        check(libc::posix_spawnattr_init(&mut attr))?;
        if let Err(e) = check(libc::posix_spawn_file_actions_init(&mut actions)) {
            libc::posix_spawnattr_destroy(&mut attr);
            return Err(e);
        }
        let result = (|| {
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            let mut default: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut default);
            for s in SIGNALS {
                libc::sigaddset(&mut default, s);
            }
            check(libc::posix_spawnattr_setsigmask(&mut attr, &empty))?;
            check(libc::posix_spawnattr_setsigdefault(&mut attr, &default))?;
            let flags = libc::POSIX_SPAWN_SETSIGMASK | libc::POSIX_SPAWN_SETSIGDEF;
            check(libc::posix_spawnattr_setflags(&mut attr, flags as _))?;
            check(libc::posix_spawn_file_actions_adddup2(
                &mut actions,
                stdin,
                0,
            ))?;
            for fd in [1, 2] {
                check(libc::posix_spawn_file_actions_addopen(
                    &mut actions,
                    fd,
                    c"/dev/null".as_ptr(),
                    libc::O_WRONLY,
                    0,
                ))?;
            }
            let argv: [*mut c_char; 2] = [path.as_ptr() as *mut c_char, std::ptr::null_mut()];
            let envp: [*mut c_char; 1] = [std::ptr::null_mut()];
            let mut pid = 0;
            check(libc::posix_spawn(
                &mut pid,
                path.as_ptr(),
                &actions,
                &attr,
                argv.as_ptr(),
                envp.as_ptr(),
            ))?;
            Ok(pid)
        })();
        libc::posix_spawn_file_actions_destroy(&mut actions);
        libc::posix_spawnattr_destroy(&mut attr);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SIGINT to the sentinel (as the group's Ctrl-C) shows as an interrupt,
    /// even while this thread blocks SIGINT (as srun's threads do).
    #[test]
    fn a_sigint_to_the_sentinel_is_an_interrupt() {
        // SAFETY: blocks SIGINT in this test thread only.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGINT);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        }
        let s = Sentinel::start().expect("sentinel");
        assert!(!s.interrupted());
        // SAFETY: our own child.
        unsafe { libc::kill(s.pid, libc::SIGINT) };
        let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !s.interrupted() && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(s.interrupted());
    }

    /// Dropped without an interrupt, the sentinel is ended and reaped.
    #[test]
    fn a_dropped_sentinel_is_reaped() {
        let s = Sentinel::start().expect("sentinel");
        let pid = s.pid;
        assert!(!s.interrupted());
        drop(s);
        // SAFETY: probing a pid that must no longer be our child.
        let rc = unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) };
        assert_eq!(rc, -1, "still a child of ours");
    }
}
