//! The ports a step takes without a reservation (its own block of the
//! range), and a reservation too small, refused before launch.

use crate::frameworks::{Frameworks, Launch, check_before_launch, pytorch, tensorflow};
use crate::settings::Settings;
use crate::test_support::{resolve_vars, vars_of};

/// A task of step `step` of job `job` on node1 of a 2-node step with 2
/// tasks per node, as slurmstepd shows it where slurm.conf has no
/// MpiParams=ports (no SLURM_STEP_RESV_PORTS); rank 0.
fn unreserved_task(job: &str, step: &str) -> Vec<(&'static str, String)> {
    [
        ("SLURM_PROCID", "0"),
        ("SLURM_STEP_NUM_TASKS", "4"),
        ("SLURM_STEP_NODELIST", "node[1-2]"),
        ("SLURM_STEP_TASKS_PER_NODE", "2(x2)"),
        ("SLURM_NODEID", "0"),
        ("SLURM_GTIDS", "0,1"),
        ("SLURMD_NODENAME", "node1"),
        ("SLURM_JOB_ID", job),
        ("SLURM_STEP_ID", step),
    ]
    .into_iter()
    .map(|(k, v)| (k, v.to_string()))
    .collect()
}

/// The ports of rank 0 of `unreserved_task` with TensorFlow and PyTorch:
/// its TF_CONFIG's first address's port and MASTER_PORT.
fn unreserved_ports(settings: &Settings, job: &str, step: &str) -> (u16, u16) {
    let got = resolve_vars(settings, unreserved_task(job, step)).unwrap();
    let var = |name: &str| {
        vars_of(&got)
            .into_iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.to_string())
            .unwrap()
    };
    let tf: serde_json::Value = serde_json::from_str(&var("TF_CONFIG")).unwrap();
    let addr = tf["cluster"]["worker"][0].as_str().unwrap();
    let tf_port = addr.rsplit(':').next().unwrap().parse().unwrap();
    (tf_port, var("MASTER_PORT").parse().unwrap())
}

/// Without ports reserved by Slurm, two jobs sharing a node (each one step
/// 0) no longer both take 8888: each step its own block of the port range,
/// from its job and step ids, the same on every node; an explicit port
/// base keeps its meaning.
#[test]
fn steps_without_reserved_ports_take_their_own_block() {
    let both = Settings {
        frameworks: Frameworks::only(&tensorflow::FRAMEWORK).with(&pytorch::FRAMEWORK),
        ..Settings::default()
    };
    let (tf_a, torch_a) = unreserved_ports(&both, "4242", "0");
    let (tf_b, torch_b) = unreserved_ports(&both, "4243", "0");
    for p in [tf_a, torch_a, tf_b, torch_b] {
        assert!((20000..=29499).contains(&p), "{p}");
    }
    // TensorFlow's 2 tasks on a node, then MASTER_PORT: 3 ports each.
    assert_eq!(torch_a, tf_a + 2);
    let a: Vec<u16> = (tf_a..=torch_a).collect();
    assert!(
        !(tf_b..=torch_b).any(|p| a.contains(&p)),
        "{a:?} and {tf_b}-{torch_b}"
    );
    // Another step of the same job: another block too.
    let (tf_c, _) = unreserved_ports(&both, "4242", "1");
    assert!(!a.contains(&tf_c), "{a:?} and {tf_c}");
    // The node does not matter: node2's rank 2 names rank 0 at the same port.
    let mut other = unreserved_task("4242", "0");
    for (k, v) in other.iter_mut() {
        match *k {
            "SLURM_PROCID" => *v = "2".into(),
            "SLURM_NODEID" => *v = "1".into(),
            "SLURM_GTIDS" => *v = "2,3".into(),
            "SLURMD_NODENAME" => *v = "node2".into(),
            _ => {}
        }
    }
    let got = resolve_vars(&both, other).unwrap();
    let master = vars_of(&got).into_iter().find(|(n, _)| *n == "MASTER_PORT");
    assert_eq!(
        master.map(|(_, v)| v.to_string()),
        Some(torch_a.to_string())
    );
    // --tf-port-base=9000: 9000 + local index, whatever the ids.
    let mut based = both.clone();
    based.set("port-base", "9000").unwrap();
    assert_eq!(unreserved_ports(&based, "4242", "0"), (9000, 9002));
    assert_eq!(unreserved_ports(&based, "4243", "0"), (9000, 9002));
    // port-range=40000-40063: 16 slots, so the multiplier is 17 (the first
    // from 16 up sharing no factor with 16): job 4242 × 17 mod 16 = slot 2.
    let mut ranged = both.clone();
    ranged.set("port-range", "40000-40063").unwrap();
    assert_eq!(unreserved_ports(&ranged, "4242", "0"), (40008, 40010));
    assert_eq!(unreserved_ports(&ranged, "4242", "3"), (40020, 40022));
}

/// A reservation smaller than the fullest node needs is refused by srun
/// before launch, in one line naming the count.
#[test]
fn too_few_reserved_ports_are_refused_before_launch() {
    let settings = Settings {
        frameworks: Frameworks::only(&tensorflow::FRAMEWORK).with(&pytorch::FRAMEWORK),
        ..Settings::default()
    };
    let launch = |resv_ports, most_local| Launch {
        tasks: 8,
        nodelist: Some("node[1-2]"),
        nodes: Some(2),
        resv_ports,
        most_local,
        ..Launch::default()
    };
    let check = |l: &Launch| check_before_launch(&settings, l).map_err(|e| e.to_string());
    // 4 tasks on a node + MASTER_PORT: 5 ports.
    check(&launch(Some("12000-12004"), Some(4))).unwrap();
    check(&launch(None, Some(4))).unwrap();
    check(&launch(Some("12000-12003"), None)).unwrap();
    assert_eq!(
        check(&launch(Some("12000-12003"), Some(4))).unwrap_err(),
        "Slurm reserved 4 port(s) (12000-12003) for this step but it needs 5 on a node: ask for them with srun --resv-ports=5"
    );
}
