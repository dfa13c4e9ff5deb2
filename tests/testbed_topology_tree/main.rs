//! The testbed under a network topology (docker/testbed.sh TFC_TOPOLOGY=tree:
//! switch s1 holds node1 and node3, s2 node2) and the vendors' gres.conf: the
//! tests of both (one testbed start), the vendors' in gpu_vendors.rs.
//!
//! Under the topology, Slurm 26.05 fills the
//! nodes of a block distribution in topology order (node1, node3, node2) while
//! SLURM_STEP_NODELIST and SLURM_NODEID stay in name order; 22.05 and 24.11
//! keep name order. No task may get a TF_CONFIG naming wrong hosts.

#[path = "../common/mod.rs"]
mod common;
mod gpu_vendors;
#[path = "../topology/mod.rs"]
mod topology;

use common::{srun, testbed_with_tree_and_vendors};
use topology::slurm_version;

/// Plain `srun --tf-cluster` block layouts, which 26.05 orders by topology
/// (node1, node3, node2): srun's task map makes every task's TF_CONFIG
/// Slurm's real placement, on every version, whichever node runs rank 0.
#[test]
fn block_layouts_under_a_topology() {
    let _t = testbed_with_tree_and_vendors();
    let version = slurm_version();
    type Case<'a> = (&'a [&'a str], u32, &'a [(&'a str, u32)]);
    let cases: [Case; 3] = [
        (&["-N3", "-n6", "--ntasks-per-node=2"], 6, &[("worker", 6)]),
        (&["-N3", "-n5"], 5, &[("worker", 5)]),
        (
            &["-N2", "-n3", "-w", "node[2-3]"],
            3,
            &[("chief", 1), ("worker", 2)],
        ),
    ];
    for (args, n, roles) in cases {
        let mut args = args.to_vec();
        args.push("--resv-ports=0");
        let plain = srun(&args);
        plain.assert_ran(n);
        if version >= (26, 5) && n == 6 {
            assert_eq!(
                plain.hosts(),
                ["node1", "node1", "node3", "node3", "node2", "node2"],
                "Slurm {version:?} orders blocks by topology"
            );
        }
        let spec = if n == 3 {
            "--tf-cluster=chief:1,worker:2"
        } else {
            "--tf-cluster"
        };
        // The port base only with the framework option (alone, srun refuses it).
        args.extend(["--tf-port-base=8888", spec]);
        srun(&args).assert_ran(n).assert_tf_config(roles, 8888);
    }
}

/// Layouts topology cannot reorder work on every version too.
#[test]
fn name_ordered_layouts_under_a_topology() {
    let _t = testbed_with_tree_and_vendors();
    let run = srun(&[
        "-N3",
        "-n6",
        "--ntasks-per-node=2",
        "--resv-ports=0",
        "--tf-port-base=8888",
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
        "--tf-port-base=8888",
        "-m",
        "cyclic",
        "--tf-cluster",
    ]);
    run.assert_ran(6).assert_tf_config(&[("worker", 6)], 8888);
    // One node: nothing to order.
    let run = srun(&["-N1", "-n2", "-w", "node3", "--tf-cluster"]);
    run.assert_ran(2).assert_tf_config(&[("worker", 2)], 8888);
}
