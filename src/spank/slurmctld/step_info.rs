//! srun's side: what slurmctld recorded for this srun's own step
//! (`slurm_get_job_steps`, one RPC per srun step, bounded by Slurm's
//! MessageTimeout): the ports it reserved and its GPU binding. srun's
//! environment may hold stale values of both (SLURM_STEP_RESV_PORTS of an
//! outer step or the user, SLURM_GPU_BIND of `sbatch --gpu-bind`), which
//! Slurm passes on when the step itself has none.

use std::ffi::CStr;

use super::super::bindings as sys;
use super::api;
use crate::core::{Error, Result};

/// What slurmctld recorded for one step.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepInfo {
    /// The ports reserved for the step (`12043-12045`), None: none.
    pub resv_ports: Option<String>,
    /// The step's task-to-TRES binding (`gpu:map_gpu:0,1`), None: none.
    pub tres_bind: Option<String>,
    /// The srun that runs the step: its process id and host.
    pub srun: (u32, Option<String>),
}

/// Frees the response whatever happens while it is read.
struct Owned(*mut sys::job_step_info_response_msg_t);

impl Drop for Owned {
    fn drop(&mut self) {
        // SAFETY: a response slurm_get_job_steps filled, freed once.
        unsafe { sys::slurm_free_job_step_info_response_msg(self.0) }
    }
}

/// Step `step` of job `job` as slurmctld recorded it.
pub fn fetch(job: u32, step: u32) -> Result<StepInfo> {
    let mut resp: *mut sys::job_step_info_response_msg_t = std::ptr::null_mut();
    #[cfg(not(slurm_get_job_steps_by_id))]
    // SAFETY: `resp` is written with NULL or a response we own.
    let rc = unsafe { sys::slurm_get_job_steps(0, job, step, &mut resp, 0) };
    #[cfg(slurm_get_job_steps_by_id)]
    // SAFETY: a valid step id; `resp` is written with NULL or a response we
    // own.
    let rc = unsafe { sys::slurm_get_job_steps(&mut api::step_id(job, step), &mut resp, 0) };
    let no_record = || format!("slurmctld gave no record of step {job}.{step}");
    api::check(rc, no_record)?;
    let resp = Owned(api::non_null(resp, no_record)?.as_ptr());
    // SAFETY: non-NULL, filled by Slurm: job_step_count records.
    let r = unsafe { &*resp.0 };
    if r.job_steps.is_null() {
        return Err(Error::new(format!("slurmctld has no step {job}.{step}")));
    }
    let steps = unsafe { std::slice::from_raw_parts(r.job_steps, r.job_step_count as usize) };
    let Some(s) = steps
        .iter()
        .find(|s| s.step_id.job_id == job && s.step_id.step_id == step)
    else {
        return Err(Error::new(format!("slurmctld has no step {job}.{step}")));
    };
    Ok(StepInfo {
        resv_ports: text(s.resv_ports)?,
        tres_bind: text(s.tres_bind)?,
        srun: (s.srun_pid, text(s.srun_host)?),
    })
}

/// A string of the record: None when NULL or empty.
fn text(p: *const std::ffi::c_char) -> Result<Option<String>> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: a NUL-terminated string of the response.
    let s = unsafe { CStr::from_ptr(p) };
    if s.count_bytes() > 4096 {
        return Err(Error::new(
            "slurmctld's step record holds an overlong value",
        ));
    }
    let s = s
        .to_str()
        .map_err(|_| Error::new("slurmctld's step record is not UTF-8"))?;
    Ok((!s.is_empty()).then(|| s.to_string()))
}
