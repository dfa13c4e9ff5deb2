//! The preflight on the testbed: a node whose fast link lost its carrier, a
//! port a task will listen on held by another process, a GPU device node
//! removed: each step is refused within seconds in one line naming the node
//! and the check, on every node, and no node leaves service; 100 healthy
//! steps in one allocation are never refused; `--tf-preflight=false` turns
//! the checks off. The link is read in the node's own network namespace,
//! whatever sysfs shows.
//!
//! Cost: one step per fault (each ends in about 2 s) and one allocation of
//! 100 short steps.

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::{
    Timed, assert_no_node_drained, exclusive, exec, fast_subnet, messages, on, srun_timed,
};

/// The longest a refused step may take to end on every node.
const LIMIT: Duration = Duration::from_secs(10);

/// What every faulty step runs: a minute, then a line no refused step may
/// print (one process, as a training is).
const PAYLOAD: &str = "exec perl -e \"sleep 60; print qq(finished\\n)\"";

/// The step was refused within [`LIMIT`], every plugin line being `want`,
/// no task ran to its end, and no node left service.
fn assert_refused(case: &str, ended: &Timed, want: &str) {
    eprintln!(
        "TIMING {case}: {:.1} s, exit {}, suite {}",
        ended.took.as_secs_f64(),
        ended.code,
        std::env::var("TFC_SUITE").unwrap_or_default()
    );
    let ctx = format!("{case}:\n{}", ended.text);
    assert_ne!(ended.code, 0, "{ctx}");
    let lines = messages(&ended.text);
    assert!(!lines.is_empty(), "no tf-cluster line\n{ctx}");
    assert!(lines.iter().all(|l| *l == want), "want {want:?}\n{ctx}");
    assert!(
        !ended.text.lines().any(|l| l.ends_with(": finished")),
        "a task of the refused step ran to its end\n{ctx}"
    );
    assert!(
        ended.took < LIMIT,
        "took {:.1} s, over {} s\n{ctx}",
        ended.took.as_secs_f64(),
        LIMIT.as_secs()
    );
    assert_no_node_drained();
}

fn sh_on(host: &str, script: &str) -> String {
    let out = on(host, &["bash", "-c", script]);
    assert!(
        out.status.success(),
        "{host}: {script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// node3's fast interface without its carrier, its address kept: its veth
/// peer on the host is set down while alive, up again when dropped.
struct NoCarrier {
    peer: String,
}

impl NoCarrier {
    /// node3's interface on the fast network (Docker may have renamed it)
    /// and its veth peer on the host, by the interface's iflink (both read
    /// through `ip`, from node3's own namespace).
    fn node3_link() -> (String, String) {
        let iface = sh_on(
            "node3",
            "a=$(getent hosts node3-ib | awk '{print $1}'); ip -o -4 addr show | awk -v a=\"$a\" '{split($4, p, \"/\"); if (p[1] == a) print $2}'",
        );
        assert!(!iface.is_empty(), "node3 has no fast interface");
        // `25: eth1@if26: <…>`: the peer's index follows "@if".
        let shown = sh_on("node3", &format!("ip -o link show {iface}"));
        let index = shown
            .split_once("@if")
            .and_then(|(_, rest)| rest.split(':').next())
            .unwrap_or_default()
            .to_string();
        assert!(!index.is_empty(), "node3's {iface} has no peer");
        let links = Command::new("ip").args(["-o", "link"]).output().unwrap();
        let links = String::from_utf8_lossy(&links.stdout);
        let peer = links
            .lines()
            .find_map(|l| {
                let (i, rest) = l.split_once(": ")?;
                (i == index).then(|| rest.split(['@', ':']).next().unwrap().to_string())
            })
            .unwrap_or_else(|| panic!("no host link {index}:\n{links}"));
        (iface, peer)
    }

    /// node3's fast interface without its carrier, until dropped.
    fn node3() -> (NoCarrier, String) {
        let (iface, peer) = NoCarrier::node3_link();
        (NoCarrier::set(peer), iface)
    }

    fn set(peer: String) -> NoCarrier {
        let down = Command::new("ip")
            .args(["link", "set", &peer, "down"])
            .status()
            .unwrap();
        assert!(down.success());
        NoCarrier { peer }
    }
}

impl Drop for NoCarrier {
    fn drop(&mut self) {
        let up = Command::new("ip")
            .args(["link", "set", &self.peer, "up"])
            .status();
        if !up.is_ok_and(|s| s.success()) && !std::thread::panicking() {
            panic!("could not set {} up again", self.peer);
        }
    }
}

/// Measured without the preflight: the same step hangs past 40 s, gloo
/// waiting for node3 (a node with no such interface at all was already
/// refused in about 2 s).
#[test]
fn a_link_without_carrier_is_refused_naming_the_node() {
    let _alone = exclusive();
    let subnet = fast_subnet();
    let (_off, iface) = NoCarrier::node3();
    let seen = sh_on(
        "node3",
        &format!("ip -o addr show {iface}; ip -o link show {iface}"),
    );
    assert!(
        seen.contains("NO-CARRIER") && seen.contains("inet "),
        "node3's {iface} should keep its address without carrier: {seen}"
    );
    let ended = srun_timed(
        &[
            "-N3",
            "-n3",
            "--torch-cluster",
            &format!("--tf-network={subnet}"),
        ],
        PAYLOAD,
    );
    assert_refused(
        "no carrier",
        &ended,
        &format!("node3: {iface} has no carrier"),
    );
}

/// node3's /sys/class/net replaced by that of another network namespace
/// (a new one, gone with the mount's command: it lists no interface), as a slurmd in a network namespace of its
/// own sees where /sys was not mounted again; undone when dropped. Mounted
/// from the host into node3's mount namespace (the nodes are unprivileged).
struct OtherSysfs {
    pid: String,
}

impl OtherSysfs {
    fn node3() -> OtherSysfs {
        let container = format!("{}-node3", common::prefix());
        let out = Command::new("docker")
            .args(["inspect", "-f", "{{.State.Pid}}", &container])
            .output()
            .unwrap();
        let pid = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert!(
            out.status.success() && !pid.is_empty(),
            "{container}: no pid"
        );
        let mount = "mkdir -p /run/tfc-othersys && unshare -n mount -t sysfs sysfs /run/tfc-othersys && mount --bind /run/tfc-othersys/class/net /sys/class/net";
        let ok = Command::new("nsenter")
            .args(["-t", &pid, "-m", "sh", "-c", mount])
            .status()
            .unwrap();
        assert!(ok.success(), "mounting another namespace's sysfs in node3");
        OtherSysfs { pid }
    }
}

impl Drop for OtherSysfs {
    fn drop(&mut self) {
        let undo = "umount /sys/class/net; umount /run/tfc-othersys; rmdir /run/tfc-othersys";
        let ok = Command::new("nsenter")
            .args(["-t", &self.pid, "-m", "sh", "-c", undo])
            .status();
        if !ok.is_ok_and(|s| s.success()) && !std::thread::panicking() {
            panic!("could not restore node3's /sys/class/net");
        }
    }
}

/// The link is read in node3's own network namespace, not from a sysfs
/// that shows another's: with node3's /sys/class/net another namespace's
/// (its fast interface not listed there), a healthy step runs, and the same
/// interface without its carrier is still refused as such. Measured with
/// the link read from sysfs: both steps refused with "node3: IFACE is gone".
#[test]
fn the_link_is_read_in_the_nodes_own_namespace_not_from_sysfs() {
    let _alone = exclusive();
    let subnet = fast_subnet();
    let (iface, peer) = NoCarrier::node3_link();
    let _sys = OtherSysfs::node3();
    let listed = sh_on("node3", "ls /sys/class/net");
    assert!(
        !listed.lines().any(|l| l == iface),
        "node3's sysfs should be the other namespace's: {listed}"
    );
    let net = format!("--tf-network={subnet}");
    let healthy = exec(&["srun", "-N3", "-n3", "--torch-cluster", &net, "true"]);
    let stderr = String::from_utf8_lossy(&healthy.stderr);
    assert!(
        healthy.status.success() && messages(&stderr).is_empty(),
        "a healthy step on a node whose sysfs is another namespace's: {stderr}"
    );
    let _off = NoCarrier::set(peer);
    let ended = srun_timed(&["-N3", "-n3", "--torch-cluster", &net], PAYLOAD);
    assert_refused(
        "no carrier, sysfs of another namespace",
        &ended,
        &format!("node3: {iface} has no carrier"),
    );
}

/// A process holds the port node2's task will listen on (TensorFlow's
/// server of local task 0: the port base); with `--tf-preflight=false` the
/// same step runs.
#[test]
fn a_held_port_is_refused_naming_the_node() {
    let _alone = exclusive();
    const PORT: u16 = 27_777;
    let hold = format!(
        "setsid python3 -c 'import socket, time; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((\"0.0.0.0\", {PORT})); s.listen(); time.sleep(120)' </dev/null >/dev/null 2>&1 & echo $! > /tmp/tfc-hold.pid; for i in $(seq 50); do ss -Hltn 'sport = :{PORT}' | grep -q . && exit 0; sleep 0.1; done; exit 1"
    );
    sh_on("node2", &hold);
    let base = format!("--tf-port-base={PORT}");
    // --resv-ports=0: no ports reserved by Slurm (the testbed's MpiParams),
    // so the port base gives them.
    let ended = srun_timed(
        &["-N3", "-n3", "--resv-ports=0", "--tf-cluster", &base],
        PAYLOAD,
    );
    let off = exec(&[
        "srun",
        "-N3",
        "-n3",
        "--resv-ports=0",
        "--tf-cluster",
        &base,
        "--tf-preflight=false",
        "true",
    ]);
    sh_on("node2", "kill $(cat /tmp/tfc-hold.pid)");
    assert_refused(
        "held port",
        &ended,
        &format!(
            "node2: port {PORT}, which a task listens on, cannot be bound: another process holds it"
        ),
    );
    assert!(
        off.status.success() && messages(&String::from_utf8_lossy(&off.stderr)).is_empty(),
        "--tf-preflight=false: {}",
        String::from_utf8_lossy(&off.stderr)
    );
}

/// node1's /dev/nvidia1 removed (the testbed's fake GPUs are character
/// devices, docker/node/entrypoint.sh); made again afterwards.
#[test]
fn a_missing_gpu_device_node_is_refused_naming_the_node() {
    let _alone = exclusive();
    sh_on("node1", "rm /dev/nvidia1");
    let ended = srun_timed(
        &["-N1", "-w", "node1", "--gres=gpu:2", "--torch-cluster"],
        PAYLOAD,
    );
    sh_on("node1", "mknod -m 666 /dev/nvidia1 c 195 1");
    assert_refused(
        "missing GPU",
        &ended,
        "node1: GPU 1's device node /dev/nvidia1 is missing",
    );
}

/// 100 healthy steps in one allocation, each checking the interface, the
/// ports of TensorFlow's and PyTorch's tasks and two GPUs on every node:
/// none is refused.
#[test]
fn a_hundred_healthy_steps_are_never_refused() {
    let _t = common::testbed();
    let subnet = fast_subnet();
    let script = format!(
        "ok=0; for i in $(seq 100); do srun -N3 -n6 --ntasks-per-node=2 --gres=gpu:2 --tf-cluster --torch-cluster --tf-network={subnet} true && ok=$((ok+1)); done; echo TFC_OK $ok"
    );
    let out = common::exec_for(
        600,
        &[
            "salloc",
            "-N3",
            "--ntasks-per-node=2",
            "--gres=gpu:2",
            "bash",
            "-c",
            &script,
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.contains("TFC_OK 100"), "{stdout}{stderr}");
    assert!(messages(&stderr).is_empty(), "{stderr}");
}

/// A Ray step's node-wide ports are checked on every node, not on the
/// head's only: `bob` listens on node2 on the port every Ray node's raylet
/// takes (`--node-manager-port`, the step's second port; the head is on
/// node1); the step is refused by node2's preflight in seconds, naming the
/// port. No Ray is needed: the preflight runs before any task starts.
/// Measured without the check on every node: no preflight line, the step
/// ran its payload (a Ray cluster on these ports failed after 114 s).
#[test]
fn a_ray_port_held_on_another_node_than_the_heads_is_refused_naming_it() {
    let _alone = exclusive();
    const BASE: u16 = 27_800;
    const PORT: u16 = BASE + 1;
    let hold = format!(
        "rm -f /tmp/tfc-hold-ray.pid; runuser -u bob -- setsid python3 -c 'import os, socket, time; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((\"0.0.0.0\", {PORT})); s.listen(); open(\"/tmp/tfc-hold-ray.pid\", \"w\").write(str(os.getpid())); time.sleep(120)' </dev/null >/dev/null 2>&1 & for i in $(seq 50); do ss -Hltn 'sport = :{PORT}' | grep -q . && test -s /tmp/tfc-hold-ray.pid && exit 0; sleep 0.1; done; exit 1"
    );
    sh_on("node2", &hold);
    let base = format!("--tf-port-base={BASE}");
    let ended = srun_timed(
        &[
            "-N3",
            "--ntasks-per-node=1",
            "-w",
            "node[1-3]",
            "--resv-ports=0",
            "--ray-cluster",
            &base,
        ],
        PAYLOAD,
    );
    sh_on(
        "node2",
        "kill $(cat /tmp/tfc-hold-ray.pid) && rm /tmp/tfc-hold-ray.pid",
    );
    assert_refused(
        "held Ray port on node2",
        &ended,
        &format!(
            "node2: port {PORT}, which a task listens on, cannot be bound: another process holds it"
        ),
    );
}
