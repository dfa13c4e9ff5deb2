//! Every framework from one layout: what each task gets, how the frameworks
//! share ports and GPUs, and what the table says of each.

use crate::node::resolve;
use crate::settings::Settings;
use crate::step::Step;
use crate::test_support::{
    given, launcher, launcher_word_on, rebuild_word, resolve_vars, torch, vars_of,
};

use super::{Frameworks, jax, pytorch, tensorflow};

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
            &rebuild_word(7, "10.98.0.0/29", &["TP_SOCKET_IFNAME"], None),
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
    assert_eq!(Frameworks::all(), all);
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

/// What a node's tasks get on the step's network: the frameworks'
/// interface variables but the user's own, which stay as they are (which
/// are the user's: network/decision.rs).
#[test]
fn a_users_interface_variable_is_kept_not_set() {
    let found = |kept: &[&str]| crate::addresses::NodeNetwork {
        address: None,
        network: crate::addresses::Network::parse("eth1").unwrap(),
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
        .chain(crate::addresses::VARS.iter().map(|v| &v.name))
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
            &launcher_word_on(0, Some("10.98.0.0/29")),
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

/// Every setting of the table given alone to a step without a framework
/// option: the record and the requeue act (the step is then the plugin's);
/// their companions act beside them and are refused without; every other
/// is refused with the option's name and the framework options that would
/// make it act; two are named together; none given is no refusal.
#[test]
fn every_setting_alone_is_applied_or_refused_by_name() {
    use super::{acts_alone, check_given_settings};
    use crate::settings::SETTINGS;
    let none = Frameworks::default();
    assert!(check_given_settings(&[], none).is_ok());
    assert!(!acts_alone(&[]));
    let acting = ["record", "requeue-on"];
    let beside = [
        ("record-log", "record"),
        ("requeue-max", "requeue-on"),
        ("exclude-max", "requeue-on"),
    ];
    for setting in SETTINGS.iter() {
        let option = format!("tf-{}", setting.key);
        let got = check_given_settings(&[&option], none);
        if acting.contains(&setting.key) {
            assert!(got.is_ok(), "--{option}: {got:?}");
            assert!(acts_alone(&[&option]), "--{option}");
            continue;
        }
        assert!(!acts_alone(&[&option]), "--{option}");
        let e = got.unwrap_err().to_string();
        if let Some((_, with)) = beside.iter().find(|(k, _)| *k == setting.key) {
            assert_eq!(
                e,
                format!(
                    "--{option} acts on a step without a framework option only beside --tf-{with}, which this srun is not given; without it this step would run as if --{option} were absent"
                )
            );
            let both = [option.as_str(), &format!("tf-{with}")];
            assert!(check_given_settings(&both, none).is_ok(), "{both:?}");
            assert!(acts_alone(&both), "{both:?}");
            continue;
        }
        assert_eq!(
            e,
            format!(
                "--{option} acts only on a step with a framework option (--tf-cluster, --torch-cluster, --jax-cluster or --ray-cluster); without one this step would run as if it were absent"
            )
        );
        // Beside one that acts, still refused, and it alone named.
        let e = check_given_settings(&["tf-record", &option], none)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&format!(
                "--{option} acts only on a step with a framework option"
            )),
            "{e}"
        );
        assert!(!acts_alone(&["tf-record", &option]));
    }
    let both = [
        "tf-record",
        "tf-requeue-on",
        "tf-record-log",
        "tf-requeue-max",
    ];
    assert!(check_given_settings(&both, none).is_ok());
    assert!(acts_alone(&both));
    // A companion beside the other's partner is not beside its own.
    let e = check_given_settings(&["tf-record", "tf-requeue-max"], none).unwrap_err();
    assert!(
        e.to_string().starts_with(
            "--tf-requeue-max acts on a step without a framework option only beside --tf-requeue-on"
        ),
        "{e}"
    );
    let e = check_given_settings(&["tf-port-base", "tf-network"], none).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("--tf-port-base and --tf-network act only on a step"),
        "{e}"
    );
}

/// A setting of one framework alone (`--tf-rpc-layer`, TensorFlow's
/// rpc_layer) acts with that framework's option and is refused with the
/// others; every other setting acts with each of the four.
#[test]
fn a_setting_of_one_framework_needs_that_framework() {
    use super::{FRAMEWORKS, check_given_settings};
    use crate::settings::SETTINGS;
    for f in FRAMEWORKS.iter() {
        let step = Frameworks::default().with(f);
        for setting in SETTINGS.iter() {
            let option = format!("tf-{}", setting.key);
            let got = check_given_settings(&[&option], step);
            if setting.key == "rpc-layer" && f.option != "tf-cluster" {
                assert_eq!(
                    got.unwrap_err().to_string(),
                    "--tf-rpc-layer acts only with --tf-cluster, which this step does not ask for: its framework options would ignore it"
                );
            } else {
                assert!(got.is_ok(), "--{option} with --{}: {got:?}", f.option);
            }
        }
    }
    let both = Frameworks::default()
        .with(&tensorflow::FRAMEWORK)
        .with(&pytorch::FRAMEWORK);
    assert!(check_given_settings(&["tf-rpc-layer"], both).is_ok());
}
