//! A stand-in fifth framework (`--stand-in-cluster`), built only with the
//! feature `stand-in`: it proves that a framework is its own file and one
//! line of the table. Nothing else names it, and its tests below find its
//! option, ports, variables and place in every message that lists the
//! framework options.

use super::framework::{Framework, GpuRule, RoleRule, Task, Vars};
use crate::error::Result;
use crate::limits::MAX_TASKS;
use crate::node_plan::PortRule;

pub static FRAMEWORK: Framework = Framework {
    name: "Stand-in",
    option: "stand-in-cluster",
    arg: None,
    help: "set STAND_IN_ADDRESS, the rendezvous on rank 0's host",
    skip_when_inherited: false,
    max_tasks: MAX_TASKS,
    max_tasks_why: "tf-cluster lays out at most 262144",
    ports: PortRule::Master,
    check_before_launch: |_, _| Ok(()),
    check_layout: None,
    gpus: GpuRule::Slice,
    shared: None,
    render,
    columns: &["STAND_IN"],
    row: |task| vec![address(task)],
    summary: |_| None,
    interface_vars: &[],
    roles: RoleRule::PerRole(|_| Ok(())),
    renders_world: false,
    role_of: None,
    nccl: true,
    private_dir: None,
};

fn address(task: &Task) -> String {
    let host = task.layout.address(task.world.master_node);
    format!("{host}:{}", task.ports[0])
}

fn render(task: &Task, vars: &mut Vars) -> Result<()> {
    vars.push(("STAND_IN_ADDRESS", address(task)));
    Ok(())
}

#[cfg(test)]
#[path = "stand_in_tests.rs"]
mod tests;
