//! Files of the user's read and written from slurmstepd in a bounded time:
//! a forked child does the system calls (with the job's user's ids where
//! slurmstepd runs as root) and is killed at its deadline, so a hung file
//! system, or a FIFO the user put where a file goes, never holds the step's
//! launch or its end. The child opens without blocking (a FIFO fails at
//! once) and reads or writes only a regular file; a write never follows a
//! last symlink. A read comes back through a shared mapping, never larger
//! than the core's cap on a user's file.
//!
//! The child and its deadline: super::bounded_child; the record directory's
//! rules for a write below it: super::record_dir.

use std::ffi::CString;
use std::time::Duration;

use super::bounded_child::{
    DONE, Failed, IDS, Ids, MKDIR, NOT_REGULAR, NOT_YOURS, OPEN, READ, ROOT, SharedMap, WRITE,
    fail, fail_with, in_child, take_ids,
};
use super::record_dir::{
    PER_USER, PLACE_FILE, PLACE_SHARED_DIR, PLACE_USER_DIR, Under, not_yours, place, run_dir_fd,
};
use crate::core::os::{MAX_USER_FILE, not_a_regular_file, user_file_refused, user_file_text};

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::OpenOptionsExt;
    use std::path::{Path, PathBuf};
    use std::time::Instant;

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
