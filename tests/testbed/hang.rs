//! `tf-cluster hang` on a running gloo training of 6 ranks on 3 nodes: a
//! rank stuck in a loop of its own before an all-reduce, or asleep in a
//! syscall, is named with its node while the other five wait in the
//! all-reduce; a healthy step is reported as one place or moving; another
//! user's job is refused. Bookworm's image has py-spy (PyPI's): the verdict
//! names the stuck rank's own line of the script; with `--tf-record` the
//! report lists the flight recorder's dump that `hang` asked for through the
//! rank's pipe (gloo makes no pipe: the script stands in for
//! ProcessGroupNCCL's watchdog, a FIFO read without blocking, as torch's).
//! TFC_HANG_RUNS=N runs each stuck case N times.
//!
//! Cost: two allocations of one 3-node training each (the stuck cases),
//! one healthy one, each ended by scancel once `hang` answered (~30 s each).

use crate::common;

use std::time::{Duration, Instant};

use common::{exec, exec_for, install, testbed};

const DIR: &str = "/home/alice/hang";

/// A gloo training whose rank STUCK (argv[2]) stops before its fifth
/// all-reduce: `loop` spins in Python, `sleep` sleeps in the kernel,
/// `none` trains on.
const TRAIN: &str = r#"
import os, sys, time, threading
import torch, torch.distributed as dist
dist.init_process_group("gloo")
rank, stuck = dist.get_rank(), int(sys.argv[1])
how = sys.argv[2]
pipe = os.environ.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE")
if pipe:
    # Stands in for ProcessGroupNCCL's watchdog: its pipe, read without
    # blocking; a line read, its dump at the prefix + rank.
    path = "%s%d.pipe" % (pipe, rank)
    os.mkfifo(path)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    def watch():
        while True:
            if os.read(fd, 128):
                prefix = os.environ["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"]
                with open("%s%d" % (prefix, rank), "w") as f:
                    f.write("stand-in dump\n")
            time.sleep(0.2)
    threading.Thread(target=watch, daemon=True).start()
t = torch.ones(1000)
for step in range(100000):
    if step == 5 and rank == stuck and how == "loop":
        while True:
            pass
    if step == 5 and rank == stuck and how == "sleep":
        time.sleep(3600)
    dist.all_reduce(t)
    if step == 4 and rank == 0:
        print("TFC_STEP4", flush=True)
"#;

/// The 1-based lines of TRAIN holding `text`, as `train.py:N`.
fn lines_of(text: &str) -> Vec<String> {
    // TRAIN's first line is the empty one after `r#"`: the file's line 1.
    TRAIN
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains(text))
        .map(|(i, _)| format!("train.py:{}", i + 1))
        .collect()
}

/// Starts the training in a batch job, waits for its step to run, runs
/// `tf-cluster hang JOB` as alice: the report and the seconds it took.
fn hang_of(stuck: u32, how: &str, record: bool) -> (String, f64) {
    let record = match record {
        true => format!(" --tf-record={DIR}/rec"),
        false => String::new(),
    };
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
        &format!("srun --torch-cluster{record} python3 {DIR}/train.py {stuck} {how}"),
    ]);
    let job = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(!job.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    let started = Instant::now();
    // Every rank is past its imports and trains once rank 0 ended step 4's
    // all-reduce (a stuck rank stops at step 5, at once): rank 0's line.
    let mut training = false;
    while !training && started.elapsed() < Duration::from_secs(90) {
        let log = exec(&["cat", &format!("{DIR}/{job}.out")]);
        let running = exec(&["squeue", "-h", "-s", "-j", &job, "-o", "%i"]);
        let step0 = String::from_utf8_lossy(&running.stdout).contains(&format!("{job}.0"));
        training = step0 && String::from_utf8_lossy(&log.stdout).contains("TFC_STEP4");
        if !training {
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    if !training {
        exec(&["scancel", &job]);
        panic!("job {job}'s training did not reach step 4 in 90 s");
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
    // py-spy names the loop's line (`while` or `pass`), the others wait in
    // the all-reduce called from the script's line.
    let pass = lines_of("            pass");
    let at: usize = pass[0].trim_start_matches("train.py:").parse().unwrap();
    let spinning = [format!("train.py:{}", at - 1), pass[0].clone()];
    let reduce = &lines_of("dist.all_reduce(t)")[0];
    for run in 1..=runs() {
        let (text, took) = hang_of(3, "loop", false);
        let v = verdict(&text);
        eprintln!("loop run {run}: {took:.1}s: {v}");
        let named = spinning
            .iter()
            .any(|at| v.starts_with(&format!("verdict: rank 3 on node2 is in {at} ")));
        assert!(named, "{spinning:?}: {text}");
        assert!(
            v.contains(&format!("; 5 ranks are in all_reduce() ← {reduce} ")),
            "{text}"
        );
        assert!(!text.contains("no Python stack"), "{text}");
        assert!(took < 60.0, "took {took:.0}s: {text}");
    }
}

#[test]
fn a_rank_asleep_in_a_syscall_is_named_with_its_node() {
    let _t = testbed();
    setup();
    // With a record: every rank's pipe is there (the stand-in's), and hang
    // lists the dump it asked for.
    let sleeping = &lines_of("time.sleep(3600)")[0];
    let reduce = &lines_of("dist.all_reduce(t)")[0];
    for run in 1..=runs() {
        let (text, took) = hang_of(4, "sleep", true);
        let v = verdict(&text);
        eprintln!("sleep run {run}: {took:.1}s: {v}");
        assert!(
            v.starts_with(&format!("verdict: rank 4 on node3 is in {sleeping} ")),
            "{text}"
        );
        assert!(
            v.contains(&format!("; 5 ranks are in all_reduce() ← {reduce} ")),
            "{text}"
        );
        let row = text.lines().find(|l| l.starts_with("4 ")).unwrap_or("");
        assert!(row.contains("nanosleep"), "{text}");
        let fr = text
            .lines()
            .find(|l| l.starts_with("flight recorder: rank 4: "))
            .unwrap_or("");
        assert!(
            fr.starts_with("flight recorder: rank 4: dump asked through 1 pipe(s); dump files /home/alice/hang/rec/")
                && fr.ends_with("/rank4.torch-fr.4"),
            "{text}"
        );
        assert!(took < 60.0, "took {took:.0}s: {text}");
    }
}

#[test]
fn a_healthy_step_is_one_place_or_moving_and_another_users_job_is_refused() {
    let _t = testbed();
    setup();
    let (text, _) = hang_of(99, "none", false);
    let v = verdict(&text);
    // Moving (every rank on CPU: their stacks are where each was caught,
    // as may differ), else all in one place, no rank singled out.
    let moving = v.starts_with("verdict: moving: every rank used CPU in the window; ");
    assert!(
        moving || v.starts_with("verdict: all 6 ranks are in one place"),
        "{text}"
    );
    assert!(
        moving || !v.contains("rank "),
        "no rank singled out: {text}"
    );
    // bob asks about alice's running job, named to pass for his in
    // `scontrol show job` (its name comes before its owner there).
    let bob_uid = common::on("ctl", &["id", "-u", "bob"]);
    let bob_uid = String::from_utf8_lossy(&bob_uid.stdout).trim().to_string();
    let name = format!("x UserId=bob({bob_uid})");
    let out = exec(&[
        "sbatch",
        "--parsable",
        "-N1",
        "-t",
        "2",
        "-J",
        &name,
        "--wrap",
        "srun sleep 60",
    ]);
    let job = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let bob = common::as_bob(&format!("tf-cluster hang {job}"));
    exec(&["scancel", &job]);
    let err = String::from_utf8_lossy(&bob.stderr);
    assert_eq!(bob.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("job {job} is alice's, not yours")),
        "{err}"
    );
}
