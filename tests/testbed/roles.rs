//! Roles in one step (`--tf-roles`) on real srun steps: every task's world
//! in its role, the step-wide world, the address book, its own ports and
//! the engines' variables, each expected value derived from where Slurm ran
//! the tasks and the ports it reserved (the order docs/user-guide.md gives:
//! PyTorch's port, one per role, then each local task's K), never from the
//! plugin's output; and what srun refuses.

use crate::common;

use std::collections::BTreeMap;

use common::{reserved_ports, srun_tasks_env, testbed};
use serde_json::Value;

/// Each task prints Slurm's facts and what it was given, as one JSON line.
const SHOW: &str = r#"
import json, os, socket
names = ["SLURM_PROCID", "SLURM_LOCALID", "SLURM_STEP_RESV_PORTS", "TF_CLUSTER_ROLE",
         "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
         "TF_CLUSTER_STEP_RANK", "TF_CLUSTER_STEP_WORLD_SIZE", "TF_CLUSTER_STEP_MASTER_ADDR",
         "TF_CLUSTER_STEP_MASTER_PORT", "TF_CLUSTER_ROLE_TRAINER_ADDRS",
         "TF_CLUSTER_ROLE_ROLLOUT_ADDRS", "TF_CLUSTER_PORTS", "VLLM_HOST_IP", "SGLANG_HOST_IP",
         "VLLM_PORT"]
out = {n: os.environ.get(n) for n in names}
out["host"] = socket.gethostname()
out["ip"] = socket.gethostbyname(out["host"])
print("ROLEVARS " + json.dumps(out), flush=True)
"#;

/// The tasks of one step, by rank.
fn run(vars: &[&str], args: &[&str]) -> (std::process::Output, BTreeMap<u32, Value>) {
    let mut full = args.to_vec();
    full.extend(["python3", "-c", SHOW]);
    let out = srun_tasks_env(vars, &full);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let tasks = text
        .lines()
        .filter_map(|l| l.strip_prefix("ROLEVARS "))
        .map(|j| serde_json::from_str::<Value>(j).unwrap())
        .map(|v| (v["SLURM_PROCID"].as_str().unwrap().parse().unwrap(), v))
        .collect();
    (out, tasks)
}

fn s(v: &Value, name: &str) -> String {
    v[name].as_str().unwrap_or("<unset>").to_string()
}

/// `srun -N3 --ntasks-per-node=2 -m cyclic --resv-ports=11 --torch-cluster
/// --tf-roles=trainer:4,rollout:2`, with the user's own VLLM_PORT: each of
/// the 6 tasks gets its role's world, the step's, both roles' addresses,
/// its 4 own ports, the node's address for the engines and keeps the
/// user's VLLM_PORT.
#[test]
fn every_task_gets_its_roles_world() {
    let _t = testbed();
    let args = [
        "-N3",
        "--ntasks-per-node=2",
        "-m",
        "cyclic",
        "--resv-ports=11",
        "--torch-cluster",
        "--tf-roles=trainer:4,rollout:2",
    ];
    let (out, tasks) = run(&[], &args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(tasks.len(), 6, "{err}");
    let first = |rank: u32| if rank < 4 { 0 } else { 4 };
    let role = |rank: u32| if rank < 4 { "trainer" } else { "rollout" };
    let host = |rank: u32| s(&tasks[&rank], "host");
    let local = |rank: u32| s(&tasks[&rank], "SLURM_LOCALID").parse::<usize>().unwrap();
    let ports = |rank: u32| reserved_ports(&s(&tasks[&rank], "SLURM_STEP_RESV_PORTS"));
    // Ports in the documented order: PyTorch's own (the step-wide one), the
    // trainers', the rollout servers', then 4 per local task.
    let own = |rank: u32| ports(rank)[3 + 4 * local(rank)..3 + 4 * local(rank) + 4].to_vec();
    let book = |lo: u32, hi: u32| {
        (lo..hi)
            .map(|r| format!("{}:{}", host(r), own(r)[0]))
            .collect::<Vec<_>>()
            .join(",")
    };
    for (&rank, v) in &tasks {
        let mates: Vec<u32> = (first(rank)..)
            .take(if rank < 4 { 4 } else { 2 })
            .filter(|&r| host(r) == host(rank))
            .collect();
        let p = ports(rank);
        let want = [
            ("TF_CLUSTER_ROLE", role(rank).to_string()),
            ("RANK", (rank - first(rank)).to_string()),
            ("WORLD_SIZE", if rank < 4 { "4" } else { "2" }.to_string()),
            (
                "LOCAL_RANK",
                mates.iter().filter(|&&r| r < rank).count().to_string(),
            ),
            ("LOCAL_WORLD_SIZE", mates.len().to_string()),
            ("MASTER_ADDR", host(first(rank))),
            ("MASTER_PORT", p[if rank < 4 { 1 } else { 2 }].to_string()),
            ("TF_CLUSTER_STEP_RANK", rank.to_string()),
            ("TF_CLUSTER_STEP_WORLD_SIZE", "6".to_string()),
            ("TF_CLUSTER_STEP_MASTER_ADDR", host(0)),
            ("TF_CLUSTER_STEP_MASTER_PORT", p[0].to_string()),
            ("TF_CLUSTER_ROLE_TRAINER_ADDRS", book(0, 4)),
            ("TF_CLUSTER_ROLE_ROLLOUT_ADDRS", book(4, 6)),
            (
                "TF_CLUSTER_PORTS",
                own(rank)
                    .iter()
                    .map(u16::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            ("VLLM_HOST_IP", s(v, "ip")),
            ("SGLANG_HOST_IP", s(v, "ip")),
            ("VLLM_PORT", own(rank)[1].to_string()),
        ];
        for (name, value) in want {
            assert_eq!(s(v, name), value, "rank {rank} {name}: {v}");
        }
    }
    // The user's own VLLM_PORT is kept.
    let (out, tasks) = run(&["VLLM_PORT=7777"], &args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        tasks.values().all(|v| s(v, "VLLM_PORT") == "7777"),
        "{tasks:?}"
    );
}

/// srun refuses, in one line and before any task runs: counts that do not
/// add up to the step, roles with TensorFlow, and a reservation too small
/// (naming the --resv-ports to ask for).
#[test]
fn roles_that_do_not_fit_are_refused_by_srun() {
    let _t = testbed();
    let cases: [(&[&str], &str); 3] = [
        (
            &[
                "-N3",
                "-n6",
                "--resv-ports=11",
                "--torch-cluster",
                "--tf-roles=trainer:4,rollout:1",
            ],
            "--tf-roles=trainer:4,rollout:1 asks for 5 tasks but the step has 6",
        ),
        (
            &[
                "-N1",
                "-n2",
                "--tf-cluster",
                "--torch-cluster",
                "--tf-roles=a:1,b:1",
            ],
            "TensorFlow",
        ),
        (
            &[
                "-N3",
                "--ntasks-per-node=2",
                "--resv-ports=10",
                "--torch-cluster",
                "--tf-roles=trainer:4,rollout:2",
            ],
            "ask for them with srun --resv-ports=11",
        ),
    ];
    for (args, why) in cases {
        let mut full = args.to_vec();
        full.extend(["bash", "-c", common::PROBE]);
        let run = common::parse_run(common::srun_tasks(&full));
        run.assert_refused(why);
    }
}

/// Where the GRPO-shaped training is put on the shared /home.
const DIR: &str = "/home/alice/roles-tests";

/// One job of a pair: its exit code and each task's RESULT, with its output
/// for failure messages.
struct Job {
    code: Option<i32>,
    results: Vec<Value>,
    output: String,
}

impl Job {
    /// Errors its tasks reported that say an address was in use.
    fn in_use(&self) -> usize {
        self.results
            .iter()
            .flat_map(|r| r["errors"].as_array().cloned().unwrap_or_default())
            .filter(|e| e.as_str().is_some_and(|e| e.starts_with("EADDRINUSE")))
            .count()
    }
}

/// Two GRPO-shaped jobs started at once on the same 3 nodes, their tasks
/// meeting before they bind anything; `extra`: the program's options.
fn grpo_pair(tag: &str, extra: &str) -> [Job; 2] {
    let meet = format!("{DIR}/meet-{tag}-{}", std::process::id());
    let run = |i: u32| {
        let outputs = common::outputs::Outputs::new(&format!("roles-{tag}-{i}"));
        let [out, err] = outputs.srun_args();
        let script = format!(
            "cd {DIR}; TFC_REPORT_DIR={} srun -N3 --ntasks-per-node=2 -m cyclic -w node[1-3] --resv-ports=11 \
             --kill-on-bad-exit=1 {out} {err} --torch-cluster --tf-roles=trainer:4,rollout:2 \
             python3 grpo.py --meet {meet} 12 {extra}",
            outputs.path()
        );
        std::thread::spawn(move || {
            let srun = common::exec_for(300, &["bash", "-c", &script]);
            Job {
                code: srun.status.code(),
                results: outputs.reports("RESULT"),
                output: format!(
                    "{}\n{}",
                    String::from_utf8_lossy(&srun.stderr),
                    outputs.dump()
                ),
            }
        })
    };
    let (a, b) = (run(0), run(1));
    [a.join().unwrap(), b.join().unwrap()]
}

/// GRPO's shape on the testbed, with stand-in rollout servers
/// (tests/fixtures/rl/grpo.py): 4 trainer ranks in gloo DDP over their own
/// world, 2 servers each serving "generate" on its first own port; trainer
/// rank 0 calls both through TF_CLUSTER_ROLE_ROLLOUT_ADDRS and checks each
/// answers with the weights of the step before; after each of the 3 steps
/// the weights go to the servers over a gloo group on the step-wide world,
/// and each server checks it got them whole and new. Two such jobs at once
/// on the same 3 nodes both train, with no address in use
/// (TFC_ROLES_PAIRS pairs, default 1). The control: the same jobs on TRL's
/// default ports (the server on 8000, the weight sync on 51216) collide.
#[test]
fn two_grpo_jobs_on_the_same_nodes_both_train() {
    let _t = testbed();
    common::install(
        DIR,
        &[
            ("grpo.py", include_str!("../fixtures/rl/grpo.py")),
            ("tfc_report.py", include_str!("../fixtures/tfc_report.py")),
        ],
        "",
    );
    let pairs: u32 = std::env::var("TFC_ROLES_PAIRS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    let mut in_use = 0;
    for i in 0..pairs {
        for job in grpo_pair(&format!("own{i}"), "") {
            in_use += job.in_use();
            assert_eq!(job.code, Some(0), "{}", job.output);
            assert_eq!(job.results.len(), 6, "{}", job.output);
            for r in &job.results {
                assert_eq!(r["errors"], serde_json::json!([]), "{}", job.output);
                match r["role"].as_str().unwrap() {
                    "rollout" => assert_eq!(r["synced"], 3, "{}", job.output),
                    _ if r["rank"] == 0 => {
                        // Both servers, before each of the 3 steps and after the last.
                        assert_eq!(r["checked"], 8, "{}", job.output)
                    }
                    _ => assert_eq!(r["steps"], 3, "{}", job.output),
                }
            }
        }
    }
    eprintln!("own ports: {pairs} pair(s), {in_use} address-in-use errors");
    assert_eq!(in_use, 0);
    let control = grpo_pair("fixed", "--fixed-ports");
    let failed = control.iter().filter(|j| j.code != Some(0)).count();
    let in_use: usize = control.iter().map(Job::in_use).sum();
    eprintln!("TRL's default ports: {failed} of 2 jobs failed, {in_use} address-in-use errors");
    assert!(
        failed >= 1 && in_use >= 1,
        "{}\n{}",
        control[0].output,
        control[1].output
    );
}

/// In a heterogeneous step (`salloc -N1 -n2 -w node1 : -N1 -n2 -w node2`,
/// `srun --het-group=0,1`), `--tf-roles=server,trainer` names its
/// components: node1's two tasks are the servers, node2's the trainers,
/// each role a world of 2, whichever component srun's word reaches.
#[test]
fn names_alone_are_a_heterogeneous_steps_components() {
    let _t = testbed();
    let outputs = common::outputs::Outputs::new("roles-het");
    let [out_mode, err_mode, _] = outputs.env();
    let show = r#"echo "ROLE $(hostname) ${TF_CLUSTER_ROLE-unset} ${RANK-unset} ${WORLD_SIZE-unset} ${MASTER_ADDR-unset} ${TF_CLUSTER_STEP_RANK-unset}""#;
    let script = format!(
        "srun --het-group=0,1 --resv-ports=11 --torch-cluster --tf-roles=server,trainer sh -c '{show}'; echo rc=$?"
    );
    let out = common::exec_for(
        240,
        &[
            "env", &out_mode, &err_mode, "salloc", "-N1", "-n2", "-w", "node1", ":", "-N1", "-n2",
            "-w", "node2", "sh", "-c", &script,
        ],
    );
    let text = format!(
        "{}{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        outputs.dump()
    );
    assert!(text.contains("rc=0"), "{text}");
    let mut lines: Vec<String> = text
        .lines()
        .filter_map(|l| l.split_once("ROLE ").map(|(_, r)| r.trim().to_string()))
        .collect();
    lines.sort();
    // host, role, RANK, WORLD_SIZE, MASTER_ADDR, TF_CLUSTER_STEP_RANK
    assert_eq!(
        lines,
        [
            "node1 server 0 2 node1 0",
            "node1 server 1 2 node1 1",
            "node2 trainer 0 2 node2 2",
            "node2 trainer 1 2 node2 3",
        ],
        "{text}"
    );
}
