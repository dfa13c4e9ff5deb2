//! srun's `--export` and the user's interface variables, on the testbed
//! (eth0: Slurm's names; eth1: the second network, docker/testbed.sh).
//! NCCL_SOCKET_IFNAME set in srun's environment is the user's only where
//! the tasks receive it: `--export=NONE` (the tasks get only SLURM_*
//! variables) and `--export=HOME` keep it from them, so the plugin sets it;
//! a plain export or `--export=NAME=VALUE` gives it to them, so it is kept.

use crate::common;

use common::testbed;

/// What each task prints: its rank and its three interface variables.
const SHOW: &str = r#"echo "IF $SLURM_PROCID ${NCCL_SOCKET_IFNAME-<unset>} ${GLOO_SOCKET_IFNAME-<unset>} ${TP_SOCKET_IFNAME-<unset>}""#;

/// `env NCCL_SOCKET_IFNAME==eth0 srun EXPORT -N2 -n2 --torch-cluster
/// --tf-network=eth1 /bin/bash -c SHOW`: each task's (NCCL, GLOO, TP).
fn step(export: Option<&str>) -> Vec<(String, String, String)> {
    let mut cmd = vec![];
    cmd.extend(export);
    cmd.extend([
        "-N2",
        "-n2",
        "--torch-cluster",
        "--tf-network=eth1",
        // An absolute path: under --export=NONE the task has no PATH.
        "/bin/bash",
        "-c",
        SHOW,
    ]);
    // Each task's lines from its own file.
    let out = common::srun_tasks_env(&["NCCL_SOCKET_IFNAME==eth0"], &cmd);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{export:?}: {stderr}");
    let mut tasks: Vec<(u32, (String, String, String))> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("IF "))
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            assert_eq!(f.len(), 4, "{l:?}");
            (
                f[0].parse().unwrap(),
                (f[1].to_string(), f[2].to_string(), f[3].to_string()),
            )
        })
        .collect();
    tasks.sort();
    let ranks: Vec<u32> = tasks.iter().map(|t| t.0).collect();
    assert_eq!(ranks, [0, 1], "{export:?}: {stdout}{stderr}");
    tasks.into_iter().map(|t| t.1).collect()
}

#[test]
fn nccl_socket_ifname_is_the_users_only_where_the_tasks_receive_it() {
    let _t = testbed();
    // NCCL's value names exactly the interface (`=eth1`); gloo's and
    // TensorPipe's the bare name (docs/frameworks.md).
    let plugins = ("=eth1".to_string(), "eth1".to_string(), "eth1".to_string());
    let users = ("=eth0".to_string(), "eth1".to_string(), "eth1".to_string());
    for export in ["--export=NONE", "--export=HOME"] {
        for task in step(Some(export)) {
            assert_eq!(
                task, plugins,
                "{export}: srun's own value never reached the task"
            );
        }
    }
    // Plain export: every task inherits the user's value, kept as it is.
    for task in step(None) {
        assert_eq!(task, users, "plain export");
    }
    // The value given on srun's line is the user's too.
    for task in step(Some("--export=NCCL_SOCKET_IFNAME==eth0")) {
        assert_eq!(task, users, "--export=NCCL_SOCKET_IFNAME==eth0");
    }
    common::assert_no_node_drained();
}
