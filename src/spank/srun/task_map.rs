//! srun's task map of the step: fetched from slurmctld, checked before
//! launch against the settings and the GPU request, whole within what srun
//! hands its tasks; or, without it, srun's check of what it knows.

use super::super::fault;
use super::super::handle::Spank;
use super::super::slurmctld::{step_info, step_layout};
use crate::core::gpus;
use crate::core::handoff::{Handoff, Verdict};
use crate::core::task_map;
use crate::core::{self, Error, Result, Settings};

/// Without the step's map (`e`: why): srun's check of what it knows (the
/// step's `tasks`, its `nodelist`), and a verdict of `none` (the tasks
/// rebuild the layout).
pub fn without_map(
    settings: &Settings,
    e: Error,
    tasks: u32,
    nodelist: Option<&str>,
) -> Result<Verdict> {
    let launch = core::Launch {
        tasks,
        nodelist,
        ..core::Launch::default()
    };
    core::check_before_launch(settings, &launch)?;
    log::info!("{e}: the tasks rebuild the layout");
    Ok(Verdict::Rebuild)
}

/// What srun checks a map against beside the settings.
pub struct Checks<'a> {
    /// The step's reserved ports, when its record tells them for every node.
    pub resv_ports: Option<&'a str>,
    /// slurmctld's record of the step.
    pub info: Option<&'a step_info::StepInfo>,
    /// A heterogeneous step's components' node lists: the map must equal
    /// what the components srun's word cannot reach rebuild.
    pub het_nodelists: Option<&'a [core::hostlist::HostList]>,
}

/// The step's map as srun's verdict, once srun checked the step before
/// launch against it, whole within core::handoff::MAX_LEN; `what` names the step and
/// the fetch's time in srun's log.
pub fn with_map(
    spank: &Spank,
    settings: &Settings,
    map: task_map::TaskMap,
    hosts_text: String,
    checks: Checks,
    what: impl FnOnce() -> String,
) -> Result<Verdict> {
    // Unknown (None) only where Slurm would not say: nothing refused then.
    let command = spank.job_argv().ok();
    let components = match checks.het_nodelists {
        Some(lists) => {
            let counts = map.runs.counts(map.hosts.len());
            let nodes = (0..map.hosts.len()).map(|i| (map.hosts.get(i), counts[i]));
            Some(core::component_tasks(nodes, lists).map_err(Error::new)?)
        }
        None => None,
    };
    core::check_before_launch(
        settings,
        &core::Launch {
            tasks: map.runs.len(),
            nodelist: Some(&hosts_text),
            nodes: Some(map.hosts.len() as u32),
            resv_ports: checks.resv_ports,
            most_local: Some(most_local(&map)),
            command: command.as_deref(),
            components: components.as_deref(),
        },
    )?;
    check_gpus(settings, &map, checks.info)?;
    if let Some(nodelists) = checks.het_nodelists {
        core::check_het_rebuild(&map, nodelists)?;
    }
    let (verdict, len) = Handoff::map_verdict(map, hosts_text)?;
    log::info!("task map of {}, {len} bytes", what());
    Ok(verdict)
}

/// This step as slurmctld recorded it, or None (srun's environment is then
/// taken as it is).
pub fn step_info(spank: &Spank, job: u32, step: u32) -> Option<step_info::StepInfo> {
    let got = if fault::active("step_info_rpc", Some(spank)) {
        Err(Error::new("slurmctld gave no step record: fault injected"))
    } else {
        step_info::fetch(job, step)
    };
    got.map_err(|e| log::info!("{e}: srun's environment is taken as it is"))
        .ok()
}

/// The GPU refusals srun can make before launch: the GPU request as srun's
/// own environment shows it (core::gpus::SrunRequest), its binding the
/// step's as slurmctld recorded it (srun 22.05 leaves a SLURM_GPU_BIND of
/// `sbatch --gpu-bind` in its environment whatever its own --gpu-bind),
/// against the most tasks the map puts on one node. Each task checks again
/// (the catch-all).
pub fn check_gpus(
    settings: &Settings,
    map: &task_map::TaskMap,
    info: Option<&step_info::StepInfo>,
) -> Result<()> {
    let most = most_local(map);
    let mut request = gpus::SrunRequest::from_env(|name| std::env::var(name).ok());
    if let Some(info) = info {
        request = request.for_step(info.tres_bind.as_deref());
    }
    let rules = core::frameworks::gpu_rules(settings.frameworks);
    gpus::check_before_launch(settings, rules, &request, most)
}

/// The most tasks the map puts on one node.
pub fn most_local(map: &task_map::TaskMap) -> u32 {
    map.runs
        .counts(map.hosts.len())
        .into_iter()
        .max()
        .unwrap_or(0)
}

/// The layout of step `job`.`step` from slurmctld (or the injected fault).
pub fn fetch(
    spank: &Spank,
    job: u32,
    step: u32,
) -> Result<(step_layout::Component, std::time::Duration)> {
    if fault::active("layout_rpc", Some(spank)) {
        return Err(Error::new("slurmctld gave no layout: fault injected"));
    }
    step_layout::fetch(job, step)
}
