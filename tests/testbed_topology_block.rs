//! The testbed under topology/block (docker/testbed.sh TFC_TOPOLOGY=block:
//! one-node blocks b1 = node3, b2 = node1, b3 = node2, in that order), under
//! which Slurm 26.05 lays block distributions out in block order: rank 0 on
//! node3. topology/block came with Slurm 23.11: on 22.05 the testbed runs the
//! same steps without a topology plugin, and the test checks that this Slurm
//! indeed has no topology/block, so the layout cannot be made there.

mod common;
mod topology;

use common::{exec, srun_tasks, testbed_with_topology, wait_all_idle};
use topology::{assert_case, slurm_version};

/// `scontrol show config`'s TopologyPlugin and the files in its PluginDir.
fn topology_plugin_and_plugins() -> (String, Vec<String>) {
    let out = exec(&["scontrol", "show", "config"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let config = String::from_utf8_lossy(&out.stdout).into_owned();
    let value = |key: &str| {
        config
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once('=')?;
                (k.trim() == key).then(|| v.trim().to_string())
            })
            .unwrap_or_else(|| panic!("no {key} in scontrol show config:\n{config}"))
    };
    let dir = value("PluginDir");
    let out = exec(&["ls", &dir]);
    assert!(
        out.status.success(),
        "ls {dir}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plugins = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    (value("TopologyPlugin"), plugins)
}

/// The configuration in force: topology/block with the three blocks where
/// Slurm has it, and on older Slurm no topology/block plugin to load at all.
#[test]
fn topology_block_is_in_force_where_slurm_has_it() {
    let _s = topology::serial();
    let _t = testbed_with_topology("block");
    let (plugin, plugins) = topology_plugin_and_plugins();
    // Slurm's tree plugin is there on every version: the listing is real.
    assert!(
        plugins.iter().any(|p| p == "topology_tree.so"),
        "{plugins:?}"
    );
    let has_block = plugins.iter().any(|p| p == "topology_block.so");
    if slurm_version() >= (23, 11) {
        assert!(has_block, "{plugins:?}");
        assert_eq!(plugin, "topology/block");
        let out = exec(&["scontrol", "show", "topology"]);
        let text = String::from_utf8_lossy(&out.stdout);
        for (block, node) in [("b1", "node3"), ("b2", "node1"), ("b3", "node2")] {
            assert!(
                text.lines()
                    .any(|l| l.starts_with(&format!("BlockName={block} "))
                        && l.contains(&format!(" Nodes={node} "))),
                "{block} = {node} missing from:\n{text}"
            );
        }
    } else {
        assert!(
            !has_block,
            "Slurm {:?} has topology/block: {plugins:?}",
            slurm_version()
        );
        assert_ne!(plugin, "topology/block");
    }
}

/// Plain `srun --tf-cluster` (no -m) block layouts: each placement is the one
/// measured on each version (26.05 in block order: node3, node1, node2), and
/// every task's TF_CONFIG is that placement.
#[test]
fn block_layouts_follow_the_blocks() {
    let _s = topology::serial();
    let _t = testbed_with_topology("block");
    let version = slurm_version();
    // Measured placements: 26.05 in block order; 24.11 has the blocks but
    // keeps name order (choosing nodes and task counts by them); 22.05 has no
    // topology/block and lays out plain name order.
    let by_version = |v26: &'static [&'static str],
                      v24: &'static [&'static str],
                      v22: &'static [&'static str]| {
        if version >= (26, 5) {
            v26
        } else if version >= (23, 11) {
            v24
        } else {
            v22
        }
    };
    assert_case(
        &["-N3", "-n6"],
        "--tf-cluster",
        &[("worker", 6)],
        by_version(
            &["node3", "node1", "node2", "node2", "node2", "node2"],
            &["node1", "node2", "node2", "node2", "node2", "node3"],
            &["node1", "node1", "node1", "node1", "node2", "node3"],
        ),
    );
    assert_case(
        &["-N3", "-n6", "--ntasks-per-node=2"],
        "--tf-cluster=chief:1,worker:5",
        &[("chief", 1), ("worker", 5)],
        by_version(
            &["node3", "node3", "node1", "node1", "node2", "node2"],
            &["node1", "node1", "node2", "node2", "node3", "node3"],
            &["node1", "node1", "node2", "node2", "node3", "node3"],
        ),
    );
    assert_case(
        &["-N2", "-n4"],
        "--tf-cluster=ps:1,worker:3",
        &[("ps", 1), ("worker", 3)],
        by_version(
            &["node3", "node1", "node1", "node1"],
            &["node1", "node1", "node1", "node3"],
            &["node1", "node1", "node1", "node2"],
        ),
    );
}

/// Each task is told its NVLink domain, topology/block's block (one node
/// each here): the step's blocks numbered in the order of their first ranks,
/// the task's rank in its block, the block's size and the count. Where Slurm
/// has no topology/block (22.05), no task is told one, though topology.conf
/// names the blocks.
#[test]
fn each_task_is_told_its_nvlink_domain() {
    let _s = topology::serial();
    let _t = testbed_with_topology("block");
    wait_all_idle();
    let probe = r#"printf 'NVL %s %s %s %s %s %s\n' "$SLURM_PROCID" "$(hostname)" "${TF_CLUSTER_NVL_DOMAIN--}" "${TF_CLUSTER_NVL_DOMAIN_RANK--}" "${TF_CLUSTER_NVL_DOMAIN_SIZE--}" "${TF_CLUSTER_NVL_DOMAINS--}""#;
    let args = [
        "-N3",
        "--ntasks-per-node=2",
        "--torch-cluster",
        "sh",
        "-c",
        probe,
    ];
    let out = srun_tasks(&args);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let mut seen: Vec<Vec<String>> = text
        .lines()
        .filter_map(|l| l.strip_prefix("NVL "))
        .map(|l| l.split(' ').map(String::from).collect())
        .collect();
    seen.sort_by_key(|f| f[0].parse::<u32>().unwrap());
    assert_eq!(seen.len(), 6, "{text}");
    // The hosts in rank order name the domains.
    let mut order: Vec<String> = Vec::new();
    for f in &seen {
        if !order.contains(&f[1]) {
            order.push(f[1].clone());
        }
        let want = if slurm_version() >= (23, 11) {
            let domain = order.iter().position(|h| *h == f[1]).unwrap();
            let before = seen
                .iter()
                .take_while(|g| g[0] != f[0])
                .filter(|g| g[1] == f[1])
                .count();
            [
                domain.to_string(),
                before.to_string(),
                "2".into(),
                "3".into(),
            ]
        } else {
            ["-", "-", "-", "-"].map(String::from)
        };
        assert_eq!(f[2..], want, "rank {}: {text}", f[0]);
    }
}
