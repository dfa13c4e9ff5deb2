//! Launchers that write their own sbatch script (docs/launchers.md): submitit
//! from PyPI, in a venv on the shared /home that sees the image's torch,
//! submits a function that calls `init_process_group("gloo")` with no
//! arguments on three nodes, turned on the two ways the docs give:
//! `additional_parameters={"torch_cluster": True}` (an `#SBATCH` line) and
//! `SLURM_SPANK__SLURM_SPANK_OPTION_tf_cluster_torch_cluster` exported from
//! `tf-cluster launcher-env` before submitting.
//!
//! Rank 0 is put on node3, not the node list's first host: the batch script's
//! srun gets `-m arbitrary` and a host file through BASH_ENV (submitit's script
//! is bash), the script itself as submitit writes it. Expected values come
//! from where each task reports it ran and from the same training run in one
//! process, never from the plugin.

use crate::common;

use std::sync::OnceLock;

use common::{exec, exec_for, reserved_ports, testbed};
use serde_json::Value;

const DIR: &str = "/home/alice/launchers-sbatch";
/// The venv with submitit; `--system-site-packages` for the image's torch.
const VENV: &str = "/home/alice/launchers-sbatch/venv";
const SUBMITIT: &str = "submitit==1.5.4";

fn install() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        common::install(
            DIR,
            &[(
                "submitit_ddp.py",
                include_str!("../fixtures/pytorch/submitit_ddp.py"),
            )],
            "printf 'node3\\nnode1\\nnode2\\n' > hostfile-3\n\
             echo \"export SLURM_DISTRIBUTION=arbitrary SLURM_HOSTFILE=$PWD/hostfile-3\" > node3-first.sh\n",
        );
        common::pip_venv(VENV, "python3", SUBMITIT, "import submitit, torch; print(submitit.__version__, torch.__version__)");
    });
}

/// Runs submitit_ddp.py on 3 nodes after `before` (shell), rank 0 on node3;
/// its JSON and everything it printed.
fn submit(before: &str, args: &str) -> (Value, String) {
    install();
    let script = format!(
        "set -e; cd {DIR}; {before}\n\
         BASH_ENV={DIR}/node3-first.sh {VENV}/bin/python submitit_ddp.py --nodes 3 --folder {DIR}/jobs/%j --timeout 240 {args}"
    );
    let out = exec_for(300, &["bash", "-c", &script]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let all = format!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{all}");
    let json = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON line:\n{all}"));
    (serde_json::from_str(json).unwrap(), all)
}

/// Every task trained one model, met at rank 0's host (node3) on a port Slurm
/// reserved for the step, and ended with the single-process checksum.
fn assert_trained(result: &Value, all: &str) {
    let tasks = result["tasks"].as_array().expect("tasks");
    assert_eq!(tasks.len(), 3, "{all}");
    let rank0 = tasks
        .iter()
        .find(|t| t["rank"] == 0)
        .unwrap_or_else(|| panic!("no rank 0: {all}"));
    let host0 = rank0["host"].as_str().unwrap();
    assert_eq!(host0, "node3", "the host file puts rank 0 on node3: {all}");
    let reference = result["reference"].as_f64().unwrap();
    let mut ranks: Vec<u64> = Vec::new();
    for t in tasks {
        let ctx = format!("{t}\n{all}");
        let seen = &t["seen"];
        ranks.push(t["rank"].as_u64().expect("rank"));
        assert_eq!(t["world_size"], 3, "{ctx}");
        assert_eq!(seen["RANK"], t["rank"].to_string().as_str(), "{ctx}");
        assert_eq!(seen["MASTER_ADDR"], host0, "{ctx}");
        let port: u16 = seen["MASTER_PORT"].as_str().unwrap().parse().unwrap();
        let reserved = reserved_ports(
            seen["SLURM_STEP_RESV_PORTS"]
                .as_str()
                .expect("reserved ports"),
        );
        assert!(reserved.contains(&port), "MASTER_PORT not reserved: {ctx}");
        let sum = t["checksum"].as_f64().unwrap();
        assert!(
            (sum - reference).abs() <= 1e-9 * reference.abs().max(1.0),
            "checksum {sum} vs one process's {reference}: {ctx}"
        );
    }
    ranks.sort();
    assert_eq!(ranks, [0, 1, 2], "{all}");
    eprintln!(
        "submitit: 3 tasks met at {host0}:{}, checksum {reference}",
        rank0["seen"]["MASTER_PORT"].as_str().unwrap()
    );
}

#[test]
fn submitit_additional_parameters_train() {
    let _t = testbed();
    let (result, all) = submit("", "");
    assert_trained(&result, &all);
    // submitit wrote the option as its own #SBATCH line.
    let job = result["job"].as_str().unwrap();
    let script = exec(&["cat", &format!("{DIR}/jobs/{job}/{job}_submission.sh")]);
    let script = String::from_utf8_lossy(&script.stdout);
    assert!(
        script.lines().any(|l| l == "#SBATCH --torch-cluster"),
        "{script}"
    );
}

#[test]
fn submitit_from_the_environment_trains() {
    let _t = testbed();
    // The names for this node's plugstack.conf, evaluated as the docs say.
    let (result, all) = submit(
        "out=$(tf-cluster launcher-env --torch-cluster); echo \"$out\"; eval \"$out\"",
        "--no-option",
    );
    assert!(
        all.contains("export SLURM_SPANK__SLURM_SPANK_OPTION_tf_cluster_torch_cluster=\n"),
        "{all}"
    );
    assert!(all.contains("(tf_cluster in /usr/lib/x86_64-linux-gnu/slurm-wlm/tf_cluster.so, loaded by /etc/slurm/plugstack.conf.d/"), "{all}");
    assert_trained(&result, &all);
}

/// The control: the same job with neither gets no variable from the plugin.
#[test]
fn submitit_without_the_option_gets_nothing() {
    let _t = testbed();
    let (result, all) = submit("", "--no-option");
    let tasks = result["tasks"].as_array().expect("tasks");
    assert_eq!(tasks.len(), 3, "{all}");
    for t in tasks {
        assert_eq!(t["seen"]["MASTER_ADDR"], Value::Null, "{t}\n{all}");
        assert_eq!(t["seen"]["RANK"], Value::Null, "{t}\n{all}");
    }
}

/// A framework option's value in the variable, as on the command line: empty
/// turns `--torch-cluster` on, `off` turns it off (the step runs without
/// its variables), any other value is refused in one line before launch.
#[test]
fn a_flags_value_is_checked_as_on_the_command_line() {
    let _t = testbed();
    let run = |value: &str| {
        let var = format!("SLURM_SPANK__SLURM_SPANK_OPTION_tf_cluster_torch_cluster={value}");
        // Each task's line from its own file.
        common::srun_tasks_env(
            &[&var],
            &[
                "-N2",
                "-n2",
                "bash",
                "-c",
                "echo \"rank=$RANK addr=$MASTER_ADDR\"",
            ],
        )
    };
    let lines = |out: &std::process::Output| {
        let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect();
        lines.sort();
        lines
    };
    let on = run("");
    assert!(on.status.success(), "{:?}", on);
    let seen = lines(&on);
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(seen[0].starts_with("rank=0 addr=node"), "{seen:?}");
    assert!(seen[1].starts_with("rank=1 addr=node"), "{seen:?}");
    let off = run("off");
    assert!(off.status.success(), "{:?}", off);
    assert_eq!(lines(&off), ["rank= addr=", "rank= addr="]);
    let bad = run("0");
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success(), "{stderr}");
    assert!(lines(&bad).is_empty(), "{:?}", lines(&bad));
    assert!(
        stderr.contains("tf-cluster: --torch-cluster=\"0\": use static, elastic, elastic:MIN or elastic:MIN:RESTARTS (or off)"),
        "{stderr}"
    );
}
