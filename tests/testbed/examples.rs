//! The README's examples and the plain cases on the real testbed, every
//! task's environment asserted.

use crate::common;

use common::{srun, testbed};

/// The basic example: 2 nodes × 2 tasks, 4 GPUs per node, all workers.
#[test]
fn basic_example_two_nodes_two_tasks_each() {
    let _t = testbed();
    let run = srun(&[
        "-N2",
        "-n4",
        "--ntasks-per-node=2",
        "--gres=gpu:4",
        "--resv-ports=0",
        "--tf-port-base=8888",
        "--tf-cluster",
    ]);
    run.assert_workers(4);
    let h = run.hosts();
    assert!(h[0] == h[1] && h[2] == h[3] && h[0] != h[2], "{h:?}");
    assert_eq!(
        run.gpus(),
        [Some("0,1"), Some("2,3"), Some("0,1"), Some("2,3")]
    );
}

/// A ps and workers with a port base: ps on the first node's first port.
#[test]
fn advanced_example_ps_and_workers_port_base_1337() {
    let _t = testbed();
    let run = srun(&[
        "-N2",
        "-n4",
        "--ntasks-per-node=2",
        "--resv-ports=0",
        "--tf-cluster=ps:1,worker:3",
        "--tf-port-base=1337",
    ]);
    run.assert_ran(4)
        .assert_tf_config(&[("ps", 1), ("worker", 3)], 1337);
    let ps = &run.tasks[0].tf_config.as_ref().unwrap()["cluster"]["ps"];
    assert_eq!(
        ps,
        &serde_json::json!([format!("{}:1337", run.tasks[0].host)])
    );
    // No GPUs asked: Slurm sets none and the plugin leaves it so.
    assert_eq!(run.gpus(), [None; 4]);
}

/// Three nodes, uneven tasks: Slurm packs `-n5` as it likes; every task's
/// entry names the host it runs on and all agree.
#[test]
fn three_nodes_uneven_tasks() {
    let _t = testbed();
    let run = srun(&[
        "-N3",
        "-n5",
        "--resv-ports=0",
        "--tf-port-base=8888",
        "--tf-cluster=chief:1,worker:4",
    ]);
    run.assert_ran(5)
        .assert_tf_config(&[("chief", 1), ("worker", 4)], 8888);
    let mut hosts = run.hosts();
    hosts.dedup();
    assert_eq!(
        hosts.len(),
        3,
        "block layout visits each node once: {hosts:?}"
    );
}
