//! The guard every SPANK entry point runs its body in: no panic crosses
//! into Slurm, and an error is logged once.

use std::ffi::c_int;
use std::panic::{AssertUnwindSafe, catch_unwind};

use super::fault;
use super::handle::Spank;
use crate::core::{Error, Result};

/// An error already reported, once for the step (by srun, or by the panic
/// hook): [`guard`] logs nothing more for it. The one place that knows how
/// such an error is told apart.
pub fn reported() -> Error {
    Error::new("")
}

fn is_reported(e: &Error) -> bool {
    e.message().is_empty()
}

/// Runs `body`; an error is logged once and becomes -1 (one already
/// [`reported`] is not logged again), a panic becomes -1 after the panic
/// hook logged it.
pub fn guard(hook: &str, spank: Option<&Spank>, body: impl FnOnce() -> Result<()>) -> c_int {
    let run = || {
        fault::inject(hook, spank);
        body()
    };
    match catch_unwind(AssertUnwindSafe(run)) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            if !is_reported(&e) {
                log::error!("{e}");
            }
            -1
        }
        Err(_) => -1,
    }
}
