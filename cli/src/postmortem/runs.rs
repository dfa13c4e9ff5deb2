//! The user's runs of a record, found and read within bounds: the runs'
//! directory (the user's own in a shared one), the runs a step's id
//! matches, each run's record files and the rank's files beside them, only
//! the asking user's own, each listing and read capped.

use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tf_cluster_core::record::{Runs, only_theirs, printable, runs_under, user_dir_name};
use tf_cluster_core::{Error, Result};

/// Most entries listed per directory (the runs' directory, a run's).
pub(super) const MAX_ENTRIES: usize = 65_536;
/// Most bytes read per record file, and in all: a record is a few lines
/// per task.
pub(super) const MAX_FILE: u64 = 8 << 20;
pub(super) const MAX_TOTAL: u64 = 64 << 20;
/// Longest the files of all runs are read for (a slow file system).
pub(super) const MAX_TIME: Duration = Duration::from_secs(60);

/// A path as it may be printed.
pub(super) fn shown(path: &Path) -> String {
    printable(&path.to_string_lossy())
}

/// The asking user's id.
pub(super) fn my_uid() -> u32 {
    // SAFETY: getuid cannot fail.
    unsafe { libc::getuid() }
}

/// `JOB`, `JOB.STEP` or `JOB.STEP.rN` as numbers.
pub(super) fn wanted_parts(wanted: &str) -> Result<Vec<u32>> {
    let parts: Vec<&str> = wanted.split('.').collect();
    let number = |s: &str| -> Option<u32> {
        (!s.is_empty() && s.len() <= 10 && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    let parsed = match parts.as_slice() {
        [job] => number(job).map(|j| vec![j]),
        [job, step] => number(job).zip(number(step)).map(|(j, s)| vec![j, s]),
        [job, step, r] => match (
            number(job),
            number(step),
            r.strip_prefix('r').and_then(number),
        ) {
            (Some(j), Some(s), Some(r)) => Some(vec![j, s, r]),
            _ => None,
        },
        _ => None,
    };
    parsed.ok_or_else(|| {
        Error::new(format!(
            "{:?}: not JOB, JOB.STEP or JOB.STEP.rN",
            printable(wanted)
        ))
    })
}

/// Where the asking user's runs are under `dir`: `dir` itself where it is
/// the user's and no one else writes in it, else the user's own directory
/// in it (`DIR/<uid>`), which must be the user's and written by no one else.
pub(super) fn runs_base(dir: &Path, uid: u32) -> Result<PathBuf> {
    let meta = std::fs::metadata(dir)
        .map_err(|e| Error::new(format!("cannot read {}: {e}", shown(dir))))?;
    if !meta.is_dir() {
        return Err(Error::new(format!("{} is not a directory", shown(dir))));
    }
    match runs_under(meta.uid(), meta.mode() & 0o7777, uid) {
        Runs::InDir => Ok(dir.to_path_buf()),
        Runs::Unsafe => Err(Error::new(format!(
            "{} is writable by others without the sticky bit: anyone may have replaced its records; not read",
            shown(dir)
        ))),
        Runs::PerUser => {
            let mine = dir.join(user_dir_name(uid));
            let meta = std::fs::symlink_metadata(&mine).map_err(|e| {
                Error::new(format!(
                    "no record in {}: {} ({e})",
                    shown(dir),
                    shown(&mine)
                ))
            })?;
            if !meta.is_dir() || !only_theirs(meta.uid(), meta.mode(), uid) {
                return Err(Error::new(format!(
                    "{} is not yours (a directory of uid {uid} that no one else may write): not read",
                    shown(&mine)
                )));
            }
            Ok(mine)
        }
    }
}

/// Whether `path` is one of the user's run directories: a directory, not a
/// link, the user's, written by no one else.
pub(super) fn own_dir(path: &Path, uid: u32) -> Option<bool> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    Some(meta.is_dir() && only_theirs(meta.uid(), meta.mode(), uid))
}

/// The runs' directories under `base` for `wanted`: `JOB` gives every run
/// of the job, `JOB.STEP` the step's latest incarnation, a run id itself.
/// A run is found by its name, never only by a listing: a listing stops at
/// [`MAX_ENTRIES`], and says so.
pub(super) fn matching_runs(
    base: &Path,
    parts: &[u32],
    wanted: &str,
    uid: u32,
    notes: &mut Vec<String>,
) -> Vec<(String, PathBuf)> {
    let mut names: Vec<(u32, u32, u32, String)> = Vec::new();
    match parts {
        [job, step] => names.push((*job, *step, 0, format!("{job}.{step}"))),
        // The first incarnation (r0) is the step's own name.
        [job, step, r] => names.push((*job, *step, *r, run_name(*job, *step, *r))),
        _ => {}
    }
    if parts.len() < 3 {
        listed_runs(base, parts, notes, &mut names);
    }
    names.sort();
    let mut found = Vec::new();
    for (job, step, restart, name) in names {
        let path = base.join(&name);
        match own_dir(&path, uid) {
            Some(true) => found.push((job, step, restart, name)),
            Some(false) => notes.push(format!("({} is not yours: skipped)", shown(&path))),
            None => {}
        }
    }
    // JOB.STEP: the latest incarnation only (step ids start again at each
    // requeue); the others are one `JOB.STEP.rN` away.
    if parts.len() == 2 && found.len() > 1 {
        let earlier: Vec<String> = found[..found.len() - 1]
            .iter()
            .map(|(j, s, r, _)| format!("{j}.{s}.r{r}"))
            .collect();
        notes.push(format!(
            "({wanted} ran {} incarnations: this is the latest; the earlier are {})",
            found.len(),
            earlier.join(", ")
        ));
        found = found.split_off(found.len() - 1);
    }
    found
        .into_iter()
        .map(|(_, _, _, name)| (name.clone(), base.join(name)))
        .collect()
}

/// The directory of a run: `JOB.STEP` for the first incarnation,
/// `JOB.STEP.rN` after the job's N-th requeue.
pub(super) fn run_name(job: u32, step: u32, restart: u32) -> String {
    match restart {
        0 => format!("{job}.{step}"),
        r => format!("{job}.{step}.r{r}"),
    }
}

/// The runs of job `parts[0]` (and step `parts[1]`, where given) that a
/// listing of `base` finds, by the names a run id has, added to `names`
/// (job, step, restart, name) once each.
pub(super) fn listed_runs(
    base: &Path,
    parts: &[u32],
    notes: &mut Vec<String>,
    names: &mut Vec<(u32, u32, u32, String)>,
) {
    let mut listed = 0;
    if let Ok(entries) = std::fs::read_dir(base) {
        for entry in entries.flatten() {
            if listed == MAX_ENTRIES {
                notes.push(format!(
                    "(the listing of {} stopped at {MAX_ENTRIES} entries: some runs may not be shown)",
                    shown(base)
                ));
                break;
            }
            listed += 1;
            let name = entry.file_name().to_string_lossy().into_owned();
            let p: Vec<&str> = name.split('.').collect();
            let (job, step, restart) = match p.as_slice() {
                [j, s] => (j.parse().ok(), s.parse().ok(), Some(0)),
                [j, s, r] => (
                    j.parse().ok(),
                    s.parse().ok(),
                    r.strip_prefix('r').and_then(|r| r.parse().ok()),
                ),
                _ => continue,
            };
            let (Some(job), Some(step), Some(restart)) = (job, step, restart) else {
                continue;
            };
            // Only the names a run id has (no `42.00`, no `42.0.r01`).
            let canonical = run_name(job, step, restart);
            let keep =
                name == canonical && job == parts[0] && parts.get(1).is_none_or(|&s| s == step);
            if keep && !names.iter().any(|n| n.3 == name) {
                names.push((job, step, restart, name));
            }
        }
    }
}

/// The lines of a run's record files: the user's regular files only, each
/// of at most [`MAX_FILE`] bytes, [`MAX_TOTAL`] in all, within
/// [`MAX_TIME`]; what is skipped is said in `notes`.
pub(super) fn read_run(
    run_dir: &Path,
    uid: u32,
    total: &mut u64,
    start: Instant,
    notes: &mut Vec<String>,
) -> Vec<String> {
    let mut lines = Vec::new();
    let (mut over_total, mut over_time) = (0, 0);
    for file in &record_files(run_dir, notes) {
        if start.elapsed() > MAX_TIME {
            over_time += 1;
            continue;
        }
        match read_record_file(file, uid, *total) {
            Ok(bytes) => {
                *total += bytes.len() as u64;
                lines.extend(String::from_utf8_lossy(&bytes).lines().map(str::to_string));
            }
            Err(Skipped::OverTotal) => over_total += 1,
            Err(Skipped::Because(why)) => notes.push(format!("{} {why}: skipped", shown(file))),
        }
    }
    if over_total > 0 {
        notes.push(format!(
            "({over_total} file(s) not read: the record's files exceed {} MiB in all)",
            MAX_TOTAL >> 20
        ));
    }
    if over_time > 0 {
        notes.push(format!(
            "({over_time} file(s) not read: reading took over {MAX_TIME:?})"
        ));
    }
    lines
}

/// The record files (`*.jsonl`) of a run's directory, sorted; at most
/// [`MAX_ENTRIES`] entries are listed, and a listing cut short is said in
/// `notes`.
pub(super) fn record_files(run_dir: &Path, notes: &mut Vec<String>) -> Vec<PathBuf> {
    let mut files = Vec::new();
    match std::fs::read_dir(run_dir) {
        Ok(entries) => {
            for (n, entry) in entries.flatten().enumerate() {
                if n == MAX_ENTRIES {
                    notes.push(format!(
                        "(the listing of {} stopped at {MAX_ENTRIES} entries: some files not read)",
                        shown(run_dir)
                    ));
                    break;
                }
                let name = entry.file_name();
                if Path::new(&name).extension().is_some_and(|x| x == "jsonl") {
                    files.push(run_dir.join(name));
                }
            }
        }
        Err(e) => notes.push(format!("(cannot read {}: {e})", shown(run_dir))),
    }
    files.sort();
    files
}

/// Why a record file is not read.
pub(super) enum Skipped {
    /// It would take the bytes read over [`MAX_TOTAL`] (counted, said once).
    OverTotal,
    /// Said after the file's name: `is a link`, `is not yours`…
    Because(String),
}

/// A record file's bytes, `total` read before it: the user's own regular
/// file, not a link, at most [`MAX_FILE`] bytes.
pub(super) fn read_record_file(
    file: &Path,
    uid: u32,
    total: u64,
) -> std::result::Result<Vec<u8>, Skipped> {
    let skipped = |why: &str| Skipped::Because(why.to_string());
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(file);
    let f = match opened {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err(skipped("is a link")),
        Err(e) => return Err(skipped(&format!("cannot be opened ({e})"))),
    };
    let Ok(meta) = f.metadata() else {
        return Err(skipped("cannot be read"));
    };
    if !meta.is_file() {
        return Err(skipped("is not a regular file"));
    }
    if meta.uid() != uid {
        return Err(skipped("is not yours"));
    }
    if meta.len() > MAX_FILE {
        return Err(skipped(&format!("is larger than {} MiB", MAX_FILE >> 20)));
    }
    if total + meta.len() > MAX_TOTAL {
        return Err(Skipped::OverTotal);
    }
    let mut bytes = Vec::new();
    if let Err(e) = f.take(MAX_FILE + 1).read_to_end(&mut bytes) {
        return Err(skipped(&format!("cannot be read ({e})")));
    }
    if bytes.len() as u64 > MAX_FILE {
        return Err(skipped(&format!("is larger than {} MiB", MAX_FILE >> 20)));
    }
    Ok(bytes)
}

/// Most files listed as one rank's logs, and how deep under its entries.
pub(super) const MAX_LOGS: usize = 64;
pub(super) const MAX_DEPTH: usize = 6;

/// The debugging output the run's directory holds for `rank` (its
/// `rank<N>.` entries: the flight recorder's dumps, NCCL's debug files,
/// torchrun's log directory with its workers' error files), sorted.
pub(super) fn rank_files(run_dir: &Path, rank: u64, uid: u32) -> Vec<PathBuf> {
    let prefix = format!("rank{rank}.");
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(run_dir) else {
        return found;
    };
    let mut todo: Vec<(PathBuf, usize)> = entries
        .flatten()
        .take(MAX_ENTRIES)
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| (e.path(), 0))
        .collect();
    while let Some((path, depth)) = todo.pop() {
        if found.len() >= MAX_LOGS {
            break;
        }
        // Never following a link; only the user's own.
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.uid() != uid {
            continue;
        }
        if meta.is_dir() && depth < MAX_DEPTH {
            if let Ok(entries) = std::fs::read_dir(&path) {
                todo.extend(
                    entries
                        .flatten()
                        .take(MAX_LOGS)
                        .map(|e| (e.path(), depth + 1)),
                );
            }
        } else if meta.is_file() {
            found.push(path);
        }
    }
    found.sort();
    found
}

/// Every rank's flight recorder dumps in the run's directory (PyTorch's,
/// at `rank<N>.torch-fr.<global rank>`: on a timeout, or asked for by
/// `tf-cluster hang`), the user's own regular files, sorted.
pub(super) fn fr_dumps(run_dir: &Path, uid: u32) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(run_dir) else {
        return Vec::new();
    };
    let tail = format!(".{}", tf_cluster_core::record::TORCH_FR_DUMP);
    let mut found: Vec<PathBuf> = entries
        .flatten()
        .take(MAX_ENTRIES)
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(rest) = name.strip_prefix("rank") else {
                return false;
            };
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            digits > 0 && rest[digits..].starts_with(&tail)
        })
        .filter(|e| {
            std::fs::symlink_metadata(e.path()).is_ok_and(|m| m.is_file() && m.uid() == uid)
        })
        .map(|e| e.path())
        .take(MAX_LOGS)
        .collect();
    found.sort();
    found
}
