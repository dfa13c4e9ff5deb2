//! The record directory's ownership rules, in the child that writes a
//! record (super::bounded_io): a run's directory below a record's directory,
//! each directory made and opened relative to the one above without
//! following a link, and written into only where it is the user's own; in a
//! shared directory, the user's own directory first, made as root only in
//! the admin's own directory on a way that is root's all along.

use std::ffi::CString;

use super::bounded_child::{IDS, MKDIR, NOT_REGULAR, NOT_YOURS, OPEN, ROOT, fail, fail_with};
use crate::core::record::{Runs, admins_own, only_theirs, roots_way, runs_under};

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

/// The path of a write's place, for its message.
pub(super) fn place(u: &Under, per_user: bool, which: u32, file: &CString) -> String {
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

pub(super) fn not_yours(which: u32) -> u32 {
    (u32::from(NOT_YOURS) << 24) | which
}

/// A directory's owner and mode, or the child's word.
pub(super) fn dir_stat(fd: libc::c_int) -> Result<(u32, u32), u32> {
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
pub(super) fn own_dir_at(
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
pub(super) fn run_dir_fd(u: &Under) -> Result<(libc::c_int, u32), u32> {
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
pub(super) fn on_roots_way(dir: libc::c_int, way: &[CString]) -> bool {
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
pub(super) fn make_as_root(dir: libc::c_int, way: &[CString], name: &CString) -> Result<(), u32> {
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
