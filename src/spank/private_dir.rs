//! The step's private directory on a node (`/tmp/tfc-ray-ID` of a
//! `--ray-cluster` step, core::frameworks::ray), removed by slurmstepd when
//! the step ends, however it ends (`scancel` included, when the task had no
//! time to remove it itself): as the job's user, in a forked child killed
//! at its deadline (super::bounded_io), never following a link, and only a
//! directory the user owns.

use std::ffi::{CStr, CString};
use std::time::Duration;

use super::bounded_child::{DONE, IDS, Ids, SharedMap, errno, fail, in_child, take_ids};
use crate::core::record::printable;

/// Longest the removal may take, once per node at the step's end.
const LIMIT: Duration = Duration::from_secs(5);
/// The child stops this long before [`LIMIT`], to say what it left.
const MARGIN: Duration = Duration::from_millis(500);
/// Most directories the child holds open at once (Ray's tree is five
/// deep; RLIMIT_NOFILE is 1,024 or more): past them it lets go of all but
/// the private directory and the one it is in, and walks down again from
/// the top for the rest, so a tree of any depth goes without recursion.
const HELD: usize = 256;
const OPEN: u8 = 2;
const NOT_OWN: u8 = 3;
const REMOVE: u8 = 4;
/// Out of its time: the child stopped to say what it left.
const LATE: u8 = 5;
/// The child's report in the mapping it shares with slurmstepd: how deep
/// it stopped (u32), the entries it removed (u32), the entry it could not
/// remove (a name of at most NAME_MAX bytes, NUL-terminated).
const REPORT_LEN: usize = 8 + 256;
const DIR_FLAGS: libc::c_int =
    libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;

/// What to remove at the step's end, and as whom.
pub struct PrivateDir {
    parent: CString,
    name: CString,
    ids: Ids,
    /// How long the child works before it stops to say what it left.
    budget: Duration,
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
            budget: LIMIT - MARGIN,
        })
    }

    /// Removes the directory and all inside it, however deep; a missing
    /// one is no error. Err: what was left and why.
    pub fn remove(&self) -> Result<(), String> {
        let report = SharedMap::new(REPORT_LEN).map_err(|e| e.to_string())?;
        let (stage, value) = in_child(self.budget + MARGIN, || remove_child(self, &report))
            .map_err(|e| e.to_string())?;
        let os = std::io::Error::from_raw_os_error(value as i32);
        match stage {
            DONE => Ok(()),
            IDS => Err(format!("cannot take the job's user's ids: {os}")),
            NOT_OWN => Err("it is not a directory of the job's user".into()),
            OPEN => Err(format!("cannot open it: {os}")),
            _ => Err(left(&report, stage, &os, self.budget)),
        }
    }

    /// The same with the child's budget `budget` (a test's, shorter).
    #[cfg(test)]
    fn with_budget(self, budget: Duration) -> PrivateDir {
        PrivateDir { budget, ..self }
    }

    pub fn path(&self) -> String {
        format!(
            "{}/{}",
            self.parent.to_string_lossy().trim_end_matches('/'),
            self.name.to_string_lossy()
        )
    }
}

/// What the child left and why, from its report.
fn left(report: &SharedMap, stage: u8, os: &std::io::Error, budget: Duration) -> String {
    let bytes = report.bytes(REPORT_LEN);
    let word =
        |at: usize| u32::from_ne_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    let (depth, removed) = (word(0), word(4));
    let name = CStr::from_bytes_until_nul(&bytes[8..])
        .map(|n| printable(&n.to_string_lossy()))
        .unwrap_or_default();
    if stage == LATE {
        return format!(
            "out of its {budget:?}, {depth} levels down: {removed} entries removed, the rest left"
        );
    }
    if name.is_empty() {
        return format!("cannot remove it: {os} ({removed} entries removed)");
    }
    format!(
        "cannot remove {name}, {depth} levels down: {os} ({removed} entries removed, the rest left)"
    )
}

/// The child's work: system calls only, on values made before the fork
/// (the report's mapping, the paths), its walk's state on its own stack.
fn remove_child(dir: &PrivateDir, report: &SharedMap) -> u32 {
    let deadline = add(now(), dir.budget);
    if !take_ids(&dir.ids) {
        return fail(IDS);
    }
    // SAFETY: system calls on C strings made before the fork.
    unsafe {
        let parent = libc::open(dir.parent.as_ptr(), DIR_FLAGS & !libc::O_NOFOLLOW);
        if parent < 0 {
            return fail(OPEN);
        }
        let fd = libc::openat(parent, dir.name.as_ptr(), DIR_FLAGS);
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
        let mut walk = Walk::new(fd, st.st_dev, deadline, report);
        // Ray's processes may still be ending and writing: a few passes.
        let mut word = fail(REMOVE);
        for _ in 0..20 {
            word = match walk.run() {
                Ok(()) => {
                    if libc::unlinkat(parent, dir.name.as_ptr(), libc::AT_REMOVEDIR) == 0
                        || errno() == libc::ENOENT as u32
                    {
                        return u32::from(DONE);
                    }
                    walk.stop(REMOVE, errno(), None)
                }
                Err(word) => word,
            };
            if word >> 24 == u32::from(LATE) || !walk.pause() {
                break;
            }
        }
        word
    }
}

/// The monotonic clock (async-signal-safe).
fn now() -> libc::timespec {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: into a struct of ours.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t
}

fn add(t: libc::timespec, d: Duration) -> libc::timespec {
    let nanos = t.tv_nsec as u64 + u64::from(d.subsec_nanos());
    libc::timespec {
        tv_sec: t.tv_sec + d.as_secs() as libc::time_t + (nanos / 1_000_000_000) as libc::time_t,
        tv_nsec: (nanos % 1_000_000_000) as libc::c_long,
    }
}

fn before(t: libc::timespec, deadline: libc::timespec) -> bool {
    (t.tv_sec, t.tv_nsec) < (deadline.tv_sec, deadline.tv_nsec)
}

/// What became of one entry of a directory.
enum Entry {
    Removed,
    Gone,
    /// A directory with entries: to go down into.
    NotEmpty,
    Failed(u32),
}

/// The child's walk down the tree, without recursion: the directories it
/// holds open, the private one first, and what it says when it stops.
struct Walk<'a> {
    held: [libc::c_int; HELD],
    len: usize,
    /// How far below the private directory the last one held is.
    depth: u32,
    /// The private directory's file system: the walk never leaves it.
    dev: libc::dev_t,
    deadline: libc::timespec,
    removed: u32,
    /// The directory the last scan found to go down into.
    sub: [u8; 256],
    report: &'a SharedMap,
}

impl Walk<'_> {
    fn new(
        top: libc::c_int,
        dev: libc::dev_t,
        deadline: libc::timespec,
        report: &SharedMap,
    ) -> Walk<'_> {
        let mut held = [-1; HELD];
        held[0] = top;
        Walk {
            held,
            len: 1,
            depth: 0,
            dev,
            deadline,
            removed: 0,
            sub: [0; 256],
            report,
        }
    }

    /// Empties the private directory, from the top: Err(the child's word)
    /// where something is left.
    fn run(&mut self) -> Result<(), u32> {
        self.keep(1);
        loop {
            if self.late() {
                return Err(self.stop(LATE, 0, None));
            }
            let cur = self.held[self.len - 1];
            let before = self.removed;
            if self.scan(cur)? {
                self.descend(cur)?;
            } else if self.removed != before {
                // Entries removed while reading may hide others: read again.
                continue;
            } else if self.len == 1 {
                return Ok(());
            } else {
                // Empty: the scan above it removes it.
                self.keep(self.len - 1);
            }
        }
    }

    /// One pass over the directory `fd`: every entry that can go removed
    /// (files, links, empty directories; a link never followed): whether a
    /// directory with entries was found (in `sub`) to go down into.
    fn scan(&mut self, fd: libc::c_int) -> Result<bool, u32> {
        let mut buf = [0u8; 4096];
        let mut deeper = false;
        // SAFETY: getdents64 into `buf`, entries parsed within what it
        // filled; the names are NUL-terminated by the kernel.
        unsafe {
            libc::lseek(fd, 0, libc::SEEK_SET);
            loop {
                let n = libc::syscall(libc::SYS_getdents64, fd, buf.as_mut_ptr(), buf.len());
                if n <= 0 {
                    return if n == 0 {
                        Ok(deeper)
                    } else {
                        Err(self.stop(REMOVE, errno(), None))
                    };
                }
                let mut at = 0usize;
                while at < n as usize {
                    let reclen = u16::from_ne_bytes([buf[at + 16], buf[at + 17]]) as usize;
                    let name = CStr::from_ptr(buf.as_ptr().add(at + 19).cast());
                    at += reclen.max(1);
                    if matches!(name.to_bytes(), b"." | b"..") {
                        continue;
                    }
                    if self.late() {
                        return Err(self.stop(LATE, 0, None));
                    }
                    match remove_entry(fd, name) {
                        Entry::Removed => self.removed += 1,
                        Entry::Gone => {}
                        Entry::NotEmpty if !deeper => {
                            let bytes = name.to_bytes_with_nul();
                            self.sub[..bytes.len()].copy_from_slice(bytes);
                            deeper = true;
                        }
                        Entry::NotEmpty => {}
                        Entry::Failed(e) => return Err(self.stop(REMOVE, e, Some(name))),
                    }
                }
            }
        }
    }

    /// Goes down into `sub` of `cur`, never following a link nor leaving
    /// the file system; where [`HELD`] directories are open, lets go of
    /// those between the private one and `cur` first.
    fn descend(&mut self, cur: libc::c_int) -> Result<(), u32> {
        let name = CStr::from_bytes_until_nul(&self.sub).unwrap_or_default();
        // SAFETY: system calls on the child's descriptors and its buffer.
        unsafe {
            let sub = libc::openat(cur, name.as_ptr(), DIR_FLAGS);
            if sub < 0 {
                return match *libc::__errno_location() {
                    // Gone, or a link now in its place: the next scan
                    // removes what is there.
                    libc::ENOENT | libc::ELOOP | libc::ENOTDIR => Ok(()),
                    libc::EMFILE | libc::ENFILE if self.len > 2 => {
                        self.let_go();
                        Ok(())
                    }
                    _ => Err(self.stop(REMOVE, errno(), Some(name))),
                };
            }
            let mut st: libc::stat = std::mem::zeroed();
            let differs = match libc::fstat(sub, &mut st) {
                0 if st.st_dev == self.dev => None,
                // A file system mounted there: not the step's to empty.
                0 => Some(libc::EXDEV as u32),
                _ => Some(errno()),
            };
            if let Some(e) = differs {
                libc::close(sub);
                return Err(self.stop(REMOVE, e, Some(name)));
            }
            if self.len == HELD {
                self.let_go();
            }
            self.held[self.len] = sub;
        }
        self.len += 1;
        self.depth += 1;
        Ok(())
    }

    /// Closes all held but the first `n` (the private directory at least);
    /// the depth is then the last one's.
    fn keep(&mut self, n: usize) {
        while self.len > n.max(1) {
            self.len -= 1;
            // SAFETY: a descriptor of the walk's own.
            unsafe { libc::close(self.held[self.len]) };
            self.depth = self.depth.saturating_sub(1);
        }
        if self.len == 1 {
            self.depth = 0;
        }
    }

    /// Lets go of the directories between the private one and the last
    /// one held (a later walk from the top finds what is left in them).
    fn let_go(&mut self) {
        if self.len <= 2 {
            return;
        }
        let last = self.held[self.len - 1];
        for &fd in &self.held[1..self.len - 1] {
            // SAFETY: descriptors of the walk's own.
            unsafe { libc::close(fd) };
        }
        self.held[1] = last;
        self.len = 2;
    }

    fn late(&self) -> bool {
        !before(now(), self.deadline)
    }

    /// A tenth of a second between passes: false where that is past the
    /// deadline.
    fn pause(&self) -> bool {
        let pause = libc::timespec {
            tv_sec: 0,
            tv_nsec: 100_000_000,
        };
        if !before(add(now(), Duration::from_millis(100)), self.deadline) {
            return false;
        }
        // SAFETY: a sleep.
        unsafe { libc::nanosleep(&pause, std::ptr::null_mut()) };
        true
    }

    /// The child's word for stopping at `stage` with `errno`, and its report
    /// in the shared mapping: the depth, the entries removed, the entry left.
    fn stop(&self, stage: u8, errno: u32, name: Option<&CStr>) -> u32 {
        let name = name.map_or(&b""[..], CStr::to_bytes);
        let n = name.len().min(REPORT_LEN - 9);
        // SAFETY: within the mapping of REPORT_LEN bytes made before the
        // fork, which the parent reads only once the child has ended.
        unsafe {
            let p = self.report.ptr;
            std::ptr::copy_nonoverlapping(self.depth.to_ne_bytes().as_ptr(), p, 4);
            std::ptr::copy_nonoverlapping(self.removed.to_ne_bytes().as_ptr(), p.add(4), 4);
            std::ptr::copy_nonoverlapping(name.as_ptr(), p.add(8), n);
            *p.add(8 + n) = 0;
        }
        (u32::from(stage) << 24) | (errno & 0x00ff_ffff)
    }
}

/// Removes one entry of the directory `fd`: a file or link at once (never
/// followed), a directory if empty.
fn remove_entry(fd: libc::c_int, name: &CStr) -> Entry {
    // SAFETY: system calls on the child's own descriptor and a name in
    // its buffer.
    unsafe {
        if libc::unlinkat(fd, name.as_ptr(), 0) == 0 {
            return Entry::Removed;
        }
        let first = errno();
        match first as libc::c_int {
            libc::ENOENT => return Entry::Gone,
            libc::EISDIR | libc::EPERM => {}
            _ => return Entry::Failed(first),
        }
        if libc::unlinkat(fd, name.as_ptr(), libc::AT_REMOVEDIR) == 0 {
            return Entry::Removed;
        }
        match *libc::__errno_location() {
            libc::ENOENT => Entry::Gone,
            libc::ENOTEMPTY | libc::EEXIST => Entry::NotEmpty,
            // Not a directory: the file's own refusal (EPERM) is the why.
            libc::ENOTDIR => Entry::Failed(first),
            _ => Entry::Failed(errno()),
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

    /// `levels` directories `d` one inside the other below `top`, a file
    /// in each: the deepest.
    fn chain(top: &std::path::Path, levels: usize) -> PathBuf {
        let mut deep = top.to_path_buf();
        for _ in 0..levels {
            deep = deep.join("d");
        }
        std::fs::create_dir_all(&deep).unwrap();
        let mut at = deep.clone();
        while at.starts_with(top) {
            std::fs::write(at.join("f"), "x").unwrap();
            at.pop();
        }
        deep
    }

    /// 200 levels (far below any stack's end) and 1,000 (past the
    /// directories held open at once): removed whole, the link at the
    /// bottom not followed.
    #[test]
    fn a_tree_of_any_depth_is_removed() {
        for levels in [200, 1000] {
            let base = scratch(&format!("deep{levels}"));
            let outside = base.join("outside");
            std::fs::create_dir_all(&outside).unwrap();
            std::fs::write(outside.join("keep"), "x").unwrap();
            let private = base.join("tfc-ray-deep");
            let deep = chain(&private, levels);
            symlink(&outside, deep.join("escape")).unwrap();
            let dir = PrivateDir::new(private.to_str().unwrap(), ids()).unwrap();
            dir.remove().unwrap();
            assert!(!private.exists(), "{levels} levels");
            assert!(outside.join("keep").exists(), "followed a link");
            std::fs::remove_dir_all(&base).unwrap();
        }
    }

    /// A file the job's user may not remove (in root's directory, 40
    /// levels down): named, with the errno that refused it, the rest gone.
    #[test]
    fn what_is_left_is_named_with_its_true_errno() {
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED: needs root, to remove as another user");
            return;
        }
        let base = scratch("left");
        let private = base.join("tfc-ray-left");
        let deep = chain(&private, 40);
        let roots = deep.join("roots");
        std::fs::create_dir(&roots).unwrap();
        std::fs::write(roots.join("kept"), "x").unwrap();
        let nobody = 65534;
        for entry in walk(&private) {
            if !entry.starts_with(&roots) || entry == roots {
                std::os::unix::fs::lchown(&entry, Some(nobody), Some(nobody)).unwrap();
            }
        }
        std::os::unix::fs::chown(&roots, Some(0), Some(0)).unwrap();
        let ids = Ids {
            uid: nobody,
            gid: nobody,
            groups: vec![nobody],
        };
        let dir = PrivateDir::new(private.to_str().unwrap(), ids).unwrap();
        let err = dir.remove().unwrap_err();
        // Gone first: the 41 files `f` above it, one a level.
        assert_eq!(
            err,
            "cannot remove kept, 41 levels down: Permission denied (os error 13) (41 entries removed, the rest left)"
        );
        assert!(roots.join("kept").exists());
        assert!(!deep.join("f").exists(), "the rest is removed");
        std::fs::remove_dir_all(&base).unwrap();
    }

    /// A removal that cannot end within its budget (5,000 files, 1 ms)
    /// stops in time and says how many entries went: as many as are gone.
    #[test]
    fn a_removal_out_of_time_says_what_it_left() {
        let base = scratch("late");
        let private = base.join("tfc-ray-late");
        chain(&private, 3);
        for i in 0..5000 {
            std::fs::write(private.join(format!("f{i}")), "x").unwrap();
        }
        let before = walk(&private).len();
        let dir = PrivateDir::new(private.to_str().unwrap(), ids())
            .unwrap()
            .with_budget(Duration::from_millis(1));
        let err = dir.remove().unwrap_err();
        let after = walk(&private).len();
        assert!(after > 1, "nothing left: {err}");
        let said = format!(
            "out of its 1ms, 0 levels down: {} entries removed, the rest left",
            before - after
        );
        assert_eq!(err, said);
        // Given its time, the same goes whole.
        PrivateDir::new(private.to_str().unwrap(), ids())
            .unwrap()
            .remove()
            .unwrap();
        assert!(!private.exists());
        std::fs::remove_dir_all(&base).unwrap();
    }

    /// Every path below `top`, `top` first.
    fn walk(top: &std::path::Path) -> Vec<PathBuf> {
        let mut all = vec![top.to_path_buf()];
        let mut i = 0;
        while i < all.len() {
            if std::fs::symlink_metadata(&all[i]).unwrap().is_dir() {
                for e in std::fs::read_dir(&all[i]).unwrap() {
                    all.push(e.unwrap().path());
                }
            }
            i += 1;
        }
        all
    }
}
