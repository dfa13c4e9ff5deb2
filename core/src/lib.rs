//! The pure core: one [`Step`] (what Slurm says about a task) and the
//! [`Settings`] in, one [`Injection`] (the variables to set) out. No FFI, no
//! I/O: the SPANK shell and the CLI gather the facts and apply the result.

mod cluster;
mod error;
pub mod gpus;
pub mod hostlist;
pub mod layout;
pub mod node;
mod number;
pub mod ports;
pub mod roles;
pub mod settings;
pub mod step;
pub mod task_map;
pub mod tasks_per_node;
pub mod tf_config;

use cluster::required;
pub use cluster::{Cluster, RankInfo, check_het_rebuild};
pub use error::{Error, Result};
pub use settings::Settings;
pub use step::{Source, Step};

use error::bail;
use hostlist::HostList;

/// More tasks than this cannot fit TF_CONFIG in one environment variable
/// (each address takes at least 6 bytes), so larger steps are refused before
/// any work scales with them.
pub const MAX_TASKS: u32 = (tf_config::ENV_LIMIT / 6) as u32;

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

    /// The value given to `name`, if any.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars().find(|(n, _)| *n == name).map(|(_, v)| v)
    }
}

/// What srun checks before anything is launched, knowing the step's task
/// count and the allocation's node list (the step runs on some of its nodes):
/// the spec must cover the tasks, and TF_CONFIG must be able to fit.
pub fn check_before_launch(settings: &Settings, tasks: u32, nodelist: Option<&str>) -> Result<()> {
    if tasks > MAX_TASKS {
        bail!(
            "the step has {tasks} tasks; TF_CONFIG for more than {MAX_TASKS} cannot fit in one environment variable"
        );
    }
    if !settings.frameworks.tf {
        return Ok(());
    }
    let roles = settings.roles.for_step(tasks)?;
    let shortest_host = nodelist
        .and_then(|list| HostList::parse(list, usize::MAX).ok())
        .and_then(|hosts| hosts.iter().map(str::len).min())
        .unwrap_or(1);
    // Ports are port base + k or ports Slurm reserved; reserved ports are
    // taken to be unprivileged (≥ 1000), so at least 4 digits.
    let port_digits = number::digits(u64::from(settings.port_base)).min(4);
    let size = tf_config::min_size(
        roles.iter().map(|r| (r.name.as_str(), r.count)),
        shortest_host,
        port_digits,
        settings.rpc_layer.as_deref(),
    );
    tf_config::check_min_size(size, tasks)
}

/// One line for the logs at debug level: what the task was given and why.
pub fn explain(step: &Step, injection: &Injection) -> String {
    let layout = match (&step.task_map, step.verdict) {
        (Some(_), _) => "srun's task map",
        (None, Some(task_map::Verdict::None)) => "rebuilt (srun could not get the map)",
        (None, _) => "rebuilt (no map from srun)",
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

/// Resolves one task: its TF_CONFIG and CUDA_VISIBLE_DEVICES.
pub fn resolve(settings: &Settings, step: &Step) -> Result<Injection> {
    let rank = required(step.procid, "SLURM_PROCID")?;
    let cluster = Cluster::new(settings, step)?;
    cluster.injection(rank)
}
