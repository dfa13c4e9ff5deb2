//! Commands and steps run in the testbed: as alice on the submit host or as
//! root in a container, srun and sbatch steps whose tasks write files of
//! their own, and the nodes' states.

use std::process::{Command, Output};

use super::outputs::Outputs;
use super::{PROBE, Run, parse_run, repo};

/// `timeout SECONDS CMD…` in the testbed's container for PLACE (what
/// `docker/testbed.sh PLACE…` names): the one way the tests run a command
/// in the testbed.
fn run_in(place: &[&str], seconds: u32, cmd: &[&str]) -> Output {
    let (container, alice) = match place {
        ["exec"] => (format!("{}-ctl", super::prefix()), true),
        ["admin"] => (format!("{}-ctl", super::prefix()), false),
        ["node-exec", host] => (format!("{}-{host}", super::prefix()), false),
        _ => panic!("no such place: {place:?}"),
    };
    let limit = seconds.to_string();
    let full: Vec<&str> = ["timeout", limit.as_str()]
        .into_iter()
        .chain(cmd.iter().copied())
        .collect();
    if let Some(out) = super::exec_server::run(&container, alice, &full) {
        return out;
    }
    docker_exec(place, seconds, cmd)
}

/// [`run_in`] through a `docker exec` of its own (no command server).
fn docker_exec(place: &[&str], seconds: u32, cmd: &[&str]) -> Output {
    // `docker exec` itself, as `docker/testbed.sh exec|admin|node-exec`
    // runs it: the tests run thousands of commands, and the script's bash
    // and its `docker container inspect` doubled each one's CPU on the
    // host (a stopped container fails docker exec just as clearly).
    let mut docker = Command::new("docker");
    docker.args(["exec", "-i"]);
    let container = match place {
        ["exec"] => {
            docker.args(["-u", "alice", "-w", "/home/alice"]);
            docker.args([
                "-e",
                "USER=alice",
                "-e",
                "LOGNAME=alice",
                "-e",
                "HOME=/home/alice",
            ]);
            format!("{}-ctl", super::prefix())
        }
        ["admin"] => format!("{}-ctl", super::prefix()),
        ["node-exec", host] => format!("{}-{host}", super::prefix()),
        _ => panic!("no such place: {place:?}"),
    };
    docker
        .arg(&container)
        .args(["timeout", &seconds.to_string()])
        .args(cmd)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running docker exec in {container}: {e}"))
}

/// Runs `cmd` as the user alice on the submit host.
pub fn exec(cmd: &[&str]) -> Output {
    run_in(&["exec"], 120, cmd)
}

/// Runs `cmd` as root in container `host` (`ctl`, `node1`…), with no time
/// limit of its own beyond 120 s.
pub fn on(host: &str, cmd: &[&str]) -> Output {
    if host == "ctl" {
        run_in(&["admin"], 120, cmd)
    } else {
        run_in(&["node-exec", host], 120, cmd)
    }
}

/// [`on`] with a longer limit than its 120 s.
pub fn on_for(host: &str, seconds: u32, cmd: &[&str]) -> Output {
    if host == "ctl" {
        run_in(&["admin"], seconds, cmd)
    } else {
        run_in(&["node-exec", host], seconds, cmd)
    }
}

/// Every container of the testbed: the submit host first.
pub const HOSTS: [&str; 4] = ["ctl", "node1", "node2", "node3"];

/// [`exec`] with a longer limit than its 120 s (real trainers start slowly
/// on a busy machine).
pub fn exec_for(seconds: u32, cmd: &[&str]) -> Output {
    run_in(&["exec"], seconds, cmd)
}

/// `srun ARGS bash -c PROBE`.
pub fn srun(args: &[&str]) -> Run {
    srun_env(&[], args)
}

/// `env VARS srun ARGS bash -c PROBE`: srun with `VAR=value`s set. Each
/// task's lines are read from its own file, never from srun's merged stream.
pub fn srun_env(vars: &[&str], args: &[&str]) -> Run {
    let mut full = args.to_vec();
    full.extend_from_slice(&["bash", "-c", PROBE]);
    parse_run(srun_tasks_env(vars, &full))
}

/// `srun ARGS` as alice, each task's stdout and stderr in files of their own
/// (outputs::Outputs), returned as one output: stdout every task's, rank by
/// rank (a step started inside a task after the step's own); stderr srun's
/// own, then every task's.
pub fn srun_tasks(args: &[&str]) -> Output {
    srun_tasks_env(&[], args)
}

/// [`srun_tasks`] with `VAR=value`s in srun's environment.
pub fn srun_tasks_env(vars: &[&str], args: &[&str]) -> Output {
    srun_tasks_for(120, vars, args)
}

/// [`srun_tasks_env`] with a limit of `seconds` instead of [`exec`]'s 120.
pub fn srun_tasks_for(seconds: u32, vars: &[&str], args: &[&str]) -> Output {
    let outputs = Outputs::new("srun");
    let files = outputs.srun_args();
    let mut cmd = vec!["env"];
    cmd.extend_from_slice(vars);
    cmd.push("srun");
    cmd.extend(files.iter().map(String::as_str));
    cmd.extend_from_slice(args);
    let srun = exec_for(seconds, &cmd);
    let mut stdout = srun.stdout;
    stdout.extend(outputs.steps_stdout().concat().into_bytes());
    let mut stderr = srun.stderr;
    stderr.extend(outputs.all_stderr().into_bytes());
    Output {
        status: srun.status,
        stdout,
        stderr,
    }
}

/// `sbatch --wait ARGS --wrap "srun SRUN_ARGS bash -c PROBE"`: what the
/// batch step's tasks saw, and sbatch's own result.
/// The step's tasks write their lines to files of their own; the job's
/// output file holds the batch script's and slurmstepd's messages.
pub fn sbatch(args: &[&str], srun_args: &str) -> Run {
    let outputs = Outputs::new("sbatch");
    let out_file = format!("{}/job.log", outputs.path());
    let [task_out, task_err] = outputs.srun_args();
    let wrap = format!(
        "srun {task_out} {task_err} {srun_args} bash -c '{}'",
        PROBE.replace('\'', r"'\''")
    );
    let mut cmd = vec!["sbatch", "--wait", "-o", out_file.as_str()];
    cmd.extend_from_slice(args);
    cmd.extend_from_slice(&["--wrap", wrap.as_str()]);
    let submitted = exec(&cmd);
    let file = String::from_utf8_lossy(&exec(&["cat", out_file.as_str()]).stdout).into_owned();
    let mut run = parse_run(Output {
        status: submitted.status,
        stdout: outputs.stdout().into_bytes(),
        stderr: Vec::new(),
    });
    run.stderr = format!(
        "{}{file}{}",
        String::from_utf8_lossy(&submitted.stderr),
        outputs.stderr()
    );
    run
}

/// The state of every node (`idle`, `mix`, `drain`, …).
pub fn node_states() -> Vec<String> {
    let out = exec(&["sinfo", "-h", "-N", "-o", "%N %t"]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// Waits (up to 30 s) until every node is idle: a node still completing
/// the last job (its epilog, the step's end) is passed over by Slurm's node
/// selection, so a test of where Slurm places a step starts from idle nodes.
pub fn wait_all_idle() {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let states = node_states();
        if states.len() == 3 && states.iter().all(|s| s.ends_with(" idle")) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "nodes not idle within 30 s: {states:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

pub fn assert_no_node_drained() {
    let states = node_states();
    assert_eq!(states.len(), 3, "{states:?}");
    assert!(
        states
            .iter()
            .all(|s| !s.contains("drain") && !s.contains("down")),
        "a node left service: {states:?}"
    );
}

/// No step still listed (the extern, batch and interactive steps aside)
/// within 20 s. srun returns once its tasks ended; slurmctld learns of the
/// step's end from slurmstepd a moment later (under load, after srun has
/// gone), so a step that ended is still listed briefly. A leaked step (one
/// that never ends) is listed long after.
pub fn assert_no_step_left(case: &str) {
    let start = std::time::Instant::now();
    loop {
        let left = steps_listed();
        if left.is_empty() {
            return;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(20),
            "{case}: steps left behind 20 s after the step ended: {left:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
}

fn steps_listed() -> Vec<String> {
    let steps = exec(&["squeue", "-h", "-s", "-o", "%i %j"]);
    String::from_utf8_lossy(&steps.stdout)
        .lines()
        .filter(|l| !l.contains(".extern") && !l.contains(".interactive") && !l.contains(".batch"))
        .map(str::to_string)
        .collect()
}

/// No node left service, no step of ours still listed (the extern, batch
/// and interactive steps aside), and a good step runs at once.
pub fn assert_healthy(case: &str) {
    assert_no_node_drained();
    assert_no_step_left(case);
    let next = srun(&["-N1", "-n1", "--tf-cluster"]);
    next.assert_ran(1);
    assert!(next.tasks[0].tf_config.is_some(), "{case}: the next step");
}

/// What one step gave, timed inside the testbed around srun (docker's own
/// start-up is not counted).
pub struct Timed {
    pub code: i32,
    pub took: std::time::Duration,
    /// srun's stdout, then its stderr.
    pub text: String,
}

/// Runs `srun -l ARGS sh -c PAYLOAD` as alice, timed inside the testbed.
pub fn srun_timed(args: &[&str], payload: &str) -> Timed {
    let quoted: Vec<String> = args.iter().map(|a| format!("'{a}'")).collect();
    let script = format!(
        "t0=$(date +%s%N); srun -l {} sh -c '{payload}'; rc=$?; t1=$(date +%s%N); echo \"TFC_END rc=$rc ms=$(( (t1 - t0) / 1000000 ))\"",
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
    Timed {
        code: field("rc=") as i32,
        took: std::time::Duration::from_millis(field("ms=") as u64),
        text: format!("{stdout}{stderr}"),
    }
}
