//! srun's decision for a `--tf-cluster` step, made once in
//! `local_user_init` after slurmctld created the step: check the spec
//! against the step, fetch the step's task map, and hand every task either
//! the map or a verdict in one variable (core::task_map). srun decides,
//! tasks apply.

use super::handle::Spank;
use super::{fault, layout};
use crate::core::gpus;
use crate::core::hostlist::HostList;
use crate::core::task_map::{self, MAX_LEN, Verdict};
use crate::core::{self, Error, MAX_TASKS, Result, Settings};

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
    if let Some(components) = het_components()? {
        return het_map_for(spank, settings, job, step, &components);
    }
    let (component, took) = match fetch(spank, job, step) {
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
    check_gpus(settings, &map)?;
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

/// The job id and node list of each component of a heterogeneous job, in
/// component order, from the variables srun and salloc set for it (None: not
/// a heterogeneous step). Slurm 22.05 says PACK where later releases say HET.
fn het_components() -> Result<Option<Vec<(u32, String)>>> {
    let var = |het: &str, pack: &str| std::env::var(het).or_else(|_| std::env::var(pack)).ok();
    let Some(size) = var("SLURM_HET_SIZE", "SLURM_PACK_SIZE") else {
        return Ok(None);
    };
    let size: u32 = match size.parse() {
        Ok(n @ 1..=128) => n,
        _ => {
            return Err(Error::new(format!(
                "SLURM_HET_SIZE is {size:?}, not a component count"
            )));
        }
    };
    (0..size)
        .map(|k| {
            let job = var(
                &format!("SLURM_JOB_ID_HET_GROUP_{k}"),
                &format!("SLURM_JOB_ID_PACK_GROUP_{k}"),
            )
            .and_then(|j| j.parse().ok());
            let nodes = var(
                &format!("SLURM_JOB_NODELIST_HET_GROUP_{k}"),
                &format!("SLURM_JOB_NODELIST_PACK_GROUP_{k}"),
            );
            match (job, nodes) {
                (Some(job), Some(nodes)) => Ok((job, nodes)),
                _ => Err(Error::new(format!(
                    "heterogeneous job without the job id or node list of component {k}"
                ))),
            }
        })
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

/// A heterogeneous step: one RPC per component gives the whole step's map,
/// which must equal what the components srun's map cannot reach rebuild
/// (core::check_het_rebuild). Without the layouts, every task rebuilds.
fn het_map_for(
    spank: &Spank,
    settings: &Settings,
    job: u32,
    step: u32,
    components: &[(u32, String)],
) -> Result<String> {
    let start = std::time::Instant::now();
    let mut layouts = Vec::with_capacity(components.len());
    for &(component_job, _) in components {
        match fetch(spank, component_job, step) {
            Ok((component, _)) => layouts.push(component.into_parts()?),
            Err(e) => {
                let tasks: u32 = std::env::var("SLURM_NTASKS")
                    .ok()
                    .and_then(|n| n.parse().ok())
                    .ok_or_else(|| Error::new("heterogeneous step without SLURM_NTASKS"))?;
                core::check_before_launch(settings, tasks, None)?;
                log::info!("{e}: the tasks rebuild the layout");
                return Ok(Verdict::None.encode(job, step));
            }
        }
    }
    let map = task_map::TaskMap::from_components(job, step, &layouts)?;
    let hosts_text = map.hosts.iter().collect::<Vec<_>>().join(",");
    core::check_before_launch(settings, map.node_of.len() as u32, Some(&hosts_text))?;
    check_gpus(settings, &map)?;
    let nodelists = components
        .iter()
        .map(|(_, nodes)| HostList::parse(nodes, MAX_TASKS as usize))
        .collect::<Result<Vec<_>>>()?;
    core::check_het_rebuild(&map, &nodelists)?;
    let value = map.encode(&hosts_text);
    log::info!(
        "task map of heterogeneous step {job}.{step} ({} components) from slurmctld in {} µs, {} bytes",
        components.len(),
        start.elapsed().as_micros(),
        value.len()
    );
    Ok(value)
}

/// The GPU refusals srun can make before launch: the GPU request as srun's
/// own environment shows it (core::gpus::SrunRequest) against the most tasks
/// the map puts on one node. Each task checks again (the catch-all).
fn check_gpus(settings: &Settings, map: &task_map::TaskMap) -> Result<()> {
    let mut counts = vec![0u32; map.hosts.len()];
    for &node in &map.node_of {
        counts[node as usize] += 1;
    }
    let most = counts.into_iter().max().unwrap_or(0);
    let request = gpus::SrunRequest::from_env(|name| std::env::var(name).ok());
    gpus::check_before_launch(settings, &request, most)
}

/// The layout of step `job`.`step` from slurmctld (or the injected fault).
fn fetch(spank: &Spank, job: u32, step: u32) -> Result<(layout::Component, std::time::Duration)> {
    if fault::active("layout_rpc", Some(spank)) {
        return Err(Error::new("slurmctld gave no layout: fault injected"));
    }
    layout::fetch(job, step)
}
