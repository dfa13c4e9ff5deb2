//! libslurm's C conventions turned into `Result`, in one place for the
//! requests to slurmctld beside it: a step's id
//! as Slurm takes it, a return code or NULL whose reason is in errno.

use std::ffi::CStr;
use std::ptr::NonNull;

use super::super::bindings as sys;
use crate::core::{Error, Result};

/// Step `step` of job `job`, any heterogeneous component (NO_VAL). From
/// 24.11 on the struct also has `sluid`, which stays 0 (unknown, not
/// compared).
pub fn step_id(job: u32, step: u32) -> sys::slurm_step_id_t {
    // SAFETY: plain integers; all-zero is a valid value of the struct.
    let mut id: sys::slurm_step_id_t = unsafe { std::mem::zeroed() };
    id.job_id = job;
    id.step_id = step;
    id.step_het_comp = sys::NO_VAL;
    id
}

/// A libslurm call's return code: 0, or `what: <Slurm's text for errno>`.
pub fn check(rc: i32, what: impl FnOnce() -> String) -> Result<()> {
    match rc {
        0 => Ok(()),
        _ => Err(failed(what())),
    }
}

/// A pointer a libslurm call returned: non-NULL, or `what: <errno's text>`.
pub fn non_null<T>(p: *mut T, what: impl FnOnce() -> String) -> Result<NonNull<T>> {
    NonNull::new(p).ok_or_else(|| failed(what()))
}

/// `what: <Slurm's text for the last error>` (libslurm sets errno).
fn failed(what: String) -> Error {
    Error::new(format!("{what}: {}", errno_text()))
}

/// Slurm's text for the last error of a libslurm call (it sets errno).
fn errno_text() -> String {
    let code = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
    // SAFETY: slurm_strerror returns a static string (or NULL) for any code.
    let text = unsafe { sys::slurm_strerror(code) };
    if text.is_null() {
        format!("error {code}")
    } else {
        // SAFETY: a NUL-terminated static string.
        unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned()
    }
}
