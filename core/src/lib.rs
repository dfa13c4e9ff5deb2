//! The pure core: one [`Step`] (what Slurm says about the step on a node)
//! and the [`Settings`] in; a [`Node`] (the node's share, made once per node)
//! out, and from it one [`Injection`] (the variables to set) per task. The
//! dependencies run one way: [`step`] (what Slurm says) → [`layout`] (where
//! every rank runs; it knows no framework) → [`plan`] (the node's ports,
//! GPUs and network) → [`frameworks`] (each framework's variables, one
//! module each, driven by one table) → [`node`]. Below them all: [`settings`]
//! (what the step asks for), the parsers of Slurm's variables and the limits.
//! The one place the core touches the operating system is [`os`] (the
//! process environment, the node's GPUs, a file a user names); everything
//! else is computation on values, so the SPANK shell and the CLI gather the
//! facts and apply the result.

pub mod distribution;
mod error;
pub mod frameworks;
pub mod gpus;
pub mod hostlist;
pub mod layout;
mod limits;
pub mod network;
pub mod node;
mod number;
pub mod os;
pub mod plan;
pub mod ports;
pub mod roles;
pub mod runs;
pub mod settings;
pub mod step;
pub mod task_map;
pub mod tasks_per_node;
pub mod tf_config;

pub use error::{Error, Result};
pub use frameworks::{FRAMEWORKS, Framework, Frameworks};
pub use layout::{Layout, check_het_rebuild};
pub use limits::{ENV_LIMIT, MAX_GPUS, MAX_NODES, MAX_TASKS, check_size};
pub use node::Node;
pub use settings::Settings;
pub use step::{FromSrun, Gathered, Source, Step};

use layout::required;

/// What the plugin sets in one task's environment, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Injection {
    list: Vec<(&'static str, String)>,
}

impl Injection {
    /// The variables to set, in order.
    pub fn vars(&self) -> impl Iterator<Item = (&'static str, &str)> {
        self.list
            .iter()
            .map(|(name, value)| (*name, value.as_str()))
    }

    /// The variables to set, in order, by value: a caller that copies each
    /// value to C can reuse its buffer instead of copying it once more.
    pub fn into_vars(self) -> impl Iterator<Item = (&'static str, String)> {
        self.list.into_iter()
    }

    /// The value given to `name`, if any.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars().find(|(n, _)| *n == name).map(|(_, v)| v)
    }
}

/// What srun checks before anything is launched, knowing the step's task
/// count and the allocation's node list (the step runs on some of its
/// nodes): the step's size, and each framework its own limits.
pub fn check_before_launch(settings: &Settings, tasks: u32, nodelist: Option<&str>) -> Result<()> {
    frameworks::check_before_launch(settings, &frameworks::Launch { tasks, nodelist })
}

/// One line for the logs at debug level: what the task was given and why.
pub fn explain(step: &Step, rank: u32, injection: &Injection) -> String {
    let layout = match &step.from_srun {
        FromSrun::Map(_) => "srun's task map",
        FromSrun::NoMap => "rebuilt (srun could not get the map)",
        FromSrun::Nothing => "rebuilt (no map from srun)",
    };
    let ports = match &step.resv_ports {
        Some(list) => format!("reserved {list}"),
        None => "from the port base".into(),
    };
    let gpus = match injection.get("CUDA_VISIBLE_DEVICES") {
        Some(list) => format!("CUDA_VISIBLE_DEVICES={list}"),
        None => "CUDA_VISIBLE_DEVICES untouched".into(),
    };
    let names: Vec<&str> = injection.vars().map(|(name, _)| name).collect();
    format!(
        "rank {} on {}: layout {layout}, ports {ports}, {gpus}; set {}",
        rank,
        step.nodename.as_deref().unwrap_or("?"),
        names.join(" ")
    )
}

/// Resolves one task: its node's share, then its own part.
pub fn resolve(settings: &Settings, step: &Step) -> Result<Injection> {
    let rank = required(step.procid, "SLURM_PROCID")?;
    Node::prepare(settings.clone(), step.clone())?.task(rank, None, None)
}
