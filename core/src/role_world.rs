//! A step's roles over its layout (`--tf-roles`): each task's world in its
//! role (rank, size, local rank, the role's first rank's node), the ports
//! of each task's own (`--tf-ports-per-task`), each role's rendezvous
//! ports, and the address book of every role's tasks. It knows no
//! framework: how many rendezvous ports a role takes comes in as data.
//!
//! The roles' ports are two blocks of the node's plan
//! (crate::node_plan::PortNeeds), the same on every node: each role's
//! rendezvous ports (`per_role` of them, role by role), and K ports for each
//! local task (local task l takes K·l … K·l + K − 1 of them). No two tasks
//! of a node share a port, and none is a role's rendezvous port nor the
//! step-wide one (the frameworks' own).

use std::borrow::Cow;
use std::collections::HashMap;

use super::distribution::Placement;
use super::error::{Result, bail};
use super::layout::Layout;
use super::limits::{ENV_LIMIT, exec_size};
use super::settings::Settings;
use super::step::Step;
use super::step_roles::{DEFAULT_PORTS_PER_TASK, addrs_var};

/// One task's world: its role's, or the whole step's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct World {
    /// The task's role, by its index (None: the step has no roles).
    pub role: Option<usize>,
    pub rank: u32,
    pub size: u32,
    /// Its place among the world's tasks on its node, and their count.
    pub local: u32,
    pub local_size: u32,
    /// The node of the world's rank 0.
    pub master_node: u32,
    /// Its node's place among the world's nodes, in the order of their
    /// first ranks, and their count (PyTorch's GROUP_RANK, GROUP_WORLD_SIZE).
    pub group: u32,
    pub groups: u32,
}

impl World {
    /// The whole step as one world.
    pub fn step(layout: &Layout, rank: u32, p: Placement) -> Result<World> {
        Ok(World {
            role: None,
            rank,
            size: layout.num_tasks(),
            local: p.local,
            local_size: layout.count(p.node),
            master_node: layout.placement(0)?.node,
            group: layout.group_of(p.node),
            groups: layout.num_nodes(),
        })
    }
}

/// One role over the layout.
struct Span {
    name: String,
    first: u32,
    count: u32,
    master_node: u32,
    /// Each of its nodes: (its group, the role's tasks there).
    nodes: HashMap<u32, (u32, u32)>,
}

/// The least exec takes of a task's environment for the roles' address
/// books (crate::limits::exec_size): each `address:port` at least
/// `address` bytes, one book per role (`roles`: name and count), given
/// once more under each of `prefixes` (`--tf-apptainer-env`).
pub fn books_min_exec_size(roles: &[(String, u32)], address: usize, prefixes: &[&str]) -> usize {
    let mut total = 0;
    for (name, count) in roles {
        let count = *count as usize;
        let value = count * address + count.saturating_sub(1);
        let var = addrs_var(name).len() + 1 + value;
        total += exec_size(var)
            + prefixes
                .iter()
                .map(|p| exec_size(p.len() + var))
                .sum::<usize>();
    }
    total
}

/// The ports of each task's own: the step's, else the default of a step
/// with roles, else none.
pub fn ports_per_task(settings: &Settings) -> u32 {
    match (settings.ports_per_task, &settings.step_roles) {
        (Some(k), _) => k,
        (None, Some(_)) => DEFAULT_PORTS_PER_TASK,
        (None, None) => 0,
    }
}

/// The step's roles over its layout, made once per node.
pub struct RoleWorlds {
    spans: Vec<Span>,
    per_role: u32,
    per_task: u32,
    /// Each role's rendezvous ports, role by role.
    rendezvous: Vec<u16>,
    /// Each local task's own ports, task by task.
    own: Vec<u16>,
    /// Each role's address book: (variable, value).
    book: Vec<(String, String)>,
}

impl RoleWorlds {
    /// `roles`: each role's name and count, in rank order (their counts
    /// add up to the step's tasks); `rendezvous` and `own`: their blocks of
    /// the node's ports.
    pub fn new(
        settings: &Settings,
        layout: &Layout,
        roles: &[(String, u32)],
        per_role: u32,
        (rendezvous, own): (&[u16], &[u16]),
    ) -> Result<RoleWorlds> {
        let mut spans = Vec::with_capacity(roles.len());
        let mut first = 0;
        for (name, count) in roles {
            spans.push(Span {
                name: name.clone(),
                first,
                count: *count,
                master_node: layout.placement(first)?.node,
                nodes: HashMap::new(),
            });
            first += count;
        }
        let mut worlds = RoleWorlds {
            spans,
            per_role,
            per_task: ports_per_task(settings),
            rendezvous: rendezvous.to_vec(),
            own: own.to_vec(),
            book: Vec::new(),
        };
        worlds.fill(layout)?;
        Ok(worlds)
    }

    /// Each role's nodes and the address book, in one pass over the ranks.
    fn fill(&mut self, layout: &Layout) -> Result<()> {
        if self.spans.is_empty() {
            return Ok(());
        }
        let mut books: Vec<String> = vec![String::new(); self.spans.len()];
        let mut role = 0;
        for (rank, p) in (0u32..).zip(layout.placements()) {
            while rank >= self.spans[role].first + self.spans[role].count {
                role += 1;
            }
            let span = &mut self.spans[role];
            let groups = span.nodes.len() as u32;
            span.nodes.entry(p.node).or_insert((groups, 0)).1 += 1;
            let book = &mut books[role];
            if !book.is_empty() {
                book.push(',');
            }
            let port = self.task_ports(p.local).first().copied().unwrap_or(0);
            book.push_str(&format!("{}:{port}", layout.address(p.node)));
        }
        for (span, book) in self.spans.iter().zip(books) {
            let name = addrs_var(&span.name);
            if name.len() + book.len() + 2 >= ENV_LIMIT {
                bail!(
                    "{name} would be {} bytes, over the {ENV_LIMIT}-byte limit of one environment variable: split role {} in smaller roles",
                    name.len() + book.len() + 2,
                    span.name
                );
            }
            self.book.push((name, book));
        }
        Ok(())
    }

    /// The index of `rank`'s role.
    fn role_of(&self, rank: u32) -> Option<usize> {
        self.spans
            .iter()
            .position(|s| (s.first..s.first + s.count).contains(&rank))
    }

    /// `rank`'s world (placed at `p`): its role's, or the step's without
    /// roles.
    pub fn world(&self, layout: &Layout, rank: u32, p: Placement) -> Result<World> {
        let Some(role) = self.role_of(rank) else {
            return World::step(layout, rank, p);
        };
        let span = &self.spans[role];
        let end = span.first + span.count;
        let local = layout
            .ranks_on(p.node)
            .into_iter()
            .filter(|r| (span.first..rank).contains(r))
            .count() as u32;
        let (group, local_size) = span.nodes.get(&p.node).copied().unwrap_or((0, 0));
        debug_assert!(rank < end);
        Ok(World {
            role: Some(role),
            rank: rank - span.first,
            size: span.count,
            local,
            local_size,
            master_node: span.master_node,
            group,
            groups: span.nodes.len() as u32,
        })
    }

    /// The `j`-th rendezvous port of role `role` (None: no roles).
    pub fn role_port(&self, role: Option<usize>, j: u32) -> Option<&[u16]> {
        let i = (role? as u32 * self.per_role + j) as usize;
        self.rendezvous.get(i..i + 1)
    }

    /// The ports of local task `local`'s own.
    pub fn task_ports(&self, local: u32) -> &[u16] {
        let start = (local * self.per_task) as usize;
        self.own
            .get(start..start + self.per_task as usize)
            .unwrap_or_default()
    }

    /// Role `role`'s name.
    pub fn name(&self, role: usize) -> &str {
        &self.spans[role].name
    }

    /// Whether the step has roles.
    pub fn any(&self) -> bool {
        !self.spans.is_empty()
    }

    /// The variables of a task of `world` placed at `p` (global `rank`):
    /// its role, the step-wide world (`step_port`: the step-wide
    /// rendezvous port), every role's addresses, its own ports, and the
    /// engines' variables; `set`: names already set (a framework's), not
    /// set again.
    pub fn vars(
        &self,
        layout: &Layout,
        step: &Step,
        (rank, p, world): (u32, Placement, World),
        step_port: Option<u16>,
    ) -> Result<Vec<(Cow<'static, str>, String)>> {
        let mut vars: Vec<(Cow<'static, str>, String)> = Vec::new();
        let own = self.task_ports(p.local);
        if !own.is_empty() {
            let list: Vec<String> = own.iter().map(u16::to_string).collect();
            vars.push(("TF_CLUSTER_PORTS".into(), list.join(",")));
        }
        let Some(role) = world.role else {
            return Ok(vars);
        };
        vars.push(("TF_CLUSTER_ROLE".into(), self.name(role).to_string()));
        let step_master = layout.address(layout.placement(0)?.node).into_owned();
        vars.extend([
            ("TF_CLUSTER_STEP_RANK".into(), rank.to_string()),
            (
                "TF_CLUSTER_STEP_WORLD_SIZE".into(),
                layout.num_tasks().to_string(),
            ),
            ("TF_CLUSTER_STEP_MASTER_ADDR".into(), step_master),
        ]);
        if let Some(port) = step_port {
            vars.push(("TF_CLUSTER_STEP_MASTER_PORT".into(), port.to_string()));
        }
        for (name, value) in &self.book {
            vars.push((Cow::Owned(name.clone()), value.clone()));
        }
        let host = match &step.engine_host {
            Some(host) => host.clone(),
            None => layout.address(p.node).into_owned(),
        };
        let engine = [
            ("VLLM_HOST_IP", Some(host.clone())),
            ("SGLANG_HOST_IP", Some(host)),
            ("VLLM_PORT", own.get(1).map(u16::to_string)),
        ];
        for (name, value) in engine {
            if let Some(value) = value.filter(|_| !step.engine_kept.iter().any(|k| k == name)) {
                vars.push((name.into(), value));
            }
        }
        Ok(vars)
    }

    /// Its columns in `tf-cluster preview`: the role, the rank in it and its
    /// size, its rendezvous (the role's first node and port), the task's
    /// own ports.
    pub fn columns(&self) -> Vec<&'static str> {
        let mut columns = Vec::new();
        if self.any() {
            columns.extend(["ROLE", "ROLE_RANK", "ROLE_MASTER"]);
        }
        if self.per_task > 0 {
            columns.push("PORTS");
        }
        columns
    }

    /// One task's cells of [`RoleWorlds::columns`].
    pub fn row(&self, layout: &Layout, p: Placement, world: World) -> Vec<String> {
        let mut row = Vec::new();
        if let Some(role) = world.role {
            let port = self.role_port(Some(role), 0).map_or(0, |p| p[0]);
            row.extend([
                self.name(role).to_string(),
                format!("{}/{}", world.rank, world.size),
                format!("{}:{port}", layout.address(world.master_node)),
            ]);
        }
        if self.per_task > 0 {
            let own: Vec<String> = self
                .task_ports(p.local)
                .iter()
                .map(u16::to_string)
                .collect();
            row.push(own.join(","));
        }
        row
    }

    /// The lines after `tf-cluster preview`'s table: the step-wide world's
    /// rendezvous and each role's address book.
    pub fn summary(&self, layout: &Layout, step_port: Option<u16>) -> Vec<String> {
        if !self.any() {
            return Vec::new();
        }
        let master = layout
            .placement(0)
            .map(|p| layout.address(p.node).into_owned())
            .unwrap_or_default();
        let mut lines = vec![format!(
            "roles: the step-wide world TF_CLUSTER_STEP_MASTER_ADDR={master} TF_CLUSTER_STEP_MASTER_PORT={}",
            step_port.map_or("-".into(), |p| p.to_string())
        )];
        lines.extend(
            self.book
                .iter()
                .map(|(name, value)| format!("{name}={value}")),
        );
        lines
    }

    /// The world's own variables for a step whose frameworks set none of
    /// them (JAX alone): RANK … MASTER_PORT of the task's role.
    pub fn world_vars(
        &self,
        layout: &Layout,
        world: World,
        port: Option<u16>,
    ) -> Vec<(&'static str, String)> {
        let mut vars = vec![
            ("RANK", world.rank.to_string()),
            ("WORLD_SIZE", world.size.to_string()),
            ("LOCAL_RANK", world.local.to_string()),
            ("LOCAL_WORLD_SIZE", world.local_size.to_string()),
            (
                "MASTER_ADDR",
                layout.address(world.master_node).into_owned(),
            ),
        ];
        vars.extend(port.map(|p| ("MASTER_PORT", p.to_string())));
        vars
    }
}
