//! Ray's variables: every port from the step, the step's token, and what
//! srun refuses before launch.

use std::collections::HashMap;

use crate::injection::Injection;
use crate::node::resolve;
use crate::settings::Settings;
use crate::step::Step;
use crate::test_support::{given, rebuild_word, vars_of};

use super::{Frameworks, pytorch, ray};

/// The secret srun drew for the Ray steps below: 32 bytes of token
/// (0x11…), then 8 of the private directory's name (0xa0-0xa7).
const RAY_SECRET: &str =
    "1111111111111111111111111111111111111111111111111111111111111111a0a1a2a3a4a5a6a7";

/// A task of `srun -N3 --ntasks-per-node=1 --ray-cluster
/// --tf-host-template={}-ib`, job 7 step 0, rank `rank` on n{rank+1}, with
/// the ports `resv` reserved by Slurm (None: no MpiParams=ports).
fn ray_task(rank: u32, resv: Option<&str>, job: &str) -> Injection {
    ray_task_on(rank, resv, job, ("host-template", "{}-ib"))
}

/// [`ray_task`] with the step's network named by `network` (a setting's
/// key and value) instead.
fn ray_task_on(rank: u32, resv: Option<&str>, job: &str, network: (&str, &str)) -> Injection {
    let node = rank.to_string();
    let mut vars: HashMap<&'static str, String> = [
        ("SLURM_PROCID", node.as_str()),
        ("SLURM_STEP_NUM_TASKS", "3"),
        ("SLURM_STEP_NODELIST", "n[1-3]"),
        ("SLURM_STEP_TASKS_PER_NODE", "1(x3)"),
        ("SLURM_NODEID", node.as_str()),
        ("SLURM_GTIDS", node.as_str()),
        ("SLURM_JOB_ID", job),
        ("SLURM_STEP_ID", "0"),
        (
            "SLURM_TF_CLUSTER",
            &rebuild_word(job.parse().unwrap(), "10.98.0.0/29", &[], Some(RAY_SECRET)),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k, v.to_string()))
    .collect();
    if let Some(r) = resv {
        vars.insert("SLURM_STEP_RESV_PORTS", r.to_string());
    }
    let mut settings = Settings {
        frameworks: Frameworks::only(&ray::FRAMEWORK),
        ..Settings::default()
    };
    settings.set(network.0, network.1).unwrap();
    let step = Step::gather(&settings, &mut given(vars))
        .unwrap()
        .step()
        .unwrap();
    resolve(&settings, &step).unwrap()
}

/// `--tf-network` (an interface or a subnet) puts every Ray node, the
/// head's included, at its own address on that network, as a host
/// template does: Ray's raylets and object managers, and so its objects
/// and tasks between nodes, go over it. Each node knows only its own
/// address there, so the GCS stays at the head's Slurm name, which every
/// node reaches (Ray's GCS listens on every address of the head).
#[test]
fn ray_nodes_are_on_the_network_the_step_names() {
    for network in ["ib0", "10.98.0.0/29"] {
        for rank in 0..3 {
            let task = ray_task_on(rank, Some("12000-12063"), "7", ("network", network));
            // test_support's node: ib0 at 10.98.0.2, eth0 at 172.18.0.2.
            assert_eq!(
                task.get("TF_CLUSTER_RAY_NODE"),
                Some("10.98.0.2"),
                "{network}"
            );
            assert_eq!(task.get("RAY_ADDRESS"), Some("n1:12000"), "{network}");
            assert_eq!(task.get("NCCL_SOCKET_IFNAME"), Some("=ib0"), "{network}");
        }
    }
}

/// Ray's ports, by `ray start`'s defaults, are fixed (GCS 6379, client
/// server 10001, dashboard 8265, dashboard agent 52365, workers
/// 10002-19999) or random: every Ray of a node would meet. Here every one
/// is the step's: 9 ports in `ray start`'s flags, then 55 for the workers;
/// the head at rank 0's address on the template's network.
#[test]
fn ray_takes_every_port_from_the_step() {
    let worker = ray_task(1, Some("12000-12063"), "7");
    assert_eq!(
        vars_of(&worker),
        [
            ("RAY_ADDRESS", "n1-ib:12000"),
            ("TF_CLUSTER_RAY_NODE", "n2-ib"),
            (
                "TF_CLUSTER_RAY_TEMP_DIR",
                "/tmp/tfc-ray-a0a1a2a3a4a5a6a7/ray"
            ),
            (
                "TF_CLUSTER_RAY_ARGS",
                "--node-manager-port=12001 --object-manager-port=12002 --runtime-env-agent-port=12003 --dashboard-agent-grpc-port=12004 --dashboard-agent-listen-port=12005 --metrics-export-port=12006 --min-worker-port=12009 --max-worker-port=12063 --temp-dir=/tmp/tfc-ray-a0a1a2a3a4a5a6a7/ray"
            ),
            ("RAY_AUTH_MODE", "token"),
            ("RAY_AUTH_TOKEN", &"1".repeat(64)),
            ("NCCL_SOCKET_IFNAME", "=ib0"),
            ("TF_CLUSTER_RUN_ID", "7.0"),
        ]
    );
    // The head's own ports on rank 0's node only.
    let head = ray_task(0, Some("12000-12063"), "7");
    assert_eq!(
        head.get("TF_CLUSTER_RAY_HEAD_ARGS"),
        Some("--port=12000 --ray-client-server-port=12007 --dashboard-port=12008")
    );
    assert_eq!(head.get("TF_CLUSTER_RAY_NODE"), Some("n1-ib"));
    // Reserved ports with a gap among the workers': a list (22 + 33).
    let gap = ray_task(2, Some("12000-12030,12100-12132"), "7");
    let args = gap.get("TF_CLUSTER_RAY_ARGS").unwrap();
    let list: Vec<String> = (12009..=12030)
        .chain(12100..=12132)
        .map(|p: u16| p.to_string())
        .collect();
    assert!(
        args.contains(&format!("--worker-port-list={} ", list.join(","))),
        "{args}"
    );
}

/// Every node's Ray and the driver run with Ray's token authentication on
/// and the step's own token, whatever the user exported (a token file of
/// theirs, RAY_AUTH_MODE=disabled); a step whose srun drew no secret (an
/// srun without the plugin) is refused rather than run without one.
#[test]
fn ray_runs_with_the_steps_token_or_not_at_all() {
    for rank in 0..3 {
        let task = ray_task(rank, Some("12000-12063"), "7");
        assert_eq!(task.get("RAY_AUTH_MODE"), Some("token"));
        assert_eq!(task.get("RAY_AUTH_TOKEN"), Some("1".repeat(64).as_str()));
    }
    let vars: HashMap<&'static str, String> = [
        ("SLURM_PROCID", "0"),
        ("SLURM_STEP_NUM_TASKS", "1"),
        ("SLURM_STEP_NODELIST", "n1"),
        ("SLURM_STEP_TASKS_PER_NODE", "1"),
        ("SLURM_NODEID", "0"),
        ("SLURM_GTIDS", "0"),
        ("SLURM_JOB_ID", "7"),
        ("SLURM_STEP_ID", "0"),
        ("SLURM_STEP_RESV_PORTS", "12000-12063"),
        ("RAY_AUTH_TOKEN", "mine"),
        ("RAY_AUTH_MODE", "disabled"),
    ]
    .into_iter()
    .map(|(k, v)| (k, v.to_string()))
    .collect();
    let settings = Settings {
        frameworks: Frameworks::only(&ray::FRAMEWORK),
        ..Settings::default()
    };
    let step = Step::gather(&settings, &mut given(vars))
        .unwrap()
        .step()
        .unwrap();
    let e = resolve(&settings, &step).unwrap_err().to_string();
    assert!(
        e.contains("--ray-cluster needs the step's secret from srun"),
        "{e}"
    );
}

/// Without a reservation, a Ray step takes a block of 64 ports (16 slots):
/// job 4242, step 0 of the default range 20000-29499 (2,375 slots, 148
/// blocks of 16 slots, multiplier 17, the first from 16 up sharing no
/// factor with 148): block 4242 × 17 mod 148 = 38, from port
/// 20000 + 38 × 64 = 22432 to 22495.
#[test]
fn ray_without_reserved_ports_takes_a_block_of_its_own() {
    let task = ray_task(0, None, "4242");
    assert_eq!(task.get("RAY_ADDRESS"), Some("n1-ib:22432"));
    assert_eq!(
        task.get("TF_CLUSTER_RAY_HEAD_ARGS"),
        Some("--port=22432 --ray-client-server-port=22439 --dashboard-port=22440")
    );
    let args = task.get("TF_CLUSTER_RAY_ARGS").unwrap();
    assert!(
        args.contains("--min-worker-port=22441 --max-worker-port=22495"),
        "{args}"
    );
}

/// What cannot work is refused by srun before launch, in one line: a
/// reservation smaller than Ray's 64 ports (65 with PyTorch's MASTER_PORT),
/// and several tasks on a node.
#[test]
fn ray_refusals_before_launch() {
    let ray_only = Settings {
        frameworks: Frameworks::only(&ray::FRAMEWORK),
        ..Settings::default()
    };
    let with_torch = Settings {
        frameworks: Frameworks::only(&pytorch::FRAMEWORK).with(&ray::FRAMEWORK),
        ..Settings::default()
    };
    let launch = |resv_ports, most_local| super::Launch {
        tasks: 3,
        nodelist: Some("node[1-3]"),
        nodes: Some(3),
        resv_ports,
        most_local: Some(most_local),
        ..super::Launch::default()
    };
    let check = |s: &Settings, l: &super::Launch| {
        super::check_before_launch(s, l).map_err(|e| e.to_string())
    };
    assert_eq!(
        check(&ray_only, &launch(Some("12000-12003"), 1)).unwrap_err(),
        "Slurm reserved 4 port(s) (12000-12003) for this step but it needs 64 on a node: ask for them with srun --resv-ports=64"
    );
    check(&ray_only, &launch(Some("12000-12063"), 1)).unwrap();
    check(&ray_only, &launch(None, 1)).unwrap();
    assert!(
        check(&with_torch, &launch(Some("12000-12063"), 1))
            .unwrap_err()
            .ends_with("srun --resv-ports=65")
    );
    assert_eq!(
        check(&ray_only, &launch(Some("12000-12999"), 2)).unwrap_err(),
        "--ray-cluster runs one Ray node per Slurm node, but the step has 2 tasks on a node: use --ntasks-per-node=1 (Ray starts each node's workers itself)"
    );
}
