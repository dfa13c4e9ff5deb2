//! One decision per step: a step the plugin refuses ends on every node within
//! seconds, also when the nodes of the step see different facts (issue 25,
//! and issue 27 item 9). On the testbed's 3 nodes × 4 fake GPUs, each case
//! runs a minute of sleep, then prints `finished`: where the step is refused
//! on one node, a task on another node must not run on to `finished`.
//!
//! Each case must give: srun non-zero within [`LIMIT`] (the time to the end
//! of the step, measured inside the testbed around srun), at least one
//! `tf-cluster:` line and every one of them naming what was refused, no
//! `finished`, no task of the step still running on any node, no step left,
//! no node drained. On Slurm 24.11 and 26.05 srun sees some of these
//! requests and refuses them before launch: the same assertions hold.
//!
//! `-N2 -n4` puts ranks 0-2 on node1 and rank 3 on node2; Slurm 22.05 binds
//! no GPU per task on a node where the step has one task, and `--gpus=5` on
//! two nodes gives node1 4 GPUs and node2 1: the nodes see different facts.

mod common;

use std::sync::Mutex;
use std::time::Duration;

use common::{assert_no_node_drained, exec, messages, on, testbed};

/// The longest a refused step may take to end on every node.
const LIMIT: Duration = Duration::from_secs(15);

/// What every case runs: a minute of sleep, then a line no refused step may
/// print, in one process as a training is: with `sleep 60; echo finished`
/// in a shell, proctrack/linuxproc (the testbed's) was seen to kill the
/// sleep but pass over the shell, which then printed `finished` at once
/// (the step still ended in 2.5 s; a plain `scancel -s KILL` does the same).
const PAYLOAD: &str = "exec perl -e \"sleep 60; print qq(finished\\n)\"";

/// The cases hold the testbed's GPUs and are timed: one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

const TORCH_BOUND: &str = "--torch-cluster: Slurm binds GPUs to each task here";
const JAX_SHARED: &str = "--jax-cluster: Slurm's GPU binding";
const OVER: &str = "tasks on a node but";

/// What one refused step gave.
struct Ended {
    code: Option<i32>,
    took: Duration,
    text: String,
}

/// Runs `srun -l ARGS sh -c PAYLOAD` as alice and times it inside the
/// testbed (docker's own start-up is not counted).
fn run(args: &[&str]) -> Ended {
    let quoted: Vec<String> = args.iter().map(|a| format!("'{a}'")).collect();
    let script = format!(
        "t0=$(date +%s%N); srun -l {} sh -c '{PAYLOAD}'; rc=$?; t1=$(date +%s%N); echo \"TFC_END rc=$rc ms=$(( (t1 - t0) / 1000000 ))\"",
        quoted.join(" ")
    );
    let out = exec(&["bash", "-c", &script]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let end = stdout
        .lines()
        .find_map(|l| l.strip_prefix("TFC_END "))
        .unwrap_or_else(|| panic!("no end line:\n{stdout}{stderr}"));
    let field = |name: &str| -> i64 {
        end.split_whitespace()
            .find_map(|f| f.strip_prefix(name))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} in {end:?}"))
    };
    Ended {
        code: Some(field("rc=") as i32),
        took: Duration::from_millis(field("ms=") as u64),
        text: format!("{stdout}{stderr}"),
    }
}

/// The steps of alice's jobs still listed by slurmctld.
fn steps_left() -> Vec<String> {
    let out = exec(&["squeue", "-h", "-s", "-o", "%i %j"]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.contains(".extern") && !l.contains(".interactive") && !l.contains(".batch"))
        .map(str::to_string)
        .collect()
}

/// alice's processes of the payload still running on any node.
fn payload_left() -> Vec<String> {
    let mut left = Vec::new();
    for node in ["node1", "node2", "node3"] {
        let out = on(node, &["pgrep", "-a", "-u", "alice", "-f", "sleep 60"]);
        left.extend(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(|l| format!("{node}: {l}")),
        );
    }
    left
}

/// Runs case `case` and asserts that the refused step ended everywhere
/// within [`LIMIT`], refused with a plugin line containing `why`.
fn refused_everywhere(case: &str, args: &[&str], why: &str) {
    let _t = testbed();
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let ended = run(args);
    let ctx = format!("{case} (srun {}):\n{}", args.join(" "), ended.text);
    // Recorded before any assertion, for the before/after table.
    eprintln!(
        "TIMING {case}: {:.1} s, exit {:?}, suite {}",
        ended.took.as_secs_f64(),
        ended.code,
        std::env::var("TFC_SUITE").unwrap_or_default()
    );
    let left = payload_left();
    let steps = steps_left();
    assert_no_node_drained();
    assert!(
        left.is_empty(),
        "tasks still running after srun returned: {left:?}\n{ctx}"
    );
    assert!(steps.is_empty(), "steps left behind: {steps:?}\n{ctx}");
    assert!(
        !ended.text.lines().any(|l| l.ends_with(": finished")),
        "a task of the refused step ran to its end\n{ctx}"
    );
    assert_ne!(ended.code, Some(0), "srun should fail\n{ctx}");
    let lines = messages(&ended.text);
    assert!(!lines.is_empty(), "no tf-cluster line\n{ctx}");
    assert!(
        lines.iter().all(|l| l.contains(why)),
        "want every tf-cluster line to contain {why:?}\n{ctx}"
    );
    assert!(
        ended.took < LIMIT,
        "the step took {:.1} s to end, over {} s\n{ctx}",
        ended.took.as_secs_f64(),
        LIMIT.as_secs()
    );
}

// Issue 25: Slurm binds GPUs per task on node1 (3 tasks), not on node2 (1).

#[test]
fn gpus_per_task_torch() {
    refused_everywhere(
        "gpus-per-task torch",
        &["-N2", "-n4", "--gpus-per-task=1", "--torch-cluster"],
        TORCH_BOUND,
    );
}

#[test]
fn gpu_bind_single_torch() {
    refused_everywhere(
        "gpu-bind single:1 torch",
        &[
            "-N2",
            "-n4",
            "--gres=gpu:4",
            "--gpu-bind=single:1",
            "--torch-cluster",
        ],
        TORCH_BOUND,
    );
}

#[test]
fn gpu_bind_closest_jax() {
    refused_everywhere(
        "gpu-bind closest jax",
        &[
            "-N2",
            "-n4",
            "--gres=gpu:4",
            "--gpu-bind=closest",
            "--jax-cluster",
        ],
        JAX_SHARED,
    );
}

#[test]
fn gpu_bind_closest_torch_jax() {
    refused_everywhere(
        "gpu-bind closest torch+jax",
        &[
            "-N2",
            "-n4",
            "--gres=gpu:4",
            "--gpu-bind=closest",
            "--torch-cluster",
            "--jax-cluster",
        ],
        TORCH_BOUND,
    );
}

// Issue 27 item 9: the count rules, and nodes given different GPU counts.

#[test]
fn gres_2_torch_3_and_1() {
    refused_everywhere(
        "gres:2 torch 3+1",
        &["-N2", "-n4", "--gres=gpu:2", "--torch-cluster"],
        OVER,
    );
}

#[test]
fn gpu_bind_map_jax() {
    refused_everywhere(
        "gpu-bind map_gpu:0,1 jax",
        &[
            "-N2",
            "-n4",
            "--gres=gpu:4",
            "--gpu-bind=map_gpu:0,1",
            "--jax-cluster",
        ],
        JAX_SHARED,
    );
}

#[test]
fn gres_2_jax_3_and_1() {
    refused_everywhere(
        "gres:2 jax 3+1",
        &["-N2", "-n4", "--gres=gpu:2", "--jax-cluster"],
        OVER,
    );
}

#[test]
fn tf_gpus_per_task_jax() {
    refused_everywhere(
        "tf-gpus-per-task=2 jax",
        &[
            "-N2",
            "-n4",
            "--gres=gpu:4",
            "--tf-gpus-per-task=2",
            "--jax-cluster",
        ],
        "GPU(s) per task",
    );
}

#[test]
fn cyclic_gres_2_torch() {
    refused_everywhere(
        "cyclic gres:2 torch 1+3+1",
        &[
            "-N3",
            "-n5",
            "-m",
            "cyclic",
            "--gres=gpu:2",
            "--torch-cluster",
        ],
        OVER,
    );
}

#[test]
fn gpus_5_torch() {
    refused_everywhere(
        "gpus=5 torch 4+1 GPUs",
        &["-N2", "--ntasks-per-node=2", "--gpus=5", "--torch-cluster"],
        OVER,
    );
}

#[test]
fn gpus_5_tf_gpus_per_node() {
    refused_everywhere(
        "gpus=5 tf-gpus-per-node=2 4+1 GPUs",
        &[
            "-N2",
            "--ntasks-per-node=1",
            "--gpus=5",
            "--tf-gpus-per-node=2",
            "--tf-cluster",
        ],
        "gpus-per-node is 2",
    );
}

/// Not every split is a refusal: `-N2 -n4 --gpus=4` gives node1 3 GPUs for
/// its 3 tasks and node2 1 for its 1, and every rank has a GPU of its own.
/// Counting the fullest node's 3 tasks against node2's 1 GPU would refuse
/// it: the count rules stay each node's own.
#[test]
fn uneven_gpus_that_fit_run() {
    let _t = testbed();
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    for fw in [
        &["--torch-cluster"][..],
        &["--jax-cluster"],
        &["--torch-cluster", "--jax-cluster"],
    ] {
        let mut cmd = vec!["srun", "-N2", "-n4", "--gpus=4"];
        cmd.extend_from_slice(fw);
        cmd.extend_from_slice(&["-l", "sh", "-c", "echo ran"]);
        let out = exec(&cmd);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.status.code(), Some(0), "{fw:?}:\n{text}");
        assert_eq!(
            text.lines().filter(|l| l.ends_with(": ran")).count(),
            4,
            "{fw:?}:\n{text}"
        );
    }
    assert_no_node_drained();
}
