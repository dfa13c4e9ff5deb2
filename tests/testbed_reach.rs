//! How far a user reaches with what they may type or export, on the real
//! testbed: a refused step must cost slurmctld a few RPCs per node whatever
//! its task count, an explicit srun option beats an inherited `--tf-off`,
//! and a hand-off variable the user exported is never obeyed. (An image's
//! reach is tested behind the container stand-in: tests/testbed_containers.rs.)

mod common;

use common::{Exclusive, assert_no_node_drained, exclusive, exec, exec_for, on};

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
/// then once more): 3 nodes × 2. (Every refusing task once sent two: 97 RPCs
/// at 48 tasks, 289 at 144.)
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

/// What each task saw: `VARS TF=… MA=…`.
const VARS: &str = r#"echo "VARS TF=${TF_CONFIG+set} MA=${MASTER_ADDR-unset} MP=${MASTER_PORT-unset} STEP=$SLURM_STEP_ID PORTS=${SLURM_STEP_RESV_PORTS-none}""#;

/// `VARS` lines of a run's output.
fn vars(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.split_once("VARS ").map(|(_, r)| r.to_string()))
        .collect()
}

/// A batch job's output (`sbatch --wait ARGS --wrap SCRIPT`).
fn batch(args: &[&str], script: &str) -> String {
    let file = format!("/home/alice/reach-{}.out", std::process::id());
    let mut cmd = vec!["sbatch", "--wait", "-o", file.as_str()];
    cmd.extend_from_slice(args);
    cmd.extend_from_slice(&["--wrap", script]);
    let submitted = exec_for(300, &cmd);
    let text = String::from_utf8_lossy(&exec_for(60, &["cat", file.as_str()]).stdout).into_owned();
    exec_for(60, &["rm", "-f", file.as_str()]);
    format!("{}{text}", String::from_utf8_lossy(&submitted.stderr))
}

/// An explicit srun option beats an inherited `--tf-off`: `sbatch --tf-off`
/// then `srun --tf-cluster` / `srun --torch-cluster` inside sets their
/// variables; the same with the option's variable exported; a plain `srun`
/// in the `--tf-off` job and an explicit `srun --tf-off` get nothing.
/// (An inherited --tf-off once silently won.)
#[test]
fn an_explicit_srun_option_beats_an_inherited_tf_off() {
    let _bed = common::testbed();
    let script = format!(
        "srun -N1 -n1 --tf-cluster sh -c '{VARS}'; srun -N1 -n1 --torch-cluster sh -c '{VARS}'; srun -N1 -n1 sh -c '{VARS}'"
    );
    let text = batch(&["-N1", "--tf-off", "--tf-cluster"], &script);
    let seen = vars(&text);
    assert_eq!(seen.len(), 3, "{text}");
    assert!(
        seen[0].starts_with("TF=set "),
        "explicit --tf-cluster: {text}"
    );
    assert!(
        !seen[1].contains("MA=unset"),
        "explicit --torch-cluster: {text}"
    );
    assert!(
        seen[2].starts_with("TF= MA=unset"),
        "nothing explicit: {text}"
    );

    let exported = exec_for(
        120,
        &[
            "env",
            "SLURM_SPANK__SLURM_SPANK_OPTION_tf_cluster_tf_off=(null)",
            "srun",
            "-N1",
            "-n1",
            "--tf-cluster",
            "sh",
            "-c",
            VARS,
        ],
    );
    let text = String::from_utf8_lossy(&exported.stdout);
    assert_eq!(vars(&text).len(), 1, "{text}");
    assert!(
        vars(&text)[0].starts_with("TF=set "),
        "exported --tf-off: {text}"
    );

    let off = exec_for(
        120,
        &[
            "srun",
            "-N1",
            "-n1",
            "--tf-cluster",
            "--tf-off",
            "sh",
            "-c",
            VARS,
        ],
    );
    let text = String::from_utf8_lossy(&off.stdout);
    assert!(
        vars(&text)[0].starts_with("TF= MA=unset"),
        "explicit --tf-off: {text}"
    );
    assert_no_node_drained();
}

/// A hand-off the user exported for the next step is not obeyed: in an
/// allocation, `SLURM_TF_CLUSTER="1;$SLURM_JOB_ID.0;verdict=none;no-resv-ports"` then
/// `srun --torch-cluster` (step 0) still takes MASTER_PORT from the ports
/// Slurm reserved for the step, and `…;leave-out=2` (PyTorch's bit) does not drop
/// an explicit --torch-cluster. (srun once left such a value to its tasks.)
#[test]
fn a_hand_off_the_user_exported_is_not_obeyed() {
    let _bed = common::testbed();
    for forged in ["no-resv-ports", "leave-out=2"] {
        let script = format!(
            "export SLURM_TF_CLUSTER=\"1;$SLURM_JOB_ID.0;verdict=none;{forged}\"; srun -N1 -n1 --torch-cluster sh -c '{VARS}'"
        );
        let out = exec_for(180, &["salloc", "-N1", "sh", "-c", &script]);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let seen = vars(&text);
        assert_eq!(seen.len(), 1, "{forged}: {text}");
        let field = |name: &str| -> String {
            seen[0]
                .split_whitespace()
                .find_map(|f| f.strip_prefix(name))
                .unwrap_or_else(|| panic!("{name} in {}", seen[0]))
                .to_string()
        };
        assert_eq!(
            field("STEP="),
            "0",
            "the forged word named this step: {text}"
        );
        let ports = field("PORTS=");
        assert_ne!(ports, "none", "MpiParams reserves ports: {text}");
        let reserved = common::reserved_ports(&ports);
        let port: u16 = field("MP=")
            .parse()
            .unwrap_or_else(|_| panic!("{forged}: {text}"));
        assert!(
            reserved.contains(&port),
            "{forged}: MASTER_PORT {port} not in {ports}\n{text}"
        );
        assert_ne!(field("MA="), "unset", "{forged}: {text}");
    }
    assert_no_node_drained();
}

/// What each task of a heterogeneous step saw: `HET RANK=… NCCL=…`.
const HET: &str = r#"echo "HET RANK=${RANK-unset} NCCL=${NCCL_SOCKET_IFNAME-unset}""#;

/// srun's word on a heterogeneous step reaches one component only, and
/// srun sets its early word for every component before Slurm copies its
/// environment for them: a hand-off exported for component 1's job id
/// (`verdict=skip`, or `net=lo`) never reaches component 1, so it neither
/// drops that component's variables nor names its interface. (Component 1
/// once obeyed such a value.)
#[test]
fn a_later_het_component_reads_no_hand_off_the_user_exported() {
    let _bed = common::testbed();
    for forged in ["verdict=skip", "verdict=none;net=lo"] {
        let script = format!(
            "export SLURM_TF_CLUSTER=\"1;$((SLURM_JOB_ID+1)).0;{forged}\"; srun -n1 -w node1 : -n1 -w node2 --torch-cluster --tf-network=eth0 sh -c '{HET}'"
        );
        // Each task's line from its own file (SLURM_STDOUTMODE).
        let outputs = common::outputs::Outputs::new("het-forged");
        let [out_mode, err_mode, _] = outputs.env();
        let out = exec_for(
            180,
            &[
                "env", &out_mode, &err_mode, "salloc", "-N1", "-n1", "-w", "node1", ":", "-N1",
                "-n1", "-w", "node2", "sh", "-c", &script,
            ],
        );
        let text = format!(
            "{}{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            outputs.dump()
        );
        let mut seen: Vec<&str> = text
            .lines()
            .filter_map(|l| l.split_once("HET ").map(|(_, r)| r))
            .collect();
        seen.sort();
        assert_eq!(
            seen,
            ["RANK=0 NCCL==eth0", "RANK=1 NCCL==eth0"],
            "{forged}: {text}"
        );
    }
    assert_no_node_drained();
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
/// srun runs. (srun once ignored the Ctrl-C and waited for the deadline:
/// its signal thread takes SIGINT while plugins run.)
#[test]
fn ctrl_c_ends_srun_s_host_template_lookups() {
    let _bed = common::testbed();
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
    let mut steps = String::new();
    for _ in 0..30 {
        let out = exec(&["squeue", "-h", "-s", "-j", &job, "-o", "%i"]);
        steps = String::from_utf8_lossy(&out.stdout).into_owned();
        if steps.lines().all(|l| l.contains(".extern")) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
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
    assert!(
        steps.lines().all(|l| l.contains(".extern")),
        "steps left: {steps}"
    );
    assert_eq!(next_out.matches("NEXT").count(), 3, "{next_out}");
    assert_no_node_drained();
}
