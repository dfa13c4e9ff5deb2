//! TensorFlow (`--tf-cluster[=ROLE:N,…]`): TF_CONFIG, every rank's role and
//! `host:port`, as TFConfigClusterResolver reads it. Its size bounds the step:
//! every task's TF_CONFIG lists every address, in one environment variable.

use std::borrow::Cow;

use super::framework::{Arg, Framework, GpuRule, Launch, RoleRule, Shared, Task, Vars};
use crate::addresses::NCCL;
use crate::distribution::Placement;
use crate::error::{Result, bail};
use crate::layout::Layout;
use crate::limits::ENV_LIMIT;
use crate::node_plan::PortRule;
use crate::roles::{self, RoleSpec};
use crate::settings::Settings;
use crate::tf_config;

/// More tasks than this cannot fit TF_CONFIG in one environment variable
/// (each address takes at least 6 bytes), so larger steps are refused before
/// any work scales with them.
pub const MAX_TASKS: u32 = (ENV_LIMIT / 6) as u32;

pub static FRAMEWORK: Framework = Framework {
    name: "TensorFlow",
    option: "tf-cluster",
    arg: Some(Arg {
        name: "ROLE:N,...",
        set: |settings, spec| {
            settings.roles = RoleSpec::parse(spec)?;
            Ok(())
        },
        site_default: false,
    }),
    help: "set TF_CONFIG and CUDA_VISIBLE_DEVICES for TensorFlow, e.g. ps:1,worker:3 (default: all workers)",
    skip_when_inherited: true,
    max_tasks: MAX_TASKS,
    max_tasks_why: "TF_CONFIG for more than 21845 cannot fit in one environment variable",
    // Local task k takes the k-th port of its node.
    ports: PortRule::PerTask,
    check_before_launch,
    check_layout: None,
    gpus: GpuRule::Slice,
    shared: Some(cluster),
    render,
    columns: &["ROLE", "INDEX", "ADDRESS"],
    row,
    summary: |_| None,
    // gRPC follows TF_CONFIG's addresses (the host template); NCCL, for
    // MultiWorkerMirroredStrategy on GPUs, picks its own interface.
    interface_vars: &[&NCCL],
    // TensorFlow's roles are its job names.
    roles: RoleRule::Refused(
        "--tf-roles gives each role a world of its own, which TensorFlow has not: its roles are its job names (--tf-cluster=ps:1,worker:3)",
    ),
    renders_world: false,
    role_of: Some(role_of),
    // MultiWorkerMirroredStrategy's collectives on GPUs.
    nccl: true,
    private_dir: None,
};

/// A rank's job name and index (`worker 3`).
fn role_of(settings: &Settings, layout: &Layout, rank: u32) -> Option<String> {
    let roles = settings.roles.for_step(layout.num_tasks()).ok()?;
    roles::role_of(&roles, rank).map(|(role, index)| format!("{role} {index}"))
}

/// The spec must cover the tasks, and TF_CONFIG must be able to fit.
fn check_before_launch(settings: &Settings, launch: &Launch) -> Result<()> {
    let roles = settings.roles.for_step(launch.tasks)?;
    let size = tf_config::min_size(
        roles.iter().map(|r| (r.name.as_str(), r.count)),
        launch.shortest_host(),
        Launch::port_digits(settings),
        settings.rpc_layer.as_deref(),
    );
    tf_config::check_min_size(size, launch.tasks)
}

/// TF_CONFIG's cluster part, every task's the same, rendered once per
/// node. An `evaluator` stays out of it: TensorFlow runs it beside the
/// cluster, not in it.
fn cluster(node: &Shared) -> Result<String> {
    let (layout, settings) = (node.layout, node.settings);
    if node.step.num_tasks.is_none() && settings.roles.total().is_none() {
        bail!("SLURM_STEP_NUM_TASKS is not set: not inside a Slurm step?");
    }
    let roles = settings.roles.for_step(layout.num_tasks())?;
    let addresses: Vec<Cow<str>> = (0..layout.num_nodes()).map(|n| layout.address(n)).collect();
    let ports: Vec<String> = node.ports.iter().map(u16::to_string).collect();
    // TF_CONFIG lists every rank: O(ranks) is its nature.
    let placements: Vec<Placement> = layout.placements().collect();
    let mut first = 0usize;
    let jobs = roles.iter().filter_map(|r| {
        let ranks = first..first + r.count as usize;
        first = ranks.end;
        (r.name != roles::EVALUATOR).then(|| tf_config::Job {
            name: r.name.as_str(),
            addresses: placements[ranks].iter().map(|p| {
                (
                    addresses[p.node as usize].as_ref(),
                    ports[p.local as usize].as_str(),
                )
            }),
        })
    });
    // Each address is `"host:port",`; role names and the rest are small.
    let capacity = placements.len() * (layout.longest_address() + 9) + 256;
    let cluster = tf_config::cluster(jobs, capacity);
    // The smallest task part: a larger cluster part fails every task.
    tf_config::check_size(&cluster, layout.num_tasks())?;
    Ok(cluster)
}

/// TF_CONFIG of the task: the node's cluster part and its own role.
fn render(task: &Task, vars: &mut Vars) -> Result<()> {
    let layout = task.layout;
    let roles = task.settings.roles.for_step(layout.num_tasks())?;
    let Some((role, index)) = roles::role_of(&roles, task.rank) else {
        bail!(
            "SLURM_PROCID {} is outside the step's {} task(s)",
            task.rank,
            layout.num_tasks()
        );
    };
    let rpc_layer = task.settings.rpc_layer.as_deref();
    // One copy of the shared part: in a freshly forked task each new page
    // faults, and the cluster of thousands of tasks is tens of pages.
    let mut tf_config =
        String::with_capacity(task.shared.len() + tf_config::task_part_len(role, rpc_layer));
    tf_config.push_str(task.shared);
    tf_config::finish(&mut tf_config, role, index, rpc_layer);
    tf_config::check_size(&tf_config, layout.num_tasks())?;
    vars.push(("TF_CONFIG", tf_config));
    Ok(())
}

/// ROLE, INDEX and ADDRESS of the task.
fn row(task: &Task) -> Vec<String> {
    let layout = task.layout;
    let (role, index) = match task.settings.roles.for_step(layout.num_tasks()) {
        Ok(roles) => roles::role_of(&roles, task.rank)
            .map(|(r, i)| (r.to_string(), i.to_string()))
            .unwrap_or_default(),
        Err(_) => Default::default(),
    };
    let p = task.placement;
    let address = format!(
        "{}:{}",
        layout.address(p.node),
        task.ports[p.local as usize]
    );
    vec![role, index, address]
}
