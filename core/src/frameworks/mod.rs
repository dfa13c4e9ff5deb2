//! The frameworks, one module each, driven by one table ([`FRAMEWORKS`]).
//! Each declares in one place its option, its limits, the ports it takes,
//! what srun checks before launch, how its tasks see the GPUs, and the
//! variables it renders for one rank from the [`Layout`], its ports and the
//! task's GPUs. Adding a framework is one module and one entry here.

pub mod jax;
pub mod pytorch;
pub mod tensorflow;

use super::error::bail;
use super::gpus::{GpuPlan, NodeGpus, Rules};
use super::layout::Layout;
use super::settings::Settings;
use super::step::Step;
use super::{ENV_LIMIT, Injection, Result, distribution::Placement, ports};

/// Every framework, in the order their ports are handed out and their
/// variables set.
pub static FRAMEWORKS: [&Framework; 3] =
    [&tensorflow::FRAMEWORK, &pytorch::FRAMEWORK, &jax::FRAMEWORK];

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
    /// How its tasks see the node's GPUs.
    pub gpus: GpuRule,
    /// Its variables for one task.
    pub render: fn(&Task, &mut Vars) -> Result<()>,
    /// Its columns in `tf-cluster explain`: names, then one rank's values.
    pub columns: &'static [&'static str],
    pub row: fn(&Task) -> Vec<String>,
    /// A line after the table, from rank 0's task (what every rank shares).
    pub summary: fn(&Task) -> Option<String>,
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
pub struct Launch<'a> {
    pub tasks: u32,
    /// The allocation's node list (the step runs on some of its nodes).
    pub nodelist: Option<&'a str>,
}

/// One task as a framework renders it.
pub struct Task<'a> {
    pub settings: &'a Settings,
    pub step: &'a Step,
    pub layout: &'a Layout,
    pub rank: u32,
    pub placement: Placement,
    /// This framework's ports on every node, from the step's [`PortPlan`].
    pub ports: &'a [u16],
    pub gpus: &'a Gpus,
}

/// The GPUs of one task, as the step's frameworks agreed.
#[derive(Debug, Default)]
pub struct Gpus {
    /// The device variables to set, each in Slurm's own tokens
    /// (CUDA_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES, …; empty: leave Slurm's).
    pub vars: Vec<(&'static str, String)>,
    /// The task's own GPUs among those it sees, numbered from 0.
    pub own_ids: Option<String>,
}

/// The frameworks a step asked for: a set over [`FRAMEWORKS`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Frameworks(u8);

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

    pub fn is_empty(self) -> bool {
        self.0 == 0
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

/// The step's ports on every node, each framework's consecutive block in
/// table order: TensorFlow's k-th task takes its k-th, then PyTorch's
/// MASTER_PORT, then JAX's coordinator.
pub struct PortPlan {
    ports: Vec<u16>,
    blocks: Vec<(&'static Framework, std::ops::Range<usize>)>,
}

impl PortPlan {
    pub fn new(settings: &Settings, step: &Step, layout: &Layout) -> Result<PortPlan> {
        let mut blocks = Vec::new();
        let mut end = 0;
        for f in settings.frameworks.iter() {
            let n = (f.ports)(layout) as usize;
            blocks.push((f, end..end + n));
            end += n;
        }
        let ports = ports::ports(settings.port_base, step.resv_ports.as_deref(), end as u32)?;
        Ok(PortPlan { ports, blocks })
    }

    /// The ports of framework `f`.
    pub fn of(&self, f: &'static Framework) -> &[u16] {
        let (_, range) = self
            .blocks
            .iter()
            .find(|(g, _)| std::ptr::eq(*g, f))
            .expect("a port plan covers the step's frameworks");
        &self.ports[range.clone()]
    }
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
    super::layout::check_size(u64::from(launch.tasks), 0)?;
    for f in settings.frameworks.iter() {
        check_limit(f, launch.tasks)?;
        (f.check_before_launch)(settings, launch)?;
    }
    Ok(())
}

fn check_limit(f: &Framework, tasks: u32) -> Result<()> {
    if tasks > f.max_tasks {
        bail!("the step has {tasks} tasks; {}", f.max_tasks_why);
    }
    Ok(())
}

/// The plan shared by every rank of the step: ports and GPUs.
pub struct Plan {
    pub ports: PortPlan,
    gpus: GpuPlan,
}

impl Plan {
    pub fn new(settings: &Settings, step: &Step, layout: &Layout) -> Result<Plan> {
        for f in settings.frameworks.iter() {
            check_limit(f, layout.num_tasks())?;
        }
        let ports = PortPlan::new(settings, step, layout)?;
        // PyTorch's and JAX's rules share this node's GPUs among this
        // node's tasks; TensorFlow's slice is as wide as the busiest node's.
        let node = NodeGpus {
            visible: &step.visible_gpus,
            bind: step.gpu_bind.as_ref(),
            probed: step.node_gpus,
            local_tasks: layout.max_local(),
            node_tasks: step
                .gtids
                .as_ref()
                .map_or(layout.max_local(), |g| g.len() as u32),
            gpus_on_node: step.gpus_on_node,
        };
        let gpus = GpuPlan::new(settings, gpu_rules(settings.frameworks), node)?;
        Ok(Plan { ports, gpus })
    }

    /// The GPUs of local task `local`, by the frameworks' rules (gpus.rs).
    pub fn gpus(&self, local: u32) -> Gpus {
        Gpus {
            vars: self.gpus.task_vars(local),
            own_ids: self.gpus.jax_ids(local),
        }
    }

    /// One task's view, for `f`.
    pub fn task<'a>(
        &'a self,
        f: &'static Framework,
        settings: &'a Settings,
        step: &'a Step,
        layout: &'a Layout,
        rank: u32,
        gpus: &'a Gpus,
    ) -> Result<Task<'a>> {
        Ok(Task {
            settings,
            step,
            layout,
            rank,
            placement: layout.placement(rank)?,
            ports: self.ports.of(f),
            gpus,
        })
    }
}

/// The variables of `rank`: its GPUs, then each framework's in table order.
pub fn render(settings: &Settings, step: &Step, layout: &Layout, rank: u32) -> Result<Injection> {
    let plan = Plan::new(settings, step, layout)?;
    let gpus = plan.gpus(layout.placement(rank)?.local);
    let mut vars = Vars::new();
    for (name, list) in &gpus.vars {
        // Slurm would drop a longer one and leave every GPU visible.
        let size = name.len() + 1 + list.len() + 1;
        if size >= ENV_LIMIT {
            bail!(
                "{name} would be {size} bytes, over the {ENV_LIMIT}-byte limit of one environment variable"
            );
        }
        vars.push((name, list.clone()));
    }
    for f in settings.frameworks.iter() {
        let task = plan.task(f, settings, step, layout, rank, &gpus)?;
        (f.render)(&task, &mut vars)?;
    }
    Ok(Injection {
        list: vars.into_iter().map(|(n, v)| (n.into(), v)).collect(),
    })
}

/// `tf-cluster explain`: a table of every rank, with each framework's
/// columns and the rank's GPUs, then each framework's summary line.
pub struct Explained {
    pub rows: Vec<Vec<String>>,
    pub summaries: Vec<String>,
}

pub fn explain(settings: &Settings, step: &Step, layout: &Layout) -> Result<Explained> {
    let plan = Plan::new(settings, step, layout)?;
    let mut header = vec!["RANK".to_string()];
    for f in settings.frameworks.iter() {
        header.extend(f.columns.iter().map(|c| c.to_string()));
    }
    header.push("GPUS".into());
    let mut rows = vec![header];
    let mut summaries = Vec::new();
    for rank in 0..layout.num_tasks() {
        let gpus = plan.gpus(layout.placement(rank)?.local);
        let mut row = vec![rank.to_string()];
        for f in settings.frameworks.iter() {
            let task = plan.task(f, settings, step, layout, rank, &gpus)?;
            row.extend((f.row)(&task));
            if rank == 0 {
                summaries.extend((f.summary)(&task));
            }
        }
        let visible = gpus.vars.into_iter().next().map(|(_, list)| list);
        row.push(visible.unwrap_or_else(|| "-".into()));
        rows.push(row);
    }
    Ok(Explained { rows, summaries })
}

#[cfg(test)]
mod tests;
