//! What `tf-cluster postmortem` prints of one run: its record parsed, the
//! table of every rank, the first failure with its node's record and logs,
//! the flight recorder's dumps.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;
use tf_cluster_core::record::{VERSION, printable};

use super::runs::{fr_dumps, my_uid, rank_files, shown};

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
    /// The nodes a requeue excluded from the job, and why.
    excluded: Vec<(String, String)>,
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
            (Some("excluded"), _) => {
                let text = |k: &str| printable(v[k].as_str().unwrap_or("?"));
                record.excluded.push((text("host"), text("why")));
            }
            _ => record.skipped += 1,
        }
    }
    record
}

/// The report of one run from its record's lines (any order, any node's).
pub(super) fn report(run: &str, path: &Path, lines: &[String]) -> String {
    let Record {
        ranks,
        nodes,
        total,
        skipped,
        excluded,
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
    for (host, why) in excluded {
        out.push_str(&format!(
            "{host} excluded from the job before its requeue: {why}\n"
        ));
    }
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
            "CPUS",
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
            match (
                g.and_then(|g| g["cpus"].as_str()),
                g.and_then(|g| g["mems"].as_str()),
            ) {
                (Some(cpus), Some(mems)) if !mems.is_empty() => {
                    printable(&format!("{cpus} mem {mems}"))
                }
                (Some(cpus), _) => printable(cpus),
                _ => "-".into(),
            },
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
pub(super) fn clock(unix_ns: u64) -> String {
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
