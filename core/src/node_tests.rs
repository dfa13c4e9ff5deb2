//! The node's share, made once, against each task resolved alone.

use std::collections::HashMap;

use crate::frameworks::{Frameworks, jax, pytorch};
use crate::node::resolve;
use crate::settings::Settings;
use crate::step::Step;
use crate::test_support::given;

/// The node's share is made once, without any task's own variables (as
/// slurmstepd's user_init sees the step), and serves each of its tasks:
/// every rank gets what it would have resolved alone; a rank the layout
/// puts on another node, or as another local task, is refused.
#[test]
fn a_node_prepared_once_serves_each_of_its_tasks() {
    let node_vars = [
        ("SLURM_STEP_NUM_TASKS", "5"),
        ("SLURM_STEP_NODELIST", "n[1-3]"),
        ("SLURM_STEP_TASKS_PER_NODE", "2(x2),1"),
        ("SLURM_DISTRIBUTION", "cyclic"),
        ("SLURMD_NODENAME", "n2"),
        ("SLURM_STEP_RESV_PORTS", "12000-12003"),
        ("CUDA_VISIBLE_DEVICES", "4,5,6,7"),
    ];
    let settings = Settings {
        frameworks: Frameworks::TENSORFLOW
            .with(&pytorch::FRAMEWORK)
            .with(&jax::FRAMEWORK),
        ..Settings::default()
    };
    let gather = |extra: &[(&'static str, &str)]| {
        let vars = node_vars
            .iter()
            .chain(extra)
            .map(|&(k, v)| (k, v.to_string()))
            .collect();
        Step::gather(&settings, &mut given(vars))
            .unwrap()
            .step()
            .unwrap()
    };
    let node = crate::node::Node::prepare(settings.clone(), gather(&[])).unwrap();
    // n2 runs ranks 1 and 4, as its local tasks 0 and 1.
    for (rank, local) in [(1, 0), (4, 1)] {
        let procid = rank.to_string();
        let alone = resolve(&settings, &gather(&[("SLURM_PROCID", &procid)])).unwrap();
        assert_eq!(node.task(rank, Some(local), None).unwrap(), alone);
        let tf: serde_json::Value = serde_json::from_str(alone.get("TF_CONFIG").unwrap()).unwrap();
        assert_eq!(tf["task"]["index"], rank);
    }
    for (rank, local) in [(0, 0), (3, 1), (4, 0)] {
        let e = node.task(rank, Some(local), None).unwrap_err().to_string();
        assert!(
            e.starts_with("the task layout on n2 is not the one Slurm made"),
            "{e}"
        );
    }
}

/// A node's tasks rendered ahead are each rank's own variables; past the
/// budget, or with this node unknown, none are.
#[test]
fn a_nodes_tasks_rendered_ahead() {
    let vars = [
        ("SLURM_STEP_NUM_TASKS", "5"),
        ("SLURM_STEP_NODELIST", "n[1-3]"),
        ("SLURM_STEP_TASKS_PER_NODE", "2(x2),1"),
        ("SLURM_DISTRIBUTION", "cyclic"),
        ("SLURMD_NODENAME", "n2"),
    ];
    let vars: HashMap<_, _> = vars.into_iter().map(|(k, v)| (k, v.to_string())).collect();
    let settings = Settings::default();
    let step = Step::gather(&settings, &mut given(vars))
        .unwrap()
        .step()
        .unwrap();
    let node = crate::node::Node::prepare(settings.clone(), step.clone()).unwrap();
    let here = node.render_here(1 << 20).unwrap();
    assert_eq!(here.iter().map(|(r, _)| *r).collect::<Vec<_>>(), [1, 4]);
    for (local, (rank, injection)) in (0..).zip(&here) {
        assert_eq!(
            injection.as_ref().unwrap(),
            &node.task(*rank, Some(local), None).unwrap()
        );
    }
    assert!(node.render_here(100).is_none());
    let mut elsewhere = step;
    elsewhere.nodename = None;
    let node = crate::node::Node::prepare(settings, elsewhere).unwrap();
    assert!(node.render_here(1 << 20).is_none());
}

/// With a record, a PyTorch step takes one more port on every node, its
/// own for NCCL's RAS: after the framework's, on every node (the preflight
/// checks it there), counted in what Slurm must reserve; without a record,
/// or without a framework of NCCL's, none.
#[test]
fn a_recorded_step_takes_a_port_of_its_own_for_nccls_ras() {
    let vars = [
        ("SLURM_STEP_NUM_TASKS", "4"),
        ("SLURM_STEP_NODELIST", "n[1-2]"),
        ("SLURM_STEP_TASKS_PER_NODE", "2(x2)"),
        ("SLURMD_NODENAME", "n2"),
        ("SLURM_STEP_RESV_PORTS", "12000-12001"),
    ];
    let node_of = |settings: &Settings| {
        let vars = vars.iter().map(|&(k, v)| (k, v.to_string())).collect();
        let step = Step::gather(settings, &mut given(vars))
            .unwrap()
            .step()
            .unwrap();
        crate::node::Node::prepare(settings.clone(), step).unwrap()
    };
    let recorded = Settings {
        frameworks: Frameworks::only(&pytorch::FRAMEWORK),
        record: Some("/rec".into()),
        ..Settings::default()
    };
    let node = node_of(&recorded);
    // MASTER_PORT is the first reserved port; RAS's the next, on n2 too
    // (rank 0 is on n1: the only port n2 listens on is RAS's).
    assert_eq!(node.ras_port(), Some(12001));
    assert_eq!(node.listening_ports(), [12001]);
    let master = node.task(2, Some(0), None).unwrap();
    assert_eq!(master.get("MASTER_PORT"), Some("12000"));
    for settings in [
        Settings {
            record: None,
            ..recorded.clone()
        },
        Settings {
            frameworks: Frameworks::only(&crate::frameworks::ray::FRAMEWORK),
            ..recorded.clone()
        },
    ] {
        assert_eq!(crate::frameworks::ras_ports(&settings), 0);
    }
    assert_eq!(
        node_of(&Settings {
            record: None,
            ..recorded.clone()
        })
        .ras_port(),
        None
    );
    // srun counts it in the reservation.
    let launch = |resv| crate::frameworks::Launch {
        tasks: 4,
        nodelist: Some("n[1-2]"),
        nodes: Some(2),
        resv_ports: Some(resv),
        most_local: Some(2),
        ..Default::default()
    };
    crate::frameworks::check_before_launch(&recorded, &launch("12000-12001")).unwrap();
    let e = crate::frameworks::check_before_launch(&recorded, &launch("12000"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("it needs 2 on a node"), "{e}");
}

/// `srun -N2 --ntasks-per-node=2 --torch-cluster --jax-cluster
/// --tf-roles=a:2,b:2 --tf-ports-per-task=2 --tf-record=/rec
/// --tf-port-base=9000`: the plan's blocks in their order, 11 ports on a
/// node. PyTorch's MASTER_PORT 9000 (the step-wide world's), JAX's 9001;
/// the roles' rendezvous, PyTorch's then JAX's of each role: a 9002 and
/// 9003, b 9004 and 9005; each local task's own two, 9006-9007 and
/// 9008-9009; NCCL's RAS 9010. srun refuses a reservation of 10.
#[test]
fn the_port_plan_hands_out_its_blocks_in_order() {
    let mut settings = Settings {
        frameworks: Frameworks::only(&pytorch::FRAMEWORK).with(&jax::FRAMEWORK),
        record: Some("/rec".into()),
        ..Settings::default()
    };
    for (key, value) in [
        ("roles", "a:2,b:2"),
        ("ports-per-task", "2"),
        ("port-base", "9000"),
    ] {
        settings.set(key, value).unwrap();
    }
    let vars = [
        ("SLURM_STEP_NUM_TASKS", "4"),
        ("SLURM_STEP_NODELIST", "n[1-2]"),
        ("SLURM_STEP_TASKS_PER_NODE", "2(x2)"),
        ("SLURMD_NODENAME", "n2"),
    ];
    let vars = vars.iter().map(|&(k, v)| (k, v.to_string())).collect();
    let step = Step::gather(&settings, &mut given(vars))
        .unwrap()
        .step()
        .unwrap();
    let node = crate::node::Node::prepare(settings.clone(), step).unwrap();
    let rank3 = node.task(3, Some(1), None).unwrap();
    assert_eq!(rank3.get("MASTER_PORT"), Some("9004"));
    assert_eq!(rank3.get("JAX_COORDINATOR_ADDRESS"), Some("n2:9005"));
    assert_eq!(rank3.get("TF_CLUSTER_PORTS"), Some("9008,9009"));
    assert_eq!(rank3.get("TF_CLUSTER_STEP_MASTER_PORT"), Some("9000"));
    let rank2 = node.task(2, Some(0), None).unwrap();
    assert_eq!(rank2.get("TF_CLUSTER_PORTS"), Some("9006,9007"));
    assert_eq!(node.ras_port(), Some(9010));
    let roles = crate::frameworks::check_roles(&settings, 4, None).unwrap();
    let needs = crate::frameworks::port_needs(&settings, 2, roles.len());
    assert_eq!(needs.total(), 11);
    let launch = crate::frameworks::Launch {
        tasks: 4,
        nodes: Some(2),
        resv_ports: Some("12000-12009"),
        most_local: Some(2),
        ..Default::default()
    };
    let e = crate::frameworks::check_before_launch(&settings, &launch).unwrap_err();
    assert!(e.to_string().contains("it needs 11 on a node"), "{e}");
}
