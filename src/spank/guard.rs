//! The guard every SPANK hook runs in, and the only place a panic is
//! caught: [`whole`] wraps each whole hook call (super::hooks), so no panic
//! crosses into Slurm (a panic unwinding out of an `extern "C"` function
//! aborts the process: slurmstepd itself in `task_exit`); [`guard`] and
//! [`caught`] wrap a body's parts, so that an error is logged once and the
//! hook answers Slurm as it declares ([`Answer`]).

use std::ffi::{c_char, c_int};
use std::panic::{AssertUnwindSafe, catch_unwind};

use super::bindings as sys;
use super::fault;
use super::handle::{Spank, callback};
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

/// Hook `hook`'s whole call (`sp`, `ac`, `av` as Slurm passed them): a
/// panic anywhere in `body` that no part's guard caught (the panic hook
/// said what panicked) answers as the hook declares, and Slurm goes on. A
/// test build's fault `whole_<hook>` panics here, outside every part's
/// guard.
pub fn whole(
    hook: &str,
    answer: Answer,
    (sp, ac, av): (sys::spank_t, c_int, *mut *mut c_char),
    body: impl for<'a> FnOnce(&Spank<'a>) -> c_int,
) -> c_int {
    let run = || {
        callback(sp, ac, av, |spank| {
            fault::inject_whole(hook, spank);
            body(spank)
        })
    };
    match catch_unwind(AssertUnwindSafe(run)) {
        Ok(rc) => rc,
        Err(_) => match answer {
            Answer::Fails => -1,
            Answer::Succeeds => 0,
        },
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

#[cfg(test)]
mod tests {
    use super::*;

    fn no_handle() -> (sys::spank_t, c_int, *mut *mut c_char) {
        (std::ptr::null_mut(), 0, std::ptr::null_mut())
    }

    /// A panic outside every part's guard answers as the hook declares.
    #[test]
    fn a_whole_hooks_panic_is_its_declared_answer() {
        let quiet = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let fails = whole("t", Answer::Fails, no_handle(), |_| panic!("in the hook"));
        let succeeds = whole("t", Answer::Succeeds, no_handle(), |_| panic!("in it"));
        std::panic::set_hook(quiet);
        assert_eq!((fails, succeeds), (-1, 0));
        assert_eq!(
            whole("t", Answer::Fails, no_handle(), |_| 7),
            7,
            "its own code"
        );
    }
}
