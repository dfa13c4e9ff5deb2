//! A file of the user's written from slurmstepd in a bounded time: a forked
//! child does the system calls (with the job's user's ids where slurmstepd
//! runs as root) and is killed at its deadline, so a hung file system, or a
//! FIFO the user put where the file goes, never holds the step's launch or
//! its end. The child opens without following a last symlink and without
//! blocking (a FIFO with no reader fails at once), and writes only to a
//! regular file.

use std::ffi::CString;
use std::io::ErrorKind;
use std::time::{Duration, Instant};

/// Whose ids the child takes before it touches the file (slurmstepd's
/// `task_exit` runs as root); `None` where slurmstepd already is the user.
pub struct Ids {
    pub uid: libc::uid_t,
    pub gid: libc::gid_t,
    pub groups: Vec<libc::gid_t>,
}

/// One write: the directories to make first (parents first), the file, and
/// whether it is created afresh (else appended to, and must exist).
pub struct Write<'a> {
    pub dirs: &'a [CString],
    pub file: &'a CString,
    pub create: bool,
    pub bytes: &'a [u8],
}

/// Why a write did not happen.
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

/// The child's stages, sent back with errno through a pipe.
const IDS: u8 = 1;
const MKDIR: u8 = 2;
const OPEN: u8 = 3;
const NOT_REGULAR: u8 = 4;
const WRITE: u8 = 5;

/// Writes in a child, as `ids` when given; waits at most `limit`.
pub fn write(ids: Option<&Ids>, w: &Write, limit: Duration) -> Result<(), Failed> {
    let run = || child(ids, w);
    match in_child(limit, run)? {
        None => Ok(()),
        Some((stage, errno)) => {
            let os = std::io::Error::from_raw_os_error(errno);
            let file = w.file.to_string_lossy();
            Err(Failed::Refused(match stage {
                IDS => "cannot take the job's user's ids".to_string(),
                MKDIR => format!("cannot make the directories of {file}: {os}"),
                // ENXIO: a FIFO that no one reads (or a device), opened
                // without blocking.
                OPEN if errno == libc::ENXIO => format!("{file} is not a regular file"),
                OPEN => format!("cannot open {file}: {os}"),
                NOT_REGULAR => format!("{file} is not a regular file"),
                _ => format!("cannot write {file}: {os}"),
            }))
        }
    }
}

/// The child's work: only system calls on values made before the fork.
/// Returns 0, or the failed stage and errno packed as `stage << 24 | errno`.
fn child(ids: Option<&Ids>, w: &Write) -> u32 {
    // SAFETY: async-signal-safe system calls on buffers made before the
    // fork; errno read through libc's own accessor.
    unsafe {
        let errno = || *libc::__errno_location() as u32 & 0x00ff_ffff;
        let fail = |stage: u8| (u32::from(stage) << 24) | errno();
        if let Some(ids) = ids {
            let ok = libc::setgroups(ids.groups.len(), ids.groups.as_ptr()) == 0
                && libc::setgid(ids.gid) == 0
                && libc::setuid(ids.uid) == 0
                && libc::getuid() == ids.uid
                && libc::geteuid() == ids.uid;
            if !ok {
                return fail(IDS);
            }
        }
        for dir in w.dirs {
            if libc::mkdir(dir.as_ptr(), 0o755) != 0 && *libc::__errno_location() != libc::EEXIST {
                return fail(MKDIR);
            }
        }
        let mut flags = libc::O_WRONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC;
        flags |= if w.create {
            libc::O_CREAT | libc::O_TRUNC
        } else {
            libc::O_APPEND
        };
        let fd = libc::open(w.file.as_ptr(), flags, 0o644 as libc::c_uint);
        if fd < 0 {
            return fail(OPEN);
        }
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut st) != 0 || st.st_mode & libc::S_IFMT != libc::S_IFREG {
            libc::close(fd);
            return (u32::from(NOT_REGULAR)) << 24;
        }
        let mut done = 0;
        while done < w.bytes.len() {
            let n = libc::write(fd, w.bytes[done..].as_ptr().cast(), w.bytes.len() - done);
            if n <= 0 {
                let code = fail(WRITE);
                libc::close(fd);
                return code;
            }
            done += n as usize;
        }
        libc::close(fd);
        0
    }
}

/// Runs `work` in a forked child and waits for it at most `limit`; the
/// child's nonzero result comes back as (stage, errno). At the deadline the
/// child is killed; one stuck in the kernel (a hard-mounted file system) is
/// left to be reaped later rather than waited for.
fn in_child(limit: Duration, work: impl FnOnce() -> u32) -> Result<Option<(u8, i32)>, Failed> {
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
        let code = work().to_ne_bytes();
        // SAFETY: a write of 4 bytes to the pipe, then _exit.
        unsafe {
            libc::write(wr, code.as_ptr().cast(), 4);
            libc::_exit(0);
        }
    }
    // SAFETY: the parent's copy of the write end is not needed.
    unsafe { libc::close(wr) };
    if pid < 0 {
        // SAFETY: the read end, ours.
        unsafe { libc::close(rd) };
        return Err(os());
    }
    let start = Instant::now();
    let ended = loop {
        let mut status = 0;
        // SAFETY: waits for this function's own child.
        let done = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
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
    let result = if ended {
        let mut code = [0u8; 4];
        // SAFETY: reads at most 4 bytes into `code`, without blocking.
        let n = unsafe { libc::read(rd, code.as_mut_ptr().cast(), 4) };
        match (n, u32::from_ne_bytes(code)) {
            (4, 0) => Ok(None),
            (4, c) => Ok(Some(((c >> 24) as u8, (c & 0x00ff_ffff) as i32))),
            _ => Err(Failed::Refused(
                "the writing process ended without a word".into(),
            )),
        }
    } else {
        // SAFETY: this function's own child: killed, then reaped if it goes
        // within a moment (a process in uninterruptible sleep does not).
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            for _ in 0..50 {
                let mut status = 0;
                if libc::waitpid(pid, &mut status, libc::WNOHANG) != 0 {
                    break;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        Err(Failed::Late(limit))
    };
    // SAFETY: the read end, ours.
    unsafe { libc::close(rd) };
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::OpenOptionsExt;
    use std::path::{Path, PathBuf};

    fn c(p: &Path) -> CString {
        CString::new(p.as_os_str().as_bytes()).unwrap()
    }

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tfc-bw-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn makes_the_directories_then_writes_and_appends() {
        let d = scratch("write");
        let dirs = [c(&d.join("a")), c(&d.join("a/b"))];
        let file = c(&d.join("a/b/node1.jsonl"));
        let first = Write {
            dirs: &dirs,
            file: &file,
            create: true,
            bytes: b"one\n",
        };
        write(None, &first, Duration::from_secs(5)).unwrap();
        let then = Write {
            dirs: &[],
            file: &file,
            create: false,
            bytes: b"two\n",
        };
        write(None, &then, Duration::from_secs(5)).unwrap();
        let text = std::fs::read_to_string(d.join("a/b/node1.jsonl")).unwrap();
        assert_eq!(text, "one\ntwo\n");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_fifo_where_the_file_goes_fails_at_once_unwritten() {
        let d = scratch("fifo");
        let fifo = d.join("node1.jsonl");
        assert_eq!(unsafe { libc::mkfifo(c(&fifo).as_ptr(), 0o644) }, 0);
        let file = c(&fifo);
        for create in [true, false] {
            let w = Write {
                dirs: &[],
                file: &file,
                create,
                bytes: b"x\n",
            };
            let t0 = Instant::now();
            let err = write(None, &w, Duration::from_secs(30))
                .unwrap_err()
                .to_string();
            assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
            assert!(err.ends_with("node1.jsonl is not a regular file"), "{err}");
        }
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_fifo_with_a_reader_is_not_written_either() {
        let d = scratch("fifo-read");
        let fifo = d.join("node1.jsonl");
        assert_eq!(unsafe { libc::mkfifo(c(&fifo).as_ptr(), 0o644) }, 0);
        let reader = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .unwrap();
        let file = c(&fifo);
        let w = Write {
            dirs: &[],
            file: &file,
            create: false,
            bytes: b"x\n",
        };
        let err = write(None, &w, Duration::from_secs(5))
            .unwrap_err()
            .to_string();
        assert!(err.ends_with("node1.jsonl is not a regular file"), "{err}");
        let mut got = [0u8; 8];
        let n = unsafe {
            libc::read(
                std::os::fd::AsRawFd::as_raw_fd(&reader),
                got.as_mut_ptr().cast(),
                8,
            )
        };
        assert!(n <= 0, "{n} bytes reached the reader");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_symlink_where_the_file_goes_is_not_followed() {
        let d = scratch("link");
        std::fs::write(d.join("target"), "kept\n").unwrap();
        std::os::unix::fs::symlink(d.join("target"), d.join("node1.jsonl")).unwrap();
        let file = c(&d.join("node1.jsonl"));
        let w = Write {
            dirs: &[],
            file: &file,
            create: true,
            bytes: b"x\n",
        };
        let err = write(None, &w, Duration::from_secs(5))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("cannot open"), "{err}");
        assert_eq!(std::fs::read_to_string(d.join("target")).unwrap(), "kept\n");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_child_that_hangs_is_killed_at_its_deadline() {
        let t0 = Instant::now();
        let err = in_child(Duration::from_millis(300), || {
            // SAFETY: sleep is async-signal-safe.
            unsafe { libc::sleep(30) };
            0
        })
        .unwrap_err();
        assert!(matches!(err, Failed::Late(_)), "{err}");
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    }
}
