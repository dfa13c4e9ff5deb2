//! `tf-cluster postmortem JOB[.STEP]`: reads the step's record (the
//! plugin's `--tf-record=DIR`, crate tf_cluster_core::record) and prints
//! every rank, what it was given and how it ended, then which failed first.

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;
use tf_cluster_core::record::{Runs, VERSION, only_theirs, printable, runs_under, user_dir_name};
use tf_cluster_core::{Error, Result};

use crate::launcher_env::{site_plugin, variable};
use crate::site::{Host, PLUGIN_NAME};

/// Most entries listed per directory (the runs' directory, a run's).
const MAX_ENTRIES: usize = 65_536;
/// Most bytes read per record file, and in all: a record is a few lines
/// per task.
const MAX_FILE: u64 = 8 << 20;
const MAX_TOTAL: u64 = 64 << 20;
/// Longest the files of all runs are read for (a slow file system).
const MAX_TIME: Duration = Duration::from_secs(60);

/// A path as it may be printed.
fn shown(path: &Path) -> String {
    printable(&path.to_string_lossy())
}

/// The asking user's id.
fn my_uid() -> u32 {
    // SAFETY: getuid cannot fail.
    unsafe { libc::getuid() }
}

/// The report of every run of `wanted` (`JOB`, `JOB.STEP` or a run id
/// `JOB.STEP.rN`) found under `dir`: only the asking user's own runs and
/// files, each a regular file read within bounds.
pub fn postmortem(dir: &Path, wanted: &str) -> Result<String> {
    let uid = my_uid();
    let parts = wanted_parts(wanted)?;
    let base = runs_base(dir, uid)?;
    let mut notes = Vec::new();
    let runs = matching_runs(&base, &parts, wanted, uid, &mut notes);
    if runs.is_empty() {
        let mut why = format!(
            "no record of {} in {} (the step must have run with --tf-record={})",
            printable(wanted),
            shown(&base),
            shown(dir)
        );
        for note in &notes {
            why.push_str("; ");
            why.push_str(note.trim_start_matches('(').trim_end_matches(')'));
        }
        return Err(Error::new(why));
    }
    let mut out = String::new();
    let start = Instant::now();
    let mut total = 0u64;
    for (run, path) in runs {
        let mut run_notes = Vec::new();
        let lines = read_run(&path, uid, &mut total, start, &mut run_notes);
        out.push_str(&report(&run, &path, &lines));
        for note in run_notes {
            out.push_str(&note);
            out.push('\n');
        }
    }
    for note in notes {
        out.push_str(&note);
        out.push('\n');
    }
    Ok(out)
}

/// The record's directory: `given` (`--tf-record`), else the option as
/// the job inherited it (sbatch and salloc hand `--tf-record` to the job's
/// sruns in the environment), else the site's `record=` on the plugin's
/// plugstack.conf line, as the plugin would have used them.
pub fn record_dir(given: Option<PathBuf>, host: &mut dyn Host) -> Result<PathBuf> {
    if let Some(dir) = given {
        return Ok(dir);
    }
    let site = site_plugin(host).ok();
    let name = site.as_ref().map_or(PLUGIN_NAME, |s| s.name.as_str());
    if let Some(dir) = host
        .env(&variable(name, "tf-record"))
        .filter(|d| !d.is_empty())
    {
        return Ok(PathBuf::from(dir));
    }
    let from_site = site
        .iter()
        .flat_map(|s| s.args.iter())
        .find_map(|a| a.strip_prefix("record="))
        .filter(|d| !d.is_empty());
    match from_site {
        Some(dir) => Ok(PathBuf::from(dir)),
        None => Err(Error::new(
            "no record directory: give --tf-record=DIR (the job ran with no --tf-record and the site's plugstack.conf sets no record=)",
        )),
    }
}

/// `JOB`, `JOB.STEP` or `JOB.STEP.rN` as numbers.
fn wanted_parts(wanted: &str) -> Result<Vec<u32>> {
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
fn runs_base(dir: &Path, uid: u32) -> Result<PathBuf> {
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
fn own_dir(path: &Path, uid: u32) -> Option<bool> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    Some(meta.is_dir() && only_theirs(meta.uid(), meta.mode(), uid))
}

/// The runs' directories under `base` for `wanted`: `JOB` gives every run
/// of the job, `JOB.STEP` the step's latest incarnation, a run id itself.
/// A run is found by its name, never only by a listing: a listing stops at
/// [`MAX_ENTRIES`], and says so.
fn matching_runs(
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
fn run_name(job: u32, step: u32, restart: u32) -> String {
    match restart {
        0 => format!("{job}.{step}"),
        r => format!("{job}.{step}.r{r}"),
    }
}

/// The runs of job `parts[0]` (and step `parts[1]`, where given) that a
/// listing of `base` finds, by the names a run id has, added to `names`
/// (job, step, restart, name) once each.
fn listed_runs(
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
fn read_run(
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
fn record_files(run_dir: &Path, notes: &mut Vec<String>) -> Vec<PathBuf> {
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
enum Skipped {
    /// It would take the bytes read over [`MAX_TOTAL`] (counted, said once).
    OverTotal,
    /// Said after the file's name: `is a link`, `is not yours`…
    Because(String),
}

/// A record file's bytes, `total` read before it: the user's own regular
/// file, not a link, at most [`MAX_FILE`] bytes.
fn read_record_file(file: &Path, uid: u32, total: u64) -> std::result::Result<Vec<u8>, Skipped> {
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

/// One rank as the record has it.
#[derive(Default)]
struct Rank {
    given: Option<Value>,
    end: Option<Value>,
}

/// The lines of one run's record, by kind.
#[derive(Default)]
struct Record {
    ranks: BTreeMap<u64, Rank>,
    /// Its nodes' lines.
    nodes: usize,
    /// The step's tasks, as a node's line says.
    total: Option<u64>,
    /// Lines not of the record's format (or of a later one).
    skipped: usize,
}

/// A run's record from its lines (any order, any node's).
fn parse_record(lines: &[String]) -> Record {
    let mut record = Record::default();
    for line in lines {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            record.skipped += 1;
            continue;
        };
        if v["record"].as_u64().is_none_or(|r| r > VERSION as u64) {
            record.skipped += 1;
            continue;
        }
        let rank = v["rank"].as_u64();
        match (v["kind"].as_str(), rank) {
            (Some("node"), _) => {
                record.total = v["tasks"].as_u64().or(record.total);
                record.nodes += 1;
            }
            (Some("rank"), Some(r)) => record.ranks.entry(r).or_default().given = Some(v),
            (Some("exit"), Some(r)) => record.ranks.entry(r).or_default().end = Some(v),
            _ => record.skipped += 1,
        }
    }
    record
}

/// The report of one run from its record's lines (any order, any node's).
pub fn report(run: &str, path: &Path, lines: &[String]) -> String {
    let Record {
        ranks,
        nodes,
        total,
        skipped,
    } = parse_record(lines);
    let mut out = format!(
        "run {run}: {} rank(s) recorded{} on {} node(s); record {}\n",
        ranks.len(),
        total.map_or(String::new(), |t| format!(" of {t}")),
        nodes,
        shown(path)
    );
    out.push_str(&crate::render::table(&rank_rows(&ranks)));
    out.push('\n');
    out.push_str(&first_failure(&ranks, path));
    let dumps = fr_dumps(path, my_uid());
    if !dumps.is_empty() {
        out.push_str("flight recorder dumps:\n");
        for dump in dumps {
            out.push_str(&format!("  {}\n", shown(&dump)));
        }
    }
    if skipped > 0 {
        out.push_str(&format!(
            "({skipped} line(s) not read: not of record format {VERSION})\n"
        ));
    }
    out
}

/// The table of every rank: where it ran, what it was given, how it ended.
fn rank_rows(ranks: &BTreeMap<u64, Rank>) -> Vec<Vec<String>> {
    let mut rows = vec![
        [
            "RANK",
            "HOST",
            "ADDRESS",
            "PORTS",
            "GPUS",
            "INTERFACE",
            "ROLE",
            "END",
            "AT",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for (rank, r) in ranks {
        let g = r.given.as_ref();
        let text = |k: &str| printable(g.and_then(|g| g[k].as_str()).unwrap_or("-"));
        let ports = g
            .and_then(|g| g["ports"].as_array())
            .map(|p| {
                p.iter()
                    .filter_map(Value::as_u64)
                    .map(|p| p.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| "-".into());
        let host = r
            .end
            .as_ref()
            .and_then(|e| e["host"].as_str())
            .map(printable)
            .unwrap_or_else(|| text("host"));
        rows.push(vec![
            rank.to_string(),
            host,
            text("address"),
            ports,
            text("gpus"),
            text("interface"),
            text("role"),
            r.end.as_ref().map_or("running or lost".into(), end_text),
            r.end
                .as_ref()
                .and_then(|e| e["unix_ns"].as_u64())
                .map_or("-".into(), clock),
        ]);
    }
    rows
}

/// Which rank failed first (by the time its end was recorded), its node's
/// record and its logs; else that none failed.
fn first_failure(ranks: &BTreeMap<u64, Rank>, path: &Path) -> String {
    let mut out = String::new();
    let mut failed: Vec<(u64, u64, &Value)> = ranks
        .iter()
        .filter_map(|(&rank, r)| {
            let e = r.end.as_ref()?;
            let bad = e["signal"].as_u64().is_some() || e["code"].as_u64().is_some_and(|c| c != 0);
            bad.then(|| (e["unix_ns"].as_u64().unwrap_or(u64::MAX), rank, e))
        })
        .collect();
    failed.sort_by_key(|&(ns, rank, _)| (ns, rank));
    match failed.first() {
        Some(&(ns, rank, e)) => {
            let raw_host = e["host"].as_str().unwrap_or("?");
            let host = printable(raw_host);
            let gpus = ranks[&rank]
                .given
                .as_ref()
                .and_then(|g| g["gpus"].as_str())
                .map(|g| format!(", GPU {}", printable(g)))
                .unwrap_or_default();
            out.push_str(&format!(
                "first failure: rank {rank}, {host}{gpus}: {} at {}, first of {}\n",
                end_text(e),
                clock(ns),
                failed.len()
            ));
            if let Some(name) = tf_cluster_core::record::node_file_name(raw_host) {
                out.push_str(&format!("its node's record: {}\n", shown(&path.join(name))));
            }
            let logs = rank_files(path, rank, my_uid());
            if !logs.is_empty() {
                out.push_str("its logs:\n");
                for log in logs {
                    out.push_str(&format!("  {}\n", shown(&log)));
                }
            }
        }
        None if ranks.values().all(|r| r.end.is_some()) => {
            out.push_str("no failure: every rank exited 0\n")
        }
        None => out.push_str("no failure recorded; some ranks have no end\n"),
    }
    out
}

/// Most files listed as one rank's logs, and how deep under its entries.
const MAX_LOGS: usize = 64;
const MAX_DEPTH: usize = 6;

/// The debugging output the run's directory holds for `rank` (its
/// `rank<N>.` entries: the flight recorder's dumps, NCCL's debug files,
/// torchrun's log directory with its workers' error files), sorted.
fn rank_files(run_dir: &Path, rank: u64, uid: u32) -> Vec<PathBuf> {
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
fn fr_dumps(run_dir: &Path, uid: u32) -> Vec<PathBuf> {
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

fn end_text(e: &Value) -> String {
    match (e["code"].as_u64(), e["signal"].as_u64()) {
        (_, Some(s)) => format!("signal {s}"),
        (Some(c), None) => format!("exit {c}"),
        _ => "?".into(),
    }
}

/// The local wall-clock time of `unix_ns`, to the millisecond, with its
/// date and its offset from UTC (RFC 3339): a record read days later, or
/// on a machine of another zone, still says when.
fn clock(unix_ns: u64) -> String {
    let secs = (unix_ns / 1_000_000_000) as libc::time_t;
    let ms = (unix_ns / 1_000_000) % 1000;
    // SAFETY: localtime_r fills `tm` from `secs`, both owned here.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    if unsafe { libc::localtime_r(&secs, &mut tm) }.is_null() {
        return format!("{secs}.{ms:03}");
    }
    let offset = tm.tm_gmtoff / 60;
    let sign = if offset < 0 { '-' } else { '+' };
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{ms:03}{sign}{:02}:{:02}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec,
        offset.abs() / 60,
        offset.abs() % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank(r: u32, host: &str, gpus: &str) -> String {
        format!(
            "{{\"record\":1,\"kind\":\"rank\",\"rank\":{r},\"local\":0,\"host\":\"{host}\",\"address\":\"{host}\",\"ports\":[23456],\"gpus\":\"{gpus}\",\"interface\":null,\"role\":\"worker {r}\",\"run_id\":\"42.0\"}}"
        )
    }

    fn exit(r: u32, host: &str, end: &str, ns: u64) -> String {
        format!(
            "{{\"record\":1,\"kind\":\"exit\",\"rank\":{r},\"local\":0,\"host\":\"{host}\",{end},\"unix_ns\":{ns}}}"
        )
    }

    /// The first failure by time, whatever the files' order; the count of
    /// failures; a later format's line is skipped and said.
    #[test]
    fn the_first_failure_is_the_earliest() {
        let lines = vec![
            "{\"record\":1,\"kind\":\"node\",\"job\":42,\"step\":0,\"tasks\":3}".into(),
            rank(0, "node1", "0"),
            rank(1, "node2", "1"),
            rank(2, "node3", "0"),
            exit(0, "node1", "\"code\":null,\"signal\":9", 3_000_000_000),
            exit(2, "node3", "\"code\":0,\"signal\":null", 1_000_000_000),
            exit(1, "node2", "\"code\":null,\"signal\":9", 2_000_000_000),
            "{\"record\":2,\"kind\":\"exit\"}".into(),
        ];
        let text = report("42.0", Path::new("/r/42.0"), &lines);
        assert!(
            text.starts_with("run 42.0: 3 rank(s) recorded of 3 on 1 node(s)"),
            "{text}"
        );
        let first = text
            .lines()
            .find(|l| l.starts_with("first failure"))
            .unwrap();
        assert!(
            first.starts_with("first failure: rank 1, node2, GPU 1: signal 9 at ")
                && first.ends_with(", first of 2"),
            "{text}"
        );
        assert!(
            text.contains("its node's record: /r/42.0/node2.jsonl"),
            "{text}"
        );
        assert!(text.contains("(1 line(s) not read"), "{text}");
        let row = text.lines().find(|l| l.starts_with("2 ")).unwrap();
        assert!(row.contains("exit 0") && row.contains("worker 2"), "{row}");
    }

    /// A step without a framework option: its nodes' lines and each
    /// task's end as the plugin writes them, no rank's line: every rank
    /// shows its host and end, what no framework gave it as "-".
    #[test]
    fn a_run_without_a_framework_shows_each_ranks_host_and_end() {
        use tf_cluster_core::record::{NodeLine, exit_line};
        let node = |host: &str| {
            NodeLine {
                job: 42,
                step: 1,
                restart_count: 0,
                run_id: "42.1",
                host,
                address: None,
                interface: None,
                tasks: 3,
            }
            .text()
        };
        // Wait statuses: exit 3, exit 0, killed by signal 9.
        let lines: Vec<String> = [
            node("node1"),
            node("node2"),
            exit_line(0, 0, "node1", 3 << 8, 2_000_000_000),
            exit_line(1, 1, "node1", 0, 1_000_000_000),
            exit_line(2, 0, "node2", 9, 3_000_000_000),
        ]
        .iter()
        .map(|l| l.trim_end().to_string())
        .collect();
        let text = report("42.1", Path::new("/r/42.1"), &lines);
        assert!(
            text.starts_with("run 42.1: 3 rank(s) recorded of 3 on 2 node(s)"),
            "{text}"
        );
        for (rank, host, end) in [
            (0, "node1", "exit 3"),
            (1, "node1", "exit 0"),
            (2, "node2", "signal 9"),
        ] {
            let row = text
                .lines()
                .find(|l| l.starts_with(&format!("{rank} ")))
                .unwrap_or_else(|| panic!("no rank {rank}:\n{text}"));
            let cells: Vec<&str> = row.split_whitespace().collect();
            assert_eq!(cells[1], host, "{row}");
            assert_eq!(&cells[2..7], ["-"; 5], "{row}");
            assert!(row.contains(end), "{row}");
        }
        assert!(
            text.contains("first failure: rank 0, node1: exit 3 at ")
                && text.contains(", first of 2"),
            "{text}"
        );
        assert!(!text.contains("not read"), "{text}");
    }

    #[test]
    fn the_first_failures_logs_are_listed_and_no_other_ranks() {
        let dir = std::env::temp_dir().join(format!("tfc-pm-logs-{}", std::process::id()));
        let run = dir.join("42.0");
        let error = run.join("rank1.torchrun/42_x/attempt_0/0/error.json");
        std::fs::create_dir_all(error.parent().unwrap()).unwrap();
        std::fs::write(&error, "{}").unwrap();
        std::fs::write(run.join("rank1.nccl.node2.77.log"), "").unwrap();
        std::fs::write(run.join("rank11.nccl.node2.78.log"), "").unwrap();
        std::fs::create_dir_all(run.join("rank0.torchrun")).unwrap();
        std::os::unix::fs::symlink("/etc", run.join("rank1.torchrun/link")).unwrap();
        let lines = vec![
            rank(0, "node1", "0"),
            rank(1, "node2", "1"),
            exit(1, "node2", "\"code\":1,\"signal\":null", 1_000_000_000),
        ];
        let text = report("42.0", &run, &lines);
        std::fs::remove_dir_all(&dir).unwrap();
        let logs: Vec<&str> = text
            .lines()
            .skip_while(|l| *l != "its logs:")
            .skip(1)
            .collect();
        assert_eq!(
            logs,
            [
                format!("  {}", run.join("rank1.nccl.node2.77.log").display()),
                format!("  {}", error.display()),
            ],
            "{text}"
        );
    }

    #[test]
    fn every_ranks_flight_recorder_dumps_are_listed() {
        let dir = std::env::temp_dir().join(format!("tfc-pm-fr-{}", std::process::id()));
        let run = dir.join("42.0");
        std::fs::create_dir_all(&run).unwrap();
        for name in [
            "rank0.torch-fr.0",
            "rank3.torch-fr.3",
            "rank3.torch-fr.7",
            "rank3.nccl.n.1.log",
        ] {
            std::fs::write(run.join(name), "x").unwrap();
        }
        // Its trigger pipe (a FIFO) and a link are no dumps.
        let fifo =
            std::ffi::CString::new(run.join("rank3.torch-fr.pipe").to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        std::os::unix::fs::symlink("/etc/passwd", run.join("rank1.torch-fr.1")).unwrap();
        let lines = vec![rank(0, "node1", "0"), rank(3, "node2", "1")];
        let text = report("42.0", &run, &lines);
        std::fs::remove_dir_all(&dir).unwrap();
        let dumps: Vec<&str> = text
            .lines()
            .skip_while(|l| *l != "flight recorder dumps:")
            .skip(1)
            .collect();
        let want: Vec<String> = ["rank0.torch-fr.0", "rank3.torch-fr.3", "rank3.torch-fr.7"]
            .iter()
            .map(|n| format!("  {}", run.join(n).display()))
            .collect();
        assert_eq!(dumps, want, "{text}");
    }

    #[test]
    fn runs_are_found_by_job_step_or_run_id() {
        let dir = std::env::temp_dir().join(format!("tfc-pm-{}", std::process::id()));
        for run in ["42.0", "42.0.r1", "42.1", "43.0", "x.y"] {
            std::fs::create_dir_all(dir.join(run)).unwrap();
        }
        let names = |w: &str| -> Vec<String> {
            let parts = wanted_parts(w).unwrap();
            matching_runs(&dir, &parts, w, my_uid(), &mut Vec::new())
                .into_iter()
                .map(|(n, _)| n)
                .collect()
        };
        assert_eq!(names("42"), ["42.0", "42.0.r1", "42.1"]);
        assert_eq!(names("42.0"), ["42.0.r1"], "the latest incarnation");
        assert_eq!(names("42.0.r1"), ["42.0.r1"]);
        assert!(names("44").is_empty());
        assert!(wanted_parts("../x").is_err());
        assert!(wanted_parts("42.00.r").is_err());
        assert!(postmortem(&dir, "44").is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// `JOB.STEP.r0` is the first incarnation, whose directory is
    /// `JOB.STEP`; `JOB.STEP` of a step that ran several times says so and
    /// names the others.
    #[test]
    fn the_first_incarnation_is_r0_and_several_are_said() {
        let dir = std::env::temp_dir().join(format!("tfc-pm-r0-{}", std::process::id()));
        for run in ["42.0", "42.0.r1", "42.0.r2", "43.0"] {
            std::fs::create_dir_all(dir.join(run)).unwrap();
        }
        let names = |w: &str, notes: &mut Vec<String>| -> Vec<String> {
            let parts = wanted_parts(w).unwrap();
            matching_runs(&dir, &parts, w, my_uid(), notes)
                .into_iter()
                .map(|(n, _)| n)
                .collect()
        };
        let mut notes = Vec::new();
        assert_eq!(names("42.0.r0", &mut notes), ["42.0"]);
        assert_eq!(names("43.0.r0", &mut notes), ["43.0"]);
        assert!(notes.is_empty(), "{notes:?}");
        assert_eq!(names("42.0", &mut notes), ["42.0.r2"]);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("3 incarnations"), "{notes:?}");
        assert!(notes[0].contains("42.0.r0"), "{notes:?}");
        assert!(notes[0].contains("42.0.r1"), "{notes:?}");
        let mut notes = Vec::new();
        assert_eq!(names("43.0", &mut notes), ["43.0"]);
        assert!(notes.is_empty(), "one incarnation: {notes:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The times carry their date and zone (RFC 3339, offset from UTC).
    #[test]
    fn times_have_a_date_and_a_zone() {
        // 2026-11-28T04:12:33.123Z, in whatever zone the tests run.
        let ns = 1_795_839_153_123_000_000u64;
        let text = clock(ns);
        let (date, rest) = text.split_once('T').unwrap_or_else(|| panic!("{text}"));
        assert_eq!(date.len(), 10, "{text}");
        assert!(date.starts_with("2026-11-2"), "{text}");
        assert!(rest.contains(":33.123"), "{text}");
        let zone = &rest[rest.len() - 6..];
        assert!(
            rest.ends_with('Z') || (zone.starts_with(['+', '-']) && zone.as_bytes()[3] == b':'),
            "{text}"
        );
    }
}
