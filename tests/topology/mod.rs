#![allow(dead_code)] // Shared by the topology test binaries, each using a part.

//! What the topology test binaries (tests/testbed_topology_*) share: the
//! testbed's Slurm version and one plain-`srun` case checked against the
//! placement Slurm really chose.

use crate::common::{exec, srun, wait_all_idle};

/// Slurm's major.minor on the testbed, from `srun --version` (`slurm-wlm 26.05.5`).
pub fn slurm_version() -> (u32, u32) {
    let out = exec(&["srun", "--version"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let version = text.split_whitespace().last().unwrap_or_default();
    let mut parts = version.split('.').map(|p| p.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor),
        _ => panic!("srun --version said {text:?}"),
    }
}

/// `srun ARGS` without `--tf-cluster` places its ranks on `hosts` (by rank),
/// and the same step with `spec` gives every task the TF_CONFIG of that real
/// placement for `roles` (ports from 8888: no reserved ports, the port base
/// given: the ports are not what these tests test).
pub fn assert_case(args: &[&str], spec: &str, roles: &[(&str, u32)], hosts: &[&str]) {
    let n = roles.iter().map(|r| r.1).sum();
    let mut args = args.to_vec();
    args.push("--resv-ports=0");
    // Slurm passes over a node still completing the last step's job.
    wait_all_idle();
    let plain = srun(&args);
    plain.assert_ran(n);
    assert_eq!(plain.hosts(), hosts, "Slurm's placement of srun {args:?}");
    // The port base only with the framework option (alone, srun refuses it).
    args.extend(["--tf-port-base=8888", spec]);
    wait_all_idle();
    let run = srun(&args);
    run.assert_ran(n).assert_tf_config(roles, 8888);
    assert_eq!(run.hosts(), hosts, "srun {args:?} ran elsewhere");
}

/// One test at a time in a topology binary: Slurm picks the nodes of an
/// `-N2` step by load too, so a step running beside another could land
/// elsewhere than the placement measured on an otherwise idle testbed.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}
