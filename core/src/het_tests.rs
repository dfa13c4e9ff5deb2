//! A heterogeneous step: its components' maps merged and checked, one
//! layout and one rendezvous whatever each component reports, one run id.

use crate::frameworks::{Frameworks, pytorch};
use crate::het::check_het_rebuild;
use crate::hostlist::HostList;
use crate::node::resolve;
use crate::roles;
use crate::settings::Settings;
use crate::step::Step;
use crate::task_map::TaskMap;
use crate::test_support::{given, het_task};

/// `srun -n1 -w node3 : -n4 -w node[1-2] -m cyclic|block`: srun merges
/// the components' layouts, and refuses the one the components without
/// its map would rebuild differently.
#[test]
fn het_maps_are_merged_and_checked_against_the_rebuild() {
    let one = |list: &str| HostList::parse(list, 10).unwrap();
    let nodelists = [one("node3"), one("node[1-2]")];
    let cyclic = TaskMap::from_components(
        5,
        0,
        &[
            (one("node3"), vec![vec![0]]),
            (one("node[1-2]"), vec![vec![0, 2], vec![1, 3]]),
        ],
    )
    .unwrap();
    assert_eq!(
        cyclic.hosts.iter().collect::<Vec<_>>(),
        ["node3", "node1", "node2"]
    );
    assert_eq!(cyclic.node_of(), [0, 1, 2, 1, 2]);
    let e = check_het_rebuild(&cyclic, &nodelists)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("rank 2 of this heterogeneous step runs on node2, not on node1"),
        "{e}"
    );
    let block = TaskMap::from_components(
        5,
        0,
        &[
            (one("node3"), vec![vec![0]]),
            (one("node[1-2]"), vec![vec![0, 1], vec![2, 3]]),
        ],
    )
    .unwrap();
    assert_eq!(block.node_of(), [0, 1, 1, 2, 2]);
    check_het_rebuild(&block, &nodelists).unwrap();
    // A component's task ids beyond its own count are Slurm's error.
    let e = TaskMap::from_components(5, 0, &[(one("node1"), vec![vec![0, 2]])]).unwrap_err();
    assert!(e.to_string().contains("out of range"), "{e}");
}

#[test]
fn het_components_agree_whatever_distribution_they_report() {
    let settings = Settings {
        roles: roles::RoleSpec::parse("ps:1,worker:3").unwrap(),
        ..Settings::default()
    };
    let want =
        r#"{"cluster":{"ps":["node3:8888"],"worker":["node1:8888","node1:8889","node2:8888"]},"#;
    for step in [
        het_task("0", "0", "0", "cyclic"),
        het_task("1", "1", "1,2", "block"),
        het_task("3", "2", "3", "block"),
    ] {
        let injection = resolve(&settings, &step).unwrap();
        let tf = injection.get("TF_CONFIG").unwrap();
        assert!(tf.starts_with(want), "{tf}");
    }
    // A component really laid out cyclically is caught on its nodes.
    let e = resolve(&settings, &het_task("1", "1", "1,3", "cyclic")).unwrap_err();
    assert!(
        e.to_string()
            .contains("heterogeneous steps need block layouts"),
        "{e}"
    );
}

/// `salloc -n1 : -n1`, `srun -n1 : -n1 --torch-cluster torchrun …`: each
/// component has its own job id (15, 16), yet both launchers name one
/// rendezvous (torch prefixes its store keys with the id; two ids never meet).
#[test]
fn a_het_step_has_one_rendezvous_id() {
    let settings = Settings {
        frameworks: Frameworks::only(&pytorch::FRAMEWORK),
        ..Settings::default()
    };
    for (procid, node, job) in [("0", "node1", "15"), ("1", "node2", "16")] {
        let vars = [
            ("SLURM_PROCID", procid),
            ("SLURM_STEP_NUM_TASKS", "2"),
            ("SLURM_STEP_NODELIST", "node[1-2]"),
            ("SLURM_STEP_TASKS_PER_NODE", "1(x2)"),
            ("SLURM_NODEID", procid),
            ("SLURMD_NODENAME", node),
            ("SLURM_GTIDS", procid),
            ("SLURM_HET_SIZE", "2"),
            ("SLURM_JOB_ID_HET_GROUP_0", "15"),
            ("SLURM_JOB_ID_HET_GROUP_1", "16"),
            ("SLURM_JOB_NODELIST_HET_GROUP_0", "node1"),
            ("SLURM_JOB_NODELIST_HET_GROUP_1", "node2"),
            ("SLURM_JOB_ID", job),
            ("SLURM_STEP_ID", "0"),
        ];
        let vars = vars.into_iter().map(|(k, v)| (k, v.to_string())).collect();
        let step = Step::gather(&settings, &mut given(vars))
            .unwrap()
            .step()
            .unwrap();
        let injection = resolve(&settings, &step).unwrap();
        assert_eq!(injection.get("PET_RDZV_ID"), Some("15.0"), "job {job}");
        assert_eq!(injection.get("PET_MASTER_ADDR"), Some("node1"), "job {job}");
    }
}

/// A heterogeneous step's run id is the first component's job id in every
/// component, with the restart count.
#[test]
fn a_het_steps_run_id_names_the_first_component() {
    let mut step = Step {
        job_step: Some((16, 0)),
        het_job_id: Some(15),
        ..Step::default()
    };
    assert_eq!(step.run_id().as_deref(), Some("15.0"));
    step.restart_count = 2;
    assert_eq!(step.run_id().as_deref(), Some("15.0.r2"));
    let anonymous = Step {
        restart_count: 1,
        ..Step::default()
    };
    assert_eq!(anonymous.run_id(), None);
}
