//! A forked child that does system calls for slurmstepd and is killed at
//! its deadline, so a hung file system never holds the step's launch or its
//! end: the fork, the pipe its word comes back through (`stage << 24 |
//! value`), the deadline, the memory it shares with its parent, and the
//! async-signal-safe helpers the child's work uses (errno, its ids).

use std::io::ErrorKind;
use std::time::{Duration, Instant};

use crate::core::os::MAX_USER_FILE;

/// Whose ids the child takes before it touches the file (slurmstepd's
/// `task_exit` runs as root); `None` where slurmstepd already is the user.
pub struct Ids {
    pub uid: libc::uid_t,
    pub gid: libc::gid_t,
    pub groups: Vec<libc::gid_t>,
}

/// Why a read or a write did not happen.
#[derive(Debug)]
pub enum Failed {
    /// The child was still at it at its deadline (a hung file system).
    Late(Duration),
    /// The system said no, or could not fork.
    Refused(String),
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failed::Late(limit) => write!(f, "took over {limit:?}"),
            Failed::Refused(why) => f.write_str(why),
        }
    }
}

/// The child's stages, sent back through a pipe as `stage << 24 | value`:
/// `DONE` with the bytes read, any other with errno (`NOT_REGULAR`: the
/// file's type bits).
pub(super) const DONE: u8 = 0;
// A read's length fits the word's 24 bits.
const _: () = assert!(MAX_USER_FILE < (1 << 24) - 1);
/// The child's descriptor of the word's pipe.
pub(super) const WORD_FD: libc::c_int = 3;
pub(super) const IDS: u8 = 1;
pub(super) const MKDIR: u8 = 2;
pub(super) const OPEN: u8 = 3;
pub(super) const NOT_REGULAR: u8 = 4;
pub(super) const WRITE: u8 = 5;
pub(super) const READ: u8 = 6;
/// A place not the user's own: the value says which ([`PLACE_FILE`]…).
pub(super) const NOT_YOURS: u8 = 7;
/// The user's directory in the admin's own could not be made as root.
pub(super) const ROOT: u8 = 8;

/// Anonymous memory shared with the child, which reads the file into it
/// (or writes what it left: super::private_dir).
pub(super) struct SharedMap {
    pub(super) ptr: *mut u8,
    pub(super) len: usize,
}

impl SharedMap {
    pub(super) fn new(len: usize) -> std::io::Result<SharedMap> {
        // SAFETY: a fresh anonymous mapping, unmapped on drop.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(SharedMap {
            ptr: ptr.cast(),
            len,
        })
    }

    /// The first `n` bytes (at most the mapping's length).
    pub(super) fn bytes(&self, n: usize) -> &[u8] {
        // SAFETY: within the mapping, which the child no longer writes (it
        // has ended).
        unsafe { std::slice::from_raw_parts(self.ptr, n.min(self.len)) }
    }
}

impl Drop for SharedMap {
    fn drop(&mut self) {
        // SAFETY: the mapping made by `new`.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// errno, in the 24 bits the child's word has for it.
pub(super) fn errno() -> u32 {
    // SAFETY: libc's own accessor of the thread's errno.
    (unsafe { *libc::__errno_location() }) as u32 & 0x00ff_ffff
}

pub(super) fn fail(stage: u8) -> u32 {
    (u32::from(stage) << 24) | errno()
}

/// In a child: takes the job's user's ids for good (real and effective).
pub(super) fn take_ids(ids: &Ids) -> bool {
    // SAFETY: system calls on a list made before the fork.
    unsafe {
        libc::setgroups(ids.groups.len(), ids.groups.as_ptr()) == 0
            && libc::setgid(ids.gid) == 0
            && libc::setuid(ids.uid) == 0
            && libc::getuid() == ids.uid
            && libc::geteuid() == ids.uid
    }
}

pub(super) fn fail_with(stage: u8, errno: libc::c_int) -> u32 {
    (u32::from(stage) << 24) | (errno as u32 & 0x00ff_ffff)
}

/// Runs `work` in a forked child and waits for it at most `limit`: the
/// child's word, as (stage, value). At the deadline the child is killed;
/// one stuck in the kernel (a hard-mounted file system) is left to be
/// reaped later rather than waited for.
pub(super) fn in_child(limit: Duration, work: impl FnOnce() -> u32) -> Result<(u8, u32), Failed> {
    let os = || Failed::Refused(std::io::Error::last_os_error().to_string());
    let mut fds = [0; 2];
    // SAFETY: a pipe into a two-element array. Non-blocking: the parent's
    // read never waits (the child's 4 bytes fit an empty pipe).
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return Err(os());
    }
    let [rd, wr] = fds;
    // SAFETY: fork; the child runs `work` (system calls only) and always
    // ends in _exit, running nothing of the parent's.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        child(wr, work);
    }
    // SAFETY: the parent's copy of the write end is not needed.
    unsafe { libc::close(wr) };
    if pid < 0 {
        // SAFETY: the read end, ours.
        unsafe { libc::close(rd) };
        return Err(os());
    }
    let mut status = 0;
    let ended = wait_within(pid, limit, &mut status);
    let mut code = [0u8; 4];
    // SAFETY: reads at most 4 bytes into `code`, without blocking. A child
    // that ended right at its deadline has said its word all the same.
    let n = unsafe { libc::read(rd, code.as_mut_ptr().cast(), 4) };
    let result = match (n, u32::from_ne_bytes(code)) {
        (4, c) => Ok(((c >> 24) as u8, c & 0x00ff_ffff)),
        _ if !ended => Err(Failed::Late(limit)),
        _ if libc::WIFSIGNALED(status) => Err(Failed::Refused(format!(
            "the child ended by signal {} without a word",
            libc::WTERMSIG(status)
        ))),
        _ => Err(Failed::Refused("the child ended without a word".into())),
    };
    // SAFETY: the read end, ours.
    unsafe { libc::close(rd) };
    result
}

/// The forked child of [`in_child`]: runs `work` and writes its word on
/// the pipe's write end `wr`, then ends, running nothing of the parent's.
pub(super) fn child(wr: libc::c_int, work: impl FnOnce() -> u32) -> ! {
    // Should `work` ever unwind, the child must not return into
    // slurmstepd's C code (it would go on as a second slurmstepd).
    struct ExitOnUnwind;
    impl Drop for ExitOnUnwind {
        fn drop(&mut self) {
            // SAFETY: ends the child at once.
            unsafe { libc::_exit(127) };
        }
    }
    let _guard = ExitOnUnwind;
    // SAFETY: system calls only. The word's pipe on fd 3 and every other
    // descriptor of slurmstepd's closed (its sockets to srun and the
    // tasks must not outlive it in a child stuck in the kernel), and no
    // debugger may attach to this copy of slurmstepd's memory.
    unsafe {
        libc::dup2(wr, WORD_FD);
        libc::syscall(libc::SYS_close_range, WORD_FD + 1, libc::c_uint::MAX, 0);
        libc::prctl(libc::PR_SET_DUMPABLE, 0);
    }
    let code = work().to_ne_bytes();
    // SAFETY: a write of 4 bytes to the pipe, then _exit.
    unsafe {
        libc::write(WORD_FD, code.as_ptr().cast(), 4);
        libc::_exit(0);
    }
}

/// Waits for child `pid` at most `limit` (its `status` when it ended):
/// whether it ended. At the deadline it is killed, and reaped if it goes
/// within a moment (a process in uninterruptible sleep does not).
pub(super) fn wait_within(pid: libc::pid_t, limit: Duration, status: &mut libc::c_int) -> bool {
    let start = Instant::now();
    let ended = loop {
        // SAFETY: waits for this function's own child.
        let done = unsafe { libc::waitpid(pid, status, libc::WNOHANG) };
        let interrupted =
            done < 0 && std::io::Error::last_os_error().kind() == ErrorKind::Interrupted;
        if done == pid || (done < 0 && !interrupted) {
            break true;
        }
        if start.elapsed() > limit {
            break false;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    if !ended {
        // SAFETY: this function's own child: killed, then reaped if it goes
        // within a moment (a process in uninterruptible sleep does not).
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            for _ in 0..50 {
                if libc::waitpid(pid, status, libc::WNOHANG) != 0 {
                    break;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    }
    ended
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_that_hangs_is_killed_at_its_deadline() {
        let map = SharedMap::new(4).unwrap();
        let t0 = Instant::now();
        let err = in_child(Duration::from_millis(300), || {
            // SAFETY: the child's pid into the shared mapping, then a sleep.
            unsafe {
                *map.ptr.cast::<libc::pid_t>() = libc::getpid();
                libc::sleep(30);
            }
            0
        })
        .unwrap_err();
        assert!(matches!(err, Failed::Late(_)), "{err}");
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        let pid = i32::from_ne_bytes(map.bytes(4).try_into().unwrap());
        assert!(pid > 0);
        // Killed and reaped: no such process any more.
        assert_eq!(unsafe { libc::kill(pid, 0) }, -1, "child {pid} still there");
        assert_eq!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::ESRCH)
        );
    }

    /// The child holds none of the parent's descriptors but its word's.
    #[test]
    fn the_child_keeps_no_descriptor_of_the_parents() {
        let d = std::env::temp_dir().join(format!("tfc-bw-fds-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let held = std::fs::File::create(d.join("held")).unwrap();
        // Above the word's descriptor, whatever the other tests hold.
        let fd = unsafe {
            libc::fcntl(
                std::os::fd::AsRawFd::as_raw_fd(&held),
                libc::F_DUPFD_CLOEXEC,
                100,
            )
        };
        assert!(fd >= 100);
        // SAFETY: fcntl on a descriptor number, in the child.
        let (stage, value) = in_child(Duration::from_secs(5), || unsafe {
            (libc::fcntl(fd, libc::F_GETFD) == -1) as u32
        })
        .unwrap();
        assert_eq!((stage, value), (DONE, 1), "fd {fd} open in the child");
        unsafe { libc::close(fd) };
        std::fs::remove_dir_all(&d).unwrap();
    }
}
