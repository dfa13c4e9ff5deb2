//! topology.conf's blocks (Slurm's topology/block): the grammar the node
//! reads once, for each task's NVLink domain (crate::nvl_domains).

use crate::hostlist::HostList;
use crate::limits::MAX_NODES;

/// topology.conf's blocks (`BlockName=b1 Nodes=node[1-18]`), in its order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Blocks(Vec<HostList>);

impl Blocks {
    /// None where the file names no block (tree, flat, no file) or a block
    /// is not a host list.
    pub fn parse(text: &str) -> Option<Blocks> {
        let mut blocks = Vec::new();
        for line in text.lines() {
            let line = line.split('#').next().unwrap_or_default();
            let mut words = line.split_whitespace().filter_map(|w| w.split_once('='));
            let named = words
                .clone()
                .any(|(k, _)| k.eq_ignore_ascii_case("BlockName"));
            let nodes = words.find(|(k, _)| k.eq_ignore_ascii_case("Nodes"));
            if let (true, Some((_, nodes))) = (named, nodes) {
                blocks.push(HostList::parse(nodes, MAX_NODES as usize).ok()?);
            }
        }
        (!blocks.is_empty()).then_some(Blocks(blocks))
    }

    /// The index of the block holding `host`.
    pub fn of(&self, host: &str) -> Option<usize> {
        self.0.iter().position(|b| b.position(host).is_some())
    }
}
