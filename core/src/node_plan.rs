//! The node's plan: what every task of one node shares, from what Slurm says
//! of the step ([`Step`]), its [`Layout`] and the settings: the frameworks'
//! ports and the GPUs of each local task (the node's fast-network interface is
//! the step's, [`crate::network::decision::for_node`]).
//! It knows no framework: what they need comes in as data ([`Needs`]: each
//! framework's [`PortRule`] among the named blocks of [`PortNeeds`]), and
//! each framework's variables are rendered from it (crate::frameworks).

use std::ops::Range;

use super::error::Result;
use super::gpus::{GpuBind, GpuPlan, NodeGpus, Rules, Visible};
use super::layout::Layout;
use super::ports;
use super::settings::{DEFAULT_PORT_BASE, Settings};
use super::step::Step;

/// What the step's frameworks need of the node: its ports and GPU rules.
pub struct Needs {
    pub ports: PortNeeds,
    /// How their tasks see the GPUs.
    pub rules: Rules,
}

/// How a framework takes its block of the node's ports, and which of them
/// its tasks listen on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortRule {
    /// One per local task: local task k takes the k-th and listens on it
    /// (TensorFlow's servers).
    PerTask,
    /// One for the step's rendezvous, which rank 0 alone listens on
    /// (PyTorch's MASTER_PORT, JAX's coordinator).
    Master,
    /// A node's own set, the same list on every node: a port for each of
    /// `named`, then `more` (Ray's ports, then its workers'). Rank 0's node
    /// listens on all of them, every other node on all but `head_only`.
    Fixed {
        named: &'static [&'static str],
        head_only: &'static [&'static str],
        more: u32,
    },
}

impl PortRule {
    /// The ports it takes on each node, given the most tasks on one node.
    pub fn count(self, most_local: u32) -> u32 {
        match self {
            PortRule::PerTask => most_local,
            PortRule::Master => 1,
            PortRule::Fixed { named, more, .. } => named.len() as u32 + more,
        }
    }

    /// The ports of its `block` that local task `local` listens on
    /// (`first`: the task is rank 0).
    pub fn listened(self, block: &[u16], local: u32, first: bool) -> Vec<u16> {
        match self {
            PortRule::PerTask => block.get(local as usize).copied().into_iter().collect(),
            _ if first => block.to_vec(),
            PortRule::Fixed {
                named, head_only, ..
            } if local == 0 => {
                let shared = named
                    .iter()
                    .zip(block)
                    .filter(|(name, _)| !head_only.contains(name))
                    .map(|(_, port)| *port);
                shared
                    .chain(block.iter().skip(named.len()).copied())
                    .collect()
            }
            _ => Vec::new(),
        }
    }
}

/// The blocks of the step's ports on every node, by what each is for, in
/// the order they are handed out: each framework's (in table order), the
/// roles' rendezvous ports, the tasks' own ports, NCCL's RAS port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortNeeds {
    /// Each of the step's frameworks' rule, in table order.
    pub frameworks: Vec<PortRule>,
    /// The most tasks the step has on one node.
    pub most_local: u32,
    /// Each role's rendezvous ports, role by role (crate::role_world).
    pub role_rendezvous: u32,
    /// Each local task's own ports (`--tf-ports-per-task`), task by task.
    pub tasks_own: u32,
    /// The record's port for NCCL's RAS: 0 or 1.
    pub ras: u32,
}

impl PortNeeds {
    /// The sizes of the blocks, in the order they are handed out.
    fn sizes(&self) -> impl Iterator<Item = u32> + '_ {
        let frameworks = self.frameworks.iter().map(|r| r.count(self.most_local));
        frameworks.chain([self.role_rendezvous, self.tasks_own, self.ras])
    }

    /// The ports the step takes on each node.
    pub fn total(&self) -> u32 {
        self.sizes().sum()
    }
}

/// The step's ports on every node, cut into the blocks of [`PortNeeds`].
pub struct PortPlan {
    ports: Vec<u16>,
    /// Each framework's rule and block.
    frameworks: Vec<(PortRule, Range<usize>)>,
    role_rendezvous: Range<usize>,
    tasks_own: Range<usize>,
    ras: Range<usize>,
}

impl PortPlan {
    pub fn new(settings: &Settings, step: &Step, needs: &PortNeeds) -> Result<PortPlan> {
        let mut end = 0;
        let mut blocks = needs.sizes().map(|n| {
            end += n as usize;
            end - n as usize..end
        });
        let frameworks = needs
            .frameworks
            .iter()
            .map(|&rule| (rule, blocks.next().unwrap_or_default()))
            .collect();
        let mut next = || blocks.next().unwrap_or_default();
        let (role_rendezvous, tasks_own, ras) = (next(), next(), next());
        let ports = ports::ports(
            unreserved(settings, step),
            step.resv_ports.as_deref(),
            needs.total(),
        )?;
        Ok(PortPlan {
            ports,
            frameworks,
            role_rendezvous,
            tasks_own,
            ras,
        })
    }

    /// The ports of the `i`-th of the step's frameworks.
    pub fn framework(&self, i: usize) -> &[u16] {
        &self.ports[self.frameworks[i].1.clone()]
    }

    /// Each role's rendezvous ports, role by role.
    pub fn role_rendezvous(&self) -> &[u16] {
        &self.ports[self.role_rendezvous.clone()]
    }

    /// Each local task's own ports, task by task.
    pub fn tasks_own(&self) -> &[u16] {
        &self.ports[self.tasks_own.clone()]
    }

    /// The node's port for NCCL's RAS, where the step takes one.
    pub fn ras(&self) -> Option<u16> {
        self.ports[self.ras.clone()].first().copied()
    }

    /// The frameworks' ports local task `local` listens on (`first`: it is
    /// rank 0), by each framework's rule.
    pub fn listened(&self, local: u32, first: bool) -> Vec<u16> {
        self.frameworks
            .iter()
            .flat_map(|(rule, block)| rule.listened(&self.ports[block.clone()], local, first))
            .collect()
    }
}

/// Where the step's ports come from when Slurm reserved none: an explicit
/// port base, else the step's block of the range by the ids Slurm gives (a
/// heterogeneous step's first component's job id, the same in every
/// component), else, ids unknown (the CLI outside a step), the default base.
pub fn unreserved(settings: &Settings, step: &Step) -> ports::Unreserved {
    match (settings.port_base, step.job_step) {
        (Some(base), _) => ports::Unreserved::Base(base),
        (None, Some((job, id))) => ports::Unreserved::Block {
            range: settings.port_range,
            job: step.het_job_id.unwrap_or(job),
            step: id,
        },
        (None, None) => ports::Unreserved::Base(DEFAULT_PORT_BASE),
    }
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

/// What a task says of its GPUs when Slurm binds them per task: its own
/// list and the binding are known only in the task (slurmstepd sets
/// SLURMD_TRES_BIND and the task's list after forking it).
pub struct TaskBinding {
    pub visible: Visible,
    pub bind: GpuBind,
    /// The task's SLURM_GPUS_ON_NODE.
    pub gpus_on_node: Option<u32>,
}

/// The plan shared by every task of a node.
pub struct NodePlan {
    pub ports: PortPlan,
    /// The node's GPU plan, or why there is none: refused in each task that
    /// takes it, never while planning (the plan is made where a failure
    /// would drain the node).
    gpus: Result<GpuPlan>,
    /// What the GPU plan was made of, for a task bound by Slurm.
    rules: Rules,
    probed: Option<u32>,
    local_tasks: u32,
    node_tasks: u32,
}

impl NodePlan {
    /// `this_node`: the node's index in the layout, when known.
    pub fn new(
        settings: &Settings,
        step: &Step,
        layout: &Layout,
        this_node: Option<u32>,
        needs: &Needs,
    ) -> Result<NodePlan> {
        let ports = PortPlan::new(settings, step, &needs.ports)?;
        // PyTorch's and JAX's rules share this node's GPUs among this
        // node's tasks; TensorFlow's slice is as wide as the busiest node's.
        let local_tasks = layout.max_local();
        let node_tasks = match (this_node, &step.gtids) {
            (Some(node), _) => layout.count(node),
            (None, Some(gtids)) => gtids.len() as u32,
            (None, None) => local_tasks,
        };
        let mut plan = NodePlan {
            ports,
            // Made just below, from the plan's own counts.
            gpus: Ok(GpuPlan::untouched()),
            rules: needs.rules,
            probed: step.node_gpus,
            local_tasks,
            node_tasks,
        };
        plan.gpus = plan.gpu_plan(
            settings,
            &step.visible_gpus,
            step.gpu_bind.as_ref(),
            step.gpus_on_node,
        );
        Ok(plan)
    }

    fn gpu_plan(
        &self,
        settings: &Settings,
        visible: &Visible,
        bind: Option<&GpuBind>,
        gpus_on_node: Option<u32>,
    ) -> Result<GpuPlan> {
        GpuPlan::new(
            settings,
            self.rules,
            NodeGpus {
                visible,
                bind,
                probed: self.probed,
                local_tasks: self.local_tasks,
                node_tasks: self.node_tasks,
                gpus_on_node,
            },
        )
    }

    /// What the step's frameworks ask of the GPUs.
    pub fn rules(&self) -> Rules {
        self.rules
    }

    /// The GPUs of local task `local`: the node's plan, or, for a task
    /// Slurm bound to GPUs of its own, the plan of its binding.
    pub fn gpus(
        &self,
        settings: &Settings,
        local: u32,
        bound: Option<&TaskBinding>,
    ) -> Result<Gpus> {
        let own;
        let plan = match bound {
            Some(b) => {
                own = self.gpu_plan(settings, &b.visible, Some(&b.bind), b.gpus_on_node)?;
                &own
            }
            None => self.gpus.as_ref().map_err(Clone::clone)?,
        };
        Ok(Gpus {
            vars: plan.task_vars(local),
            own_ids: plan.jax_ids(local),
        })
    }
}
