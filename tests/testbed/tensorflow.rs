//! Real TensorFlow (tensorflow-cpu in the testbed image's /opt/tf) trains from
//! the TF_CONFIG the plugin injects. The jobs are the example sbatch scripts
//! and Python programs of tests/fixtures/tensorflow/, run verbatim: the programs
//! contain no cluster code, every task learns its role from
//! `TFConfigClusterResolver`.
//!
//! A task prolog (SLURM_TASK_PROLOG, which srun inside the batch script picks
//! up) prints every task's Slurm placement and TF_CONFIG, so the expected
//! TF_CONFIG is derived from Slurm, as in the other testbed tests.

use crate::common;

use std::collections::BTreeMap;

use std::sync::OnceLock;

use common::outputs::Outputs;
use common::{PROBE, Run, Task, reserved_ports, testbed};
use serde_json::Value;

/// Where the scripts are put on the shared /home.
const DIR: &str = "/home/alice/tf-tests";

/// (file name, contents) of everything the jobs need: tests/fixtures/tensorflow/.
const FILES: [(&str, &str); 7] = [
    (
        "mwms.sbatch",
        include_str!("../fixtures/tensorflow/mwms.sbatch"),
    ),
    ("mwms.py", include_str!("../fixtures/tensorflow/mwms.py")),
    (
        "ps.sbatch",
        include_str!("../fixtures/tensorflow/ps.sbatch"),
    ),
    ("ps.py", include_str!("../fixtures/tensorflow/ps.py")),
    (
        "evaluator.sbatch",
        include_str!("../fixtures/tensorflow/evaluator.sbatch"),
    ),
    (
        "evaluator.py",
        include_str!("../fixtures/tensorflow/evaluator.py"),
    ),
    (
        "show_resolver.py",
        include_str!("../fixtures/tensorflow/show_resolver.py"),
    ),
];

/// Writes the scripts and the task prolog to DIR once per test process.
fn install() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        // A task prolog's stdout lines `print X` reach the task's stdout.
        let prolog = format!(
            "#!/bin/bash\n{}\n",
            PROBE.replacen("printf 'TASK", "printf 'print TASK", 1)
        );
        let mut files: Vec<(&str, &str)> = FILES.to_vec();
        files.push(("probe-prolog.sh", &prolog));
        common::install(DIR, &files, "chmod 755 probe-prolog.sh\n");
    });
}

/// One batch job's outcome: the tasks (Slurm placement and TF_CONFIG) and
/// each rank's `RESOLVER`/`RESULT` lines from the Python program.
struct Job {
    run: Run,
    resolver: BTreeMap<u32, Value>,
    result: BTreeMap<u32, Value>,
    output: String,
}

/// `sbatch --wait ARGS DIR/SCRIPT` with the probe as task prolog; each
/// task's lines from its own file.
fn sbatch(script: &str, args: &[&str]) -> Job {
    install();
    let outputs = Outputs::new(script);
    let prolog = format!("SLURM_TASK_PROLOG={DIR}/probe-prolog.sh");
    let script_path = format!("{DIR}/{script}");
    let mut sbatch_args = vec!["-D", DIR];
    sbatch_args.extend_from_slice(args);
    // A hung job must not outlive the test: Slurm ends it at its time limit,
    // and the wait here is longer than common::exec's 120 s (TensorFlow starts
    // slowly on a busy 2-core machine).
    sbatch_args.extend_from_slice(&["--time=9", &script_path]);
    let (code, said) = outputs.sbatch(600, &["TF_CPP_MIN_LOG_LEVEL=2", &prolog], &sbatch_args);
    let labelled = outputs.labelled();
    let (resolver, result) = (labelled.json("RESOLVER "), labelled.json("RESULT "));
    let output = format!("{said}\n{}", outputs.dump());
    let run = labelled.run(code, output.clone());
    Job {
        run,
        resolver,
        result,
        output,
    }
}

impl Job {
    /// Every task's `TFConfigClusterResolver` saw the cluster, role, index,
    /// rpc layer and master that Slurm's placement implies.
    fn assert_resolvers(&self, rpc_layer: Option<&str>) {
        let ranks: Vec<u32> = self.resolver.keys().copied().collect();
        let want: Vec<u32> = self.run.tasks.iter().map(|t| t.rank).collect();
        assert_eq!(ranks, want, "RESOLVER lines:\n{}", self.output);
        for task in &self.run.tasks {
            let seen = &self.resolver[&task.rank];
            let tf_config = task.tf_config.as_ref().expect("TF_CONFIG");
            let role = &tf_config["task"]["type"];
            let index = &tf_config["task"]["index"];
            assert_eq!(seen["cluster"], tf_config["cluster"], "rank {}", task.rank);
            assert_eq!(&seen["task_type"], role, "rank {}", task.rank);
            assert_eq!(&seen["task_id"], index, "rank {}", task.rank);
            assert_eq!(
                seen["rpc_layer"],
                Value::from(rpc_layer),
                "rank {}",
                task.rank
            );
            let own = own_address(task);
            let master = match rpc_layer {
                Some(layer) => format!("{layer}://{own}"),
                None => own.clone(),
            };
            assert_eq!(seen["master"], Value::from(master), "rank {}", task.rank);
            let listed = &seen["cluster"][role.as_str().unwrap()][index.as_u64().unwrap() as usize];
            assert_eq!(listed, &Value::from(own), "rank {}", task.rank);
        }
    }
}

/// The address a task must listen on: its host, and the port Slurm reserved
/// for its local index (the testbed reserves ports for every step).
fn own_address(task: &Task) -> String {
    let ports = reserved_ports(task.resv_ports.as_deref().expect("reserved ports"));
    format!("{}:{}", task.host, ports[task.local as usize])
}

/// MultiWorkerMirroredStrategy across 3 nodes with a custom training loop:
/// the loss goes down and every worker ends with bit-identical weights.
#[test]
fn multi_worker_mirrored_strategy_trains_identical_weights() {
    let _t = testbed();
    let job = sbatch("mwms.sbatch", &["--tf-rpc-layer=grpc"]);
    job.run
        .assert_ran(3)
        .assert_tf_config_rpc(&[("worker", 3)], 8888, Some("grpc"));
    let mut hosts = job.run.hosts();
    hosts.sort();
    hosts.dedup();
    assert_eq!(hosts.len(), 3, "one worker per node: {hosts:?}");
    job.assert_resolvers(Some("grpc"));

    assert_eq!(job.result.len(), 3, "RESULT lines:\n{}", job.output);
    for (rank, r) in &job.result {
        assert_eq!(r["task"], format!("worker:{rank}"));
        assert_eq!(r["workers"], 3, "rank {rank}: {r}");
        let (first, last) = (r["first_loss"].as_f64(), r["last_loss"].as_f64());
        assert!(
            last.unwrap() < first.unwrap() / 2.0,
            "rank {rank}: loss did not go down: {r}"
        );
    }
    let sums: Vec<&Value> = job.result.values().map(|r| &r["weights_sha256"]).collect();
    assert!(
        sums.iter().all(|s| *s == sums[0]) && sums[0].is_string(),
        "workers ended with different weights: {sums:?}"
    );
    let losses: Vec<&Value> = job.result.values().map(|r| &r["last_loss"]).collect();
    assert!(losses.iter().all(|l| *l == losses[0]), "{losses:?}");
}

/// ParameterServerStrategy with `chief:1,ps:1,worker:2`: the chief schedules
/// steps on the workers through a ClusterCoordinator, the variables live on
/// the ps, the loss goes down, and the whole step ends (exit 0) when the
/// chief is done.
#[test]
fn parameter_server_strategy_trains_with_variables_on_the_ps() {
    let _t = testbed();
    let job = sbatch("ps.sbatch", &[]);
    job.run
        .assert_ran(4)
        .assert_tf_config(&[("chief", 1), ("ps", 1), ("worker", 2)], 8888);
    job.assert_resolvers(None);

    let ranks: Vec<u32> = job.result.keys().copied().collect();
    assert_eq!(ranks, [0], "only the chief reports:\n{}", job.output);
    let r = &job.result[&0];
    assert_eq!(r["task"], "chief:0");
    let losses: Vec<f64> = r["losses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_f64().unwrap())
        .collect();
    assert!(
        losses.len() >= 2 && losses[losses.len() - 1] < losses[0] / 2.0,
        "loss did not go down: {r}"
    );
    let devices = r["variable_devices"].as_array().unwrap();
    assert!(
        !devices.is_empty()
            && devices
                .iter()
                .all(|d| d.as_str().unwrap().starts_with("/job:ps/")),
        "variables not on the ps: {r}"
    );
}

/// Side-car evaluation with `chief:1,worker:2,evaluator:1`: the trainers'
/// TF_CONFIG is Slurm's placement of ranks 0-2 with no evaluator in the
/// cluster, the evaluator (rank 3) gets that same cluster and its own task,
/// MultiWorkerMirroredStrategy trains on the three, and the evaluator, which
/// never joins, evaluates the chief's last checkpoint.
#[test]
fn side_car_evaluator_stays_out_of_the_cluster_and_evaluates_checkpoints() {
    let _t = testbed();
    let job = sbatch("evaluator.sbatch", &[]);
    let run = &job.run;
    run.assert_ran(4);
    // The trainers: exactly what assert_tf_config derives from Slurm for
    // chief:1,worker:2 (ranks 0-2).
    let trainers = common::Run {
        code: run.code,
        stderr: run.stderr.clone(),
        tasks: run.tasks[..3].to_vec(),
    };
    trainers.assert_tf_config(&[("chief", 1), ("worker", 2)], 8888);
    let evaluator = run.tasks[3]
        .tf_config
        .as_ref()
        .expect("evaluator's TF_CONFIG");
    let cluster = &run.tasks[0].tf_config.as_ref().unwrap()["cluster"];
    assert_eq!(
        evaluator,
        &serde_json::json!({"cluster": cluster, "task": {"type": "evaluator", "index": 0}}),
        "the evaluator's TF_CONFIG"
    );
    assert!(cluster.get("evaluator").is_none(), "{cluster}");

    // TFConfigClusterResolver read the same, everywhere.
    for task in &run.tasks {
        let seen = &job.resolver[&task.rank];
        let tf_config = task.tf_config.as_ref().unwrap();
        assert_eq!(seen["cluster"], *cluster, "rank {}", task.rank);
        assert_eq!(seen["task_type"], tf_config["task"]["type"]);
        assert_eq!(seen["task_id"], tf_config["task"]["index"]);
    }

    assert_eq!(job.result.len(), 4, "RESULT lines:\n{}", job.output);
    for rank in 0..3 {
        let r = &job.result[&rank];
        assert_eq!(r["workers"], 3, "rank {rank}: {r}");
        assert_eq!(r["steps"], 20, "rank {rank}: {r}");
    }
    assert_eq!(
        job.result[&0]["checkpoints"],
        serde_json::json!(["ckpt-10", "ckpt-20"])
    );
    let r = &job.result[&3];
    assert_eq!(r["task"], "evaluator:0");
    let evaluations = r["evaluations"].as_array().expect("evaluations");
    let last = evaluations.last().unwrap_or_else(|| panic!("none: {r}"));
    assert_eq!(last["step"], 20, "{r}");
    let (loss, untrained) = (
        last["loss"].as_f64().unwrap(),
        r["untrained_loss"].as_f64().unwrap(),
    );
    assert!(
        loss.is_finite() && loss < untrained / 2.0,
        "the evaluated checkpoint is not trained: {r}"
    );
}
