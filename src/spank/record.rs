//! slurmstepd's side of the step's record (crate::core::record says what it
//! holds). Root never acts on a path the user controls, and no write holds
//! slurmstepd longer than its limit (super::bounded_io: a forked child,
//! killed at its deadline; a FIFO or a symlink where the file goes fails):
//!
//! - `user_init` (once per node, as the job's user: slurmstepd dropped its
//!   privileges) makes the run's directory under the `--tf-record`
//!   directory and writes the node's file, with the user's own rights,
//!   within [`NODE_LIMIT`]. In a shared directory (another's, or `/tmp`'s
//!   1777) the runs go under the user's own directory in it (`DIR/<uid>`,
//!   0700); each directory below `DIR` is made and opened relative to the
//!   one above without following a link, and a directory or node file that
//!   is not the user's own is never written into (the step runs without a
//!   record, and one line says why). In the site's own record directory
//!   alone (plugstack.conf's `record=`, root's, writable by no one else, on
//!   a path of root's with no link) a missing `DIR/<uid>` is made as root
//!   and given to the user (super::record_dir::Under::site_way): slurmstepd
//!   runs `user_init` with the user's effective uid and root's saved one;
//! - `task_exit` (slurmstepd as root, once per task) appends the task's end
//!   from a child that first takes the job's user's ids and groups, then
//!   opens the node's file without `O_CREAT`: what it may write is what the
//!   user may, within [`TASK_LIMIT`] per task and [`ENDS_BUDGET`] for all
//!   the node's tasks: once it is spent (a slow or hung file system), the
//!   node's later ends are not written.

use std::ffi::CString;
use std::path::Path;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::bounded_child::{Failed, Ids};
use super::bounded_io;
use super::handle::Spank;
use super::record_dir::Under;
use crate::core::Node;
use crate::core::record::{
    NodeLine, exit_line, node_file_name, node_lines_placed, run_dir_name, user_dir_name,
};
use crate::core::settings::Settings;

/// What `task_exit` needs to append a task's end.
pub struct Record {
    file: CString,
    /// The run's directory, made by `user_init`.
    run_dir: String,
    host: String,
    /// The job's user's, taken by the child that appends.
    ids: Ids,
    /// Each local task's rank (None: a step without a framework option,
    /// whose ranks are Slurm's S_TASK_GLOBAL_ID as each task ends).
    ranks: Option<Vec<u32>>,
    /// What is left of [`ENDS_BUDGET`].
    budget: Mutex<Budget>,
}

/// Longest the node's file may take to be written, once per node.
const NODE_LIMIT: Duration = Duration::from_secs(5);
/// Longest a task's end may take to be written.
const TASK_LIMIT: Duration = Duration::from_secs(2);
/// Longest all the node's task ends may take together: slurmstepd writes
/// them one after another as it reaps the tasks (a few milliseconds each on
/// a sound file system).
const ENDS_BUDGET: Duration = Duration::from_secs(5);

/// The time left for the node's task ends.
struct Budget {
    left: Duration,
}

impl Budget {
    /// The limit of the next write, or `None` once the budget is spent.
    fn next(&self) -> Option<Duration> {
        (!self.left.is_zero()).then(|| self.left.min(TASK_LIMIT))
    }

    /// A write took `took`; a late one spends the rest. Whether the budget
    /// is spent now.
    fn spend(&mut self, took: Duration, late: bool) -> bool {
        self.left = if late {
            Duration::ZERO
        } else {
            self.left.saturating_sub(took)
        };
        self.left.is_zero()
    }
}

/// In `user_init`: logs the node's line when the admin asked, and writes
/// the node's file when the step asked for a record. A record that cannot
/// be written is said in slurmd's log and on the user's terminal, never
/// fails the step.
pub fn begin(
    spank: &Spank,
    node: &Node,
    placed: &dyn Fn(u32) -> Option<(String, String)>,
) -> Option<Record> {
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
    let lines = node_lines_placed(node, &run_id, placed);
    let ranks = Some(here.iter().map(|&(rank, _)| rank).collect());
    written(spank, dir, &run_id, host, &lines, ranks)
}

/// [`begin`] for a step without a framework option (srun's word:
/// `settings`, the job's `restart_count`): the node's line alone, each
/// rank's host and end written as its task ends.
pub fn begin_plain(spank: &Spank, settings: &Settings, restart_count: u32) -> Option<Record> {
    if !settings.record_log && settings.record.is_none() {
        return None;
    }
    let (job, step) = (spank.job_id().ok()?, spank.step_id().ok()?);
    let run_id = crate::core::run_id(job, step, restart_count);
    // slurmstepd's own (slurmstepd.c sets it in its environment).
    let host = std::env::var("SLURMD_NODENAME").unwrap_or_default();
    let tasks = spank.total_task_count().ok()?;
    if settings.record_log {
        let local = spank
            .local_task_count()
            .map_or("?".into(), |n| n.to_string());
        // `warn` is Slurm's info level (super::logger).
        log::warn!(
            "step {run_id} on {host}: {local} of {tasks} tasks, no framework option (record {})",
            settings.record.as_deref().unwrap_or("none")
        );
    }
    let dir = settings.record.as_deref()?;
    let lines = NodeLine {
        job,
        step,
        restart_count,
        run_id: &run_id,
        host: &host,
        address: None,
        interface: None,
        tasks,
    }
    .text();
    written(spank, dir, &run_id, host, &lines, None)
}

/// The record once the node's `lines` are written under `dir`; None, said
/// in slurmd's log and on the user's terminal, when they cannot be.
fn written(
    spank: &Spank,
    dir: &str,
    run_id: &str,
    host: String,
    lines: &str,
    ranks: Option<Vec<u32>>,
) -> Option<Record> {
    match write_node(spank, dir, run_id, &host, lines) {
        Ok((file, run_dir)) => Some(Record {
            file,
            run_dir,
            host,
            ids: Ids {
                uid: spank.job_uid().ok()?,
                gid: spank.job_gid().ok()?,
                groups: groups(),
            },
            ranks,
            budget: Mutex::new(Budget { left: ENDS_BUDGET }),
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
    dir: &str,
    run_id: &str,
    host: &str,
    lines: &str,
) -> std::result::Result<(CString, String), String> {
    // SAFETY: geteuid cannot fail.
    let euid = unsafe { libc::geteuid() };
    let uid = spank.job_uid().map_err(|e| e.to_string())?;
    if euid != uid {
        return Err("slurmstepd does not run as the job's user here".into());
    }
    let run = run_dir_name(run_id).ok_or("no run id")?;
    let name = node_file_name(host).ok_or_else(|| format!("{host:?} is no file name"))?;
    let c =
        |p: &Path| CString::new(p.as_os_str().as_encoded_bytes()).map_err(|_| "NUL in the path");
    // Every directory of the record's path, the root first: the child makes
    // the missing ones (super::bounded_io's write says in which order), then
    // the user's own directory in it where it is shared, then the run's,
    // each relative to the one above and never following a link.
    let dir_path = Path::new(dir);
    let mut dirs = dir_path
        .ancestors()
        .filter(|p| !p.as_os_str().is_empty())
        .map(c)
        .collect::<std::result::Result<Vec<_>, _>>()?;
    dirs.reverse();
    let user_dir = user_dir_name(uid);
    let (dir_c, user_c, run_c) = (c(dir_path)?, c(Path::new(&user_dir))?, c(Path::new(run))?);
    let file_name = c(Path::new(&name))?;
    // Root makes the user's directory only in the site's own record
    // directory, never in one the step named.
    let site_way = Settings::from_admin_args(spank.args().map_err(|e| e.to_string())?)
        .is_ok_and(|site| site.record.as_deref() == Some(dir));
    let write = bounded_io::Write {
        dirs: &dirs,
        under: Some(Under {
            dir: &dir_c,
            user_dir: &user_c,
            run: &run_c,
            site_way: site_way.then_some(dirs.as_slice()),
        }),
        file: &file_name,
        create: true,
        bytes: lines.as_bytes(),
    };
    let per_user = bounded_io::write(None, &write, NODE_LIMIT).map_err(|e| e.to_string())?;
    let run_dir = if per_user {
        dir_path.join(user_dir).join(run)
    } else {
        dir_path.join(run)
    };
    let file = c(&run_dir.join(name))?;
    let run_dir = run_dir.to_str().ok_or("not UTF-8")?.to_string();
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
pub(super) fn groups() -> Vec<libc::gid_t> {
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
    let rank = match &record.ranks {
        Some(ranks) => ranks.get(local as usize).copied(),
        None => spank.task_global_id().ok(),
    };
    let Some(rank) = rank else {
        return;
    };
    let mut budget = record.budget.lock().unwrap_or_else(PoisonError::into_inner);
    let Some(limit) = budget.next() else {
        return;
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let line = exit_line(rank, local, &record.host, status, now);
    let write = bounded_io::Write {
        dirs: &[],
        under: None,
        file: &record.file,
        create: false,
        bytes: line.as_bytes(),
    };
    let start = Instant::now();
    let result = bounded_io::write(Some(&record.ids), &write, limit);
    let late = matches!(result, Err(Failed::Late(_)));
    let spent = budget.spend(start.elapsed(), late);
    if let Err(why) = result {
        log::warn!("record: rank {rank}'s end not written: {why}");
    }
    if spent {
        log::warn!(
            "record: the task ends on {} took over {ENDS_BUDGET:?}: the later ones are not written",
            record.host
        );
    }
}

/// In `task_exit` (slurmstepd, root), after a requeue that excluded
/// `node`: the exclusion and why in the node's file, as the job's user.
pub fn excluded(record: &Record, node: &str, why: &str) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let line = crate::core::record::excluded_line(node, why, now);
    let write = bounded_io::Write {
        dirs: &[],
        under: None,
        file: &record.file,
        create: false,
        bytes: line.as_bytes(),
    };
    if let Err(why) = bounded_io::write(Some(&record.ids), &write, TASK_LIMIT) {
        log::warn!("record: the exclusion of {node} not written: {why}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ends_share_one_budget_per_node() {
        let mut b = Budget { left: ENDS_BUDGET };
        assert_eq!(b.next(), Some(TASK_LIMIT));
        // Slow answers, each under the task's limit, add up to the budget.
        assert!(!b.spend(Duration::from_millis(1900), false));
        assert!(!b.spend(Duration::from_millis(1900), false));
        assert_eq!(b.next(), Some(Duration::from_millis(1200)));
        assert!(b.spend(Duration::from_millis(1200), false));
        assert_eq!(b.next(), None);
        // One late write spends the rest.
        let mut b = Budget { left: ENDS_BUDGET };
        assert!(b.spend(TASK_LIMIT, true));
        assert_eq!(b.next(), None);
    }
}
