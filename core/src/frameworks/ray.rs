//! Ray (`--ray-cluster`): one Ray node per Slurm node, the head on rank 0's
//! node, every port Ray opens taken from the step's own ports (reserved by
//! Slurm, or the step's block of the port range), Ray's token
//! authentication on with the step's own token, and a temp directory inside
//! a private directory of the step's own: both from the step's secret
//! (crate::secret), which only the step's processes hold, so another user
//! of the nodes can neither run code in the cluster nor reach its files. Ray takes its ports only as `ray start` flags and reads no
//! variable for them, nor for the node's address (`--node-ip-address`), so
//! the tasks get `ray start`'s arguments; `tf-cluster ray` (the CLI) runs
//! them. RAY_ADDRESS is Ray's own: `ray.init()` and `ray start --address`
//! read it.
//!
//! What it needs of the layout: rank 0's host and this task's node: O(1)
//! after the layout.

use super::framework::{Framework, GpuRule, Launch, RoleRule, Task, Vars};
use crate::addresses::NCCL;
use crate::error::{Result, bail};
use crate::layout::Layout;
use crate::limits::MAX_TASKS;
use crate::node_plan::PortRule;
use crate::secret::Secret;
use crate::settings::Settings;

/// The ports every Ray node opens besides its workers', in the order the
/// step's ports are handed out (index into the framework's ports). The
/// head's three (GCS, client server, dashboard) are taken on every node so
/// that each node's ports are the same list.
pub const FIXED: [&str; 9] = [
    "--port",
    "--node-manager-port",
    "--object-manager-port",
    "--runtime-env-agent-port",
    "--dashboard-agent-grpc-port",
    "--dashboard-agent-listen-port",
    "--metrics-export-port",
    "--ray-client-server-port",
    "--dashboard-port",
];

/// Flags of the head alone (`ray start --head`); a worker node rejects or
/// ignores them.
pub const HEAD_ONLY: [&str; 3] = ["--port", "--ray-client-server-port", "--dashboard-port"];

/// Ports for Ray's worker processes on a node: each worker, actor and driver
/// process holds one while it lives (Ray's `--worker-port-list`), so a node
/// runs at most this many at once.
pub const WORKER_PORTS: u32 = 55;

/// Every port a Ray node takes: 64, sixteen slots of the port range.
pub const PORTS: u32 = FIXED.len() as u32 + WORKER_PORTS;

/// The variable holding `ray start`'s flags for every node.
pub const ARGS_VAR: &str = "TF_CLUSTER_RAY_ARGS";
/// The variable holding the head's own flags (rank 0's node only).
pub const HEAD_ARGS_VAR: &str = "TF_CLUSTER_RAY_HEAD_ARGS";
/// This node's name on the step's network, which `tf-cluster ray` resolves
/// to Ray's `--node-ip-address` (slurmstepd resolves no name).
pub const NODE_VAR: &str = "TF_CLUSTER_RAY_NODE";
/// The step's temp directory on every node (Ray's `--temp-dir`), inside
/// the step's private directory ([`private_dir`]).
pub const TEMP_VAR: &str = "TF_CLUSTER_RAY_TEMP_DIR";
/// Ray's switch for its token authentication (Ray 2.52 and later), set on
/// every node and in the driver alike: with it on only where a token file
/// happens to exist, the nodes of one cluster disagree and it fails.
pub const AUTH_MODE_VAR: &str = "RAY_AUTH_MODE";
/// The token itself: first of Ray's sources, before `RAY_AUTH_TOKEN_PATH`
/// and `~/.ray/auth_token`, so a token file of the user's changes nothing.
pub const TOKEN_VAR: &str = "RAY_AUTH_TOKEN";
/// The first Ray whose every server checks the token: 2.52 brought token
/// authentication, but its dashboard agent's HTTP server (the job API on
/// `--dashboard-agent-listen-port`) checks it only from 2.54, so 2.52 and
/// 2.53 run any user's job as the owner. `tf-cluster ray` refuses an older
/// one.
pub const FIRST_SAFE: (u32, u32) = (2, 54);

pub static FRAMEWORK: Framework = Framework {
    name: "Ray",
    option: "ray-cluster",
    arg: None,
    help: "set RAY_ADDRESS (the head on rank 0's node) and ray start's ports, node address and temp directory, all the step's own, for tf-cluster ray; one task per node",
    skip_when_inherited: false,
    max_tasks: MAX_TASKS,
    max_tasks_why: "tf-cluster lays out at most 262144",
    // Every node listens on its own; the head also on HEAD_ONLY.
    ports: PortRule::Fixed {
        named: &FIXED,
        head_only: &HEAD_ONLY,
        more: WORKER_PORTS,
    },
    check_before_launch,
    check_layout: Some(|_, layout| one_task_per_node(layout.max_local())),
    // A Ray node's tasks and actors pick GPUs from all of the node's
    // (Ray sets CUDA_VISIBLE_DEVICES per task from its own accounting).
    gpus: GpuRule::Whole,
    shared: None,
    render,
    columns: &["HEAD", "RAY_NODE"],
    row,
    summary,
    // NCCL between Ray's GPU workers (vLLM, Ray Train): its bootstrap and
    // socket transport on the step's network.
    interface_vars: &[&NCCL],
    roles: RoleRule::Indifferent,
    renders_world: false,
    role_of: None,
    // Ray's own processes run no NCCL.
    nccl: false,
    private_dir: Some(private_dir),
};

fn check_before_launch(_: &Settings, launch: &Launch) -> Result<()> {
    match launch.most_local {
        Some(most) => one_task_per_node(most),
        None => Ok(()),
    }
}

/// Ray runs one node per host: a second `ray start` on a node would start
/// a second raylet of the same cluster.
pub fn one_task_per_node(most_local: u32) -> Result<()> {
    if most_local > 1 {
        bail!(
            "--ray-cluster runs one Ray node per Slurm node, but the step has {most_local} tasks on a node: use --ntasks-per-node=1 (Ray starts each node's workers itself)"
        );
    }
    Ok(())
}

/// The step's private directory on each node, `/tmp/tfc-ray-ID` with the
/// secret's 16 hex digits: no other user can know its name before
/// `tf-cluster ray` makes it (mode 0700), so none can make it first or
/// enter it. Ray's temp directory, which Ray sets to mode 0777, is inside;
/// slurmstepd removes it when the step ends, however it ends.
pub fn private_dir(secret: &Secret) -> String {
    format!("/tmp/tfc-ray-{}", secret.dir_id())
}

/// Ray's `--temp-dir`: `PRIVATE/ray`, 33 bytes, short enough for Ray's
/// unix socket paths below it (107 bytes; its session directory and socket
/// names take about 62).
pub fn temp_dir(secret: &Secret) -> String {
    format!("{}/ray", private_dir(secret))
}

/// The step's secret: none means the srun that started the step did not
/// load the plugin, and a cluster without its token would let any user of
/// the nodes in.
fn secret<'t>(task: &'t Task) -> Result<&'t Secret> {
    match &task.step.secret {
        Some(secret) => Ok(secret),
        None => bail!(
            "--ray-cluster needs the step's secret from srun (Ray's token), but the srun that started this step does not load tf-cluster: run it with one that does"
        ),
    }
}

/// `--worker-port-list`, as min/max when the ports follow each other.
fn worker_ports(ports: &[u16]) -> String {
    let contiguous = ports.windows(2).all(|w| w[1] == w[0].wrapping_add(1));
    match (ports.first(), ports.last()) {
        (Some(lo), Some(hi)) if contiguous => {
            format!("--min-worker-port={lo} --max-worker-port={hi}")
        }
        _ => {
            let list: Vec<String> = ports.iter().map(u16::to_string).collect();
            format!("--worker-port-list={}", list.join(","))
        }
    }
}

/// This node's Ray address: on a network named by `--tf-network`, the
/// node's own address there (slurmstepd found it on the node's
/// interfaces); else the name the layout gives the node (a host
/// template's, or Slurm's), which `tf-cluster ray` resolves. The head's
/// address on such a network is known on the head's node alone, so
/// RAY_ADDRESS keeps the head's name: the GCS listens on every address of
/// the head, and every node reaches it by that name, while Ray's objects
/// and tasks go between the nodes' own addresses.
fn node_address(task: &Task) -> String {
    let on_network = task.step.network.as_ref().and_then(|n| n.address);
    match (&task.settings.network, on_network) {
        (Some(_), Some(address)) => address.to_string(),
        _ => task.layout.address(task.placement.node).into_owned(),
    }
}

fn head(task: &Task) -> Result<String> {
    let layout: &Layout = task.layout;
    let host = layout.address(layout.placement(0)?.node);
    Ok(format!("{host}:{}", task.ports[0]))
}

fn render(task: &Task, vars: &mut Vars) -> Result<()> {
    let ports = task.ports;
    let secret = secret(task)?;
    let temp = temp_dir(secret);
    let fixed = |head_only: bool| -> Vec<String> {
        FIXED
            .iter()
            .zip(ports)
            .filter(|(flag, _)| HEAD_ONLY.contains(flag) == head_only)
            .map(|(flag, port)| format!("{flag}={port}"))
            .collect()
    };
    let mut args = fixed(false);
    args.push(worker_ports(&ports[FIXED.len()..]));
    args.push(format!("--temp-dir={temp}"));
    vars.extend([
        ("RAY_ADDRESS", head(task)?),
        (NODE_VAR, node_address(task)),
        (TEMP_VAR, temp),
        (ARGS_VAR, args.join(" ")),
        (AUTH_MODE_VAR, "token".into()),
        (TOKEN_VAR, secret.token()),
    ]);
    if task.placement.node == task.layout.placement(0)?.node {
        vars.push((HEAD_ARGS_VAR, fixed(true).join(" ")));
    }
    Ok(())
}

fn row(task: &Task) -> Vec<String> {
    vec![head(task).unwrap_or_default(), node_address(task)]
}

fn summary(task: &Task) -> Option<String> {
    let mut vars = Vars::new();
    render(task, &mut vars).ok()?;
    let get = |name: &str| {
        vars.iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    Some(format!(
        "ray start on every node (tf-cluster ray -- CMD): {} {}; on the head also {}",
        get("RAY_ADDRESS"),
        get(ARGS_VAR),
        get(HEAD_ARGS_VAR)
    ))
}
