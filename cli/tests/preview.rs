//! `explain` and `env` outside a step: on a login node from srun's shape
//! options, in an allocation from the job's variables. Every expected
//! placement below is derived from Slurm's documented rules (srun(1) -m:
//! block fills a node before the next, cyclic deals one task per node in
//! turn, plane=N deals N; the step layout counts tasks per node as a cyclic
//! deal, so the first nodes take the extra tasks; ports are the port base +
//! the task's local index), never copied from this program's output.

mod hermetic;

use std::process::Output;

use serde_json::{Value, json};

fn cli(args: &[&str], env: &[(&str, &str)]) -> Output {
    hermetic::tf_cluster()
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// explain's table: (rank, role, index, address, gpus) of each rank, and
/// the lines after the table.
fn table(text: &str) -> (Vec<[String; 5]>, Vec<String>) {
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["RANK", "ROLE", "INDEX", "ADDRESS", "GPUS"],
        "{text}"
    );
    let mut rows = Vec::new();
    let mut rest = Vec::new();
    for line in lines {
        let cells: Vec<&str> = line.split_whitespace().collect();
        let is_row = cells.len() == 5 && cells[0].parse::<u32>().is_ok();
        if is_row && rest.is_empty() {
            rows.push([0, 1, 2, 3, 4].map(|i| cells[i].to_string()));
        } else {
            rest.push(line.to_string());
        }
    }
    (rows, rest)
}

/// The (role, index, address, gpus) of each rank, in rank order.
fn placed(text: &str) -> Vec<(String, String, String, String)> {
    let (rows, _) = table(text);
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(r[0], i.to_string(), "{text}");
    }
    rows.into_iter()
        .map(|[_, role, index, addr, gpus]| (role, index, addr, gpus))
        .collect()
}

fn want(rows: &[(&str, u32, &str, &str)]) -> Vec<(String, String, String, String)> {
    rows.iter()
        .map(|(role, index, addr, gpus)| {
            (
                role.to_string(),
                index.to_string(),
                addr.to_string(),
                gpus.to_string(),
            )
        })
        .collect()
}

fn notes(text: &str) -> Vec<String> {
    table(text).1
}

/// `srun -N2 -n4` on a login node: block, two tasks per node; the nodes
/// are invented and the output says so.
#[test]
fn login_node_nodes_and_tasks() {
    for args in [
        ["explain", "-N2", "-n4", "--tf-cluster=ps:1,worker:3"],
        [
            "explain",
            "--nodes=2",
            "--ntasks=4",
            "--tf-cluster=ps:1,worker:3",
        ],
    ] {
        let text = ok(&cli(&args, &[]));
        assert_eq!(
            placed(&text),
            want(&[
                ("ps", 0, "node1:8888", "-"),
                ("worker", 0, "node1:8889", "-"),
                ("worker", 1, "node1:8890", "-"),
                ("worker", 2, "node2:8888", "-"),
            ]),
            "{text}"
        );
        let notes = notes(&text);
        assert!(
            notes
                .iter()
                .any(|l| l.contains("node1..node2 are invented")),
            "{notes:?}"
        );
        assert!(
            notes.iter().any(|l| l.contains("CPU counts are unknown")),
            "{notes:?}"
        );
        assert!(notes.iter().any(|l| l.contains("port base")), "{notes:?}");
    }
}

/// The ports note follows slurm.conf's MpiParams=ports.
#[test]
fn ports_follow_slurm_conf() {
    let dir = std::env::temp_dir().join(format!("tfc-preview-conf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let with = dir.join("with.conf");
    std::fs::write(&with, "ClusterName=c\nMpiParams=ports=12000-12999\n").unwrap();
    let without = dir.join("without.conf");
    std::fs::write(&without, "ClusterName=c\n").unwrap();
    let note = |conf: &std::path::Path| {
        let text = ok(&cli(
            &["explain", "-N2"],
            &[("SLURM_CONF", conf.to_str().unwrap())],
        ));
        notes(&text)
            .into_iter()
            .find(|l| l.starts_with("ports: "))
            .unwrap()
    };
    assert!(
        note(&with)
            .contains("Slurm reserves each step's ports at launch (MpiParams=ports=12000-12999"),
        "{}",
        note(&with)
    );
    assert!(
        note(&without).contains("reserves no ports"),
        "{}",
        note(&without)
    );
}

/// `--ntasks-per-node=3 -N2`: six tasks, three on each node, in blocks.
#[test]
fn login_node_tasks_per_node() {
    let text = ok(&cli(
        &[
            "explain",
            "-N",
            "2",
            "--ntasks-per-node",
            "3",
            "--tf-cluster",
        ],
        &[],
    ));
    let addrs: Vec<String> = placed(&text).into_iter().map(|r| r.2).collect();
    assert_eq!(
        addrs,
        [
            "node1:8888",
            "node1:8889",
            "node1:8890",
            "node2:8888",
            "node2:8889",
            "node2:8890"
        ]
    );
    // -n and --ntasks-per-node without -N: as many nodes as needed.
    let text = ok(&cli(
        &["explain", "-n5", "--ntasks-per-node=2", "--tf-cluster"],
        &[],
    ));
    let addrs: Vec<String> = placed(&text).into_iter().map(|r| r.2).collect();
    assert_eq!(
        addrs,
        [
            "node1:8888",
            "node1:8889",
            "node2:8888",
            "node2:8889",
            "node3:8888"
        ]
    );
}

/// `-w gpu[07-08] -n3`: the named nodes (no invented-names note); the step
/// layout gives the first node the extra task (2 and 1).
#[test]
fn login_node_with_a_hostlist() {
    for w in ["-wgpu[07-08]", "--nodelist=gpu[07-08]"] {
        let text = ok(&cli(&["explain", w, "-n3", "--tf-cluster"], &[]));
        assert_eq!(
            placed(&text),
            want(&[
                ("worker", 0, "gpu07:8888", "-"),
                ("worker", 1, "gpu07:8889", "-"),
                ("worker", 2, "gpu08:8888", "-"),
            ]),
            "{text}"
        );
        assert!(
            !notes(&text).iter().any(|l| l.contains("invented")),
            "{text}"
        );
    }
    // Slurm's node order, not the order written, and a note says so.
    let text = ok(&cli(&["explain", "-w", "n10,n9", "--tf-cluster"], &[]));
    let addrs: Vec<String> = placed(&text).into_iter().map(|r| r.2).collect();
    assert_eq!(addrs, ["n9:8888", "n10:8888"]);
    assert!(
        notes(&text)
            .iter()
            .any(|l| l.contains("as slurm.conf lists them")),
        "{text}"
    );
    // Without -n, -w alone: one task per node.
    let text = ok(&cli(&["explain", "-w", "n[1-3]", "--tf-cluster"], &[]));
    let addrs: Vec<String> = placed(&text).into_iter().map(|r| r.2).collect();
    assert_eq!(addrs, ["n1:8888", "n2:8888", "n3:8888"]);
}

/// `-m cyclic`: ranks alternate over the nodes; each node's local index
/// picks the port.
#[test]
fn login_node_cyclic() {
    for m in [["-m", "cyclic"], ["--distribution", "cyclic:block"]] {
        let mut args = vec!["explain", "-N2", "-n4", "-w", "n[1-2]"];
        args.extend(m);
        args.push("--tf-cluster=chief:1,worker:3");
        let text = ok(&cli(&args, &[]));
        assert_eq!(
            placed(&text),
            want(&[
                ("chief", 0, "n1:8888", "-"),
                ("worker", 0, "n2:8888", "-"),
                ("worker", 1, "n1:8889", "-"),
                ("worker", 2, "n1:8890", "-"),
            ]),
            "{text}"
        );
    }
}

/// `-m plane=2` with three tasks per node (as the testbed's plane test):
/// ranks 0-1 on the first node, 2-3 on the second, 4 on the first, 5 on the
/// second.
#[test]
fn login_node_plane() {
    let text = ok(&cli(
        &[
            "explain",
            "-N2",
            "-n6",
            "--ntasks-per-node=3",
            "-m",
            "plane=2",
            "--tf-cluster",
        ],
        &[],
    ));
    let addrs: Vec<String> = placed(&text).into_iter().map(|r| r.2).collect();
    assert_eq!(
        addrs,
        [
            "node1:8888",
            "node1:8889",
            "node2:8888",
            "node2:8889",
            "node1:8890",
            "node2:8890"
        ]
    );
}

/// `-m arbitrary -w LIST`: rank r on the r-th host of the list.
#[test]
fn login_node_arbitrary() {
    let text = ok(&cli(
        &[
            "explain",
            "-n4",
            "-m",
            "arbitrary",
            "-w",
            "node2,node1,node2,node1",
            "--tf-cluster",
        ],
        &[],
    ));
    let addrs: Vec<String> = placed(&text).into_iter().map(|r| r.2).collect();
    assert_eq!(
        addrs,
        ["node2:8888", "node1:8888", "node2:8889", "node1:8889"]
    );
    // From SLURM_HOSTFILE, as srun reads it without -w.
    let dir = std::env::temp_dir().join(format!("tfc-preview-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("hosts");
    std::fs::write(&file, "n3\n# a comment\nn1\nn3\n").unwrap();
    let text = ok(&cli(
        &["explain", "-n3", "-m", "arbitrary", "--tf-cluster"],
        &[("SLURM_HOSTFILE", file.to_str().unwrap())],
    ));
    let addrs: Vec<String> = placed(&text).into_iter().map(|r| r.2).collect();
    assert_eq!(addrs, ["n3:8888", "n1:8888", "n3:8889"]);
}

/// GPUs per node: `--gpus-per-node=4` or `--gres=gpu:4` with two tasks per
/// node: each task a slice of two (the README's rule).
#[test]
fn login_node_gpus() {
    for gpus in ["--gpus-per-node=4", "--gres=gpu:4", "--gres=gpu:a100:4"] {
        let text = ok(&cli(
            &[
                "explain",
                "-N2",
                "--ntasks-per-node=2",
                gpus,
                "--tf-cluster",
            ],
            &[],
        ));
        let slices: Vec<String> = placed(&text).into_iter().map(|r| r.3).collect();
        assert_eq!(slices, ["0,1", "2,3", "0,1", "2,3"], "{gpus}");
        assert!(
            notes(&text)
                .iter()
                .any(|l| l.starts_with("GPUs: 4 per node")),
            "{text}"
        );
    }
    // env prints the rank's own variables.
    let out = cli(
        &[
            "env",
            "-N2",
            "--ntasks-per-node=2",
            "--gpus-per-node=4",
            "--rank",
            "3",
        ],
        &[],
    );
    let vars: Value = serde_json::from_str(&ok(&out)).unwrap();
    assert_eq!(vars["CUDA_VISIBLE_DEVICES"], "2,3");
    // No GPU asked: none set, this machine's GPUs not read.
    let vars: Value = serde_json::from_str(&ok(&cli(&["env", "-N2"], &[]))).unwrap();
    assert!(vars.get("CUDA_VISIBLE_DEVICES").is_none(), "{vars}");
}

/// `env --rank R` outside a step: rank R's TF_CONFIG; the notes go to
/// stderr, stdout stays one JSON object.
#[test]
fn env_previews_one_rank() {
    let out = cli(
        &[
            "env",
            "-N2",
            "-n4",
            "--tf-cluster=ps:1,worker:3",
            "--rank",
            "2",
        ],
        &[],
    );
    let vars: Value = serde_json::from_str(&ok(&out)).unwrap();
    let tf: Value = serde_json::from_str(vars["TF_CONFIG"].as_str().unwrap()).unwrap();
    assert_eq!(
        tf,
        json!({"cluster": {"ps": ["node1:8888"], "worker": ["node1:8889", "node1:8890", "node2:8888"]},
               "task": {"type": "worker", "index": 1}})
    );
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("invented"), "{err}");
    // Rank 0 by default.
    let vars: Value = serde_json::from_str(&ok(&cli(&["env", "-N2", "-n4"], &[]))).unwrap();
    let tf: Value = serde_json::from_str(vars["TF_CONFIG"].as_str().unwrap()).unwrap();
    assert_eq!(tf["task"], json!({"type": "worker", "index": 0}));
    // No option at all on a login node: one task on one node.
    let vars: Value = serde_json::from_str(&ok(&cli(&["env"], &[]))).unwrap();
    let tf: Value = serde_json::from_str(vars["TF_CONFIG"].as_str().unwrap()).unwrap();
    assert_eq!(tf["cluster"], json!({"worker": ["node1:8888"]}));
}

/// What `salloc -N2 -n4` sets in its shell (Slurm's env.c,
/// env_array_for_job): nothing of a step.
const SALLOC: [(&str, &str); 10] = [
    ("SLURM_JOB_ID", "7"),
    ("SLURM_JOBID", "7"),
    ("SLURM_JOB_NODELIST", "node[1-2]"),
    ("SLURM_NODELIST", "node[1-2]"),
    ("SLURM_JOB_NUM_NODES", "2"),
    ("SLURM_NNODES", "2"),
    ("SLURM_NTASKS", "4"),
    ("SLURM_NPROCS", "4"),
    ("SLURM_TASKS_PER_NODE", "2(x2)"),
    ("SLURM_JOB_CPUS_PER_NODE", "2(x2)"),
];

/// A batch script of `sbatch -N2 -n4` has the same job variables and the
/// batch step's own (it runs as task 0 on the first node), which are not
/// the next step's.
fn batch_script() -> Vec<(&'static str, &'static str)> {
    let mut env = SALLOC.to_vec();
    env.extend([
        ("SLURMD_NODENAME", "node1"),
        ("SLURM_NODEID", "0"),
        ("SLURM_PROCID", "0"),
        ("SLURM_LOCALID", "0"),
        ("SLURM_GTIDS", "0"),
        ("SLURM_CPUS_ON_NODE", "2"),
    ]);
    env
}

/// In an allocation, no option: the step srun would start there, as many
/// tasks as the job's, block over its nodes in its order.
#[test]
fn allocation_from_the_jobs_variables() {
    for env in [SALLOC.to_vec(), batch_script()] {
        let text = ok(&cli(&["explain", "--tf-cluster=ps:1,worker:3"], &env));
        assert_eq!(
            placed(&text),
            want(&[
                ("ps", 0, "node1:8888", "-"),
                ("worker", 0, "node1:8889", "-"),
                ("worker", 1, "node2:8888", "-"),
                ("worker", 2, "node2:8889", "-"),
            ]),
            "{text}"
        );
        let notes = notes(&text);
        assert!(
            notes.iter().any(|l| l.contains("in this allocation")),
            "{notes:?}"
        );
        assert!(!notes.iter().any(|l| l.contains("invented")), "{notes:?}");
    }
    // salloc -N2 -n3: SLURM_TASKS_PER_NODE=2,1.
    let mut env = SALLOC.to_vec();
    env.retain(|(k, _)| !["SLURM_NTASKS", "SLURM_TASKS_PER_NODE"].contains(k));
    env.extend([("SLURM_NTASKS", "3"), ("SLURM_TASKS_PER_NODE", "2,1")]);
    let text = ok(&cli(&["explain"], &env));
    let addrs: Vec<String> = placed(&text).into_iter().map(|r| r.2).collect();
    assert_eq!(addrs, ["node1:8888", "node1:8889", "node2:8888"]);
    // salloc -N2 without -n: srun's default is one task per node.
    let env = [
        ("SLURM_JOB_ID", "8"),
        ("SLURM_JOB_NODELIST", "c[3,5]"),
        ("SLURM_NNODES", "2"),
        ("SLURM_TASKS_PER_NODE", "4(x2)"),
        ("SLURM_JOB_CPUS_PER_NODE", "4(x2)"),
    ];
    let text = ok(&cli(&["explain"], &env));
    let addrs: Vec<String> = placed(&text).into_iter().map(|r| r.2).collect();
    assert_eq!(addrs, ["c3:8888", "c5:8888"]);
}

/// salloc's shell in an interactive step (`LaunchParameters=
/// use_interactive_step`) is a one-task step of its own: the preview is
/// still the allocation's next srun step.
#[test]
fn the_interactive_step_is_the_allocation() {
    let mut env = SALLOC.to_vec();
    env.extend([
        ("SLURM_STEP_ID", "4294967290"),
        ("SLURM_STEP_NUM_TASKS", "1"),
        ("SLURM_STEP_NODELIST", "node1"),
        ("SLURM_STEP_TASKS_PER_NODE", "1"),
        ("SLURM_PROCID", "0"),
    ]);
    let text = ok(&cli(&["explain"], &env));
    let addrs: Vec<String> = placed(&text).into_iter().map(|r| r.2).collect();
    assert_eq!(
        addrs,
        ["node1:8888", "node1:8889", "node2:8888", "node2:8889"]
    );
}

/// Shape options override the job's, as they do for srun.
#[test]
fn allocation_with_options() {
    let text = ok(&cli(&["explain", "-m", "cyclic"], &SALLOC));
    let addrs: Vec<String> = placed(&text).into_iter().map(|r| r.2).collect();
    assert_eq!(
        addrs,
        ["node1:8888", "node2:8888", "node1:8889", "node2:8889"]
    );
    // -n2 on the job's two nodes: one task on each.
    let text = ok(&cli(&["explain", "-n2"], &SALLOC));
    let addrs: Vec<String> = placed(&text).into_iter().map(|r| r.2).collect();
    assert_eq!(addrs, ["node1:8888", "node2:8888"]);
    // -w names nodes the step must use, of the allocation; srun adds the
    // allocation's first others up to the job's node count (measured: in
    // `salloc -w node[1-3] -n7`, `srun -w node2 -n2` runs on node1 and
    // node2); a node outside it is refused.
    let text = ok(&cli(&["explain", "-w", "node2", "-n2"], &SALLOC));
    let addrs: Vec<String> = placed(&text).into_iter().map(|r| r.2).collect();
    assert_eq!(addrs, ["node1:8888", "node2:8888"]);
    let out = cli(&["explain", "-w", "node9"], &SALLOC);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("node9, which is not in job 7's allocation"),
        "{err}"
    );
    // The job's GPUs (salloc --gpus-per-node=2): each task one of them.
    let mut env = SALLOC.to_vec();
    env.push(("SLURM_GPUS_PER_NODE", "2"));
    let text = ok(&cli(&["explain"], &env));
    let gpus: Vec<String> = placed(&text).into_iter().map(|r| r.3).collect();
    assert_eq!(gpus, ["0", "1", "0", "1"]);
}

/// Inside a step the CLI reads the step, as before, even with a job's
/// variables beside it; a shape option previews another step instead.
#[test]
fn a_step_is_read_as_it_is() {
    let mut env = SALLOC.to_vec();
    env.extend([
        ("SLURM_STEP_ID", "0"),
        ("SLURM_PROCID", "3"),
        ("SLURM_STEP_NUM_TASKS", "4"),
        ("SLURM_STEP_NODELIST", "node[1-2]"),
        ("SLURM_STEP_TASKS_PER_NODE", "2(x2)"),
        ("SLURM_DISTRIBUTION", "cyclic"),
    ]);
    let vars: Value = serde_json::from_str(&ok(&cli(&["env"], &env))).unwrap();
    let tf: Value = serde_json::from_str(vars["TF_CONFIG"].as_str().unwrap()).unwrap();
    assert_eq!(
        tf["cluster"]["worker"],
        // Step 0 of job 7, no ports reserved: slot (7 × 16 + 0) mod 2375
        // = 112 of the range 20000-29499, its ports 20000 + 4 × 112 = 20448 on.
        json!(["node1:20448", "node2:20448", "node1:20449", "node2:20449"])
    );
    assert_eq!(tf["task"]["index"], 3);
    let text = ok(&cli(&["explain", "-n2"], &env));
    let addrs: Vec<String> = placed(&text).into_iter().map(|r| r.2).collect();
    assert_eq!(addrs, ["node1:8888", "node2:8888"]);
}

/// Every opt-out srun takes: nothing set, and `explain` says why.
#[test]
fn opt_outs_are_accepted() {
    let step = [
        ("SLURM_PROCID", "1"),
        ("SLURM_STEP_NUM_TASKS", "4"),
        ("SLURM_STEP_NODELIST", "t02n[13,41]"),
        ("SLURM_STEP_TASKS_PER_NODE", "2(x2)"),
    ];
    for env in [&[][..], &SALLOC[..], &step[..]] {
        for off in [
            "--tf-off",
            "--tf-cluster=off",
            "--torch-cluster=off",
            "--jax-cluster=off",
        ] {
            assert_eq!(ok(&cli(&["env", off], env)).trim(), "{}", "{off}");
            let text = ok(&cli(&["explain", "-N2", off], env));
            assert!(text.contains("the plugin sets nothing"), "{off}: {text}");
        }
        // --tf-off wins over any framework; one framework off keeps the others.
        assert_eq!(
            ok(&cli(&["env", "--torch-cluster", "--tf-off"], env)).trim(),
            "{}"
        );
        let vars: Value = serde_json::from_str(&ok(&cli(
            &["env", "--tf-cluster=off", "--torch-cluster"],
            env,
        )))
        .unwrap();
        assert!(vars.get("TF_CONFIG").is_none(), "{vars}");
        assert!(vars.get("MASTER_ADDR").is_some(), "{vars}");
    }
    // A value srun refuses is refused here too.
    let out = cli(&["env", "--torch-cluster=yes"], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        "tf-cluster: --torch-cluster=\"yes\": use static, elastic, elastic:MIN or elastic:MIN:RESTARTS (or off)\n"
    );
}

/// launcher-env hands the opt-outs on as srun reads them.
#[test]
fn launcher_env_takes_the_opt_outs() {
    // Exit 2: no plugstack.conf here loads the plugin; the names are printed.
    let out = cli(&["launcher-env", "--torch-cluster=off", "--tf-off"], &[]);
    assert_eq!(out.status.code(), Some(2));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("export SLURM_SPANK__SLURM_SPANK_OPTION_tf_cluster_torch_cluster=off\n"),
        "{text}"
    );
    assert!(
        text.contains("export SLURM_SPANK__SLURM_SPANK_OPTION_tf_cluster_tf_off=\n"),
        "{text}"
    );
}

/// Outside a step --tf-network is not judged against this machine's
/// interfaces (no node has 10.255.255.0/24 here): one line says where it is.
#[test]
fn the_network_is_judged_on_the_nodes() {
    let args = [
        "explain",
        "-N2",
        "--torch-cluster",
        "--tf-network=10.255.255.0/24",
    ];
    let text = ok(&cli(&args, &[]));
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("--tf-network"))
        .collect();
    assert_eq!(
        lines,
        [
            "--tf-network=10.255.255.0/24: judged on each node at launch (each node's interface on it goes to the frameworks), not on this machine"
        ]
    );
    let out = cli(
        &["env", "-N2", "--torch-cluster", "--tf-network=ib0"],
        &SALLOC,
    );
    let vars: Value = serde_json::from_str(&ok(&out)).unwrap();
    assert!(vars.get("NCCL_SOCKET_IFNAME").is_none(), "{vars}");
    // A host template still names the addresses.
    let text = ok(&cli(&["explain", "-N2", "--tf-host-template={}-ib"], &[]));
    let addrs: Vec<String> = placed(&text).into_iter().map(|r| r.2).collect();
    assert_eq!(addrs, ["node1-ib:8888", "node2-ib:8888"]);
}

/// What a preview cannot make is refused in one line.
#[test]
fn refusals_are_one_line() {
    for (args, why) in [
        (vec!["explain", "-N3", "-w", "n[1-2]"], "-w names 2 node(s)"),
        (
            vec!["explain", "-N2", "--gpus-per-task=1"],
            "--gpus-per-task",
        ),
        (vec!["explain", "-m", "round"], "use block, cyclic, plane=N"),
        (vec!["explain", "-m", "arbitrary"], "-m arbitrary: give -w"),
        (
            vec!["env", "-N2", "--rank", "2"],
            "--rank 2: the step has 2 task(s)",
        ),
        (
            vec!["explain", "-N2", "-n5", "--ntasks-per-node=2"],
            "do not fit 2 node(s)",
        ),
        (vec!["explain", "-N", "2-3"], "a range"),
        (vec!["explain", "-n0"], "not a count"),
    ] {
        let out = cli(&args, &[]);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.starts_with("tf-cluster: ") && err.contains(why),
            "{args:?}: {err}"
        );
    }
}

/// A fake `scontrol` (slurmctld's answer on the testbed: partition debug of
/// node[1-3], 4 CPUs each) first on PATH.
fn with_scontrol() -> (std::path::PathBuf, Vec<(&'static str, String)>) {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("tfc-scontrol-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("scontrol");
    std::fs::write(
        &script,
        "#!/bin/sh\ncase \"$2\" in\n\
         partition) echo 'PartitionName=debug AllowGroups=ALL Default=YES Nodes=node[1-3] State=UP' ;;\n\
         node) for n in 1 2 3; do echo \"NodeName=node$n Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUEfctv=4 CPUTot=4 State=IDLE\"; done ;;\n\
         *) exit 1 ;;\nesac\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}", dir.display());
    (dir, vec![("PATH", path)])
}

fn hosts_of(text: &str) -> Vec<String> {
    placed(text)
        .into_iter()
        .map(|r| r.2.split(':').next().unwrap().to_string())
        .collect()
}

/// From a login node where slurmctld answers: the nodes' CPUs decide the
/// counts as the testbed's Slurm measured them (nodes of 4 CPUs).
#[test]
fn login_node_with_the_nodes_cpus_from_slurmctld() {
    let (_dir, env) = with_scontrol();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let run = |args: &[&str]| {
        let mut all = vec!["explain", "--tf-cluster"];
        all.extend(args);
        ok(&cli(&all, &env))
    };
    // Measured: -w node[1-3] -n7 runs 4,2,1; -N3 -n5 3,1,1; -n7 4,3 on
    // two nodes; -m cyclic -n7 on node[1-3] puts rank 5 on node1.
    let text = run(&["-w", "node[1-3]", "-n7"]);
    assert_eq!(
        hosts_of(&text),
        [
            "node1", "node1", "node1", "node1", "node2", "node2", "node3"
        ],
        "{text}"
    );
    assert!(!text.contains("CPU counts are unknown"), "{text}");
    let text = run(&["-N3", "-n5"]);
    assert_eq!(
        hosts_of(&text),
        ["node1", "node1", "node1", "node2", "node3"],
        "{text}"
    );
    assert!(
        text.contains("the default partition's first nodes"),
        "{text}"
    );
    let text = run(&["-n7"]);
    assert_eq!(
        hosts_of(&text),
        [
            "node1", "node1", "node1", "node1", "node2", "node2", "node2"
        ]
    );
    let text = run(&["-w", "node[1-3]", "-n7", "-m", "cyclic"]);
    assert_eq!(hosts_of(&text)[5], "node1", "{text}");
    // Measured: -w node[2-3] -N3 -n4 runs 1,2,1 (the -w nodes served first).
    let text = run(&["-w", "node[2-3]", "-N3", "-n4"]);
    assert_eq!(hosts_of(&text), ["node1", "node2", "node2", "node3"]);
    // Measured: srun refuses -n13 (12 CPUs) and -N3 -n7 --ntasks-per-node=2.
    for args in [&["-n13"][..], &["-N3", "-n7", "--ntasks-per-node=2"]] {
        let mut all = vec!["explain", "--tf-cluster"];
        all.extend(args);
        let out = cli(&all, &env);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("Slurm refuses the job (Requested node configuration is not available"),
            "{err}"
        );
    }
}

/// In an allocation of uneven CPUs (`salloc -w node[1-3] -n7`: 4,2,1), as
/// measured on the testbed.
#[test]
fn uneven_allocation_as_slurm_lays_it_out() {
    let env = [
        ("SLURM_JOB_ID", "9"),
        ("SLURM_JOB_NODELIST", "node[1-3]"),
        ("SLURM_NNODES", "3"),
        ("SLURM_NTASKS", "7"),
        ("SLURM_TASKS_PER_NODE", "4,2,1"),
        ("SLURM_JOB_CPUS_PER_NODE", "4,2,1"),
    ];
    let run = |args: &[&str]| {
        let mut all = vec!["explain", "--tf-cluster"];
        all.extend(args);
        ok(&cli(&all, &env))
    };
    let text = run(&["-n7", "-m", "plane=2"]);
    assert_eq!(
        hosts_of(&text),
        [
            "node1", "node1", "node2", "node2", "node3", "node1", "node1"
        ],
        "{text}"
    );
    let text = run(&["-w", "node3", "-n2"]);
    assert_eq!(hosts_of(&text), ["node1", "node3"], "{text}");
    let text = run(&["-w", "node[1,3]", "-n4", "-m", "cyclic"]);
    assert_eq!(hosts_of(&text), ["node1", "node2", "node3", "node1"]);
    // srun ignores --ntasks-per-node=1 for 4 tasks on 3 nodes, saying so.
    let text = run(&["-n4", "--ntasks-per-node=1"]);
    assert_eq!(hosts_of(&text), ["node1", "node1", "node2", "node3"]);
    assert!(text.contains("srun ignores it"), "{text}");
    // Measured: srun refuses -n9 and -N2 (the job's 7 tasks on 4+2 CPUs).
    for args in [&["-n9"][..], &["-N2"]] {
        let mut all = vec!["explain", "--tf-cluster"];
        all.extend(args);
        let out = cli(&all, &env);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("(More processors requested than permitted)"),
            "{args:?}: {err}"
        );
    }
}

/// On a cluster whose slurm.conf has `MpiParams=ports`, the preview takes
/// srun's `--resv-ports[=N]`: a Ray step (64 ports a node, docs/frameworks)
/// is refused with what srun would reserve and how to ask for more, then
/// previews with the ports asked for; without MpiParams, srun's option is
/// refused.
#[test]
fn resv_ports_is_a_shape_option() {
    let dir = std::env::temp_dir().join(format!("tfc-preview-resv-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let with = dir.join("with.conf");
    std::fs::write(&with, "ClusterName=c\nMpiParams=ports=12000-12999\n").unwrap();
    let env = [("SLURM_CONF", with.to_str().unwrap())];
    let ray = ["preview", "-N2", "--ntasks-per-node=1", "--ray-cluster"];
    let out = cli(&ray, &env);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("srun would reserve 2 port(s) (12000-12001)"),
        "{err}"
    );
    assert!(err.contains("--resv-ports=64"), "{err}");
    let text = ok(&cli(&[&ray[..], &["--resv-ports=64"]].concat(), &env));
    assert!(text.starts_with("RANK  HEAD"), "{text}");
    assert!(text.contains("ray start on every node"), "{text}");
    // Fewer than the tasks on a node need: refused as srun refuses it.
    let out = cli(
        &["preview", "-N1", "-n3", "--tf-cluster", "--resv-ports=2"],
        &env,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("srun would reserve 2 port(s) (12000-12001)"),
        "{err}"
    );
    assert!(err.contains("--resv-ports=3"), "{err}");
    // Bare --resv-ports: as many as srun reserves by default (one more
    // than the fullest node's tasks).
    ok(&cli(
        &["preview", "-N1", "-n3", "--tf-cluster", "--resv-ports"],
        &env,
    ));
    // No MpiParams=ports: Slurm reserves nothing, srun takes no --resv-ports.
    let out = cli(&[&ray[..], &["--resv-ports=64"]].concat(), &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("MpiParams=ports"), "{err}");
}

/// Inside `salloc -N2 --ntasks-per-node=2 --gres=gpu:4`, Slurm 22.05 sets
/// no GPU variable (the testbed's job: every variable below); the job's
/// GPUs are slurmctld's (squeue's `%b`, `gres:gpu:4` in 22.05, `gres/gpu:4`
/// later). The step there gave tasks 0,1 and 2,3 on each node
/// (tests/testbed/preview.rs measures it), and so must the preview. The
/// stub `scontrol show job -o` prints the job as 26.05 does for a command
/// of several lines: its `Command=` before `TresPerNode`, newlines and all.
#[test]
fn a_gpu_allocation_shows_each_tasks_gpus() {
    use std::os::unix::fs::PermissionsExt;
    for (name, tres) in [("2205", "gres:gpu:4"), ("2411", "gres/gpu:4")] {
        let dir = std::env::temp_dir().join(format!("tfc-job-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let stubs = [
            (
                "squeue",
                format!("#!/bin/sh\n[ \"$*\" = '-h -j 1 -o %b' ] || exit 1\necho '{tres}'\n"),
            ),
            (
                "scontrol",
                format!(
                    "#!/bin/sh\n[ \"$1 $2 $3 $4\" = 'show job -o 1' ] || exit 1\n\
                     printf 'JobId=1 JobName=interactive NumNodes=2 Command=bash -c echo\\necho TresPerNode={tres}\\n'\n"
                ),
            ),
        ];
        for (program, text) in stubs {
            let script = dir.join(program);
            std::fs::write(&script, text).unwrap();
            std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let path = dir.display().to_string();
        let env = [
            ("PATH", path.as_str()),
            ("SLURM_JOB_ID", "1"),
            ("SLURM_JOB_CPUS_PER_NODE", "2(x2)"),
            ("SLURM_JOB_NODELIST", "node[1-2]"),
            ("SLURM_JOB_NUM_NODES", "2"),
            ("SLURM_NNODES", "2"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_NTASKS_PER_NODE", "2"),
            ("SLURM_TASKS_PER_NODE", "2(x2)"),
        ];
        let text = ok(&cli(&["preview", "--tf-cluster"], &env));
        let gpus: Vec<String> = table(&text).0.into_iter().map(|r| r[4].clone()).collect();
        assert_eq!(gpus, ["0,1", "2,3", "0,1", "2,3"], "{name}: {text}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// `preview --tf-roles`: each task's role, its rank in it over the role's
/// size, its role's rendezvous (the role's first rank's node, a port of the
/// role's own) and its own ports, then the step-wide world and each role's
/// addresses. Ports by the documented order from the port base: PyTorch's
/// 8888 (the step-wide one), 8889 the trainers', 8890 the rollout servers',
/// then 4 per local task (local 0: 8891-8894, local 1: 8895-8898); cyclic
/// puts ranks 0 and 3 on node1, 1 and 4 on node2, 2 and 5 on node3.
#[test]
fn login_node_roles() {
    let args = [
        "preview",
        "-N3",
        "--ntasks-per-node=2",
        "-m",
        "cyclic",
        "--torch-cluster",
        "--tf-roles=trainer:4,rollout:2",
    ];
    let text = ok(&cli(&args, &[]));
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "RANK",
            "HOST",
            "LOCAL_RANK",
            "GROUP_RANK",
            "ROLE",
            "ROLE_RANK",
            "ROLE_MASTER",
            "PORTS",
            "GPUS"
        ],
        "{text}"
    );
    let rows: Vec<Vec<&str>> = lines
        .by_ref()
        .take(6)
        .map(|l| l.split_whitespace().collect())
        .collect();
    let own = ["8891,8892,8893,8894", "8895,8896,8897,8898"];
    let want = [
        [
            "0",
            "node1",
            "0",
            "0",
            "trainer",
            "0/4",
            "node1:8889",
            own[0],
            "-",
        ],
        [
            "1",
            "node2",
            "0",
            "1",
            "trainer",
            "1/4",
            "node1:8889",
            own[0],
            "-",
        ],
        [
            "2",
            "node3",
            "0",
            "2",
            "trainer",
            "2/4",
            "node1:8889",
            own[0],
            "-",
        ],
        [
            "3",
            "node1",
            "1",
            "0",
            "trainer",
            "3/4",
            "node1:8889",
            own[1],
            "-",
        ],
        [
            "4",
            "node2",
            "0",
            "0",
            "rollout",
            "0/2",
            "node2:8890",
            own[1],
            "-",
        ],
        [
            "5",
            "node3",
            "0",
            "1",
            "rollout",
            "1/2",
            "node2:8890",
            own[1],
            "-",
        ],
    ];
    assert_eq!(rows, want, "{text}");
    for line in [
        "roles: the step-wide world TF_CLUSTER_STEP_MASTER_ADDR=node1 TF_CLUSTER_STEP_MASTER_PORT=8888",
        "TF_CLUSTER_ROLE_TRAINER_ADDRS=node1:8891,node2:8891,node3:8891,node1:8895",
        "TF_CLUSTER_ROLE_ROLLOUT_ADDRS=node2:8895,node3:8895",
    ] {
        assert!(text.lines().any(|l| l == line), "{line}: {text}");
    }
    // srun's refusal, as srun words it.
    let out = cli(
        &[
            "preview",
            "-N3",
            "-n6",
            "--torch-cluster",
            "--tf-roles=a:2,b:2",
        ],
        &[],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--tf-roles=a:2,b:2 asks for 4 tasks but the step has 6"),
        "{err}"
    );
}

/// Under topology/block, the preview names each rank's NVLink domain from
/// topology.conf beside slurm.conf (node2 and node3 one block, node1
/// another); without it, none.
#[test]
fn env_names_the_nvlink_domain_under_topology_block() {
    let dir = std::env::temp_dir().join(format!("tfc-preview-blocks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let conf = dir.join("slurm.conf");
    std::fs::write(&conf, "ClusterName=c\nTopologyPlugin=topology/block\n").unwrap();
    std::fs::write(
        dir.join("topology.conf"),
        "BlockName=b1 Nodes=node[2-3]\nBlockName=b2 Nodes=node1\n",
    )
    .unwrap();
    let env = [("SLURM_CONF", conf.to_str().unwrap())];
    let domain = |rank: &str| {
        let args = [
            "env",
            "-N3",
            "--ntasks-per-node=2",
            "--torch-cluster",
            "--rank",
            rank,
        ];
        let vars: Value = serde_json::from_str(&ok(&cli(&args, &env))).unwrap();
        [
            "TF_CLUSTER_NVL_DOMAIN",
            "TF_CLUSTER_NVL_DOMAIN_RANK",
            "TF_CLUSTER_NVL_DOMAIN_SIZE",
            "TF_CLUSTER_NVL_DOMAINS",
        ]
        .map(|n| vars[n].as_str().unwrap_or("-").to_string())
    };
    // Ranks 0-1 on node1 (domain 0), 2-5 on node2 and node3 (domain 1).
    assert_eq!(domain("1"), ["0", "1", "2", "2"]);
    assert_eq!(domain("4"), ["1", "2", "4", "2"]);
    let args = ["env", "-N3", "--ntasks-per-node=2", "--torch-cluster"];
    let vars: Value = serde_json::from_str(&ok(&cli(&args, &[]))).unwrap();
    assert!(vars.get("TF_CLUSTER_NVL_DOMAIN").is_none(), "{vars}");
    std::fs::remove_dir_all(&dir).unwrap();
}
