//! The CLI twin's interface, which other tools depend on: `env` prints one
//! JSON object of the variables the plugin would set; errors give a non-zero
//! exit, one line on stderr and nothing on stdout.

mod hermetic;

use std::process::Output;

use serde_json::{Value, json};
use tf_cluster_core::handoff::{Handoff, Record, Verdict};
use tf_cluster_core::hostlist::HostList;
use tf_cluster_core::secret::Secret;
use tf_cluster_core::task_map::TaskMap;
use tf_cluster_core::{FRAMEWORKS, Frameworks};

const BASIC: [(&str, &str); 4] = [
    ("SLURM_PROCID", "1"),
    ("SLURM_STEP_NUM_TASKS", "4"),
    ("SLURM_STEP_NODELIST", "t02n[13,41]"),
    ("SLURM_STEP_TASKS_PER_NODE", "2(x2)"),
];

fn cli(args: &[&str], env: &[(&str, &str)]) -> Output {
    hermetic::tf_cluster()
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

fn json_of(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn env_works_from_the_four_step_variables() {
    let out = cli(&["env"], &BASIC);
    let vars = json_of(&out);
    let tf: Value = serde_json::from_str(vars["TF_CONFIG"].as_str().unwrap()).unwrap();
    assert_eq!(
        tf,
        json!({"cluster": {"worker": ["t02n13:8888", "t02n13:8889", "t02n41:8888", "t02n41:8889"]},
               "task": {"type": "worker", "index": 1}})
    );
    // No GPU list and no driver on this machine: CPU-only, variable left alone.
    assert_eq!(vars.as_object().unwrap().len(), 1, "{vars}");
}

#[test]
fn env_takes_every_setting_as_a_flag() {
    let mut env = BASIC.to_vec();
    env.push(("CUDA_VISIBLE_DEVICES", "4,5,6,7"));
    let out = cli(
        &[
            "env",
            "--tf-cluster",
            "ps:1,worker:3",
            "--port-base",
            "1337",
            "--tf-gpus-per-task",
            "1",
            "--rpc-layer",
            "grpc",
        ],
        &env,
    );
    let vars = json_of(&out);
    let tf: Value = serde_json::from_str(vars["TF_CONFIG"].as_str().unwrap()).unwrap();
    assert_eq!(
        tf,
        json!({"cluster": {"ps": ["t02n13:1337"], "worker": ["t02n13:1338", "t02n41:1337", "t02n41:1338"]},
               "task": {"type": "worker", "index": 0}, "rpc_layer": "grpc"})
    );
    assert_eq!(vars["CUDA_VISIBLE_DEVICES"], "5");
    let off = json_of(&cli(&["env", "--auto-set-gpu", "false"], &env));
    assert!(off.get("CUDA_VISIBLE_DEVICES").is_none());
}

#[test]
fn errors_are_one_line_and_no_output() {
    for (args, env, why) in [
        (vec!["env"], BASIC[1..].to_vec(), "SLURM_PROCID is not set"),
        (
            vec!["env", "--tf-cluster=ps:1,worker:2"],
            BASIC.to_vec(),
            "asks for 3 tasks",
        ),
        (
            vec!["env", "--port-base", "0"],
            BASIC.to_vec(),
            "port-base=0",
        ),
        (
            vec!["explain", "--tf-cluster=ps:"],
            BASIC.to_vec(),
            "role ps has count \"\"",
        ),
    ] {
        let out = cli(&args, &env);
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

/// `master` is refused as srun refuses it: one line, the same text, since
/// TensorFlow's strategies take only chief, worker, evaluator and ps.
#[test]
fn explain_refuses_master_as_srun_does() {
    for spec in [
        "master:1,worker:1",
        "master:1,worker:3",
        "chief:1,master:1,worker:2",
    ] {
        let out = cli(&["explain", &format!("--tf-cluster={spec}")], &BASIC);
        assert_eq!(out.status.code(), Some(1), "{spec}");
        assert!(out.stdout.is_empty(), "{spec}");
        assert_eq!(
            String::from_utf8(out.stderr).unwrap(),
            format!(
                "tf-cluster: bad --tf-cluster \"{spec}\": role master is refused: \
                 TensorFlow's strategies take only chief, worker, evaluator and ps \
                 (\"Disallowed task type\"), and master is the old name of the one chief \
                 (write chief:1) (expected role:count[,role:count…], e.g. ps:1,worker:3)\n"
            )
        );
    }
    // Other job names stay accepted, as tf.train.ClusterSpec takes them.
    let out = cli(
        &["explain", "--tf-cluster=chief:1,trainer:2,worker:1"],
        &BASIC,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("trainer"));
}

#[test]
fn explain_lists_every_rank() {
    let mut env = BASIC.to_vec();
    env.push(("CUDA_VISIBLE_DEVICES", "0,1,2,3"));
    let out = cli(&["explain", "--tf-cluster=ps:1,worker:3"], &env);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        [
            vec!["RANK", "ROLE", "INDEX", "ADDRESS", "GPUS"],
            vec!["0", "ps", "0", "t02n13:8888", "0,1"],
            vec!["1", "worker", "0", "t02n13:8889", "2,3"],
            vec!["2", "worker", "1", "t02n41:8888", "0,1"],
            vec!["3", "worker", "2", "t02n41:8889", "2,3"],
        ]
    );
}

/// Rank 1 of step 4242.0, one task on each of two nodes.
const ONE_PER_NODE: [(&str, &str); 6] = [
    ("SLURM_PROCID", "1"),
    ("SLURM_STEP_NUM_TASKS", "2"),
    ("SLURM_STEP_NODELIST", "t02n[13,41]"),
    ("SLURM_STEP_TASKS_PER_NODE", "1(x2)"),
    ("SLURM_JOB_ID", "4242"),
    ("SLURM_STEP_ID", "0"),
];

/// With --torch-cluster, `env` gives torchrun's PET_* arguments, on the
/// step's own port where Slurm reserved none: step 0 of job 4242 takes
/// slot (4242 × 16 + 0) mod 2375 = 1372 of the range 20000-29499, port
/// 20000 + 4 × 1372 = 25488, as the plugin computes it for that step.
/// `explain` names torchrun's arguments after the table for one task per
/// node, and with two tasks on a node says that srun refuses torchrun.
#[test]
fn torch_cluster_shows_torchruns_arguments() {
    let mut env = BASIC.to_vec();
    env.extend([("SLURM_JOB_ID", "4242"), ("SLURM_STEP_ID", "0")]);
    let vars = json_of(&cli(&["env", "--torch-cluster"], &env));
    for (name, value) in [
        ("PET_NNODES", "4"),
        ("PET_NODE_RANK", "1"),
        ("PET_MASTER_ADDR", "t02n13"),
        ("PET_MASTER_PORT", "25488"),
        ("PET_RDZV_ENDPOINT", "t02n13:25488"),
        ("PET_RDZV_ID", "4242.0"),
        ("PET_RDZV_BACKEND", "static"),
    ] {
        assert_eq!(vars[name], value, "{name}: {vars}");
    }
    let out = cli(&["explain", "--torch-cluster"], &env);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        text.lines().last(),
        Some(
            "torchrun: not with 2 tasks on a node (srun refuses a torchrun command here; its \
             workers would share GPUs): use --ntasks-per-node=1 with torchrun \
             --nproc_per_node=2; ranks srun starts directly use the table"
        ),
        "{text}"
    );
    let out = cli(&["explain", "--torch-cluster"], &ONE_PER_NODE);
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        text.lines().last(),
        Some(
            "torchrun, one launcher per rank (PET_NODE_RANK=RANK): PET_NNODES=2 \
             PET_MASTER_ADDR=t02n13 PET_MASTER_PORT=25488 PET_RDZV_ENDPOINT=t02n13:25488 \
             PET_RDZV_ID=4242.0 PET_RDZV_BACKEND=static"
        ),
        "{text}"
    );
    // An explicit --tf-port-base keeps its meaning.
    let vars = json_of(&cli(
        &["env", "--torch-cluster", "--tf-port-base=9000"],
        &env,
    ));
    assert_eq!(vars["MASTER_PORT"], "9000", "{vars}");
}

/// `--torch-cluster=elastic:1` inside a step of a requeued job (SLURM_RESTART_COUNT=2): the c10d
/// rendezvous on rank 0's node, ids with the restart count; a step of two tasks on a node is
/// refused as srun refuses it.
#[test]
fn elastic_torchrun_in_a_requeued_job() {
    let mut env = ONE_PER_NODE.to_vec();
    env.push(("SLURM_RESTART_COUNT", "2"));
    let vars = json_of(&cli(&["env", "--torch-cluster=elastic:1"], &env));
    for (name, value) in [
        ("PET_NNODES", "1:2"),
        // Job 4242's step 0: port 25488 (above).
        ("PET_RDZV_ENDPOINT", "t02n13:25488"),
        ("PET_RDZV_ID", "4242.0.r2"),
        ("PET_RDZV_BACKEND", "c10d"),
        ("PET_RDZV_CONF", "is_host=0"),
        ("PET_LOCAL_ADDR", "t02n41"),
        ("PET_MAX_RESTARTS", "3"),
        ("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1"),
        ("TF_CLUSTER_RUN_ID", "4242.0.r2"),
    ] {
        assert_eq!(vars[name], value, "{name}: {vars}");
    }
    assert!(vars.get("PET_NODE_RANK").is_none(), "{vars}");
    let out = cli(&["explain", "--torch-cluster=elastic"], &BASIC);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        "tf-cluster: --torch-cluster=elastic runs one torchrun per node, but the step has 4 tasks on 2 nodes: use --ntasks-per-node=1\n"
    );
}

/// With a network named, `env` and `explain` show this node's interface on
/// it in the frameworks' variables; a variable the user exported is kept.
#[test]
fn the_network_shows_in_env_and_explain() {
    let mut env = BASIC.to_vec();
    env.push(("SLURMD_NODENAME", "t02n13"));
    let vars = json_of(&cli(
        &["env", "--torch-cluster", "--tf-network=127.0.0.0/8"],
        &env,
    ));
    assert_eq!(vars["NCCL_SOCKET_IFNAME"], "=lo");
    assert_eq!(vars["GLOO_SOCKET_IFNAME"], "lo");
    assert_eq!(vars["TP_SOCKET_IFNAME"], "lo");
    let out = cli(&["explain", "--torch-cluster", "--tf-network=lo"], &env);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("network lo: this node's interface lo; set NCCL_SOCKET_IFNAME==lo GLOO_SOCKET_IFNAME=lo TP_SOCKET_IFNAME=lo"),
        "{text}"
    );
    env.push(("GLOO_SOCKET_IFNAME", "eth1"));
    let vars = json_of(&cli(&["env", "--torch-cluster", "--tf-network=lo"], &env));
    assert!(vars.get("GLOO_SOCKET_IFNAME").is_none(), "{vars}");
    assert_eq!(vars["NCCL_SOCKET_IFNAME"], "=lo");
    // TensorFlow's gRPC follows TF_CONFIG; only NCCL's variable is its.
    let vars = json_of(&cli(&["env", "--tf-network=lo"], &env));
    assert_eq!(vars["NCCL_SOCKET_IFNAME"], "=lo");
    assert!(vars.get("TP_SOCKET_IFNAME").is_none(), "{vars}");
    // A node without the network: one line naming the node and the network.
    let out = cli(
        &["env", "--torch-cluster", "--tf-network=10.255.255.0/24"],
        &env,
    );
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "tf-cluster: t02n13 is not on --tf-network=10.255.255.0/24: no interface with an address in 10.255.255.0/24\n"
    );
}

/// A usage error exits 64, distinct from every code a command gives
/// (`doctor`: 0 healthy, 1 a problem, 2 warnings only); `--help` and
/// `--version` exit 0.
#[test]
fn usage_errors_exit_64() {
    for args in [
        vec!["doctor", "--bogus"],
        vec!["doctor", "extra"],
        vec!["env", "--no-such-option"],
        vec!["launcher-env", "--tf-port-base"],
        vec!["no-such-command"],
        vec![],
    ] {
        let out = cli(&args, &[]);
        assert_eq!(out.status.code(), Some(64), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
        assert!(!out.stderr.is_empty(), "{args:?}");
    }
    for args in [vec!["--help"], vec!["doctor", "--help"], vec!["--version"]] {
        let out = cli(&args, &[]);
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert!(!out.stdout.is_empty(), "{args:?}");
    }
    let help = String::from_utf8(cli(&["doctor", "--help"], &[]).stdout).unwrap();
    assert!(help.contains("2: warnings only"), "{help}");
    assert!(help.contains("exits 64"), "{help}");
}

/// `tf-cluster --help` says what the tool covers: every framework the
/// plugin serves (by its option), the GPUs of every vendor and the network,
/// not TensorFlow and CUDA alone.
#[test]
fn help_names_every_framework_gpus_and_the_network() {
    let out = cli(&["--help"], &[]);
    assert!(out.status.success(), "{out:?}");
    let help = String::from_utf8(out.stdout).unwrap();
    let about = help.lines().next().unwrap_or_default();
    for f in tf_cluster_core::FRAMEWORKS.iter() {
        assert!(about.contains(&format!("--{}", f.option)), "{about}");
    }
    for word in ["GPU", "network"] {
        assert!(about.contains(word), "{word}: {about}");
    }
    assert!(!about.contains("CUDA_VISIBLE_DEVICES"), "{about}");
}

/// Each command's line in `--help` says what that command does, not
/// another's: `ray`'s names --ray-cluster and not --tf-record, `postmortem`'s --tf-record.
#[test]
fn each_command_has_its_own_line_in_help() {
    let out = cli(&["--help"], &[]);
    let help = String::from_utf8(out.stdout).unwrap();
    let line = |command: &str| {
        help.lines()
            .find(|l| l.trim_start().starts_with(&format!("{command} ")))
            .unwrap_or_else(|| panic!("no line for {command}:\n{help}"))
            .to_string()
    };
    assert!(line("ray").contains("--ray-cluster"), "{help}");
    assert!(!line("ray").contains("--tf-record"), "{help}");
    assert!(line("postmortem").contains("--tf-record=DIR"), "{help}");
}

/// A task of a two-task step, job 4242 step 0, with srun's hand-off in
/// SLURM_TF_CLUSTER: its map (one rank on each of node[1-2]) and what
/// `change` sets besides, with the step's `secret`.
fn handed_task(
    procid: &'static str,
    secret: Option<Secret>,
    change: impl FnOnce(&mut Handoff),
) -> Vec<(&'static str, String)> {
    let mut env: Vec<(&str, String)> = [
        ("SLURM_PROCID", procid),
        ("SLURM_STEP_NUM_TASKS", "2"),
        ("SLURM_STEP_NODELIST", "node[1-2]"),
        ("SLURM_STEP_TASKS_PER_NODE", "1(x2)"),
        ("SLURM_JOB_ID", "4242"),
        ("SLURM_STEP_ID", "0"),
    ]
    .iter()
    .map(|(k, v)| (*k, v.to_string()))
    .collect();
    let hosts = "node[1-2]";
    let map = TaskMap::new(4242, 0, HostList::parse(hosts, 2).unwrap(), vec![0, 1]).unwrap();
    let verdict = Verdict::Map {
        map,
        hosts: hosts.into(),
    };
    let mut word = Handoff::undecided(4242, 0, false, 0, secret);
    word.decided(verdict, None, Vec::new()).unwrap();
    change(&mut word);
    env.push(("SLURM_TF_CLUSTER", word.encode()));
    env
}

fn env_of<'a>(vars: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    vars.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

/// srun says Slurm reserved no ports for the step (`--resv-ports=0`): the
/// SLURM_STEP_RESV_PORTS the task sees is srun's own environment's, passed
/// on, and the tasks ignore it; so does `env` run in the same task.
#[test]
fn env_ignores_ports_srun_says_slurm_did_not_reserve() {
    let mut vars = handed_task("1", None, |h| {
        h.record(Some(Record {
            resv_ports: false,
            tres_bind: None,
        }))
    });
    vars.push(("SLURM_STEP_RESV_PORTS", "20000-20001".into()));
    let out = json_of(&cli(
        &["env", "--tf-cluster", "--tf-port-base=8888"],
        &env_of(&vars),
    ));
    let tf: Value = serde_json::from_str(out["TF_CONFIG"].as_str().unwrap()).unwrap();
    assert_eq!(
        tf["cluster"]["worker"],
        json!(["node1:8888", "node2:8888"]),
        "{out}"
    );
    // Without srun's word, the step's reserved ports are Slurm's.
    let mut bare = vars.clone();
    bare.retain(|(k, _)| *k != "SLURM_TF_CLUSTER");
    let out = json_of(&cli(
        &["env", "--tf-cluster", "--tf-port-base=8888"],
        &env_of(&bare),
    ));
    let tf: Value = serde_json::from_str(out["TF_CONFIG"].as_str().unwrap()).unwrap();
    assert_eq!(
        tf["cluster"]["worker"],
        json!(["node1:20000", "node2:20000"]),
        "{out}"
    );
}

/// A step that inherited `--tf-cluster=ps:1,worker:2 --torch-cluster` from
/// its job but has 2 tasks: srun leaves TensorFlow out (`leave-out`, its bit
/// in the table) and the tasks get PyTorch's variables alone; so does `env`
/// given the job's options in the same task.
#[test]
fn env_leaves_out_the_frameworks_srun_left_out() {
    let vars = handed_task("1", None, |h| h.leave_out(Frameworks::only(FRAMEWORKS[0])));
    let args = ["env", "--tf-cluster=ps:1,worker:2", "--torch-cluster"];
    let out = json_of(&cli(&args, &env_of(&vars)));
    assert!(out.get("TF_CONFIG").is_none(), "{out}");
    assert_eq!(out["RANK"], "1", "{out}");
    assert_eq!(out["WORLD_SIZE"], "2", "{out}");
    assert_eq!(out["MASTER_ADDR"], "node1", "{out}");
    // Without srun's word the same options ask for 3 tasks, and are refused.
    let mut bare = vars.clone();
    bare.retain(|(k, _)| *k != "SLURM_TF_CLUSTER");
    let out = cli(&args, &env_of(&bare));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("3 tasks"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Inside a `--ray-cluster` step, `env` shows the step's token and private
/// directory from srun's word, as the plugin sets them; without srun's
/// word it refuses, as the plugin does; a preview shows zeros and says why.
#[test]
fn env_shows_the_ray_steps_token_from_srun_and_zeros_in_a_preview() {
    let secret = format!("{}{}", "ab".repeat(32), "0123456789abcdef");
    let vars = handed_task("1", Secret::parse(&secret), |_| {});
    let out = json_of(&cli(&["env", "--ray-cluster"], &env_of(&vars)));
    assert_eq!(out["RAY_AUTH_MODE"], "token", "{out}");
    assert_eq!(out["RAY_AUTH_TOKEN"], "ab".repeat(32), "{out}");
    assert_eq!(
        out["TF_CLUSTER_RAY_TEMP_DIR"], "/tmp/tfc-ray-0123456789abcdef/ray",
        "{out}"
    );
    let mut bare = vars.clone();
    bare.retain(|(k, _)| *k != "SLURM_TF_CLUSTER");
    let out = cli(&["env", "--ray-cluster"], &env_of(&bare));
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("needs the step's secret from srun"),
        "{stderr}"
    );
    let out = cli(&["env", "-N2", "-n2", "--ray-cluster"], &[]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let vars = json_of(&out);
    assert_eq!(vars["RAY_AUTH_TOKEN"], "0".repeat(64), "{vars}");
    assert!(stderr.contains("(zeros here)"), "{stderr}");
}

/// A folder for a `tf-cluster ray` test, with `bin/` for its stand-in of
/// Ray's commands: the folder and the file each `ray start` appends to.
fn ray_folder(name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("tfc-ray-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    let starts = dir.join("starts");
    (dir, starts)
}

/// A stand-in of the Python that runs Ray's `ray` script: `-c CODE` asks
/// Ray's version (printed), runs `ray start` through tf-cluster's guard (as
/// `bin/ray-start`), or waits for the step's nodes (a second, noted in the
/// file `waited`).
fn stand_in_python(dir: &std::path::Path, version: &str) -> std::path::PathBuf {
    let python = dir.join("bin/python");
    script(
        &python,
        &format!(
            "#!/bin/sh\nif [ \"$1\" = -c ]; then case \"$2\" in *metadata*) echo {version}; exit 0;; \
             *tfc_ray_guard*) shift 2; exec {} \"$@\";; esac; echo waited >>{}; sleep 1; exit 0; fi\n\
             exit 3\n",
            dir.join("bin/ray-start").display(),
            dir.join("waited").display()
        ),
    );
    python
}

/// The variables the plugin gives a task of a `--ray-cluster` step, with
/// the step's private directory in `dir`.
fn ray_step_env(cmd: &mut std::process::Command, dir: &std::path::Path, port: u16) {
    cmd.env(
        "PATH",
        format!("{}:/usr/bin:/bin", dir.join("bin").display()),
    )
    .env("RAY_ADDRESS", format!("127.0.0.1:{port}"))
    .env("TF_CLUSTER_RAY_ARGS", "--num-cpus=1")
    .env("TF_CLUSTER_RAY_NODE", "127.0.0.1")
    .env("TF_CLUSTER_RAY_TEMP_DIR", dir.join("private/ray"))
    .env("RAY_AUTH_MODE", "token")
    .env("RAY_AUTH_TOKEN", "0123");
}

/// The step's private directory in `dir` is gone (tf-cluster ray removed
/// it); then `dir` is removed.
fn assert_private_gone_and_clean(dir: &std::path::Path) {
    assert!(
        !dir.join("private").exists(),
        "the step's private directory is left"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// A port no one listens on (the kernel's pick, let go).
fn free_port() -> u16 {
    std::net::TcpListener::bind("0.0.0.0:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The head's `tf-cluster ray -- sh -c 'exit 7'` of a one-node step, its
/// GCS at `port`, its private directory in `dir`.
fn head_cmd(dir: &std::path::Path, port: u16) -> std::process::Command {
    let mut cmd = hermetic::tf_cluster();
    cmd.args(["ray", "--", "sh", "-c", "exit 7"]);
    ray_step_env(&mut cmd, dir, port);
    cmd.env("TF_CLUSTER_RAY_HEAD_ARGS", format!("--port={port}"))
        .env("SLURM_STEP_NUM_NODES", "1");
    cmd
}

/// Writes an executable script.
fn script(path: &std::path::Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A worker node with no `ray` on PATH fails at once, as the head's does,
/// rather than waiting minutes for a head that never comes.
#[test]
fn a_ray_worker_without_ray_on_path_fails_at_once() {
    let (dir, _) = ray_folder("no-ray");
    // No head listens here: a worker that waited would wait its whole window.
    let port = free_port();
    let mut cmd = hermetic::tf_cluster();
    cmd.arg("ray");
    ray_step_env(&mut cmd, &dir, port);
    cmd.env("PATH", dir.join("bin"));
    let started = std::time::Instant::now();
    let out = cmd.output().unwrap();
    let took = started.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("ray is not on PATH"), "{err}");
    assert!(took < std::time::Duration::from_secs(5), "took {took:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A worker node whose `ray start` fails while the head runs starts it again
/// (up to 3 starts): Ray gives a raylet 30 s to register and waits 40 s
/// for the head's node to appear, both fixed in Ray, and a loaded node misses
/// them. Ray is also asked to wait for the head's node as long as tf-cluster
/// waits for the head (RAY_NUM_REDIS_GET_RETRIES, 2 s apart).
#[test]
fn a_ray_worker_whose_start_fails_starts_again_while_the_head_runs() {
    let (dir, starts) = ray_folder("worker");
    // The first `ray start` fails at once; the second runs until it is stopped.
    let python = stand_in_python(&dir, "2.60.0");
    script(
        &dir.join("bin/ray-start"),
        &format!(
            "#!/bin/sh\necho \"$1 retries=$RAY_NUM_REDIS_GET_RETRIES\" >>{s}\n\
             [ \"$(wc -l <{s})\" -ge 2 ] || exit 1\nexec sleep 60\n",
            s = starts.display()
        ),
    );
    script(&dir.join("bin/ray"), &format!("#!{}\n", python.display()));
    // The head's GCS: a port that accepts connections until it is dropped.
    let gcs = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = gcs.local_addr().unwrap().port();
    let mut cmd = hermetic::tf_cluster();
    cmd.arg("ray");
    ray_step_env(&mut cmd, &dir, port);
    let mut worker = cmd.stderr(std::process::Stdio::piped()).spawn().unwrap();
    let lines = || {
        std::fs::read_to_string(&starts)
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect::<Vec<_>>()
    };
    let end = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while lines().len() < 2 && worker.try_wait().unwrap().is_none() {
        assert!(std::time::Instant::now() < end, "no second ray start");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // The head ends: the worker node ends with it, successfully.
    drop(gcs);
    let out = worker.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(lines(), ["start retries=90", "start retries=90"]);
    assert_private_gone_and_clean(&dir);
}

/// The head's `ray start` that ends before the step's Ray was up (here while
/// it waits for the step's nodes) is started again; the driver then runs and
/// its exit code is the step's.
#[test]
fn a_ray_head_whose_start_fails_starts_again_before_the_driver() {
    let (dir, starts) = ray_folder("head");
    // `ray` is run by this interpreter, as Ray's script by its venv's Python;
    // the wait for the nodes (`PYTHON -c CODE`) succeeds after a second. The
    // first `ray start` fails at once; the second runs until it is stopped.
    let python = stand_in_python(&dir, "2.60.0");
    script(
        &dir.join("bin/ray-start"),
        &format!(
            "#!/bin/sh\necho \"$1 $2\" >>{s}\n[ \"$(wc -l <{s})\" -ge 2 ] || exit 1\n\
             for h in $(echo \"$TFC_RAY_GCS_HOLD\" | tr , ' '); do eval \"exec ${{h%%:*}}>&-\"; done\n\
             touch \"$TFC_RAY_GCS_CHECKED\"\nexec python3 -c {gcs} $TFC_TEST_PORT\n",
            s = starts.display(),
            gcs = "'import socket, sys, time\ns = socket.socket()\ns.bind((\"127.0.0.1\", int(sys.argv[1])))\ns.listen()\ntime.sleep(60)'"
        ),
    );
    script(&dir.join("bin/ray"), &format!("#!{}\n", python.display()));
    // The second start's GCS listens, once tf-cluster ray let the port go
    // (the guard's part: the held sockets closed, the GCS found its own).
    let port = free_port();
    let out = head_cmd(&dir, port)
        .env("TFC_TEST_PORT", port.to_string())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(&starts).unwrap(),
        "start --head\nstart --head\n"
    );
    assert!(stderr.contains("starting it again"), "{stderr}");
    assert_private_gone_and_clean(&dir);
}

/// A Ray older than 2.54 (2.52 and 2.53 check the token everywhere but in
/// the dashboard agent's job API) is refused before any `ray start`, in one
/// line naming its version; so is a task without the plugin's token.
#[test]
fn a_ray_older_than_2_54_is_refused() {
    let (dir, starts) = ray_folder("old");
    let python = stand_in_python(&dir, "2.53.0");
    script(
        &dir.join("bin/ray-start"),
        &format!("#!/bin/sh\necho \"$1\" >>{}\n", starts.display()),
    );
    script(&dir.join("bin/ray"), &format!("#!{}\n", python.display()));
    let port = free_port();
    let mut cmd = hermetic::tf_cluster();
    cmd.args(["ray", "--", "true"]);
    ray_step_env(&mut cmd, &dir, port);
    let out = cmd
        .env("TF_CLUSTER_RAY_HEAD_ARGS", format!("--port={port}"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr.trim(),
        "tf-cluster ray: Ray 2.53.0 is older than 2.54, before which another user of the nodes can run code in the step's cluster (no token check, or none in the dashboard agent's job API): install Ray 2.54 or later"
    );
    assert!(!starts.exists(), "ray start ran");
    // The same Ray 2.60 stand-in without the plugin's token.
    stand_in_python(&dir, "2.60.0");
    let mut cmd = hermetic::tf_cluster();
    cmd.args(["ray", "--", "true"]);
    ray_step_env(&mut cmd, &dir, port);
    let out = cmd.env_remove("RAY_AUTH_TOKEN").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("RAY_AUTH_TOKEN is not set"), "{stderr}");
    assert!(!starts.exists(), "ray start ran");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Ray's `ray` script, as pip writes it for the machine's python3.
const RAY_SCRIPT: &str =
    "#!/usr/bin/python3\nimport sys\nfrom ray.scripts.scripts import main\nsys.exit(main())\n";

/// A stand-in of Ray's package for the real guard (cli/src/ray_guard.py)
/// under the machine's python3: `ray start --head`'s Node starts a "GCS"
/// that listens on `--port` after 0.3 s (or fails, the port being taken),
/// then calls that port with the token, as Ray's GcsClient does, and notes
/// the call in the file `called`.
fn stand_in_ray_package(dir: &std::path::Path) {
    let pkg = dir.join("site/ray");
    for sub in ["_private", "scripts"] {
        std::fs::create_dir_all(pkg.join(sub)).unwrap();
        std::fs::write(pkg.join(sub).join("__init__.py"), "").unwrap();
    }
    std::fs::write(pkg.join("__init__.py"), "").unwrap();
    let meta = dir.join("site/ray-2.60.0.dist-info");
    std::fs::create_dir_all(&meta).unwrap();
    std::fs::write(
        meta.join("METADATA"),
        "Metadata-Version: 2.1\nName: ray\nVersion: 2.60.0\n",
    )
    .unwrap();
    std::fs::write(
        pkg.join("_private/ray_constants.py"),
        "PROCESS_TYPE_GCS_SERVER = 'gcs_server'\n",
    )
    .unwrap();
    std::fs::write(
        pkg.join("_private/node.py"),
        "import subprocess, sys\n\
         GCS = 'import socket, sys, time\\ns = socket.socket()\\ntime.sleep(0.3)\\n\
         s.bind((\"127.0.0.1\", int(sys.argv[1])))\\ns.listen()\\ntime.sleep(60)\\n'\n\
         class Info:\n    def __init__(self, p): self.process = p\n\
         class Params: pass\n\
         class Node:\n    def __init__(self, port):\n        self._ray_params = Params()\n\
         \x20       self._ray_params.gcs_server_port = port\n        self.all_processes = {}\n\
         \x20   def start_gcs_server(self):\n\
         \x20       p = subprocess.Popen([sys.executable, '-c', GCS, str(self._ray_params.gcs_server_port)])\n\
         \x20       self.all_processes['gcs_server'] = [Info(p)]\n",
    )
    .unwrap();
    std::fs::write(
        pkg.join("scripts/scripts.py"),
        format!(
            "import os, socket, sys, time\nfrom ray._private.node import Node\n\
             def main():\n    port = int([a for a in sys.argv if a.startswith('--port=')][0][7:])\n\
             \x20   open('{}', 'w').close()\n    time.sleep(0.5)\n\
             \x20   Node(port).start_gcs_server()\n\
             \x20   socket.create_connection(('127.0.0.1', port)).sendall(b'authorization: Bearer ' + os.environ['RAY_AUTH_TOKEN'].encode())\n\
             \x20   open('{}', 'a').write('called\\n')\n    time.sleep(60)\n",
            dir.join("main").display(),
            dir.join("called").display()
        ),
    )
    .unwrap();
}

/// What reaches `listener` while `tfc` runs (and 2 s at least): every
/// connection read to its end; and tfc's output.
fn hear(listener: &std::net::TcpListener, tfc: std::process::Child) -> (Vec<u8>, Output) {
    use std::io::Read;
    let started = std::time::Instant::now();
    listener.set_nonblocking(true).unwrap();
    let mut heard = Vec::new();
    let mut tfc = Some(tfc);
    let mut out = None;
    while out.is_none() || started.elapsed() < std::time::Duration::from_secs(2) {
        if let Ok((mut conn, _)) = listener.accept() {
            conn.set_nonblocking(false).unwrap();
            conn.set_read_timeout(Some(std::time::Duration::from_secs(2)))
                .unwrap();
            let _ = conn.read_to_end(&mut heard);
        }
        if let Some(mut child) = tfc.take() {
            match child.try_wait().unwrap() {
                Some(_) => out = Some(child.wait_with_output().unwrap()),
                None => tfc = Some(child),
            }
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(60));
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    (heard, out.unwrap())
}

/// The head's `tf-cluster ray` with the stand-in package of `dir`.
fn guarded_head(dir: &std::path::Path, port: u16) -> std::process::Child {
    head_cmd(dir, port)
        .env("PYTHONPATH", dir.join("site"))
        .env("TFC_RAY_GCS_WAIT", "20")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Another process listens on the head's GCS port (another user's in life;
/// a second process of the test here: any listener that is not the step's
/// GCS is refused). Listening before tf-cluster ray starts, it is refused
/// at once, before Ray runs. Listening once tf-cluster ray lets the port go
/// to Ray (it held it until then: every earlier try to listen fails), the
/// real guard around Ray's Node finds it before anything calls the port.
/// Either way nothing of the token reaches the listener, the head is not
/// started again nor the driver's wait, and tf-cluster ray exits 1 with
/// one line naming the port.
#[test]
fn a_head_whose_gcs_port_another_process_listens_on_refuses_before_any_call() {
    assert!(
        std::path::Path::new("/usr/bin/python3").exists(),
        "this test runs Python 3 as /usr/bin/python3"
    );
    let line = |port: u16| {
        vec![format!(
            "tf-cluster ray: the head's GCS port {port} is taken by another process of yours, \
             not this step's GCS: Ray not started, and not started again with this step's token"
        )]
    };
    let (dir, _) = ray_folder("taken");
    stand_in_ray_package(&dir);
    script(&dir.join("bin/ray"), RAY_SCRIPT);
    // Before the start.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (heard, out) = hear(&listener, guarded_head(&dir, port));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(String::from_utf8_lossy(&heard), "", "the listener heard");
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().collect::<Vec<_>>(), line(port));
    drop(listener);
    // Once Ray's `ray start` runs: the listener tries from then on.
    let port = free_port();
    let tfc = guarded_head(&dir, port);
    let end = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !dir.join("main").exists() {
        assert!(std::time::Instant::now() < end, "ray start did not run");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let mut refused = 0;
    let listener = loop {
        match std::net::TcpListener::bind(("0.0.0.0", port)) {
            Ok(l) => break l,
            Err(_) => refused += 1,
        }
        assert!(std::time::Instant::now() < end, "the port never came free");
        std::thread::sleep(std::time::Duration::from_millis(2));
    };
    let (heard, out) = hear(&listener, tfc);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(String::from_utf8_lossy(&heard), "", "the listener heard");
    assert!(refused > 0, "the port was not held while ray start began");
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().collect::<Vec<_>>(), line(port));
    assert!(!dir.join("called").exists(), "Ray called the port");
    assert!(!dir.join("waited").exists(), "the driver's wait ran");
    assert_private_gone_and_clean(&dir);
}

/// Without the listener, the same stand-in's GCS passes the guard and is
/// called; tf-cluster ray's wait for the nodes runs only after that.
#[test]
fn a_head_whose_gcs_is_its_own_passes_the_guard() {
    let (dir, _) = ray_folder("own");
    stand_in_ray_package(&dir);
    script(&dir.join("bin/ray"), RAY_SCRIPT);
    let port = free_port();
    let out = head_cmd(&dir, port)
        .env("PYTHONPATH", dir.join("site"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The stand-in package has no ray.init: the wait for the nodes fails,
    // after the guard let Ray's own call through.
    assert!(
        stderr.contains("waiting for the step's 1 Ray nodes failed"),
        "{stderr}"
    );
    assert!(!stderr.contains("GCS port"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(dir.join("called")).unwrap(),
        "called\n"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The preview is `preview`, as every page names it; `explain` is kept as
/// its alias and gives the same table.
#[test]
fn preview_is_the_command_and_explain_its_alias() {
    let args = ["-N2", "-n4", "--tf-cluster=ps:1,worker:3"];
    let preview = cli(&[&["preview"][..], &args].concat(), &[]);
    assert!(
        preview.status.success(),
        "{}",
        String::from_utf8_lossy(&preview.stderr)
    );
    let explain = cli(&[&["explain"][..], &args].concat(), &[]);
    assert_eq!(preview.stdout, explain.stdout);
    let help = String::from_utf8(cli(&["--help"], &[]).stdout).unwrap();
    assert!(help.contains("tf-cluster preview -N2"), "{help}");
    assert!(!help.contains("tf-cluster explain"), "{help}");
}

/// Each subcommand's own `--help` starts with its own description.
#[test]
fn each_command_has_its_own_help() {
    for (command, word) in [
        ("env", "JSON"),
        ("preview", "every rank"),
        ("doctor", "installation"),
        ("launcher-env", "launchers"),
        ("ray", "--ray-cluster"),
        ("postmortem", "--tf-record"),
    ] {
        let out = cli(&[command, "--help"], &[]);
        assert!(out.status.success(), "{command}: {out:?}");
        let help = String::from_utf8(out.stdout).unwrap();
        let first = help.lines().next().unwrap_or_default();
        assert!(first.contains(word), "{command}: {first}");
    }
}

/// A reader that closes the pipe early (`| head -c 10`) ends the preview
/// quietly, as tools do on EPIPE: no panic, no exit 101.
#[test]
fn a_closed_pipe_ends_quietly() {
    use std::io::Read;
    for command in ["preview", "env"] {
        let mut child = hermetic::tf_cluster()
            .args([command, "-N64", "-n4096", "--tf-cluster"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = child.stdout.take().unwrap();
        let mut head = [0u8; 10];
        stdout.read_exact(&mut head).unwrap();
        drop(stdout);
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(101), "{command}: {stderr}");
        assert!(!stderr.contains("panicked"), "{command}: {stderr}");
    }
}

/// A count too large says so, with the most it may be, for the roles and
/// for srun's counts.
#[test]
fn counts_too_large_say_at_most() {
    for args in [
        vec!["preview", "-n4", "--tf-cluster=worker:99999999999"],
        vec!["preview", "-n99999999999", "--tf-cluster"],
        vec!["preview", "-N99999999999", "--tf-cluster"],
        vec!["preview", "--ntasks-per-node=99999999999", "--tf-cluster"],
    ] {
        let out = cli(&args, &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(stderr.contains("too large"), "{args:?}: {stderr}");
        assert!(stderr.contains("at most"), "{args:?}: {stderr}");
        assert!(!stderr.contains("not a"), "{args:?}: {stderr}");
    }
    let nodes = cli(&["preview", "-N99999999999"], &[]);
    assert!(
        String::from_utf8_lossy(&nodes.stderr).contains("at most 65536"),
        "{nodes:?}"
    );
}
