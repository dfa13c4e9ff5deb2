//! The environment of one task of a realistic step, shared by the benches:
//! 4 tasks per node on nodes `node0001…`, Slurm's reserved ports, 4 GPUs per
//! node, `--tf-cluster=chief:1,worker:N-1`, the plugstack.conf line's
//! `port-base=8888`. Everything slurmstepd gives the task, nothing more.

use tf_cluster_core::roles::RoleSpec;
use tf_cluster_core::{self as core, Error, Injection, Probe, Result, Settings, Source, Step};

pub const TASKS_PER_NODE: u32 = 4;

/// The variables of the task of rank `rank` in a block step of `tasks` tasks,
/// as slurmstepd hands them to the plugin (sorted like an environment, with
/// the unrelated variables a real task has around them).
pub fn task_env(tasks: u32, rank: u32) -> Vec<(String, String)> {
    let per_node = TASKS_PER_NODE.min(tasks);
    let nodes = tasks.div_ceil(per_node);
    let node = rank / per_node;
    let on_node = per_node.min(tasks - node * per_node);
    let last = tasks - (nodes - 1) * per_node;
    let counts = if last == per_node {
        format!("{per_node}(x{nodes})")
    } else {
        format!("{per_node}(x{}),{last}", nodes - 1)
    };
    let nodelist = if nodes == 1 {
        "node0001".to_string()
    } else {
        format!("node[0001-{nodes:04}]")
    };
    let gtids: Vec<String> = (0..on_node)
        .map(|k| (node * per_node + k).to_string())
        .collect();
    let mut env: Vec<(String, String)> = [
        ("CUDA_VISIBLE_DEVICES", "0,1,2,3".to_string()),
        ("HOME", "/home/alice".into()),
        ("LANG", "C.UTF-8".into()),
        ("PATH", "/usr/local/bin:/usr/bin:/bin".into()),
        ("SLURM_CPUS_ON_NODE", "4".into()),
        ("SLURM_GTIDS", gtids.join(",")),
        ("SLURM_JOB_ID", "4242".into()),
        ("SLURM_JOB_NODELIST", nodelist.clone()),
        ("SLURM_LOCALID", (rank % per_node).to_string()),
        ("SLURM_NNODES", nodes.to_string()),
        ("SLURM_NODEID", node.to_string()),
        ("SLURM_NTASKS", tasks.to_string()),
        ("SLURM_PROCID", rank.to_string()),
        ("SLURM_STEPID", "0".into()),
        ("SLURM_STEP_NODELIST", nodelist),
        ("SLURM_STEP_NUM_NODES", nodes.to_string()),
        ("SLURM_STEP_NUM_TASKS", tasks.to_string()),
        (
            "SLURM_STEP_RESV_PORTS",
            format!("12000-{}", 12000 + per_node),
        ),
        ("SLURM_STEP_TASKS_PER_NODE", counts),
        ("SLURM_TASKS_PER_NODE", "4(x2)".into()),
        ("USER", "alice".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    env.sort();
    env
}

/// The task's environment, looked up as spank_getenv does: a scan per name.
pub struct Env<'a>(pub &'a [(String, String)]);

impl Source for Env<'_> {
    fn var(&mut self, name: &str) -> Result<Option<String>> {
        Ok(self
            .0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone()))
    }
}

impl Probe for Env<'_> {
    fn gpu_count(&mut self) -> Result<u32> {
        Err(Error::new(
            "the benchmark's tasks have CUDA_VISIBLE_DEVICES",
        ))
    }

    fn read_file(&mut self, path: &str) -> Result<String> {
        Err(Error::new(format!("no file {path} in the benchmark")))
    }
}

/// The role spec of a step of `tasks` tasks.
pub fn spec(tasks: u32) -> String {
    if tasks == 1 {
        "worker:1".into()
    } else {
        format!("chief:1,worker:{}", tasks - 1)
    }
}

/// Everything the plugin does for one task in slurmstepd, minus the FFI:
/// settings from the plugstack.conf arguments and the step's option, the
/// step's facts from the environment, then the task's variables.
pub fn task_path(spec: &str, env: &[(String, String)]) -> Injection {
    let mut settings = Settings::from_admin_args(["port-base=8888"]).expect("admin args");
    settings.roles = RoleSpec::parse(spec).expect("spec");
    let step = Step::gather(&settings, &mut Env(env))
        .and_then(|g| g.step())
        .expect("gather");
    core::resolve(&settings, &step).expect("resolve")
}

/// The plugin's split of the same work: the node's share, made once per
/// node (slurmstepd's user_init), from the node's view (no SLURM_PROCID).
#[allow(dead_code)] // the scale bench measures whole resolutions only
pub fn node_share(spec: &str, env: &[(String, String)]) -> core::Node {
    let mut settings = Settings::from_admin_args(["port-base=8888"]).expect("admin args");
    settings.roles = RoleSpec::parse(spec).expect("spec");
    let node_env: Vec<(String, String)> = env
        .iter()
        .filter(|(k, _)| k != "SLURM_PROCID")
        .cloned()
        .collect();
    let step = Step::gather(&settings, &mut Env(&node_env))
        .and_then(|g| g.step())
        .expect("gather");
    core::Node::prepare(settings, step).expect("prepare")
}
