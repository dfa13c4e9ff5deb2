//! One node's share of a step, prepared once per node before its tasks
//! start (the plugin: in slurmstepd's `user_init`, on the host, before any
//! container plugin enters its namespaces; the CLI: from its environment)
//! and then handed to each task: the [`Layout`], the node's [`Plan`] and each
//! framework's shared text. A task takes only its own part: its rank and
//! local id pick its variables.
//!
//! The dependencies run one way: what Slurm says ([`Step`]) → the layout →
//! the node's plan → each framework's variables (crate::frameworks) → here.

use super::distribution::Placement;
use super::error::{Result, bail};
use super::frameworks::{self, Framework, Gpus, Shared, Task, Vars};
use super::handoff::FromSrun;
use super::injection::Injection;
use super::layout::{Layout, required};
use super::limits::{ENV_LIMIT, check_env_total};
use super::node_plan::{NodePlan, TaskBinding};
use super::role_world::{RoleWorlds, World};
use super::settings::Settings;
use super::step::{Handed, RUN_ID_VAR, Step};

/// A node's share of the step, made once.
pub struct Node {
    settings: Settings,
    step: Step,
    layout: Layout,
    /// This node's index in the layout, when known (SLURMD_NODENAME, else
    /// SLURM_NODEID).
    this_node: Option<u32>,
    plan: NodePlan,
    /// What each of the step's frameworks shares among a node's tasks, in
    /// table order ("" for none).
    shared: Vec<String>,
    /// The step's roles (`--tf-roles`) and each task's own ports.
    worlds: RoleWorlds,
    /// Each rank's NVLink domain, where the step's nodes are in blocks.
    nvl: Option<crate::nvl_domains::Domains>,
}

impl Node {
    /// Lays out the step and plans this node: every failure is the step's
    /// (the caller carries it to each task, never fails the node).
    pub fn prepare(settings: Settings, step: Step) -> Result<Node> {
        let layout = Layout::build(&step, settings.host_template.as_deref())?;
        for f in settings.frameworks.iter() {
            frameworks::check_limit(f, layout.num_tasks())?;
            if let Some(check) = f.check_layout {
                check(&settings, &layout)?;
            }
        }
        let this_node = layout.this_node(&step)?;
        let components = component_tasks(&step, &layout)?;
        let roles = frameworks::check_roles(&settings, layout.num_tasks(), components.as_deref())?;
        let needs = frameworks::needs(&settings, &layout, roles.len());
        let plan = NodePlan::new(&settings, &step, &layout, this_node, &needs)?;
        let per_role = frameworks::per_role(&settings).len() as u32;
        let blocks = (plan.ports.role_rendezvous(), plan.ports.tasks_own());
        let worlds = RoleWorlds::new(&settings, &layout, &roles, per_role, blocks)?;
        let mut shared = Vec::with_capacity(needs.ports.frameworks.len());
        for (i, f) in settings.frameworks.iter().enumerate() {
            let node = Shared {
                settings: &settings,
                step: &step,
                layout: &layout,
                ports: plan.ports.framework(i),
            };
            shared.push(f.shared.map(|s| s(&node)).transpose()?.unwrap_or_default());
        }
        // Every cache a task reads is filled here, once, not in each task.
        layout.warm();
        let nvl = step
            .nvl_blocks
            .as_ref()
            .and_then(|b| crate::nvl_domains::Domains::of(b, &layout));
        Ok(Node {
            nvl,
            settings,
            step,
            layout,
            this_node,
            plan,
            shared,
            worlds,
        })
    }

    /// The node of a step srun's word was applied to ([`Step::gather_handed`]):
    /// where it does not fit, the frameworks the step only inherited are left
    /// out (None: no framework is left). Every failure is the step's.
    pub fn prepare_handed(handed: Handed) -> Result<Option<Node>> {
        let Handed {
            settings,
            step,
            inherited,
            ..
        } = handed;
        if inherited.is_empty() {
            return Node::prepare(settings, step).map(Some);
        }
        match Node::prepare(settings.clone(), step.clone()) {
            Ok(node) => Ok(Some(node)),
            Err(_) => {
                let mut rest = settings;
                rest.frameworks = rest.frameworks.without(inherited);
                if rest.frameworks.is_empty() {
                    return Ok(None);
                }
                Node::prepare(rest, step).map(Some)
            }
        }
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    pub fn step(&self) -> &Step {
        &self.step
    }

    /// The variables of the task of global rank `rank`, Slurm's local task
    /// `local` of this node when known; `bound`: its own GPUs when Slurm
    /// binds them per task. A rank the layout puts elsewhere is refused: the
    /// layout is then not the one Slurm made.
    pub fn task(
        &self,
        rank: u32,
        local: Option<u32>,
        bound: Option<&TaskBinding>,
    ) -> Result<Injection> {
        let placement = self.layout.placement(rank)?;
        self.check_task(rank, placement, local)?;
        let gpus = self.plan.gpus(&self.settings, placement.local, bound)?;
        let mut vars = Vars::with_capacity(16);
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
        let world = self.worlds.world(&self.layout, rank, placement)?;
        for (i, f) in self.settings.frameworks.iter().enumerate() {
            (f.render)(&self.view(i, f, rank, placement, world, &gpus), &mut vars)?;
        }
        let rendered = self.settings.frameworks.iter().any(|f| f.renders_world);
        if world.role.is_some() && !rendered {
            let port = self.worlds.role_port(world.role, 0).map(|p| p[0]);
            vars.extend(self.worlds.world_vars(&self.layout, world, port));
        }
        if let Some(node) = &self.step.network {
            vars.extend(frameworks::network_vars(self.settings.frameworks, node));
        }
        if let Some(id) = self.step.run_id() {
            vars.push((RUN_ID_VAR, id));
        }
        if let Some(domain) = self.nvl.as_ref().and_then(|d| d.vars(rank)) {
            vars.extend(domain);
        }
        let mut list: Vec<_> = vars.into_iter().map(|(n, v)| (n.into(), v)).collect();
        let step_port = self.step_port();
        let placed = (rank, placement, world);
        list.extend(
            self.worlds
                .vars(&self.layout, &self.step, placed, step_port)?,
        );
        let mut injection = Injection { list };
        if self.settings.apptainer_env {
            injection = injection.with_apptainer_mirror()?;
        }
        check_env_total("tf-cluster's variables would take", injection.exec_size())?;
        Ok(injection)
    }

    /// The step-wide rendezvous port of a step with roles: the first
    /// per-role framework's own (PyTorch's MASTER_PORT without roles).
    fn step_port(&self) -> Option<u16> {
        let first = *frameworks::per_role(&self.settings).first()?;
        let i = self
            .settings
            .frameworks
            .iter()
            .position(|f| std::ptr::eq(f, first))?;
        self.plan.ports.framework(i).first().copied()
    }

    /// The node's port for NCCL's RAS (crate::frameworks::ras_ports): every
    /// rank of the node that runs NCCL listens on it.
    pub fn ras_port(&self) -> Option<u16> {
        self.plan.ports.ras()
    }

    /// The ports this node's tasks will listen on: a framework taking one
    /// port per local task (TensorFlow's servers) listens on each of this
    /// node's tasks' own; one taking a port per step (PyTorch's MASTER_PORT,
    /// JAX's coordinator) listens on it on rank 0's node only; NCCL's RAS
    /// listens on the record's port on every node.
    pub fn listening_ports(&self) -> Vec<u16> {
        let Some(here) = self.this_node else {
            return Vec::new();
        };
        let rank0 = self.layout.placement(0).ok().filter(|p| p.node == here);
        let mut ports: Vec<u16> = (0..self.layout.count(here))
            .flat_map(|l| self.ports_of(l, rank0.is_some_and(|p| p.local == l)))
            .collect();
        // Each task's own ports (a server's), and with roles each role's
        // rank 0 listens on its role's ports.
        for (local, rank) in (0u32..).zip(self.layout.ranks_on(here)) {
            ports.extend(self.worlds.task_ports(local));
            let placement = Placement { node: here, local };
            let Ok(world) = self.worlds.world(&self.layout, rank, placement) else {
                continue;
            };
            if world.role.is_some() && world.rank == 0 {
                for j in 0..frameworks::per_role(&self.settings).len() as u32 {
                    ports.extend(self.worlds.role_port(world.role, j).unwrap_or_default());
                }
            }
        }
        // NCCL's RAS, on every node with a task.
        if self.layout.count(here) > 0 {
            ports.extend(self.ras_port());
        }
        ports
    }

    /// This node's tasks as (rank, local id), in local order.
    pub fn here(&self) -> Vec<(u32, u32)> {
        match self.this_node {
            Some(n) => self.layout.ranks_on(n).into_iter().zip(0..).collect(),
            None => Vec::new(),
        }
    }

    /// The GPU list local task `local` is given (the first device variable
    /// set; None: Slurm's left as it is).
    pub fn gpus_of(&self, local: u32) -> Option<String> {
        let gpus = self.plan.gpus(&self.settings, local, None).ok()?;
        gpus.vars.into_iter().next().map(|(_, list)| list)
    }

    /// Whether each task is shown the node's GPUs and uses its
    /// LOCAL_RANK-th (PyTorch's `set_device(LOCAL_RANK)`).
    pub fn picks_gpu_by_local_rank(&self) -> bool {
        self.plan.rules().whole.is_some()
    }

    /// The role and index of `rank` (`worker 3`): its step role's
    /// (`--tf-roles`), else the one a framework of the step gives it
    /// ([`Framework::role_of`]: TensorFlow's job names).
    pub fn role_of(&self, rank: u32) -> Option<String> {
        if self.worlds.any() {
            let placement = self.layout.placement(rank).ok()?;
            let world = self.worlds.world(&self.layout, rank, placement).ok()?;
            return Some(format!("{} {}", self.worlds.name(world.role?), world.rank));
        }
        self.settings
            .frameworks
            .iter()
            .find_map(|f| f.role_of?(&self.settings, &self.layout, rank))
    }

    /// The step's private directory on this node, where a framework of the
    /// step keeps one ([`Framework::private_dir`]) and srun gave the step
    /// its secret.
    pub fn private_dir(&self) -> Option<String> {
        let secret = self.step.secret.as_ref()?;
        self.settings
            .frameworks
            .iter()
            .find_map(|f| f.private_dir.map(|dir| dir(secret)))
    }

    /// The ports local task `local` listens on (`first`: it is rank 0):
    /// see [`Node::listening_ports`], each framework's by its port rule
    /// ([`crate::node_plan::PortRule`]).
    pub fn ports_of(&self, local: u32, first: bool) -> Vec<u16> {
        self.plan.ports.listened(local, first)
    }

    /// This node's address as the step's ranks reach it (its name on the
    /// fast network with a host template, else its name), when known.
    pub fn this_address(&self) -> Option<String> {
        self.this_node.map(|n| self.layout.address(n).into_owned())
    }

    /// The step's nodes.
    pub fn num_nodes(&self) -> u32 {
        self.layout.num_nodes()
    }

    /// The step's tasks on every node.
    pub fn num_tasks(&self) -> u32 {
        self.layout.num_tasks()
    }

    /// The global rank of this node's local task `local`, as the layout
    /// (srun's map, or the one rebuilt from Slurm's variables) places it.
    pub fn rank_of_local(&self, local: u32) -> Result<u32> {
        let Some(node) = self.this_node else {
            bail!("this node is not among the step's hosts");
        };
        match self.layout.ranks_on(node).get(local as usize) {
            Some(&rank) => Ok(rank),
            None => bail!(
                "the task layout has no local task {local} on this node, but Slurm started one"
            ),
        }
    }

    /// Every task of this node rendered ahead, in local order, as
    /// (rank, its variables): what is left to a forked task is then to set
    /// them (a forked process faults on every page of code it runs and of
    /// memory it writes). None when this node is unknown or the variables
    /// would take more than `budget` bytes (each task's TF_CONFIG lists
    /// every rank): the tasks then render their own.
    pub fn render_here(&self, budget: usize) -> Option<Vec<(u32, Result<Injection>)>> {
        let ranks = self.layout.ranks_on(self.this_node?);
        let mut size = 0usize;
        let mut out = Vec::with_capacity(ranks.len());
        for (local, rank) in (0u32..).zip(ranks) {
            let injection = self.task(rank, Some(local), None);
            if let Ok(i) = &injection {
                size += i.vars().map(|(n, v)| n.len() + v.len() + 2).sum::<usize>();
            }
            if size > budget {
                return None;
            }
            out.push((rank, injection));
        }
        Some(out)
    }

    /// Slurm started `rank` on this node as local task `local`: the layout
    /// must say the same.
    fn check_task(&self, rank: u32, placement: Placement, local: Option<u32>) -> Result<()> {
        let node_ok = self.this_node.is_none_or(|n| n == placement.node);
        let local_ok = local.is_none_or(|l| l == placement.local);
        if node_ok && local_ok {
            return Ok(());
        }
        let here = match self.this_node {
            Some(n) => self.layout.host(n).to_string(),
            None => "this node".into(),
        };
        bail!(
            "the task layout on {here} is not the one Slurm made: it puts rank {rank} on {} as local task {}, but Slurm started it here as local task {}",
            self.layout.host(placement.node),
            placement.local,
            local.map_or("?".into(), |l| l.to_string())
        );
    }

    /// Framework `f` (the `i`-th of the step's) as one task of `world`
    /// sees it: with roles, a per-role framework's port is its role's.
    fn view<'a>(
        &'a self,
        i: usize,
        f: &'static Framework,
        rank: u32,
        placement: Placement,
        world: World,
        gpus: &'a Gpus,
    ) -> Task<'a> {
        debug_assert!(std::ptr::eq(
            self.settings.frameworks.iter().nth(i).unwrap(),
            f
        ));
        let j = frameworks::per_role(&self.settings)
            .iter()
            .position(|g| std::ptr::eq(*g, f));
        let role_port = j.and_then(|j| self.worlds.role_port(world.role, j as u32));
        Task {
            settings: &self.settings,
            step: &self.step,
            layout: &self.layout,
            rank,
            placement,
            world,
            ports: role_port.unwrap_or_else(|| self.plan.ports.framework(i)),
            gpus,
            shared: &self.shared[i],
        }
    }

    /// `tf-cluster explain`: a table of every rank, with each framework's
    /// columns and the rank's GPUs, then each framework's summary line.
    pub fn rank_table(&self) -> Result<RankTable> {
        let mut header = vec!["RANK".to_string()];
        for f in self.settings.frameworks.iter() {
            header.extend(f.columns.iter().map(|c| c.to_string()));
        }
        header.extend(self.worlds.columns().into_iter().map(String::from));
        header.push("GPUS".into());
        let mut rows = vec![header];
        let mut summaries = Vec::new();
        for rank in 0..self.layout.num_tasks() {
            let placement = self.layout.placement(rank)?;
            let gpus = self.plan.gpus(&self.settings, placement.local, None)?;
            let world = self.worlds.world(&self.layout, rank, placement)?;
            let mut row = vec![rank.to_string()];
            for (i, f) in self.settings.frameworks.iter().enumerate() {
                let task = self.view(i, f, rank, placement, world, &gpus);
                row.extend((f.row)(&task));
                if rank == 0 {
                    summaries.extend((f.summary)(&task));
                }
            }
            row.extend(self.worlds.row(&self.layout, placement, world));
            let visible = gpus.vars.into_iter().next().map(|(_, list)| list);
            row.push(visible.unwrap_or_else(|| "-".into()));
            rows.push(row);
        }
        if let Some(node) = &self.step.network {
            summaries.push(frameworks::network_summary(&self.settings, node));
        }
        summaries.extend(self.worlds.summary(&self.layout, self.step_port()));
        Ok(RankTable { rows, summaries })
    }
}

/// A heterogeneous step's tasks per component (None: not one).
fn component_tasks(step: &Step, layout: &Layout) -> Result<Option<Vec<u32>>> {
    if step.het_nodelists.is_empty() {
        return Ok(None);
    }
    let nodes = (0..layout.num_nodes()).map(|i| (layout.host(i), layout.count(i)));
    super::step_roles::component_tasks(nodes, &step.het_nodelists)
        .map(Some)
        .map_err(super::error::Error::new)
}

/// The table of `tf-cluster explain`.
pub struct RankTable {
    pub rows: Vec<Vec<String>>,
    pub summaries: Vec<String>,
}

/// One line for the logs at debug level: what the task was given and why.
pub fn task_log_line(step: &Step, rank: u32, injection: &Injection) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frameworks::{Frameworks, by_option};
    use crate::source::Given;

    /// A task's variables, as slurmstepd would show them, on a node
    /// without GPUs.
    fn vars(list: Vec<(&'static str, &'static str)>) -> Given {
        Given::vars(list).gpus(0)
    }

    /// `srun -N1 -n2 --torch-cluster --tf-apptainer-env=true`, rank 1: each
    /// of PyTorch's variables once more under both prefixes; without the
    /// setting none.
    #[test]
    fn resolve_mirrors_only_when_asked() {
        let task = || {
            vars(vec![
                ("SLURM_PROCID", "1"),
                ("SLURM_STEP_NUM_TASKS", "2"),
                ("SLURM_STEP_NODELIST", "n1"),
                ("SLURM_STEP_TASKS_PER_NODE", "2"),
                ("SLURM_NODEID", "0"),
                ("SLURM_GTIDS", "0,1"),
            ])
        };
        let mut settings = Settings {
            frameworks: Frameworks::only(by_option("torch-cluster").unwrap()),
            ..Settings::default()
        };
        let step = Step::gather(&settings, &mut task())
            .unwrap()
            .step()
            .unwrap();
        let plain = resolve(&settings, &step).unwrap();
        assert_eq!(plain.get("RANK"), Some("1"));
        assert_eq!(plain.get("MASTER_ADDR"), Some("n1"));
        assert!(plain.vars().all(|(n, _)| !n.contains("ENV_")), "{plain:?}");
        settings.set("apptainer-env", "true").unwrap();
        let mirrored = resolve(&settings, &step).unwrap();
        assert_eq!(mirrored.vars().count(), 3 * plain.vars().count());
        for (name, value) in plain.vars() {
            for prefix in ["APPTAINERENV_", "SINGULARITYENV_"] {
                assert_eq!(
                    mirrored.get(&format!("{prefix}{name}")),
                    Some(value),
                    "{name}"
                );
            }
        }
        assert_eq!(mirrored.get("APPTAINERENV_RANK"), Some("1"));
        assert_eq!(mirrored.get("SINGULARITYENV_MASTER_ADDR"), Some("n1"));
    }
}
