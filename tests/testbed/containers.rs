//! Steps behind container runtimes on the testbed: the container stand-in
//! (tests/container_standin/, a SPANK plugin written for these tests that
//! does in its task_init what NVIDIA pyxis does there, from the documented
//! facts: it imports the image's environment with overwrite, then enters new
//! user and mount namespaces and the image's root, `srun
//! --container-image=DIR`), Slurm's own `--container` with Debian's runc,
//! and Apptainer (forky's image only).
//!
//! The stand-in is enabled as a container plugin's package would be,
//! `plugstack.conf.d/container-standin.conf`, beside the tf-cluster
//! package's `tf-cluster.conf`: the include glob is sorted, so its task_init
//! runs first and the plugin's after it, inside the container. The image
//! (docker/node/images/) is busybox whose /etc/environment sets every name
//! the plugin sets and Slurm's own task variables (SLURM_PROCID, SLURM_JOB_ID,
//! SLURMD_TRES_BIND…), each with a value that must lose. The stand-in keeps
//! Slurm's value of each name it replaced as STANDIN_WAS_<NAME>: that is how
//! the probe learns a task's real rank and local id.
//!
//! The outcome wanted: every framework's task gets the values computed from
//! the host, the same as the same step without a container, for every name
//! the plugin sets, and they win over the image's; the plugin says once per
//! task which of the image's names it replaced. Expected values come from
//! Slurm's facts as the tasks report them (host, rank, local id, reserved
//! ports, job and step ids), from the image's file, or from the same step
//! run without the container, never from the plugin's code.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};

use common::standin::{STANDIN_CONF, STANDIN_SO, standin};
use common::{HOSTS, exclusive, exec_for, on, reserved_ports};
use serde_json::Value;

/// The image root of docker/node/images/make.sh.
const IMAGE: &str = "--container-image=/opt/tfc-images/busybox";

/// What each task prints (busybox sh in the image, dash on the host): where
/// it runs (`busybox` inside the image), its Slurm facts, the GPUs the NVIDIA
/// and AMD drivers list where it runs (`G RANK NVIDIA KFD`), and its whole
/// environment as `V RANK NAME=value`.
const PROBE: &str = r#"where=$(cat /etc/tfc-image 2>/dev/null || echo host); r=${STANDIN_WAS_SLURM_PROCID:-$SLURM_PROCID}; echo "W $r $(hostname) ${STANDIN_WAS_SLURM_LOCALID:-$SLURM_LOCALID} ${SLURM_STEP_RESV_PORTS-none} $where"; echo "G $r $(ls /proc/driver/nvidia/gpus 2>/dev/null | wc -l) $(ls /sys/class/kfd/kfd/topology/nodes 2>/dev/null | wc -l)"; env | grep -E '^[A-Za-z_][A-Za-z0-9_]*=' | sed "s/^/V $r /""#;

/// The image's own values (docker/node/images/environment).
const IMAGE_MASTER_ADDR: &str = "image-master";
const IMAGE_GPUS: &str = "7";

#[derive(Debug, Default)]
struct Seen {
    host: String,
    local: u32,
    resv_ports: Option<String>,
    /// `busybox` in the image, `host` outside.
    place: String,
    /// Entries of /proc/driver/nvidia/gpus and of amdkfd's topology nodes
    /// where the task runs.
    drivers: (u32, u32),
    vars: BTreeMap<String, String>,
}

impl Seen {
    fn var(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str)
    }

    /// `JOB.STEP` from Slurm's ids (the job's as the stand-in kept it aside
    /// where the image set its own): the step's run id, restart count 0.
    fn run_id(&self) -> String {
        let job = self
            .var("STANDIN_WAS_SLURM_JOB_ID")
            .or(self.var("SLURM_JOB_ID"))
            .expect("SLURM_JOB_ID");
        format!(
            "{job}.{}",
            self.var("SLURM_STEP_ID").expect("SLURM_STEP_ID")
        )
    }

    /// `value` with this step's run id as `JOB.STEP` and its k-th reserved
    /// port as `PORTk`: two steps differ in those alone.
    fn normalized(&self, value: &str) -> String {
        let value = value.replace(&self.run_id(), "JOB.STEP");
        let ports: Vec<String> = self
            .resv_ports
            .as_deref()
            .map(reserved_ports)
            .unwrap_or_default()
            .iter()
            .map(u16::to_string)
            .collect();
        let mut out = String::with_capacity(value.len());
        let mut digits = String::new();
        for c in value.chars().map(Some).chain([None]) {
            if let Some(d) = c.filter(char::is_ascii_digit) {
                digits.push(d);
                continue;
            }
            match ports.iter().position(|p| *p == digits) {
                Some(k) => out.push_str(&format!("PORT{k}")),
                None => out.push_str(&digits),
            }
            digits.clear();
            out.extend(c);
        }
        out
    }

    /// The address TensorFlow's task uses: the k-th reserved port.
    fn address(&self) -> String {
        let list = self
            .resv_ports
            .as_deref()
            .expect("MpiParams reserves ports");
        format!(
            "{}:{}",
            self.host,
            reserved_ports(list)[self.local as usize]
        )
    }
}

struct Step {
    code: Option<i32>,
    stderr: String,
    /// By rank.
    tasks: BTreeMap<u32, Seen>,
}

impl Step {
    fn assert_ran(&self, n: u32, place: &str) -> &Self {
        assert_eq!(self.code, Some(0), "step failed:\n{}", self.stderr);
        assert_eq!(
            self.tasks.keys().copied().collect::<Vec<_>>(),
            (0..n).collect::<Vec<_>>(),
            "{}",
            self.stderr
        );
        for (rank, t) in &self.tasks {
            assert_eq!(t.place, place, "rank {rank} ran on the wrong root");
        }
        self
    }
}

/// `env VARS srun ARGS sh -c PROBE` as alice, each task's lines from its own file.
fn srun_env(vars: &[&str], args: &[&str]) -> Step {
    let mut cmd = args.to_vec();
    cmd.extend_from_slice(&["sh", "-c", PROBE]);
    let out = common::srun_tasks_for(300, vars, &cmd);
    let mut tasks: BTreeMap<u32, Seen> = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let f: Vec<&str> = line.splitn(3, ' ').collect();
        let Some(rank) = f.get(1).and_then(|r| r.parse::<u32>().ok()) else {
            continue;
        };
        let task = tasks.entry(rank).or_default();
        match (f[0], f.get(2)) {
            ("W", Some(rest)) => {
                let w: Vec<&str> = rest.split(' ').collect();
                assert_eq!(w.len(), 4, "bad probe line {line:?}");
                task.host = w[0].to_string();
                task.local = w[1].parse().unwrap();
                task.resv_ports = (w[2] != "none").then(|| w[2].to_string());
                task.place = w[3].to_string();
            }
            ("G", Some(rest)) => {
                let n: Vec<u32> = rest
                    .split_whitespace()
                    .map(|n| n.parse().unwrap())
                    .collect();
                assert_eq!(n.len(), 2, "bad probe line {line:?}");
                task.drivers = (n[0], n[1]);
            }
            ("V", Some(var)) => {
                if let Some((name, value)) = var.split_once('=') {
                    task.vars.insert(name.to_string(), value.to_string());
                }
            }
            _ => {}
        }
    }
    Step {
        code: out.status.code(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        tasks,
    }
}

fn srun(args: &[&str]) -> Step {
    srun_env(&[], args)
}

/// `args` in the image, behind the container stand-in.
fn in_image(args: &[&str]) -> Vec<String> {
    let mut all = vec![IMAGE.to_string()];
    all.extend(args.iter().map(|a| a.to_string()));
    all
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// The order Slurm loads them: the include glob is sorted, so the stand-in
/// comes before the package's snippet on every host, and a step in the
/// image that does not ask for the plugin sees the image's environment,
/// its root, and a /tmp that is not the host's.
#[test]
fn the_standin_runs_before_the_plugin_and_the_image_is_entered() {
    let _s = standin();
    for host in HOSTS {
        let out = on(host, &["sh", "-c", "ls /etc/slurm/plugstack.conf.d/*.conf"]);
        let files = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            files.split_whitespace().collect::<Vec<_>>(),
            [STANDIN_CONF, "/etc/slurm/plugstack.conf.d/tf-cluster.conf"],
            "{host}"
        );
    }
    let marker = on("node1", &["sh", "-c", "echo host >/tmp/tfc-host-tmp"]);
    assert!(marker.status.success());
    let step = srun(&strs(&in_image(&["-N1", "-n1", "-w", "node1"])));
    step.assert_ran(1, "busybox");
    let t = &step.tasks[&0];
    assert_eq!(t.var("MASTER_ADDR"), Some(IMAGE_MASTER_ADDR));
    assert_eq!(t.var("CUDA_VISIBLE_DEVICES"), Some(IMAGE_GPUS));
    assert_eq!(t.var("NCCL_SOCKET_IFNAME"), Some("image0"));
    assert_eq!(t.var("SLURM_PROCID"), Some("77"), "the image's own");
    assert!(
        !step.stderr.contains("tf-cluster: replaced"),
        "no framework asked, nothing replaced:\n{}",
        step.stderr
    );
    let tmp = exec_for(
        120,
        &[
            "srun",
            "-N1",
            "-n1",
            "-w",
            "node1",
            IMAGE,
            "sh",
            "-c",
            "ls /tmp; cat /etc/tfc-image",
        ],
    );
    let text = String::from_utf8_lossy(&tmp.stdout);
    assert_eq!(
        text.trim(),
        "busybox",
        "/tmp is the container's own: {text}"
    );
}

/// The image's environment (docker/node/images/environment, as make.sh
/// copies it into the image): every name the plugin sets, each with a value
/// that must lose, and Slurm's own task variables.
fn image_env() -> BTreeMap<String, String> {
    let path = common::repo().join("docker/node/images/environment");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

/// The run's id (docs/frameworks.md): `JOB.STEP`, PET_RDZV_ID's value too.
const RUN_ID: &str = "TF_CLUSTER_RUN_ID";

/// The device variables Slurm's gres/gpu may set (gres.conf's flags); the
/// plugin sets each one Slurm set, to the task's share.
const DEVICE_VARS: [&str; 4] = [
    "CUDA_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "ZE_AFFINITY_MASK",
    "GPU_DEVICE_ORDINAL",
];

/// What each framework sets besides the GPU lists in these steps
/// (docs/frameworks.md): TensorFlow's cluster, PyTorch's torchrun contract
/// with the static rendezvous' arguments of one launcher per task (no
/// PET_NPROC_PER_NODE with two tasks on a node), JAX's coordinator and
/// devices; the run's id with any of them.
const TF_VARS: [&str; 2] = ["TF_CONFIG", RUN_ID];
const TORCH_VARS: [&str; 16] = [
    "MASTER_ADDR",
    "MASTER_PORT",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "PET_NNODES",
    "PET_NODE_RANK",
    "PET_MASTER_ADDR",
    "PET_MASTER_PORT",
    "PET_RDZV_ENDPOINT",
    "PET_RDZV_ID",
    "PET_RDZV_BACKEND",
    RUN_ID,
];
/// `--torch-cluster=elastic` with one launcher per node and GPUs: c10d's
/// rendezvous arguments instead of the static one's, and PET_NPROC_PER_NODE.
const TORCH_ELASTIC_VARS: [&str; 18] = [
    "MASTER_ADDR",
    "MASTER_PORT",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "PET_NNODES",
    "PET_RDZV_ENDPOINT",
    "PET_RDZV_ID",
    "PET_RDZV_BACKEND",
    "PET_RDZV_CONF",
    "PET_LOCAL_ADDR",
    "PET_MAX_RESTARTS",
    "TORCH_DISABLE_SHARE_RDZV_TCP_STORE",
    "PET_NPROC_PER_NODE",
    RUN_ID,
];
const JAX_VARS: [&str; 3] = ["JAX_COORDINATOR_ADDRESS", "JAX_LOCAL_DEVICE_IDS", RUN_ID];
/// With `--tf-network`: PyTorch's three interface variables.
const TORCH_NET_VARS: [&str; 3] = [
    "NCCL_SOCKET_IFNAME",
    "GLOO_SOCKET_IFNAME",
    "TP_SOCKET_IFNAME",
];

/// The device variables Slurm itself sets in every task of a step of
/// `args`: the same step on the host with `--tf-off`, so the plugin sets
/// nothing.
fn slurms_device_vars(args: &[&str]) -> Vec<&'static str> {
    let mut off = args.to_vec();
    off.push("--tf-off");
    let step = srun(&off);
    assert_eq!(step.code, Some(0), "{}", step.stderr);
    DEVICE_VARS
        .into_iter()
        .filter(|n| step.tasks.values().all(|t| t.var(n).is_some()))
        .collect()
}

/// Every name of the image but Slurm's own, in every task: a name the plugin
/// sets for the step (`set`) has in the image the value the same step got
/// on the host (run id and ports aside: each step has its own), and the
/// host's task has it; any other name is unset on the host and keeps the
/// image's value in the image. So `set` is all the plugin set, and each of
/// them won over the image's.
fn assert_every_name_as_on_the_host(host: &Step, image: &Step, set: &[&str]) {
    let env = image_env();
    for name in set {
        assert!(env.contains_key(*name), "the image does not set {name}");
    }
    assert_eq!(
        host.tasks.keys().collect::<Vec<_>>(),
        image.tasks.keys().collect::<Vec<_>>()
    );
    for (name, own) in env.iter().filter(|(n, _)| !n.starts_with("SLURM")) {
        for (rank, h) in &host.tasks {
            let t = &image.tasks[rank];
            let ctx = format!("rank {rank}: {name}\n{}", image.stderr);
            if set.contains(&name.as_str()) {
                let want = h.var(name).map(|v| h.normalized(v));
                assert!(want.is_some(), "not set on the host: {ctx}");
                let got = t.var(name).map(|v| t.normalized(v));
                assert_eq!(got, want, "in the image (left), on the host (right): {ctx}");
            } else {
                assert_eq!(h.var(name), None, "set on the host: {ctx}");
                assert_eq!(t.var(name), Some(own.as_str()), "the image's own: {ctx}");
            }
        }
    }
}

/// The plugin's notice (src/spank/stepd/apply.rs, `say_replaced`): one line from
/// each task in the image, `tf-cluster: replaced NAMES set before this
/// plugin ran …`, naming exactly the image's names it set for the step
/// (each with a value that must lose); none on the host.
fn assert_replaced_notice(host: &Step, image: &Step, set: &[&str]) {
    const NOTICE: &str = "tf-cluster: replaced ";
    assert!(!host.stderr.contains(NOTICE), "{}", host.stderr);
    let env = image_env();
    let want: BTreeSet<&str> = set
        .iter()
        .copied()
        .filter(|n| env.contains_key(*n))
        .collect();
    let lines: Vec<BTreeSet<&str>> = image
        .stderr
        .lines()
        .filter_map(|l| l.split_once(NOTICE))
        .map(|(_, rest)| {
            let (names, _) = rest
                .split_once(" set before this plugin ran")
                .unwrap_or_else(|| panic!("notice {rest:?}"));
            names.split(' ').collect()
        })
        .collect();
    assert_eq!(
        lines.len(),
        image.tasks.len(),
        "one notice per task:\n{}",
        image.stderr
    );
    for names in &lines {
        assert_eq!(names, &want, "{}", image.stderr);
    }
}

/// The same step on the host and in the image: the tasks in the image got
/// the very values the host's tasks got, for the GPU lists Slurm set and the
/// frameworks' `names`, and each task said which of the image's it
/// replaced.
fn same_as_on_the_host(args: &[&str], names: &[&str]) -> (Step, Step) {
    let mut set: Vec<&str> = slurms_device_vars(args);
    for name in names {
        if !set.contains(name) {
            set.push(name);
        }
    }
    let host = srun(args);
    host.assert_ran(4, "host");
    let image = srun(&strs(&in_image(args)));
    image.assert_ran(4, "busybox");
    assert_every_name_as_on_the_host(&host, &image, &set);
    assert_replaced_notice(&host, &image, &set);
    (host, image)
}

const TWO_BY_TWO: [&str; 4] = ["-N2", "--ntasks-per-node=2", "-w", "node[1-2]"];

/// Each device variable Slurm set has the value `want` in every task.
fn assert_gpus(t: &Seen, slurms: &[&str], want: &str) {
    assert!(slurms.contains(&"CUDA_VISIBLE_DEVICES"), "{slurms:?}");
    for name in slurms {
        assert_eq!(t.var(name), Some(want), "{name}");
    }
}

/// `--tf-cluster` with four GPUs per node in a container: TF_CONFIG from
/// Slurm's placement and each local task's half of Slurm's GPUs (0,1 and
/// 2,3) in every device variable Slurm set, not the image's TF_CONFIG and
/// CUDA_VISIBLE_DEVICES=7.
#[test]
fn tensorflow_in_a_container_gets_the_hosts_values() {
    let _s = standin();
    let mut args = TWO_BY_TWO.to_vec();
    args.extend(["--gres=gpu:4", "--tf-cluster"]);
    let (_, image) = same_as_on_the_host(&args, &TF_VARS);
    let slurms = slurms_device_vars(&args);
    let workers: Vec<String> = image.tasks.values().map(Seen::address).collect();
    for (&rank, t) in &image.tasks {
        let want = serde_json::json!({"cluster": {"worker": workers}, "task": {"type": "worker", "index": rank}});
        let got: Value = serde_json::from_str(t.var("TF_CONFIG").unwrap()).unwrap();
        assert_eq!(got, want, "rank {rank}");
        assert_gpus(t, &slurms, ["0,1", "2,3"][t.local as usize]);
        assert_eq!(t.var(RUN_ID), Some(t.run_id().as_str()));
    }
}

/// `--torch-cluster --tf-network=eth1` (an interface every node has): MASTER_ADDR
/// is rank 0's host, RANK and LOCAL_RANK Slurm's, GROUP_RANK the node's
/// place in the order of first ranks, torchrun's static arguments one
/// launcher per task, the interface variables, and each task sees the
/// node's four GPUs as Slurm gave them; not the image's MASTER_ADDR,
/// RANK=77, NCCL_SOCKET_IFNAME=image0 and CUDA_VISIBLE_DEVICES=7.
#[test]
fn pytorch_in_a_container_gets_the_hosts_values() {
    let _s = standin();
    let mut args = TWO_BY_TWO.to_vec();
    args.extend(["--gres=gpu:4", "--torch-cluster", "--tf-network=eth1"]);
    let names: Vec<&str> = TORCH_VARS.iter().chain(&TORCH_NET_VARS).copied().collect();
    let (_, image) = same_as_on_the_host(&args, &names);
    let slurms = slurms_device_vars(&args);
    let master = image.tasks[&0].host.clone();
    for (&rank, t) in &image.tasks {
        let port = t.var("MASTER_PORT").unwrap();
        let reserved = reserved_ports(t.resv_ports.as_deref().unwrap());
        assert!(
            reserved.contains(&port.parse().unwrap()),
            "rank {rank}: {port}"
        );
        let group = if t.host == master { "0" } else { "1" };
        let run_id = t.run_id();
        for (name, want) in [
            ("MASTER_ADDR", master.as_str()),
            ("RANK", &rank.to_string()),
            ("WORLD_SIZE", "4"),
            ("LOCAL_RANK", &t.local.to_string()),
            ("LOCAL_WORLD_SIZE", "2"),
            ("GROUP_RANK", group),
            ("GROUP_WORLD_SIZE", "2"),
            ("PET_NNODES", "4"),
            ("PET_NODE_RANK", &rank.to_string()),
            ("PET_MASTER_ADDR", &master),
            ("PET_MASTER_PORT", port),
            ("PET_RDZV_ENDPOINT", &format!("{master}:{port}")),
            ("PET_RDZV_ID", &run_id),
            ("PET_RDZV_BACKEND", "static"),
            ("NCCL_SOCKET_IFNAME", "=eth1"),
            ("GLOO_SOCKET_IFNAME", "eth1"),
            ("TP_SOCKET_IFNAME", "eth1"),
            (RUN_ID, &run_id),
        ] {
            assert_eq!(t.var(name), Some(want), "rank {rank}: {name}");
        }
        assert_gpus(t, &slurms, "0,1,2,3");
    }
}

/// `--torch-cluster=elastic`, one torchrun per node: c10d's rendezvous on
/// rank 0's node (is_host=1 there alone), each launcher its own address, 3
/// restarts, a worker per GPU Slurm gave the node; not the image's.
#[test]
fn pytorch_elastic_in_a_container_gets_the_hosts_values() {
    let _s = standin();
    let args = [
        "-N2",
        "--ntasks-per-node=1",
        "-w",
        "node[1-2]",
        "--gres=gpu:4",
        "--torch-cluster=elastic",
    ];
    let mut set = slurms_device_vars(&args);
    set.extend(TORCH_ELASTIC_VARS);
    let host = srun(&args);
    host.assert_ran(2, "host");
    let image = srun(&strs(&in_image(&args)));
    image.assert_ran(2, "busybox");
    assert_every_name_as_on_the_host(&host, &image, &set);
    assert_replaced_notice(&host, &image, &set);
    let master = image.tasks[&0].host.clone();
    for (&rank, t) in &image.tasks {
        let port = t.var("MASTER_PORT").unwrap();
        let is_host = if rank == 0 { "is_host=1" } else { "is_host=0" };
        for (name, want) in [
            ("MASTER_ADDR", master.as_str()),
            ("PET_NNODES", "2:2"),
            ("PET_RDZV_ENDPOINT", &format!("{master}:{port}")),
            ("PET_RDZV_ID", &t.run_id()),
            ("PET_RDZV_BACKEND", "c10d"),
            ("PET_RDZV_CONF", is_host),
            ("PET_LOCAL_ADDR", &t.host),
            ("PET_MAX_RESTARTS", "3"),
            ("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1"),
            ("PET_NPROC_PER_NODE", "4"),
            ("GROUP_RANK", &rank.to_string()),
        ] {
            assert_eq!(t.var(name), Some(want), "rank {rank}: {name}");
        }
    }
}

/// `--jax-cluster`: the coordinator is on rank 0's host, each local task
/// gets its half of Slurm's GPUs, numbered 0,1 as JAX sees them
/// (docs/layouts-and-gpus.md), not the image's CUDA_VISIBLE_DEVICES=7.
#[test]
fn jax_in_a_container_gets_the_hosts_values() {
    let _s = standin();
    let mut args = TWO_BY_TWO.to_vec();
    args.extend(["--gres=gpu:4", "--jax-cluster"]);
    let (_, image) = same_as_on_the_host(&args, &JAX_VARS);
    let slurms = slurms_device_vars(&args);
    let master = format!("{}:", image.tasks[&0].host);
    for (&rank, t) in &image.tasks {
        let coordinator = t.var("JAX_COORDINATOR_ADDRESS").unwrap_or_default();
        assert!(
            coordinator.starts_with(&master),
            "rank {rank}: {coordinator}"
        );
        assert_gpus(t, &slurms, ["0,1", "2,3"][t.local as usize]);
        assert_eq!(t.var("JAX_LOCAL_DEVICE_IDS"), Some("0,1"), "rank {rank}");
        assert_eq!(t.var(RUN_ID), Some(t.run_id().as_str()));
    }
}

/// The plugin's refusal of a task Slurm binds to GPUs of its own behind a
/// container plugin (core::gpus::plan::bound_behind_container).
const BOUND_IN_CONTAINER: &str = "Slurm's GPU binding (--gpus-per-task=1) sets each task's GPU list only in the task, and a container plugin listed earlier (pyxis) entered its namespaces first, so the list may be the image's: use --gpus-per-node=N (or --gres=gpu:N) without --gpu-bind, or --tf-auto-set-gpu=false";

/// `env VARS srun -l ARGS sh -c 'echo ran'` as alice: the step failed, no
/// task ran, and every `tf-cluster:` line is `want`. Returns its stderr
/// and its whole output (for assertion messages).
fn assert_refused(vars: &[&str], args: &[&str], want: &str) -> (String, String) {
    let mut cmd = vec!["env"];
    cmd.extend(vars);
    cmd.extend(["srun", "-l"]);
    cmd.extend(args);
    cmd.extend(["sh", "-c", "echo ran"]);
    let out = exec_for(300, &cmd);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let ctx = format!("{vars:?} {args:?}:\n{stdout}{stderr}");
    assert_ne!(out.status.code(), Some(0), "{ctx}");
    assert!(!stdout.contains("ran"), "a task ran: {ctx}");
    let mut msgs = common::messages(&stderr);
    assert!(!msgs.is_empty(), "no message: {ctx}");
    msgs.dedup();
    assert_eq!(msgs, [want], "{ctx}");
    (stderr, ctx)
}

/// The next step in the image runs on `node`: a `--tf-cluster` task.
fn assert_next_step_runs(node: &str) {
    srun(&strs(&in_image(&[
        "-N1",
        "-n1",
        "-w",
        node,
        "--tf-cluster",
    ])))
    .assert_ran(1, "busybox");
}

/// A binding of GPUs to each task in a container: Slurm writes each task's
/// list only in the task, just before the SPANK `task_init` hooks, and
/// the container plugin's `task_init` (before the plugin's) has by then entered the
/// container and imported the image's `CUDA_VISIBLE_DEVICES=7`. So a step
/// the plugin sets GPUs for is refused in every task, on both nodes, with
/// one line; no task runs, no node drains, the next step in the image runs.
/// With `--tf-auto-set-gpu=false` the plugin reads no GPU list and the step
/// runs, showing what the tasks would have read. The same requests without
/// the container run with Slurm's own per-task lists:
/// tests/testbed/gpus.rs (`gpus_per_task_forms`, every binding form).
#[test]
fn a_per_task_gpu_binding_in_a_container_is_refused() {
    let _s = standin();
    let bound = [
        "-N2",
        "--ntasks-per-node=2",
        "-w",
        "node[1-2]",
        "--gpus-per-task=1",
    ];
    for fw in [&["--tf-cluster=worker:4"][..], &["--jax-cluster"]] {
        let mut args = vec![IMAGE];
        args.extend(bound);
        args.extend(fw);
        let (stderr, ctx) = assert_refused(&[], &args, BOUND_IN_CONTAINER);
        // Each node's tasks decide alike: the line came from both nodes'
        // tasks (`-l`: ranks 0-1 on node1, 2-3 on node2), or from one node's
        // and the other's were ended by the kill that node's slurmstepd
        // sent from the host 1 s after (a node still starting the container
        // then, under load, is killed before its tasks decide: seen on
        // 26.05, a container plugin's child killed).
        let ranks: std::collections::BTreeSet<u32> = stderr
            .lines()
            .filter(|l| l.contains(BOUND_IN_CONTAINER))
            .filter_map(|l| l.split_once(':')?.0.trim().parse().ok())
            .collect();
        let both = ranks.iter().any(|&r| r < 2) && ranks.iter().any(|&r| r >= 2);
        assert!(
            both || (!ranks.is_empty() && stderr.contains("CANCELLED")),
            "refused on one node only ({ranks:?}) and the step was not killed: {ctx}"
        );
        common::assert_no_node_drained();
        assert_next_step_runs("node2");
    }
    let mut off = bound.to_vec();
    off.extend(["--tf-cluster=worker:4", "--tf-auto-set-gpu=false"]);
    let step = srun(&strs(&in_image(&off)));
    step.assert_ran(4, "busybox");
    for (rank, t) in &step.tasks {
        eprintln!(
            "--tf-auto-set-gpu=false in a container, rank {rank}: CUDA_VISIBLE_DEVICES={:?}",
            t.var("CUDA_VISIBLE_DEVICES")
        );
        assert!(t.var("TF_CONFIG").is_some_and(|c| c.contains("worker")));
    }
    common::assert_no_node_drained();
}

/// What the split step runs: 20 s of waiting, then `finished`, in one
/// process (busybox's shell waiting in its `read` builtin on a FIFO nobody
/// writes; proctrack/linuxproc was seen to kill a shell's child but pass over
/// the shell, which then ran on). `tfc-payload` names it for pgrep.
const PAYLOAD_20S: &str = ": tfc-payload; f=/dev/shm/tfc-payload.$$; mkfifo $f && exec 3<>$f; rm -f $f; read -t 20 x <&3; echo finished";

/// One decision per step in a container (docs/reliability.md): `-N2 -n3
/// --gpus-per-task=1` puts two tasks on node1, each bound to its GPU by
/// Slurm and refused in the container, and one on node2, which Slurm 22.05 does
/// not bind (it would take the node's plan and run its program to the end);
/// 24.11 and 26.05 bind it too, and it is refused alike. The refusing tasks
/// are inside the container, where munged's socket is not: slurmstepd ends
/// the step from the host. Wanted: srun fails within a few seconds, no
/// `finished`, no task left on any node, exactly one tf-cluster line per
/// refusing task (node1's two at least) and no `authentication error` line,
/// no step left, no node drained, the next step runs.
#[test]
fn a_split_refusal_in_a_container_ends_the_step_on_every_node() {
    let _s = standin();
    let script = format!(
        "t0=$(date +%s%N); srun -l {IMAGE} -N2 -n3 -w 'node[1-2]' --gpus-per-task=1 --tf-cluster sh -c '{PAYLOAD_20S}'; rc=$?; t1=$(date +%s%N); echo \"TFC_END rc=$rc ms=$(( (t1 - t0) / 1000000 ))\""
    );
    let out = exec_for(120, &["bash", "-c", &script]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let end = text
        .lines()
        .find_map(|l| l.strip_prefix("TFC_END "))
        .unwrap_or_else(|| panic!("no end line:\n{text}"));
    let field = |name: &str| -> i64 {
        end.split_whitespace()
            .find_map(|f| f.strip_prefix(name))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} in {end:?}"))
    };
    let (rc, ms) = (field("rc="), field("ms="));
    eprintln!(
        "TIMING split refusal in a container: {:.1} s, exit {rc}, suite {}",
        ms as f64 / 1000.0,
        std::env::var("TFC_SUITE").unwrap_or_default()
    );
    let mut left = Vec::new();
    for node in ["node1", "node2"] {
        let out = on(node, &["pgrep", "-a", "-u", "alice", "-f", "tfc-payload"]);
        left.extend(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(|l| format!("{node}: {l}")),
        );
    }
    let steps = exec_for(60, &["squeue", "-h", "-s", "-o", "%i %j"]);
    let steps: Vec<String> = String::from_utf8_lossy(&steps.stdout)
        .lines()
        .filter(|l| !l.contains(".extern") && !l.contains(".interactive") && !l.contains(".batch"))
        .map(str::to_string)
        .collect();
    common::assert_no_node_drained();
    let ctx = format!("exit {rc} after {ms} ms:\n{text}");
    assert!(left.is_empty(), "tasks still running: {left:?}\n{ctx}");
    assert!(steps.is_empty(), "steps left behind: {steps:?}\n{ctx}");
    assert!(
        !text.lines().any(|l| l.ends_with(": finished")),
        "a task ran its program to the end\n{ctx}"
    );
    assert_ne!(rc, 0, "srun should fail\n{ctx}");
    assert!(
        !text.to_lowercase().contains("authentication error"),
        "the kill was tried from inside the container\n{ctx}"
    );
    // One line per refusing task: ranks 0 and 1 (node1) refuse, rank 2
    // (node2) too where Slurm binds it; a task that ran (22.05's rank 2)
    // may only have said which of the image's variables it replaced.
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("tf-cluster: "))
        .collect();
    let mut per_rank = BTreeMap::<u32, u32>::new();
    let mut replaced = BTreeMap::<u32, u32>::new();
    for line in &lines {
        let rank = line
            .split_once(':')
            .and_then(|(r, _)| r.trim().parse().ok())
            .unwrap_or_else(|| panic!("no rank in {line:?}\n{ctx}"));
        if line.contains("tf-cluster: replaced ") {
            *replaced.entry(rank).or_default() += 1;
            continue;
        }
        assert!(line.contains(BOUND_IN_CONTAINER), "{line:?}\n{ctx}");
        *per_rank.entry(rank).or_default() += 1;
    }
    assert!(
        per_rank.values().all(|&n| n == 1)
            && per_rank.contains_key(&0)
            && per_rank.contains_key(&1),
        "want one line from each refusing task, ranks 0 and 1 at least: {per_rank:?}\n{ctx}"
    );
    // A refusing task sets nothing, so it replaced nothing; a task that ran
    // says so once.
    assert!(
        replaced
            .iter()
            .all(|(r, &n)| n == 1 && !per_rank.contains_key(r)),
        "notices {replaced:?}, refusals {per_rank:?}\n{ctx}"
    );
    assert!(ms < 10_000, "the step took {ms} ms to end\n{ctx}");
    for node in ["node1", "node2"] {
        assert_next_step_runs(node);
    }
}

/// `--tf-apptainer-env=true`: each of the plugin's variables once more as
/// APPTAINERENV_<NAME> and SINGULARITYENV_<NAME>, on the host and behind
/// the container stand-in; without it none. `--tf-auto-set-gpu=false`: the plugin leaves
/// CUDA_VISIBLE_DEVICES alone, so it has no mirror (the GPU variables'
/// mirror: the core's tests; the GPUs in a container: the tests above).
#[test]
fn apptainer_mirror_reaches_the_tasks() {
    let _s = standin();
    let mut args = TWO_BY_TWO.to_vec();
    args.extend(["--tf-cluster", "--torch-cluster", "--tf-auto-set-gpu=false"]);
    let plain = srun(&args);
    plain.assert_ran(4, "host");
    assert!(
        plain.tasks.values().all(|t| t
            .vars
            .keys()
            .all(|n| !n.starts_with("APPTAINERENV_") && !n.starts_with("SINGULARITYENV_"))),
        "mirrored without being asked"
    );
    args.push("--tf-apptainer-env=true");
    for (step, place) in [
        (srun(&args), "host"),
        (srun(&strs(&in_image(&args))), "busybox"),
    ] {
        step.assert_ran(4, place);
        let master = step.tasks[&0].host.clone();
        for (&rank, t) in &step.tasks {
            for prefix in ["APPTAINERENV_", "SINGULARITYENV_"] {
                for name in ["TF_CONFIG", "MASTER_ADDR", "RANK"] {
                    let mirror = format!("{prefix}{name}");
                    assert_eq!(t.var(&mirror), t.var(name), "{place} rank {rank}: {mirror}");
                }
                assert_eq!(
                    t.var(&format!("{prefix}MASTER_ADDR")),
                    Some(master.as_str())
                );
                assert_eq!(
                    t.var(&format!("{prefix}RANK")),
                    Some(rank.to_string().as_str())
                );
            }
            // Only names the plugin set are mirrored, not the image's own.
            for name in ["CUDA_VISIBLE_DEVICES", "NCCL_SOCKET_IFNAME"] {
                assert_eq!(t.var(&format!("APPTAINERENV_{name}")), None, "{place}");
            }
        }
    }
}

/// Host facts are the host's: without srun's map (withheld by a fault of
/// the test build) the tasks read the user's SLURM_HOSTFILE, which the
/// container covers with another file; and a container that shows a GPU
/// driver the node lacks must not make the plugin hand out GPUs: eight
/// NVIDIA GPUs in a /proc/driver of its own, or eight AMD GPUs in a
/// /sys/class of its own (the probes the plugin falls back on without
/// Slurm's GPU variables, in an image that sets none either). The node has
/// no /proc/driver/nvidia to cover (no driver), so the decoy covers its
/// parent, which procfs always has; the tasks see each decoy in place.
#[test]
fn host_files_are_read_on_the_host() {
    let bed = exclusive();
    bed.plugstack(&format!(
        "required {STANDIN_SO}\nrequired /opt/tf-cluster/libtf_cluster_fault.so\n"
    ));
    let mut script = String::from(
        "set -e; cd /home/alice; printf 'node2\\nnode1\\nnode2\\nnode1\\n' >hosts; \
         printf 'node1\\nnode1\\nnode2\\nnode2\\n' >decoy-hosts; rm -rf fake-sys-class fake-proc-driver; ",
    );
    for n in 1..=8 {
        script.push_str(&format!(
            "mkdir -p fake-sys-class/kfd/kfd/topology/nodes/{n}; echo 'simd_count 104' >fake-sys-class/kfd/kfd/topology/nodes/{n}/properties; \
             mkdir -p fake-proc-driver/nvidia/gpus/0000:0{n}:00.0; "
        ));
    }
    let out = exec_for(60, &["sh", "-c", &script]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // -m arbitrary: ranks 0..3 on node2, node1, node2, node1.
    let arbitrary = [
        "-n4",
        "-m",
        "arbitrary",
        "--tf-cluster",
        "--container-mounts=/home/alice/decoy-hosts:/home/alice/hosts",
    ];
    let no_map = [
        "TF_CLUSTER_FAULT=layout_rpc",
        "SLURM_HOSTFILE=/home/alice/hosts",
    ];
    let step = srun_env(&no_map, &strs(&in_image(&arbitrary)));
    step.assert_ran(4, "busybox");
    let hosts: Vec<&str> = step.tasks.values().map(|t| t.host.as_str()).collect();
    assert_eq!(
        hosts,
        ["node2", "node1", "node2", "node1"],
        "Slurm's placement"
    );
    let workers: Vec<String> = step.tasks.values().map(Seen::address).collect();
    for (&rank, t) in &step.tasks {
        let want = serde_json::json!({"cluster": {"worker": workers}, "task": {"type": "worker", "index": rank}});
        let got: Option<Value> = t.var("TF_CONFIG").map(|j| serde_json::from_str(j).unwrap());
        assert_eq!(got, Some(want), "rank {rank}\n{}", step.stderr);
    }

    // No --gres: no GPU variable from Slurm, and the node has no driver.
    let args = ["-N1", "-n2", "-w", "node3", "--tf-cluster"];
    let host = srun(&args);
    host.assert_ran(2, "host");
    for (rank, t) in &host.tasks {
        assert_eq!(t.drivers, (0, 0), "rank {rank}: the node has a GPU driver");
        assert!(
            DEVICE_VARS.iter().all(|n| t.var(n).is_none()),
            "rank {rank}: the node has no GPUs"
        );
    }
    for (decoy, seen) in [
        ("/home/alice/fake-proc-driver:/proc/driver", (8, 0)),
        ("/home/alice/fake-sys-class:/sys/class", (0, 8)),
    ] {
        // The image without a GPU list of its own, so that the plugin
        // would fall back on the probe.
        let mounts = format!("--container-mounts={decoy}");
        let mut no_gpus = vec!["--container-image=/opt/tfc-images/busybox-no-gpus", &mounts];
        no_gpus.extend(args);
        let image = srun(&no_gpus);
        image.assert_ran(2, "busybox");
        for (rank, t) in &image.tasks {
            assert_eq!(
                t.drivers, seen,
                "{decoy}: rank {rank}: the decoy is not in place"
            );
            for name in DEVICE_VARS {
                assert_eq!(t.var(name), None, "{decoy}: rank {rank}: {name}");
            }
        }
    }
}

/// The testbed's run dir, as docker/testbed.sh names it: its etc/ is every
/// container's /etc/slurm.
fn run_dir() -> std::path::PathBuf {
    if let Some(dir) = std::env::var_os("TFC_RUN_DIR") {
        return dir.into();
    }
    match std::env::var("TFC_PREFIX").as_deref() {
        Ok("tfc") | Err(_) => common::repo().join("docker/run"),
        Ok(prefix) => common::repo().join(format!("docker/run-{prefix}")),
    }
}

/// oci.conf for Debian's runc, rootless (slurmstepd runs the runtime as the
/// job's user; the unprivileged nodes cannot mount for root), in place while
/// the guard lives.
struct OciConf(std::path::PathBuf);

impl OciConf {
    fn install() -> OciConf {
        let path = run_dir().join("etc/oci.conf");
        let runc = "runc --rootless=true --root=/tmp/runc-%u";
        let text = format!(
            "RunTimeQuery=\"{runc} state %n.%u.%j.%s.%t\"\n\
             RunTimeKill=\"{runc} kill -a %n.%u.%j.%s.%t\"\n\
             RunTimeDelete=\"{runc} delete --force %n.%u.%j.%s.%t\"\n\
             RunTimeRun=\"{runc} run %n.%u.%j.%s.%t -b %b\"\n"
        );
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        OciConf(path)
    }
}

impl Drop for OciConf {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// An OCI bundle of the busybox image on the shared /home: `runc spec
/// --rootless`, with the host's /proc bound (the nodes' /proc cannot be
/// mounted afresh in a user namespace), the node's host name (no UTS
/// namespace), and an environment of its own that sets RANK and
/// MASTER_ADDR. The mount points Slurm adds (its spool at /var/run/slurm) made in the rootfs
/// beforehand: every task of a step runs its own runc on this one rootfs, and two of them
/// creating a missing mount point at once fail ("mkdirat …/rootfs/var: file exists").
const BUNDLE: &str = "/home/alice/oci-bundle";
const MAKE_BUNDLE: &str = r#"set -e; rm -rf /home/alice/oci-bundle; mkdir -p /home/alice/oci-bundle; cd /home/alice/oci-bundle
unsquashfs -q -d rootfs /opt/tfc-images/busybox.sqsh >/dev/null; runc spec --rootless
mkdir -p rootfs/var/run/slurm rootfs/proc rootfs/sys rootfs/dev
python3 - <<'PY'
import json
c = json.load(open("config.json"))
c["process"]["terminal"] = False
c["process"]["env"] = ["PATH=/bin", "RANK=bundle", "MASTER_ADDR=bundle-master"]
c.pop("hostname", None)
for m in c["mounts"]:
    if m["destination"] == "/proc":
        m.update(type="bind", source="/proc", options=["rbind", "nosuid", "noexec", "nodev"])
c["mounts"] = [m for m in c["mounts"] if m["destination"] != "/dev/mqueue"]
c["linux"]["namespaces"] = [n for n in c["linux"]["namespaces"] if n["type"] not in ("pid", "uts")]
json.dump(c, open("config.json", "w"), indent=1)
PY"#;

/// Slurm's major and minor version, from srun.
fn slurm_version() -> (u32, u32) {
    let out = common::exec(&["srun", "--version"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let v = text.split_whitespace().last().expect("srun --version");
    let mut parts = v.split('.').map(|p| p.parse::<u32>().unwrap());
    (parts.next().unwrap(), parts.next().unwrap())
}

/// Slurm's own `srun --container=BUNDLE` with runc (Debian's, rootless):
/// 22.05 writes the bundle's config.json once per step before the tasks, so
/// none of the plugin's variables (nor SLURM_PROCID) reach the container
/// and one task per node is the most; from 23.02 on each task's final
/// environment, the plugin's variables included, replaces config.json's
/// names (docs/containers.md).
#[test]
fn slurm_oci_container_with_runc() {
    let _bed = exclusive();
    let _oci = OciConf::install();
    let made = exec_for(120, &["sh", "-c", MAKE_BUNDLE]);
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let container = format!("--container={BUNDLE}");
    if slurm_version() < (23, 2) {
        let out = exec_for(
            120,
            &[
                "srun",
                "-N1",
                "-n1",
                "-w",
                "node1",
                &container,
                "--torch-cluster",
                "sh",
                "-c",
                "echo PLACE=$(cat /etc/tfc-image); env",
            ],
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines.contains(&"PLACE=busybox"), "{text}\n{stderr}");
        // Slurm 22.05 drops the task's environment: the bundle's values stay.
        assert!(lines.contains(&"RANK=bundle"), "{text}");
        assert!(lines.contains(&"MASTER_ADDR=bundle-master"), "{text}");
        assert!(
            !lines.iter().any(|l| l.starts_with("SLURM_PROCID=")),
            "{text}"
        );
        let two = exec_for(
            120,
            &[
                "srun",
                "-N1",
                "-n2",
                "-w",
                "node1",
                &container,
                "--torch-cluster",
                "true",
            ],
        );
        assert_ne!(
            two.status.code(),
            Some(0),
            "two tasks on a node ran on 22.05"
        );
        common::assert_no_node_drained();
        return;
    }
    let mut args = TWO_BY_TWO.to_vec();
    args.extend([container.as_str(), "--torch-cluster"]);
    let step = srun(&args);
    step.assert_ran(4, "busybox");
    let master = step.tasks[&0].host.clone();
    for (&rank, t) in &step.tasks {
        assert_eq!(
            t.var("RANK"),
            Some(rank.to_string().as_str()),
            "rank {rank}"
        );
        assert_eq!(t.var("MASTER_ADDR"), Some(master.as_str()), "rank {rank}");
        assert_eq!(t.var("WORLD_SIZE"), Some("4"));
    }
    common::assert_no_node_drained();
}

/// Apptainer itself (its image has it only on forky: Debian packages it in
/// sid alone, docker/node/Dockerfile): a sandbox built by Apptainer from the
/// busybox image, whose %environment sets RANK and MASTER_ADDR, run with
/// `--cleanenv`. Without
/// the mirror the program sees the image's values; with
/// `--tf-apptainer-env=true` the plugin's. It runs on forky only
/// (tests/where.tsv): elsewhere cargo test counts it as filtered out, not passed.
#[test]
fn apptainer_cleanenv_gets_the_mirror() {
    let _t = common::testbed();
    let has = on("node3", &["sh", "-c", "command -v apptainer"])
        .status
        .success();
    assert!(has, "apptainer is not in this image");
    let sandbox = "/home/alice/apptainer-sandbox";
    let made = exec_for(
        120,
        &[
            "sh",
            "-c",
            &format!(
                "set -e; rm -rf {sandbox} {sandbox}.root; unsquashfs -q -d {sandbox}.root /opt/tfc-images/busybox.sqsh >/dev/null; \
                 apptainer -s build --sandbox {sandbox} {sandbox}.root; rm -rf {sandbox}.root; \
                 printf 'export RANK=77\\nexport MASTER_ADDR=image-master\\n' >>{sandbox}/.singularity.d/env/90-environment.sh"
            ),
        ],
    );
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let probe = "echo where=$(cat /etc/tfc-image); env | grep -E '^(RANK|MASTER_ADDR)='";
    let run = |mirror: bool| {
        let outputs = common::outputs::Outputs::new("apptainer");
        let files = outputs.srun_args();
        let mut cmd = vec![
            "srun",
            "-N1",
            "-n2",
            "-w",
            "node3",
            "--torch-cluster",
            "--tf-auto-set-gpu=false",
        ];
        cmd.extend(files.iter().map(String::as_str));
        if mirror {
            cmd.push("--tf-apptainer-env=true");
        }
        cmd.extend([
            "apptainer",
            "-s",
            "exec",
            "--cleanenv",
            sandbox,
            "sh",
            "-c",
            probe,
        ]);
        let out = exec_for(180, &cmd);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        // Each task's lines from its own file.
        let seen: BTreeMap<u32, Vec<String>> = outputs
            .tasks()
            .into_iter()
            .map(|(rank, t)| (rank, t.stdout.lines().map(str::to_string).collect()))
            .collect();
        assert_eq!(seen.keys().copied().collect::<Vec<_>>(), [0, 1], "{stderr}");
        seen
    };
    for (rank, lines) in run(false) {
        assert!(lines.contains(&"where=busybox".to_string()), "{lines:?}");
        assert!(
            lines.contains(&"RANK=77".to_string()),
            "rank {rank}: {lines:?}"
        );
        assert!(
            lines.contains(&"MASTER_ADDR=image-master".to_string()),
            "{lines:?}"
        );
    }
    for (rank, lines) in run(true) {
        assert!(lines.contains(&"where=busybox".to_string()), "{lines:?}");
        assert!(
            lines.contains(&format!("RANK={rank}")),
            "rank {rank}: {lines:?}"
        );
        assert!(
            lines.contains(&"MASTER_ADDR=node3".to_string()),
            "{lines:?}"
        );
    }
}

/// An image that sets Slurm's own task variables (SLURM_PROCID=77,
/// SLURM_LOCALID, SLURM_NODEID, SLURM_STEP_NUM_TASKS, docker/node/images/)
/// does not move a task: a 2 × 2 step asking for every framework runs in the
/// image, and each task gets the values the same step gets on the host,
/// for its real rank (Slurm's, which the stand-in kept aside), not the
/// image's. (The plugin once read the rank from SLURM_PROCID in the task's
/// environment and refused this step: "the task layout on node1 is not the
/// one Slurm made".)
#[test]
fn an_images_slurm_variables_do_not_move_a_task() {
    let _s = standin();
    let args = [
        "-N2",
        "--ntasks-per-node=2",
        "-w",
        "node[1-2]",
        "--tf-cluster",
        "--torch-cluster",
        "--jax-cluster",
        "--tf-auto-set-gpu=false",
        // TensorFlow's two, PyTorch's and JAX's coordinator ports.
        "--resv-ports=4",
    ];
    // JAX_LOCAL_DEVICE_IDS is a GPU variable: the image's stays under
    // --tf-auto-set-gpu=false, as do the image's GPU lists (Slurm set none).
    let mut names: Vec<&str> = TF_VARS.to_vec();
    for name in TORCH_VARS.iter().chain(&JAX_VARS[..1]) {
        if !names.contains(name) {
            names.push(name);
        }
    }
    let (_, image) = same_as_on_the_host(&args, &names);
    for (&rank, t) in &image.tasks {
        assert_eq!(t.var("SLURM_PROCID"), Some("77"), "the image's own stays");
        assert_eq!(t.var("RANK"), Some(rank.to_string().as_str()));
        assert_eq!(t.var("LOCAL_RANK"), Some(t.local.to_string().as_str()));
        let tf: Value = serde_json::from_str(t.var("TF_CONFIG").unwrap()).unwrap();
        assert_eq!(tf["task"]["index"], rank, "rank {rank}");
    }
    common::assert_no_node_drained();
}

/// An image copied from the test image with `vars` added to its
/// environment, on the shared /home: its --container-image option.
fn image_with(name: &str, vars: &[String]) -> String {
    let dir = format!("/home/alice/{name}");
    let mut script = format!("set -e; rm -rf {dir}; cp -a /opt/tfc-images/busybox {dir}; ");
    for v in vars {
        script.push_str(&format!("echo '{v}' >>{dir}/etc/environment; "));
    }
    let out = exec_for(60, &["sh", "-c", &script]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    format!("--container-image={dir}")
}

/// An image cannot aim the plugin's kill at another user's step, nor bind
/// GPUs the step never asked for. Bob's job runs a step on node3; alice's
/// image names bob's job as SLURM_JOB_ID. (1) A step bound per task
/// (--gpus-per-task=1), refused in the container as designed, ends only
/// alice's own step: bob's step still runs 5 s later. (2) With
/// SLURMD_TRES_BIND=gpu:map_gpu:0 in the image, a step that asks for no
/// GPU binding is not refused at all. (The plugin once read both from the
/// task's environment after the container plugin had replaced it, and
/// slurmstepd cancelled bob's step as root.)
#[test]
fn an_image_cannot_aim_the_kill_at_another_users_step() {
    let _s = standin();
    let victim = common::bobs_job("node3");
    let image = image_with(
        "img-victim",
        &[
            format!("SLURM_JOB_ID={victim}"),
            "SLURMD_TRES_BIND=gpu:map_gpu:0".into(),
        ],
    );
    let refused = exec_for(
        120,
        &[
            "srun",
            "-N1",
            "-n2",
            "-w",
            "node1",
            "--gpus-per-task=1",
            "--tf-cluster",
            &image,
            "sh",
            "-c",
            "echo ran",
        ],
    );
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&refused.stdout),
        String::from_utf8_lossy(&refused.stderr)
    );
    assert_ne!(refused.status.code(), Some(0), "{text}");
    assert!(!text.contains("ran"), "{text}");
    std::thread::sleep(std::time::Duration::from_secs(5));
    assert!(
        common::step_running(victim),
        "bob's step {victim}.0 was ended:\n{text}"
    );

    let unbound = srun(&strs(&[
        image.clone(),
        "-N1".into(),
        "-n2".into(),
        "-w".into(),
        "node1".into(),
        "--tf-cluster".into(),
    ]));
    unbound.assert_ran(2, "busybox");
    for (rank, t) in &unbound.tasks {
        assert!(
            t.var("TF_CONFIG").is_some_and(|c| c.contains("worker")),
            "rank {rank}"
        );
    }
    std::thread::sleep(std::time::Duration::from_secs(2));
    assert!(
        common::step_running(victim),
        "bob's step {victim}.0 was ended"
    );
    let _ = on("ctl", &["scancel", &victim.to_string()]);
    common::assert_no_node_drained();
}

/// The plugin's refusal of a task whose network namespace is not the
/// node's (src/spank/stepd/host.rs, `PRIVATE_NETWORK`).
const PRIVATE_NETWORK: &str = "this step's tasks get a network namespace of their own (a container plugin's --container-unshare=net), without the node's interfaces: the addresses and ports set for them name a network they cannot reach; run without unsharing the network";

/// `srun -l ARGS sh -c 'echo ran'` as alice, refused in every task with
/// the private-network line; no task ran, no node drained.
fn assert_private_network_refused(vars: &[&str], args: &[&str]) {
    assert_refused(vars, args, PRIVATE_NETWORK);
    common::assert_no_node_drained();
}

/// The interfaces a task of `srun -N1 -n1 -w node1 ARGS` sees
/// (/proc/net/dev is the task's own network namespace's).
fn interfaces_seen(vars: &[&str], args: &[&str]) -> Vec<String> {
    let mut cmd = vec!["env"];
    cmd.extend(vars);
    cmd.extend(["srun", "-N1", "-n1", "-w", "node1"]);
    cmd.extend(args);
    cmd.extend(["sh", "-c", "cat /proc/net/dev"]);
    let out = exec_for(120, &cmd);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text.lines()
        .filter_map(|l| Some(l.split_once(':')?.0.trim().to_string()))
        .collect()
}

/// pyxis 0.24's `--container-unshare=net` gives each task a network
/// namespace holding none of the node's interfaces (the stand-in does the
/// same, CLONE_NEWNET in its user namespace). With the container plugin
/// listed before tf-cluster (the documented order), a framework step is
/// refused in every task before exec, in one line naming the cause and the
/// fix: asked by the option's name (any plugin's `container-unshare`, as
/// Slurm keeps every plugin's options by name), or, without it, seen in the
/// task itself (STANDIN_UNSHARE_NET=1: the stand-in unshares the network
/// under no option the plugin knows; the task's namespace differs from the
/// one slurmstepd's `user_init` saw on the host). A step that asks for no
/// framework is untouched and really runs on a loopback interface alone;
/// a framework step without the unshare runs.
#[test]
fn a_private_network_namespace_is_refused() {
    let _s = standin();
    let host = interfaces_seen(&[], &[]);
    assert!(host.len() > 1, "the node's interfaces: {host:?}");
    let unshare = [IMAGE, "--container-unshare=net"];
    assert_eq!(interfaces_seen(&[], &unshare), ["lo"], "the stand-in's");
    assert_eq!(
        interfaces_seen(&["STANDIN_UNSHARE_NET=1"], &[IMAGE]),
        ["lo"],
        "the stand-in's, unasked by option"
    );
    let step = ["-N2", "--ntasks-per-node=2", "-w", "node[1-2]"];
    for fw in ["--tf-cluster", "--torch-cluster"] {
        let mut args = unshare.to_vec();
        args.extend(step);
        args.push(fw);
        assert_private_network_refused(&[], &args);
        let mut args = vec![IMAGE];
        args.extend(step);
        args.push(fw);
        assert_private_network_refused(&["STANDIN_UNSHARE_NET=1"], &args);
    }
    assert_next_step_runs("node2");
}

/// The other order: tf-cluster listed before the container plugin, whose
/// `task_init` then unshares the network after the plugin's ran, so no task
/// can see it in time. The step's own option (`container-unshare`, forwarded
/// by srun to slurmstepd and kept by name) says it: refused alike before
/// exec, and a step that asks for no framework runs.
#[test]
fn a_private_network_namespace_is_refused_in_the_other_order() {
    let bed = exclusive();
    bed.plugstack(&format!(
        "include /etc/slurm/plugstack.conf.d/tf-cluster.conf\nrequired {STANDIN_SO}\n"
    ));
    let unshare = [IMAGE, "--container-unshare=net"];
    assert_eq!(interfaces_seen(&[], &unshare), ["lo"], "the stand-in's");
    let mut args = unshare.to_vec();
    args.extend([
        "-N2",
        "--ntasks-per-node=2",
        "-w",
        "node[1-2]",
        "--jax-cluster",
    ]);
    assert_private_network_refused(&[], &args);
    assert_next_step_runs("node2");
}
