//! PyTorch (`--torch-cluster`): the torchrun contract for ranks srun starts
//! itself (MASTER_ADDR, RANK, LOCAL_RANK, …), and torchrun's own arguments
//! (`PET_*`) for a launcher per task (`srun --ntasks-per-node=1
//! --torch-cluster torchrun --nproc-per-node=G train.py`).
//!
//! Two rendezvous for the launchers: `static` (the default: torchrun's
//! static rendezvous, Slurm's order, no restart) and `elastic[:MIN[:RESTARTS]]`
//! (torchrun's c10d rendezvous on rank 0's node and a reserved port: agents
//! meet again after a worker fails or a node is lost, down to MIN nodes).
//!
//! What it needs of the layout: rank 0's host, this task's node (its count
//! and its place in the order of first ranks) and the step's size: O(ranks)
//! once, nothing per other rank, so no limit below the layout's own.

use super::framework::{Arg, Framework, GpuRule, Launch, RoleRule, Task, Vars};
use crate::addresses::{GLOO, NCCL, TENSORPIPE};
use crate::error::{Result, bail};
use crate::limits::MAX_TASKS;
use crate::node_plan::PortRule;
use crate::settings::Settings;
// Declared before the settings, which hold the step's choice.
pub use crate::rendezvous::{DEFAULT_MAX_RESTARTS, Rendezvous};

/// The elastic mode's rules, checked by srun before launch and wherever a
/// node is prepared (every node of the step, the CLI's preview) with what
/// the layout says: one launcher per node, 1 ≤ MIN ≤ the step's nodes. Its
/// rendezvous port is the step's like any other (reserved by Slurm, or the
/// step's block of the port range).
pub fn check_elastic(settings: &Settings, tasks: u32, nodes: u32) -> Result<()> {
    let Rendezvous::Elastic { min, .. } = settings.torch else {
        return Ok(());
    };
    if tasks != nodes {
        bail!(
            "--torch-cluster=elastic runs one torchrun per node, but the step has {tasks} tasks on {nodes} nodes: use --ntasks-per-node=1"
        );
    }
    if let Some(min) = min.filter(|&m| m > nodes) {
        bail!("--torch-cluster=elastic:{min}: MIN is more than the step's {nodes} nodes");
    }
    Ok(())
}

/// With `--tf-roles`, each role's own static rendezvous: torchrun's elastic
/// one (one store for every node) cannot be split by role.
fn static_rendezvous(settings: &Settings) -> Result<()> {
    if matches!(settings.torch, Rendezvous::Elastic { .. }) {
        bail!(
            "--tf-roles gives each role a static rendezvous: use it with --torch-cluster, not --torch-cluster=elastic"
        );
    }
    Ok(())
}

pub static FRAMEWORK: Framework = Framework {
    name: "PyTorch",
    option: "torch-cluster",
    arg: Some(Arg {
        name: "static|elastic[:MIN[:RESTARTS]]",
        set: |settings, value| {
            settings.torch = Rendezvous::parse(value, settings.torch)?;
            Ok(())
        },
        site_default: true,
    }),
    help: "set PyTorch's MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE and torchrun's PET_* arguments; =elastic[:MIN[:RESTARTS]]: torchrun's c10d rendezvous, one torchrun per node, going on with MIN nodes or more (default all) after RESTARTS restarts (default 3)",
    skip_when_inherited: false,
    max_tasks: MAX_TASKS,
    max_tasks_why: "tf-cluster lays out at most 262144",
    // MASTER_PORT.
    ports: PortRule::Master,
    check_before_launch,
    check_layout: Some(|settings, layout| {
        check_elastic(settings, layout.num_tasks(), layout.num_nodes())
    }),
    gpus: GpuRule::Whole,
    shared: None,
    render,
    columns: &["HOST", "LOCAL_RANK", "GROUP_RANK"],
    row,
    // NCCL (GPUs), gloo (CPUs) and TensorPipe (torch.distributed.rpc)
    // each pick their interface; MASTER_ADDR names only the rendezvous.
    interface_vars: &[&NCCL, &GLOO, &TENSORPIPE],
    summary,
    roles: RoleRule::PerRole(static_rendezvous),
    // RANK, WORLD_SIZE, MASTER_ADDR, … of the task's world.
    renders_world: true,
    role_of: None,
    nccl: true,
    private_dir: None,
};

fn check_before_launch(settings: &Settings, launch: &Launch) -> Result<()> {
    if let (Some(command), Some(most)) = (launch.command, launch.most_local) {
        check_launcher(command, most)?;
    }
    match launch.nodes {
        Some(nodes) => check_elastic(settings, launch.tasks, nodes),
        None => Ok(()),
    }
}

/// A torchrun per task starts its own workers, numbered from local rank 0 on
/// every GPU of the node: with several tasks on a node, several workers
/// take the same GPU. srun refuses such a step before launch, from its
/// command (`command`: srun's argv) and the most tasks on one node.
pub fn check_launcher(command: &[String], most_local: u32) -> Result<()> {
    if most_local > 1 && starts_torchrun(command) {
        bail!(
            "torchrun starts its node's workers itself, but this step runs {most_local} tasks (each a torchrun) on a node, whose workers would share GPUs: use --ntasks-per-node=1 with torchrun --nproc_per_node={most_local}"
        );
    }
    Ok(())
}

/// Whether a command runs torchrun: a word of it (or of a shell's `-c`
/// script, or behind `env`, `apptainer exec` …) is `torchrun` or a path to
/// it, or the module `torch.distributed.run` / `torch.distributed.launch`.
pub fn starts_torchrun(command: &[String]) -> bool {
    let is_shell_punct =
        |c: char| c.is_whitespace() || matches!(c, ';' | '&' | '|' | '(' | ')' | '`' | '"' | '\'');
    command
        .iter()
        .flat_map(|arg| arg.split(is_shell_punct))
        .any(|word| {
            let word = word.strip_prefix("-m").unwrap_or(word);
            let name = word.rsplit('/').next().unwrap_or(word);
            name == "torchrun"
                || matches!(word, "torch.distributed.run" | "torch.distributed.launch")
        })
}

/// How many GPUs the task sees, when it runs alone on its node (a launcher
/// per node): the list the plugin gives it, else Slurm's, else Slurm's count
/// of the step's GPUs on the node. None without GPUs.
fn node_gpus(task: &Task) -> Result<Option<usize>> {
    if task.world.local_size != 1 {
        return Ok(None);
    }
    let count = match task.gpus.vars.first() {
        Some((_, list)) if list.is_empty() => 0,
        Some((_, list)) => list.split(',').count(),
        None if !task.step.visible_gpus.is_unset() => task.step.visible_gpus.count()?,
        None => task.step.gpus_on_node.unwrap_or(0) as usize,
    };
    Ok((count > 0).then_some(count))
}

fn render(task: &Task, vars: &mut Vars) -> Result<()> {
    let (layout, p) = (task.layout, task.placement);
    // The task's world: its role's with --tf-roles, else the step's.
    let (w, host_node) = (task.world, task.world.master_node);
    let master_addr = layout.address(host_node).into_owned();
    let master_port = task.ports[0].to_string();
    let world = w.size.to_string();
    let rank = w.rank.to_string();
    vars.extend([
        ("MASTER_ADDR", master_addr.clone()),
        ("MASTER_PORT", master_port.clone()),
        ("RANK", rank.clone()),
        ("WORLD_SIZE", world.clone()),
        ("LOCAL_RANK", w.local.to_string()),
        ("LOCAL_WORLD_SIZE", w.local_size.to_string()),
        ("GROUP_RANK", w.group.to_string()),
        ("GROUP_WORLD_SIZE", w.groups.to_string()),
    ]);
    // torchrun reads each argument it is not given from PET_<NAME>
    // (torch/distributed/argparse_util.py), and a directly started rank
    // reads none of them.
    let endpoint = format!("{master_addr}:{master_port}");
    // A rendezvous id unique to the step and to the job's incarnation (a
    // requeued job starts its step ids at 0 again), the same in every
    // component of a heterogeneous step: torch prefixes its store keys
    // with it.
    let rdzv_id = task.step.run_id();
    let nproc = node_gpus(task)?;
    match task.settings.torch {
        Rendezvous::Static => {
            // Each task is one launcher: with one task per node, its rank is
            // the node's rank in the order of first ranks. The static
            // rendezvous keeps Slurm's order (node rank k holds ranks
            // k·G … k·G+G-1) and needs no election; its store is rank 0's
            // launcher.
            vars.extend([
                ("PET_NNODES", world),
                ("PET_NODE_RANK", rank),
                ("PET_MASTER_ADDR", master_addr),
                ("PET_MASTER_PORT", master_port),
                ("PET_RDZV_ENDPOINT", endpoint),
            ]);
            vars.extend(rdzv_id.map(|id| ("PET_RDZV_ID", id)));
            vars.push(("PET_RDZV_BACKEND", "static".to_string()));
        }
        Rendezvous::Elastic { min, max_restarts } => {
            let nodes = w.groups;
            // c10d's store on rank 0's node, told so by is_host (c10d would
            // otherwise compare the endpoint with gethostname(), which Slurm's
            // node names need not match); node ranks follow c10d's order.
            let is_host = u8::from(p.node == host_node);
            vars.extend([
                ("PET_NNODES", format!("{}:{nodes}", min.unwrap_or(nodes))),
                ("PET_RDZV_ENDPOINT", endpoint),
            ]);
            vars.extend(rdzv_id.map(|id| ("PET_RDZV_ID", id)));
            vars.extend([
                ("PET_RDZV_BACKEND", "c10d".to_string()),
                ("PET_RDZV_CONF", format!("is_host={is_host}")),
                ("PET_LOCAL_ADDR", layout.address(p.node).into_owned()),
                ("PET_MAX_RESTARTS", max_restarts.to_string()),
                // The agents' shared store keeps a previous round's keys, and
                // restarted workers then fail to connect to their peers.
                ("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1".to_string()),
            ]);
        }
    }
    vars.extend(nproc.map(|n| ("PET_NPROC_PER_NODE", n.to_string())));
    Ok(())
}

fn row(task: &Task) -> Vec<String> {
    vec![
        task.layout.host(task.placement.node).to_string(),
        task.world.local.to_string(),
        task.world.group.to_string(),
    ]
}

/// torchrun's arguments, the same for every launcher but its node rank
/// (static) or its is_host and local address (elastic).
fn summary(task: &Task) -> Option<String> {
    let mut vars = Vars::new();
    render(task, &mut vars).ok()?;
    let per_launcher = ["PET_NODE_RANK", "PET_RDZV_CONF", "PET_LOCAL_ADDR"];
    let pet: Vec<String> = vars
        .iter()
        .filter(|(n, _)| n.starts_with("PET_") && !per_launcher.contains(n))
        .map(|(n, v)| format!("{n}={v}"))
        .collect();
    let most = task.layout.max_local();
    if most > 1 {
        return Some(format!(
            "torchrun: not with {most} tasks on a node (srun refuses a torchrun command here; its workers would share GPUs): use --ntasks-per-node=1 with torchrun --nproc_per_node={most}; ranks srun starts directly use the table"
        ));
    }
    Some(match task.settings.torch {
        Rendezvous::Static => format!(
            "torchrun, one launcher per rank (PET_NODE_RANK=RANK): {}",
            pet.join(" ")
        ),
        Rendezvous::Elastic { .. } => format!(
            "torchrun, one elastic launcher per node (PET_RDZV_CONF=is_host=1 on rank 0's node, is_host=0 elsewhere; PET_LOCAL_ADDR the node's address): {} TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1",
            pet.join(" ")
        ),
    })
}
