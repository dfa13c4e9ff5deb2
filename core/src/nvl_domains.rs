//! NVLink domains named: where Slurm's topology/block groups nodes into
//! blocks (an NVL72 rack is one block of topology.conf), each task is told
//! its block's index among the step's blocks (in the order of their first
//! ranks), its rank within it, its size and how many there are, so that a
//! framework can place tensor- or expert-parallel groups inside a domain
//! without parsing SLURM_TOPOLOGY_ADDR or node names.

use crate::layout::Layout;
use crate::topology_blocks::Blocks;

/// The variables, in the order they are set.
pub const VARS: [&str; 4] = [
    "TF_CLUSTER_NVL_DOMAIN",
    "TF_CLUSTER_NVL_DOMAIN_RANK",
    "TF_CLUSTER_NVL_DOMAIN_SIZE",
    "TF_CLUSTER_NVL_DOMAINS",
];

/// Each rank's domain, its rank in it, and the domains' sizes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Domains {
    /// By rank: (domain, rank within it).
    ranks: Vec<(u32, u32)>,
    sizes: Vec<u32>,
}

impl Domains {
    /// None where a node of the step is in no block.
    pub fn of(blocks: &Blocks, layout: &Layout) -> Option<Domains> {
        let node_block: Vec<usize> = (0..layout.num_nodes())
            .map(|n| blocks.of(layout.host(n)))
            .collect::<Option<_>>()?;
        let mut order: Vec<usize> = Vec::new();
        let mut ranks = Vec::with_capacity(layout.num_tasks() as usize);
        let mut sizes: Vec<u32> = Vec::new();
        for p in layout.placements() {
            let block = node_block[p.node as usize];
            let domain = match order.iter().position(|&b| b == block) {
                Some(d) => d,
                None => {
                    order.push(block);
                    sizes.push(0);
                    order.len() - 1
                }
            };
            ranks.push((domain as u32, sizes[domain]));
            sizes[domain] += 1;
        }
        Some(Domains { ranks, sizes })
    }

    /// The variables of `rank`.
    pub fn vars(&self, rank: u32) -> Option<[(&'static str, String); 4]> {
        let &(domain, within) = self.ranks.get(rank as usize)?;
        Some([
            (VARS[0], domain.to_string()),
            (VARS[1], within.to_string()),
            (VARS[2], self.sizes[domain as usize].to_string()),
            (VARS[3], self.sizes.len().to_string()),
        ])
    }
}
