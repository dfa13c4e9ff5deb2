//! Steps at once on the same nodes: each agrees on its own TF_CONFIG and
//! addresses, none fails, the nodes stay up.

use crate::common;

use std::collections::BTreeSet;

use common::{assert_no_node_drained, srun, testbed};

/// Two steps at once on the same nodes, each with reserved ports: disjoint
/// addresses.
#[test]
fn concurrent_steps_with_reserved_ports_do_not_clash() {
    let _t = testbed();
    let step = || {
        std::thread::spawn(|| {
            srun(&[
                "-N2",
                "-n4",
                "-w",
                "node1,node2",
                "--ntasks-per-node=2",
                "--resv-ports=2",
                "--tf-cluster",
                "--overlap",
                "-O",
            ])
        })
    };
    let (a, b) = (step(), step());
    let (a, b) = (a.join().unwrap(), b.join().unwrap());
    let mut addresses = Vec::new();
    for run in [&a, &b] {
        run.assert_workers(4);
        let cluster = &run.tasks[0].tf_config.as_ref().unwrap()["cluster"]["worker"];
        addresses.push(
            cluster
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().to_string())
                .collect::<BTreeSet<_>>(),
        );
    }
    assert!(addresses[0].is_disjoint(&addresses[1]), "{addresses:?}");
}

/// 50 steps at once, each with its own spec: every task agrees on its step's
/// TF_CONFIG, none fails, the nodes stay up.
#[test]
fn fifty_concurrent_steps() {
    let _t = testbed();
    let steps: Vec<_> = (0..50u32)
        .map(|i| {
            std::thread::spawn(move || {
                let n = 1 + i % 6;
                let spec = if n == 1 {
                    "--tf-cluster=chief:1".to_string()
                } else {
                    format!("--tf-cluster=chief:1,worker:{}", n - 1)
                };
                let tasks = format!("-n{n}");
                let run = srun(&[
                    "-N1-3",
                    &tasks,
                    "-m",
                    if i % 2 == 0 { "block" } else { "cyclic" },
                    &spec,
                ]);
                (n, run)
            })
        })
        .collect();
    for step in steps {
        let (n, run) = step.join().unwrap();
        let roles: Vec<(&str, u32)> = if n == 1 {
            vec![("chief", 1)]
        } else {
            vec![("chief", 1), ("worker", n - 1)]
        };
        run.assert_ran(n).assert_tf_config(&roles, 8888);
    }
    assert_no_node_drained();
}
