//! The testbed under a second tree topology (docker/testbed.sh
//! TFC_TOPOLOGY=tree2: switch s1 holds node2 and node3, s2 node1), under
//! which Slurm 26.05 starts block layouts on node2: rank 0 of a plain
//! `srun -N3 -n6 --tf-cluster` is NOT on node1, the first node by name, while
//! SLURM_STEP_NODELIST and SLURM_NODEID stay in name order. 22.05 and 24.11
//! keep name order. Every task's TF_CONFIG must be Slurm's real placement, and
//! real TensorFlow must train on it.

mod common;
mod topology;

use common::outputs::Outputs;
use common::{PROBE, srun, testbed_with_topology};
use serde_json::Value;
use topology::{assert_case, slurm_version};

/// Plain `srun --tf-cluster` (no -m) block layouts: each placement is the one
/// measured on each version (26.05 by topology: node2, node3, node1; 22.05 and
/// 24.11 in name order, giving node2 the most tasks), and every task's
/// TF_CONFIG is that placement.
#[test]
fn block_layouts_start_where_the_topology_says() {
    let _s = topology::serial();
    let _t = testbed_with_topology("tree2");
    let topology_order = slurm_version() >= (26, 5);
    let by_version = |topo: &'static [&'static str], names: &'static [&'static str]| {
        if topology_order { topo } else { names }
    };
    assert_case(
        &["-N3", "-n6"],
        "--tf-cluster",
        &[("worker", 6)],
        by_version(
            &["node2", "node2", "node2", "node2", "node3", "node1"],
            &["node1", "node2", "node2", "node2", "node2", "node3"],
        ),
    );
    assert_case(
        &["-N3", "-n6", "--ntasks-per-node=2"],
        "--tf-cluster=chief:1,worker:5",
        &[("chief", 1), ("worker", 5)],
        by_version(
            &["node2", "node2", "node3", "node3", "node1", "node1"],
            &["node1", "node1", "node2", "node2", "node3", "node3"],
        ),
    );
    assert_case(
        &["-N2", "-n3"],
        "--tf-cluster=ps:1,worker:2",
        &[("ps", 1), ("worker", 2)],
        // Every version takes the two nodes of switch s1 for two nodes.
        &["node2", "node2", "node3"],
    );
}

/// Where the TensorFlow program is put on the shared /home.
const DIR: &str = "/home/alice/tf-topology";

/// Real TensorFlow MultiWorkerMirroredStrategy (tests/fixtures/tensorflow/mwms.py,
/// the program docs/tensorflow-examples.md shows, verbatim, beside the
/// show_resolver.py it imports)
/// from a plain `srun --tf-cluster` on 3 nodes: rank 0, the chief worker,
/// runs where Slurm put it (26.05: node2, not node1), every worker's resolver
/// sees its TF_CONFIG, the loss goes down and every worker ends with
/// bit-identical weights.
#[test]
fn multi_worker_mirrored_strategy_trains_where_slurm_put_rank_0() {
    let _s = topology::serial();
    let _t = testbed_with_topology("tree2");
    let topology_order = slurm_version() >= (26, 5);
    let step = ["-N3", "--ntasks-per-node=1"];

    // Slurm's placement for this step, without the plugin's option.
    let mut plain = step.to_vec();
    plain.push("--resv-ports=0");
    let plain = srun(&plain);
    plain.assert_ran(3);
    let want: &[&str] = if topology_order {
        &["node2", "node3", "node1"]
    } else {
        &["node1", "node2", "node3"]
    };
    assert_eq!(plain.hosts(), want, "Slurm's placement");

    common::install(
        DIR,
        &[
            ("mwms.py", include_str!("fixtures/tensorflow/mwms.py")),
            (
                "show_resolver.py",
                include_str!("fixtures/tensorflow/show_resolver.py"),
            ),
        ],
        "",
    );

    // Each task prints its placement and TF_CONFIG, then becomes the trainer.
    let task = format!("{PROBE}; source /opt/tf/bin/activate; exec python mwms.py");
    let outputs = Outputs::new("tree2");
    let files = outputs.srun_args();
    let mut cmd = vec![
        "env",
        "TF_CPP_MIN_LOG_LEVEL=2",
        "srun",
        "-D",
        DIR,
        "--time=4",
    ];
    cmd.extend(files.iter().map(String::as_str));
    cmd.extend_from_slice(&step);
    cmd.extend_from_slice(&["--tf-cluster", "--tf-rpc-layer=grpc", "bash", "-c", &task]);
    // Longer than common::exec's 120 s: TensorFlow starts slowly on a busy box.
    let out = common::exec_for(300, &cmd);
    let context = format!(
        "srun: {}{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        outputs.dump()
    );
    // Each task's lines from its own file.
    let labelled = outputs.labelled();
    let (resolver, result) = (labelled.json("RESOLVER "), labelled.json("RESULT "));
    let run = labelled.run(out.status.code(), context.clone());
    run.assert_ran(3)
        .assert_tf_config_rpc(&[("worker", 3)], 8888, Some("grpc"));
    assert_eq!(run.hosts(), want, "the training step ran elsewhere");
    if topology_order {
        assert_ne!(
            run.tasks[0].host, "node1",
            "rank 0 is where the topology put it"
        );
    }

    // Every worker's TFConfigClusterResolver saw its own TF_CONFIG.
    assert_eq!(resolver.len(), 3, "RESOLVER lines:\n{context}");
    for task in &run.tasks {
        let seen = &resolver[&task.rank];
        let tf_config = task.tf_config.as_ref().expect("TF_CONFIG");
        assert_eq!(seen["cluster"], tf_config["cluster"], "rank {}", task.rank);
        assert_eq!(seen["task_type"], "worker", "rank {}", task.rank);
        assert_eq!(seen["task_id"], task.rank, "rank {}", task.rank);
        assert_eq!(seen["rpc_layer"], "grpc", "rank {}", task.rank);
    }

    assert_eq!(result.len(), 3, "RESULT lines:\n{context}");
    for (rank, r) in &result {
        assert_eq!(r["task"], format!("worker:{rank}"));
        assert_eq!(r["workers"], 3, "rank {rank}: {r}");
        let (first, last) = (r["first_loss"].as_f64(), r["last_loss"].as_f64());
        assert!(
            last.unwrap() < first.unwrap() / 2.0,
            "rank {rank}: loss did not go down: {r}"
        );
    }
    let sums: Vec<&Value> = result.values().map(|r| &r["weights_sha256"]).collect();
    assert!(
        sums.iter().all(|s| *s == sums[0]) && sums[0].is_string(),
        "workers ended with different weights: {sums:?}"
    );
}
