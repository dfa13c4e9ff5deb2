//! Ctrl-C in srun, as the plugin can see it: two sentinel children in
//! srun's process group. srun keeps SIGINT for its own signal thread
//! (blocked in every other thread, taken by `sigwait`; from 26.05 a handler
//! that only records it), so no plugin thread sees it, and taking it would
//! steal srun's own. A terminal's Ctrl-C (Ctrl-\, a hang-up) goes to every
//! process of the foreground process group: each sentinel, started with no
//! signal blocked and these signals at their default, dies of it, and
//! `waitpid` tells. srun still gets its own copy.
//!
//! Why two: a signal sent to a pid reaches that process alone, one sent to
//! the process group reaches every process in it. Only both sentinels dead
//! of the same one of these signals count as srun's Ctrl-C; a signal sent
//! to one sentinel (a `kill` of its pid) does not, nor does one sent to
//! srun's pid alone, which no sentinel sees.
//!
//! The sentinels hold no descriptor of srun's but their own pipe: srun's
//! sockets and its shepherd's pipe are not close-on-exec, and a process
//! holding them keeps them open. Every descriptor from 3 up is closed in the
//! child: by glibc's `posix_spawn_file_actions_addclosefrom_np` (2.34 and
//! later), looked up at run time so that a build on an older glibc still
//! loads; without it, each descriptor `/proc/self/fd` lists without
//! close-on-exec (one another thread of srun opens in between is missed).

use std::cell::Cell;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The signals a terminal (or `kill -- -PGID`, `timeout`) sends the
/// foreground group that end srun.
const SIGNALS: [c_int; 4] = [libc::SIGINT, libc::SIGQUIT, libc::SIGHUP, libc::SIGTERM];

/// What a sentinel process is known to be.
#[derive(Clone, Copy, PartialEq, Debug)]
enum State {
    /// Running, ours to end.
    Running,
    /// Ended of this one of [`SIGNALS`], and reaped.
    Killed(c_int),
    /// Gone otherwise (reaped, or reaped by the system: SIGCHLD ignored):
    /// its pid is no longer ours to signal.
    Gone,
}

/// One `cat` of the sentinel.
struct Cat {
    pid: libc::pid_t,
    state: Cell<State>,
}

impl Cat {
    /// What is known of it now, without blocking.
    fn poll(&self) -> State {
        if self.state.get() == State::Running {
            let mut status = 0;
            // SAFETY: waits on our own child only, without blocking.
            let rc = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
            if rc == self.pid {
                let signal = libc::WIFSIGNALED(status).then(|| libc::WTERMSIG(status));
                self.state.set(match signal {
                    Some(s) if SIGNALS.contains(&s) => State::Killed(s),
                    _ => {
                        log::debug!("a Ctrl-C sentinel ended otherwise (status {status})");
                        State::Gone
                    }
                });
            } else if rc != 0 {
                // ECHILD: srun ignores SIGCHLD, so the system reaped it and
                // how it ended is unknown: not an interrupt.
                self.state.set(State::Gone);
            }
        }
        self.state.get()
    }

    /// Ends and reaps it, if it still runs.
    fn end(&self) {
        if self.poll() != State::Running {
            return;
        }
        // SAFETY: our own child, not yet reaped, so the pid is still its.
        unsafe { libc::kill(self.pid, libc::SIGKILL) };
        let mut status = 0;
        // SAFETY: reaps our own child; EINTR (a handler of srun's) retries.
        while unsafe { libc::waitpid(self.pid, &mut status, 0) } == -1
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
        {}
        self.state.set(State::Gone);
    }
}

/// Two `cat`s reading a pipe only the plugin writes to: they end at EOF,
/// so they cannot outlive srun, and are ended by their pids when dropped.
pub struct Sentinel {
    /// Both, once started (one started alone is ended on the way out).
    cats: Vec<Cat>,
    /// The pipe's write end, O_CLOEXEC: closing it ends the sentinel.
    _pipe: OwnedFd,
}

impl Sentinel {
    /// Starts the sentinel in srun's process group. None (logged at debug
    /// level) when it cannot start: the lookups' deadline alone bounds them.
    pub fn start() -> Option<Sentinel> {
        match spawn(false, add_close_from()) {
            Ok(s) => Some(s),
            Err(e) => {
                log::debug!("no Ctrl-C sentinel for the host-template lookups: {e}");
                None
            }
        }
    }

    /// Both sentinels died of the same signal: one sent to srun's process
    /// group (Ctrl-C).
    pub fn interrupted(&self) -> bool {
        // Both polled: each reaped as soon as it is gone.
        match (self.cats[0].poll(), self.cats[1].poll()) {
            (State::Killed(a), State::Killed(b)) => a == b,
            _ => false,
        }
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        self.cats.iter().for_each(Cat::end);
    }
}

/// glibc's `posix_spawn_file_actions_addclosefrom_np`.
type AddCloseFrom = unsafe extern "C" fn(*mut libc::posix_spawn_file_actions_t, c_int) -> c_int;

/// [`AddCloseFrom`], where this glibc has it (2.34 and later).
fn add_close_from() -> Option<AddCloseFrom> {
    // SAFETY: a lookup by name in the process's global scope.
    let f = unsafe {
        libc::dlsym(
            libc::RTLD_DEFAULT,
            c"posix_spawn_file_actions_addclosefrom_np".as_ptr(),
        )
    };
    // SAFETY: glibc's function of that name has that signature.
    (!f.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, AddCloseFrom>(f) })
}

/// The pipe and its two readers, in srun's process group or, for the tests,
/// in a new one.
fn spawn(new_group: bool, close_from: Option<AddCloseFrom>) -> std::io::Result<Sentinel> {
    let mut fds = [0; 2];
    // SAFETY: two fds written into `fds`.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fresh fds from pipe2, owned here only.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let mut sentinel = Sentinel {
        cats: Vec::with_capacity(2),
        _pipe: write,
    };
    while sentinel.cats.len() < 2 {
        // The first starts the tests' group, the second joins it.
        let pgroup = new_group.then(|| sentinel.cats.first().map_or(0, |c| c.pid));
        let mut last = std::io::Error::from(std::io::ErrorKind::NotFound);
        let mut started = None;
        for path in [c"/bin/cat", c"/usr/bin/cat"] {
            match spawn_at(path, read.as_raw_fd(), pgroup, close_from) {
                Ok(pid) => {
                    started = Some(pid);
                    break;
                }
                Err(e) => last = e,
            }
        }
        let Some(pid) = started else {
            // Dropping the sentinel ends the one started.
            return Err(last);
        };
        sentinel.cats.push(Cat {
            pid,
            state: Cell::new(State::Running),
        });
    }
    Ok(sentinel)
}

/// The descriptors from 3 up that an exec keeps (no close-on-exec), as
/// `/proc/self/fd` lists them now.
fn inherited_fds() -> std::io::Result<Vec<c_int>> {
    let mut fds = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd")? {
        let Some(fd) = entry?.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        // SAFETY: reads the flags of a descriptor number; a closed one fails.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
        if fd > 2 && flags >= 0 && flags & libc::FD_CLOEXEC == 0 {
            fds.push(fd);
        }
    }
    Ok(fds)
}

/// `posix_spawn` of `cat` with an empty signal mask and [`SIGNALS`] at
/// their default (std's `Command` keeps srun's mask, where SIGINT is
/// blocked), stdin the pipe, stdout and stderr /dev/null, every other
/// descriptor closed; in process group `pgroup` when given (0: its own).
fn spawn_at(
    path: &CStr,
    stdin: c_int,
    pgroup: Option<libc::pid_t>,
    close_from: Option<AddCloseFrom>,
) -> std::io::Result<libc::pid_t> {
    let listed = match close_from {
        Some(_) => Vec::new(),
        None => inherited_fds()?,
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
            set_attributes(&mut attr, pgroup)?;
            set_actions(&mut actions, stdin, close_from, &listed)?;
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

/// A posix_spawn return code as a Result.
fn check(rc: c_int) -> std::io::Result<()> {
    match rc {
        0 => Ok(()),
        e => Err(std::io::Error::from_raw_os_error(e)),
    }
}

/// The sentinel's attributes: no signal blocked, the ones srun handles at
/// their default, and its process group (`pgroup`) when given.
///
/// # Safety
/// `attr` is initialised.
unsafe fn set_attributes(
    attr: &mut libc::posix_spawnattr_t,
    pgroup: Option<libc::pid_t>,
) -> std::io::Result<()> {
    // SAFETY: signal sets on the stack, `attr` initialised by the caller.
    unsafe {
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        let mut default: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut default);
        for s in SIGNALS {
            libc::sigaddset(&mut default, s);
        }
        check(libc::posix_spawnattr_setsigmask(attr, &empty))?;
        check(libc::posix_spawnattr_setsigdefault(attr, &default))?;
        let mut flags = libc::POSIX_SPAWN_SETSIGMASK | libc::POSIX_SPAWN_SETSIGDEF;
        if let Some(pgroup) = pgroup {
            check(libc::posix_spawnattr_setpgroup(attr, pgroup))?;
            flags |= libc::POSIX_SPAWN_SETPGROUP;
        }
        check(libc::posix_spawnattr_setflags(attr, flags as _))
    }
}

/// The sentinel's descriptors: `stdin` as its stdin, /dev/null as stdout
/// and stderr, every other closed (by `close_from`, else the `listed` ones).
///
/// # Safety
/// `actions` is initialised.
unsafe fn set_actions(
    actions: &mut libc::posix_spawn_file_actions_t,
    stdin: c_int,
    close_from: Option<AddCloseFrom>,
    listed: &[c_int],
) -> std::io::Result<()> {
    // SAFETY: `actions` initialised by the caller; the path is static.
    unsafe {
        check(libc::posix_spawn_file_actions_adddup2(actions, stdin, 0))?;
        for fd in [1, 2] {
            check(libc::posix_spawn_file_actions_addopen(
                actions,
                fd,
                c"/dev/null".as_ptr(),
                libc::O_WRONLY,
                0,
            ))?;
        }
        // After the dup2: the pipe's read end goes too, kept as stdin.
        match close_from {
            Some(close_from) => check(close_from(actions, 3)),
            None => {
                for &fd in listed {
                    check(libc::posix_spawn_file_actions_addclose(actions, fd))?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::path::Path;
    use std::time::{Duration, Instant};

    /// The tests that open descriptors any child inherits, one at a time:
    /// another's sentinel may inherit them.
    static INHERITABLE: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// The sentinel's processes.
    fn pids(s: &Sentinel) -> [libc::pid_t; 2] {
        [s.cats[0].pid, s.cats[1].pid]
    }

    /// Descriptors without close-on-exec, as srun's sockets and its
    /// shepherd's pipe are: a pipe, a socket pair, a file.
    fn inheritable() -> Vec<OwnedFd> {
        let (mut pipe, mut pair) = ([0; 2], [0; 2]);
        // SAFETY: fds written into the arrays, owned by the OwnedFds below.
        unsafe {
            assert_eq!(libc::pipe(pipe.as_mut_ptr()), 0);
            let rc = libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, pair.as_mut_ptr());
            assert_eq!(rc, 0);
            let file = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY);
            assert!(file >= 0);
            let fds = [pipe[0], pipe[1], pair[0], pair[1], file];
            for fd in fds {
                assert_eq!(libc::fcntl(fd, libc::F_GETFD) & libc::FD_CLOEXEC, 0);
            }
            fds.map(|fd| OwnedFd::from_raw_fd(fd)).into()
        }
    }

    /// A process's descriptors and what each names.
    fn fds_of(pid: libc::pid_t) -> BTreeMap<i32, String> {
        let dir = format!("/proc/{pid}/fd");
        std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{dir}: {e}"))
            .map(|e| {
                let e = e.unwrap();
                let fd = e.file_name().to_str().unwrap().parse().unwrap();
                let to = std::fs::read_link(e.path());
                (
                    fd,
                    to.map_or_else(|e| e.to_string(), |t| t.display().to_string()),
                )
            })
            .collect()
    }

    /// What the sentinel's processes hold: stdin its own pipe, stdout and
    /// stderr /dev/null, nothing else of the process that started it. `cat`
    /// opens and closes files of its own as it starts (its libraries): a
    /// descriptor it was given stays, one of its own goes within 5 s.
    fn assert_holds_only_its_pipe(s: &Sentinel) {
        let pipe = std::fs::read_link(format!("/proc/self/fd/{}", s._pipe.as_raw_fd()))
            .unwrap()
            .display()
            .to_string();
        let want = BTreeMap::from([
            (0, pipe),
            (1, "/dev/null".to_string()),
            (2, "/dev/null".to_string()),
        ]);
        for pid in pids(s) {
            let until = Instant::now() + Duration::from_secs(5);
            let mut held = fds_of(pid);
            while held != want && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(10));
                held = fds_of(pid);
            }
            assert_eq!(held, want, "sentinel {pid}");
        }
    }

    /// Started beside descriptors without close-on-exec (srun's sockets and
    /// its shepherd's pipe), the sentinel holds none of them.
    #[test]
    fn the_sentinel_holds_no_descriptor_but_its_pipe() {
        let _one = INHERITABLE.lock().unwrap();
        let open = inheritable();
        let s = Sentinel::start().expect("sentinel");
        assert_holds_only_its_pipe(&s);
        drop(open);
    }

    /// Without glibc's closefrom, each descriptor listed is closed.
    #[test]
    fn without_closefrom_the_sentinel_holds_no_descriptor_but_its_pipe() {
        assert!(add_close_from().is_some(), "this glibc has closefrom");
        let _one = INHERITABLE.lock().unwrap();
        let open = inheritable();
        let s = spawn(false, None).expect("sentinel");
        assert_holds_only_its_pipe(&s);
        drop(open);
    }

    /// A SIGTERM (or a SIGINT) sent to the sentinel's pid alone, not to
    /// srun's process group, is not a Ctrl-C.
    #[test]
    fn a_signal_to_the_sentinel_alone_is_not_an_interrupt() {
        for signal in [libc::SIGTERM, libc::SIGINT] {
            let s = Sentinel::start().expect("sentinel");
            let pid = pids(&s)[0];
            // SAFETY: our own child.
            unsafe { libc::kill(pid, signal) };
            // Until it is gone, and a while after.
            let until = Instant::now() + Duration::from_secs(5);
            while Path::new(&format!("/proc/{pid}/fd")).exists() && Instant::now() < until {
                assert!(!s.interrupted(), "signal {signal} to {pid} alone");
                std::thread::sleep(Duration::from_millis(10));
            }
            for _ in 0..20 {
                assert!(!s.interrupted(), "signal {signal} to {pid} alone");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }

    /// Polls `interrupted` until it says so or 5 s passed.
    fn interrupted_within_5s(s: &Sentinel) -> bool {
        let until = Instant::now() + Duration::from_secs(5);
        while !s.interrupted() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        s.interrupted()
    }

    /// SIGINT to the sentinel's process group (as a terminal's Ctrl-C goes
    /// to srun's) shows as an interrupt, even while this thread blocks SIGINT
    /// (as srun's threads do); so does a SIGTERM to the group (`timeout`).
    /// The sentinel gets a group of its own here: the test's is the harness's.
    #[test]
    fn a_signal_to_the_sentinel_s_group_is_an_interrupt() {
        // SAFETY: blocks SIGINT in this test thread only.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGINT);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        }
        for signal in [libc::SIGINT, libc::SIGTERM] {
            let s = spawn(true, add_close_from()).expect("sentinel");
            let group = pids(&s)[0];
            // SAFETY: reads the process groups of our own children.
            let groups = pids(&s).map(|p| unsafe { libc::getpgid(p) });
            assert_eq!(groups, [group, group]);
            assert!(!s.interrupted());
            // SAFETY: the group holds our two children only.
            unsafe { libc::kill(-group, signal) };
            assert!(interrupted_within_5s(&s), "signal {signal} to the group");
        }
    }

    /// The sentinel of [`Sentinel::start`] is in this process's group.
    #[test]
    fn the_sentinel_is_in_the_starting_process_s_group() {
        let s = Sentinel::start().expect("sentinel");
        // SAFETY: reads process groups only.
        let (ours, theirs) = unsafe { (libc::getpgrp(), pids(&s).map(|p| libc::getpgid(p))) };
        assert_eq!(theirs, [ours, ours]);
    }

    /// Dropped without an interrupt, the sentinel is ended and reaped.
    #[test]
    fn a_dropped_sentinel_is_reaped() {
        let s = Sentinel::start().expect("sentinel");
        let started = pids(&s);
        assert!(!s.interrupted());
        drop(s);
        for pid in started {
            // SAFETY: probing a pid that must no longer be our child.
            let rc = unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) };
            assert_eq!(rc, -1, "{pid} still a child of ours");
        }
    }
}
