//! One launcher per node with `--torch-cluster`: torchrun (its arguments from
//! the plugin's PET_* variables), PyTorch Lightning (SLURMEnvironment with the
//! plugin's MASTER_ADDR/MASTER_PORT) and Hugging Face Accelerate (`accelerate
//! launch` as its Slurm example runs it). The jobs are the example batch
//! scripts of tests/fixtures/pytorch as the docs show them.
//!
//! Rank 0 is put on node3, not the node list's first host: the batch script's
//! srun gets `-m arbitrary` and a host file through its environment
//! (SLURM_DISTRIBUTION, SLURM_HOSTFILE, from BASH_ENV), the script itself
//! unchanged. Every
//! expected value is derived from where Slurm really ran each task (the probe,
//! run as task prolog), never from the plugin's output.
//!
//! Lightning and Accelerate exist on the suites whose Debian torch is recent
//! enough (trixie, forky: the image's /opt/pt); tests/where.tsv runs their
//! tests on trixie. Two torchrun steps at once on the same nodes are
//! tests/testbed/elastic.rs's (each on its own port, under its own id).

use crate::common;

use std::collections::BTreeMap;
use std::sync::OnceLock;

use common::outputs::Outputs;
use common::{PROBE, Run, exec, reserved_ports, testbed};
use serde_json::Value;

const DIR: &str = "/home/alice/launcher-tests";

const FILES: [(&str, &str); 7] = [
    ("ddp.py", include_str!("../fixtures/pytorch/ddp.py")),
    ("tfc_report.py", include_str!("../fixtures/tfc_report.py")),
    (
        "torchrun.sbatch",
        include_str!("../fixtures/pytorch/torchrun.sbatch"),
    ),
    (
        "lightning.sbatch",
        include_str!("../fixtures/pytorch/lightning.sbatch"),
    ),
    (
        "lightning_train.py",
        include_str!("../fixtures/pytorch/lightning_train.py"),
    ),
    (
        "accelerate.sbatch",
        include_str!("../fixtures/pytorch/accelerate.sbatch"),
    ),
    (
        "accelerate_train.py",
        include_str!("../fixtures/pytorch/accelerate_train.py"),
    ),
];

/// What each launcher saw of torchrun's arguments and its own step.
const PET: &str = r#"printf 'print PET\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "${PET_NNODES-}" "${PET_NODE_RANK-}" "${PET_MASTER_ADDR-}:${PET_MASTER_PORT-}" "${PET_RDZV_ENDPOINT-}" "${PET_RDZV_ID-}" "${PET_RDZV_BACKEND-}" "$SLURM_JOB_ID.$SLURM_STEP_ID" "${MASTER_ADDR-}:${MASTER_PORT-}""#;

fn install() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        // A task prolog's stdout lines `print X` reach the task's stdout.
        let prolog = format!(
            "#!/bin/bash\n{}\n{PET}\n",
            PROBE.replacen("printf 'TASK", "printf 'print TASK", 1)
        );
        let mut files: Vec<(&str, &str)> = FILES.to_vec();
        files.push(("probe-prolog.sh", &prolog));
        common::install(
            DIR,
            &files,
            "chmod 755 probe-prolog.sh\n\
             printf 'node3\\nnode1\\nnode2\\n' > hostfile-3\n\
             printf 'node3\\nnode1\\nnode2\\nnode3\\nnode1\\nnode2\\n' > hostfile-6\n\
             for n in 3 6; do\n\
                 echo \"export SLURM_DISTRIBUTION=arbitrary SLURM_HOSTFILE=$PWD/hostfile-$n\" > node3-first-$n.sh\n\
             done\n",
        );
    });
}

/// One job's outcome.
struct Job {
    run: Run,
    /// By Slurm rank: the launcher's PET line, split.
    pet: BTreeMap<u32, Vec<String>>,
    /// By the program's own rank: its RESULT JSON (each worker's report file).
    result: BTreeMap<u64, Value>,
    output: String,
}

/// The job's outcome from each task's own output file (the probe's and the
/// PET lines) and each worker's own report (RESULT).
fn parse(outputs: &Outputs, code: Option<i32>, context: &str) -> Job {
    let labelled = outputs.labelled();
    let output = format!("{context}\n{}", outputs.dump());
    let mut pet = BTreeMap::new();
    for (&rank, lines) in &labelled.lines {
        for rest in lines.iter().filter_map(|l| l.strip_prefix("PET\t")) {
            pet.insert(rank, rest.split('\t').map(str::to_string).collect());
        }
    }
    let mut result = BTreeMap::new();
    for v in outputs.reports("RESULT") {
        let rank = v["rank"].as_u64().expect("rank");
        assert!(
            result.insert(rank, v).is_none(),
            "rank {rank} twice:\n{output}"
        );
    }
    Job {
        run: labelled.run(code, output.clone()),
        pet,
        result,
        output,
    }
}

/// `sbatch --wait DIR/SCRIPT` with the probe as task prolog; the script's
/// srun lays its `tasks` tasks out by a host file (node3, node1, node2,
/// node3, …). The batch script's bash reads the two variables from BASH_ENV:
/// given with `sbatch --export=ALL,…`, Slurm 24.11's slurmd died on the
/// testbed ("fatal: clone: Operation not permitted"). The script's srun puts
/// each task's output in a file of its own (SLURM_STDOUTMODE), the workers
/// their reports in the same folder (TFC_REPORT_DIR): the script is unchanged.
fn sbatch(script: &str, tasks: u32) -> Job {
    install();
    let outputs = Outputs::new(script);
    let prolog = format!("SLURM_TASK_PROLOG={DIR}/probe-prolog.sh");
    let bash_env = format!("BASH_ENV={DIR}/node3-first-{tasks}.sh");
    let script_path = format!("{DIR}/{script}");
    // A hung job must not outlive the test: --time. Nine minutes, as the
    // elastic tests give theirs: on a loaded 2-core machine a 3 × 2 training
    // on torch 2.x can take more than five.
    let (code, said) = outputs.sbatch(
        600,
        &[&prolog, &bash_env],
        &["-D", DIR, "--time=9", &script_path],
    );
    parse(&outputs, code, &said)
}

impl Job {
    /// The job ran `launchers` tasks and its program `world` ranks 0..world,
    /// each ending with rank 0's weights after a falling loss; returns the
    /// weights' checksum.
    fn assert_trained(&self, launchers: u32, world: u64) -> String {
        self.run.assert_ran(launchers);
        let ranks: Vec<u64> = self.result.keys().copied().collect();
        assert_eq!(
            ranks,
            (0..world).collect::<Vec<_>>(),
            "RESULT lines:\n{}",
            self.output
        );
        let weights = self.result[&0]["weights_sha256"].as_str().unwrap();
        for (rank, r) in &self.result {
            assert_eq!(r["world_size"], world, "rank {rank}: {r}");
            assert_eq!(r["weights_sha256"], weights, "rank {rank}: weights differ");
            let (first, last) = (
                r["first_loss"].as_f64().unwrap(),
                r["last_loss"].as_f64().unwrap(),
            );
            assert!(
                last < first / 2.0,
                "rank {rank}: the loss did not go down: {r}"
            );
        }
        weights.to_string()
    }

    /// Every launcher got torchrun's arguments for its step: the count, its
    /// Slurm rank as node rank, the static rendezvous on rank 0's host and a
    /// port Slurm reserved for the step, the step's JOB.STEP as id. Returns
    /// the rendezvous endpoint.
    fn assert_pet(&self) -> (String, u16) {
        let n = self.run.tasks.len();
        let rank0 = &self.run.tasks[0];
        let p0 = &self.pet[&0];
        let (host, port) = p0[3].rsplit_once(':').expect("PET_RDZV_ENDPOINT");
        let port: u16 = port.parse().unwrap();
        assert_eq!(host, rank0.host, "the rendezvous is on rank 0's host");
        let reserved = reserved_ports(rank0.resv_ports.as_deref().expect("reserved ports"));
        assert!(reserved.contains(&port), "{port} not among {reserved:?}");
        for task in &self.run.tasks {
            let p = &self.pet[&task.rank];
            let ctx = format!("rank {} on {}: {p:?}", task.rank, task.host);
            assert_eq!(p[0], n.to_string(), "PET_NNODES {ctx}");
            assert_eq!(p[1], task.rank.to_string(), "PET_NODE_RANK {ctx}");
            assert_eq!(p[2], p0[3], "PET_MASTER_ADDR:PORT {ctx}");
            assert_eq!(p[3], p0[3], "PET_RDZV_ENDPOINT {ctx}");
            assert_eq!(p[4], p[6], "PET_RDZV_ID is JOB.STEP {ctx}");
            assert_eq!(p[4], p0[4], "one rendezvous id {ctx}");
            assert_eq!(p[5], "static", "PET_RDZV_BACKEND {ctx}");
            assert_eq!(p[7], p0[3], "MASTER_ADDR:MASTER_PORT {ctx}");
        }
        (host.to_string(), port)
    }
}

/// torchrun with no rendezvous argument, one per node, rank 0 on node3 (the
/// node list's last): one training of 3 × 2 workers. Worker ranks follow
/// Slurm's: launcher k (node rank k) runs workers 2k and 2k+1, on its host.
#[test]
fn torchrun_one_training_over_all_nodes() {
    let _t = testbed();
    let job = sbatch("torchrun.sbatch", 3);
    let weights = job.assert_trained(3, 6);
    assert_eq!(
        job.run.hosts(),
        ["node3", "node1", "node2"],
        "the host file"
    );
    let (host, port) = job.assert_pet();
    for (rank, r) in &job.result {
        let group = rank / 2;
        let launcher = &job.run.tasks[group as usize];
        let ctx = format!("worker {rank}: {r}");
        assert_eq!(r["host"], launcher.host.as_str(), "{ctx}");
        assert_eq!(r["group_rank"], group.to_string(), "{ctx}");
        assert_eq!(r["local_rank"], (rank % 2).to_string(), "{ctx}");
        assert_eq!(r["group_world_size"], "3", "{ctx}");
        assert_eq!(r["master_addr"], host.as_str(), "{ctx}");
        assert_eq!(r["master_port"], port.to_string(), "{ctx}");
    }
    eprintln!("torchrun 3 x 2 on {host}:{port}: weights {weights}");
}

/// Lightning and Accelerate are in the image's /opt/pt on trixie and forky
/// (bookworm's torch 1.13 is too old for them); tests/where.tsv runs their
/// tests on trixie (forky trains them through the templates).
fn assert_pt() {
    let suite = std::env::var("TFC_SUITE").unwrap_or_else(|_| "bookworm".into());
    assert!(
        exec(&["test", "-x", "/opt/pt/bin/python"]).status.success(),
        "no /opt/pt on {suite}: Lightning and Accelerate need torch >= 2.1 (trixie, forky)"
    );
}

/// Lightning's SLURMEnvironment with rank 0 on node3 and ranks interleaved
/// over the nodes: it takes MASTER_ADDR/MASTER_PORT from the plugin (rank 0's
/// host, a reserved port), where on its own it would take the node list's
/// first host, node1.
#[test]
fn lightning_slurm_environment() {
    let _t = testbed();
    assert_pt();
    let job = sbatch("lightning.sbatch", 6);
    let weights = job.assert_trained(6, 6);
    assert_eq!(
        job.run.hosts(),
        ["node3", "node1", "node2", "node3", "node1", "node2"],
        "the host file"
    );
    let (host, port) = job.assert_pet();
    assert_eq!(host, "node3");
    for task in &job.run.tasks {
        let r = &job.result[&u64::from(task.rank)];
        let ctx = format!("rank {} on {}: {r}", task.rank, task.host);
        assert_eq!(r["environment"], "SLURMEnvironment", "{ctx}");
        assert_eq!(r["host"], task.host.as_str(), "{ctx}");
        assert_eq!(r["main_address"], "node3", "{ctx}");
        assert_eq!(r["main_port"], port, "{ctx}");
        assert_eq!(r["steps"], 30, "{ctx}");
    }
    eprintln!("lightning 6 ranks on {host}:{port}: weights {weights}");
}

/// `accelerate launch` per node as Accelerate's Slurm example runs it, its
/// main process address and port the plugin's: one training of 3 × 2.
#[test]
fn accelerate_launch_per_node() {
    let _t = testbed();
    assert_pt();
    let job = sbatch("accelerate.sbatch", 3);
    let weights = job.assert_trained(3, 6);
    assert_eq!(
        job.run.hosts(),
        ["node3", "node1", "node2"],
        "the host file"
    );
    let (host, port) = job.assert_pet();
    let hosts: Vec<&str> = job.run.hosts();
    for (rank, r) in &job.result {
        let ctx = format!("process {rank}: {r}");
        assert_eq!(r["distributed_type"], "DistributedType.MULTI_CPU", "{ctx}");
        assert!(hosts.contains(&r["host"].as_str().unwrap()), "{ctx}");
    }
    // Two processes on every node.
    for h in &hosts {
        let n = job.result.values().filter(|r| r["host"] == *h).count();
        assert_eq!(n, 2, "{h}: {:?}", job.result);
    }
    eprintln!("accelerate 3 x 2, rendezvous {host}:{port}: weights {weights}");
}
