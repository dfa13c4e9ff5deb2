//! Applying the node's share in each task (`task_init`): the task's own
//! part picked by its rank and local id, its GPU binding where Slurm binds
//! per task, and the variables set, naming any a plugin before this one
//! replaced.

use std::collections::HashMap;
use std::ffi::CString;
use std::path::PathBuf;

use super::super::handle::{Env, Spank};
use super::host::{TaskEnv, net_namespace, refuse_private_network};
use crate::core::TaskBinding;
use crate::core::gpus::bind::{Recorded, believed};
use crate::core::gpus::refusals::bound_behind_container;
use crate::core::gpus::{GpuBind, Visible};
use crate::core::record::DebugFiles;
use crate::core::step_number as number;
use crate::core::{self, Error, Node, Result};

/// The node's share, its tasks' variables made ahead, and the step's
/// environment as the host gave it (to name the variables a plugin before
/// this one replaced).
pub struct Ready {
    pub node: Node,
    /// The step's GPU binding as srun recorded it.
    pub recorded_bind: Recorded,
    /// Each local task's rank and variables, as C strings (None: too large
    /// to hold for every task, each task renders its own).
    pub here: Option<Vec<(u32, Result<CVars>)>>,
    pub host_env: HashMap<String, String>,
    /// Where the tasks' debugging output goes, with a record.
    pub debug_files: Option<DebugFiles>,
    /// The node's network namespace, read in `user_init` on the host (None:
    /// unreadable).
    pub net_ns: Option<PathBuf>,
    /// Each task's CPUs and memory from its GPUs (None: nothing bound).
    pub bind: Option<super::bind::NodeBind>,
    /// Each task must see exactly one IMEX channel (core::imex).
    pub imex: bool,
}

/// A task's variables as C strings: (name, value).
pub type CVars = Vec<(CString, CString)>;
/// The task's own part: its rank (Slurm's S_TASK_GLOBAL_ID, or in a
/// heterogeneous step the node share's rank of its local id; never
/// SLURM_PROCID, which an image may set) and local id (S_TASK_ID) pick its
/// variables from the node's share.
/// A binding of GPUs to each task is known only here (SLURMD_TRES_BIND, the
/// task's own list); the node's GPU plan serves every other case. Before
/// reading the task's own list, `entered_namespaces` says whether a plugin
/// before this one entered a container's namespaces (the list may then be
/// the image's: refused); it is asked only then. With the plugin's GPU
/// handling off the binding is not read at all. A task that a plugin before
/// this one moved into a network namespace of its own is refused first.
pub fn apply(
    spank: &Spank,
    ready: &Ready,
    entered_namespaces: impl FnOnce() -> bool,
) -> Result<()> {
    refuse_private_network(ready.net_ns.as_deref(), net_namespace().as_deref())?;
    if ready.imex {
        let node = ready.node.step().nodename.as_deref().unwrap_or("this node");
        core::imex::check_channels(node, &super::host::imex_channels())?;
    }
    let env = spank.env()?;
    // Slurm's items and the node's share, never SLURM_PROCID: a container
    // plugin before this one may have imported an image's. S_TASK_GLOBAL_ID
    // is the rank within a heterogeneous step's component: there the
    // layout's rank of this local task is the step's.
    let local = spank.task_id()?;
    let rank = match ready.node.step().het_job_id {
        Some(_) => ready.node.rank_of_local(local)?,
        None => spank.task_global_id()?,
    };
    // Where either the task's SLURMD_TRES_BIND or srun's record shows a
    // binding, whether a plugin moved the task decides which to believe.
    let (bind, moved) = if ready.node.settings().auto_set_gpu {
        let in_task = env.get("SLURMD_TRES_BIND")?.and_then(GpuBind::parse);
        believed(in_task, &ready.recorded_bind, entered_namespaces)
    } else {
        (None, false)
    };
    // Made ahead for this rank as this local task: only set them here.
    let ahead = match (
        &bind,
        ready.here.as_ref().and_then(|h| h.get(local as usize)),
    ) {
        (None, Some((ahead_rank, vars))) if *ahead_rank == rank => {
            Some(vars.as_ref().map_err(Clone::clone)?)
        }
        _ => None,
    };
    let made;
    let vars = match ahead {
        Some(vars) => vars,
        None => {
            made = c_strings(task_vars(&env, ready, rank, local, bind, moved)?)?;
            &made
        }
    };
    let mut replaced = Vec::new();
    for (name, value) in vars {
        let name = name.to_str().unwrap_or_default();
        if was_replaced(&env, &ready.host_env, name, value.to_bytes())? {
            replaced.push(name.to_string());
        }
    }
    for (name, value) in vars {
        spank.setenv_c(name, value)?;
    }
    if let Some(files) = &ready.debug_files {
        for (name, value) in files.vars(rank) {
            let bad = || Error::new(format!("{name}: value with NUL"));
            let value = CString::new(value).map_err(|_| bad())?;
            let name = CString::new(name).map_err(|_| bad())?;
            spank.setenv_c(&name, &value)?;
        }
    }
    say_replaced(&replaced);
    if let Some(bind) = &ready.bind {
        super::bind::apply(spank, bind, vars, local);
    }
    Ok(())
}

/// The variables of a task not made ahead: bound by Slurm (its own GPU list
/// read here), or beyond the budget made ahead.
fn task_vars(
    env: &Env,
    ready: &Ready,
    rank: u32,
    local: u32,
    bind: Option<GpuBind>,
    moved: bool,
) -> Result<core::Injection> {
    let node = &ready.node;
    let bound = match bind {
        Some(bind) if moved => {
            return Err(Error::new(bound_behind_container(&bind)));
        }
        Some(bind) => Some(TaskBinding {
            visible: Visible::read(|name| env.get(name).map(|v| v.map(str::to_string)))?,
            bind,
            gpus_on_node: number(&mut TaskEnv(env), "SLURM_GPUS_ON_NODE")?,
        }),
        None => None,
    };
    let injection = node.task(rank, Some(local), bound.as_ref())?;
    log::debug!("{}", core::task_log_line(node.step(), rank, &injection));
    Ok(injection)
}

/// Whether a plugin before this one set `name` in this task (a container's
/// environment, pyxis's `task_init`) to a value neither the host's nor ours.
fn was_replaced(
    env: &Env,
    host_env: &HashMap<String, String>,
    name: &str,
    ours: &[u8],
) -> Result<bool> {
    Ok(match env.get(name)? {
        Some(now) => now.as_bytes() != ours && host_env.get(name).map(String::as_str) != Some(now),
        None => false,
    })
}

/// The variables as C strings: made once per node ahead, or in the task.
pub fn c_strings(injection: core::Injection) -> Result<CVars> {
    injection
        .into_vars()
        .map(|(name, value)| {
            let bad = || Error::new(format!("{name}: value with NUL"));
            Ok((
                CString::new(name.as_bytes()).map_err(|_| bad())?,
                CString::new(value).map_err(|_| bad())?,
            ))
        })
        .collect()
}

/// One line on the user's terminal naming the replaced variables.
fn say_replaced(replaced: &[String]) {
    if !replaced.is_empty() {
        let text = format!(
            "replaced {} set before this plugin ran (by a plugin listed earlier in plugstack.conf, such as a container's environment) with the values computed on the host",
            replaced.join(" ")
        );
        super::super::handle::notice(&text);
    }
}
