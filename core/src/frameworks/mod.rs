//! The frameworks, one module each, driven by one table ([`FRAMEWORKS`]).
//! Each declares in one place its option, its limits, the ports it takes,
//! what srun checks before launch, how its tasks see the GPUs, the part of
//! its variables a node's tasks share, and the variables it renders for one
//! rank from the [`Layout`] and the node's plan (crate::plan). Adding a
//! framework is one module and one entry here.

pub mod jax;
pub mod pytorch;
pub mod tensorflow;

use super::error::bail;
use super::gpus::Rules;
use super::layout::Layout;
use super::network::{self, InterfaceVar};
pub use super::plan::Gpus;
use super::plan::Needs;
use super::settings::Settings;
use super::step::Step;
use super::{Result, distribution::Placement};

/// Every framework, in the order their ports are handed out and their
/// variables set.
pub static FRAMEWORKS: [&Framework; 3] =
    [&tensorflow::FRAMEWORK, &pytorch::FRAMEWORK, &jax::FRAMEWORK];

/// The value of a framework's option that turns it off for one step, though
/// the job (sbatch, salloc) or the site asked for it: `--tf-cluster=off`.
pub const OFF: &str = "off";

/// The option that turns every framework off for one step, whatever the job
/// asked: `--tf-off`.
pub const ALL_OFF: &str = "tf-off";

/// [`ALL_OFF`]'s help.
pub const ALL_OFF_HELP: &str = "no framework's variables for this step, whatever the job asked (one framework: --tf-cluster=off, --torch-cluster=off, --jax-cluster=off)";

/// Checks a framework option's value as srun, sbatch and salloc take it:
/// [`OFF`], the empty value (the bare option), or the framework's argument.
pub fn check_value(f: &Framework, value: &str) -> Result<()> {
    match &f.arg {
        _ if value == OFF => Ok(()),
        Some(arg) => (arg.set)(&mut Settings::default(), value),
        None if value.is_empty() => Ok(()),
        None => bail!("--{} takes no value but {OFF} (not {value:?})", f.option),
    }
}

/// One framework's declaration.
pub struct Framework {
    /// Its name in messages.
    pub name: &'static str,
    /// The option that asks for it: `--<option>` on srun, sbatch and salloc.
    pub option: &'static str,
    /// The option's argument, when it takes one.
    pub arg: Option<Arg>,
    pub help: &'static str,
    /// An option handed down by sbatch/salloc that does not fit a step
    /// leaves that step alone with a warning instead of refusing it (a
    /// role spec written for the job's size).
    pub skip_when_inherited: bool,
    /// Most tasks it serves, and why no more.
    pub max_tasks: u32,
    pub max_tasks_why: &'static str,
    /// Ports it takes on each node, after those of the frameworks before it.
    pub ports: fn(&Layout) -> u32,
    /// srun's check before anything is launched.
    pub check_before_launch: fn(&Settings, &Launch) -> Result<()>,
    /// The same rules checked against the layout, wherever a node is
    /// prepared (each node of the step, the CLI's preview).
    pub check_layout: Option<fn(&Settings, &Layout) -> Result<()>>,
    /// How its tasks see the node's GPUs.
    pub gpus: GpuRule,
    /// The part of its variables every task of a node shares, rendered
    /// once per node before the tasks start (TensorFlow's cluster).
    pub shared: Option<fn(&Shared) -> Result<String>>,
    /// Its variables for one task.
    pub render: fn(&Task, &mut Vars) -> Result<()>,
    /// Its columns in `tf-cluster explain`: names, then one rank's values.
    pub columns: &'static [&'static str],
    pub row: fn(&Task) -> Vec<String>,
    /// A line after the table, from rank 0's task (what every rank shares).
    pub summary: fn(&Task) -> Option<String>,
    /// The variables its libraries read for the interface of their data
    /// connections, set when the step names a network (crate::network).
    pub interface_vars: &'static [&'static InterfaceVar],
}

/// The variables of one task, in order.
pub type Vars = Vec<(&'static str, String)>;

/// An option's argument (`--tf-cluster=ps:1,worker:3`).
pub struct Arg {
    /// Its name in `--help`.
    pub name: &'static str,
    /// Checks the value and sets what it says; the empty value is the bare
    /// option.
    pub set: fn(&mut Settings, &str) -> Result<()>,
    /// plugstack.conf may give its default (`torch-cluster=elastic`), which
    /// the bare option keeps: it does not ask for the framework.
    pub site_default: bool,
}

/// How a framework's common program picks its GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuRule {
    /// Each task sees its own slice of the node's GPUs (TensorFlow).
    Slice,
    /// Each task sees all of the node's GPUs and uses the one its local rank
    /// names (PyTorch's `set_device(LOCAL_RANK)`).
    Whole,
    /// Each task is told which of the GPUs it sees are its own (JAX's
    /// JAX_LOCAL_DEVICE_IDS): its slice, wherever the others' rule puts it.
    OwnIds,
}

/// What srun knows before launch.
#[derive(Default)]
pub struct Launch<'a> {
    pub tasks: u32,
    /// The allocation's node list (the step runs on some of its nodes).
    pub nodelist: Option<&'a str>,
    /// The step's node count, when known.
    pub nodes: Option<u32>,
    /// Whether Slurm reserved ports for the step, when known.
    pub reserved_ports: Option<bool>,
}

/// One task as a framework renders it.
pub struct Task<'a> {
    pub settings: &'a Settings,
    pub step: &'a Step,
    pub layout: &'a Layout,
    pub rank: u32,
    pub placement: Placement,
    /// This framework's ports on every node, from the node's plan.
    pub ports: &'a [u16],
    pub gpus: &'a Gpus,
    /// What [`Framework::shared`] rendered once for the node ("" without).
    pub shared: &'a str,
}

/// What a framework's part shared by a node's tasks is made from.
pub struct Shared<'a> {
    pub settings: &'a Settings,
    pub step: &'a Step,
    pub layout: &'a Layout,
    pub ports: &'a [u16],
}

pub use crate::settings::Frameworks;

/// The set's members are [`FRAMEWORKS`]' entries.
impl Frameworks {
    pub fn only(f: &'static Framework) -> Frameworks {
        Frameworks::default().with(f)
    }

    pub fn with(self, f: &'static Framework) -> Frameworks {
        Frameworks(self.0 | 1 << index(f))
    }

    pub fn contains(self, f: &'static Framework) -> bool {
        self.0 & 1 << index(f) != 0
    }

    /// The chosen frameworks, in table order.
    pub fn iter(self) -> impl Iterator<Item = &'static Framework> {
        FRAMEWORKS
            .iter()
            .enumerate()
            .filter(move |(i, _)| self.0 & 1 << i != 0)
            .map(|(_, f)| *f)
    }
}

/// `f`'s place in [`FRAMEWORKS`].
pub fn index(f: &Framework) -> usize {
    FRAMEWORKS
        .iter()
        .position(|g| std::ptr::eq(*g, f))
        .expect("every framework is in the table")
}

/// What the step's frameworks ask of the GPUs: each framework's rule, and
/// the option that asked for it (for messages).
pub fn gpu_rules(frameworks: Frameworks) -> Rules {
    let mut rules = Rules::default();
    for f in frameworks.iter() {
        match f.gpus {
            GpuRule::Slice => {}
            GpuRule::Whole => rules.whole = rules.whole.or(Some(f.option)),
            GpuRule::OwnIds => rules.own_ids = rules.own_ids.or(Some(f.option)),
        }
    }
    rules
}

/// srun's check of the step before launch: the step's size, then each
/// framework's own.
pub fn check_before_launch(settings: &Settings, launch: &Launch) -> Result<()> {
    super::check_size(u64::from(launch.tasks), 0)?;
    for f in settings.frameworks.iter() {
        check_limit(f, launch.tasks)?;
        (f.check_before_launch)(settings, launch)?;
    }
    Ok(())
}

pub fn check_limit(f: &Framework, tasks: u32) -> Result<()> {
    if tasks > f.max_tasks {
        bail!("the step has {tasks} tasks; {}", f.max_tasks_why);
    }
    Ok(())
}

/// What the step's frameworks need of a node: their ports and GPU rules.
pub fn needs(settings: &Settings, layout: &Layout) -> Needs {
    Needs {
        ports: settings
            .frameworks
            .iter()
            .map(|f| (f.ports)(layout))
            .collect(),
        rules: gpu_rules(settings.frameworks),
    }
}

/// This node's interface and what its tasks get (each node finds its own).
pub fn network_summary(settings: &Settings, node: &network::NodeNetwork) -> String {
    let set: Vec<String> = network::vars(settings.frameworks, node)
        .into_iter()
        .map(|(n, v)| format!("{n}={v}"))
        .collect();
    let mut line = format!(
        "network {}: this node's interface {}; set {}",
        node.network,
        node.interface,
        if set.is_empty() {
            "nothing".into()
        } else {
            set.join(" ")
        }
    );
    if !node.kept.is_empty() {
        line.push_str(&format!("; kept the user's {}", node.kept.join(" ")));
    }
    line
}

#[cfg(test)]
mod tests;
