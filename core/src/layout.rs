//! Where every rank of the step runs: hosts, tasks per node and each rank's
//! placement, from srun's task map or rebuilt from the step's variables,
//! checked against what Slurm says of this node. It knows no framework: each
//! framework's module reads what it needs from it.

use std::borrow::Cow;
use std::cell::OnceCell;
use std::collections::HashMap;

use super::distribution::{self, Distribution, Placement};
use super::error::Result;
use super::error::{bail, shown};
use super::handoff::FromSrun;
use super::hostlist::HostList;
use super::limits::check_size;
use super::runs::Runs;
use super::step::Step;
use super::task_map::TaskMap;

/// The step's layout.
#[derive(Debug)]
pub struct Layout {
    /// The nodes, by their names in Slurm, in node-index order.
    hosts: HostList,
    /// Tasks of the step on each node.
    counts: Vec<u32>,
    /// The node of each rank, as runs: never expanded per rank unless a
    /// framework needs every rank ([`Layout::placements`]).
    ranks: Runs,
    /// Each host's name on the fast network, `{}` standing for the node's.
    template: Option<String>,
    /// Each node's [`Layout::group_of`], computed when first asked.
    groups: OnceCell<Vec<u32>>,
}

impl Layout {
    /// Lays out the step (srun's map, else rebuilt) and checks it against
    /// this node's SLURM_GTIDS. `template`: the host template, if any.
    pub fn build(step: &Step, template: Option<&str>) -> Result<Layout> {
        let counts = required(step.tasks_per_node.as_ref(), "SLURM_STEP_TASKS_PER_NODE")?;
        let hosts = required(step.hosts.as_ref(), "SLURM_STEP_NODELIST")?;
        // srun's map was checked when it was read, and must name these hosts.
        let mapped = matches!(step.from_srun, FromSrun::Map(_));
        if let Some(dup) = hosts.first_duplicate().filter(|_| !mapped) {
            bail!("SLURM_STEP_NODELIST names {dup} twice: two tasks would share one address");
        }
        if hosts.len() != counts.len() {
            bail!(
                "SLURM_STEP_NODELIST names {} node(s) but SLURM_STEP_TASKS_PER_NODE gives {} count(s)",
                hosts.len(),
                counts.len()
            );
        }
        let total: u64 = counts.iter().map(|&c| u64::from(c)).sum();
        check_size(total, hosts.len())?;
        let total = total as u32;
        // Without SLURM_STEP_NUM_TASKS the counts say the size (a framework
        // may want more evidence: TensorFlow's role spec).
        if let Some(n) = step.num_tasks.filter(|&n| n != total) {
            bail!("SLURM_STEP_NUM_TASKS is {n} but SLURM_STEP_TASKS_PER_NODE adds up to {total}");
        }
        let (hosts, counts, ranks) = match &step.from_srun {
            FromSrun::Map(map) => from_map(map, hosts, counts)?,
            FromSrun::NoMap | FromSrun::Nothing => rebuild(step, hosts.clone(), counts.clone())?,
        };
        let layout = Layout {
            hosts,
            counts,
            ranks,
            template: template.map(str::to_string),
            groups: OnceCell::new(),
        };
        layout.check_this_node(step)?;
        Ok(layout)
    }

    pub fn num_tasks(&self) -> u32 {
        self.ranks.len()
    }

    pub fn num_nodes(&self) -> u32 {
        self.hosts.len() as u32
    }

    /// Where `rank` runs: O(runs).
    pub fn placement(&self, rank: u32) -> Result<Placement> {
        match self.ranks.placement(rank) {
            Some((node, local)) => Ok(Placement { node, local }),
            None => bail!(
                "SLURM_PROCID {rank} is outside the step's {} task(s)",
                self.num_tasks()
            ),
        }
    }

    /// Every rank's placement, in rank order: O(ranks).
    pub fn placements(&self) -> impl Iterator<Item = Placement> + '_ {
        let mut placed = vec![0u32; self.hosts.len()];
        self.ranks.iter().map(move |node| {
            let local = &mut placed[node as usize];
            *local += 1;
            Placement {
                node,
                local: *local - 1,
            }
        })
    }

    /// Tasks of the step on node `node`.
    pub fn count(&self, node: u32) -> u32 {
        self.counts[node as usize]
    }

    /// The most tasks of the step on one node.
    pub fn max_local(&self) -> u32 {
        self.counts.iter().copied().max().unwrap_or(0)
    }

    /// Node `node`'s name in Slurm.
    pub fn host(&self, node: u32) -> &str {
        self.hosts.get(node as usize)
    }

    /// Node `node`'s address: its name on the fast network with a host
    /// template, else its name.
    pub fn address(&self, node: u32) -> Cow<'_, str> {
        let host = self.host(node);
        match &self.template {
            Some(template) => Cow::Owned(template.replace("{}", host)),
            None => Cow::Borrowed(host),
        }
    }

    /// The longest address, for sizing text that lists them all.
    pub fn longest_address(&self) -> usize {
        let extra = self.template.as_ref().map_or(0, |t| t.len() - 2);
        self.hosts.longest() + extra
    }

    /// Node `node`'s index in the order of the nodes' first ranks (rank 0's
    /// node is 0): PyTorch's GROUP_RANK. O(nodes) for regular layouts, made
    /// once.
    pub fn group_of(&self, node: u32) -> u32 {
        let groups = self
            .groups
            .get_or_init(|| self.ranks.first_rank_order(self.hosts.len()));
        groups[node as usize]
    }

    /// This node's index, found by its name (SLURMD_NODENAME, else
    /// SLURM_NODEID); None when neither is known.
    pub fn this_node(&self, step: &Step) -> Result<Option<u32>> {
        let node = match (&step.nodename, step.node_id) {
            (Some(name), _) => match self.hosts.position(name) {
                Some(i) => i as u32,
                None => bail!("this node, {name}, is not among the step's hosts"),
            },
            (None, Some(id)) => id,
            (None, None) => return Ok(None),
        };
        if node as usize >= self.hosts.len() {
            bail!(
                "SLURM_NODEID {node} is outside the step's {} node(s)",
                self.hosts.len()
            );
        }
        Ok(Some(node))
    }

    /// The ranks on node `node`, in local order: O(terms + its ranks).
    pub fn ranks_on(&self, node: u32) -> Vec<u32> {
        self.ranks.ranks_on(node)
    }

    /// Fills the caches a task reads ([`Layout::group_of`]), so that the
    /// node's tasks share them instead of each making its own.
    pub fn warm(&self) {
        if self.num_nodes() > 0 {
            self.group_of(0);
        }
    }

    /// Compares the ranks computed for this node, found by its name
    /// (SLURMD_NODENAME, else SLURM_NODEID), with SLURM_GTIDS, the ground
    /// truth: a mismatch must fail the task rather than give it a wrong
    /// answer.
    fn check_this_node(&self, step: &Step) -> Result<()> {
        let Some(gtids) = &step.gtids else {
            return Ok(());
        };
        let Some(node) = self.this_node(step)? else {
            return Ok(());
        };
        // Slurm lists the node's ranks in local order: the k-th is local task k.
        let computed = self.ranks.ranks_on(node);
        if computed != *gtids || computed.len() != self.counts[node as usize] as usize {
            let hint = match (&step.from_srun, step.het_nodelists.is_empty()) {
                (FromSrun::Map(_), _) => " (srun's task map disagrees with this node)",
                (_, false) => {
                    " (without srun's task map, heterogeneous steps need block layouts in every component)"
                }
                (_, true) => "",
            };
            let list = |ids: &[u32]| ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
            bail!(
                "the task layout on {} is not the one Slurm made: computed ranks {} but SLURM_GTIDS is {}{hint}",
                self.hosts.get(node as usize),
                list(&computed),
                shown(&list(gtids))
            );
        }
        Ok(())
    }
}

/// The hosts in node-index order, their counts and the ranks' nodes, from
/// srun's map: it must agree with what slurmstepd says of the step.
fn from_map(
    map: &TaskMap,
    nodelist: &HostList,
    counts: &[u32],
) -> Result<(HostList, Vec<u32>, Runs)> {
    let map_counts = map.runs.counts(map.hosts.len());
    // Both lists are usually the same: compare them whole, and index the
    // names only when they are not.
    let agrees = if map.hosts == *nodelist {
        map_counts == counts
    } else {
        let given: HashMap<&str, u32> = nodelist.iter().zip(counts.iter().copied()).collect();
        map.hosts.len() == nodelist.len()
            && map
                .hosts
                .iter()
                .zip(&map_counts)
                .all(|(host, n)| given.get(host) == Some(n))
    };
    if !agrees {
        bail!(
            "srun's task map does not match SLURM_STEP_NODELIST and SLURM_STEP_TASKS_PER_NODE: it is not this step's"
        );
    }
    Ok((map.hosts.clone(), map_counts, map.runs.clone()))
}

/// The layout rebuilt from the step's variables when srun gave no map: the
/// distribution, the host file or the heterogeneous components' node lists.
fn rebuild(step: &Step, hosts: HostList, counts: Vec<u32>) -> Result<(HostList, Vec<u32>, Runs)> {
    let (hosts, counts) = if step.het_nodelists.is_empty() {
        (hosts, counts)
    } else {
        distribution::het_order(&hosts, &counts, &step.het_nodelists)?
    };
    // Each component of a heterogeneous step has its own distribution, and a
    // task sees only its own (Slurm even reports `cyclic` for a one-task
    // component). Components are laid out in blocks, which Slurm's defaults
    // always amount to; a node whose component really is laid out otherwise
    // fails the SLURM_GTIDS check.
    let dist = if step.het_nodelists.is_empty() {
        step.distribution
    } else {
        Distribution::Block
    };
    if let Some(pattern) = &step.block_topology {
        distribution::check_topology(dist, pattern, &counts, step.het_nodelists.len())?;
    }
    let placements = match (dist, &step.hostfile) {
        (Distribution::Arbitrary, Some(listed)) => {
            distribution::place_listed(&hosts, &counts, listed)?
        }
        (Distribution::Arbitrary, None) => {
            bail!("the layout of an arbitrary distribution is only known from SLURM_HOSTFILE")
        }
        (dist, _) => distribution::place(&counts, dist),
    };
    let node_of: Vec<u32> = placements.iter().map(|p| p.node).collect();
    Ok((hosts, counts, Runs::from_node_of(&node_of)))
}

/// A value the step must have.
pub(crate) fn required<T>(value: Option<T>, name: &str) -> Result<T> {
    match value {
        Some(v) => Ok(v),
        None => bail!("{name} is not set: not inside a Slurm step?"),
    }
}
