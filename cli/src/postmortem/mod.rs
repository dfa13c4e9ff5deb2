//! `tf-cluster postmortem JOB[.STEP]`: reads the step's record (the
//! plugin's `--tf-record=DIR`, crate tf_cluster_core::record) and prints
//! every rank, what it was given and how it ended, then which failed first.
//! The runs found and read within bounds: `runs.rs`; what is printed of
//! each: `report.rs`.

mod report;
mod runs;

use std::path::{Path, PathBuf};
use std::time::Instant;

use tf_cluster_core::record::printable;
use tf_cluster_core::{Error, Result};

use crate::site::plugin::{site_plugin, variable};
use crate::site::{Host, PLUGIN_NAME};
use report::report;
use runs::{matching_runs, my_uid, read_run, runs_base, shown, wanted_parts};

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

#[cfg(test)]
mod tests {
    use super::report::*;
    use super::runs::*;
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

    /// Each rank's CPUs and memory node, where the record has them.
    #[test]
    fn each_ranks_cpus_are_shown() {
        let placed = rank(0, "node1", "0").replace(
            "\"run_id\":\"42.0\"",
            "\"run_id\":\"42.0\",\"cpus\":\"0-15\",\"mems\":\"0\"",
        );
        let lines = vec![placed, rank(1, "node1", "1")];
        let text = report("42.0", Path::new("/r/42.0"), &lines);
        let row = |r: &str| text.lines().find(|l| l.starts_with(r)).unwrap().to_string();
        assert!(text.contains("GPUS  CPUS"), "{text}");
        assert!(row("0 ").contains(" 0-15 mem 0 "), "{text}");
        assert!(row("1 ").contains(" 1     -  "), "{text}");
    }

    /// A node a requeue excluded is named with why, one line each.
    #[test]
    fn an_excluded_node_is_named_with_why() {
        let line = tf_cluster_core::record::excluded_line(
            "node2",
            "a task exited with 43 (--tf-requeue-on=43)",
            1_000_000_000,
        );
        let lines = vec![
            rank(0, "node2", "0"),
            exit(0, "node2", "\"code\":43,\"signal\":null", 1_000_000_000),
            line.trim_end().to_string(),
        ];
        let text = report("42.0", Path::new("/r/42.0"), &lines);
        assert!(
            text.contains(
                "node2 excluded from the job before its requeue: a task exited with 43 (--tf-requeue-on=43)\n"
            ),
            "{text}"
        );
        assert!(!text.contains("not read"), "{text}");
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
