//! slurmstepd's side of the step's record (crate::core::record says what it
//! holds). Root never acts on a path the user controls:
//!
//! - `user_init` (once per node, as the job's user: slurmstepd dropped its
//!   privileges) makes the run's directory under the user's `--tf-record`
//!   directory and writes the node's file, with the user's own rights;
//! - `task_exit` (slurmstepd as root, once per task) appends the task's end
//!   from a forked child that first takes the job's user's ids and groups,
//!   then opens the node's file with `O_NOFOLLOW` and without `O_CREAT`:
//!   what it may write is what the user may. The child does a few system
//!   calls and is killed if it has not ended within [`CHILD_LIMIT`] (a hung
//!   file system), so slurmstepd waits a bounded time per task.

use std::ffi::CString;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::handle::Spank;
use crate::core::Node;
use crate::core::record::{exit_line, node_file_name, node_lines, run_dir_name};

/// What `task_exit` needs to append a task's end.
pub struct Record {
    file: CString,
    /// The run's directory, made by `user_init`.
    run_dir: String,
    host: String,
    uid: libc::uid_t,
    gid: libc::gid_t,
    groups: Vec<libc::gid_t>,
    /// Each local task's rank.
    ranks: Vec<u32>,
}

/// Longest a task's end may take to be written.
const CHILD_LIMIT: Duration = Duration::from_secs(2);

/// In `user_init`: logs the node's line when the admin asked, and writes
/// the node's file when the step asked for a record. A record that cannot
/// be written is said in slurmd's log and on the user's terminal, never
/// fails the step.
pub fn begin(spank: &Spank, node: &Node) -> Option<Record> {
    let settings = node.settings();
    if !settings.record_log && settings.record.is_none() {
        return None;
    }
    let run_id = node.step().run_id()?;
    let host = node.step().nodename.clone().unwrap_or_default();
    let here = node.here();
    if settings.record_log {
        let ranks: Vec<String> = here.iter().map(|(r, _)| r.to_string()).collect();
        // `warn` is Slurm's info level (super::logger).
        log::warn!(
            "step {run_id} on {host}: ranks {} of {} (record {})",
            ranks.join(","),
            node.num_tasks(),
            settings.record.as_deref().unwrap_or("none")
        );
    }
    let dir = settings.record.as_deref()?;
    match write_node(spank, node, dir, &run_id, &host) {
        Ok((file, run_dir)) => Some(Record {
            file,
            run_dir,
            host,
            uid: spank.job_uid().ok()?,
            gid: spank.job_gid().ok()?,
            groups: groups(),
            ranks: here.iter().map(|&(rank, _)| rank).collect(),
        }),
        Err(why) => {
            log::error!("no record of step {run_id} in {dir}: {why}");
            None
        }
    }
}

/// The run's directory and the node's file, as the job's user.
fn write_node(
    spank: &Spank,
    node: &Node,
    dir: &str,
    run_id: &str,
    host: &str,
) -> std::result::Result<(CString, String), String> {
    // SAFETY: geteuid cannot fail.
    let euid = unsafe { libc::geteuid() };
    let uid = spank.job_uid().map_err(|e| e.to_string())?;
    if euid != uid {
        return Err("slurmstepd does not run as the job's user here".into());
    }
    let run = run_dir_name(run_id).ok_or("no run id")?;
    let name = node_file_name(host).ok_or_else(|| format!("{host:?} is no file name"))?;
    let run_dir = std::path::Path::new(dir).join(run);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(&run_dir)
        .map_err(|e| format!("cannot make {}: {e}", run_dir.display()))?;
    let path = run_dir.join(name);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    file.write_all(node_lines(node, run_id).as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    let run_dir = run_dir.to_str().ok_or("not UTF-8")?.to_string();
    let file =
        CString::new(path.into_os_string().into_encoded_bytes()).map_err(|_| "NUL in the path")?;
    Ok((file, run_dir))
}

impl Record {
    /// The run's directory.
    pub fn run_dir(&self) -> &str {
        &self.run_dir
    }
}

/// The calling process's supplementary groups: in `user_init`, the job's
/// user's, as slurmstepd set them when dropping its privileges.
fn groups() -> Vec<libc::gid_t> {
    // SAFETY: with 0, getgroups only counts.
    let n = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
    let mut list = vec![0; usize::try_from(n).unwrap_or(0).min(65_536)];
    // SAFETY: `list` has room for its length's entries.
    let got = unsafe { libc::getgroups(list.len() as libc::c_int, list.as_mut_ptr()) };
    list.truncate(usize::try_from(got).unwrap_or(0));
    list
}

/// In `task_exit` (slurmstepd, root): appends the task's end to the node's
/// file as the job's user.
pub fn task_exit(spank: &Spank, record: &Record) {
    let (Ok(local), Ok(status)) = (spank.task_id(), spank.task_exit_status()) else {
        return;
    };
    let Some(&rank) = record.ranks.get(local as usize) else {
        return;
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let line = exit_line(rank, local, &record.host, status, now);
    if let Err(why) = append_as_user(record, line.as_bytes()) {
        log::warn!("record: rank {rank}'s end not written: {why}");
    }
}

/// Forks a child that becomes the job's user and appends `line`; waits for
/// it at most [`CHILD_LIMIT`].
fn append_as_user(record: &Record, line: &[u8]) -> std::result::Result<(), String> {
    // Everything the child uses is made before the fork: the child of a
    // multi-threaded process only makes system calls.
    let groups = &record.groups;
    // SAFETY: fork; the child below makes only async-signal-safe calls and
    // always ends in _exit.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error().to_string());
    }
    if pid == 0 {
        // SAFETY: system calls on values made before the fork; _exit ends
        // the child without running anything of the parent's.
        unsafe {
            let ok = libc::setgroups(groups.len(), groups.as_ptr()) == 0
                && libc::setgid(record.gid) == 0
                && libc::setuid(record.uid) == 0
                && libc::getuid() == record.uid
                && libc::geteuid() == record.uid;
            if !ok {
                libc::_exit(2);
            }
            let fd = libc::open(
                record.file.as_ptr(),
                libc::O_WRONLY | libc::O_APPEND | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            );
            if fd < 0 {
                libc::_exit(3);
            }
            let n = libc::write(fd, line.as_ptr().cast(), line.len());
            libc::close(fd);
            libc::_exit(if n == line.len() as isize { 0 } else { 4 });
        }
    }
    let start = Instant::now();
    loop {
        let mut status = 0;
        // SAFETY: waits for this function's own child.
        let done = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if done == pid {
            return match libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)) {
                Some(0) => Ok(()),
                Some(2) => Err("cannot take the job's user's ids".into()),
                Some(3) => Err("cannot open the node's file as the job's user".into()),
                _ => Err("cannot write the node's file".into()),
            };
        }
        if done < 0 || start.elapsed() > CHILD_LIMIT {
            // SAFETY: this function's own child, then reaped.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return Err(format!("took over {CHILD_LIMIT:?}"));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}
