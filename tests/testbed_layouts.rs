//! Every task distribution Slurm makes, on the real testbed: the expected
//! TF_CONFIG comes from where Slurm really ran each rank.

mod common;

use common::{exec, srun, srun_env, testbed};

/// `-m cyclic`: ranks alternate over the nodes.
#[test]
fn cyclic() {
    let _t = testbed();
    let run = srun(&[
        "-N3",
        "-n6",
        "--ntasks-per-node=2",
        "-m",
        "cyclic",
        "--tf-cluster=ps:1,worker:5",
    ]);
    run.assert_ran(6)
        .assert_tf_config(&[("ps", 1), ("worker", 5)], 8888);
    let h = run.hosts();
    assert!(
        h[0] != h[1] && h[1] != h[2] && h[0] == h[3],
        "not cyclic: {h:?}"
    );
}

/// `-m plane=2`: blocks of two ranks per node per round.
#[test]
fn plane_two() {
    let _t = testbed();
    let run = srun(&[
        "-N2",
        "-n6",
        "--ntasks-per-node=3",
        "-m",
        "plane=2",
        "--tf-cluster",
    ]);
    run.assert_ran(6).assert_tf_config(&[("worker", 6)], 8888);
    let h = run.hosts();
    assert!(
        h[0] == h[1] && h[1] != h[2] && h[2] == h[3] && h[4] == h[0],
        "not plane=2: {h:?}"
    );
}

/// `-m arbitrary` with SLURM_HOSTFILE: the layout is the file's.
#[test]
fn arbitrary_from_hostfile() {
    let _t = testbed();
    let file = "/home/alice/hostfile-layout-test";
    exec(&[
        "bash",
        "-c",
        &format!("printf 'node2\\nnode1\\n# a comment\\nnode2\\nnode3\\n' > {file}"),
    ]);
    let var = format!("SLURM_HOSTFILE={file}");
    let run = srun_env(
        &[&var],
        &["-n4", "-m", "arbitrary", "--tf-cluster=chief:1,worker:3"],
    );
    run.assert_ran(4)
        .assert_tf_config(&[("chief", 1), ("worker", 3)], 8888);
    assert_eq!(run.hosts(), ["node2", "node1", "node2", "node3"]);
}

/// Uneven counts per node (`-n5` on 3 nodes).
#[test]
fn uneven_tasks() {
    let _t = testbed();
    let run = srun(&["-N3", "-n5", "-m", "cyclic", "--tf-cluster=worker:5"]);
    run.assert_ran(5).assert_tf_config(&[("worker", 5)], 8888);
}

/// A heterogeneous step: ranks are global across components and roles span
/// them; ps on the first component's node.
#[test]
fn heterogeneous_step() {
    let _t = testbed();
    let run = srun(&[
        "-n1",
        "-w",
        "node3",
        ":",
        "-N2",
        "-n3",
        "-w",
        "node1,node2",
        "--tf-cluster=ps:1,worker:3",
    ]);
    run.assert_ran(4)
        .assert_tf_config(&[("ps", 1), ("worker", 3)], 8888);
    assert_eq!(
        run.tasks[0].host, "node3",
        "rank 0 is the first component's"
    );
}
