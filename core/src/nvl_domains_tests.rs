//! Each rank's NVLink domain from topology.conf's blocks and the layout.

use crate::layout::Layout;
use crate::nvl_domains::Domains;
use crate::settings::Settings;
use crate::step::Step;
use crate::test_support::given;
use crate::topology_blocks::Blocks;

fn layout(nodes: &str, per_node: &str, dist: Option<&str>) -> Layout {
    let mut vars = vec![
        ("SLURM_STEP_NUM_TASKS", "8".to_string()),
        ("SLURM_STEP_NODELIST", nodes.to_string()),
        ("SLURM_STEP_TASKS_PER_NODE", per_node.to_string()),
        ("SLURMD_NODENAME", "n1".to_string()),
    ];
    if let Some(d) = dist {
        vars.push(("SLURM_DISTRIBUTION", d.to_string()));
    }
    let step: Step = Step::gather(&Settings::default(), &mut given(vars.into_iter().collect()))
        .unwrap()
        .step()
        .unwrap();
    Layout::build(&step, None).unwrap()
}

const RACKS: &str =
    "# two racks\nBlockName=rack1 Nodes=n[3-4]\nBlockName=rack0 Nodes=n[1-2]\nBlockSizes=2\n";

/// Four nodes, two per block, two tasks per node: block order is the step's
/// (rack0 holds rank 0, so it is domain 0, whatever topology.conf's order).
#[test]
fn each_rank_learns_its_domain_its_rank_in_it_and_the_sizes() {
    let blocks = Blocks::parse(RACKS).unwrap();
    let d = Domains::of(&blocks, &layout("n[1-4]", "2(x4)", None)).unwrap();
    let vars = |r| d.vars(r).unwrap().map(|(_, v)| v);
    assert_eq!(vars(0), ["0", "0", "4", "2"]);
    assert_eq!(vars(3), ["0", "3", "4", "2"]);
    assert_eq!(vars(4), ["1", "0", "4", "2"]);
    assert_eq!(vars(7), ["1", "3", "4", "2"]);
    assert_eq!(d.vars(8), None);
    // Cyclic: ranks alternate nodes, so a domain's ranks are not contiguous.
    let d = Domains::of(&blocks, &layout("n[1-4]", "2(x4)", Some("cyclic"))).unwrap();
    let domains: Vec<String> = (0..8).map(|r| d.vars(r).unwrap()[0].1.clone()).collect();
    assert_eq!(domains, ["0", "0", "1", "1", "0", "0", "1", "1"]);
    assert_eq!(d.vars(4).unwrap()[1].1, "2");
}

/// No blocks (tree, flat), or a node of the step in none: nothing named.
#[test]
fn without_blocks_no_domain_is_named() {
    assert_eq!(Blocks::parse("SwitchName=s1 Nodes=n[1-4]\n"), None);
    assert_eq!(Blocks::parse(""), None);
    let blocks = Blocks::parse("BlockName=b Nodes=n[1-2]\n").unwrap();
    assert_eq!(Domains::of(&blocks, &layout("n[1-4]", "2(x4)", None)), None);
}
