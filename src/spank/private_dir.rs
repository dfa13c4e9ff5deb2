//! The step's private directory on a node (`/tmp/tfc-ray-ID` of a
//! `--ray-cluster` step, core::frameworks::ray), removed by slurmstepd when
//! the step ends, however it ends (`scancel` included, when the task had no
//! time to remove it itself): as the job's user, in a forked child killed
//! at its deadline (super::bounded_io), never following a link, and only a
//! directory the user owns.

use std::ffi::{CStr, CString};
use std::time::Duration;

use super::bounded_io::{DONE, IDS, Ids, errno, fail, in_child, take_ids};

/// Longest the removal may take, once per node at the step's end.
const LIMIT: Duration = Duration::from_secs(5);
/// Deepest directory below the private one that is emptied (Ray's tree is
/// five deep): a deeper one is left, as the user's own.
const MAX_DEPTH: u32 = 32;
const OPEN: u8 = 2;
const NOT_OWN: u8 = 3;
const REMOVE: u8 = 4;

/// What to remove at the step's end, and as whom.
pub struct PrivateDir {
    parent: CString,
    name: CString,
    ids: Ids,
}

impl PrivateDir {
    /// `path` (an absolute path of two parts or more) to remove as `ids`.
    pub fn new(path: &str, ids: Ids) -> Option<PrivateDir> {
        let (parent, name) = path.rsplit_once('/')?;
        let parent = if parent.is_empty() { "/" } else { parent };
        Some(PrivateDir {
            parent: CString::new(parent).ok()?,
            name: CString::new(name).ok().filter(|n| !n.is_empty())?,
            ids,
        })
    }

    /// Removes the directory and all inside it; a missing one is no error.
    pub fn remove(&self) -> Result<(), String> {
        let (stage, value) = in_child(LIMIT, || remove_child(self)).map_err(|e| e.to_string())?;
        let os = std::io::Error::from_raw_os_error(value as i32);
        match stage {
            DONE => Ok(()),
            IDS => Err(format!("cannot take the job's user's ids: {os}")),
            NOT_OWN => Err("it is not a directory of the job's user".into()),
            OPEN => Err(format!("cannot open it: {os}")),
            _ => Err(format!("cannot remove what is inside: {os}")),
        }
    }

    pub fn path(&self) -> String {
        format!(
            "{}/{}",
            self.parent.to_string_lossy().trim_end_matches('/'),
            self.name.to_string_lossy()
        )
    }
}

/// The child's work: system calls only, on values made before the fork.
fn remove_child(dir: &PrivateDir) -> u32 {
    if !take_ids(&dir.ids) {
        return fail(IDS);
    }
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: system calls on C strings made before the fork.
    unsafe {
        let parent = libc::open(dir.parent.as_ptr(), flags & !libc::O_NOFOLLOW);
        if parent < 0 {
            return fail(OPEN);
        }
        let fd = libc::openat(parent, dir.name.as_ptr(), flags);
        if fd < 0 {
            return match *libc::__errno_location() {
                libc::ENOENT => u32::from(DONE),
                _ => fail(OPEN),
            };
        }
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut st) != 0 || st.st_uid != dir.ids.uid {
            return u32::from(NOT_OWN) << 24;
        }
        // Ray's processes may still be ending and writing: a few passes.
        let mut result = fail(REMOVE);
        for _ in 0..20 {
            if empty(fd, 0).is_ok()
                && libc::unlinkat(parent, dir.name.as_ptr(), libc::AT_REMOVEDIR) == 0
            {
                result = u32::from(DONE);
                break;
            }
            result = fail(REMOVE);
            let pause = libc::timespec {
                tv_sec: 0,
                tv_nsec: 100_000_000,
            };
            libc::nanosleep(&pause, std::ptr::null_mut());
        }
        result
    }
}

/// Removes everything in the directory `fd`, subdirectories first emptied
/// the same way (each opened without following a link): Err(errno) when
/// something is left.
fn empty(fd: libc::c_int, depth: u32) -> Result<(), u32> {
    if depth > MAX_DEPTH {
        return Err(libc::ELOOP as u32);
    }
    let mut buf = [0u8; 4096];
    loop {
        let (mut removed, mut left) = (false, None);
        // SAFETY: getdents64 into `buf`, entries parsed within what it
        // filled; the names are NUL-terminated by the kernel.
        unsafe {
            libc::lseek(fd, 0, libc::SEEK_SET);
            loop {
                let n = libc::syscall(libc::SYS_getdents64, fd, buf.as_mut_ptr(), buf.len());
                if n < 0 {
                    return Err(errno());
                }
                if n == 0 {
                    break;
                }
                let mut at = 0usize;
                while at < n as usize {
                    let reclen = u16::from_ne_bytes([buf[at + 16], buf[at + 17]]) as usize;
                    let name = CStr::from_ptr(buf.as_ptr().add(at + 19).cast());
                    at += reclen.max(1);
                    if matches!(name.to_bytes(), b"." | b"..") {
                        continue;
                    }
                    match remove_entry(fd, name, depth) {
                        Ok(()) => removed = true,
                        Err(e) => left = Some(e),
                    }
                }
            }
        }
        match left {
            None => return Ok(()),
            // Entries removed while reading may hide others: read again.
            Some(_) if removed => continue,
            Some(e) => return Err(e),
        }
    }
}

/// Removes one entry of the directory `fd`: a file or link at once, a
/// directory emptied first.
fn remove_entry(fd: libc::c_int, name: &CStr, depth: u32) -> Result<(), u32> {
    // SAFETY: system calls on the child's own descriptors and a name in
    // its buffer.
    unsafe {
        if libc::unlinkat(fd, name.as_ptr(), 0) == 0 {
            return Ok(());
        }
        match *libc::__errno_location() {
            libc::ENOENT => return Ok(()),
            libc::EISDIR | libc::EPERM => {}
            _ => return Err(errno()),
        }
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        let sub = libc::openat(fd, name.as_ptr(), flags);
        if sub < 0 {
            return Err(errno());
        }
        let emptied = empty(sub, depth + 1);
        libc::close(sub);
        emptied?;
        if libc::unlinkat(fd, name.as_ptr(), libc::AT_REMOVEDIR) == 0 {
            Ok(())
        } else {
            Err(errno())
        }
    }
}

/// The ids of the process (the tests run as themselves).
#[cfg(test)]
fn own_ids() -> Ids {
    // SAFETY: plain getters.
    unsafe {
        Ids {
            uid: libc::getuid(),
            gid: libc::getgid(),
            groups: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;
    use std::path::PathBuf;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tfc-private-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Groups are dropped only where the tests run as root (setgroups needs
    /// it); elsewhere the child keeps the process's own.
    fn ids() -> Ids {
        let mut ids = own_ids();
        if unsafe { libc::geteuid() } != 0 {
            ids.groups = vec![ids.gid];
        }
        ids
    }

    /// Ray's tree (0777 directories, sockets, files, a link out) goes whole;
    /// what the link names stays.
    #[test]
    fn removes_the_tree_without_following_links() {
        let base = scratch("tree");
        let outside = base.join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("keep"), "x").unwrap();
        let private = base.join("tfc-ray-0011223344556677");
        let session = private.join("ray/session_1/sockets");
        std::fs::create_dir_all(&session).unwrap();
        std::fs::write(session.join("raylet.out"), "log").unwrap();
        std::os::unix::net::UnixListener::bind(session.join("raylet")).unwrap();
        symlink(&outside, private.join("ray/session_latest")).unwrap();
        symlink(&outside, session.join("escape")).unwrap();
        let dir = PrivateDir::new(private.to_str().unwrap(), ids()).unwrap();
        dir.remove().unwrap();
        assert!(!private.exists());
        assert!(outside.join("keep").exists(), "followed a link");
        // Gone already: no error.
        dir.remove().unwrap();
        let _ = std::fs::remove_dir_all(&base);
    }

    /// A link where the directory goes is not followed, and not removed
    /// as if it were the directory.
    #[test]
    fn a_link_in_the_directorys_place_is_refused() {
        let base = scratch("link");
        let target = base.join("target");
        std::fs::create_dir_all(&target).unwrap();
        std::fs::write(target.join("keep"), "x").unwrap();
        let private = base.join("tfc-ray-link");
        symlink(&target, &private).unwrap();
        let dir = PrivateDir::new(private.to_str().unwrap(), ids()).unwrap();
        let e = dir.remove().unwrap_err();
        assert!(e.contains("cannot open"), "{e}");
        assert!(target.join("keep").exists());
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn a_path_names_its_parent_and_name() {
        let dir = PrivateDir::new("/tmp/tfc-ray-ab", own_ids()).unwrap();
        assert_eq!(dir.path(), "/tmp/tfc-ray-ab");
        assert!(PrivateDir::new("/tmp/", own_ids()).is_none());
        assert!(PrivateDir::new("relative", own_ids()).is_none());
    }

    /// Deeper than [`MAX_DEPTH`] is left (and said), never a stack
    /// exhausted in slurmstepd's child.
    #[test]
    fn a_tree_too_deep_is_left() {
        let base = scratch("deep");
        let private = base.join("tfc-ray-deep");
        let mut deep = private.clone();
        for _ in 0..MAX_DEPTH + 3 {
            deep = deep.join("d");
        }
        std::fs::create_dir_all(&deep).unwrap();
        let dir = PrivateDir::new(private.to_str().unwrap(), ids()).unwrap();
        assert!(dir.remove().is_err());
        let _ = std::fs::remove_dir_all(&base);
    }
}
