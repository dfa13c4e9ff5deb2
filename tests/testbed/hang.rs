//! `tf-cluster hang` on a running gloo training of 6 ranks on 3 nodes: a
//! rank stuck in a loop of its own before an all-reduce, or asleep in a
//! syscall, is named with its node while the other five wait in the
//! all-reduce; a healthy step is reported as one place or moving; another
//! user's job is refused. The testbed's images have no py-spy: the verdict
//! rests on each rank's CPU time and wait channel, and the report says in
//! one line why no Python stack is shown.
//!
//! Cost: two allocations of one 3-node training each (the stuck cases),
//! one healthy one, each ended by scancel once `hang` answered (~30 s each).

use crate::common;

use std::time::{Duration, Instant};

use common::{exec, exec_for, install, testbed};

const DIR: &str = "/home/alice/hang";

/// A gloo training whose rank STUCK (argv[2]) stops before its fifth
/// all-reduce: `loop` spins in Python, `sleep` sleeps in the kernel,
/// `none` trains on, sleeping a little each step.
const TRAIN: &str = r#"
import os, sys, time
import torch, torch.distributed as dist
dist.init_process_group("gloo")
rank, stuck = dist.get_rank(), int(sys.argv[1])
how = sys.argv[2]
t = torch.ones(1000)
for step in range(100000):
    if step == 5 and rank == stuck and how == "loop":
        while True:
            pass
    if step == 5 and rank == stuck and how == "sleep":
        time.sleep(3600)
    dist.all_reduce(t)
    if step == 5 and rank == 0:
        print("TFC_STEP5", flush=True)
"#;

/// Starts the training in a batch job, waits for its step to run, runs
/// `tf-cluster hang JOB` as alice: the report and the seconds it took.
fn hang_of(stuck: u32, how: &str) -> (String, f64) {
    let out = exec(&[
        "sbatch",
        "--parsable",
        "-N3",
        "--ntasks-per-node=2",
        "-t",
        "5",
        "-o",
        &format!("{DIR}/%j.out"),
        "--wrap",
        &format!("srun --torch-cluster python3 {DIR}/train.py {stuck} {how}"),
    ]);
    let job = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(!job.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    let started = Instant::now();
    // The stuck rank is stuck once every other rank reached step 5.
    while started.elapsed() < Duration::from_secs(90) {
        let log = exec(&["cat", &format!("{DIR}/{job}.out")]);
        let running = exec(&["squeue", "-h", "-s", "-j", &job, "-o", "%i"]);
        let step0 = String::from_utf8_lossy(&running.stdout).contains(&format!("{job}.0"));
        if step0 && (how == "none" || String::from_utf8_lossy(&log.stdout).contains("TFC_STEP5")) {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    std::thread::sleep(Duration::from_secs(2));
    let asked = Instant::now();
    let out = exec_for(70, &["tf-cluster", "hang", &job]);
    let took = asked.elapsed().as_secs_f64();
    exec(&["scancel", &job]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (text, took)
}

/// How many times each stuck case runs: 1 in the suite (CI time), more by
/// hand with TFC_HANG_RUNS=N; each run's verdict and time go to stderr.
fn runs() -> u32 {
    std::env::var("TFC_HANG_RUNS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1)
}

fn setup() {
    install(DIR, &[("train.py", TRAIN)], "true");
}

/// The verdict's line.
fn verdict(text: &str) -> &str {
    text.lines()
        .find(|l| l.starts_with("verdict:"))
        .unwrap_or("")
}

#[test]
fn a_rank_in_a_loop_of_its_own_is_named_with_its_node() {
    let _t = testbed();
    setup();
    // Rank 3 is node2's second task (block distribution, 2 per node).
    for run in 1..=runs() {
        let (text, took) = hang_of(3, "loop");
        let v = verdict(&text);
        eprintln!("loop run {run}: {took:.1}s: {v}");
        assert!(
            v.starts_with("verdict: rank 3 on node2 is on CPU"),
            "{text}"
        );
        assert!(v.contains("; 5 ranks are waiting"), "{text}");
        assert!(
            text.contains("no Python stack: py-spy is not installed on node"),
            "{text}"
        );
        assert!(took < 60.0, "took {took:.0}s: {text}");
    }
}

#[test]
fn a_rank_asleep_in_a_syscall_is_named_with_its_node() {
    let _t = testbed();
    setup();
    for run in 1..=runs() {
        let (text, took) = hang_of(4, "sleep");
        let v = verdict(&text);
        eprintln!("sleep run {run}: {took:.1}s: {v}");
        assert!(
            v.starts_with("verdict: rank 4 on node3 is waiting"),
            "{text}"
        );
        assert!(v.contains("nanosleep"), "{text}");
        assert!(v.contains("; 5 ranks are waiting"), "{text}");
        assert!(took < 60.0, "took {took:.0}s: {text}");
    }
}

#[test]
fn a_healthy_step_is_one_place_or_moving_and_another_users_job_is_refused() {
    let _t = testbed();
    setup();
    let (text, _) = hang_of(99, "none");
    let v = verdict(&text);
    assert!(
        v.starts_with("verdict: moving") || v.starts_with("verdict: all 6 ranks are in one place"),
        "{text}"
    );
    assert!(!v.contains("rank "), "no rank singled out: {text}");
    // bob asks about alice's running job.
    let out = exec(&[
        "sbatch",
        "--parsable",
        "-N1",
        "-t",
        "2",
        "--wrap",
        "srun sleep 60",
    ]);
    let job = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let bob = common::on(
        "ctl",
        &[
            "runuser",
            "-u",
            "bob",
            "--",
            "sh",
            "-c",
            &format!("cd /tmp && tf-cluster hang {job}"),
        ],
    );
    exec(&["scancel", &job]);
    let err = String::from_utf8_lossy(&bob.stderr);
    assert_eq!(bob.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("job {job} is alice's, not yours")),
        "{err}"
    );
}
