//! The node's plan: what every task of one node shares, from what Slurm says
//! of the step ([`Step`]), its [`Layout`] and the settings: the frameworks'
//! ports and the GPUs of each local task (the node's fast-network interface is
//! the step's, [`crate::network::decision::for_node`]).
//! It knows no framework: what they need comes in as data ([`Needs`]), and
//! each framework's variables are rendered from it (crate::frameworks).

use super::error::Result;
use super::gpus::{GpuBind, GpuPlan, NodeGpus, Rules, Visible};
use super::layout::Layout;
use super::ports;
use super::settings::{DEFAULT_PORT_BASE, Settings};
use super::step::Step;

/// What the step's frameworks need of the node, in table order.
pub struct Needs {
    /// The ports each framework takes on every node.
    pub ports: Vec<u32>,
    /// How their tasks see the GPUs.
    pub rules: Rules,
}

/// The step's ports on every node, each framework's consecutive block in
/// table order: TensorFlow's k-th task takes its k-th, then PyTorch's
/// MASTER_PORT, then JAX's coordinator.
pub struct PortPlan {
    ports: Vec<u16>,
    /// Each framework's block, in the order of [`Needs::ports`].
    blocks: Vec<std::ops::Range<usize>>,
}

impl PortPlan {
    pub fn new(settings: &Settings, step: &Step, wants: &[u32]) -> Result<PortPlan> {
        let mut blocks = Vec::with_capacity(wants.len());
        let mut end = 0;
        for &n in wants {
            blocks.push(end..end + n as usize);
            end += n as usize;
        }
        let ports = ports::ports(
            unreserved(settings, step),
            step.resv_ports.as_deref(),
            end as u32,
        )?;
        Ok(PortPlan { ports, blocks })
    }

    /// The ports of the `i`-th of the step's frameworks.
    pub fn of(&self, i: usize) -> &[u16] {
        &self.ports[self.blocks[i].clone()]
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
