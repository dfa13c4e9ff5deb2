//! PyTorch's variables: ranks and groups, torchrun per node in either
//! rendezvous, its workers per node, and what srun and each task refuse.

use crate::node::resolve;
use crate::settings::Settings;
use crate::step::Step;
use crate::test_support::{
    given, het_task, launcher, launcher_word, launcher_word_on, resolve_vars, torch, vars_of,
};

use super::{Frameworks, pytorch};

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

/// `srun -N3 --ntasks-per-node=1 -m arbitrary --torch-cluster torchrun …`
/// with the host file node3,node1,node2 in step 4242.7: launcher k is torchrun's
/// node k, in rank order, and the rendezvous is on rank 0's node, node3.
#[test]
fn one_torchrun_per_node() {
    let settings = Settings {
        frameworks: Frameworks::only(&pytorch::FRAMEWORK),
        ..Settings::default()
    };
    let map = launcher_word(0);
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
            ("SLURM_TF_CLUSTER", map.as_str()),
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
    let word = launcher_word_on(0, Some("10.98.0.0/29"));
    let net = [("SLURM_TF_CLUSTER", word.as_str())];
    let rank1 = resolve_vars(&settings, launcher("1", "node1", &net)).unwrap();
    assert_eq!(rank1.get("PET_RDZV_ENDPOINT"), Some("node3-ib:13000"));
    assert_eq!(rank1.get("PET_LOCAL_ADDR"), Some("node1-ib"));
    assert_eq!(rank1.get("MASTER_ADDR"), Some("node3-ib"));
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
