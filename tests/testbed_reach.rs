//! How far a user reaches with what they may type or export, on the real
//! testbed: a refused step must cost slurmctld a few RPCs per node whatever
//! its task count, an explicit srun option beats an inherited `--tf-off`,
//! and a hand-off variable the user exported is never obeyed. (An image's
//! reach is tested behind the container stand-in: tests/testbed_containers.rs.)

mod common;

use common::{Exclusive, assert_no_node_drained, exclusive, exec_for, on};

/// slurmctld's count of `REQUEST_CANCEL_JOB_STEP` RPCs (sdiag, as root).
fn cancel_rpcs() -> u64 {
    let out = on("ctl", &["sdiag"]);
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find(|l| l.trim_start().starts_with("REQUEST_CANCEL_JOB_STEP"))
        .map(|l| {
            let count = l.split("count:").nth(1).expect("count:");
            count.split_whitespace().next().unwrap().parse().unwrap()
        })
        .unwrap_or(0)
}

/// A refused step costs slurmctld at most 4 RPCs per node, whatever its
/// task count: `srun -N3 -nN --overcommit --tf-cluster --tf-network=nope0`
/// is refused by every task (no node has that interface) at 48, 96 and 144
/// tasks. Each node's slurmstepd sends the kill for all of its tasks (once,
/// then once more): 3 nodes × 2. (Every refusing task once sent two: 97 RPCs
/// at 48 tasks, 289 at 144.)
#[test]
fn a_refused_step_costs_slurmctld_a_few_rpcs_per_node() {
    let _bed: Exclusive = exclusive();
    for tasks in [48, 96, 144] {
        let before = cancel_rpcs();
        let n = format!("-n{tasks}");
        let out = exec_for(
            180,
            &[
                "srun",
                "-N3",
                &n,
                "--overcommit",
                "--tf-cluster",
                "--tf-network=nope0",
                "true",
            ],
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{stderr}");
        assert!(stderr.contains("nope0"), "{stderr}");
        // The kills are sent 1 s and 2 s after the refusals.
        std::thread::sleep(std::time::Duration::from_secs(3));
        let rpcs = cancel_rpcs() - before;
        eprintln!("MEASURED {tasks} refusing tasks on 3 nodes: {rpcs} REQUEST_CANCEL_JOB_STEP");
        assert!(rpcs <= 12, "{tasks} tasks: {rpcs} cancel RPCs\n{stderr}");
    }
    assert_no_node_drained();
}

/// What each task saw: `VARS TF=… MA=…`.
const VARS: &str = r#"echo "VARS TF=${TF_CONFIG+set} MA=${MASTER_ADDR-unset} MP=${MASTER_PORT-unset} STEP=$SLURM_STEP_ID PORTS=${SLURM_STEP_RESV_PORTS-none}""#;

/// `VARS` lines of a run's output.
fn vars(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.split_once("VARS ").map(|(_, r)| r.to_string()))
        .collect()
}

/// A batch job's output (`sbatch --wait ARGS --wrap SCRIPT`).
fn batch(args: &[&str], script: &str) -> String {
    let file = format!("/home/alice/reach-{}.out", std::process::id());
    let mut cmd = vec!["sbatch", "--wait", "-o", file.as_str()];
    cmd.extend_from_slice(args);
    cmd.extend_from_slice(&["--wrap", script]);
    let submitted = exec_for(300, &cmd);
    let text = String::from_utf8_lossy(&exec_for(60, &["cat", file.as_str()]).stdout).into_owned();
    exec_for(60, &["rm", "-f", file.as_str()]);
    format!("{}{text}", String::from_utf8_lossy(&submitted.stderr))
}

/// An explicit srun option beats an inherited `--tf-off`: `sbatch --tf-off`
/// then `srun --tf-cluster` / `srun --torch-cluster` inside sets their
/// variables; the same with the option's variable exported; a plain `srun`
/// in the `--tf-off` job and an explicit `srun --tf-off` get nothing.
/// (An inherited --tf-off once silently won.)
#[test]
fn an_explicit_srun_option_beats_an_inherited_tf_off() {
    let _bed = common::testbed();
    let script = format!(
        "srun -N1 -n1 --tf-cluster sh -c '{VARS}'; srun -N1 -n1 --torch-cluster sh -c '{VARS}'; srun -N1 -n1 sh -c '{VARS}'"
    );
    let text = batch(&["-N1", "--tf-off", "--tf-cluster"], &script);
    let seen = vars(&text);
    assert_eq!(seen.len(), 3, "{text}");
    assert!(
        seen[0].starts_with("TF=set "),
        "explicit --tf-cluster: {text}"
    );
    assert!(
        !seen[1].contains("MA=unset"),
        "explicit --torch-cluster: {text}"
    );
    assert!(
        seen[2].starts_with("TF= MA=unset"),
        "nothing explicit: {text}"
    );

    let exported = exec_for(
        120,
        &[
            "env",
            "SLURM_SPANK__SLURM_SPANK_OPTION_tf_cluster_tf_off=(null)",
            "srun",
            "-N1",
            "-n1",
            "--tf-cluster",
            "sh",
            "-c",
            VARS,
        ],
    );
    let text = String::from_utf8_lossy(&exported.stdout);
    assert_eq!(vars(&text).len(), 1, "{text}");
    assert!(
        vars(&text)[0].starts_with("TF=set "),
        "exported --tf-off: {text}"
    );

    let off = exec_for(
        120,
        &[
            "srun",
            "-N1",
            "-n1",
            "--tf-cluster",
            "--tf-off",
            "sh",
            "-c",
            VARS,
        ],
    );
    let text = String::from_utf8_lossy(&off.stdout);
    assert!(
        vars(&text)[0].starts_with("TF= MA=unset"),
        "explicit --tf-off: {text}"
    );
    assert_no_node_drained();
}

/// A hand-off the user exported for the next step is not obeyed: in an
/// allocation, `SLURM_TF_CLUSTER="1;$SLURM_JOB_ID.0;verdict=none;no-resv-ports"` then
/// `srun --torch-cluster` (step 0) still takes MASTER_PORT from the ports
/// Slurm reserved for the step, and `…;leave-out=2` (PyTorch's bit) does not drop
/// an explicit --torch-cluster. (srun once left such a value to its tasks.)
#[test]
fn a_hand_off_the_user_exported_is_not_obeyed() {
    let _bed = common::testbed();
    for forged in ["no-resv-ports", "leave-out=2"] {
        let script = format!(
            "export SLURM_TF_CLUSTER=\"1;$SLURM_JOB_ID.0;verdict=none;{forged}\"; srun -N1 -n1 --torch-cluster sh -c '{VARS}'"
        );
        let out = exec_for(180, &["salloc", "-N1", "sh", "-c", &script]);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let seen = vars(&text);
        assert_eq!(seen.len(), 1, "{forged}: {text}");
        let field = |name: &str| -> String {
            seen[0]
                .split_whitespace()
                .find_map(|f| f.strip_prefix(name))
                .unwrap_or_else(|| panic!("{name} in {}", seen[0]))
                .to_string()
        };
        assert_eq!(
            field("STEP="),
            "0",
            "the forged word named this step: {text}"
        );
        let ports = field("PORTS=");
        assert_ne!(ports, "none", "MpiParams reserves ports: {text}");
        let reserved = common::reserved_ports(&ports);
        let port: u16 = field("MP=")
            .parse()
            .unwrap_or_else(|_| panic!("{forged}: {text}"));
        assert!(
            reserved.contains(&port),
            "{forged}: MASTER_PORT {port} not in {ports}\n{text}"
        );
        assert_ne!(field("MA="), "unset", "{forged}: {text}");
    }
    assert_no_node_drained();
}

/// What each task of a heterogeneous step saw: `HET RANK=… NCCL=…`.
const HET: &str = r#"echo "HET RANK=${RANK-unset} NCCL=${NCCL_SOCKET_IFNAME-unset}""#;

/// A heterogeneous step's later components never get srun's hand-off
/// (Slurm passes srun's variables to the first component only), so what
/// they hold is the user's or an outer step's: never read. In a
/// heterogeneous allocation, a hand-off exported for component 1's job id
/// (`verdict=skip`, or `net=lo`) neither drops that component's variables
/// nor names its interface. (Component 1 once obeyed such a value: issue
/// 34, item 6.)
#[test]
fn a_later_het_component_reads_no_hand_off_the_user_exported() {
    let _bed = common::testbed();
    for forged in ["verdict=skip", "verdict=none;net=lo"] {
        let script = format!(
            "export SLURM_TF_CLUSTER=\"1;$((SLURM_JOB_ID+1)).0;{forged}\"; srun -n1 -w node1 : -n1 -w node2 --torch-cluster --tf-network=eth0 sh -c '{HET}'"
        );
        let out = exec_for(
            180,
            &[
                "salloc", "-N1", "-n1", "-w", "node1", ":", "-N1", "-n1", "-w", "node2", "sh",
                "-c", &script,
            ],
        );
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let mut seen: Vec<&str> = text
            .lines()
            .filter_map(|l| l.split_once("HET ").map(|(_, r)| r))
            .collect();
        seen.sort();
        assert_eq!(
            seen,
            ["RANK=0 NCCL==eth0", "RANK=1 NCCL==eth0"],
            "{forged}: {text}"
        );
    }
    assert_no_node_drained();
}
