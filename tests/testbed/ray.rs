//! `--ray-cluster` and `tf-cluster ray` on the real testbed, with Ray from
//! PyPI (/opt/ray, docker/node/Dockerfile): a 3-node Ray cluster per step on
//! the fast network, two users' clusters on the same nodes at once, each on
//! its step's own ports, against the control of Ray's documented sbatch
//! template (fixed port 6379), where the second head fails; another user
//! who knows a running step's ports cannot run code in its cluster, read
//! its dashboard's API or its dashboard agent's job API, or enter its
//! directory, nor take its token by listening on its head's GCS port
//! first; and the directory goes when
//! the step is killed.

use crate::common;

use std::time::Instant;

use common::{exec, exec_for, on, on_for, srun_timed, testbed};

/// How soon srun ends a step it refuses.
const REFUSED_WITHIN: std::time::Duration = std::time::Duration::from_secs(15);

/// Runs of the two-user test; each starts two 3-node Ray clusters, about
/// 60-80 s and most of the machine's 2 cores under the three suites' load:
/// 1 in CI (its ports are a function of the job id: a second run shows the
/// same), `TFC_RAY_RUNS=10` for the measurement BENCHMARKS.md gives.
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

/// The fast network as a host template names it.
const TEMPLATE: &str = "--tf-host-template='{}-ib'";

/// [`ray_step`] with another Python driver and its arguments.
fn ray_step_with(driver: &str, args: &str) -> String {
    ray_step_on(TEMPLATE, driver, args)
}

/// [`ray_step_with`] with the fast network named by `network` (an option).
fn ray_step_on(network: &str, driver: &str, args: &str) -> String {
    format!(
        "cd /tmp && PATH=/opt/ray/bin:$PATH srun -N3 --ntasks-per-node=1 -w node[1-3] --resv-ports=64 --kill-on-bad-exit=1 \
         --ray-cluster {network} \
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
                "ls -d /tmp/ray* /tmp/tfc-ray* /dev/shm/* 2>/dev/null; ps -o user=,args= -u alice,bob 2>/dev/null | grep -v ' ps ' || true",
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
/// seconds as every refusal of tests/testbed/refusals.rs (under 2 s on a
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
/// tests run on (tests/where.tsv).
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
    // A token file of the user's (`ray get-auth-token --generate` writes one,
    // mode 0644, on the shared /home): without the step's own token and
    // mode on every node, the head alone turned authentication on with it
    // and the step failed.
    exec(&[
        "sh",
        "-c",
        "mkdir -p ~/.ray && echo a-token-of-the-users-own > ~/.ray/auth_token",
    ]);
    let start = Instant::now();
    let out = as_user("alice", &ray_step("-", "alice", "-"));
    exec(&["rm", "-rf", "/home/alice/.ray"]);
    eprintln!(
        "one Ray step, a token file in ~/.ray: {:?}",
        start.elapsed()
    );
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
    // The driver's exit code is the step's; and `--tf-network` (the fast
    // network's interface, no names on it) puts every Ray node, the head's
    // included, at its address there: the GCS, at the head's Slurm name,
    // answers every node.
    let driver = format!("{DRIVER}\nsys.exit(7)");
    let out = as_user(
        "alice",
        &ray_step_on("--tf-network=eth1", &driver, "- alice -"),
    );
    assert_eq!(
        out.status.code(),
        Some(7),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = result(&out);
    let nodes: Vec<String> = serde_json::from_value(r["nodes"].clone()).unwrap();
    assert_eq!(nodes, want, "--tf-network=eth1");
    let tasks: Vec<Vec<String>> = serde_json::from_value(r["tasks"].clone()).unwrap();
    let pairs: Vec<Vec<String>> = want.iter().map(|a| vec![a.clone(), a.clone()]).collect();
    assert_eq!(tasks, pairs, "--tf-network=eth1");
    let address = r["address"].as_str().unwrap();
    assert!(address.starts_with("node1:"), "{address}");
    assert_nothing_left("a failing driver on --tf-network");
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

/// What a user who knows a running Ray step's ports tries (`scontrol show
/// steps` lists reserved ports to every user): a driver at the GCS, a Ray
/// Client at the client server, a job at the dashboard, the dashboard's
/// API; each a process of its own with a deadline. "RAN uid=U" when code
/// ran, else why not. Run with the step's token (the owner's own driver:
/// every attempt must run) and without it (another user's: none may).
const ATTACK: &str = r#"
import json, os, subprocess, sys, time, urllib.request, urllib.error
t = json.load(open(sys.argv[1]))
RUN = """import os, sys, ray
{init}
@ray.remote(num_cpus=0)
def who():
    return os.getuid()
print("RAN uid=%d" % ray.get(who.remote(), timeout=60), flush=True)
"""
SUBMIT = """import sys
from ray.job_submission import JobSubmissionClient
print("RAN job=" + JobSubmissionClient(sys.argv[1]).submit_job(entrypoint="id -u"), flush=True)
"""
def attempt(code, arg, tries=1):
    for _ in range(tries):
        start = time.time()
        try:
            p = subprocess.run([sys.executable, "-c", code, arg], capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            said = "refused: no answer in 60 s"
            continue
        ran = [l for l in p.stdout.splitlines() if l.startswith("RAN ")]
        if ran:
            return ran[-1]
        err = [l for l in p.stderr.splitlines() if l.strip()]
        said = "refused in %.0f s: rc %d: %s" % (time.time() - start, p.returncode, err[-1][:300] if err else "")
    return said
def api(path, base="dashboard", body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(t[base] + path, data=data, headers={"Content-Type": "application/json"})
    if os.environ.get("RAY_AUTH_TOKEN"):
        req.add_header("Authorization", "Bearer " + os.environ["RAY_AUTH_TOKEN"])
    try:
        return urllib.request.urlopen(req, timeout=20).status
    except urllib.error.HTTPError as e:
        return e.code
    except Exception as e:
        return str(e)
tries = int(sys.argv[2])
attempts = {
    "gcs": (RUN.format(init="ray.init(address=sys.argv[1], log_to_driver=False, logging_level='error')"), t["gcs"], 1),
    # Ray Client's per-client server can miss its start-up deadline on a
    # loaded node (the owner's first try, measured): the owner tries twice.
    "client": (RUN.format(init="ray.init('ray://' + sys.argv[1], logging_level='error')"), t["client"], tries),
    "submit": (SUBMIT, t["dashboard"], 1),
}
# The other user's attempts side by side (each refusal waits out Ray's own
# timeouts, 20-41 s); the owner's one after another, as a driver would.
from concurrent.futures import ThreadPoolExecutor
with ThreadPoolExecutor(max_workers=3 if tries == 1 else 1) as pool:
    futures = {name: pool.submit(attempt, *a) for name, a in attempts.items()}
    out = {name: f.result() for name, f in futures.items()}
out["api"] = api("/api/jobs/")
# The dashboard agent's own job API, on the head's agent port (the 6th of
# the step's): Ray 2.52-2.53 ran this job without a token.
out["agent"] = api("/api/job_agent/jobs/", "agent", {"entrypoint": "id -u"})
for name, cmd in [("list", ["ls", t["private"]]), ("write", ["touch", t["private"] + "/ray/x"])]:
    out[name] = subprocess.run(cmd, capture_output=True).returncode
print("ATTACK " + json.dumps(out), flush=True)
"#;

/// The owner's driver: publishes what another user can learn of the step
/// (its addresses and ports; the private directory's name too, which no
/// one else could know), runs the attacks with the step's token as the
/// control, and waits to be killed.
const OWNER: &str = r#"
import json, os, subprocess, sys, time
mark = sys.argv[1]
env = os.environ
ports = dict(a.lstrip("-").split("=", 1) for a in (env["TF_CLUSTER_RAY_ARGS"] + " " + env["TF_CLUSTER_RAY_HEAD_ARGS"]).split() if "=" in a)
host = env["RAY_ADDRESS"].rsplit(":", 1)[0]
targets = {"gcs": env["RAY_ADDRESS"], "client": "%s:%s" % (host, ports["ray-client-server-port"]),
           "dashboard": "http://%s:%s" % (host, ports["dashboard-port"]),
           "agent": "http://%s:%s" % (host, ports["dashboard-agent-listen-port"]),
           "private": os.path.dirname(env["TF_CLUSTER_RAY_TEMP_DIR"])}
open(targets["private"] + "/token", "w").write(env.get("RAY_AUTH_TOKEN", ""))
json.dump(targets, open(mark + "/targets.tmp", "w"))
os.rename(mark + "/targets.tmp", mark + "/targets.json")
p = subprocess.run([sys.executable, mark + "/attack.py", mark + "/targets.json", "2"], capture_output=True, text=True)
open(mark + "/owner.tmp", "w").write(p.stdout + p.stderr)
os.rename(mark + "/owner.tmp", mark + "/owner.out")
time.sleep(600)
"#;

/// A fresh directory `mark` on the shared /home that every user may write
/// in, with the script `name` holding `text`.
fn mark_with(mark: &str, name: &str, text: &str) {
    on(
        "ctl",
        &["sh", "-c", &format!("rm -rf {mark}; mkdir -m 1777 {mark}")],
    );
    on(
        "ctl",
        &[
            "sh",
            "-c",
            &format!("cat > {mark}/{name} <<'EOF'\n{text}\nEOF\nchmod 644 {mark}/{name}"),
        ],
    );
}

/// The `ATTACK {…}` line of `text`.
fn attack_result(who: &str, text: &str) -> serde_json::Value {
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("ATTACK "))
        .unwrap_or_else(|| panic!("{who}: no attack result:\n{text}"));
    serde_json::from_str(line).unwrap()
}

/// Another user, from the login node and from a job of their own on the
/// step's node (with a token of their own step), knows every port of a
/// running Ray step: a driver at its GCS, a Ray Client, a job submitted to
/// its dashboard, its dashboard's API and a job POSTed to its dashboard
/// agent's job API (`/api/job_agent/jobs/`, the agent port) are all
/// refused (401 or 403), and its private
/// directory can be neither listed nor written; the owner's driver does
/// each of these with the step's token. The step is then killed
/// (`scancel --signal=KILL`, no time for the task to clean up): slurmstepd
/// removes the step's directory, and nothing of it is left.
#[test]
fn another_user_cannot_use_a_running_ray_cluster() {
    let _t = testbed();
    assert_ray_installed();
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mark = format!("/home/tfc-raymark-{}", std::process::id());
    mark_with(&mark, "attack.py", ATTACK);
    let owner = format!(
        "cd /tmp && PATH=/opt/ray/bin:$PATH srun -J tfc-ray-owner -N1 -w node1 --resv-ports=64 \
         --ray-cluster --tf-host-template='{{}}-ib' \
         tf-cluster ray --num-cpus=1 --object-store-memory=100000000 --include-log-monitor=false \
         --dashboard-host=0.0.0.0 -- python -c '{}' {mark}",
        OWNER.replace('\'', r"'\''")
    );
    let alice = std::thread::spawn(move || exec_for(400, &["bash", "-c", &owner]));
    let end = Instant::now() + std::time::Duration::from_secs(300);
    let owner_out = format!("{mark}/owner.out");
    while !on("ctl", &["test", "-f", &owner_out]).status.success() {
        if Instant::now() > end || alice.is_finished() {
            on("ctl", &["scancel", "-u", "alice", "-n", "tfc-ray-owner"]);
            let out = alice.join().unwrap();
            panic!(
                "the owner's step did not get to its attacks:\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    let targets = format!("{mark}/targets.json");
    let attack = format!("/opt/ray/bin/python {mark}/attack.py {targets} 1");
    // A refused attempt may wait out its 60 s.
    let as_bob = |cmd: &str| {
        on_for(
            "ctl",
            400,
            &["runuser", "-u", "bob", "--", "bash", "-c", cmd],
        )
    };
    // From the login node and from bob's own job at once.
    let (from_login, from_job) = std::thread::scope(|scope| {
        let login = scope.spawn(|| as_bob(&format!("cd /tmp && {attack}")));
        let job = as_bob(&format!(
            "cd /tmp && srun -N1 -w node1 --resv-ports=64 --ray-cluster --tf-host-template='{{}}-ib' {attack}"
        ));
        (login.join().unwrap(), job)
    });
    let owner_text = String::from_utf8_lossy(&on("ctl", &["cat", &owner_out]).stdout).into_owned();
    // The token in no process's command line (world-readable in /proc) on
    // the step's node, while the step's Ray runs.
    let targets_text = String::from_utf8_lossy(&on("ctl", &["cat", &targets]).stdout).into_owned();
    let private: serde_json::Value = serde_json::from_str(&targets_text).unwrap();
    let private = private["private"].as_str().unwrap().to_string();
    let token = String::from_utf8_lossy(&on("node1", &["cat", &format!("{private}/token")]).stdout)
        .trim()
        .to_string();
    let shown = on(
        "node1",
        &[
            "sh",
            "-c",
            &format!(
                "n=0; for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' <$f 2>/dev/null | grep -qF -f {private}/token && n=$((n+1)); done; ps -e --no-headers | wc -l; echo $n"
            ),
        ],
    );
    let counts = String::from_utf8_lossy(&shown.stdout).into_owned();
    let counts: Vec<u32> = counts
        .split_whitespace()
        .map(|c| c.parse().unwrap())
        .collect();
    // Killed: no time for tf-cluster ray's own clean-up.
    kill_alices("tfc-ray-owner");
    let killed = Instant::now();
    let _ = alice.join();
    on("ctl", &["rm", "-rf", &mark]);

    // Everything said first, then judged.
    let control = attack_result("the owner", &owner_text);
    eprintln!("the owner, with the step's token: {control}");
    let text = |out: &std::process::Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    let bobs = [
        (
            "bob on the login node",
            attack_result("bob on the login node", &text(&from_login)),
        ),
        (
            "bob's own job",
            attack_result("bob's own job", &text(&from_job)),
        ),
    ];
    for (who, r) in &bobs {
        eprintln!("{who}: {r}");
    }
    eprintln!(
        "processes on node1: {}, command lines naming the token: {}",
        counts[0], counts[1]
    );
    for what in ["gcs", "client"] {
        assert_eq!(
            control[what], "RAN uid=1000",
            "the owner's {what}: {control}"
        );
    }
    assert!(
        control["submit"]
            .as_str()
            .unwrap_or("")
            .starts_with("RAN job="),
        "the owner's job: {control}"
    );
    assert_eq!(control["api"], 200, "{control}");
    assert_eq!(
        control["agent"], 200,
        "the owner's job at the agent: {control}"
    );
    assert_eq!(control["list"], 0, "{control}");
    for (who, r) in &bobs {
        for what in ["gcs", "client", "submit"] {
            let said = r[what].as_str().unwrap_or("");
            assert!(
                said.starts_with("refused"),
                "{who} ran code via {what}: {r}\n{targets_text}"
            );
        }
        let api = r["api"].as_u64();
        assert!(
            matches!(api, Some(401 | 403)),
            "{who} read the dashboard's API: {r}"
        );
        let agent = r["agent"].as_u64();
        assert!(
            matches!(agent, Some(401 | 403)),
            "{who} submitted a job to the dashboard agent: {r}"
        );
    }
    // On the step's node (the login node has no such directory).
    let r = &bobs[1].1;
    assert_ne!(r["list"], 0, "bob listed the step's directory: {r}");
    assert_ne!(r["write"], 0, "bob wrote into the step's directory: {r}");
    assert_eq!(token.len(), 64, "the step's token: {token:?}");
    assert!(
        counts[0] > 10,
        "Ray's processes are not running: {counts:?}"
    );
    assert_eq!(counts[1], 0, "the token is in a command line on node1");
    // slurmstepd removed the private directory once the killed step ended.
    assert!(private.starts_with("/tmp/tfc-ray-"), "{private}");
    let gone = (0..60).any(|_| {
        let left = on("node1", &["test", "-e", &private]).status.success();
        if left {
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
        !left
    });
    assert!(
        gone,
        "{private} is left on node1 {:?} after the kill",
        killed.elapsed()
    );
    eprintln!(
        "the killed step's directory gone within {:?}",
        killed.elapsed()
    );
    assert_nothing_left("a killed step");
}

/// Another user's listener on a Ray step's GCS port, from a job of theirs on
/// the head's node: it watches the node's processes for the step's `ray
/// start --head` (its command line names `--port`, as `scontrol show steps`
/// does), tries to listen there every millisecond from then on, to be there
/// before Ray's GCS, reads whatever reaches it (Ray's GetClusterId carries
/// the token), and lets the port go once the step ended. Prints `CAPTURE
/// {json}`.
const CAPTURE: &str = r#"
import json, os, socket, sys, time
mark, owner = sys.argv[1], int(sys.argv[2])
open(mark + "/bob-ready", "w").close()
port, end = None, time.time() + 120
while port is None and time.time() < end:
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.stat("/proc/" + pid).st_uid != owner:
                continue
            args = open("/proc/%s/cmdline" % pid, "rb").read().split(b"\0")
        except OSError:
            continue
        if b"--head" in args:
            port = next((int(a[7:]) for a in args if a.startswith(b"--port=")), None)
            if port:
                break
    time.sleep(0.005)
out = {"port": port, "bound": False, "tries": 0, "connections": 0, "bytes": 0}
# Tried every millisecond until it listens: the step's own Ray, or
# tf-cluster ray holding the port, may be there first.
while not out["bound"] and not os.path.exists(mark + "/ended") and time.time() < end:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("0.0.0.0", port))
        s.listen(16)
        out["bound"] = True
    except OSError as e:
        out["tries"] += 1
        out["error"] = str(e)
        s.close()
        time.sleep(0.001)
s.settimeout(0.2)
while out["bound"] and not os.path.exists(mark + "/ended") and time.time() < end:
    try:
        conn, _ = s.accept()
    except socket.timeout:
        continue
    out["connections"] += 1
    conn.settimeout(3)
    try:
        while True:
            data = conn.recv(65536)
            if not data:
                break
            out["bytes"] += len(data)
    except OSError:
        pass
    conn.close()
s.close()
print("CAPTURE " + json.dumps(out), flush=True)
"#;

/// Runs of the capture test: 2 in CI, `TFC_RAY_RUNS=10` for the measure.
fn capture_runs() -> u32 {
    std::env::var("TFC_RAY_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2)
}

/// Another user (bob), in a job of his own on the head's node, listens on a
/// Ray step's GCS port as soon as he can, each run: Ray's `ray start
/// --head` would ask that port for the cluster id with the token at once
/// (Ray's GetClusterId), and tf-cluster ray would then start the head again
/// with the same token. tf-cluster ray holds the port until Ray starts its
/// GCS (bob's tries fail meanwhile), and its guard finds bob's listener, not
/// the step's GCS, before anything calls the port: bob's listener receives
/// no byte, the step fails in one line naming the port and bob, the head is
/// not started again and the driver never runs.
#[test]
fn another_users_listener_on_the_heads_gcs_port_gets_no_token() {
    let _t = testbed();
    assert_ray_installed();
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let alice_uid = String::from_utf8_lossy(&exec(&["id", "-u"]).stdout)
        .trim()
        .to_string();
    let runs = capture_runs();
    let start = Instant::now();
    for run in 0..runs {
        let mark = format!("/home/tfc-raycapture-{}-{run}", std::process::id());
        mark_with(&mark, "capture.py", CAPTURE);
        let bob_cmd = format!(
            "cd /tmp && srun -J tfc-ray-capture -N1 -w node1 --resv-ports=0 /opt/ray/bin/python {mark}/capture.py {mark} {alice_uid}"
        );
        let bob = std::thread::spawn(move || {
            on_for(
                "ctl",
                200,
                &["runuser", "-u", "bob", "--", "bash", "-c", &bob_cmd],
            )
        });
        let ready = format!("{mark}/bob-ready");
        let end = Instant::now() + std::time::Duration::from_secs(60);
        while !on("ctl", &["test", "-f", &ready]).status.success() {
            assert!(
                Instant::now() < end && !bob.is_finished(),
                "run {run}: bob's job did not start"
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        let owner = "cd /tmp && PATH=/opt/ray/bin:$PATH timeout 150 srun -N1 -w node1 --resv-ports=64 \
             --ray-cluster --tf-host-template='{}-ib' \
             tf-cluster ray --num-cpus=1 --object-store-memory=100000000 --include-dashboard=false \
             --include-log-monitor=false -- python -c 'print(\"DRIVER RAN\")'";
        let took = Instant::now();
        let alice = exec_for(200, &["bash", "-c", owner]);
        let took = took.elapsed();
        on("ctl", &["touch", &format!("{mark}/ended")]);
        let bob = bob.join().unwrap();
        on("ctl", &["rm", "-rf", &mark]);
        let text = |out: &std::process::Output| {
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        };
        let (alice_text, bob_text) = (text(&alice), text(&bob));
        let heard = attack_line("CAPTURE ", &bob_text);
        eprintln!("run {run}: the step ended in {took:?}; bob: {heard}");
        assert_eq!(
            heard["bound"], true,
            "run {run}: bob never listened: {heard}\n{alice_text}"
        );
        assert_eq!(
            heard["bytes"], 0,
            "run {run}: bob's listener heard: {heard}\n{alice_text}"
        );
        let tries = heard["tries"].as_u64().unwrap_or(0);
        assert!(
            tries > 0,
            "run {run}: the port was not held before Ray's GCS: {heard}"
        );
        let port = heard["port"].as_u64().unwrap();
        assert_ne!(alice.status.code(), Some(0), "{alice_text}");
        assert!(!alice_text.contains("DRIVER RAN"), "{alice_text}");
        assert!(!alice_text.contains("starting it again"), "{alice_text}");
        let line = format!("tf-cluster ray: the head's GCS port {port} is taken by bob (uid ");
        assert!(alice_text.contains(&line), "run {run}: {alice_text}");
        assert_nothing_left(&format!("capture run {run}"));
    }
    eprintln!(
        "{runs} runs of bob's listener on the head's GCS port: no byte heard, {:?}",
        start.elapsed()
    );
}

/// The line of `text` after `prefix`, as JSON.
fn attack_line(prefix: &str, text: &str) -> serde_json::Value {
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix(prefix))
        .unwrap_or_else(|| panic!("no {prefix}line:\n{text}"));
    serde_json::from_str(line).unwrap()
}

/// A `--ray-cluster` step whose task made a tree 200 levels deep in the
/// step's private directory (a file at each level), killed with
/// `scancel --signal=KILL`: slurmstepd's exit hook removes the directory
/// whole. (No Ray needed: the task makes the directory as `tf-cluster ray`
/// would, then sleeps.)
#[test]
fn a_killed_steps_tree_of_any_depth_is_removed() {
    let _t = testbed();
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mark = format!("/tmp/tfc-raydeep-{}", std::process::id());
    on("node1", &["rm", "-f", &mark]);
    let task = format!(
        r#"d=${{TF_CLUSTER_RAY_ARGS##*--temp-dir=}}; d=${{d%% *}}; d=${{d%/ray}}; mkdir -m 700 "$d" && cd "$d" || exit 1; for i in $(seq 200); do mkdir d && cd d && touch f || exit 1; done; echo "$d" > {mark}; sleep 300"#
    );
    let step = std::thread::spawn(move || {
        exec_for(
            200,
            &[
                "srun",
                "-J",
                "tfc-ray-deep",
                "-N1",
                "-w",
                "node1",
                "--resv-ports=64",
                "--ray-cluster",
                "bash",
                "-c",
                &task,
            ],
        )
    });
    let end = Instant::now() + std::time::Duration::from_secs(60);
    let dir = loop {
        let out = on("node1", &["cat", &mark]);
        let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if text.starts_with("/tmp/tfc-ray-") {
            break text;
        }
        if Instant::now() > end || step.is_finished() {
            on("ctl", &["scancel", "-u", "alice", "-n", "tfc-ray-deep"]);
            let out = step.join().unwrap();
            panic!(
                "the step made no tree:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    };
    let count = format!("find {dir} -name f | wc -l");
    let files = on("node1", &["sh", "-c", &count]);
    assert_eq!(String::from_utf8_lossy(&files.stdout).trim(), "200");
    kill_alices("tfc-ray-deep");
    let _ = step.join();
    // slurmstepd's exit hook runs once the node's tasks have ended.
    let end = Instant::now() + std::time::Duration::from_secs(30);
    while on("node1", &["test", "-e", &dir]).status.success() {
        assert!(
            Instant::now() < end,
            "{dir} is still there after the step ended"
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    on("node1", &["rm", "-f", &mark]);
}

/// `scancel --signal=KILL` of alice's steps named `name`: no time for
/// their own clean-up.
fn kill_alices(name: &str) {
    on(
        "ctl",
        &["scancel", "--signal=KILL", "-u", "alice", "-n", name],
    );
}
