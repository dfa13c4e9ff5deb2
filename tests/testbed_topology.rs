//! The testbed under a network topology (docker/testbed.sh TFC_TOPOLOGY=tree:
//! switch s1 holds node1 and node3, s2 node2). Slurm 26.05 then fills the
//! nodes of a block distribution in topology order (node1, node3, node2) while
//! SLURM_STEP_NODELIST and SLURM_NODEID stay in name order; 22.05 and 24.11
//! keep name order. No task may get a TF_CONFIG naming wrong hosts.

mod common;

use std::collections::BTreeSet;

use common::{Run, exec, srun, testbed_with_topology};

/// Slurm's major.minor on the testbed, from `srun --version` (`slurm-wlm 26.05.5`).
fn slurm_version() -> (u32, u32) {
    let out = exec(&["srun", "--version"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let version = text.split_whitespace().last().unwrap_or_default();
    let mut parts = version.split('.').map(|p| p.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor),
        _ => panic!("srun --version said {text:?}"),
    }
}

/// The distinct `tf-cluster:` messages of a run.
fn messages(run: &Run) -> BTreeSet<String> {
    run.stderr
        .lines()
        .filter_map(|l| l.split_once("tf-cluster: ").map(|(_, m)| m.to_string()))
        .collect()
}

/// A block layout over three nodes: where Slurm orders it by topology, every
/// task refuses alike (the nodes whose ranks happen to match must not inject
/// a TF_CONFIG naming the others wrongly); elsewhere each task's TF_CONFIG is
/// Slurm's real placement.
#[test]
fn block_layouts_under_a_topology() {
    let _t = testbed_with_topology("tree");
    let args = ["-N3", "-n6", "--ntasks-per-node=2", "--resv-ports=0"];
    let plain = srun(&args);
    plain.assert_ran(6);
    let with: Vec<&str> = args.iter().copied().chain(["--tf-cluster"]).collect();
    let run = srun(&with);
    let version = slurm_version();
    if version >= (25, 5) {
        if version >= (26, 5) {
            assert_eq!(
                plain.hosts(),
                ["node1", "node1", "node3", "node3", "node2", "node2"],
                "Slurm {version:?} ordered the block layout by topology (measured on 26.05)"
            );
        }
        assert_ne!(run.code, Some(0), "the step should fail");
        assert!(
            run.tasks.is_empty(),
            "a task ran with a TF_CONFIG: {:?}",
            run.tasks
        );
        let msgs = messages(&run);
        assert_eq!(msgs.len(), 1, "want one message: {}", run.stderr);
        let msg = msgs.into_iter().next().unwrap();
        assert!(
            msg.contains(
                "network-topology order (SLURM_TOPOLOGY_ADDR_PATTERN \"switch.switch.node\")"
            ) && msg
                .ends_with("use srun -m plane=2 (the same blocks in node-list order) or -m cyclic"),
            "{msg}"
        );
        // Every task was refused, on every node.
        let refusals = run
            .stderr
            .lines()
            .filter(|l| l.contains("tf-cluster: this Slurm lays block distributions out"))
            .count();
        assert_eq!(refusals, 6, "{}", run.stderr);
    } else {
        assert_eq!(
            plain.hosts(),
            ["node1", "node1", "node2", "node2", "node3", "node3"],
            "Slurm {version:?} keeps node-list order"
        );
        run.assert_ran(6).assert_tf_config(&[("worker", 6)], 8888);
    }
}

/// The ways out the refusal names, and layouts topology cannot reorder, work
/// on every version.
#[test]
fn name_ordered_layouts_under_a_topology() {
    let _t = testbed_with_topology("tree");
    let run = srun(&[
        "-N3",
        "-n6",
        "--ntasks-per-node=2",
        "--resv-ports=0",
        "-m",
        "plane=2",
        "--tf-cluster=chief:1,worker:5",
    ]);
    run.assert_ran(6)
        .assert_tf_config(&[("chief", 1), ("worker", 5)], 8888);
    assert_eq!(
        run.hosts(),
        ["node1", "node1", "node2", "node2", "node3", "node3"]
    );
    let run = srun(&[
        "-N3",
        "-n6",
        "--ntasks-per-node=2",
        "--resv-ports=0",
        "-m",
        "cyclic",
        "--tf-cluster",
    ]);
    run.assert_ran(6).assert_tf_config(&[("worker", 6)], 8888);
    // One node: nothing to order.
    let run = srun(&["-N1", "-n2", "-w", "node3", "--tf-cluster"]);
    run.assert_ran(2).assert_tf_config(&[("worker", 2)], 8888);
}
