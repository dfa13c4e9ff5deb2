//! The guard every SPANK entry point runs its body in: no panic crosses
//! into Slurm, and an error is logged once.

use std::ffi::c_int;
use std::panic::{AssertUnwindSafe, catch_unwind};

use super::fault;
use super::handle::Spank;
use crate::core::{Kind, Result};

/// Runs `body`; an error is logged once and becomes -1 (one already
/// reported (`Kind::Reported`) is not logged again), a panic becomes -1 after the panic
/// hook logged it.
pub fn guard(hook: &str, spank: Option<&Spank>, body: impl FnOnce() -> Result<()>) -> c_int {
    let run = || {
        fault::inject(hook, spank);
        body()
    };
    match catch_unwind(AssertUnwindSafe(run)) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            if e.kind() != Kind::Reported {
                log::error!("{e}");
            }
            -1
        }
        Err(_) => -1,
    }
}
