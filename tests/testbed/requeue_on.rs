//! `--tf-requeue-on=CODE` on the testbed (whose slurm.conf has
//! `RequeueExit=42` only: 43 is the plugin's doing): a batch job whose step
//! exits 43 in its first incarnation is requeued by slurmstepd, comes back
//! with the run id `.r1` and ends; `scontrol show job` counts one restart.
//! The same job submitted with `--no-requeue` is not requeued: Slurm refuses
//! it to root too, and one line says so. A two-node step whose tasks exit 43
//! every time, with `--tf-requeue-max=1`, is requeued exactly once (one
//! requeue RPC for both nodes: no `error:` line about the requeue in
//! slurmctld's or the nodes' slurmd logs), then ends with one line naming
//! the cap. A step without a framework option, given `--tf-requeue-on`,
//! is requeued once as well, and its tasks get no run id.
//!
//! Then what the option is for, behind the container stand-in (a SPANK
//! plugin written for the tests from pyxis's documented facts, not pyxis):
//! a PyTorch training in an image with python3 and Debian's torch but no
//! Slurm command (docker/node/images/make.sh's `python-torch`), 2 ranks on
//! 2 nodes, gets SIGUSR1 from `scancel --signal=USR1`, saves a checkpoint
//! and exits 43; the job comes back with the run id `JOB.0.r1`, resumes at
//! the step after the saved one with the loss where it stopped, and ends;
//! `sacct --duplicates` records the first incarnation as REQUEUED.
//!
//! Cost: three one-node bash jobs, one two-node bash job and one two-node
//! training (torch imported 4 times in all); each requeued job waits out the
//! testbed's credential expiry (30 s) before it starts again.

use crate::common;

use std::time::{Duration, Instant};

use common::outputs::Outputs;
use common::standin::standin;
use common::{exec, exec_for, testbed};

/// The step: exits 43 in the first incarnation, 0 after a requeue.
const SCRIPT: &str = r#"#!/bin/bash
srun --tf-cluster --tf-requeue-on=43 bash -c 'echo "RUN $TF_CLUSTER_RUN_ID"; case "$TF_CLUSTER_RUN_ID" in *.r1) exit 0;; *) exit 43;; esac'
"#;

/// Two nodes whose tasks exit 43 in every incarnation, at most one requeue.
const ALWAYS_SCRIPT: &str = r#"#!/bin/bash
srun -N2 --ntasks-per-node=1 --tf-cluster --tf-requeue-on=43 --tf-requeue-max=1 bash -c 'echo "RUN $TF_CLUSTER_RUN_ID"; sleep 2; exit 43'
"#;

/// Submits SCRIPT with `args` from a folder of its own (`tag`); waits until the job has ended for good;
/// returns (its `scontrol show job` record, its output).
fn submit(tag: &str, args: &[&str]) -> (String, String) {
    submit_script(tag, SCRIPT, args).1
}

/// [`submit`] of `script`: (the job id, (its record, its output)).
fn submit_script(tag: &str, script: &str, args: &[&str]) -> (String, (String, String)) {
    let dir = format!("/home/alice/tfc-requeue-on-{tag}-{}", std::process::id());
    common::install(&dir, &[("job.sh", script)], "");
    let out_file = format!("{dir}/job-%j.out");
    let mut cmd = vec![
        "sbatch",
        "--parsable",
        "--open-mode=append",
        "-o",
        &out_file,
    ];
    cmd.extend_from_slice(args);
    let script = format!("{dir}/job.sh");
    cmd.push(&script);
    let out = exec(&cmd);
    let job = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        out.status.success() && !job.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let deadline = Instant::now() + Duration::from_secs(240);
    let record = loop {
        let show = exec(&["scontrol", "-o", "show", "job", &job]);
        let text = String::from_utf8_lossy(&show.stdout).into_owned();
        let ended = [
            "JobState=COMPLETED",
            "JobState=FAILED",
            "JobState=CANCELLED",
        ]
        .iter()
        .any(|s| text.contains(s));
        if ended {
            break text;
        }
        assert!(Instant::now() < deadline, "job {job} not ended:\n{text}");
        std::thread::sleep(Duration::from_secs(1));
    };
    let output = exec(&["cat", &out_file.replace("%j", &job)]);
    exec(&["rm", "-rf", &dir]);
    (
        job,
        (record, String::from_utf8_lossy(&output.stdout).into_owned()),
    )
}

#[test]
fn a_step_exiting_with_the_code_requeues_its_job_once() {
    let _t = testbed();
    let (record, output) = submit("requeue", &["-N1", "--requeue"]);
    let ctx = format!("{record}\n{output}");
    assert!(record.contains("JobState=COMPLETED"), "{ctx}");
    assert!(record.contains("Restarts=1"), "{ctx}");
    let runs: Vec<&str> = output
        .lines()
        .filter_map(|l| l.strip_prefix("RUN "))
        .collect();
    assert_eq!(runs.len(), 2, "{ctx}");
    assert!(
        runs[0].ends_with(".0") && runs[1].ends_with(".0.r1"),
        "{ctx}"
    );
}

/// A step without a framework option: exits 43 in the first incarnation,
/// 0 after a requeue (Slurm's SLURM_RESTART_COUNT: no run id is set).
const PLAIN_SCRIPT: &str = r#"#!/bin/bash
srun --tf-requeue-on=43 bash -c 'echo "RUN ${SLURM_RESTART_COUNT:-0} ${TF_CLUSTER_RUN_ID:-none}"; case "${SLURM_RESTART_COUNT:-0}" in 0) exit 43;; *) exit 0;; esac'
"#;

/// `--tf-requeue-on` acts on a step without a framework option as with
/// one: the job comes back once and ends.
#[test]
fn a_plain_step_requeues_its_job_once() {
    let _t = testbed();
    let (_, (record, output)) = submit_script("plain", PLAIN_SCRIPT, &["-N1", "--requeue"]);
    let ctx = format!("{record}\n{output}");
    assert!(record.contains("JobState=COMPLETED"), "{ctx}");
    assert!(record.contains("Restarts=1"), "{ctx}");
    let runs: Vec<&str> = output
        .lines()
        .filter_map(|l| l.strip_prefix("RUN "))
        .collect();
    assert_eq!(runs, ["0 none", "1 none"], "{ctx}");
}

#[test]
fn a_no_requeue_job_is_not_requeued() {
    let _t = testbed();
    let (record, output) = submit("no-requeue", &["-N1", "--no-requeue"]);
    let ctx = format!("{record}\n{output}");
    assert!(record.contains("JobState=FAILED"), "{ctx}");
    assert!(record.contains("Restarts=0"), "{ctx}");
    assert_eq!(output.matches("RUN ").count(), 1, "{ctx}");
}

/// Lines of slurmctld's log (ctl) and the nodes' slurmd logs (where
/// slurmstepd logs) that are errors about requeueing job `job`: a refused
/// requeue RPC (`_slurm_rpc_requeue: Requeue of JobId=J returned an error`)
/// or the plugin's line about one. Not Slurm's own notice that a requeue
/// ended the job's steps (`error: *** STEP J.0 ON node1 CANCELLED AT … DUE
/// TO JOB REQUEUE ***`), which every requeue logs, `scontrol requeue`'s too.
pub(crate) fn requeue_errors(job: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (host, log) in [
        ("ctl", "/var/log/slurm/slurmctld.log"),
        ("node1", "/var/log/slurm/slurmd.log"),
        ("node2", "/var/log/slurm/slurmd.log"),
        ("node3", "/var/log/slurm/slurmd.log"),
    ] {
        let out = common::on(host, &["cat", log]);
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let lower = line.to_lowercase();
            // The line past its `[DATE]` stamp: a date's day or month is
            // no job id (job 11 in November met 2026-11-28's 11).
            let text = match line.strip_prefix('[') {
                Some(rest) => rest.split_once("] ").map_or(rest, |(_, t)| t),
                None => line,
            };
            let names_job = text
                .split(|c: char| !c.is_ascii_digit())
                .any(|word| word == job);
            // Slurm's notice of the requeue, and the plugin's announcement of
            // one (a refused node's line: "…: the job is requeued without
            // this node (--tf-requeue-on)"), are no errors about a requeue.
            let notice = (line.contains(" CANCELLED AT ") && line.contains("DUE TO JOB REQUEUE"))
                || (line.contains(": the job is requeued") && line.contains("(--tf-requeue-on)"));
            if names_job && lower.contains("error") && lower.contains("requeue") && !notice {
                found.push(format!("{host}: {line}"));
            }
        }
    }
    found
}

/// The cap's line, as node 0 of the step says it in the job's output.
fn cap_line(job: &str) -> String {
    format!(
        "tf-cluster: a task exited with 43 (--tf-requeue-on=43) but job {job} was not requeued: Slurm restarted it 1 times already, the most --tf-requeue-max allows (1)"
    )
}

/// Without a cap the same job was requeued 9 times in 5 minutes, and each
/// requeue of a 2-node step sent 2 RPCs (one refused, logged as `error:`).
#[test]
fn a_step_always_exiting_with_the_code_is_requeued_up_to_the_cap_once_per_event() {
    let _t = testbed();
    let (job, (record, output)) = submit_script("capped", ALWAYS_SCRIPT, &["-N2", "--requeue"]);
    let ctx = format!("job {job}: {record}\n{output}");
    assert!(record.contains("Restarts=1 "), "{ctx}");
    assert!(record.contains("JobState=FAILED"), "{ctx}");
    let mut runs: Vec<&str> = output
        .lines()
        .filter_map(|l| l.strip_prefix("RUN "))
        .collect();
    runs.sort();
    assert_eq!(
        runs,
        [
            format!("{job}.0"),
            format!("{job}.0"),
            format!("{job}.0.r1"),
            format!("{job}.0.r1")
        ],
        "{ctx}"
    );
    let cap = cap_line(&job);
    let said: Vec<&str> = output
        .lines()
        .filter(|l| l.contains("tf-cluster"))
        .collect();
    assert_eq!(said.len(), 1, "one line, naming the cap: {ctx}");
    assert!(said[0].ends_with(&cap), "{ctx}");
    let errors: Vec<String> = requeue_errors(&job)
        .into_iter()
        .filter(|l| !l.ends_with(&cap))
        .collect();
    assert!(errors.is_empty(), "{ctx}\n{}", errors.join("\n"));
}

/// The image without Slurm's commands (docker/node/images/make.sh), with the
/// node's /usr/lib (Python's library and torch) bound in.
const IMAGE: &str =
    "--container-image=/opt/tfc-images/python-torch --container-mounts=/usr/lib:/usr/lib";

/// The training's batch script: which incarnation and whether the host has
/// scontrol (the task must not), then the step in the image.
const TRAIN_SCRIPT: &str = r#"#!/bin/bash
echo "incarnation ${SLURM_RESTART_COUNT:-0} of job $SLURM_JOB_ID, host scontrol: $(command -v scontrol)"
srun --torch-cluster --tf-requeue-on=43 IMAGE python3 requeue_on_train.py "$CHECKPOINTS" 43
code=$?
echo "incarnation ${SLURM_RESTART_COUNT:-0} ended with $code"
exit $code
"#;

/// How long the job may take to reach a point (torch starts slowly on a
/// loaded 2-core machine; the requeued job waits 30 s to start again).
const PATIENCE: Duration = Duration::from_secs(300);

/// `scontrol show job -o`'s fields.
fn record(job: &str) -> std::collections::BTreeMap<String, String> {
    let out = exec(&["scontrol", "show", "job", "-o", job]);
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|f| f.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// One rank's lines of one incarnation, from its task's file (both
/// incarnations appended): the lines from its `starting at step` line with
/// run id `run` up to the next `starting at step` line.
fn incarnation(text: &str, run: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        if line.contains(": starting at step ") {
            inside = line.ends_with(&format!(", run {run}"));
        }
        if inside {
            lines.push(line.to_string());
        }
    }
    lines
}

/// `step N: loss L` lines: (N, L).
fn losses(lines: &[String]) -> Vec<(u32, f64)> {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix("step "))
        .filter_map(|l| l.split_once(": loss "))
        .map(|(n, l)| (n.parse().unwrap(), l.parse().unwrap()))
        .collect()
}

/// The value after `what` in the line holding it: `… what VALUE…`.
fn after<'a>(lines: &'a [String], what: &str) -> Option<&'a str> {
    lines
        .iter()
        .find_map(|l| l.split_once(what).map(|(_, rest)| rest))
}

#[test]
fn a_training_without_scontrol_checkpoints_exits_with_the_code_and_resumes() {
    let _s = standin();
    let started = Instant::now();
    let dir = format!("/home/alice/tfc-requeue-on-torch-{}", std::process::id());
    let script = TRAIN_SCRIPT.replace("IMAGE", IMAGE);
    common::install(
        &dir,
        &[
            ("job.sh", script.as_str()),
            (
                "requeue_on_train.py",
                include_str!("../fixtures/pytorch/requeue_on_train.py"),
            ),
        ],
        "",
    );
    let files = Outputs::new("requeue-on-torch");
    let log = format!("{}/job.log", files.path());
    let checkpoints = format!("CHECKPOINTS={dir}/checkpoints");
    exec(&["mkdir", "-p", &checkpoints["CHECKPOINTS=".len()..]]);
    let env = files.env();
    let mut cmd = vec!["env", "SLURM_OPEN_MODE=append", &checkpoints];
    cmd.extend(env.iter().map(String::as_str));
    let job_sh = format!("{dir}/job.sh");
    cmd.extend_from_slice(&[
        "sbatch",
        "--parsable",
        "--requeue",
        "--open-mode=append",
        "--nodes=2",
        "--ntasks-per-node=1",
        "--time=10",
        "-D",
        &dir,
        "-o",
        &log,
        &job_sh,
    ]);
    let out = exec(&cmd);
    let job = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        out.status.success() && job.chars().all(|c| c.is_ascii_digit()) && !job.is_empty(),
        "sbatch: {job} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _cancel = Cancel(job.clone());
    let wait = |what: &str, ready: &dyn Fn(&std::collections::BTreeMap<String, String>) -> bool| {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let r = record(&job);
            if ready(&r) {
                return;
            }
            let state = r.get("JobState").map(String::as_str).unwrap_or("");
            assert!(
                Instant::now() < deadline
                    && !matches!(state, "FAILED" | "CANCELLED" | "TIMEOUT" | "NODE_FAIL"),
                "job {job}: {what}: not within {PATIENCE:?} ({r:?}):\n{}",
                files.dump()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    };
    // Both ranks past step 3 of the first incarnation: their handlers are set.
    wait("step 3 on both ranks", &|_| {
        let tasks = files.tasks();
        tasks.len() == 2 && tasks.values().all(|t| t.stdout.contains("step 3: loss "))
    });
    let signalled = exec(&["scancel", "--signal=USR1", &job]);
    assert!(signalled.status.success(), "{signalled:?}");
    wait("COMPLETED", &|r| {
        r.get("JobState").is_some_and(|s| s == "COMPLETED")
    });
    let took = started.elapsed();
    let r = record(&job);
    let ctx = format!("job {job} {r:?}:\n{}", files.dump());
    assert_eq!(r["Restarts"], "1", "{ctx}");
    assert_eq!(r["ExitCode"], "0:0", "{ctx}");

    // The batch script ran twice on a host that has scontrol. The first incarnation's script
    // does not end by itself: the first node whose task exits 43 requeues the job, and Slurm
    // ends the rest of it (another rank's task, having saved, may be ended before its own exit).
    let log_text = files.tree().remove("job.log").unwrap_or_default();
    assert!(
        log_text.contains(&format!("incarnation 0 of job {job}, host scontrol: /"))
            && log_text.contains(&format!("incarnation 1 of job {job}, host scontrol: /")),
        "{ctx}"
    );
    assert!(!log_text.contains("incarnation 0 ended with 0"), "{ctx}");
    assert!(log_text.contains("incarnation 1 ended with 0"), "{ctx}");

    let tasks = files.tasks();
    assert_eq!(tasks.keys().copied().collect::<Vec<_>>(), [0, 1], "{ctx}");
    let first_run = format!("{job}.0");
    let second_run = format!("{job}.0.r1");
    let mut saved_at = Vec::new();
    for (rank, task) in &tasks {
        let first = incarnation(&task.stdout, &first_run);
        let second = incarnation(&task.stdout, &second_run);
        for lines in [&first, &second] {
            assert_eq!(
                after(lines, ": slurm commands: "),
                Some("none"),
                "rank {rank}: scontrol, srun, sbatch or scancel runnable in the image: {ctx}"
            );
        }
        assert_eq!(
            after(&first, ": starting at step "),
            Some(&*format!("0, run {first_run}")),
            "rank {rank}: {ctx}"
        );
        let saved: u32 = after(&first, ": stopping at step ")
            .and_then(|s| s.strip_suffix(", exiting 43"))
            .unwrap_or_else(|| panic!("rank {rank} did not stop: {ctx}"))
            .parse()
            .unwrap();
        if *rank == 0 {
            assert_eq!(
                after(&first, ": saved step "),
                Some(&*saved.to_string()),
                "{ctx}"
            );
        }
        assert!(saved >= 3, "{ctx}");
        saved_at.push(saved);
        let before = losses(&first);
        assert_eq!(
            before.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
            (0..=saved).collect::<Vec<_>>(),
            "rank {rank}: {ctx}"
        );
        assert!(
            before.windows(2).all(|w| w[1].1 < w[0].1),
            "rank {rank}: loss falls: {ctx}"
        );
        let last = before.last().unwrap().1;

        // The second incarnation: the checkpoint of the saved step, then the step after it,
        // its loss below the saved one (a fresh start would begin at step 0's loss), to the end.
        let checkpoint = after(&second, ": checkpoint of step ").unwrap_or_else(|| panic!("{ctx}"));
        assert_eq!(
            checkpoint,
            format!("{saved}, loss {last:?}"),
            "rank {rank}: {ctx}"
        );
        assert_eq!(
            after(&second, ": starting at step "),
            Some(&*format!("{}, run {second_run}", saved + 1)),
            "rank {rank}: {ctx}"
        );
        let resumed = losses(&second);
        assert_eq!(
            resumed.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
            (saved + 1..=saved + 3).collect::<Vec<_>>(),
            "rank {rank}: {ctx}"
        );
        assert!(
            resumed[0].1 < last,
            "rank {rank}: resumed above the checkpoint's loss: {ctx}"
        );
        assert!(
            resumed.windows(2).all(|w| w[1].1 < w[0].1),
            "rank {rank}: {ctx}"
        );
        assert!(
            after(&second, ": done at step ")
                .is_some_and(|d| d.starts_with(&format!("{}, loss ", saved + 3))),
            "rank {rank}: {ctx}"
        );
    }
    assert_eq!(
        saved_at[0], saved_at[1],
        "both ranks saved at one step: {ctx}"
    );

    // Accounting: the first incarnation REQUEUED, the second COMPLETED (slurmdbd may lag).
    let deadline = Instant::now() + Duration::from_secs(60);
    let states = loop {
        let out = exec_for(
            60,
            &[
                "sacct",
                "-j",
                &job,
                "--duplicates",
                "-X",
                "-n",
                "-P",
                "-o",
                "JobID,State",
            ],
        );
        let states: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.split('|').nth(1).unwrap_or("").to_string())
            .collect();
        if states.iter().any(|s| s == "COMPLETED") || Instant::now() > deadline {
            break states;
        }
        std::thread::sleep(Duration::from_secs(1));
    };
    assert_eq!(states, ["REQUEUED", "COMPLETED"], "sacct: {ctx}");
    exec(&["rm", "-rf", &dir]);
    eprintln!(
        "torch: job {job} saved at step {} and resumed at {} as {second_run}, done in {:.0} s",
        saved_at[0],
        saved_at[0] + 1,
        took.as_secs_f64()
    );
}

/// Cancels the job when dropped: a failed test leaves no job behind.
struct Cancel(String);

impl Drop for Cancel {
    fn drop(&mut self) {
        exec(&["scancel", &self.0]);
    }
}
