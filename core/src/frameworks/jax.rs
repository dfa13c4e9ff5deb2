//! JAX (`--jax-cluster`): the coordinator on rank 0's host and the task's
//! own GPUs. JAX takes the process count and id from SLURM_NTASKS and
//! SLURM_PROCID itself (global in heterogeneous steps too); its own choice
//! of coordinator is the node list's first host, which need not run rank 0.
//!
//! What it needs of the layout: rank 0's host: O(1) after the layout.

use super::framework::{Framework, GpuRule, Launch, RoleRule, Task, Vars};
use crate::addresses::NCCL;
use crate::error::Result;
use crate::limits::MAX_TASKS;
use crate::node_plan::PortRule;
use crate::settings::Settings;

pub static FRAMEWORK: Framework = Framework {
    name: "JAX",
    option: "jax-cluster",
    arg: None,
    help: "set JAX's JAX_COORDINATOR_ADDRESS and JAX_LOCAL_DEVICE_IDS",
    skip_when_inherited: false,
    max_tasks: MAX_TASKS,
    max_tasks_why: "tf-cluster lays out at most 262144",
    // The coordinator's port.
    ports: PortRule::Master,
    check_before_launch,
    check_layout: None,
    gpus: GpuRule::OwnIds,
    shared: None,
    render,
    columns: &["COORDINATOR", "DEVICE_IDS"],
    row,
    summary: |_| None,
    // NCCL on GPUs. JAX's CPU collectives (gloo) are built without an
    // interface and read no variable (jax/_src/xla_bridge.py): nothing to set.
    interface_vars: &[&NCCL],
    roles: RoleRule::PerRole(|_| Ok(())),
    renders_world: false,
    role_of: None,
    nccl: true,
    private_dir: None,
};

fn check_before_launch(_: &Settings, _: &Launch) -> Result<()> {
    Ok(())
}

fn render(task: &Task, vars: &mut Vars) -> Result<()> {
    vars.push(("JAX_COORDINATOR_ADDRESS", coordinator(task)?));
    if let Some(ids) = &task.gpus.own_ids {
        vars.push(("JAX_LOCAL_DEVICE_IDS", ids.clone()));
    }
    Ok(())
}

fn coordinator(task: &Task) -> Result<String> {
    let host = task.layout.address(task.world.master_node);
    Ok(format!("{host}:{}", task.ports[0]))
}

fn row(task: &Task) -> Vec<String> {
    vec![
        coordinator(task).unwrap_or_default(),
        task.gpus.own_ids.clone().unwrap_or_else(|| "-".into()),
    ]
}
