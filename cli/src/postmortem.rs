//! `tf-cluster postmortem JOB[.STEP]`: reads the step's record (the
//! plugin's `--tf-record=DIR`, crate tf_cluster_core::record) and prints
//! every rank, what it was given and how it ended, then which failed first.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;
use tf_cluster_core::record::VERSION;
use tf_cluster_core::{Error, Result};

/// Most record files read per run and bytes per file: a record is a few
/// lines per task.
const MAX_FILES: usize = 65_536;
const MAX_FILE: u64 = 64 << 20;

/// The report of every run of `wanted` (`JOB`, `JOB.STEP` or a run id
/// `JOB.STEP.rN`) found under `dir`.
pub fn postmortem(dir: &Path, wanted: &str) -> Result<String> {
    let runs = matching_runs(dir, wanted)?;
    if runs.is_empty() {
        return Err(Error::new(format!(
            "no record of {wanted} in {} (the step must have run with --tf-record={})",
            dir.display(),
            dir.display()
        )));
    }
    let mut out = String::new();
    for (run, path) in runs {
        let mut lines = Vec::new();
        let mut files: Vec<PathBuf> = std::fs::read_dir(&path)
            .map_err(|e| Error::new(format!("cannot read {}: {e}", path.display())))?
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
            .take(MAX_FILES)
            .collect();
        files.sort();
        for file in &files {
            let too_big = std::fs::metadata(file).is_ok_and(|m| m.len() > MAX_FILE);
            if too_big {
                continue;
            }
            if let Ok(text) = std::fs::read_to_string(file) {
                lines.extend(text.lines().map(str::to_string));
            }
        }
        out.push_str(&report(&run, &path, &lines));
    }
    Ok(out)
}

/// The runs' directories under `dir` for `wanted`: `JOB` gives every run
/// of the job, `JOB.STEP` the step's latest incarnation, a run id itself.
fn matching_runs(dir: &Path, wanted: &str) -> Result<Vec<(String, PathBuf)>> {
    let parts: Vec<&str> = wanted.split('.').collect();
    let number = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let valid = match parts.as_slice() {
        [job] => number(job),
        [job, step] => number(job) && number(step),
        [job, step, r] => number(job) && number(step) && r.strip_prefix('r').is_some_and(number),
        _ => false,
    };
    if !valid {
        return Err(Error::new(format!(
            "{wanted:?}: not JOB, JOB.STEP or JOB.STEP.rN"
        )));
    }
    let entries = std::fs::read_dir(dir)
        .map_err(|e| Error::new(format!("cannot read {}: {e}", dir.display())))?;
    let mut found: Vec<(u32, u32, u32, String)> = Vec::new();
    for entry in entries.flatten().take(MAX_FILES) {
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
        let keep = match parts.as_slice() {
            [j] => j.parse() == Ok(job),
            [j, s] => j.parse() == Ok(job) && s.parse() == Ok(step),
            _ => name == wanted,
        };
        if keep {
            found.push((job, step, restart, name));
        }
    }
    found.sort();
    // JOB.STEP: the latest incarnation only (step ids start again at each
    // requeue); the others are one `JOB.STEP.rN` away.
    if parts.len() == 2 {
        found = found.split_off(found.len().saturating_sub(1));
    }
    Ok(found
        .into_iter()
        .map(|(_, _, _, name)| (name.clone(), dir.join(name)))
        .collect())
}

/// One rank as the record has it.
#[derive(Default)]
struct Rank {
    given: Option<Value>,
    end: Option<Value>,
}

/// The report of one run from its record's lines (any order, any node's).
pub fn report(run: &str, path: &Path, lines: &[String]) -> String {
    let mut ranks: BTreeMap<u64, Rank> = BTreeMap::new();
    let mut nodes = Vec::new();
    let mut total = None;
    let mut skipped = 0;
    for line in lines {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            skipped += 1;
            continue;
        };
        if v["record"].as_u64().is_none_or(|r| r > VERSION as u64) {
            skipped += 1;
            continue;
        }
        let rank = v["rank"].as_u64();
        match (v["kind"].as_str(), rank) {
            (Some("node"), _) => {
                total = v["tasks"].as_u64().or(total);
                nodes.push(v);
            }
            (Some("rank"), Some(r)) => ranks.entry(r).or_default().given = Some(v),
            (Some("exit"), Some(r)) => ranks.entry(r).or_default().end = Some(v),
            _ => skipped += 1,
        }
    }
    let mut out = format!(
        "run {run}: {} rank(s) recorded{} on {} node(s); record {}\n",
        ranks.len(),
        total.map_or(String::new(), |t| format!(" of {t}")),
        nodes.len(),
        path.display()
    );
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
    for (rank, r) in &ranks {
        let g = r.given.as_ref();
        let text = |k: &str| g.and_then(|g| g[k].as_str()).unwrap_or("-").to_string();
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
            .map(str::to_string)
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
    out.push_str(&table(&rows));
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
            let host = e["host"].as_str().unwrap_or("?");
            let gpus = ranks[&rank]
                .given
                .as_ref()
                .and_then(|g| g["gpus"].as_str())
                .map(|g| format!(", GPU {g}"))
                .unwrap_or_default();
            out.push_str(&format!(
                "first failure: rank {rank}, {host}{gpus}: {} at {}, first of {}\n",
                end_text(e),
                clock(ns),
                failed.len()
            ));
            if let Some(name) = tf_cluster_core::record::node_file_name(host) {
                out.push_str(&format!(
                    "its node's record: {}\n",
                    path.join(name).display()
                ));
            }
            let logs = rank_files(path, rank);
            if !logs.is_empty() {
                out.push_str("its logs:\n");
                for log in logs {
                    out.push_str(&format!("  {}\n", log.display()));
                }
            }
        }
        None if ranks.values().all(|r| r.end.is_some()) => {
            out.push_str("no failure: every rank exited 0\n")
        }
        None => out.push_str("no failure recorded; some ranks have no end\n"),
    }
    if skipped > 0 {
        out.push_str(&format!(
            "({skipped} line(s) not read: not of record format {VERSION})\n"
        ));
    }
    out
}

/// Most files listed as one rank's logs, and how deep under its entries.
const MAX_LOGS: usize = 64;
const MAX_DEPTH: usize = 6;

/// The debugging output the run's directory holds for `rank` (its
/// `rank<N>.` entries: the flight recorder's dumps, NCCL's debug files,
/// torchrun's log directory with its workers' error files), sorted.
fn rank_files(run_dir: &Path, rank: u64) -> Vec<PathBuf> {
    let prefix = format!("rank{rank}.");
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(run_dir) else {
        return found;
    };
    let mut todo: Vec<(PathBuf, usize)> = entries
        .flatten()
        .take(MAX_FILES)
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| (e.path(), 0))
        .collect();
    while let Some((path, depth)) = todo.pop() {
        if found.len() >= MAX_LOGS {
            break;
        }
        // Never following a link: the directory is the user's.
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
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

fn end_text(e: &Value) -> String {
    match (e["code"].as_u64(), e["signal"].as_u64()) {
        (_, Some(s)) => format!("signal {s}"),
        (Some(c), None) => format!("exit {c}"),
        _ => "?".into(),
    }
}

/// The local wall-clock time of `unix_ns`, to the millisecond.
fn clock(unix_ns: u64) -> String {
    let secs = (unix_ns / 1_000_000_000) as libc::time_t;
    let ms = (unix_ns / 1_000_000) % 1000;
    // SAFETY: localtime_r fills `tm` from `secs`, both owned here.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    if unsafe { libc::localtime_r(&secs, &mut tm) }.is_null() {
        return format!("{secs}.{ms:03}");
    }
    format!(
        "{:02}:{:02}:{:02}.{ms:03}",
        tm.tm_hour, tm.tm_min, tm.tm_sec
    )
}

fn table(rows: &[Vec<String>]) -> String {
    let cols = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..cols)
        .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
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
    fn runs_are_found_by_job_step_or_run_id() {
        let dir = std::env::temp_dir().join(format!("tfc-pm-{}", std::process::id()));
        for run in ["42.0", "42.0.r1", "42.1", "43.0", "x.y"] {
            std::fs::create_dir_all(dir.join(run)).unwrap();
        }
        let names = |w: &str| -> Vec<String> {
            matching_runs(&dir, w)
                .unwrap()
                .into_iter()
                .map(|(n, _)| n)
                .collect()
        };
        assert_eq!(names("42"), ["42.0", "42.0.r1", "42.1"]);
        assert_eq!(names("42.0"), ["42.0.r1"], "the latest incarnation");
        assert_eq!(names("42.0.r1"), ["42.0.r1"]);
        assert!(names("44").is_empty());
        assert!(matching_runs(&dir, "../x").is_err());
        assert!(postmortem(&dir, "44").is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
