//! Which node runs each rank, and as which local task, for each of Slurm's
//! task distributions (slurm_step_layout.c). The counts per node come from
//! Slurm; the order of ranks over them is what the distribution decides.

use std::collections::HashMap;

use super::error::{Result, bail, shown};
use super::hostlist::HostList;
use super::number::parse_u32;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Distribution {
    /// Fill each node in node-list order (Slurm's default).
    #[default]
    Block,
    /// One task per node per round, skipping nodes that are full.
    Cyclic,
    /// Blocks of `n` consecutive ranks per node per round.
    Plane(u32),
    /// Rank r runs on the r-th host of SLURM_HOSTFILE.
    Arbitrary,
}

impl Distribution {
    /// From SLURM_DISTRIBUTION (`block`, `cyclic:block`, `plane`, `arbitrary`,
    /// …, only the node level before ':' matters) and SLURM_DIST_PLANESIZE.
    pub fn from_env(dist: Option<&str>, plane_size: Option<&str>) -> Result<Distribution> {
        let Some(dist) = dist else {
            return Ok(Distribution::Block);
        };
        let node_level = dist.split([':', ',']).next().unwrap_or_default();
        match node_level {
            "" | "*" | "block" => Ok(Distribution::Block),
            "cyclic" => Ok(Distribution::Cyclic),
            "plane" => match plane_size.and_then(parse_u32) {
                Some(n) if n > 0 => Ok(Distribution::Plane(n)),
                _ => bail!(
                    "SLURM_DISTRIBUTION is plane but SLURM_DIST_PLANESIZE is {}",
                    plane_size.map_or("unset".into(), shown)
                ),
            },
            "arbitrary" => Ok(Distribution::Arbitrary),
            _ => bail!("unknown SLURM_DISTRIBUTION {}", shown(dist)),
        }
    }
}

/// Where one rank runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// Index into the step's node list.
    pub node: u32,
    /// The task's index among the tasks of its node (SLURM_LOCALID).
    pub local: u32,
}

/// Placement of every rank, indexed by rank, for a distribution that follows
/// from the counts alone (not Arbitrary). `counts[i]` tasks run on node i.
pub fn place(counts: &[u32], dist: Distribution) -> Vec<Placement> {
    let total: usize = counts.iter().map(|&c| c as usize).sum();
    let mut ranks = Vec::with_capacity(total);
    let block = match dist {
        Distribution::Block => {
            for (node, &count) in counts.iter().enumerate() {
                ranks.extend((0..count).map(|local| Placement {
                    node: node as u32,
                    local,
                }));
            }
            return ranks;
        }
        Distribution::Cyclic => 1,
        Distribution::Plane(n) => n,
        Distribution::Arbitrary => unreachable!("arbitrary layouts come from place_listed"),
    };
    // Rounds over the nodes that still have tasks to place.
    let mut placed = vec![0u32; counts.len()];
    let mut open: Vec<u32> = (0..counts.len() as u32).collect();
    while !open.is_empty() {
        for &node in &open {
            let i = node as usize;
            let take = block.min(counts[i] - placed[i]);
            ranks.extend((placed[i]..placed[i] + take).map(|local| Placement { node, local }));
            placed[i] += take;
        }
        open.retain(|&node| placed[node as usize] < counts[node as usize]);
    }
    ranks
}

/// Placement of rank r on the node named `task_hosts[r]` (an arbitrary
/// distribution); the result must give each node its count.
pub fn place_listed(
    hosts: &HostList,
    counts: &[u32],
    task_hosts: &HostList,
) -> Result<Vec<Placement>> {
    let total: usize = counts.iter().map(|&c| c as usize).sum();
    if task_hosts.len() < total {
        bail!(
            "SLURM_HOSTFILE names {} host(s) for {total} tasks",
            task_hosts.len()
        );
    }
    let index: HashMap<&str, u32> = hosts
        .iter()
        .enumerate()
        .map(|(i, h)| (h, i as u32))
        .collect();
    let mut placed = vec![0u32; counts.len()];
    let mut ranks = Vec::with_capacity(total);
    for host in task_hosts.iter().take(total) {
        let Some(&node) = index.get(host) else {
            bail!("SLURM_HOSTFILE names {host}, which is not a node of this step");
        };
        ranks.push(Placement {
            node,
            local: placed[node as usize],
        });
        placed[node as usize] += 1;
    }
    if placed != counts {
        bail!(
            "SLURM_HOSTFILE does not match the step's tasks per node: it is not this step's layout"
        );
    }
    Ok(ranks)
}

/// The nodes of a heterogeneous step in rank order: component by component
/// (SLURM_STEP_NODELIST itself is sorted), each node with its count.
pub fn het_order(
    hosts: &HostList,
    counts: &[u32],
    components: &[HostList],
) -> Result<(HostList, Vec<u32>)> {
    let index: HashMap<&str, usize> = hosts.iter().enumerate().map(|(i, h)| (h, i)).collect();
    let mut seen = vec![false; hosts.len()];
    let mut names = Vec::with_capacity(hosts.len());
    let mut ordered = Vec::with_capacity(hosts.len());
    for list in components {
        for host in list.iter() {
            // A component's allocation may hold nodes this step does not use.
            let Some(&i) = index.get(host) else { continue };
            if std::mem::replace(&mut seen[i], true) {
                bail!(
                    "node {host} is in two components of the heterogeneous step: its rank order cannot be known"
                );
            }
            names.push(hosts.get(i).to_string());
            ordered.push(counts[i]);
        }
    }
    if ordered.len() != hosts.len() {
        bail!("the heterogeneous components' node lists do not cover SLURM_STEP_NODELIST");
    }
    Ok((
        HostList::from_names(names.iter().map(String::as_str)),
        ordered,
    ))
}

/// Refuses a block layout that Slurm may have ordered by network topology.
/// From 26.05 on (measured on 26.05; 22.05, 24.11 and 25.11 keep node-list order),
/// under a topology plugin (`pattern`, SLURM_TOPOLOGY_ADDR_PATTERN, has more
/// than one level) Slurm fills the nodes of a block distribution in topology
/// order, which no task can see: each knows only its own ranks (SLURM_GTIDS).
/// A node whose ranks differ would fail its check, but the others would set a
/// TF_CONFIG naming wrong hosts, so every node refuses alike. Cyclic and plane
/// distributions keep node-list order; one node (or one per het component)
/// has nothing to order.
pub fn check_topology(
    dist: Distribution,
    pattern: &str,
    counts: &[u32],
    het_components: usize,
) -> Result<()> {
    let ordered_nodes = counts.len() > het_components.max(1);
    if dist == Distribution::Block && pattern.contains('.') && ordered_nodes {
        let per_node = counts.iter().copied().max().unwrap_or(1);
        bail!(
            "this Slurm lays block distributions out in network-topology order (SLURM_TOPOLOGY_ADDR_PATTERN {}), which a task cannot see: use srun -m plane={per_node} (the same blocks in node-list order) or -m cyclic",
            shown(pattern)
        );
    }
    Ok(())
}

/// The global ids of the tasks on `node`, in local order: what Slurm gives
/// that node as SLURM_GTIDS (the tests' view; a task asks its Layout).
#[cfg(test)]
fn ranks_on(placements: &[Placement], node: u32) -> impl Iterator<Item = u32> + '_ {
    placements
        .iter()
        .enumerate()
        .filter(move |(_, p)| p.node == node)
        .map(|(rank, _)| rank as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The layout as Slurm's tids[node] lists.
    fn tids(counts: &[u32], dist: Distribution) -> Vec<Vec<u32>> {
        let placements = place(counts, dist);
        for (rank, p) in placements.iter().enumerate() {
            let on_node: Vec<u32> = ranks_on(&placements, p.node).collect();
            assert_eq!(on_node[p.local as usize], rank as u32);
        }
        (0..counts.len() as u32)
            .map(|n| ranks_on(&placements, n).collect())
            .collect()
    }

    #[test]
    fn block_fills_nodes_in_list_order() {
        assert_eq!(
            tids(&[2, 2, 1], Distribution::Block),
            [vec![0, 1], vec![2, 3], vec![4]]
        );
    }

    #[test]
    fn cyclic_deals_one_per_node_skipping_full_nodes() {
        // slurm_step_layout.c's own example: cpus 4,2,4,2 and 10 tasks.
        assert_eq!(
            tids(&[3, 2, 3, 2], Distribution::Cyclic),
            [vec![0, 4, 8], vec![1, 5], vec![2, 6, 9], vec![3, 7]]
        );
    }

    #[test]
    fn plane_deals_blocks() {
        // slurm_step_layout.c's own example: plane 2, 6 tasks, counts 4,1,1.
        assert_eq!(
            tids(&[4, 1, 1], Distribution::Plane(2)),
            [vec![0, 1, 4, 5], vec![2], vec![3]]
        );
        assert_eq!(
            tids(&[3, 3], Distribution::Plane(2)),
            [vec![0, 1, 4], vec![2, 3, 5]]
        );
    }

    #[test]
    fn distribution_from_slurm_variables() {
        use Distribution::*;
        assert_eq!(Distribution::from_env(None, None), Ok(Block));
        assert_eq!(
            Distribution::from_env(Some("block:cyclic"), None),
            Ok(Block)
        );
        assert_eq!(Distribution::from_env(Some("cyclic"), None), Ok(Cyclic));
        assert_eq!(
            Distribution::from_env(Some("cyclic:cyclic,Pack"), None),
            Ok(Cyclic)
        );
        assert_eq!(
            Distribution::from_env(Some("plane"), Some("4")),
            Ok(Plane(4))
        );
        for (dist, size, why) in [
            ("plane", None, "SLURM_DIST_PLANESIZE is unset"),
            ("plane", Some("0"), "PLANESIZE is \"0\""),
            ("diagonal", None, "unknown SLURM_DISTRIBUTION"),
        ] {
            let e = Distribution::from_env(Some(dist), size)
                .unwrap_err()
                .to_string();
            assert!(e.contains(why), "{dist}: {e}");
        }
    }

    fn hosts(list: &str) -> HostList {
        HostList::parse(list, 100).unwrap()
    }

    #[test]
    fn arbitrary_follows_the_host_file() {
        // Measured on the testbed: hosts node2,node1,node2,node3 → GTIDS 1 | 0,2 | 3.
        let placed = place_listed(
            &hosts("node[1-3]"),
            &[1, 2, 1],
            &hosts("node2,node1,node2,node3"),
        )
        .unwrap();
        let on = |n| ranks_on(&placed, n).collect::<Vec<_>>();
        assert_eq!([on(0), on(1), on(2)], [vec![1], vec![0, 2], vec![3]]);
        for (file, why) in [
            ("node2,node1", "names 2 host(s) for 4 tasks"),
            (
                "node2,node1,node2,node4",
                "node4, which is not a node of this step",
            ),
            ("node1,node1,node2,node3", "does not match"),
        ] {
            let e = place_listed(&hosts("node[1-3]"), &[1, 2, 1], &hosts(file))
                .unwrap_err()
                .to_string();
            assert!(e.contains(why), "{file}: {e}");
        }
    }

    #[test]
    fn topology_ordered_blocks_are_refused() {
        // Measured on Slurm 26.05 with topology/tree (s1 = node[1,3], s2 =
        // node2): `srun -N3 -n6` runs ranks 2,3 on node3 and 4,5 on node2.
        let tree = "switch.switch.node";
        let e = check_topology(Distribution::Block, tree, &[2, 2, 2], 0).unwrap_err();
        assert!(
            e.to_string().contains(
                "network-topology order (SLURM_TOPOLOGY_ADDR_PATTERN \"switch.switch.node\")"
            ),
            "{e}"
        );
        assert!(e.to_string().contains("-m plane=2"), "{e}");
        let e = check_topology(Distribution::Block, tree, &[3, 1, 1], 0).unwrap_err();
        assert!(e.to_string().contains("-m plane=3"), "{e}");
        // Nothing to order, or an order Slurm keeps.
        for (dist, pattern, counts, het) in [
            (Distribution::Block, "node", &[2, 2][..], 0),
            (Distribution::Block, tree, &[4], 0),
            (Distribution::Block, tree, &[1, 3], 2),
            (Distribution::Cyclic, tree, &[2, 2, 2], 0),
            (Distribution::Plane(2), tree, &[2, 2, 2], 0),
            (Distribution::Arbitrary, tree, &[2, 2, 2], 0),
        ] {
            assert_eq!(
                check_topology(dist, pattern, counts, het),
                Ok(()),
                "{dist:?} {pattern} {counts:?}"
            );
        }
        // A het component of two nodes is ordered by topology as well.
        assert!(check_topology(Distribution::Block, tree, &[1, 2, 1], 2).is_err());
    }

    #[test]
    fn het_steps_order_nodes_by_component() {
        // Measured on the testbed: `srun -w node3 : -N2 -n3 -w node1,node2`
        // has SLURM_STEP_NODELIST node[1-3] with counts 2,1,1 and runs rank 0 on node3.
        let (order, counts) = het_order(
            &hosts("node[1-3]"),
            &[2, 1, 1],
            &[hosts("node3"), hosts("node[1-2]")],
        )
        .unwrap();
        assert_eq!(
            order.iter().collect::<Vec<_>>(),
            ["node3", "node1", "node2"]
        );
        assert_eq!(counts, [1, 2, 1]);
        let e = het_order(
            &hosts("node[1-3]"),
            &[2, 1, 1],
            &[hosts("node[1-3]"), hosts("node1")],
        )
        .unwrap_err();
        assert!(e.to_string().contains("node1 is in two components"), "{e}");
        let e = het_order(&hosts("node[1-3]"), &[2, 1, 1], &[hosts("node3")]).unwrap_err();
        assert!(e.to_string().contains("do not cover"), "{e}");
    }
}
