//! The largest steps through the CLI twin, as a user checks one: 131,072
//! PyTorch and JAX ranks on 16,384 nodes get their variables; TensorFlow is
//! refused past what TF_CONFIG can hold, and every framework past what the
//! plugin lays out, each with its own one line.

mod hermetic;

use std::process::Output;

use serde_json::Value;
use tf_cluster_core::handoff::{Handoff, Verdict};
use tf_cluster_core::hostlist::HostList;
use tf_cluster_core::runs::Runs;
use tf_cluster_core::task_map::TaskMap;

/// Rank `rank` of a block step, 8 ranks per node, with srun's map.
fn step(tasks: u32, nodes: u32, rank: u32) -> Vec<(&'static str, String)> {
    let per = tasks / nodes;
    let node = rank / per;
    let list = format!("gpu[00001-{nodes:05}]");
    vec![
        ("SLURM_JOB_ID", "77".into()),
        ("SLURM_STEP_ID", "3".into()),
        ("SLURM_PROCID", rank.to_string()),
        ("SLURM_STEP_NUM_TASKS", tasks.to_string()),
        ("SLURM_STEP_NODELIST", list.clone()),
        ("SLURM_STEP_TASKS_PER_NODE", format!("{per}(x{nodes})")),
        ("SLURMD_NODENAME", format!("gpu{:05}", node + 1)),
        (
            "SLURM_GTIDS",
            (node * per..node * per + per)
                .map(|r| r.to_string())
                .collect::<Vec<_>>()
                .join(","),
        ),
        ("SLURM_STEP_RESV_PORTS", "20000-20009".into()),
        ("SLURM_TF_CLUSTER", word(&list, nodes, per)),
    ]
}

/// srun's word on step 77.3: its map of `per` ranks on each of `nodes`
/// nodes `list`, in block order. A step past what the plugin lays out has
/// no map its encoder makes (srun refuses the step): that word is spelt by
/// hand, as a hostile environment would hand it.
fn word(list: &str, nodes: u32, per: u32) -> String {
    let runs = format!("0-{}*{per}", nodes - 1);
    let n = nodes as usize;
    let map = HostList::parse(list, n)
        .and_then(|hosts| TaskMap::from_runs(77, 3, hosts, Runs::parse(&runs, n)?));
    let Ok(map) = map else {
        return format!("1;77.3;hosts={list};runs={runs}");
    };
    let verdict = Verdict::Map {
        map,
        hosts: list.to_string(),
    };
    Handoff::new(77, 3, verdict).encode()
}

fn cli(option: &str, env: &[(&str, String)]) -> Output {
    hermetic::tf_cluster()
        .args(["env", option])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap()
}

#[test]
fn pytorch_and_jax_at_131072_ranks() {
    let rank = 100_005;
    let env = step(131_072, 16_384, rank);
    let out = cli("--torch-cluster", &env);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let vars: Value = serde_json::from_slice(&out.stdout).unwrap();
    for (name, want) in [
        ("RANK", "100005"),
        ("WORLD_SIZE", "131072"),
        ("LOCAL_RANK", "5"),
        ("LOCAL_WORLD_SIZE", "8"),
        ("GROUP_RANK", "12500"),
        ("GROUP_WORLD_SIZE", "16384"),
        ("MASTER_ADDR", "gpu00001"),
        ("MASTER_PORT", "20000"),
        ("PET_NODE_RANK", "100005"),
        ("PET_RDZV_ID", "77.3"),
    ] {
        assert_eq!(vars[name], want, "{name}");
    }
    assert!(vars.get("TF_CONFIG").is_none());
    let out = cli("--jax-cluster", &env);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let vars: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(vars["JAX_COORDINATOR_ADDRESS"], "gpu00001:20000");
}

#[test]
fn each_framework_refused_past_its_own_limit() {
    let one_line = |out: &Output, want: &str| {
        assert_eq!(out.status.code(), Some(1));
        assert!(out.stdout.is_empty());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(want), "{err}");
    };
    // TF_CONFIG cannot hold 32,768 addresses.
    let env = step(32_768, 4_096, 7);
    one_line(
        &cli("--tf-cluster", &env),
        "the step has 32768 tasks; TF_CONFIG for more than 21845 cannot fit in one environment variable",
    );
    assert!(cli("--torch-cluster", &env).status.success());
    // One rank past what any task lays out.
    let env = step(262_152, 32_769, 0);
    for option in ["--torch-cluster", "--jax-cluster", "--tf-cluster"] {
        one_line(&cli(option, &env), "tf-cluster lays out at most");
    }
}

/// A preview of the largest arbitrary step, as a user checks one: rank r on
/// host n<r> of 65,536, every rank its own node; and the refusal of more
/// nodes than the plugin lays out, in one line. (The time is in
/// BENCHMARKS.md: the work is linear in the hosts.)
#[test]
fn an_arbitrary_preview_of_65536_hosts() {
    let preview = |args: &[&str]| {
        hermetic::tf_cluster()
            .args(["env", "--torch-cluster", "-m", "arbitrary"])
            .args(args)
            .output()
            .unwrap()
    };
    let out = preview(&["-w", "n[0-65535]", "-n", "65536", "--rank", "65535"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let vars: Value = serde_json::from_slice(&out.stdout).unwrap();
    for (name, want) in [
        ("RANK", "65535"),
        ("WORLD_SIZE", "65536"),
        ("LOCAL_RANK", "0"),
        ("GROUP_RANK", "65535"),
        ("GROUP_WORLD_SIZE", "65536"),
        ("MASTER_ADDR", "n0"),
    ] {
        assert_eq!(vars[name], want, "{name}");
    }
    let out = preview(&["-w", "n[0-65536]"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("the step has 65537 nodes; tf-cluster lays out at most 65536"),
        "{err}"
    );
}
