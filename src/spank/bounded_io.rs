//! Files of the user's read and written from slurmstepd in a bounded time:
//! a forked child does the system calls (with the job's user's ids where
//! slurmstepd runs as root) and is killed at its deadline, so a hung file
//! system, or a FIFO the user put where a file goes, never holds the step's
//! launch or its end. The child opens without blocking (a FIFO fails at
//! once) and reads or writes only a regular file; a write never follows a
//! last symlink. A read comes back through a shared mapping, never larger
//! than the core's cap on a user's file.

use std::ffi::CString;
use std::io::ErrorKind;
use std::time::{Duration, Instant};

use crate::core::os::{MAX_USER_FILE, not_a_regular_file, user_file_refused, user_file_text};
use crate::core::record::{Runs, admins_own, only_theirs, roots_way, runs_under};

/// Whose ids the child takes before it touches the file (slurmstepd's
/// `task_exit` runs as root); `None` where slurmstepd already is the user.
pub struct Ids {
    pub uid: libc::uid_t,
    pub gid: libc::gid_t,
    pub groups: Vec<libc::gid_t>,
}

/// One write: the directories to make first (parents first), the file, and
/// whether it is created afresh (else appended to, and must exist). The
/// file, and every directory the child opens, must be the user's own (the
/// child's uid): a file or directory of another's is never written into.
pub struct Write<'a> {
    pub dirs: &'a [CString],
    /// Where `file` is a name in a run's directory below a record's
    /// directory (else `file` is a path).
    pub under: Option<Under<'a>>,
    pub file: &'a CString,
    pub create: bool,
    pub bytes: &'a [u8],
}

/// A run's directory below a record's directory `dir`, made and opened
/// relative to the directory above, never following a link: the user's
/// own directory in `dir` where `dir` is shared
/// (crate::core::record::runs_under), then the run's.
pub struct Under<'a> {
    pub dir: &'a CString,
    /// The user's directory's name in a shared `dir`.
    pub user_dir: &'a CString,
    pub run: &'a CString,
    /// Given only where `dir` is the site's configured record directory:
    /// every directory from `/` to `dir`. Where each is root's (opened
    /// without following a link, none writable by others but a sticky
    /// one's) and `dir` is the admin's own (root's, writable by no one
    /// else), a missing user's directory in it is made as root, given to
    /// the user, and the rest goes on as the user.
    pub site_way: Option<&'a [CString]>,
}

/// Which of a write's places is not the user's own (the child's word's
/// value with [`NOT_YOURS`]); [`PER_USER`] set where the runs are under
/// the user's directory.
pub const PLACE_USER_DIR: u32 = 1;
pub const PLACE_RUN_DIR: u32 = 2;
pub const PLACE_FILE: u32 = 3;
pub const PLACE_SHARED_DIR: u32 = 4;
pub const PER_USER: u32 = 0x10;

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
const WORD_FD: libc::c_int = 3;
pub(super) const IDS: u8 = 1;
const MKDIR: u8 = 2;
const OPEN: u8 = 3;
const NOT_REGULAR: u8 = 4;
const WRITE: u8 = 5;
const READ: u8 = 6;
/// A place not the user's own: the value says which ([`PLACE_FILE`]…).
const NOT_YOURS: u8 = 7;
/// The user's directory in the admin's own could not be made as root.
const ROOT: u8 = 8;

/// Writes in a child, as `ids` when given; waits at most `limit`. Whether
/// the run's directory is under the user's own directory of a shared
/// record directory ([`Under`]).
pub fn write(ids: Option<&Ids>, w: &Write, limit: Duration) -> Result<bool, Failed> {
    let (stage, value) = in_child(limit, || write_child(ids, w))?;
    let os = std::io::Error::from_raw_os_error(value as i32);
    let file = match &w.under {
        Some(under) => place(under, value & PER_USER != 0, PLACE_FILE, w.file),
        None => w.file.to_string_lossy().into_owned(),
    };
    Err(Failed::Refused(match stage {
        DONE => return Ok(value & PER_USER != 0),
        NOT_YOURS => match &w.under {
            Some(u) if value & 0xf == PLACE_SHARED_DIR => format!(
                "{} is writable by others without the sticky bit: anyone may replace what is written there",
                u.dir.to_string_lossy()
            ),
            Some(u) => format!(
                "{} is not yours: not written",
                place(u, value & PER_USER != 0, value & 0xf, w.file)
            ),
            None => format!("{file} is not yours: not written"),
        },
        IDS => format!("cannot take the job's user's ids: {os}"),
        ROOT => match &w.under {
            Some(u) => format!(
                "cannot make {} as root: {os}",
                place(u, true, PLACE_USER_DIR, w.file)
            ),
            None => format!("cannot act as root: {os}"),
        },
        MKDIR => format!("cannot make the directories of {file}: {os}"),
        // ENXIO: a FIFO that no one reads (or a device), opened without
        // blocking.
        OPEN if value as i32 == libc::ENXIO => format!("{file} is not a regular file"),
        OPEN => format!("cannot open {file}: {os}"),
        NOT_REGULAR => format!("{file} is not a regular file"),
        _ => format!("cannot write {file}: {os}"),
    }))
}

/// The path of a write's place, for its message.
fn place(u: &Under, per_user: bool, which: u32, file: &CString) -> String {
    let mut path = u.dir.to_string_lossy().trim_end_matches('/').to_string();
    if per_user {
        path = format!("{path}/{}", u.user_dir.to_string_lossy());
    }
    if which >= PLACE_RUN_DIR {
        path = format!("{path}/{}", u.run.to_string_lossy());
    }
    if which == PLACE_FILE {
        path = format!("{path}/{}", file.to_string_lossy());
    }
    path
}

/// Reads a file the user named, with slurmstepd's ids (`user_init`: the
/// user's), in a child: as the core's `read_user_file` does (a regular
/// file of at most [`MAX_USER_FILE`] bytes, opened without blocking, the
/// same refusals), within `limit`.
pub fn read_user_file(path: &str, limit: Duration) -> crate::core::Result<String> {
    let refused = |why: &str| user_file_refused(path, why);
    let file = CString::new(path).map_err(|_| refused("NUL in the path"))?;
    let cap = MAX_USER_FILE as usize + 1;
    let map = SharedMap::new(cap).map_err(|e| refused(&e.to_string()))?;
    let (stage, value) =
        in_child(limit, || read_child(&file, &map)).map_err(|e| refused(&e.to_string()))?;
    match stage {
        DONE => user_file_text(path, map.bytes(value as usize).to_vec()),
        NOT_REGULAR => Err(not_a_regular_file(path, value)),
        _ => Err(refused(
            &std::io::Error::from_raw_os_error(value as i32).to_string(),
        )),
    }
}

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

/// Opens `file` with `flags` and checks it is a regular file: the fd, or
/// the child's word.
fn open_regular(at: libc::c_int, file: &CString, flags: libc::c_int) -> Result<libc::c_int, u32> {
    // SAFETY: system calls on a path and a struct made before the fork.
    unsafe {
        let fd = libc::openat(at, file.as_ptr(), flags, 0o644 as libc::c_uint);
        if fd < 0 {
            return Err(fail(OPEN));
        }
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut st) != 0 {
            let code = fail(OPEN);
            libc::close(fd);
            return Err(code);
        }
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            libc::close(fd);
            return Err((u32::from(NOT_REGULAR) << 24) | (st.st_mode & libc::S_IFMT));
        }
        Ok(fd)
    }
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

/// The child's write: only system calls on values made before the fork.
fn write_child(ids: Option<&Ids>, w: &Write) -> u32 {
    // SAFETY: async-signal-safe system calls on buffers made before the fork.
    unsafe {
        if let Some(ids) = ids
            && !take_ids(ids)
        {
            return fail(IDS);
        }
        if let Err(code) = make_dirs(w.dirs) {
            return code;
        }
        let (at, per_user) = match &w.under {
            Some(under) => match run_dir_fd(under) {
                Ok(found) => found,
                Err(code) => return code,
            },
            None => (libc::AT_FDCWD, 0),
        };
        // Never O_TRUNC at the open: a file of another's is left as it is.
        let mut flags = libc::O_WRONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC;
        flags |= if w.create {
            libc::O_CREAT
        } else {
            libc::O_APPEND
        };
        let opened = open_regular(at, w.file, flags);
        if at != libc::AT_FDCWD {
            libc::close(at);
        }
        let fd = match opened {
            Ok(fd) => fd,
            // A link where the file goes.
            Err(code) if code == fail_with(OPEN, libc::ELOOP) => {
                return not_yours(PLACE_FILE | per_user);
            }
            Err(code) => return code,
        };
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut st) != 0 || st.st_uid != libc::geteuid() {
            libc::close(fd);
            return not_yours(PLACE_FILE | per_user);
        }
        if w.create && libc::ftruncate(fd, 0) != 0 {
            let code = fail(WRITE);
            libc::close(fd);
            return code;
        }
        let written = write_all(fd, w.bytes);
        libc::close(fd);
        match written {
            Ok(()) => per_user,
            Err(code) => code,
        }
    }
}

/// In the child: `dirs` made, deepest first, as `mkdir -p` and std's
/// create_dir_all do: up only while a parent is missing, then down.
/// (Walking down from the root would fail on an automounter's root, which
/// refuses a mkdir of a key it has not mounted yet instead of saying it
/// exists.) Err: the child's word.
fn make_dirs(dirs: &[CString]) -> Result<(), u32> {
    // SAFETY: async-signal-safe system calls on paths made before the fork.
    unsafe {
        let mut made = dirs.len();
        while made > 0 {
            if libc::mkdir(dirs[made - 1].as_ptr(), 0o755) == 0
                || *libc::__errno_location() == libc::EEXIST
            {
                break;
            }
            if *libc::__errno_location() != libc::ENOENT {
                return Err(fail(MKDIR));
            }
            made -= 1;
        }
        for dir in dirs.iter().skip(made) {
            if libc::mkdir(dir.as_ptr(), 0o755) != 0 && *libc::__errno_location() != libc::EEXIST {
                return Err(fail(MKDIR));
            }
        }
    }
    Ok(())
}

/// In the child: all of `bytes` written to `fd`. Err: the child's word.
fn write_all(fd: libc::c_int, bytes: &[u8]) -> Result<(), u32> {
    let mut done = 0;
    while done < bytes.len() {
        // SAFETY: writes from a buffer made before the fork.
        let n = unsafe { libc::write(fd, bytes[done..].as_ptr().cast(), bytes.len() - done) };
        if n <= 0 {
            return Err(if n == 0 {
                (u32::from(WRITE) << 24) | libc::EIO as u32
            } else {
                fail(WRITE)
            });
        }
        done += n as usize;
    }
    Ok(())
}

fn fail_with(stage: u8, errno: libc::c_int) -> u32 {
    (u32::from(stage) << 24) | (errno as u32 & 0x00ff_ffff)
}

fn not_yours(which: u32) -> u32 {
    (u32::from(NOT_YOURS) << 24) | which
}

/// A directory's owner and mode, or the child's word.
fn dir_stat(fd: libc::c_int) -> Result<(u32, u32), u32> {
    // SAFETY: fstat into a struct of ours.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut st) != 0 {
            return Err(fail(OPEN));
        }
        if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
            return Err((u32::from(NOT_REGULAR) << 24) | (st.st_mode & libc::S_IFMT));
        }
        Ok((st.st_uid, st.st_mode & 0o7777))
    }
}

/// Makes (if missing) and opens `name` in the directory `at`, never
/// following a link: its fd, only if it is a directory of the user's that
/// no one else may write; else the child's word ([`NOT_YOURS`] with
/// `which`).
fn own_dir_at(
    at: libc::c_int,
    name: &CString,
    mode: libc::mode_t,
    which: u32,
) -> Result<libc::c_int, u32> {
    // SAFETY: system calls on values made before the fork.
    unsafe {
        if libc::mkdirat(at, name.as_ptr(), mode) != 0 && *libc::__errno_location() != libc::EEXIST
        {
            return Err(fail(MKDIR));
        }
        let fd = libc::openat(
            at,
            name.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        );
        if fd < 0 {
            let e = *libc::__errno_location();
            // A link, not a directory, or a directory of another's that
            // the user may not open.
            if e == libc::ELOOP || e == libc::ENOTDIR || e == libc::EACCES {
                return Err(not_yours(which));
            }
            return Err(fail(OPEN));
        }
        match dir_stat(fd) {
            Ok((owner, mode)) if only_theirs(owner, mode, libc::geteuid()) => Ok(fd),
            _ => {
                libc::close(fd);
                Err(not_yours(which))
            }
        }
    }
}

/// The run's directory's fd, made below the record's directory as
/// [`Under`] says, and [`PER_USER`] where it is under the user's own.
fn run_dir_fd(u: &Under) -> Result<(libc::c_int, u32), u32> {
    // SAFETY: system calls on values made before the fork.
    unsafe {
        // The record's directory itself may be a link (the admin's or the
        // user's own choice of path); what it is decides the layout.
        let dir = libc::open(
            u.dir.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        );
        if dir < 0 {
            return Err(fail(OPEN));
        }
        let (owner, mode) = match dir_stat(dir) {
            Ok(found) => found,
            Err(code) => {
                libc::close(dir);
                return Err(code);
            }
        };
        let (base, per_user) = match runs_under(owner, mode, libc::geteuid()) {
            Runs::InDir => (dir, 0),
            Runs::Unsafe => {
                libc::close(dir);
                return Err(not_yours(PLACE_SHARED_DIR));
            }
            Runs::PerUser => {
                if let Some(way) = u.site_way
                    && admins_own(owner, mode)
                    && let Err(code) = make_as_root(dir, way, u.user_dir)
                {
                    libc::close(dir);
                    return Err(code);
                }
                let mine = own_dir_at(dir, u.user_dir, 0o700, PLACE_USER_DIR | PER_USER);
                libc::close(dir);
                (mine?, PER_USER)
            }
        };
        let run = own_dir_at(base, u.run, 0o755, PLACE_RUN_DIR | per_user);
        libc::close(base);
        Ok((run?, per_user))
    }
}

/// Whether `dir` is the end of `way` (`/` first), each directory of it
/// opened without following a link and root's all along
/// (crate::core::record::roots_way), the last the admin's own.
fn on_roots_way(dir: libc::c_int, way: &[CString]) -> bool {
    // SAFETY: system calls on values made before the fork.
    unsafe {
        let mut end: libc::stat = std::mem::zeroed();
        if way.is_empty() || libc::fstat(dir, &mut end) != 0 {
            return false;
        }
        for (i, step) in way.iter().enumerate() {
            let fd = libc::open(
                step.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            );
            if fd < 0 {
                return false;
            }
            let mut st: libc::stat = std::mem::zeroed();
            let stat_ok = libc::fstat(fd, &mut st) == 0;
            libc::close(fd);
            let mode = st.st_mode & 0o7777;
            let last = i + 1 == way.len();
            let ok = stat_ok
                && if last {
                    admins_own(st.st_uid, mode)
                        && (st.st_dev, st.st_ino) == (end.st_dev, end.st_ino)
                } else {
                    roots_way(st.st_uid, mode)
                };
            if !ok {
                return false;
            }
        }
        true
    }
}

/// In the admin's own record directory `dir` (see [`Under::site_way`]):
/// makes the user's directory `name` (0700) as root where it is missing and
/// gives it to the user (the child's effective ids), then is the user again.
/// Only a directory just made, opened without following a link, is given:
/// nothing that was there before is touched (the user's own check follows).
/// slurmstepd's `user_init` runs with the user's effective uid and root's
/// saved one, which the child takes back for this alone.
fn make_as_root(dir: libc::c_int, way: &[CString], name: &CString) -> Result<(), u32> {
    // SAFETY: system calls on values made before the fork.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstatat(dir, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) == 0
            || *libc::__errno_location() != libc::ENOENT
            || !on_roots_way(dir, way)
        {
            return Ok(());
        }
        let (uid, gid) = (libc::geteuid(), libc::getegid());
        let (mut real, mut effective, mut saved) = (0, 0, 0);
        if libc::getresuid(&mut real, &mut effective, &mut saved) != 0 {
            return Err(fail(ROOT));
        }
        if saved != 0 {
            return Err(fail_with(ROOT, libc::EPERM));
        }
        if libc::seteuid(0) != 0 {
            return Err(fail(ROOT));
        }
        let mut result = Ok(());
        if libc::mkdirat(dir, name.as_ptr(), 0o700) != 0 {
            // Made meanwhile (another step of the user's): the user's own
            // check decides.
            if *libc::__errno_location() != libc::EEXIST {
                result = Err(fail(ROOT));
            }
        } else {
            let fd = libc::openat(
                dir,
                name.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            );
            if fd < 0 {
                result = Err(fail(ROOT));
            } else {
                let given = match dir_stat(fd) {
                    Ok((0, _)) => libc::fchown(fd, uid, gid) == 0 && libc::fchmod(fd, 0o700) == 0,
                    _ => false,
                };
                if !given {
                    result = Err(fail(ROOT));
                }
                libc::close(fd);
            }
        }
        if libc::seteuid(uid) != 0 || libc::geteuid() != uid {
            return Err(fail(IDS));
        }
        result
    }
}

/// The child's read into the shared mapping, up to its length: only system
/// calls. `DONE` with the bytes read.
fn read_child(file: &CString, map: &SharedMap) -> u32 {
    let flags = libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;
    let fd = match open_regular(libc::AT_FDCWD, file, flags) {
        Ok(fd) => fd,
        Err(code) => return code,
    };
    let mut got = 0;
    // SAFETY: reads within the mapping; the fd is the child's own.
    unsafe {
        while got < map.len {
            let n = libc::read(fd, map.ptr.add(got).cast(), map.len - got);
            if n < 0 && *libc::__errno_location() == libc::EINTR {
                continue;
            }
            if n < 0 {
                let code = fail(READ);
                libc::close(fd);
                return code;
            }
            if n == 0 {
                break;
            }
            got += n as usize;
        }
        libc::close(fd);
    }
    got as u32
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
fn child(wr: libc::c_int, work: impl FnOnce() -> u32) -> ! {
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
fn wait_within(pid: libc::pid_t, limit: Duration, status: &mut libc::c_int) -> bool {
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
            under: None,
            file: &file,
            create: true,
            bytes: b"one\n",
        };
        write(None, &first, Duration::from_secs(5)).unwrap();
        let then = Write {
            dirs: &[],
            under: None,
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
                under: None,
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
            under: None,
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
            under: None,
            file: &file,
            create: true,
            bytes: b"x\n",
        };
        let err = write(None, &w, Duration::from_secs(5))
            .unwrap_err()
            .to_string();
        assert!(
            err.ends_with("node1.jsonl is not yours: not written"),
            "{err}"
        );
        assert_eq!(std::fs::read_to_string(d.join("target")).unwrap(), "kept\n");
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// The child's read and the core's agree on every kind of path: the
    /// same text, or the same refusal.
    #[test]
    fn reads_as_the_cores_reader_does() {
        let d = scratch("read");
        std::fs::write(d.join("hosts"), "node1\nnode2\n").unwrap();
        assert_eq!(
            unsafe { libc::mkfifo(c(&d.join("fifo")).as_ptr(), 0o644) },
            0
        );
        std::fs::File::create(d.join("big"))
            .unwrap()
            .set_len(MAX_USER_FILE + 1)
            .unwrap();
        std::fs::write(d.join("binary"), [0xff, 0xfe]).unwrap();
        std::fs::write(d.join("full"), vec![b'x'; MAX_USER_FILE as usize]).unwrap();
        let path = |name: &str| d.join(name).to_str().unwrap().to_string();
        let cases = [
            (path("hosts"), "node1\nnode2\n"),
            (path("fifo"), "it is a FIFO, not a regular file"),
            (path("."), "it is a directory, not a regular file"),
            (
                "/dev/zero".to_string(),
                "it is a device or socket, not a regular file",
            ),
            (path("big"), "larger than 1048576 bytes"),
            (path("missing"), "No such file or directory (os error 2)"),
            (path("binary"), "not UTF-8 text"),
        ];
        for (file, expected) in &cases {
            let t0 = Instant::now();
            let got = read_user_file(file, Duration::from_secs(5)).map_err(|e| e.to_string());
            assert!(
                t0.elapsed() < Duration::from_secs(4),
                "{file}: {:?}",
                t0.elapsed()
            );
            let core = crate::core::os::read_user_file(file).map_err(|e| e.to_string());
            assert_eq!(got, core, "{file}: the child's read and the core's differ");
            match &got {
                Ok(text) => assert_eq!(text, expected),
                Err(e) => assert!(
                    e.starts_with(&format!("cannot read {file}: ")) && e.ends_with(expected),
                    "{file}: {e}"
                ),
            }
        }
        let full = read_user_file(&path("full"), Duration::from_secs(5)).unwrap();
        assert_eq!(full.len(), MAX_USER_FILE as usize);
        std::fs::remove_dir_all(&d).unwrap();
    }

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
        let d = scratch("fds");
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

    #[test]
    fn a_missing_parent_is_made_and_an_existing_one_left() {
        let d = scratch("deep");
        std::fs::create_dir_all(d.join("a")).unwrap();
        std::fs::write(d.join("a/kept"), "k").unwrap();
        let dirs = [
            c(&d),
            c(&d.join("a")),
            c(&d.join("a/b")),
            c(&d.join("a/b/c")),
        ];
        let file = c(&d.join("a/b/c/node1.jsonl"));
        let w = Write {
            dirs: &dirs,
            under: None,
            file: &file,
            create: true,
            bytes: b"one\n",
        };
        write(None, &w, Duration::from_secs(5)).unwrap();
        assert_eq!(
            std::fs::read_to_string(d.join("a/b/c/node1.jsonl")).unwrap(),
            "one\n"
        );
        assert_eq!(std::fs::read_to_string(d.join("a/kept")).unwrap(), "k");
        std::fs::remove_dir_all(&d).unwrap();
    }
}

#[cfg(test)]
mod under_tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::PermissionsExt;
    use std::path::{Path, PathBuf};

    fn c(p: &Path) -> CString {
        CString::new(p.as_os_str().as_bytes()).unwrap()
    }

    fn scratch(name: &str, mode: u32) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tfc-under-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(mode)).unwrap();
        d
    }

    fn uid() -> String {
        unsafe { libc::geteuid() }.to_string()
    }

    /// Writes node1.jsonl for run 42.0 under `dir`.
    fn node_file(dir: &Path) -> Result<bool, Failed> {
        let (dir_c, user, run, file) = (
            c(dir),
            CString::new(uid()).unwrap(),
            CString::new("42.0").unwrap(),
            CString::new("node1.jsonl").unwrap(),
        );
        let w = Write {
            dirs: std::slice::from_ref(&dir_c),
            under: Some(Under {
                dir: &dir_c,
                user_dir: &user,
                run: &run,
                site_way: None,
            }),
            file: &file,
            create: true,
            bytes: b"one\n",
        };
        write(None, &w, Duration::from_secs(5))
    }

    #[test]
    fn a_private_directory_holds_the_runs_and_a_shared_one_a_directory_per_user() {
        let own = scratch("own", 0o755);
        assert!(!node_file(&own).unwrap());
        assert_eq!(
            std::fs::read_to_string(own.join("42.0/node1.jsonl")).unwrap(),
            "one\n"
        );
        let shared = scratch("shared", 0o1777);
        assert!(node_file(&shared).unwrap());
        let mine = shared.join(uid());
        let mode = std::fs::metadata(&mine).unwrap().permissions().mode();
        assert_eq!(mode & 0o7777, 0o700, "{mode:o}");
        assert_eq!(
            std::fs::read_to_string(mine.join("42.0/node1.jsonl")).unwrap(),
            "one\n"
        );
        // Written afresh a second time (a new incarnation of the file).
        assert!(node_file(&shared).unwrap());
        assert_eq!(
            std::fs::read_to_string(mine.join("42.0/node1.jsonl")).unwrap(),
            "one\n"
        );
        std::fs::remove_dir_all(&own).unwrap();
        std::fs::remove_dir_all(&shared).unwrap();
    }

    #[test]
    fn a_place_not_only_the_users_is_never_written_into() {
        let elsewhere = scratch("elsewhere", 0o777);
        // The user's directory in a shared one: a link, then a directory
        // others may write.
        let shared = scratch("link-user", 0o1777);
        std::os::unix::fs::symlink(&elsewhere, shared.join(uid())).unwrap();
        let err = node_file(&shared).unwrap_err().to_string();
        assert_eq!(
            err,
            format!("{}/{} is not yours: not written", shared.display(), uid())
        );
        std::fs::remove_file(shared.join(uid())).unwrap();
        std::fs::create_dir(shared.join(uid())).unwrap();
        std::fs::set_permissions(shared.join(uid()), std::fs::Permissions::from_mode(0o777))
            .unwrap();
        let err = node_file(&shared).unwrap_err().to_string();
        assert!(err.ends_with("is not yours: not written"), "{err}");
        // The run's directory a link.
        let own = scratch("link-run", 0o755);
        std::os::unix::fs::symlink(&elsewhere, own.join("42.0")).unwrap();
        let err = node_file(&own).unwrap_err().to_string();
        assert_eq!(
            err,
            format!("{}/42.0 is not yours: not written", own.display())
        );
        // Writable by others without the sticky bit: nothing written.
        let open = scratch("open", 0o777);
        let err = node_file(&open).unwrap_err().to_string();
        assert!(
            err.ends_with("is writable by others without the sticky bit: anyone may replace what is written there"),
            "{err}"
        );
        assert_eq!(std::fs::read_dir(&open).unwrap().count(), 0);
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
        for d in [elsewhere, shared, own, open] {
            std::fs::remove_dir_all(&d).unwrap();
        }
    }
}
