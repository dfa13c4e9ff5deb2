//! What a framework declares: one [`Framework`] each, and what its functions
//! are given (the step before launch, a task, a node's shared part).

use crate::addresses::InterfaceVar;
use crate::distribution::Placement;
use crate::error::Result;
use crate::hostlist::HostList;
use crate::layout::Layout;
use crate::node_plan::{Gpus, PortRule};
use crate::number;
use crate::role_world::World;
use crate::secret::Secret;
use crate::settings::Settings;
use crate::step::Step;

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
    /// The ports it takes on each node, after those of the frameworks before
    /// it, and which of them its tasks listen on.
    pub ports: PortRule,
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
    /// What it makes of `--tf-roles` (crate::step_roles).
    pub roles: RoleRule,
    /// It renders a task's world itself (RANK, WORLD_SIZE, MASTER_ADDR, …):
    /// with roles, the plugin adds no world variables of its own.
    pub renders_world: bool,
    /// The role and index it gives a rank without `--tf-roles` (`worker 3`:
    /// TensorFlow's job names), for the record.
    pub role_of: Option<RoleOf>,
    /// Its ranks may talk over NCCL: a step that writes a record takes a
    /// port on each node for NCCL's RAS (crate::record::DEBUG_DEFAULTS).
    pub nccl: bool,
    /// A directory of the step's own on each node, named from the step's
    /// secret, that slurmstepd removes when the step ends (Ray's temp
    /// directory's parent).
    pub private_dir: Option<fn(&Secret) -> String>,
}

/// A rank's role and index in a framework's own roles, from the settings
/// and the layout.
pub type RoleOf = fn(&Settings, &Layout, u32) -> Option<String>;

/// What a framework makes of `--tf-roles`.
pub enum RoleRule {
    /// Each role gets a rendezvous of its own (a port per role), for the
    /// settings `check` accepts (why not, else).
    PerRole(fn(&Settings) -> Result<()>),
    /// Refused, saying why (the refusal goes on to name the frameworks
    /// that take roles).
    Refused(&'static str),
    /// The roles are the other frameworks': it takes no rendezvous per role.
    Indifferent,
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
    /// The ports slurmctld reserved for the step (`12043-12045`), when it
    /// reserved some.
    pub resv_ports: Option<&'a str>,
    /// The most tasks the step has on one node, when known.
    pub most_local: Option<u32>,
    /// The step's command (srun's argv), when known.
    pub command: Option<&'a [String]>,
    /// A heterogeneous step's tasks per component, when known.
    pub components: Option<&'a [u32]>,
}

impl Launch<'_> {
    /// The shortest name in the node list (1 where unknown): the least a
    /// node's address takes.
    pub fn shortest_host(&self) -> usize {
        self.nodelist
            .and_then(|list| HostList::parse(list, usize::MAX).ok())
            .and_then(|hosts| hosts.iter().map(str::len).min())
            .unwrap_or(1)
    }

    /// The fewest digits a port of the step has: ports are the port base +
    /// k, the range's, or ports Slurm reserved, taken to be unprivileged
    /// (≥ 1000), so at least 4 digits.
    pub fn port_digits(settings: &Settings) -> usize {
        let lowest = settings.port_base.unwrap_or(settings.port_range.first);
        number::digits(u64::from(lowest)).min(4)
    }
}

/// One task as a framework renders it.
pub struct Task<'a> {
    pub settings: &'a Settings,
    pub step: &'a Step,
    pub layout: &'a Layout,
    pub rank: u32,
    pub placement: Placement,
    /// The task's world: its role's (`--tf-roles`), else the whole step's.
    pub world: World,
    /// This framework's ports on every node, from the node's plan (with
    /// roles, its rendezvous port of the task's role).
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
