//! The CLI as the tests run it: an empty environment, the tests' own Slurm
//! configuration (`SLURM_CONF` and the plugstack.conf beside it, in
//! fixtures/slurm/) and a `PATH` with no Slurm command on it. A machine with
//! its own Slurm installed and configured (MpiParams, the plugin enabled in
//! /etc/slurm) then gives the same results as one without. A test that needs
//! another configuration sets `SLURM_CONF` (or `PATH`) after this.

use std::path::PathBuf;
use std::process::Command;

/// The folder of the tests' own slurm.conf (no MpiParams, so Slurm reserves
/// no ports) and plugstack.conf (loads no plugin).
pub fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/slurm")
}

/// `tf-cluster` with nothing of this machine's Slurm in its environment.
pub fn tf_cluster() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tf-cluster"));
    cmd.env_clear()
        .env("SLURM_CONF", fixture().join("slurm.conf"))
        .env("PATH", fixture().join("bin"));
    cmd
}
