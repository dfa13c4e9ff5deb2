//! The pure core: one [`Step`] (what Slurm says about a task) and the
//! [`Settings`] in, one [`Injection`] (the variables to set) out. The
//! [`Layout`] says where every rank runs and knows no framework; each
//! framework is one module of [`frameworks`], driven by one table. The one
//! place the core touches the operating system is [`os`] (the process
//! environment, the node's GPUs, a file a user names); everything else is
//! computation on values, so the SPANK shell and the CLI gather the facts and
//! apply the result.

pub mod distribution;
mod error;
pub mod frameworks;
pub mod gpus;
pub mod hostlist;
pub mod layout;
pub mod network;
mod number;
pub mod os;
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
pub use settings::Settings;
pub use step::{FromSrun, Gathered, Source, Step};

use layout::required;

/// Most tasks a step may have: every task's work is linear in it (parsing
/// srun's map, one pass over the placements), bounded in time and memory.
/// Frameworks have lower limits of their own (TensorFlow's TF_CONFIG).
pub const MAX_TASKS: u32 = 1 << 18;

/// Most nodes a step may have: bounds every host list a task expands.
pub const MAX_NODES: u32 = 1 << 16;

/// Slurm's setenv and execve refuse a variable of this many bytes or more,
/// counting `NAME=`, the value and the NUL.
pub const ENV_LIMIT: usize = 131_072;

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
pub fn explain(step: &Step, injection: &Injection) -> String {
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
        step.procid.map_or("?".into(), |r| r.to_string()),
        step.nodename.as_deref().unwrap_or("?"),
        names.join(" ")
    )
}

/// Resolves one task: its GPUs and each framework's variables.
pub fn resolve(settings: &Settings, step: &Step) -> Result<Injection> {
    let rank = required(step.procid, "SLURM_PROCID")?;
    let layout = Layout::build(step, settings.host_template.as_deref())?;
    frameworks::render(settings, step, &layout, rank)
}
