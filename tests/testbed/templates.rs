//! The templates of examples/ run on the CPU testbed through their documented switch,
//! `TF_CLUSTER_EXAMPLE_CPU=1`, as user alice: each sbatch script as it is, submitted from the
//! folder holding its program, with a smaller shape given on sbatch's command line (which wins
//! over the script's `#SBATCH` lines: the testbed's 2 cores run every process) and `VENV`
//! naming the image's Python environment. The testbed's nodes have fake GPUs (gres), so the
//! scripts' `--gpus-per-node` is granted; the CPU builds of the frameworks ignore them.
//!
//! The programs print nothing for the tests: each rank's last line,
//! `rank R/W on HOST: done, loss X`, is read from the job's output file, from outside.
//!
//! DeepSpeed is not installed on the testbed: its template is only compiled
//! (`python3 -m py_compile`), with every other program, and every script checked with `bash -n`.
//! Keras 3 runs on the JAX backend in a venv of alice's layered over the image's /opt/jax
//! (which has no keras): keras from PyPI, as other tests install their launchers.
//!
//! Lightning and Accelerate need the image's /opt/pt (trixie, forky); the whole module runs on
//! forky only (tests/where.tsv).

use crate::common;

use std::collections::{BTreeMap, BTreeSet};

use common::exec;
use common::outputs::Outputs;

const DIR: &str = "/home/alice/templates";

const PYTORCH: [(&str, &str); 12] = [
    (
        "ddp.sbatch",
        include_str!("../../examples/pytorch/ddp.sbatch"),
    ),
    ("ddp.py", include_str!("../../examples/pytorch/ddp.py")),
    (
        "torchrun.sbatch",
        include_str!("../../examples/pytorch/torchrun.sbatch"),
    ),
    (
        "fsdp.sbatch",
        include_str!("../../examples/pytorch/fsdp.sbatch"),
    ),
    ("fsdp.py", include_str!("../../examples/pytorch/fsdp.py")),
    (
        "lightning.sbatch",
        include_str!("../../examples/pytorch/lightning.sbatch"),
    ),
    (
        "lightning_train.py",
        include_str!("../../examples/pytorch/lightning_train.py"),
    ),
    (
        "accelerate.sbatch",
        include_str!("../../examples/pytorch/accelerate.sbatch"),
    ),
    (
        "accelerate_train.py",
        include_str!("../../examples/pytorch/accelerate_train.py"),
    ),
    (
        "deepspeed.sbatch",
        include_str!("../../examples/pytorch/deepspeed.sbatch"),
    ),
    // Run through a requeue by tests/testbed/requeue.rs; compiled here with the others.
    (
        "requeue.sbatch",
        include_str!("../../examples/pytorch/requeue.sbatch"),
    ),
    (
        "requeue_train.py",
        include_str!("../../examples/pytorch/requeue_train.py"),
    ),
];
const DEEPSPEED_PY: (&str, &str) = (
    "deepspeed_train.py",
    include_str!("../../examples/pytorch/deepspeed_train.py"),
);
const JAX: [(&str, &str); 2] = [
    (
        "train.sbatch",
        include_str!("../../examples/jax/train.sbatch"),
    ),
    ("train.py", include_str!("../../examples/jax/train.py")),
];
const KERAS: [(&str, &str); 2] = [
    (
        "train.sbatch",
        include_str!("../../examples/keras/train.sbatch"),
    ),
    ("train.py", include_str!("../../examples/keras/train.py")),
];
const TENSORFLOW: [(&str, &str); 4] = [
    (
        "mwms.sbatch",
        include_str!("../../examples/tensorflow/mwms.sbatch"),
    ),
    ("mwms.py", include_str!("../../examples/tensorflow/mwms.py")),
    // Run through a preemption by tests/testbed/requeue.rs; compiled here with the others.
    (
        "preemptible.sbatch",
        include_str!("../../examples/tensorflow/preemptible.sbatch"),
    ),
    (
        "preemptible.py",
        include_str!("../../examples/tensorflow/preemptible.py"),
    ),
];

/// Alice's venv for Keras 3 on JAX: the image's /opt/jax (jax[cpu]) seen through a .pth file,
/// keras from PyPI.
const KERAS_VENV: &str = "/home/alice/keras-jax";

/// Writes every template to DIR/FRAMEWORK once per test process.
fn install() {
    static DONE: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    DONE.get_or_init(|| {
        let mut pytorch = PYTORCH.to_vec();
        pytorch.push(DEEPSPEED_PY);
        common::install(&format!("{DIR}/pytorch"), &pytorch, "");
        common::install(&format!("{DIR}/jax"), &JAX, "");
        common::install(&format!("{DIR}/keras"), &KERAS, "");
        common::install(&format!("{DIR}/tensorflow"), &TENSORFLOW, "");
    });
}

/// One rank's last line.
#[derive(Debug)]
struct Done {
    world: u32,
    host: String,
    loss: f64,
}

/// Every `rank R/W on HOST: done, loss X` of `output` (anywhere in a line: srun's label or a
/// launcher's prefix may stand before it, and a node's workers share its stdout, where a line's
/// newline is a write of its own, so one line may hold two: `…loss 6.86rank 0/4 …`), by rank;
/// a rank twice fails.
fn done_lines(output: &str) -> BTreeMap<u32, Done> {
    let mut found = BTreeMap::new();
    for line in output.lines() {
        for (at, _) in line.match_indices("rank ") {
            let rest = &line[at + "rank ".len()..];
            let Some((head, tail)) = rest.split_once(": done, loss ") else {
                continue;
            };
            let Some((ranks, host)) = head.split_once(" on ") else {
                continue;
            };
            let Some((rank, world)) = ranks.split_once('/') else {
                continue;
            };
            let (Ok(rank), Ok(world)) = (rank.parse::<u32>(), world.parse::<u32>()) else {
                continue;
            };
            // The loss: its number, up to where another's line may begin.
            let end = tail
                .find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '-' | 'e' | '+')))
                .unwrap_or(tail.len());
            let loss: f64 = tail[..end]
                .parse()
                .unwrap_or_else(|e| panic!("{line:?}: {e}\n{output}"));
            let done = Done {
                world,
                host: host.to_string(),
                loss,
            };
            assert!(
                found.insert(rank, done).is_none(),
                "rank {rank} twice:\n{output}"
            );
        }
    }
    found
}

/// `env TF_CLUSTER_EXAMPLE_CPU=1 VENV=… sbatch --wait SHAPE DIR/FOLDER/SCRIPT` from that
/// folder; checks that the job succeeded and that ranks 0..world each ended with a finite
/// loss, spread over `nodes` hosts. The templates stay as users copy them; the harness
/// chooses where their output goes: each srun task's in a file of its own
/// (SLURM_STDOUTMODE) and, where a task's torchrun starts several workers (`Workers::Files`),
/// each worker's in a file of its own (torchrun's PET_LOG_DIR and PET_REDIRECTS, read from the
/// environment as its --log-dir and --redirects); each file is read apart.
fn run(folder: &str, script: &str, venv: Option<&str>, shape: &[&str], world: u32, nodes: usize) {
    run_with(folder, script, venv, shape, world, nodes, Workers::Inherit);
}

/// Where the workers a task's launcher starts write.
#[derive(PartialEq)]
enum Workers {
    /// On their launcher's stdout (one worker per task, or none).
    Inherit,
    /// Each in a file of its own: torchrun's per-worker logs.
    Files,
}

/// [`run`] with the workers' output where `workers` says.
fn run_with(
    folder: &str,
    script: &str,
    venv: Option<&str>,
    shape: &[&str],
    world: u32,
    nodes: usize,
    workers: Workers,
) {
    install();
    let dir = format!("{DIR}/{folder}");
    let outputs = Outputs::new(&format!("{folder}-{script}"));
    let venv = format!("VENV={}", venv.unwrap_or(""));
    let log_dir = format!("PET_LOG_DIR={}/workers", outputs.path());
    let script_path = format!("{dir}/{script}");
    let mut args = vec!["-D", dir.as_str(), "--time=5"];
    args.extend_from_slice(shape);
    args.push(script_path.as_str());
    let mut vars = vec!["TF_CLUSTER_EXAMPLE_CPU=1", &venv, "TF_CPP_MIN_LOG_LEVEL=2"];
    if workers == Workers::Files {
        vars.extend_from_slice(&[&log_dir, "PET_REDIRECTS=3"]);
    }
    // A hung job must not outlive the test: --time.
    let (code, said) = outputs.sbatch(360, &vars, &args);
    let context = format!(
        "{folder}/{script}: {said}\n---- the job's files ----\n{}",
        outputs.dump()
    );
    assert_eq!(code, Some(0), "{context}");
    let mut done = BTreeMap::new();
    for (name, text) in outputs.tree() {
        for (rank, d) in done_lines(&text) {
            assert!(
                done.insert(rank, d).is_none(),
                "rank {rank} twice ({name}):\n{context}"
            );
        }
    }
    let ranks: Vec<u32> = done.keys().copied().collect();
    assert_eq!(ranks, (0..world).collect::<Vec<_>>(), "{context}");
    for (rank, d) in &done {
        assert_eq!(d.world, world, "rank {rank}: {d:?}\n{context}");
        assert!(d.loss.is_finite(), "rank {rank}: {d:?}\n{context}");
    }
    let hosts: BTreeSet<&str> = done.values().map(|d| d.host.as_str()).collect();
    assert_eq!(hosts.len(), nodes, "hosts {hosts:?}\n{context}");
}

/// 2 nodes, `tasks` tasks and as many (fake) GPUs on each.
fn shape(tasks: &'static str, gpus: &'static str) -> [&'static str; 3] {
    ["--nodes=2", tasks, gpus]
}

/// DDP started by srun, 2 processes per node: rank, world and rank 0's address from
/// --torch-cluster.
#[test]
fn pytorch_ddp() {
    let _t = common::testbed();
    let s = shape("--ntasks-per-node=2", "--gpus-per-node=2");
    run("pytorch", "ddp.sbatch", None, &s, 4, 2);
}

/// One torchrun per node, one worker per GPU Slurm gave the node (SLURM_GPUS_ON_NODE = 2).
#[test]
fn pytorch_torchrun() {
    let _t = common::testbed();
    let s = shape("--ntasks-per-node=1", "--gpus-per-node=2");
    run_with("pytorch", "torchrun.sbatch", None, &s, 4, 2, Workers::Files);
}

/// FSDP over 2 ranks on 2 nodes (gloo on CPU).
#[test]
fn pytorch_fsdp() {
    let _t = common::testbed();
    let s = shape("--ntasks-per-node=1", "--gpus-per-node=1");
    run("pytorch", "fsdp.sbatch", None, &s, 2, 2);
}

/// Lightning's SLURMEnvironment, devices and nodes from Slurm's variables.
#[test]
fn pytorch_lightning() {
    let _t = common::testbed();
    let s = shape("--ntasks-per-node=1", "--gpus-per-node=1");
    run("pytorch", "lightning.sbatch", Some("/opt/pt"), &s, 2, 2);
}

/// One `accelerate launch` per node, one process per (fake) GPU.
#[test]
fn pytorch_accelerate() {
    let _t = common::testbed();
    let s = shape("--ntasks-per-node=1", "--gpus-per-node=1");
    run("pytorch", "accelerate.sbatch", Some("/opt/pt"), &s, 2, 2);
}

/// JAX: jax.distributed.initialize() with no argument, 2 processes on 2 nodes.
#[test]
fn jax_multi_host() {
    let _t = common::testbed();
    let s = shape("--ntasks-per-node=1", "--gpus-per-node=1");
    run("jax", "train.sbatch", Some("/opt/jax"), &s, 2, 2);
}

/// Keras 3 on JAX: keras.distribution over 2 processes on 2 nodes.
#[test]
fn keras_on_jax() {
    let _t = common::testbed();
    keras_venv();
    let s = shape("--ntasks-per-node=1", "--gpus-per-node=1");
    run("keras", "train.sbatch", Some(KERAS_VENV), &s, 2, 2);
}

/// TensorFlow MultiWorkerMirroredStrategy, one worker on each of 2 nodes.
#[test]
fn tensorflow_mwms() {
    let _t = common::testbed();
    let s = shape("--ntasks-per-node=1", "--gpus-per-node=1");
    run("tensorflow", "mwms.sbatch", Some("/opt/tf"), &s, 2, 2);
}

/// Every program compiles with the testbed's Python (DeepSpeed's is only compiled: DeepSpeed
/// is not installed there) and every script is valid bash.
#[test]
fn every_template_compiles() {
    let _t = common::testbed();
    install();
    let script = format!(
        "set -e; cd {DIR}; for f in */*.py; do python3 -m py_compile \"$f\"; done; \
         for f in */*.sbatch; do bash -n \"$f\"; done; echo compiled */*.py */*.sbatch"
    );
    let out = exec(&["bash", "-c", &script]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("pytorch/deepspeed_train.py"),
        "not compiled: {stdout}"
    );
}

/// KERAS_VENV: a venv on /opt/jax's interpreter that sees /opt/jax's packages (a .pth file)
/// and has keras from PyPI; kept when it already imports both.
fn keras_venv() {
    common::install(
        KERAS_VENV,
        &[("extra-ca.pem", &common::extra_ca())],
        "cat /etc/ssl/certs/ca-certificates.crt extra-ca.pem > pip-ca.pem\n",
    );
    let v = KERAS_VENV;
    let check = "import os; os.environ[\"KERAS_BACKEND\"] = \"jax\"; import jax, keras";
    let setup = format!(
        "set -e; [ -x {v}/bin/python ] || $(readlink -f /opt/jax/bin/python) -m venv {v}\n\
         {v}/bin/python -c '{check}' 2>/dev/null && exit 0\n\
         purelib() {{ \"$1\" -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])'; }}\n\
         purelib /opt/jax/bin/python > \"$(purelib {v}/bin/python)/opt-jax.pth\"\n\
         {v}/bin/pip install -q --disable-pip-version-check --cert {v}/pip-ca.pem keras==3.15.1\n\
         {v}/bin/python -c '{check}'"
    );
    let out = common::exec_for(600, &["bash", "-c", &setup]);
    assert!(
        out.status.success(),
        "installing keras: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Two workers' lines run together on a shared stdout are both read
/// (seen with torchrun on forky: `…loss 6.8638rank 0/4 …`); needs no testbed.
#[test]
fn done_lines_read_two_workers_on_one_line() {
    let found = done_lines(
        "0: rank 1/4 on node1: done, loss 6.8638rank 0/4 on node1: done, loss 6.7465\n1: rank 3/4 on node2: done, loss 2.5282\n",
    );
    assert_eq!(found.keys().copied().collect::<Vec<_>>(), [0, 1, 3]);
    assert_eq!(found[&1].loss, 6.8638);
    assert_eq!(found[&0].loss, 6.7465);
    assert_eq!(found[&3].host, "node2");
    assert_eq!(found[&0].world, 4);
}
