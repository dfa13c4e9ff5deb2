#![allow(dead_code, unused_imports)] // Shared by several test binaries, each using a part.

//! Runs real srun/sbatch steps on the dockerized Slurm testbed
//! (docker/testbed.sh) and reads back what every task saw.
//!
//! The expected TF_CONFIG is derived from Slurm's own placement as the tasks
//! report it (hostname, SLURM_PROCID, SLURM_LOCALID, reserved ports), never
//! from the plugin's code.
//!
//! By job: the testbed's life and lock (testbed.rs), commands and steps run
//! in it (exec.rs), what the tasks printed (probe.rs, outputs.rs), files and
//! packages installed into it (installs.rs), the container stand-in enabled
//! (standin.rs), another user's job (users.rs). Everything is re-exported here:
//! the test binaries name `common::X` whatever file holds it.

pub mod exec;
pub mod exec_server;
pub mod installs;
pub mod outputs;
pub mod probe;
pub mod standin;
pub mod testbed;
pub mod users;

pub use exec::*;
pub use installs::*;
pub use probe::*;
pub use testbed::*;
pub use users::*;
