//! PyTorch (`--torch-cluster`): the torchrun contract for ranks srun starts
//! itself (MASTER_ADDR, RANK, LOCAL_RANK, …), and torchrun's own arguments
//! (`PET_*`) for a launcher per task (`srun --ntasks-per-node=1
//! --torch-cluster torchrun --nproc-per-node=G train.py`).
//!
//! What it needs of the layout: rank 0's host, this task's node (its count
//! and its place in the order of first ranks) and the step's size: O(ranks)
//! once, nothing per other rank, so no limit below the layout's own.

use super::{Framework, GpuRule, Launch, Task, Vars};
use crate::network;
use crate::settings::Settings;
use crate::{MAX_TASKS, Result};

pub static FRAMEWORK: Framework = Framework {
    name: "PyTorch",
    option: "torch-cluster",
    arg: None,
    help: "set PyTorch's MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE and torchrun's PET_* arguments",
    skip_when_inherited: false,
    max_tasks: MAX_TASKS,
    max_tasks_why: "tf-cluster lays out at most 262144",
    // MASTER_PORT.
    ports: |_| 1,
    check_before_launch,
    gpus: GpuRule::Whole,
    shared: None,
    render,
    columns: &["HOST", "LOCAL_RANK", "GROUP_RANK"],
    row,
    // NCCL (GPUs), gloo (CPUs) and TensorPipe (torch.distributed.rpc)
    // each pick their interface; MASTER_ADDR names only the rendezvous.
    interface_vars: &[&network::NCCL, &network::GLOO, &network::TENSORPIPE],
    summary,
};

fn check_before_launch(_: &Settings, _: &Launch) -> Result<()> {
    Ok(())
}

fn render(task: &Task, vars: &mut Vars) -> Result<()> {
    let layout = task.layout;
    let p = task.placement;
    let master_addr = layout.address(layout.placement(0)?.node).into_owned();
    let master_port = task.ports[0].to_string();
    let world = layout.num_tasks().to_string();
    let rank = task.rank.to_string();
    // torchrun reads each argument it is not given from PET_<NAME>
    // (torch/distributed/argparse_util.py), and a directly started rank
    // reads none of them. Each task is one launcher: with one task per
    // node, its rank is the node's rank in the order of first ranks. The
    // static rendezvous keeps Slurm's order (node rank k holds ranks
    // k·G … k·G+G-1) and needs no election; its store is rank 0's launcher.
    let launcher = [
        ("PET_NNODES", world.clone()),
        ("PET_NODE_RANK", rank.clone()),
        ("PET_MASTER_ADDR", master_addr.clone()),
        ("PET_MASTER_PORT", master_port.clone()),
        ("PET_RDZV_ENDPOINT", format!("{master_addr}:{master_port}")),
    ];
    vars.extend([
        ("MASTER_ADDR", master_addr),
        ("MASTER_PORT", master_port),
        ("RANK", rank),
        ("WORLD_SIZE", world),
        ("LOCAL_RANK", p.local.to_string()),
        ("LOCAL_WORLD_SIZE", layout.count(p.node).to_string()),
        ("GROUP_RANK", layout.group_of(p.node).to_string()),
        ("GROUP_WORLD_SIZE", layout.num_nodes().to_string()),
    ]);
    vars.extend(launcher);
    // A rendezvous id unique to the step (c10d's, if the user picks it), the
    // same in every component of a heterogeneous step: torch prefixes its
    // store keys with it, and each component has its own job id.
    if let Some((job, step)) = task.step.job_step {
        let job = task.step.het_job_id.unwrap_or(job);
        vars.push(("PET_RDZV_ID", format!("{job}.{step}")));
    }
    vars.push(("PET_RDZV_BACKEND", "static".to_string()));
    Ok(())
}

fn row(task: &Task) -> Vec<String> {
    let p = task.placement;
    vec![
        task.layout.host(p.node).to_string(),
        p.local.to_string(),
        task.layout.group_of(p.node).to_string(),
    ]
}

/// torchrun's arguments, the same for every launcher but its node rank.
fn summary(task: &Task) -> Option<String> {
    let mut vars = Vars::new();
    render(task, &mut vars).ok()?;
    let pet: Vec<String> = vars
        .iter()
        .filter(|(n, _)| n.starts_with("PET_") && *n != "PET_NODE_RANK")
        .map(|(n, v)| format!("{n}={v}"))
        .collect();
    Some(format!(
        "torchrun, one launcher per rank (PET_NODE_RANK=RANK): {}",
        pet.join(" ")
    ))
}
