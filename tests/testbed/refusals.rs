//! Refused steps on the real testbed: a step the plugin refuses is refused
//! before launch or ends on every node within seconds, also when the nodes
//! of the step see different facts; it costs slurmctld a few RPCs per node
//! whatever its task count; Ctrl-C ends srun's lookups; no step is left
//! behind and the allocation's next step runs.
//!
//! One decision per step, when the nodes see different facts: on the
//! testbed's 3 nodes × 4 fake GPUs, each case
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

use crate::common;

use std::sync::Mutex;
use std::time::Duration;

use common::{
    Exclusive, Run, assert_healthy, assert_no_node_drained, exclusive, exec, exec_for, messages,
    on, srun, srun_env, srun_timed, testbed,
};

/// The longest a refused step may take to end on every node.
const LIMIT: Duration = Duration::from_secs(15);

/// What every case runs: a minute of sleep, then a line no refused step may
/// print, in one process as a training is: with `sleep 60; echo finished`
/// in a shell, proctrack/linuxproc (the testbed's) was seen to kill the
/// sleep but pass over the shell, which then printed `finished` at once
/// (the step still ended in 2.5 s; a plain `scancel -s KILL` does the same).
const PAYLOAD: &str = "exec perl -e \"sleep 60; print qq(finished\\n)\"";

/// The cases hold the testbed's GPUs, are timed and count the steps left on
/// every node: one at a time, and never beside another test of this file
/// that runs steps (its steps would be counted as left behind, and its
/// allocations change where Slurm puts a case's tasks).
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

const TORCH_BOUND: &str = "--torch-cluster: Slurm binds GPUs to each task here";
const JAX_SHARED: &str = "--jax-cluster: Slurm's GPU binding";
const OVER: &str = "tasks on a node but";

/// The steps slurmctld still lists (`squeue -s` with `args`, its jobs'
/// `.extern`, `.interactive` and `.batch` left aside) once none is left or
/// `within` has passed: slurmctld lists an ended step until it has
/// processed its end, which on a loaded machine can come after srun's exit.
fn steps_left_after(args: &[&str], within: Duration) -> Vec<String> {
    let start = std::time::Instant::now();
    loop {
        let mut cmd = vec!["squeue", "-h", "-s", "-o", "%i %j"];
        cmd.extend_from_slice(args);
        let out = exec(&cmd);
        let left: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| {
                !l.contains(".extern") && !l.contains(".interactive") && !l.contains(".batch")
            })
            .map(str::to_string)
            .collect();
        if left.is_empty() || start.elapsed() > within {
            return left;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
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
    let ended = srun_timed(args, PAYLOAD);
    let ctx = format!("{case} (srun {}):\n{}", args.join(" "), ended.text);
    // Recorded before any assertion: a failed case still shows its time.
    eprintln!(
        "TIMING {case}: {:.1} s, exit {}, suite {}",
        ended.took.as_secs_f64(),
        ended.code,
        std::env::var("TFC_SUITE").unwrap_or_default()
    );
    let left = payload_left();
    let steps = steps_left_after(&[], Duration::from_secs(10));
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
    assert_ne!(ended.code, 0, "srun should fail\n{ctx}");
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

// Slurm binds GPUs per task on node1 (3 tasks), not on node2 (1).

#[test]
fn torch_where_gpus_per_task_bind_one_node_only_ends_everywhere() {
    refused_everywhere(
        "gpus-per-task torch",
        &["-N2", "-n4", "--gpus-per-task=1", "--torch-cluster"],
        TORCH_BOUND,
    );
}

#[test]
fn torch_where_gpu_bind_single_binds_one_node_only_ends_everywhere() {
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
fn jax_under_a_gpu_bind_closest_ends_everywhere() {
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
fn torch_and_jax_under_a_gpu_bind_closest_end_everywhere() {
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

// The count rules, and nodes given different GPU counts.

#[test]
fn torch_with_more_tasks_than_gpus_on_one_node_ends_everywhere() {
    refused_everywhere(
        "gres:2 torch 3+1",
        &["-N2", "-n4", "--gres=gpu:2", "--torch-cluster"],
        OVER,
    );
}

#[test]
fn jax_under_a_gpu_bind_map_gpu_ends_everywhere() {
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
fn jax_with_more_tasks_than_gpus_on_one_node_ends_everywhere() {
    refused_everywhere(
        "gres:2 jax 3+1",
        &["-N2", "-n4", "--gres=gpu:2", "--jax-cluster"],
        OVER,
    );
}

#[test]
fn jax_asking_more_gpus_per_task_than_a_node_has_ends_everywhere() {
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
fn torch_cyclic_with_more_tasks_than_gpus_on_one_node_ends_everywhere() {
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
fn torch_on_nodes_given_4_and_1_gpus_ends_everywhere() {
    refused_everywhere(
        "gpus=5 torch 4+1 GPUs",
        &["-N2", "--ntasks-per-node=2", "--gpus=5", "--torch-cluster"],
        OVER,
    );
}

#[test]
fn tf_gpus_per_node_over_a_node_given_1_gpu_ends_everywhere() {
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

/// slurmctld's count of `REQUEST_CANCEL_JOB_STEP` RPCs (sdiag, as root).
fn cancel_rpcs() -> u64 {
    let out = on("ctl", &["sdiag"]);
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find(|l| l.trim_start().starts_with("REQUEST_CANCEL_JOB_STEP"))
        .map(|l| {
            let count = l.split("count:").nth(1).expect("count:");
            count.split_whitespace().next().unwrap().parse().unwrap()
        })
        .unwrap_or(0)
}

/// A refused step costs slurmctld at most 4 RPCs per node, whatever its
/// task count: `srun -N3 -nN --overcommit --tf-cluster --tf-network=nope0`
/// is refused by every task (no node has that interface) at 48, 96 and 144
/// tasks. Each node's slurmstepd sends the kill for all of its tasks (once,
/// then once more): 3 nodes × 2. (A kill from every refusing task would cost
/// two RPCs a task: 97 at 48 tasks, 289 at 144.)
#[test]
fn a_refused_step_costs_slurmctld_a_few_rpcs_per_node() {
    let _bed: Exclusive = exclusive();
    for tasks in [48, 96, 144] {
        let before = cancel_rpcs();
        let n = format!("-n{tasks}");
        let out = exec_for(
            180,
            &[
                "srun",
                "-N3",
                &n,
                "--overcommit",
                "--tf-cluster",
                "--tf-network=nope0",
                "true",
            ],
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{stderr}");
        assert!(stderr.contains("nope0"), "{stderr}");
        // The kills are sent 1 s and 2 s after the refusals.
        std::thread::sleep(std::time::Duration::from_secs(3));
        let rpcs = cancel_rpcs() - before;
        eprintln!("MEASURED {tasks} refusing tasks on 3 nodes: {rpcs} REQUEST_CANCEL_JOB_STEP");
        assert!(rpcs <= 12, "{tasks} tasks: {rpcs} cancel RPCs\n{stderr}");
    }
    assert_no_node_drained();
}

/// The allocation `salloc -N2 -n4 --no-shell` made: its job id.
fn salloc_no_shell() -> String {
    let out = exec(&["salloc", "-N2", "-n4", "-w", "node[1-2]", "--no-shell"]);
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    text.split_whitespace()
        .filter_map(|w| w.parse::<u32>().ok())
        .next_back()
        .unwrap_or_else(|| panic!("no job id: {text}"))
        .to_string()
}

/// `srun --jobi=22` (getopt's abbreviation of `--jobid`) from outside an
/// allocation made with `salloc --no-shell` behaves as `--jobid` in every
/// spelling: refused, no step left RUNNING (the allocation's next srun
/// would wait for it for ever), the next srun runs.
#[test]
fn every_spelling_of_jobid_leaves_no_step_behind() {
    let _t = common::exclusive();
    let job = salloc_no_shell();
    for spelling in [
        vec![format!("--jobi={job}")],
        vec!["--jobi".to_string(), job.clone()],
        vec![format!("--jobid={job}")],
        vec!["--jobid".to_string(), job.clone()],
    ] {
        let case = spelling.join(" ");
        let mut args: Vec<&str> = spelling.iter().map(String::as_str).collect();
        args.extend(["-n4", "--tf-cluster=ps:1,worker:5"]);
        let run = srun(&args);
        assert_ne!(run.code, Some(0), "{case}: {}", run.stderr);
        assert!(run.tasks.is_empty(), "{case}: {:?}", run.tasks);
        assert_eq!(
            run.messages()
                .into_iter()
                .filter(|m| m.contains("asks for 6 tasks"))
                .count(),
            1,
            "{case}: {}",
            run.stderr
        );
        // slurmctld lists a refused step until its end is processed, which
        // on a loaded machine comes after srun's exit: a step still listed
        // after 15 s is one left behind.
        let steps = steps_left_after(&["-j", &job], Duration::from_secs(15));
        assert!(steps.is_empty(), "{case}: steps left: {steps:?}");
        let jobid = format!("--jobid={job}");
        let next = srun(&[&jobid, "-n4", "--tf-cluster"]);
        next.assert_workers(4);
    }
    exec(&["scancel", &job]);
    // An srun that allocates for itself still refuses before launch (its
    // exit ends the job): no task is started to be failed.
    let own = srun(&["-n2", "-w", "node1", "--tf-cluster=ps:1"]);
    assert_ne!(own.code, Some(0), "{}", own.stderr);
    assert!(
        !own.stderr.contains("task_init"),
        "launched: {}",
        own.stderr
    );
    assert!(own.stderr.contains("local_user_init"), "{}", own.stderr);
    assert_healthy("--jobi");
}

/// Host templates that cannot make a host name are refused while
/// srun parses them, with the rule they break.
#[test]
fn a_host_template_that_makes_no_host_name_is_refused() {
    let _t = common::exclusive();
    for (template, rule) in [
        ("-{}", "a label neither begins nor ends with '-'"),
        (".{}", "no empty label"),
        ("{}.", "no empty label"),
        ("{}_ib", "a label has only letters, digits and '-'"),
    ] {
        let option = format!("--tf-host-template={template}");
        let run: Run = srun_env(&[], &["-N1", "-n1", "--torch-cluster", &option]);
        run.assert_refused(rule);
        assert!(
            run.messages()[0].contains("RFC 1123"),
            "{:?}",
            run.messages()
        );
    }
    assert_healthy("host template");
}

/// Runs `ARGV[2:]` as alice on node1 where name lookups never answer, and
/// prints `TIMES took=S after_signal=S code=N`: the process's run time, the
/// time from the signal to its end, its exit code. With ARGV[1] >= 0, it is
/// started in its own process group and SIGINT goes to that group ARGV[1]
/// seconds after the start, as a terminal's Ctrl-C does. Run as root: the
/// nodes' containers may create user namespaces (no seccomp filter) but
/// not mount namespaces alone (no CAP_SYS_ADMIN), so the process gets a
/// user namespace mapping every uid to itself and a mount namespace whose
/// /etc/resolv.conf names a server that takes every query and answers none
/// (a bound UDP socket nobody reads; `timeout:5 attempts:3`, 15 s a name)
/// and whose /etc/hosts holds the testbed's own names (srun's lookups of
/// `ctl` and the nodes): only this process's lookups of other names are
/// slow, the testbed's other tests see no change.
const SILENT_DNS: &str = r#"
import ctypes, os, signal, socket, sys, time
libc = ctypes.CDLL(None, use_errno=True)
after, cmd = float(sys.argv[1]), sys.argv[2:]
sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sink.bind(("127.0.0.77", 53))
conf = "/tmp/tfc-silent-resolv.conf"
with open(conf, "w") as f:
    f.write("nameserver 127.0.0.77\noptions timeout:5 attempts:3\n")
hosts = "/tmp/tfc-silent-hosts"
with open("/etc/hosts") as f:
    known = f.read()
for name in ("ctl", "node1", "node2", "node3"):
    for addr in {a[4][0] for a in socket.getaddrinfo(name, None, socket.AF_INET)}:
        known += f"{addr} {name}\n"
with open(hosts, "w") as f:
    f.write(known)
ready_r, ready_w = os.pipe()
go_r, go_w = os.pipe()
pid = os.fork()
if pid == 0:
    try:
        if libc.unshare(0x10000000 | 0x00020000) != 0:
            raise OSError(ctypes.get_errno(), "unshare")
        os.write(ready_w, b"u")
        os.read(go_r, 1)
        if libc.mount(None, b"/", None, 16384 | 262144, None) != 0:
            raise OSError(ctypes.get_errno(), "mount --make-rprivate /")
        for src, dst in ((conf, "/etc/resolv.conf"), (hosts, "/etc/hosts")):
            if libc.mount(src.encode(), dst.encode(), None, 4096, None) != 0:
                raise OSError(ctypes.get_errno(), f"mount --bind {src} {dst}")
        os.setgroups([1000])
        os.setgid(1000)
        os.setuid(1000)
        os.chdir("/home/alice")
        os.environ.update(HOME="/home/alice", USER="alice", LOGNAME="alice")
        if after >= 0:
            os.setpgid(0, 0)
        os.execvp(cmd[0], cmd)
    except BaseException as e:
        print(f"SETUP FAILED {e}", file=sys.stderr, flush=True)
    os._exit(99)
os.read(ready_r, 1)
for name in ("uid_map", "gid_map"):
    with open(f"/proc/{pid}/{name}", "w") as f:
        f.write("0 0 65536\n")
os.write(go_w, b"g")
start = time.monotonic()
sent = None
if after >= 0:
    time.sleep(after)
    os.killpg(pid, signal.SIGINT)
    sent = time.monotonic()
_, status = os.waitpid(pid, 0)
end = time.monotonic()
since = -1 if sent is None else end - sent
code = os.waitstatus_to_exitcode(status)
print(f"TIMES took={end - start:.2f} after_signal={since:.2f} code={code}", flush=True)
"#;

/// One run under [`SILENT_DNS`]: its output and times.
struct Timed {
    took: f64,
    after_signal: f64,
    code: i32,
    stdout: String,
    stderr: String,
}

fn silent_dns(signal_after: f64, cmd: &[&str]) -> Timed {
    let after = signal_after.to_string();
    let mut argv = vec!["python3", "-c", SILENT_DNS, after.as_str()];
    argv.extend_from_slice(cmd);
    let out = on("node1", &argv);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let times = stdout
        .lines()
        .find_map(|l| l.strip_prefix("TIMES "))
        .unwrap_or_else(|| panic!("no times:\n{stdout}{stderr}"))
        .to_string();
    let field = |name: &str| -> &str {
        times
            .split_whitespace()
            .find_map(|f| f.strip_prefix(name))
            .unwrap_or_else(|| panic!("{name} in {times}"))
    };
    Timed {
        took: field("took=").parse().unwrap(),
        after_signal: field("after_signal=").parse().unwrap(),
        code: field("code=").parse().unwrap(),
        stdout,
        stderr,
    }
}

/// Ctrl-C ends srun's host-template lookups: with lookups that never
/// answer, `srun --tf-host-template={}-nowhere` is refused at the 10 s
/// deadline in one line, nothing launched; with SIGINT sent to srun's
/// process group 2 s after its start (what a terminal's Ctrl-C does), it
/// is refused in one line and the user's command never runs: in its own
/// allocation srun fails at once; inside an existing one its tasks refuse
/// the step (srun failing there would leave the step RUNNING), srun ends
/// within a few seconds, no step stays behind and the allocation's next
/// srun runs. (srun's signal thread takes SIGINT while plugins run: the
/// lookups watch for it themselves rather than wait for the deadline.)
#[test]
fn ctrl_c_ends_srun_s_host_template_lookups() {
    let _bed = common::testbed();
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let step = [
        "srun",
        "-N3",
        "-n3",
        "--torch-cluster",
        "--tf-host-template={}-nowhere",
        "echo",
        "LAUNCHED",
    ];
    let show = |t: &Timed| format!("{}{}", t.stdout, t.stderr);
    let deadline = silent_dns(-1.0, &step);
    eprintln!(
        "MEASURED no Ctrl-C, own allocation: srun ended after {:.2} s",
        deadline.took
    );
    let own = silent_dns(2.0, &step);
    eprintln!(
        "MEASURED Ctrl-C at 2 s, own allocation: srun ended {:.2} s after it ({:.2} s in all)",
        own.after_signal, own.took
    );
    let out = exec(&["salloc", "-N3", "--no-shell"]);
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    let job = text
        .split_whitespace()
        .filter_map(|w| w.parse::<u32>().ok())
        .next_back()
        .unwrap_or_else(|| panic!("no job id: {text}"))
        .to_string();
    let jobid = format!("--jobid={job}");
    let mut in_job = vec!["srun", jobid.as_str()];
    in_job.extend_from_slice(&step[1..]);
    let inside = silent_dns(2.0, &in_job);
    eprintln!(
        "MEASURED Ctrl-C at 2 s, existing allocation: srun ended {:.2} s after it ({:.2} s in all)",
        inside.after_signal, inside.took
    );
    // The shepherd of the refused srun has the step killed: it goes soon.
    let steps = steps_left_after(&["-j", &job], Duration::from_secs(15));
    let next = exec_for(60, &["srun", &jobid, "-N3", "-n3", "echo", "NEXT"]);
    let next_out = String::from_utf8_lossy(&next.stdout).into_owned();
    exec(&["scancel", &job]);

    assert!(
        (9.0..15.0).contains(&deadline.took),
        "{:.2} s\n{}",
        deadline.took,
        show(&deadline)
    );
    let deadline_lines = common::messages(&deadline.stderr);
    assert_eq!(deadline_lines.len(), 1, "{}", show(&deadline));
    assert!(
        deadline_lines[0].contains("did not all resolve within 10s"),
        "{}",
        show(&deadline)
    );
    assert_ne!(deadline.code, 0, "{}", show(&deadline));
    assert!(!deadline.stdout.contains("LAUNCHED"), "{}", show(&deadline));
    for (case, run, within) in [
        ("own allocation", &own, 2.5),
        ("existing allocation", &inside, 5.0),
    ] {
        assert!(
            run.after_signal < within,
            "{case}: srun ended {:.2} s after Ctrl-C\n{}",
            run.after_signal,
            show(run)
        );
        let lines = common::messages(&run.stderr);
        assert_eq!(lines.len(), 1, "{case}: {}", show(run));
        assert!(
            lines[0].contains("interrupted while looking up"),
            "{case}: {}",
            show(run)
        );
        assert_ne!(run.code, 0, "{case}: {}", show(run));
        assert!(!run.stdout.contains("LAUNCHED"), "{case}: {}", show(run));
    }
    assert!(steps.is_empty(), "steps left: {steps:?}");
    assert_eq!(next_out.matches("NEXT").count(), 3, "{next_out}");
    assert_no_node_drained();
}
