//! Real PyTorch and JAX clients on the testbed: Debian's python3-torch (system
//! python3) and jax[cpu] (the image's /opt/jax venv) start from the variables
//! `--torch-cluster` and `--jax-cluster` inject. The programs (tests/fixtures/pytorch,
//! tests/fixtures/jax) contain no cluster code: `init_process_group("gloo")` and
//! `jax.distributed.initialize()` with no arguments.
//!
//! Every task first prints the probe (common::PROBE: its Slurm rank, host,
//! local id and reserved ports) and a `NODE` line (SLURM_NODEID and whether
//! TORCHELASTIC_RUN_ID is set), so every expected value is derived from where
//! Slurm really ran each task, never from the plugin's output.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use common::outputs::Outputs;
use common::{PROBE, Run, Task, reserved_ports, testbed};
use serde_json::Value;

/// Where the programs are put on the shared /home.
const DIR: &str = "/home/alice/fw-tests";

const FILES: [(&str, &str); 4] = [
    ("ddp.py", include_str!("../fixtures/pytorch/ddp.py")),
    ("tfc_report.py", include_str!("../fixtures/tfc_report.py")),
    (
        "two-steps.sh",
        include_str!("../fixtures/pytorch/two-steps.sh"),
    ),
    ("allreduce.py", include_str!("../fixtures/jax/allreduce.py")),
];

/// Slurm's node index of the task and whether TORCHELASTIC_RUN_ID is set.
const NODE: &str = r#"printf 'NODE\t%s\t%s\n' "$SLURM_NODEID" "${TORCHELASTIC_RUN_ID+set}""#;

fn install() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        common::install(DIR, &FILES, "chmod 755 two-steps.sh\n");
    });
}

/// What one step's tasks printed, each task in a file of its own.
struct Step {
    run: Run,
    /// By rank: SLURM_NODEID.
    node_id: BTreeMap<u32, u32>,
    /// Ranks that saw TORCHELASTIC_RUN_ID.
    elastic_vars: Vec<u32>,
    /// By rank: the program's RESULT JSON.
    result: BTreeMap<u32, Value>,
    /// By rank: every line the task printed but the probe's.
    lines: BTreeMap<u32, Vec<String>>,
    output: String,
}

/// Reads each task's own output; `code` is the step's exit status, `context`
/// what else a failure should show (srun's stderr).
fn parse_step(outputs: &Outputs, code: Option<i32>, context: &str) -> Step {
    let labelled = outputs.labelled();
    let output = format!("{context}\n{}", outputs.dump());
    let mut node_id = BTreeMap::new();
    let mut elastic_vars = Vec::new();
    for (&rank, lines) in &labelled.lines {
        for rest in lines.iter().filter_map(|l| l.strip_prefix("NODE\t")) {
            let (id, elastic) = rest.split_once('\t').expect("NODE line");
            node_id.insert(rank, id.parse().expect("SLURM_NODEID"));
            if !elastic.is_empty() {
                elastic_vars.push(rank);
            }
        }
    }
    Step {
        run: labelled.run(code, output.clone()),
        node_id,
        elastic_vars,
        result: labelled.json("RESULT "),
        lines: labelled.lines,
        output,
    }
}

/// `srun SRUN_ARGS bash -c 'PROBE; NODE; cd DIR; exec PROGRAM'`, each task's
/// output in a file of its own.
fn step(srun_args: &[&str], program: &str) -> Step {
    install();
    let outputs = Outputs::new("fw-step");
    let task = format!("{PROBE}; {NODE}; cd {DIR}; exec {program}");
    // Longer than common::exec's 120 s: six Python processes importing torch
    // on a busy 2-core machine take a while (at a load average of 46, more
    // than five minutes); Slurm ends a hung step.
    let files = outputs.srun_args();
    let mut cmd = vec!["srun", "--kill-on-bad-exit=1", "--time=9"];
    cmd.extend(files.iter().map(String::as_str));
    cmd.extend_from_slice(srun_args);
    cmd.extend_from_slice(&["bash", "-c", &task]);
    let out = common::exec_for(600, &cmd);
    let srun_said = format!(
        "srun: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    parse_step(&outputs, out.status.code(), &srun_said)
}

/// Tasks per host, from Slurm's placement.
fn per_host(tasks: &[Task]) -> BTreeMap<&str, u32> {
    let mut n = BTreeMap::new();
    for t in tasks {
        *n.entry(t.host.as_str()).or_insert(0) += 1;
    }
    n
}

fn port_of(address: &str) -> u16 {
    address
        .rsplit_once(':')
        .expect("host:port")
        .1
        .parse()
        .expect("port")
}

impl Step {
    /// The step succeeded with ranks 0..n, each printing one RESULT.
    fn assert_ok(&self, n: u32) -> &Self {
        self.run.assert_ran(n);
        let ranks: Vec<u32> = self.result.keys().copied().collect();
        assert_eq!(
            ranks,
            (0..n).collect::<Vec<_>>(),
            "RESULT lines:\n{}",
            self.output
        );
        self
    }

    fn task(&self, rank: u32) -> &Task {
        &self.run.tasks[rank as usize]
    }

    /// The ports Slurm reserved for the step on rank `rank`'s node.
    fn reserved(&self, rank: u32) -> Vec<u16> {
        reserved_ports(
            self.task(rank)
                .resv_ports
                .as_deref()
                .expect("reserved ports"),
        )
    }

    /// Every rank of a DDP run saw the torchrun contract of Slurm's real
    /// placement and ended with the same weights; returns the MASTER_PORT.
    fn assert_ddp(&self) -> u16 {
        let n = self.run.tasks.len() as u32;
        let counts = per_host(&self.run.tasks);
        let rank0 = self.task(0);
        let master_port: u16 = self.result[&0]["master_port"]
            .as_str()
            .expect("MASTER_PORT")
            .parse()
            .unwrap();
        assert!(
            self.reserved(0).contains(&master_port),
            "MASTER_PORT {master_port} is not among the ports Slurm reserved for the step {:?}",
            self.reserved(0)
        );
        assert!(
            self.elastic_vars.is_empty(),
            "TORCHELASTIC_RUN_ID set on ranks {:?}",
            self.elastic_vars
        );
        let nodes: BTreeSet<u32> = self.node_id.values().copied().collect();
        assert_eq!(nodes.len(), counts.len(), "one SLURM_NODEID per host");
        // Group (node) index: nodes in the order of their first rank, as
        // torchrun numbers its agents (rank 0's node is group 0).
        let mut groups = BTreeMap::new();
        for t in &self.run.tasks {
            let next = groups.len();
            groups.entry(t.host.as_str()).or_insert(next);
        }
        let weights = &self.result[&0]["weights_sha256"];
        for task in &self.run.tasks {
            let r = &self.result[&task.rank];
            let ctx = format!("rank {} on {}: {r}", task.rank, task.host);
            let s = |v: String| Value::from(v);
            assert_eq!(r["rank"], task.rank, "{ctx}");
            assert_eq!(r["world_size"], n, "{ctx}");
            assert_eq!(r["host"], task.host.as_str(), "{ctx}");
            assert_eq!(
                r["master_addr"],
                rank0.host.as_str(),
                "{ctx}: MASTER_ADDR is rank 0's host"
            );
            assert_eq!(r["master_port"], s(master_port.to_string()), "{ctx}");
            assert_eq!(r["local_rank"], s(task.local.to_string()), "{ctx}");
            assert_eq!(
                r["local_world_size"],
                s(counts[task.host.as_str()].to_string()),
                "{ctx}"
            );
            assert_eq!(
                r["group_rank"],
                s(groups[task.host.as_str()].to_string()),
                "{ctx}"
            );
            assert_eq!(r["group_world_size"], s(counts.len().to_string()), "{ctx}");
            assert_eq!(
                &r["weights_sha256"], weights,
                "{ctx}: weights differ from rank 0's"
            );
            let (first, last) = (
                r["first_loss"].as_f64().unwrap(),
                r["last_loss"].as_f64().unwrap(),
            );
            assert!(last < first / 2.0, "{ctx}: the loss did not go down");
        }
        master_port
    }
}

/// (a) DDP with gloo across 3 nodes, 2 tasks each: the torchrun variables
/// match Slurm's placement and every rank ends with identical weights.
#[test]
fn pytorch_ddp_three_nodes_two_tasks_each() {
    let _t = testbed();
    let s = step(
        &["-N3", "--ntasks-per-node=2", "--torch-cluster"],
        "python3 ddp.py",
    );
    s.assert_ok(6);
    let counts = per_host(&s.run.tasks);
    assert_eq!(
        counts.values().copied().collect::<Vec<_>>(),
        [2, 2, 2],
        "{counts:?}"
    );
    s.assert_ddp();
}

/// (d) An uneven layout: 5 tasks on 3 nodes, so LOCAL_WORLD_SIZE differs
/// between nodes (tasks // nodes, as submitit computes it, would be wrong);
/// assert_ddp checks each task's value against its node's real task count.
#[test]
fn pytorch_ddp_uneven_layout() {
    let _t = testbed();
    let s = step(&["-N3", "-n5", "--torch-cluster"], "python3 ddp.py");
    s.assert_ok(5);
    // Slurm decides the split (26.05 puts 3, 1, 1 on 4-CPU nodes): any split
    // of 5 tasks over 3 nodes is uneven, which is what this test is about.
    let counts = per_host(&s.run.tasks);
    assert_eq!(counts.len(), 3, "Slurm's layout: {counts:?}");
    let sizes: BTreeSet<u32> = counts.values().copied().collect();
    assert!(sizes.len() > 1, "an even layout: {counts:?}");
    s.assert_ddp();
}

/// (b) JAX across 3 nodes: `jax.distributed.initialize()` with no arguments
/// uses the plugin's coordinator (rank 0's host, a reserved port), and the
/// cross-process reductions agree on every process.
#[test]
fn jax_allreduce_three_nodes() {
    let _t = testbed();
    let s = step(
        &["-N3", "--ntasks-per-node=2", "--jax-cluster"],
        "/opt/jax/bin/python allreduce.py",
    );
    s.assert_ok(6);
    let rank0 = s.task(0);
    let coordinator = s.result[&0]["coordinator"]
        .as_str()
        .expect("JAX_COORDINATOR_ADDRESS");
    assert_eq!(
        coordinator.rsplit_once(':').unwrap().0,
        rank0.host,
        "coordinator on rank 0's host"
    );
    assert!(
        s.reserved(0).contains(&port_of(coordinator)),
        "coordinator port not reserved: {coordinator}"
    );
    let n = s.run.tasks.len() as u32;
    // Process i contributes i + 1 from each of its (CPU) devices.
    let expected_gather: Vec<f64> = (0..n).map(|i| f64::from(i + 1)).collect();
    let expected_sum = f64::from(n * (n + 1) / 2);
    for task in &s.run.tasks {
        let r = &s.result[&task.rank];
        let ctx = format!("rank {} on {}: {r}", task.rank, task.host);
        assert_eq!(r["process"], task.rank, "{ctx}");
        assert_eq!(r["processes"], n, "{ctx}");
        assert_eq!(r["host"], task.host.as_str(), "{ctx}");
        assert_eq!(r["coordinator"], coordinator, "{ctx}");
        assert_eq!(r["local_devices"], 1, "{ctx}");
        assert_eq!(r["devices"], n, "{ctx}");
        assert_eq!(r["allgather"], serde_json::json!(expected_gather), "{ctx}");
        assert_eq!(r["sum"].as_f64(), Some(expected_sum), "{ctx}");
    }
}

/// A heterogeneous step whose rank 0 (first component, node3) is not on the
/// first node of SLURM_STEP_NODELIST (node[1-3] in every component): JAX's own
/// Slurm detection would put the coordinator on node1, with a port from each
/// component's own SLURM_JOB_ID, and hang. With `--jax-cluster` every process
/// meets rank 0's coordinator; SLURM_NTASKS and SLURM_PROCID, which JAX reads
/// itself, are the step's global ones.
#[test]
fn jax_allreduce_heterogeneous_step() {
    let _t = testbed();
    let s = step(
        &[
            "-n1",
            "-w",
            "node3",
            ":",
            "-N2",
            "-n3",
            "-w",
            "node1,node2",
            "--jax-cluster",
        ],
        "/opt/jax/bin/python allreduce.py",
    );
    s.assert_ok(4);
    assert_eq!(s.task(0).host, "node3", "rank 0 is the first component's");
    let coordinator = s.result[&0]["coordinator"]
        .as_str()
        .expect("JAX_COORDINATOR_ADDRESS");
    assert_eq!(coordinator.rsplit_once(':').unwrap().0, "node3");
    for task in &s.run.tasks {
        let r = &s.result[&task.rank];
        let ctx = format!("rank {} on {}: {r}", task.rank, task.host);
        assert_eq!(r["process"], task.rank, "{ctx}");
        assert_eq!(r["processes"], 4, "{ctx}");
        assert_eq!(r["coordinator"], coordinator, "{ctx}");
        assert_eq!(
            r["allgather"],
            serde_json::json!([1.0, 2.0, 3.0, 4.0]),
            "{ctx}"
        );
        assert_eq!(r["sum"].as_f64(), Some(10.0), "{ctx}");
    }
}

/// All three at once: one MASTER_ADDR:MASTER_PORT and one JAX coordinator for
/// the whole step, both on rank 0's host, with ports that differ from each
/// other and from every TF_CONFIG port on that host (rank 0 listens on all of
/// them there). Slurm reserves tasks-per-node + 1 ports by default, one short
/// of TF's two plus PyTorch's and JAX's (the plugin refuses that), so the step
/// asks for 4.
#[test]
fn torch_jax_and_tf_ports_are_distinct() {
    let _t = testbed();
    let vars = r#"printf 'PORTS\t%s\t%s\t%s\n' "${MASTER_ADDR-}:${MASTER_PORT-}" "${JAX_COORDINATOR_ADDRESS-}" "${RANK-}/${WORLD_SIZE-}""#;
    let s = step(
        &[
            "-N3",
            "--ntasks-per-node=2",
            "--resv-ports=4",
            "--tf-cluster=worker:6",
            "--torch-cluster",
            "--jax-cluster",
        ],
        &format!("bash -c '{}'", vars.replace('\'', r"'\''")),
    );
    s.run.assert_ran(6).assert_tf_config(&[("worker", 6)], 8888);
    let rank0 = s.task(0);
    let mut ports = BTreeMap::new();
    for (&rank, lines) in &s.lines {
        for rest in lines.iter().filter_map(|l| l.strip_prefix("PORTS\t")) {
            let f: Vec<&str> = rest.split('\t').collect();
            ports.insert(rank, (f[0].to_string(), f[1].to_string(), f[2].to_string()));
        }
    }
    assert_eq!(ports.len(), 6, "{}", s.output);
    // The TF ports that tasks on rank 0's host listen on.
    let tf_on_rank0_host: BTreeSet<u16> = s
        .run
        .tasks
        .iter()
        .filter(|t| t.host == rank0.host)
        .map(|t| {
            let tf = t.tf_config.as_ref().unwrap();
            port_of(tf["cluster"]["worker"][t.rank as usize].as_str().unwrap())
        })
        .collect();
    let (torch0, jax0, _) = &ports[&0];
    for task in &s.run.tasks {
        let (torch, jax, rank) = &ports[&task.rank];
        let ctx = format!("rank {} on {}", task.rank, task.host);
        assert_eq!(rank, &format!("{}/6", task.rank), "{ctx}");
        assert_eq!(
            (torch, jax),
            (torch0, jax0),
            "{ctx}: one rendezvous per step"
        );
    }
    assert_eq!(
        torch0.rsplit_once(':').unwrap().0,
        rank0.host,
        "MASTER_ADDR"
    );
    assert_eq!(
        jax0.rsplit_once(':').unwrap().0,
        rank0.host,
        "JAX coordinator"
    );
    let (tp, jp) = (port_of(torch0), port_of(jax0));
    assert_ne!(tp, jp, "MASTER_PORT and the JAX coordinator share a port");
    let reserved = s.reserved(0);
    assert!(
        reserved.contains(&tp) && reserved.contains(&jp),
        "torch {tp} / jax {jp} not among the reserved {reserved:?}"
    );
    assert!(
        !tf_on_rank0_host.contains(&tp) && !tf_on_rank0_host.contains(&jp),
        "torch {tp} / jax {jp} among the TF ports {tf_on_rank0_host:?} on {}",
        rank0.host
    );
}

/// Runs tests/fixtures/pytorch/two-steps.sh MODE in a 3-node allocation: steps A
/// and B, both one task on each of the same 3 nodes (the cost of the test is
/// the processes importing torch), B while A holds its port.
fn two_steps(mode: &str) -> (Step, Step, bool, u32) {
    install();
    let probe = format!("PROBE={PROBE}; {NODE}");
    let script = format!("{DIR}/two-steps.sh");
    let (outputs_a, outputs_b) = (Outputs::new("two-steps-a"), Outputs::new("two-steps-b"));
    let folder_a = format!("OUTPUTS_A={}", outputs_a.path());
    let folder_b = format!("OUTPUTS_B={}", outputs_b.path());
    let out = common::exec_for(
        480,
        &[
            "env",
            &probe,
            &folder_a,
            &folder_b,
            "salloc",
            "-N3",
            "--ntasks-per-node=1",
            "--time=8",
            &script,
            mode,
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "salloc: {stderr}\n{text}");
    let field = |key: &str| -> String {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("no {key} in:\n{text}\n{stderr}"))
            .to_string()
    };
    let rc = |k: &str| field(k).parse::<i32>().ok();
    let said = format!("salloc: {stderr}\n{text}");
    let a = parse_step(&outputs_a, rc("STEP A rc="), &said);
    let b = parse_step(&outputs_b, rc("STEP B rc="), &said);
    let alive = field("A_ALIVE_WHEN_B_ENDED=") == "1";
    let job = field("JOB=").parse().expect("job id");
    (a, b, alive, job)
}

/// (c) Two DDP steps at once on the same nodes both train: Slurm reserved
/// different ports for them, and the plugin's MASTER_PORT is one of each
/// step's own. With the job-id-derived port instead (Lightning's 15000 + the
/// job id's last 4 digits, forced in every task of both steps), the
/// second step's rank 0 cannot listen: address already in use.
#[test]
fn two_pytorch_steps_at_once_reserved_ports_vs_job_id_port() {
    let _t = testbed();

    let (a, b, alive, _) = two_steps("reserved");
    a.assert_ok(3);
    b.assert_ok(3);
    assert!(
        alive,
        "step A must still hold its port when B ends:\n{}",
        a.output
    );
    assert_eq!(
        a.run.hosts(),
        b.run.hosts(),
        "the same placement for both steps"
    );
    let (pa, pb) = (a.assert_ddp(), b.assert_ddp());
    assert_ne!(
        pa,
        pb,
        "both steps' rank 0 run on {} with one MASTER_PORT",
        a.task(0).host
    );
    assert!(
        !b.reserved(0).contains(&pa),
        "Slurm reserved A's port {pa} for B too"
    );

    let (a, b, alive, job) = two_steps("jobid");
    a.assert_ok(3);
    assert!(
        alive,
        "step A must still hold its port when B ends:\n{}",
        a.output
    );
    for (rank, r) in &a.result {
        let port = (15000 + job % 10000).to_string();
        assert_eq!(
            r["master_port"],
            Value::from(port),
            "rank {rank}: job {job}"
        );
        assert_eq!(
            r["weights_sha256"], a.result[&0]["weights_sha256"],
            "rank {rank}"
        );
    }
    assert_eq!(a.task(0).host, b.task(0).host, "both rank 0s on one node");
    assert_ne!(b.run.code, Some(0), "step B should fail:\n{}", b.output);
    assert!(b.result.is_empty(), "step B trained:\n{}", b.output);
    // The clash shows as B's store failing to bind (torch 2.x: "address
    // already in use") or, on torch 1.13, as B's ranks reaching A's store
    // and failing to connect to peers that are not theirs.
    let text = b.output.to_lowercase();
    assert!(
        text.contains("address already in use")
            || (text.contains("init_process_group") && text.contains("connection refused")),
        "step B should fail in its rendezvous on A's port:\n{}",
        b.output
    );
}
