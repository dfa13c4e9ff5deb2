//! Every framework from one layout: what each task gets, and how the
//! frameworks share ports and GPUs.

use std::collections::HashMap;

use crate::error::Result;
use crate::hostlist::HostList;
use crate::injection::Injection;
use crate::layout::check_het_rebuild;
use crate::network::addresses::Interface;
use crate::node::resolve;
use crate::roles;
use crate::settings::Settings;
use crate::source::Given;
use crate::step::Step;
use crate::task_map::TaskMap;

use super::{Frameworks, jax, pytorch, ray, tensorflow};

/// A task's variables, as slurmstepd would show them, on a node without
/// GPUs, with Slurm's names on eth0 and the fast network on ib0.
fn given(vars: HashMap<&'static str, String>) -> Given {
    let iface = |name: &str, addr: &str| Interface {
        name: name.into(),
        addrs: vec![addr.parse().unwrap()],
    };
    Given::vars(vars)
        .gpus(0)
        .interfaces(vec![iface("eth0", "172.18.0.2"), iface("ib0", "10.98.0.2")])
}

/// A task of `srun -n1 -w node3 : -N2 -n3 -w node1,node2`, as measured on
/// the testbed: the first component's task sees `cyclic`.
fn het_task(procid: &str, node_id: &str, gtids: &str, dist: &str) -> Step {
    let vars = [
        ("SLURM_PROCID", procid),
        ("SLURM_STEP_NUM_TASKS", "4"),
        ("SLURM_STEP_NODELIST", "node[1-3]"),
        ("SLURM_STEP_TASKS_PER_NODE", "2,1(x2)"),
        ("SLURM_DISTRIBUTION", dist),
        ("SLURM_NODEID", node_id),
        ("SLURM_GTIDS", gtids),
        ("SLURM_HET_SIZE", "2"),
        ("SLURM_JOB_NODELIST_HET_GROUP_0", "node3"),
        ("SLURM_JOB_NODELIST_HET_GROUP_1", "node[1-2]"),
    ];
    let vars = vars.into_iter().map(|(k, v)| (k, v.to_string())).collect();
    Step::gather(&Settings::default(), &mut given(vars))
        .unwrap()
        .step()
        .unwrap()
}

fn vars_of(injection: &Injection) -> Vec<(&str, &str)> {
    injection.vars().collect()
}

/// `srun -N3 -n5 -m cyclic --resv-ports=4 --gres=gpu:4 --torch-cluster
/// --jax-cluster --tf-host-template={}-ib`, rank 3 (on n1, as its
/// second task: n1 runs 0,3, n2 1,4, n3 2).
#[test]
fn torch_and_jax_from_the_same_layout() {
    let vars = [
        ("SLURM_PROCID", "3"),
        ("SLURM_STEP_NUM_TASKS", "5"),
        ("SLURM_STEP_NODELIST", "n[1-3]"),
        ("SLURM_STEP_TASKS_PER_NODE", "2(x2),1"),
        ("SLURM_DISTRIBUTION", "cyclic"),
        ("SLURM_NODEID", "0"),
        ("SLURM_GTIDS", "0,3"),
        ("SLURM_STEP_RESV_PORTS", "12000-12003"),
        ("CUDA_VISIBLE_DEVICES", "4,5,6,7"),
        ("SLURM_JOB_ID", "7"),
        ("SLURM_STEP_ID", "0"),
        // srun's word: the template's names are in 10.98.0.0/29; the user
        // exported TP_SOCKET_IFNAME, which the step's environment holds
        // (kept: not set again).
        (
            "SLURM_TF_CLUSTER",
            "1;7.0;verdict=none;net=10.98.0.0/29;kept=TP_SOCKET_IFNAME",
        ),
        ("TP_SOCKET_IFNAME", "eth0"),
    ];
    let vars = vars.into_iter().map(|(k, v)| (k, v.to_string())).collect();
    let mut settings = Settings {
        frameworks: Frameworks::only(&pytorch::FRAMEWORK).with(&jax::FRAMEWORK),
        ..Settings::default()
    };
    settings.set("host-template", "{}-ib").unwrap();
    let step = Step::gather(&settings, &mut given(vars))
        .unwrap()
        .step()
        .unwrap();
    let injection = resolve(&settings, &step).unwrap();
    assert_eq!(
        vars_of(&injection),
        [
            // The node's GPUs: local rank 1 takes the second with set_device(1).
            ("CUDA_VISIBLE_DEVICES", "4,5,6,7"),
            ("MASTER_ADDR", "n1-ib"),
            ("MASTER_PORT", "12000"),
            ("RANK", "3"),
            ("WORLD_SIZE", "5"),
            ("LOCAL_RANK", "1"),
            ("LOCAL_WORLD_SIZE", "2"),
            ("GROUP_RANK", "0"),
            ("GROUP_WORLD_SIZE", "3"),
            // torchrun's arguments: each task one launcher.
            ("PET_NNODES", "5"),
            ("PET_NODE_RANK", "3"),
            ("PET_MASTER_ADDR", "n1-ib"),
            ("PET_MASTER_PORT", "12000"),
            ("PET_RDZV_ENDPOINT", "n1-ib:12000"),
            ("PET_RDZV_ID", "7.0"),
            ("PET_RDZV_BACKEND", "static"),
            ("JAX_COORDINATOR_ADDRESS", "n1-ib:12001"),
            // Two GPUs per task; JAX numbers the visible 4,5,6,7 from 0:
            // local rank 1 takes 1 (its PyTorch GPU) and 3, so no GPU is
            // both one task's PyTorch GPU and another's JAX device.
            ("JAX_LOCAL_DEVICE_IDS", "1,3"),
            // The node's interface on the template's network, once though
            // both PyTorch and JAX read NCCL's; the user's TP_SOCKET_IFNAME
            // stays theirs.
            ("NCCL_SOCKET_IFNAME", "=ib0"),
            ("GLOO_SOCKET_IFNAME", "ib0"),
            // The run's id: job 7, step 0, the job's first incarnation.
            ("TF_CLUSTER_RUN_ID", "7.0"),
        ]
    );
    // With TF_CONFIG too, TF's tasks take ports 0 and 1 of each node:
    // PyTorch's and JAX's come after them, so 4 reserved ports are needed.
    settings.frameworks = settings.frameworks.with(&tensorflow::FRAMEWORK);
    let injection = resolve(&settings, &step).unwrap();
    assert_eq!(injection.get("MASTER_PORT"), Some("12002"));
    assert_eq!(
        injection.get("JAX_COORDINATOR_ADDRESS"),
        Some("n1-ib:12003")
    );
    let tf: serde_json::Value = serde_json::from_str(injection.get("TF_CONFIG").unwrap()).unwrap();
    assert_eq!(
        tf["cluster"]["worker"],
        serde_json::json!([
            "n1-ib:12000",
            "n2-ib:12000",
            "n3-ib:12000",
            "n1-ib:12001",
            "n2-ib:12001"
        ])
    );
    let mut short = step.clone();
    short.resv_ports = Some("12000-12002".into());
    let e = resolve(&settings, &short).unwrap_err().to_string();
    assert!(
        e.starts_with("Slurm reserved 3 port(s) (12000-12002) for this step but it needs 4"),
        "{e}"
    );
}

/// PyTorch's GROUP_RANK counts nodes in the order of their first rank:
/// rank 0's node (node3 here, last by name) is group 0.
#[test]
fn group_ranks_follow_the_ranks() {
    let mut settings = Settings::default();
    settings.frameworks = settings.frameworks.with(&pytorch::FRAMEWORK);
    let injection = resolve(&settings, &het_task("1", "1", "1,2", "block")).unwrap();
    assert_eq!(injection.get("MASTER_ADDR"), Some("node3"));
    assert_eq!(injection.get("GROUP_RANK"), Some("1"));
    assert_eq!(injection.get("LOCAL_WORLD_SIZE"), Some("2"));
    assert_eq!(injection.get("TORCHELASTIC_RUN_ID"), None);
}

/// `chief:1,worker:2,evaluator:1`: the evaluator is the last rank, and no
/// task's cluster names it.
#[test]
fn the_evaluator_runs_beside_the_cluster() {
    let settings = Settings {
        roles: roles::RoleSpec::parse("chief:1,worker:2,evaluator:1").unwrap(),
        ..Settings::default()
    };
    for (rank, task) in [
        ("0", r#"{"type":"chief","index":0}"#),
        ("3", r#"{"type":"evaluator","index":0}"#),
    ] {
        let vars = [
            ("SLURM_PROCID", rank),
            ("SLURM_STEP_NUM_TASKS", "4"),
            ("SLURM_STEP_NODELIST", "n[1-2]"),
            ("SLURM_STEP_TASKS_PER_NODE", "2(x2)"),
        ];
        let vars = vars.into_iter().map(|(k, v)| (k, v.to_string())).collect();
        let step = Step::gather(&settings, &mut given(vars))
            .unwrap()
            .step()
            .unwrap();
        let tf = resolve(&settings, &step).unwrap();
        assert_eq!(
            tf.get("TF_CONFIG").unwrap(),
            format!(
                r#"{{"cluster":{{"chief":["n1:8888"],"worker":["n1:8889","n2:8888"]}},"task":{task}}}"#
            )
        );
    }
}

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

/// `srun -N3 --ntasks-per-node=1 -m arbitrary --torch-cluster torchrun …`
/// with the host file node3,node1,node2 in step 4242.7: launcher k is torchrun's
/// node k, in rank order, and the rendezvous is on rank 0's node, node3.
#[test]
fn one_torchrun_per_node() {
    let settings = Settings {
        frameworks: Frameworks::only(&pytorch::FRAMEWORK),
        ..Settings::default()
    };
    let map = "1;4242.7;hosts=node[1-3];runs=2,0,1";
    for (procid, node, want_group) in [("0", "node3", "0"), ("2", "node2", "2")] {
        let vars = [
            ("SLURM_PROCID", procid),
            ("SLURM_STEP_NUM_TASKS", "3"),
            ("SLURM_STEP_NODELIST", "node[1-3]"),
            ("SLURM_STEP_TASKS_PER_NODE", "1(x3)"),
            ("SLURMD_NODENAME", node),
            ("SLURM_GTIDS", procid),
            ("SLURM_STEP_RESV_PORTS", "13000-13001"),
            ("SLURM_JOB_ID", "4242"),
            ("SLURM_STEP_ID", "7"),
            ("SLURM_TF_CLUSTER", map),
        ];
        let vars = vars.into_iter().map(|(k, v)| (k, v.to_string())).collect();
        let step = Step::gather(&settings, &mut given(vars))
            .unwrap()
            .step()
            .unwrap();
        let injection = resolve(&settings, &step).unwrap();
        for (name, want) in [
            ("PET_NNODES", "3"),
            ("PET_NODE_RANK", procid),
            ("GROUP_RANK", want_group),
            ("PET_MASTER_ADDR", "node3"),
            ("PET_RDZV_ENDPOINT", "node3:13000"),
            ("PET_RDZV_ID", "4242.7"),
            ("PET_RDZV_BACKEND", "static"),
            ("LOCAL_RANK", "0"),
        ] {
            assert_eq!(injection.get(name), Some(want), "rank {procid}: {name}");
        }
        assert_eq!(injection.get("TF_CONFIG"), None);
    }
}

/// Each framework's limit says its own number, and only TensorFlow's is
/// below what the layout takes.
#[test]
fn limits_name_their_numbers() {
    for f in super::FRAMEWORKS {
        assert!(
            f.max_tasks_why.contains(&f.max_tasks.to_string()),
            "{}: {}",
            f.name,
            f.max_tasks_why
        );
        assert!(f.max_tasks <= crate::limits::MAX_TASKS, "{}", f.name);
    }
    assert_eq!(tensorflow::FRAMEWORK.max_tasks, 21_845);
    let settings = Settings {
        frameworks: Frameworks::only(&pytorch::FRAMEWORK).with(&jax::FRAMEWORK),
        ..Settings::default()
    };
    let tasks = |tasks| super::Launch {
        tasks,
        ..super::Launch::default()
    };
    super::check_before_launch(&settings, &tasks(262_144)).unwrap();
    let e = super::check_before_launch(&settings, &tasks(262_145)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "the step has 262145 tasks; tf-cluster lays out at most 262144"
    );
    let tf = Settings::default();
    let e = super::check_before_launch(&tf, &tasks(21_846)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "the step has 21846 tasks; TF_CONFIG for more than 21845 cannot fit in one environment variable"
    );
}

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

/// The settings know no framework: their default is the table's first.
#[test]
fn the_default_framework_is_tensorflow() {
    assert_eq!(
        Frameworks::TENSORFLOW,
        Frameworks::only(&tensorflow::FRAMEWORK)
    );
    assert_eq!(Settings::default().frameworks, Frameworks::TENSORFLOW);
    let all = super::FRAMEWORKS
        .iter()
        .fold(Frameworks::default(), |set, f| set.with(f));
    assert_eq!(Frameworks::ALL, all);
}

/// Nothing per task that a container runtime reads to decide what to mount
/// (enroot and the NVIDIA container toolkit read NVIDIA_VISIBLE_DEVICES and
/// the other NVIDIA_* names): a task's value there would decide for every
/// task of the node.
#[test]
fn no_task_sets_what_a_container_runtime_reads() {
    let vars = [
        ("SLURM_PROCID", "1"),
        ("SLURM_STEP_NUM_TASKS", "2"),
        ("SLURM_STEP_NODELIST", "n1"),
        ("SLURM_STEP_TASKS_PER_NODE", "2"),
        ("CUDA_VISIBLE_DEVICES", "0,1"),
        ("ROCR_VISIBLE_DEVICES", "0,1"),
    ];
    let vars = vars.into_iter().map(|(k, v)| (k, v.to_string())).collect();
    let mut step = Step::gather(&Settings::default(), &mut given(vars))
        .unwrap()
        .step()
        .unwrap();
    step.job_step = Some((7, 0));
    for frameworks in [
        Frameworks::only(&tensorflow::FRAMEWORK),
        Frameworks::only(&pytorch::FRAMEWORK).with(&jax::FRAMEWORK),
    ] {
        let settings = Settings {
            frameworks,
            ..Settings::default()
        };
        let injection = resolve(&settings, &step).unwrap();
        assert!(injection.get("CUDA_VISIBLE_DEVICES").is_some());
        for (name, _) in injection.vars() {
            assert!(!name.starts_with("NVIDIA_"), "{name}");
        }
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

/// A framework's option takes `off` (turned off for the step), the empty
/// value (the bare option) or its argument, as srun takes it.
#[test]
fn option_values_as_srun_takes_them() {
    use super::{FRAMEWORKS, OFF, check_value};
    for f in FRAMEWORKS {
        assert!(check_value(f, OFF).is_ok(), "{}", f.option);
        assert!(check_value(f, "").is_ok(), "{}", f.option);
    }
    assert!(check_value(&tensorflow::FRAMEWORK, "ps:1,worker:3").is_ok());
    assert!(check_value(&tensorflow::FRAMEWORK, "ps:1,,worker:3").is_err());
    let e = check_value(&jax::FRAMEWORK, "yes").unwrap_err();
    assert_eq!(
        e.to_string(),
        "--jax-cluster takes no value but off (not \"yes\")"
    );
    for good in ["static", "elastic", "elastic:1", "elastic:3:0"] {
        assert!(check_value(&pytorch::FRAMEWORK, good).is_ok(), "{good}");
    }
    let e = check_value(&pytorch::FRAMEWORK, "yes").unwrap_err();
    assert_eq!(
        e.to_string(),
        "--torch-cluster=\"yes\": use static, elastic, elastic:MIN or elastic:MIN:RESTARTS (or off)"
    );
}

/// `--torch-cluster=VALUE` as srun reads it: MIN at least 1 (the step's
/// node count when not given), RESTARTS 3 when not given.
#[test]
fn torch_rendezvous_values() {
    use pytorch::Rendezvous::{self, Elastic, Static};
    let site = Elastic {
        min: Some(2),
        max_restarts: 1,
    };
    for (value, want) in [
        ("", Static),
        ("static", Static),
        (
            "elastic",
            Elastic {
                min: None,
                max_restarts: 3,
            },
        ),
        (
            "elastic:2",
            Elastic {
                min: Some(2),
                max_restarts: 3,
            },
        ),
        (
            "elastic:1:0",
            Elastic {
                min: Some(1),
                max_restarts: 0,
            },
        ),
        (
            "elastic:4:10",
            Elastic {
                min: Some(4),
                max_restarts: 10,
            },
        ),
    ] {
        assert_eq!(Rendezvous::parse(value, Static).unwrap(), want, "{value}");
    }
    // The bare option keeps the site's default.
    assert_eq!(Rendezvous::parse("", site).unwrap(), site);
    assert_eq!(Rendezvous::parse("static", site).unwrap(), Static);
    for (value, why) in [
        ("elastic:0", "MIN, the fewest nodes, must be 1 or more"),
        ("elastic:", "MIN, the fewest nodes, is not a number"),
        ("elastic:-1", "MIN, the fewest nodes, is not a number"),
        ("elastic:two", "MIN, the fewest nodes, is not a number"),
        ("elastic:2:", "RESTARTS is not a number"),
        ("elastic:2:+1", "RESTARTS is not a number"),
        ("elastic:1:2:3", "at most elastic:MIN:RESTARTS"),
        ("static:1", "use static, elastic"),
        ("Elastic", "use static, elastic"),
        ("elastic2", "use static, elastic"),
    ] {
        let e = Rendezvous::parse(value, Static).unwrap_err().to_string();
        let want = format!("--torch-cluster=\"{value}\": {why}");
        assert!(e.starts_with(&want), "{value}: {e}");
    }
}

/// A task of `srun -N3 --ntasks-per-node=1 -m arbitrary --resv-ports
/// --torch-cluster=… torchrun …` in step 4242.7, with the host file
/// node3,node1,node2: rank 0 runs on node3, rank 1 on node1, rank 2 on
/// node2. `extra`: more of the task's variables.
fn launcher(
    procid: &str,
    node: &str,
    extra: &[(&'static str, &str)],
) -> Vec<(&'static str, String)> {
    let mut vars = vec![
        ("SLURM_PROCID", procid),
        ("SLURM_STEP_NUM_TASKS", "3"),
        ("SLURM_STEP_NODELIST", "node[1-3]"),
        ("SLURM_STEP_TASKS_PER_NODE", "1(x3)"),
        ("SLURMD_NODENAME", node),
        ("SLURM_GTIDS", procid),
        ("SLURM_STEP_RESV_PORTS", "13000-13001"),
        ("SLURM_JOB_ID", "4242"),
        ("SLURM_STEP_ID", "7"),
        ("SLURM_TF_CLUSTER", "1;4242.7;hosts=node[1-3];runs=2,0,1"),
    ];
    vars.extend_from_slice(extra);
    vars.into_iter().map(|(k, v)| (k, v.to_string())).collect()
}

fn resolve_vars(settings: &Settings, vars: Vec<(&'static str, String)>) -> Result<Injection> {
    let step = Step::gather(settings, &mut given(vars.into_iter().collect()))?.step()?;
    resolve(settings, &step)
}

fn torch(value: &str) -> Settings {
    let mut settings = Settings {
        frameworks: Frameworks::only(&pytorch::FRAMEWORK),
        ..Settings::default()
    };
    (pytorch::FRAMEWORK.arg.as_ref().unwrap().set)(&mut settings, value).unwrap();
    settings
}

/// `--torch-cluster=elastic:2:5` with 2 GPUs per node: c10d's rendezvous on
/// rank 0's node (node3) and the step's first reserved port, its store on
/// that node's launcher alone, every launcher its own address, 2 to 3
/// nodes, 5 restarts, a worker per GPU.
#[test]
fn elastic_torchrun_per_node() {
    let settings = torch("elastic:2:5");
    let gpus = [("CUDA_VISIBLE_DEVICES", "0,1")];
    let rank0 = resolve_vars(&settings, launcher("0", "node3", &gpus)).unwrap();
    assert_eq!(
        vars_of(&rank0),
        [
            ("CUDA_VISIBLE_DEVICES", "0,1"),
            ("MASTER_ADDR", "node3"),
            ("MASTER_PORT", "13000"),
            ("RANK", "0"),
            ("WORLD_SIZE", "3"),
            ("LOCAL_RANK", "0"),
            ("LOCAL_WORLD_SIZE", "1"),
            ("GROUP_RANK", "0"),
            ("GROUP_WORLD_SIZE", "3"),
            ("PET_NNODES", "2:3"),
            ("PET_RDZV_ENDPOINT", "node3:13000"),
            ("PET_RDZV_ID", "4242.7"),
            ("PET_RDZV_BACKEND", "c10d"),
            ("PET_RDZV_CONF", "is_host=1"),
            ("PET_LOCAL_ADDR", "node3"),
            ("PET_MAX_RESTARTS", "5"),
            ("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1"),
            ("PET_NPROC_PER_NODE", "2"),
            ("TF_CLUSTER_RUN_ID", "4242.7"),
        ]
    );
    // node1 (rank 1) is not the store's host; no node rank, no static
    // rendezvous arguments: c10d orders the nodes itself.
    let rank1 = resolve_vars(&settings, launcher("1", "node1", &gpus)).unwrap();
    for (name, want) in [
        ("PET_RDZV_CONF", "is_host=0"),
        ("PET_LOCAL_ADDR", "node1"),
        ("PET_RDZV_ENDPOINT", "node3:13000"),
        ("PET_NNODES", "2:3"),
        ("PET_NPROC_PER_NODE", "2"),
    ] {
        assert_eq!(rank1.get(name), Some(want), "{name}");
    }
    for name in ["PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT"] {
        assert_eq!(rank1.get(name), None, "{name}");
    }
    // `elastic`: MIN is the step's node count, 3 restarts; no GPUs, no
    // PET_NPROC_PER_NODE (torchrun's own default).
    let plain = resolve_vars(&torch("elastic"), launcher("2", "node2", &[])).unwrap();
    for (name, want) in [
        ("PET_NNODES", "3:3"),
        ("PET_MAX_RESTARTS", "3"),
        ("PET_RDZV_CONF", "is_host=0"),
        ("PET_LOCAL_ADDR", "node2"),
    ] {
        assert_eq!(plain.get(name), Some(want), "{name}");
    }
    assert_eq!(plain.get("PET_NPROC_PER_NODE"), None);
    assert_eq!(plain.get("CUDA_VISIBLE_DEVICES"), None);
}

/// With a host template, the endpoint and each launcher's address are the
/// nodes' names on the fast network.
#[test]
fn elastic_addresses_follow_the_host_template() {
    let mut settings = torch("elastic");
    settings.set("host-template", "{}-ib").unwrap();
    let net = [(
        "SLURM_TF_CLUSTER",
        "1;4242.7;hosts=node[1-3];runs=2,0,1;net=10.98.0.0/29",
    )];
    let rank1 = resolve_vars(&settings, launcher("1", "node1", &net)).unwrap();
    assert_eq!(rank1.get("PET_RDZV_ENDPOINT"), Some("node3-ib:13000"));
    assert_eq!(rank1.get("PET_LOCAL_ADDR"), Some("node1-ib"));
    assert_eq!(rank1.get("MASTER_ADDR"), Some("node3-ib"));
}

/// A requeued job (its second incarnation, restart count 1) starts its
/// step ids at 0 again: every id the plugin writes carries the count, in
/// either rendezvous and for every framework; the first incarnation's ids
/// stay JOB.STEP.
#[test]
fn ids_carry_the_jobs_restart_count() {
    // srun's hand-off carries the count to the tasks.
    let restarted = |procid: &str, node: &str, k: u32| {
        let mut vars = launcher(procid, node, &[]);
        for (name, value) in &mut vars {
            if *name == "SLURM_TF_CLUSTER" {
                value.push_str(&format!(";restart={k}"));
            }
        }
        vars
    };
    for value in ["", "elastic"] {
        let settings = torch(value);
        let task = resolve_vars(&settings, restarted("1", "node1", 1)).unwrap();
        assert_eq!(task.get("PET_RDZV_ID"), Some("4242.7.r1"), "{value:?}");
        assert_eq!(
            task.get("TF_CLUSTER_RUN_ID"),
            Some("4242.7.r1"),
            "{value:?}"
        );
        let task = resolve_vars(&settings, restarted("1", "node1", 12)).unwrap();
        assert_eq!(task.get("PET_RDZV_ID"), Some("4242.7.r12"), "{value:?}");
    }
    let tf = Settings::default();
    let task = resolve_vars(&tf, restarted("2", "node2", 3)).unwrap();
    assert!(task.get("TF_CONFIG").is_some());
    assert_eq!(task.get("TF_CLUSTER_RUN_ID"), Some("4242.7.r3"));
    assert_eq!(task.get("PET_RDZV_ID"), None);
    // No ids known (the CLI's preview outside a job): no run id.
    let mut anonymous = launcher("1", "node2", &[]);
    anonymous.retain(|(n, _)| !matches!(*n, "SLURM_JOB_ID" | "SLURM_STEP_ID" | "SLURM_TF_CLUSTER"));
    let task = resolve_vars(&tf, anonymous).unwrap();
    assert_eq!(task.get("TF_CLUSTER_RUN_ID"), None);
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

/// srun reads the restart count from its environment's SLURM_RESTART_COUNT
/// (absent before the first requeue).
#[test]
fn the_restart_count_is_slurms_variable() {
    let count = |vars: &[(&'static str, &str)]| {
        let vars = vars.iter().map(|(k, v)| (*k, v.to_string())).collect();
        crate::step::restart_count(&mut given(vars))
    };
    assert_eq!(count(&[]).unwrap(), 0);
    assert_eq!(count(&[("SLURM_RESTART_COUNT", "2")]).unwrap(), 2);
    let e = count(&[("SLURM_RESTART_COUNT", "-1")]).unwrap_err();
    assert_eq!(e.to_string(), "SLURM_RESTART_COUNT is \"-1\", not a number");
}

/// PET_NPROC_PER_NODE: the GPUs a node's one launcher sees (the plugin's
/// list, else Slurm's, else SLURM_GPUS_ON_NODE), in either rendezvous; not
/// set on a node that runs several tasks.
#[test]
fn workers_per_node_from_the_nodes_gpus() {
    for value in ["", "elastic"] {
        let settings = torch(value);
        let four = [("CUDA_VISIBLE_DEVICES", "4,5,6,7")];
        let task = resolve_vars(&settings, launcher("0", "node3", &four)).unwrap();
        assert_eq!(task.get("PET_NPROC_PER_NODE"), Some("4"), "{value:?}");
        // --tf-gpus-per-node=2: the launcher sees 2 of them.
        let mut two = settings.clone();
        two.set("gpus-per-node", "2").unwrap();
        let task = resolve_vars(&two, launcher("0", "node3", &four)).unwrap();
        assert_eq!(task.get("CUDA_VISIBLE_DEVICES"), Some("4,5"), "{value:?}");
        assert_eq!(task.get("PET_NPROC_PER_NODE"), Some("2"), "{value:?}");
        // --tf-auto-set-gpu=false: Slurm's list.
        let mut slurms = settings.clone();
        slurms.set("auto-set-gpu", "false").unwrap();
        let task = resolve_vars(&slurms, launcher("0", "node3", &four)).unwrap();
        assert_eq!(task.get("CUDA_VISIBLE_DEVICES"), None, "{value:?}");
        assert_eq!(task.get("PET_NPROC_PER_NODE"), Some("4"), "{value:?}");
        let on_node = [("SLURM_GPUS_ON_NODE", "8")];
        let task = resolve_vars(&slurms, launcher("0", "node3", &on_node)).unwrap();
        assert_eq!(task.get("PET_NPROC_PER_NODE"), Some("8"), "{value:?}");
    }
    // Two tasks on a node: direct ranks, or launchers sharing the node's
    // GPUs: none is told to start a worker per GPU.
    let vars = [
        ("SLURM_PROCID", "1"),
        ("SLURM_STEP_NUM_TASKS", "2"),
        ("SLURM_STEP_NODELIST", "node1"),
        ("SLURM_STEP_TASKS_PER_NODE", "2"),
        ("SLURM_NODEID", "0"),
        ("SLURM_GTIDS", "0,1"),
        ("CUDA_VISIBLE_DEVICES", "0,1"),
    ];
    let vars = vars.iter().map(|(k, v)| (*k, v.to_string())).collect();
    let task = resolve_vars(&torch(""), vars).unwrap();
    assert_eq!(task.get("CUDA_VISIBLE_DEVICES"), Some("0,1"));
    assert_eq!(task.get("PET_NPROC_PER_NODE"), None);
}

/// srun's refusals before launch, in one line each: one task per node, MIN
/// at most the step's nodes; none for the static rendezvous, none where
/// srun cannot tell. Without ports reserved by Slurm the rendezvous takes
/// the step's block of the port range: not refused.
#[test]
fn elastic_refusals_before_launch() {
    let launch = |tasks, nodes, resv_ports| super::Launch {
        tasks,
        nodelist: Some("node[1-3]"),
        nodes,
        resv_ports,
        ..super::Launch::default()
    };
    let check = |value: &str, l: &super::Launch| {
        super::check_before_launch(&torch(value), l).map_err(|e| e.to_string())
    };
    check("elastic", &launch(3, Some(3), Some("12000-12001"))).unwrap();
    check("elastic:3", &launch(3, Some(3), Some("12000-12001"))).unwrap();
    check("elastic:1", &launch(1, Some(1), Some("12000-12001"))).unwrap();
    check("elastic", &launch(3, None, None)).unwrap();
    check("elastic", &launch(3, Some(3), None)).unwrap();
    for value in ["", "static"] {
        check(value, &launch(6, Some(3), None)).unwrap();
    }
    assert_eq!(
        check("elastic:2", &launch(6, Some(3), Some("12000-12001"))).unwrap_err(),
        "--torch-cluster=elastic runs one torchrun per node, but the step has 6 tasks on 3 nodes: use --ntasks-per-node=1"
    );
    assert_eq!(
        check("elastic:4", &launch(3, Some(3), Some("12000-12001"))).unwrap_err(),
        "--torch-cluster=elastic:4: MIN is more than the step's 3 nodes"
    );
    // Refused as the option is read: MIN 0.
    let mut settings = torch("");
    let e = (pytorch::FRAMEWORK.arg.as_ref().unwrap().set)(&mut settings, "elastic:0");
    assert!(e.is_err());
}

/// What srun refuses, each task (and the CLI's preview, which renders the
/// same way) refuses too, from the layout.
#[test]
fn elastic_refusals_when_rendered() {
    let e = resolve_vars(&torch("elastic:4"), launcher("1", "node1", &[])).unwrap_err();
    assert_eq!(
        e.to_string(),
        "--torch-cluster=elastic:4: MIN is more than the step's 3 nodes"
    );
    let vars = [
        ("SLURM_PROCID", "1"),
        ("SLURM_STEP_NUM_TASKS", "4"),
        ("SLURM_STEP_NODELIST", "node[1-2]"),
        ("SLURM_STEP_TASKS_PER_NODE", "2(x2)"),
        ("SLURM_NODEID", "0"),
        ("SLURM_GTIDS", "0,1"),
    ];
    let vars = vars.iter().map(|(k, v)| (*k, v.to_string())).collect();
    let e = resolve_vars(&torch("elastic"), vars).unwrap_err();
    assert_eq!(
        e.to_string(),
        "--torch-cluster=elastic runs one torchrun per node, but the step has 4 tasks on 2 nodes: use --ntasks-per-node=1"
    );
}

#[test]
fn every_setting_has_a_key_an_argument_and_help() {
    let keys: Vec<&str> = crate::settings::SETTINGS.iter().map(|s| s.key).collect();
    assert_eq!(
        keys,
        [
            "port-base",
            "port-range",
            "gpus-per-node",
            "gpus-per-task",
            "auto-set-gpu",
            "rpc-layer",
            "host-template",
            "network",
            "apptainer-env",
            "preflight",
            "record",
            "record-log",
            "requeue-on",
            "requeue-max"
        ]
    );
    for s in &crate::settings::SETTINGS {
        assert!(!s.arg.is_empty() && !s.help.is_empty(), "{}", s.key);
    }
    assert!(Settings::default().set("cluster", "ps:1").is_err());
    let options: Vec<&str> = crate::frameworks::FRAMEWORKS
        .iter()
        .map(|f| f.option)
        .collect();
    assert_eq!(
        options,
        ["tf-cluster", "torch-cluster", "jax-cluster", "ray-cluster"]
    );
}

/// `torch-cluster=elastic:2` in plugstack.conf: the rendezvous a bare
/// `--torch-cluster` gets, asking for no framework by itself; the
/// step's own value wins.
#[test]
fn the_site_may_make_torchrun_elastic() {
    use crate::frameworks::pytorch::{self, Rendezvous};
    let s = Settings::from_admin_args(["torch-cluster=elastic:2", "port-base=9000"]).unwrap();
    let elastic = Rendezvous::Elastic {
        min: Some(2),
        max_restarts: 3,
    };
    assert_eq!(s.torch, elastic);
    assert_eq!(s.port_base, Some(9000));
    assert_eq!(s.frameworks, Settings::default().frameworks);
    let arg = pytorch::FRAMEWORK.arg.as_ref().unwrap();
    let mut bare = s.clone();
    (arg.set)(&mut bare, "").unwrap();
    assert_eq!(bare.torch, elastic);
    let mut own = s.clone();
    (arg.set)(&mut own, "static").unwrap();
    assert_eq!(own.torch, Rendezvous::Static);
    assert_eq!(Settings::default().torch, Rendezvous::Static);
    for (arg, want) in [
        (
            "torch-cluster=elastic:0",
            "plugstack.conf argument --torch-cluster=\"elastic:0\": MIN, the fewest nodes, must be 1 or more",
        ),
        // TensorFlow's roles are the step's, never a site's.
        ("tf-cluster=ps:1", "unknown key \"tf-cluster\""),
    ] {
        let e = Settings::from_admin_args([arg]).unwrap_err().to_string();
        assert!(e.contains(want), "{arg}: {e}");
    }
}

/// What a node's tasks get on the step's network: the frameworks'
/// interface variables but the user's own, which stay as they are (which
/// are the user's: network/decision.rs).
#[test]
fn a_users_interface_variable_is_kept_not_set() {
    let found = |kept: &[&str]| crate::network::addresses::NodeNetwork {
        network: crate::network::addresses::Network::parse("eth1").unwrap(),
        interface: "eth1".into(),
        kept: kept.iter().map(|k| k.to_string()).collect(),
    };
    let torch = Settings {
        frameworks: Frameworks::only(&pytorch::FRAMEWORK),
        ..Settings::default()
    };
    let found_none = found(&[]);
    assert!(
        super::network_vars(torch.frameworks, &found_none)
            .contains(&("NCCL_SOCKET_IFNAME", "=eth1".into())),
        "{:?}",
        super::network_vars(torch.frameworks, &found_none)
    );
    let found_all = found(&["NCCL_SOCKET_IFNAME"]);
    assert!(
        !super::network_vars(torch.frameworks, &found_all)
            .iter()
            .any(|(n, _)| *n == "NCCL_SOCKET_IFNAME")
    );
}

/// The container tests' image (docker/node/images/environment) sets every
/// name a task can get, each with a value that must lose: a name added to
/// the core and missing there would go untested behind a container. Every
/// framework at once (one launcher per node, so PyTorch's PET_NPROC_PER_NODE
/// too), each rendezvous, all four device variables, a network, the run's
/// id; the Apptainer mirror's prefixed copies aside.
#[test]
fn the_container_tests_image_sets_every_name_a_task_can_get() {
    use std::collections::BTreeSet;
    let text = include_str!("../../../docker/node/images/environment");
    let image: BTreeSet<String> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('=').map(|(n, _)| n.to_string()))
        .collect();
    let mut names: BTreeSet<String> = crate::gpus::DEVICE_VARS
        .iter()
        .chain(crate::network::addresses::VARS.iter().map(|v| &v.name))
        .chain([&crate::step::RUN_ID_VAR])
        .map(|n| n.to_string())
        .collect();
    let extra = [
        ("SLURM_STEP_RESV_PORTS", "13000-13003"),
        ("CUDA_VISIBLE_DEVICES", "0,1,2,3"),
        ("ROCR_VISIBLE_DEVICES", "0,1,2,3"),
        ("ZE_AFFINITY_MASK", "0,1,2,3"),
        ("GPU_DEVICE_ORDINAL", "0,1,2,3"),
        (
            "SLURM_TF_CLUSTER",
            "1;4242.7;hosts=node[1-3];runs=2,0,1;net=10.98.0.0/29",
        ),
    ];
    for torch_value in ["", "elastic"] {
        let mut settings = torch(torch_value);
        settings.frameworks = settings
            .frameworks
            .with(&tensorflow::FRAMEWORK)
            .with(&jax::FRAMEWORK);
        settings.set("host-template", "{}-ib").unwrap();
        let task = resolve_vars(&settings, launcher("0", "node3", &extra)).unwrap();
        names.extend(task.vars().map(|(n, _)| n.to_string()));
    }
    let missing: Vec<&String> = names.difference(&image).collect();
    assert!(missing.is_empty(), "not in the image: {missing:?}");
    // The image's other names are Slurm's own task variables and JAX's two
    // that JAX takes from Slurm itself: none a task gets from the plugin.
    let others: Vec<&str> = image
        .difference(&names)
        .map(String::as_str)
        .filter(|n| !n.starts_with("SLURM"))
        .collect();
    assert_eq!(others, ["JAX_NUM_PROCESSES", "JAX_PROCESS_ID"]);
}

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
    let launch = |resv_ports, most_local| super::Launch {
        tasks: 8,
        nodelist: Some("node[1-2]"),
        nodes: Some(2),
        resv_ports,
        most_local,
        ..super::Launch::default()
    };
    let check =
        |l: &super::Launch| super::check_before_launch(&settings, l).map_err(|e| e.to_string());
    // 4 tasks on a node + MASTER_PORT: 5 ports.
    check(&launch(Some("12000-12004"), Some(4))).unwrap();
    check(&launch(None, Some(4))).unwrap();
    check(&launch(Some("12000-12003"), None)).unwrap();
    assert_eq!(
        check(&launch(Some("12000-12003"), Some(4))).unwrap_err(),
        "Slurm reserved 4 port(s) (12000-12003) for this step but it needs 5 on a node: ask for them with srun --resv-ports=5"
    );
}

/// torchrun with several tasks on a node: each task's torchrun would start
/// workers from local rank 0 on the node's GPUs. srun refuses it before
/// launch from its command; ranks srun starts directly are not refused.
#[test]
fn torchrun_with_several_tasks_on_a_node_is_refused_before_launch() {
    let words = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
    for command in [
        "torchrun --nproc_per_node=4 ddp.py",
        "/opt/venv/bin/torchrun ddp.py",
        "python3 -m torch.distributed.run --nproc_per_node=2 ddp.py",
        "python -mtorch.distributed.launch ddp.py",
        "env OMP_NUM_THREADS=1 torchrun ddp.py",
        "apptainer exec img.sif torchrun ddp.py",
    ] {
        assert!(pytorch::starts_torchrun(&words(command)), "{command}");
    }
    let shell = [
        "bash".to_string(),
        "-c".into(),
        "cd run; torchrun --nproc_per_node=$G ddp.py".into(),
    ];
    assert!(pytorch::starts_torchrun(&shell));
    for command in [
        "python3 ddp.py",
        "python3 torchrun_notes.py",
        "python3 -m torch.utils.bottleneck x.py",
    ] {
        assert!(!pytorch::starts_torchrun(&words(command)), "{command}");
    }
    let settings = torch("");
    let command = words("torchrun --nproc_per_node=4 ddp.py");
    let direct = words("python3 ddp.py");
    let launch = |command, most_local| super::Launch {
        tasks: 8,
        nodelist: Some("node[1-2]"),
        nodes: Some(2),
        most_local: Some(most_local),
        command: Some(command),
        ..super::Launch::default()
    };
    let check =
        |l: &super::Launch| super::check_before_launch(&settings, l).map_err(|e| e.to_string());
    assert_eq!(
        check(&launch(&command, 4)).unwrap_err(),
        "torchrun starts its node's workers itself, but this step runs 4 tasks (each a torchrun) on a node, whose workers would share GPUs: use --ntasks-per-node=1 with torchrun --nproc_per_node=4"
    );
    check(&launch(&command, 1)).unwrap();
    check(&launch(&direct, 4)).unwrap();
}

/// The secret srun drew for the Ray steps below: 32 bytes of token
/// (0x11…), then 8 of the private directory's name (0xa0-0xa7).
const RAY_SECRET: &str =
    "1111111111111111111111111111111111111111111111111111111111111111a0a1a2a3a4a5a6a7";

/// A task of `srun -N3 --ntasks-per-node=1 --ray-cluster
/// --tf-host-template={}-ib`, job 7 step 0, rank `rank` on n{rank+1}, with
/// the ports `resv` reserved by Slurm (None: no MpiParams=ports).
fn ray_task(rank: u32, resv: Option<&str>, job: &str) -> Injection {
    let node = rank.to_string();
    let mut vars: HashMap<&'static str, String> = [
        ("SLURM_PROCID", node.as_str()),
        ("SLURM_STEP_NUM_TASKS", "3"),
        ("SLURM_STEP_NODELIST", "n[1-3]"),
        ("SLURM_STEP_TASKS_PER_NODE", "1(x3)"),
        ("SLURM_NODEID", node.as_str()),
        ("SLURM_GTIDS", node.as_str()),
        ("SLURM_JOB_ID", job),
        ("SLURM_STEP_ID", "0"),
        (
            "SLURM_TF_CLUSTER",
            &format!("1;{job}.0;verdict=none;net=10.98.0.0/29;secret={RAY_SECRET}"),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k, v.to_string()))
    .collect();
    if let Some(r) = resv {
        vars.insert("SLURM_STEP_RESV_PORTS", r.to_string());
    }
    let mut settings = Settings {
        frameworks: Frameworks::only(&ray::FRAMEWORK),
        ..Settings::default()
    };
    settings.set("host-template", "{}-ib").unwrap();
    let step = Step::gather(&settings, &mut given(vars))
        .unwrap()
        .step()
        .unwrap();
    resolve(&settings, &step).unwrap()
}

/// Ray's ports, by `ray start`'s defaults, are fixed (GCS 6379, client
/// server 10001, dashboard 8265, dashboard agent 52365, workers
/// 10002-19999) or random: every Ray of a node would meet. Here every one
/// is the step's: 9 ports in `ray start`'s flags, then 55 for the workers;
/// the head at rank 0's address on the template's network.
#[test]
fn ray_takes_every_port_from_the_step() {
    let worker = ray_task(1, Some("12000-12063"), "7");
    assert_eq!(
        vars_of(&worker),
        [
            ("RAY_ADDRESS", "n1-ib:12000"),
            ("TF_CLUSTER_RAY_NODE", "n2-ib"),
            (
                "TF_CLUSTER_RAY_TEMP_DIR",
                "/tmp/tfc-ray-a0a1a2a3a4a5a6a7/ray"
            ),
            (
                "TF_CLUSTER_RAY_ARGS",
                "--node-manager-port=12001 --object-manager-port=12002 --runtime-env-agent-port=12003 --dashboard-agent-grpc-port=12004 --dashboard-agent-listen-port=12005 --metrics-export-port=12006 --min-worker-port=12009 --max-worker-port=12063 --temp-dir=/tmp/tfc-ray-a0a1a2a3a4a5a6a7/ray"
            ),
            ("RAY_AUTH_MODE", "token"),
            ("RAY_AUTH_TOKEN", &"1".repeat(64)),
            ("NCCL_SOCKET_IFNAME", "=ib0"),
            ("TF_CLUSTER_RUN_ID", "7.0"),
        ]
    );
    // The head's own ports on rank 0's node only.
    let head = ray_task(0, Some("12000-12063"), "7");
    assert_eq!(
        head.get("TF_CLUSTER_RAY_HEAD_ARGS"),
        Some("--port=12000 --ray-client-server-port=12007 --dashboard-port=12008")
    );
    assert_eq!(head.get("TF_CLUSTER_RAY_NODE"), Some("n1-ib"));
    // Reserved ports with a gap among the workers': a list (22 + 33).
    let gap = ray_task(2, Some("12000-12030,12100-12132"), "7");
    let args = gap.get("TF_CLUSTER_RAY_ARGS").unwrap();
    let list: Vec<String> = (12009..=12030)
        .chain(12100..=12132)
        .map(|p: u16| p.to_string())
        .collect();
    assert!(
        args.contains(&format!("--worker-port-list={} ", list.join(","))),
        "{args}"
    );
}

/// Every node's Ray and the driver run with Ray's token authentication on
/// and the step's own token, whatever the user exported (a token file of
/// theirs, RAY_AUTH_MODE=disabled); a step whose srun drew no secret (an
/// srun without the plugin) is refused rather than run without one.
#[test]
fn ray_runs_with_the_steps_token_or_not_at_all() {
    for rank in 0..3 {
        let task = ray_task(rank, Some("12000-12063"), "7");
        assert_eq!(task.get("RAY_AUTH_MODE"), Some("token"));
        assert_eq!(task.get("RAY_AUTH_TOKEN"), Some("1".repeat(64).as_str()));
    }
    let vars: HashMap<&'static str, String> = [
        ("SLURM_PROCID", "0"),
        ("SLURM_STEP_NUM_TASKS", "1"),
        ("SLURM_STEP_NODELIST", "n1"),
        ("SLURM_STEP_TASKS_PER_NODE", "1"),
        ("SLURM_NODEID", "0"),
        ("SLURM_GTIDS", "0"),
        ("SLURM_JOB_ID", "7"),
        ("SLURM_STEP_ID", "0"),
        ("SLURM_STEP_RESV_PORTS", "12000-12063"),
        ("RAY_AUTH_TOKEN", "mine"),
        ("RAY_AUTH_MODE", "disabled"),
    ]
    .into_iter()
    .map(|(k, v)| (k, v.to_string()))
    .collect();
    let settings = Settings {
        frameworks: Frameworks::only(&ray::FRAMEWORK),
        ..Settings::default()
    };
    let step = Step::gather(&settings, &mut given(vars))
        .unwrap()
        .step()
        .unwrap();
    let e = resolve(&settings, &step).unwrap_err().to_string();
    assert!(
        e.contains("--ray-cluster needs the step's secret from srun"),
        "{e}"
    );
}

/// Without a reservation, a Ray step takes a block of 64 ports (16 slots):
/// job 4242, step 0 of the default range 20000-29499 (2,375 slots, 148
/// blocks of 16 slots, multiplier 17, the first from 16 up sharing no
/// factor with 148): block 4242 × 17 mod 148 = 38, from port
/// 20000 + 38 × 64 = 22432 to 22495.
#[test]
fn ray_without_reserved_ports_takes_a_block_of_its_own() {
    let task = ray_task(0, None, "4242");
    assert_eq!(task.get("RAY_ADDRESS"), Some("n1-ib:22432"));
    assert_eq!(
        task.get("TF_CLUSTER_RAY_HEAD_ARGS"),
        Some("--port=22432 --ray-client-server-port=22439 --dashboard-port=22440")
    );
    let args = task.get("TF_CLUSTER_RAY_ARGS").unwrap();
    assert!(
        args.contains("--min-worker-port=22441 --max-worker-port=22495"),
        "{args}"
    );
}

/// What cannot work is refused by srun before launch, in one line: a
/// reservation smaller than Ray's 64 ports (65 with PyTorch's MASTER_PORT),
/// and several tasks on a node.
#[test]
fn ray_refusals_before_launch() {
    let ray_only = Settings {
        frameworks: Frameworks::only(&ray::FRAMEWORK),
        ..Settings::default()
    };
    let with_torch = Settings {
        frameworks: Frameworks::only(&pytorch::FRAMEWORK).with(&ray::FRAMEWORK),
        ..Settings::default()
    };
    let launch = |resv_ports, most_local| super::Launch {
        tasks: 3,
        nodelist: Some("node[1-3]"),
        nodes: Some(3),
        resv_ports,
        most_local: Some(most_local),
        ..super::Launch::default()
    };
    let check = |s: &Settings, l: &super::Launch| {
        super::check_before_launch(s, l).map_err(|e| e.to_string())
    };
    assert_eq!(
        check(&ray_only, &launch(Some("12000-12003"), 1)).unwrap_err(),
        "Slurm reserved 4 port(s) (12000-12003) for this step but it needs 64 on a node: ask for them with srun --resv-ports=64"
    );
    check(&ray_only, &launch(Some("12000-12063"), 1)).unwrap();
    check(&ray_only, &launch(None, 1)).unwrap();
    assert!(
        check(&with_torch, &launch(Some("12000-12063"), 1))
            .unwrap_err()
            .ends_with("srun --resv-ports=65")
    );
    assert_eq!(
        check(&ray_only, &launch(Some("12000-12999"), 2)).unwrap_err(),
        "--ray-cluster runs one Ray node per Slurm node, but the step has 2 tasks on a node: use --ntasks-per-node=1 (Ray starts each node's workers itself)"
    );
}
