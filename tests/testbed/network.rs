//! The fast network on the testbed: every container has a second interface
//! (eth1) on a second Docker network, `<prefix>-ib`, where alone the names
//! node1-ib … node3-ib resolve (docker/testbed.sh); Slurm's names are on eth0.
//! Real PyTorch (gloo), TensorFlow (MultiWorkerMirroredStrategy) and JAX jobs
//! each count the bytes every interface of the task's own network namespace
//! moved (/proc/self/net/dev, read by the task around its collectives), so
//! what is asserted is where the bytes really went, not what the plugin set.
//! Each task also names, by itself, its fast interface (the one carrying the
//! address `$(hostname)-ib` resolves to) and its Slurm one (`$(hostname)`):
//! Docker names them (eth1, or eth2 on a node reconnected to the network).

use crate::common;

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::OnceLock;

use common::outputs::Outputs;
use common::{fast_subnet, prefix, testbed};
use serde_json::Value;

const DIR: &str = "/home/alice/net-tests";

/// The workload, then one `BYTES {...}` line: each interface's received plus
/// sent bytes meanwhile and the interface variables the task saw.
const NETBYTES: &str = r#"
import json, os, socket, subprocess, sys

VARS = ["NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME"]
FLOATS = 4 * 1024 * 1024  # 16 MiB of float32
ROUNDS = 8


def counters():
    out = {}
    with open("/proc/self/net/dev") as f:
        for line in f.readlines()[2:]:
            name, data = line.split(":", 1)
            v = data.split()
            out[name.strip()] = int(v[0]) + int(v[8])
    return out


def torch_gloo():
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo")
    t = torch.ones(FLOATS)
    for _ in range(ROUNDS):
        dist.all_reduce(t)
    dist.barrier()
    dist.destroy_process_group()


def tf_mwms():
    import tensorflow as tf
    strategy = tf.distribute.MultiWorkerMirroredStrategy()

    @tf.function
    def step():
        def replica():
            ctx = tf.distribute.get_replica_context()
            return ctx.all_reduce(tf.distribute.ReduceOp.SUM, tf.ones([FLOATS]))
        return strategy.run(replica)

    for _ in range(ROUNDS):
        step()


def jax_gloo():
    import jax
    jax.distributed.initialize()
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
    mesh = Mesh(np.array(jax.devices()), ("d",))
    mine = np.ones((jax.local_device_count(), FLOATS), dtype=np.float32)
    g = jax.make_array_from_process_local_data(NamedSharding(mesh, PartitionSpec("d")), mine)
    total = jax.jit(lambda x: jnp.sum(x, axis=0), out_shardings=NamedSharding(mesh, PartitionSpec()))
    for _ in range(ROUNDS):
        total(g).block_until_ready()
    jax.distributed.shutdown()


def iface_of(name):
    """The interface carrying the address `name` resolves to (ip -o -4 addr)."""
    try:
        addr = socket.gethostbyname(name)
    except OSError:
        return None
    out = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        f = line.split()
        if f[3].split("/")[0] == addr:
            return f[1]


before = counters()
{"torch": torch_gloo, "tf": tf_mwms, "jax": jax_gloo}[sys.argv[1]]()
after = counters()
moved = {k: after[k] - before.get(k, 0) for k in after if k != "lo"}
host = socket.gethostname()
print("BYTES " + json.dumps({
    "host": host,
    "fast": iface_of(host + "-ib"),
    "slow": iface_of(host),
    "bytes": moved,
    "env": {v: os.environ.get(v) for v in VARS},
}), flush=True)
"#;

fn install() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| common::install(DIR, &[("netbytes.py", NETBYTES)], ""));
}

/// What each rank's job moved.
struct Job {
    code: Option<i32>,
    output: String,
    by_rank: BTreeMap<u32, Value>,
}

impl Job {
    /// Rank `r`'s bytes on `iface`.
    fn bytes(&self, r: u32, iface: &str) -> u64 {
        self.by_rank[&r]["bytes"][iface].as_u64().unwrap_or(0)
    }

    /// Rank `r`'s fast (`"fast"`) or Slurm (`"slow"`) interface, as the
    /// task found it.
    fn iface(&self, r: u32, which: &str) -> &str {
        self.by_rank[&r][which]
            .as_str()
            .unwrap_or_else(|| panic!("rank {r} has no {which} interface:\n{}", self.output))
    }

    /// Every rank ran and moved at least `share` of its bytes (every
    /// interface but lo) over its `which` interface (`"fast"` or `"slow"`);
    /// prints each rank's bytes (the numbers the docs quote).
    fn assert_share(&self, ranks: u32, which: &str, share: f64, what: &str) {
        assert_eq!(self.code, Some(0), "{what}: step failed:\n{}", self.output);
        assert_eq!(self.by_rank.len() as u32, ranks, "{what}:\n{}", self.output);
        for r in 0..ranks {
            let (fast, slow) = (self.iface(r, "fast"), self.iface(r, "slow"));
            let all: u64 = self.by_rank[&r]["bytes"]
                .as_object()
                .unwrap()
                .values()
                .map(|v| v.as_u64().unwrap())
                .sum();
            let on = self.bytes(r, self.iface(r, which)) as f64 / all.max(1) as f64;
            eprintln!(
                "{what}: rank {r} on {}: Slurm's {slow} {} B, fast {fast} {} B ({:.1}% on the {which} one); {}",
                self.by_rank[&r]["host"],
                self.bytes(r, slow),
                self.bytes(r, fast),
                on * 100.0,
                self.by_rank[&r]["env"]
            );
            assert!(all > 50_000_000, "{what}: rank {r} moved only {all} bytes");
            assert!(
                on >= share,
                "{what}: rank {r} moved {:.1}% over its {which} interface {}: {}",
                on * 100.0,
                self.iface(r, which),
                self.by_rank[&r]
            );
        }
    }

    /// Rank `r`'s interface variables.
    fn env(&self, r: u32, name: &str) -> Option<&str> {
        self.by_rank[&r]["env"][name].as_str()
    }
}

/// `env VARS srun -N3 -n3 ARGS bash -c 'cd DIR; exec PYTHON netbytes.py KIND'`.
fn job(vars: &[&str], args: &[&str], python: &str, kind: &str) -> Job {
    install();
    let outputs = Outputs::new("netbytes");
    let files = outputs.srun_args();
    let mut cmd = vec!["env"];
    cmd.extend_from_slice(vars);
    cmd.extend_from_slice(&["srun", "--kill-on-bad-exit=1", "--time=9", "-N3", "-n3"]);
    cmd.extend(files.iter().map(String::as_str));
    cmd.extend_from_slice(args);
    let task = format!("cd {DIR}; exec {python} netbytes.py {kind}");
    cmd.extend_from_slice(&["bash", "-c", &task]);
    let out = common::exec_for(600, &cmd);
    let output = format!(
        "srun: {}{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        outputs.dump()
    );
    Job {
        code: out.status.code(),
        by_rank: outputs.labelled().json("BYTES "),
        output,
    }
}

const TORCH: &str = "python3";
const TF: &str = "/opt/tf/bin/python";
const JAX: &str = "/opt/jax/bin/python";

/// The control: the template alone (MASTER_ADDR on node1-ib) with no
/// interface variable (the task drops them): gloo's data connections take
/// the address of the host's own name, on eth0. The same job with the
/// plugin's variables moves its bytes over eth1.
#[test]
fn pytorch_gloo_follows_the_host_template() {
    // The bytes are the node's (its network namespace): no other step meanwhile.
    let _t = common::exclusive();
    let args = ["--torch-cluster", "--tf-host-template={}-ib"];
    let drop = "env -u NCCL_SOCKET_IFNAME -u GLOO_SOCKET_IFNAME -u TP_SOCKET_IFNAME";
    let before = job(&[], &args, &format!("{drop} {TORCH}"), "torch");
    before.assert_share(3, "slow", 0.9, "before (template, no interface variables)");
    let after = job(&[], &args, TORCH, "torch");
    after.assert_share(3, "fast", 0.9, "after (template)");
    for r in 0..3 {
        let fast = after.iface(r, "fast");
        assert_eq!(after.env(r, "GLOO_SOCKET_IFNAME"), Some(fast));
        assert_eq!(
            after.env(r, "NCCL_SOCKET_IFNAME"),
            Some(&*format!("={fast}"))
        );
        assert_eq!(after.env(r, "TP_SOCKET_IFNAME"), Some(fast));
    }
}

/// `--tf-network=SUBNET` alone (Slurm's names for the rendezvous): the data
/// still goes over the fast network.
#[test]
fn pytorch_gloo_follows_the_subnet() {
    // The bytes are the node's (its network namespace): no other step meanwhile.
    let _t = common::exclusive();
    let network = format!("--tf-network={}", fast_subnet());
    let after = job(&[], &["--torch-cluster", &network], TORCH, "torch");
    after.assert_share(3, "fast", 0.9, &format!("after ({network})"));
}

/// A variable the user exported is kept on every node, the others are set.
#[test]
fn the_users_own_interface_is_kept() {
    // The bytes are the node's (its network namespace): no other step meanwhile.
    let _t = common::exclusive();
    let args = ["--torch-cluster", "--tf-host-template={}-ib"];
    let kept = job(&["GLOO_SOCKET_IFNAME=eth0"], &args, TORCH, "torch");
    kept.assert_share(3, "slow", 0.9, "user's GLOO_SOCKET_IFNAME=eth0 kept");
    for r in 0..3 {
        let fast = kept.iface(r, "fast");
        assert_eq!(kept.env(r, "GLOO_SOCKET_IFNAME"), Some("eth0"));
        assert_eq!(
            kept.env(r, "NCCL_SOCKET_IFNAME"),
            Some(&*format!("={fast}"))
        );
    }
}

/// TensorFlow's collectives on CPU go over gRPC to TF_CONFIG's addresses:
/// the template moves them. The control is the subnet alone: it names no
/// address, so TF_CONFIG keeps Slurm's names and gRPC stays on them, as with
/// no network option at all (NCCL, on GPUs, would follow the variable).
#[test]
fn tensorflow_mwms_follows_the_host_template() {
    // The bytes are the node's (its network namespace): no other step meanwhile.
    let _t = common::exclusive();
    let network = format!("--tf-network={}", fast_subnet());
    let subnet = job(&[], &["--tf-cluster", &network], TF, "tf");
    subnet.assert_share(3, "slow", 0.9, &format!("TF, {network} alone"));
    let after = job(&[], &["--tf-cluster", "--tf-host-template={}-ib"], TF, "tf");
    after.assert_share(3, "fast", 0.9, "TF after (template)");
    let fast = after.iface(0, "fast");
    assert_eq!(
        after.env(0, "NCCL_SOCKET_IFNAME"),
        Some(&*format!("={fast}"))
    );
}

/// JAX builds its CPU collectives (gloo) without an interface and reads no
/// variable for one: they follow the host's own name (eth0) whatever the
/// plugin sets. Measured, so the docs can say so; JAX's GPU collectives
/// (NCCL) read NCCL_SOCKET_IFNAME, which the task gets.
#[test]
fn jax_cpu_collectives_stay_on_the_hosts_own_name() {
    // The bytes are the node's (its network namespace): no other step meanwhile.
    let _t = common::exclusive();
    let run = job(
        &[],
        &["--jax-cluster", "--tf-host-template={}-ib"],
        JAX,
        "jax",
    );
    run.assert_share(3, "slow", 0.9, "JAX CPU collectives (template)");
    let fast = run.iface(0, "fast");
    assert_eq!(run.env(0, "NCCL_SOCKET_IFNAME"), Some(&*format!("={fast}")));
    assert_eq!(run.env(0, "GLOO_SOCKET_IFNAME"), None);
}

/// A site's plugstack.conf argument `network=SUBNET` names the network for
/// every step.
#[test]
fn the_sites_plugstack_argument_names_the_network() {
    let t = common::exclusive();
    t.plugstack(&format!(
        "required {} network={}\n",
        common::PLUGIN,
        fast_subnet()
    ));
    let run = job(&[], &["--torch-cluster"], TORCH, "torch");
    run.assert_share(3, "fast", 0.9, "plugstack.conf network=SUBNET");
}

/// Disconnects node3 from the fast network while alive; reconnects it with
/// its name when dropped, on eth1 again.
struct Disconnected(String);

impl Disconnected {
    fn node3() -> Disconnected {
        let node = format!("{}-node3", prefix());
        let out = Command::new("docker")
            .args(["network", "disconnect", &format!("{}-ib", prefix()), &node])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Disconnected(node)
    }
}

impl Drop for Disconnected {
    fn drop(&mut self) {
        let out = Command::new("docker")
            .args(["network", "connect", "--alias", "node3-ib"])
            .arg(format!("{}-ib", prefix()))
            .arg(&self.0)
            .output()
            .unwrap();
        // Docker numbers a reconnected network's interface on (eth2): give
        // it back the name the other tests know it by, from the host (the
        // node may not rename its own links).
        let pid = Command::new("docker")
            .args(["inspect", "-f", "{{.State.Pid}}", &self.0])
            .output()
            .unwrap();
        let pid = String::from_utf8_lossy(&pid.stdout).trim().to_string();
        let rename = r#"set -e
name=$(ip -o link show | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }' | grep -vx -e lo -e eth0 | head -n 1)
if [ -n "$name" ] && [ "$name" != eth1 ]; then
    ip link set "$name" down
    ip link set "$name" name eth1
    ip link set eth1 up
fi"#;
        let renamed = Command::new("nsenter")
            .args(["-t", &pid, "-n", "sh", "-c", rename])
            .output()
            .unwrap();
        // Docker dropped node3's own /etc/hosts line for eth0 with the
        // disconnection and wrote the new network's only: put Slurm's first
        // again, as on the other nodes (else `node3` means the fast network).
        let hosts = r#"set -e
a0=$(ip -o -4 addr show eth0 | awk '{ split($4, a, "/"); print a[1] }')
grep -v '[[:space:]]node3$' /etc/hosts >/tmp/hosts
printf '%s\tnode3\n' "$a0" >>/tmp/hosts
grep '[[:space:]]node3$' /etc/hosts | grep -v "^$a0[[:space:]]" >>/tmp/hosts || true
cat /tmp/hosts >/etc/hosts"#;
        let fixed = Command::new("docker")
            .args(["exec", &self.0, "sh", "-c", hosts])
            .output()
            .unwrap();
        let ok = out.status.success() && renamed.status.success() && fixed.status.success();
        if !ok && !std::thread::panicking() {
            panic!(
                "reconnecting node3: {}{}{}",
                String::from_utf8_lossy(&out.stderr),
                String::from_utf8_lossy(&renamed.stderr),
                String::from_utf8_lossy(&fixed.stderr)
            );
        }
    }
}

/// A node without the network is refused in one line naming it and the
/// network, never left to Ethernet: with the subnet by node3 itself, with
/// the template by srun, which cannot resolve node3-ib any more.
#[test]
fn a_node_without_the_network_is_refused() {
    let _alone = common::exclusive();
    let subnet = fast_subnet();
    let _off = Disconnected::node3();
    let out = common::exec(&[
        "srun",
        "-N3",
        "-n3",
        "--torch-cluster",
        &format!("--tf-network={subnet}"),
        "bash",
        "-c",
        "echo ran on $(hostname) GLOO=$GLOO_SOCKET_IFNAME",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_ne!(out.status.code(), Some(0), "{stdout}{stderr}");
    let lines = common::messages(&stderr);
    eprintln!("refused (subnet): {lines:?}");
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].contains("node3 is not on") && lines[0].contains(&subnet),
        "{}",
        lines[0]
    );
    assert!(!stdout.contains("node3"), "node3's task ran: {stdout}");
    let out = common::exec(&[
        "srun",
        "-N3",
        "-n3",
        "--torch-cluster",
        "--tf-host-template={}-ib",
        "true",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    let lines = common::messages(&stderr);
    eprintln!("refused (template): {lines:?}");
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].contains("node3-ib") && lines[0].contains("{}-ib"),
        "{}",
        lines[0]
    );
    common::assert_no_node_drained();
    // Reconnected, node3 is as the testbed made it for the tests that come
    // after: the fast network on eth1, with its address.
    drop(_off);
    let eth1 = common::on("node3", &["ip", "-o", "-4", "addr", "show", "dev", "eth1"]);
    let eth1 = String::from_utf8_lossy(&eth1.stdout).into_owned();
    let links = common::on("node3", &["ip", "-o", "link"]);
    let ip = Command::new("docker")
        .args([
            "inspect",
            "-f",
            &format!(
                "{{{{(index .NetworkSettings.Networks \"{}-ib\").IPAddress}}}}",
                prefix()
            ),
            &format!("{}-node3", prefix()),
        ])
        .output()
        .unwrap();
    let ip = String::from_utf8_lossy(&ip.stdout).trim().to_string();
    assert!(
        !ip.is_empty() && eth1.contains(&format!(" inet {ip}/")),
        "node3 has no eth1 with its address {ip:?} on {subnet} after the reconnection: {eth1:?}\n{}",
        String::from_utf8_lossy(&links.stdout)
    );
}

/// Steps that name no network get no interface variable; a bad
/// `--tf-network` is refused when srun parses it.
#[test]
fn no_network_no_variables_and_bad_values_refused() {
    let _t = testbed();
    // Each task's line from its own file.
    let out = common::srun_tasks(&[
        "-N3",
        "-n3",
        "--torch-cluster",
        "bash",
        "-c",
        "echo \"vars=${NCCL_SOCKET_IFNAME-}${GLOO_SOCKET_IFNAME-}${TP_SOCKET_IFNAME-}.\"",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.matches("vars=.").count(), 3, "{stdout}");
    let out = common::exec(&[
        "srun",
        "-N1",
        "--torch-cluster",
        "--tf-network=10.98.0.0/33",
        "true",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0));
    assert!(stderr.contains("not a subnet"), "{stderr}");
}
