//! srun's decision for a `--tf-cluster` step, made once in
//! `local_user_init` after slurmctld created the step: check the spec
//! against the step, fetch the step's task map, and hand every task either
//! the map or a verdict in one variable (core::task_map). srun decides,
//! tasks apply.

use super::handle::Spank;
use super::{fault, layout};
use crate::core::task_map::{self, MAX_LEN, Verdict};
use crate::core::{self, Error, Result, Settings};

/// Where srun runs, as its environment said at its start.
#[derive(Clone, Copy)]
pub struct Context {
    /// The spec came only from the job (sbatch/salloc), not from this srun.
    pub inherited: bool,
    /// srun made the allocation for this step itself: when srun exits, it
    /// ends the job and so the step, so it may refuse before launch. Inside
    /// an existing allocation the created step would stay behind.
    pub own_allocation: bool,
}

/// Decides for step `settings` (Err: the step's options were unreadable).
/// Err: refuse now (srun exits, nothing launched); Ok: srun launches, the
/// tasks apply the variable.
pub fn decide(spank: &Spank, settings: Result<Settings>, context: Context) -> Result<()> {
    let job = spank.job_id()?;
    let step = spank.step_id()?;
    let value = match settings.and_then(|s| map_for(spank, &s, job, step)) {
        Ok(value) => value,
        Err(e) if context.inherited => {
            log::warn!(
                "{e}; the --tf-cluster inherited from the job is not applied to this step (give this srun --tf-cluster=SPEC, or --tf-cluster=off)"
            );
            Verdict::Skip.encode(job, step)
        }
        Err(e) if context.own_allocation => return Err(e),
        Err(e) => {
            log::error!("{e}");
            Verdict::Refused.encode(job, step)
        }
    };
    // SAFETY: srun's launch threads read its environment only after this
    // callback returns (the value reaches the tasks from there).
    unsafe { std::env::set_var(task_map::VAR, value) };
    Ok(())
}

/// The variable's value for a step that may run: the map, or `none` when
/// Slurm gave none (the tasks then rebuild the layout).
fn map_for(spank: &Spank, settings: &Settings, job: u32, step: u32) -> Result<String> {
    // A heterogeneous step calls this once, for one component, and the
    // variable reaches that component's tasks only: they all rebuild.
    let het = std::env::var_os("SLURM_HET_SIZE").or_else(|| std::env::var_os("SLURM_PACK_SIZE"));
    if het.is_some() {
        let tasks = std::env::var("SLURM_NTASKS")
            .ok()
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| Error::new("heterogeneous step without SLURM_NTASKS"))?;
        core::check_before_launch(settings, tasks, None)?;
        log::info!("heterogeneous step: the tasks rebuild the layout");
        return Ok(Verdict::None.encode(job, step));
    }
    let fetched = if fault::active("layout_rpc", Some(spank)) {
        Err(Error::new("slurmctld gave no layout: fault injected"))
    } else {
        layout::fetch(job, step)
    };
    let (component, took) = match fetched {
        Ok(got) => got,
        Err(e) => {
            let tasks = spank.total_task_count()?;
            let nodelist = std::env::var("SLURM_NODELIST").ok();
            core::check_before_launch(settings, tasks, nodelist.as_deref())?;
            log::info!("{e}: the tasks rebuild the layout");
            return Ok(Verdict::None.encode(job, step));
        }
    };
    let (map, hosts_text) = component.into_map(job, step)?;
    core::check_before_launch(settings, map.node_of.len() as u32, Some(&hosts_text))?;
    let value = if fault::active("map_garbage", Some(spank)) {
        format!("1;{job}.{step};{hosts_text};garbage")
    } else {
        map.encode(&hosts_text)
    };
    if value.len() > MAX_LEN {
        return Err(Error::new(format!(
            "the step's task map would be {} bytes, over the {MAX_LEN} srun hands to its tasks; use a regular distribution (block, cyclic or plane)",
            value.len()
        )));
    }
    log::info!(
        "task map of step {job}.{step} from slurmctld in {} µs, {} bytes",
        took.as_micros(),
        value.len()
    );
    Ok(value)
}
