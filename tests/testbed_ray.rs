//! `--ray-cluster` and `tf-cluster ray` on the real testbed, with Ray from
//! PyPI (/opt/ray, docker/node/Dockerfile): a 3-node Ray cluster per step on
//! the fast network, two users' clusters on the same nodes at once, each on
//! its step's own ports, against the control of Ray's documented sbatch
//! template (fixed port 6379), where the second head fails.

mod common;

use std::time::Instant;

use common::{exec, on, srun_timed, testbed};

/// How soon srun ends a step it refuses.
const REFUSED_WITHIN: std::time::Duration = std::time::Duration::from_secs(15);

/// Runs of the two-user test; each starts two 3-node Ray clusters, about
/// 60-80 s and most of the machine's 2 cores under the three suites' load:
/// 1 in CI (its ports are a function of the job id: a second run shows the
/// same), `TFC_RAY_RUNS=10` for the measurement docs/frameworks.md gives.
fn runs() -> u32 {
    std::env::var("TFC_RAY_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

/// One Ray test at a time: each checks that the nodes hold no Ray of
/// alice's or bob's afterwards.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The driver: every alive node's address, one task pinned to each node
/// (its node's address as Ray and vLLM see it there); then, with a PAIR
/// directory, a marker, waits for the other user's marker (both clusters up
/// at once), and the second user waits until the first one's step ended
/// (the harness's `ended` file) and runs a task on every node again.
const DRIVER: &str = r#"
import json, os, sys, time, ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy as On
ray.init(log_to_driver=False, logging_level="error")
@ray.remote(num_cpus=0)
def where():
    return [os.environ.get("VLLM_HOST_IP"), ray.util.get_node_ip_address()]
def everywhere():
    nodes = [n for n in ray.nodes() if n["Alive"]]
    ids = [n["NodeID"] for n in nodes]
    return nodes, ray.get([where.options(scheduling_strategy=On(i, soft=False)).remote() for i in ids])
nodes, tasks = everywhere()
out = {"nodes": sorted(n["NodeManagerAddress"] for n in nodes), "tasks": sorted(tasks),
       "address": os.environ["RAY_ADDRESS"]}
pair, me, other = sys.argv[1:4]
if pair != "-":
    open(f"{pair}/{me}", "w").close()
    end = time.time() + 120
    while not os.path.exists(f"{pair}/{other}") and time.time() < end:
        time.sleep(0.2)
    out["met"] = os.path.exists(f"{pair}/{other}")
    if me == "bob":
        while not os.path.exists(f"{pair}/ended") and time.time() < end:
            time.sleep(0.2)
        out["after"] = sorted(everywhere()[1]) if os.path.exists(f"{pair}/ended") else None
print("RAYRESULT " + json.dumps(out), flush=True)
"#;

/// The srun of one user's Ray step on node1-3, ports reserved by Slurm, on
/// the fast network; a small object store (the containers' /dev/shm) and
/// one CPU per node (the CI machine has two cores).
fn ray_step(pair: &str, me: &str, other: &str) -> String {
    ray_step_with(DRIVER, &format!("{pair} {me} {other}"))
}

/// [`ray_step`] with another Python driver and its arguments.
fn ray_step_with(driver: &str, args: &str) -> String {
    format!(
        "cd /tmp && PATH=/opt/ray/bin:$PATH srun -N3 --ntasks-per-node=1 -w node[1-3] --resv-ports=64 --kill-on-bad-exit=1 \
         --ray-cluster --tf-host-template='{{}}-ib' \
         tf-cluster ray --num-cpus=1 --object-store-memory=100000000 --include-dashboard=false --include-log-monitor=false \
         -- python -c '{}' {args}",
        driver.replace('\'', r"'\''")
    )
}

/// `cmd` (a shell line) as `user` on the submit host.
fn as_user(user: &str, cmd: &str) -> std::process::Output {
    if user == "alice" {
        exec(&["bash", "-c", cmd])
    } else {
        on("ctl", &["runuser", "-u", user, "--", "bash", "-c", cmd])
    }
}

fn result(out: &std::process::Output) -> serde_json::Value {
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("RAYRESULT "))
        .unwrap_or_else(|| {
            panic!(
                "no result ({:?}):\n{text}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )
        });
    serde_json::from_str(line).unwrap()
}

/// node1-ib … node3-ib's addresses, as the nodes resolve them.
fn fast_addresses() -> Vec<String> {
    let mut addrs: Vec<String> = (1..=3)
        .map(|n| {
            let out = on(
                &format!("node{n}"),
                &["getent", "ahostsv4", &format!("node{n}-ib")],
            );
            let text = String::from_utf8_lossy(&out.stdout);
            text.split_whitespace().next().unwrap().to_string()
        })
        .collect();
    addrs.sort();
    addrs
}

/// Nothing of a step's Ray left on the nodes: no temp directory, no shared
/// memory file, no process of alice or bob.
fn assert_nothing_left(context: &str) {
    for n in 1..=3 {
        let node = format!("node{n}");
        let out = on(
            &node,
            &[
                "sh",
                "-c",
                "ls -d /tmp/ray* /dev/shm/* 2>/dev/null; ps -o user=,args= -u alice,bob 2>/dev/null | grep -v ' ps ' || true",
            ],
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.trim().is_empty(), "{context}: left on {node}:\n{text}");
    }
}

fn fails_with_bind_error(out: &std::process::Output) -> bool {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
    .to_lowercase();
    text.contains("address already in use") || text.contains("failed to bind")
}

/// srun refuses before launch (no task printed), in one line and within
/// seconds as every refusal of tests/testbed_refusals.rs (under 2 s on a
/// quiet machine), a reservation smaller than Ray's 64 ports, and several
/// tasks on a node.
#[test]
fn what_cannot_work_is_refused_in_srun() {
    let _t = testbed();
    let few = srun_timed(
        &[
            "-N3",
            "--ntasks-per-node=1",
            "--resv-ports=4",
            "--ray-cluster",
        ],
        "echo LAUNCHED",
    );
    assert_ne!(few.code, 0, "{}", few.text);
    assert!(!few.text.contains("LAUNCHED"), "{}", few.text);
    assert!(few.text.contains("srun --resv-ports=64"), "{}", few.text);
    assert!(few.took < REFUSED_WITHIN, "{:?}\n{}", few.took, few.text);
    let two = srun_timed(
        &["-N1", "-n2", "--resv-ports=64", "--ray-cluster"],
        "echo LAUNCHED",
    );
    assert_ne!(two.code, 0, "{}", two.text);
    assert!(!two.text.contains("LAUNCHED"), "{}", two.text);
    assert!(two.text.contains("--ntasks-per-node=1"), "{}", two.text);
    assert!(two.took < REFUSED_WITHIN, "{:?}\n{}", two.took, two.text);
}

/// Ray is in bookworm's image only (docker/node/test-tools.sh), the one suite its clusters'
/// tests run on (docker/matrix.sh's `one_suite`).
fn assert_ray_installed() {
    assert!(
        exec(&["test", "-x", "/opt/ray/bin/ray"]).status.success(),
        "no /opt/ray in this suite's image: Ray is installed on bookworm only"
    );
}

/// One user's step: 3 alive Ray nodes, each at its address on the fast
/// network (Ray's node address and VLLM_HOST_IP on the node alike), a task
/// on every node, the head at rank 0's fast name and a reserved port; the
/// step's exit code is the driver's; nothing left behind.
#[test]
fn a_ray_cluster_per_step_on_the_fast_network() {
    let _t = testbed();
    assert_ray_installed();
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let want = fast_addresses();
    let start = Instant::now();
    let out = as_user("alice", &ray_step("-", "alice", "-"));
    eprintln!("one Ray step: {:?}", start.elapsed());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = result(&out);
    let nodes: Vec<String> = serde_json::from_value(r["nodes"].clone()).unwrap();
    assert_eq!(nodes, want);
    let tasks: Vec<Vec<String>> = serde_json::from_value(r["tasks"].clone()).unwrap();
    assert_eq!(
        tasks,
        want.iter()
            .map(|a| vec![a.clone(), a.clone()])
            .collect::<Vec<_>>()
    );
    let address = r["address"].as_str().unwrap();
    let port: u16 = address.strip_prefix("node1-ib:").unwrap().parse().unwrap();
    assert!((12000..=12999).contains(&port), "{address}");
    assert_nothing_left("one step");
    // The driver's exit code is the step's.
    let out = as_user("alice", &ray_step_with("import sys; sys.exit(7)", ""));
    assert_eq!(
        out.status.code(),
        Some(7),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_nothing_left("a failing driver");
}

/// Two users' Ray steps on the same three nodes at once, runs() times: both
/// finish every time, with no bind error; bob's cluster still runs a task
/// on every node after alice's step ended. Then the control: Ray's
/// documented template (`ray start --head --port=6379`) for both users on
/// one node: the second head fails.
#[test]
fn two_users_ray_clusters_on_the_same_nodes() {
    let _t = testbed();
    assert_ray_installed();
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let want = fast_addresses();
    let mut bind_errors = 0;
    let start = Instant::now();
    let runs = runs();
    for run in 0..runs {
        let pair = format!("/tmp/tfc-raypair-{}-{run}", std::process::id());
        on("node1", &["sh", "-c", &format!("mkdir -m 1777 {pair}")]);
        let alice = std::thread::spawn({
            let cmd = ray_step(&pair, "alice", "bob");
            move || as_user("alice", &cmd)
        });
        let bob = std::thread::spawn({
            let cmd = ray_step(&pair, "bob", "alice");
            move || as_user("bob", &cmd)
        });
        let a = alice.join().unwrap();
        on("node1", &["touch", &format!("{pair}/ended")]);
        let b = bob.join().unwrap();
        on("node1", &["rm", "-rf", &pair]);
        for (who, out) in [("alice", &a), ("bob", &b)] {
            if fails_with_bind_error(out) {
                bind_errors += 1;
            }
            assert!(
                out.status.success(),
                "run {run}, {who}: {:?}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            let r = result(out);
            assert_eq!(r["met"], true, "run {run}, {who}: {r}");
            let nodes: Vec<String> = serde_json::from_value(r["nodes"].clone()).unwrap();
            assert_eq!(nodes, want, "run {run}, {who}");
        }
        let (ra, rb) = (result(&a), result(&b));
        assert_ne!(ra["address"], rb["address"], "run {run}");
        // Bob's Ray ran a task on every node after alice's step ended.
        let after: Vec<Vec<String>> = serde_json::from_value(rb["after"].clone())
            .unwrap_or_else(|_| panic!("run {run}: bob's cluster after alice's: {rb}"));
        assert_eq!(after.len(), 3, "run {run}: {rb}");
        assert_nothing_left(&format!("run {run}"));
    }
    eprintln!(
        "{runs} runs of two users' Ray steps: {:?}, {bind_errors} bind errors",
        start.elapsed()
    );
    assert_eq!(bind_errors, 0);

    // The control: Ray's sbatch template's fixed port, no plugin.
    let control = |user: &str, block: bool| {
        format!(
            "cd /tmp && PATH=/opt/ray/bin:$PATH {}srun -J tfc-ray-control -N1 -w node1 --resv-ports=0 \
             ray start --head --port=6379 --node-ip-address=$(getent ahostsv4 node1-ib | head -1 | cut -d' ' -f1) \
             --temp-dir=/tmp/ray-control-{user} --num-cpus=1 --object-store-memory=100000000 \
             --include-dashboard=false --disable-usage-stats {}",
            if block { "timeout 60 " } else { "" },
            if block { "--block" } else { "" }
        )
    };
    let first = std::thread::spawn({
        let cmd = control("alice", true);
        move || as_user("alice", &cmd)
    });
    // Until alice's head listens on 6379.
    let up = (0..120).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(500));
        on("node1", &["bash", "-c", "exec 3<>/dev/tcp/node1-ib/6379"])
            .status
            .success()
    });
    if !up {
        on("ctl", &["scancel", "-u", "alice", "-n", "tfc-ray-control"]);
        let out = first.join().unwrap();
        panic!(
            "the control's first head did not come up:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let second = as_user("bob", &control("bob", false));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&second.stdout),
        String::from_utf8_lossy(&second.stderr)
    );
    assert!(!second.status.success(), "the second head started:\n{text}");
    eprintln!(
        "control: the second head on port 6379 failed: {}",
        text.lines().rev().take(3).collect::<Vec<_>>().join(" | ")
    );
    on("ctl", &["scancel", "-u", "alice", "-n", "tfc-ray-control"]);
    let _ = first.join();
    on(
        "node1",
        &[
            "rm",
            "-rf",
            "/tmp/ray-control-alice",
            "/tmp/ray-control-bob",
        ],
    );
}
