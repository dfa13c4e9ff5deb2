//! The one wrapper every SPANK hook runs its body in, and the only place a
//! panic is caught: no panic crosses into Slurm, an error is logged once,
//! and the hook answers Slurm as it declares ([`Answer`]).

use std::ffi::c_int;
use std::panic::{AssertUnwindSafe, catch_unwind};

use super::fault;
use super::handle::Spank;
use crate::core::{Error, Kind, Result};

/// What a hook answers Slurm when its body fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// -1: Slurm acts on the failure (srun exits, the task fails).
    Fails,
    /// 0: the hook always succeeds (a failure in slurmstepd's own hooks
    /// would drain the node or is no task's; srun's early word is refused
    /// later).
    Succeeds,
}

/// Runs hook `hook`'s `body` (a test build's fault injected first): an
/// error is logged once (one already reported, `Kind::Reported`, is not), a
/// panic after the panic hook logged it; the return code is 0, or -1 on a
/// failure of a hook that [`Answer::Fails`].
pub fn guard(
    hook: &str,
    spank: Option<&Spank>,
    answer: Answer,
    body: impl FnOnce() -> Result<()>,
) -> c_int {
    let run = || {
        fault::inject(hook, spank);
        body()
    };
    match caught(hook, run) {
        Ok(()) => 0,
        Err(e) => {
            if e.kind() != Kind::Reported {
                log::error!("{e}");
            }
            match answer {
                Answer::Fails => -1,
                Answer::Succeeds => 0,
            }
        }
    }
}

/// `body`, its panic turned into an error already reported (the panic hook
/// said why): for a hook that keeps its failure for later (`user_init`'s,
/// for the node's tasks) or has nothing to say of it.
pub fn caught<T>(hook: &str, body: impl FnOnce() -> Result<T>) -> Result<T> {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(result) => result,
        Err(_) => Err(Error::reported(&format!("{hook} panicked"))),
    }
}
