//! srun's side: the options' checks as srun parses them, whether the spec
//! was only inherited from the job, and the decision for a step that asked
//! for the plugin, made once in `local_user_init` after slurmctld created
//! the step: check the step, fetch its task map, and hand every task either
//! the map or a verdict in one variable (core::task_map). srun decides,
//! tasks apply.

use std::sync::atomic::{AtomicU32, Ordering};

use super::handle::Spank;
use super::hooks::guard;
use super::options::{self, inherited_var};
use super::{fault, step_layout_rpc};
use crate::core::frameworks::{self, FRAMEWORKS, Framework};
use crate::core::gpus;
use crate::core::network;
use crate::core::os::ProcessEnv;
use crate::core::step::{het_job_id, het_nodelist, het_size, number};
use crate::core::task_map::{self, MAX_LEN, Verdict};
use crate::core::{self, Error, MAX_NODES, Result, Settings, Source};

/// srun's state, from its start to its `local_user_init`.
pub struct Srun {
    /// srun started outside any allocation (and without --jobid): it
    /// allocates for itself, and its exit ends the job, so it may refuse
    /// before launch. Inside an existing allocation the created step would
    /// stay behind.
    own_allocation: bool,
    /// How often each framework option's callback ran. srun reads the value
    /// sbatch/salloc handed down first, then its own command line: one call
    /// with the inherited variable set means the option was only inherited.
    calls: [AtomicU32; FRAMEWORKS.len()],
}

impl Srun {
    pub fn new() -> Srun {
        Srun {
            own_allocation: outside_any_allocation(),
            calls: std::array::from_fn(|_| AtomicU32::new(0)),
        }
    }

    /// A framework's option was given (or handed down by sbatch/salloc).
    pub fn option_given(&self, f: &'static Framework) {
        self.calls[frameworks::index(f)].fetch_add(1, Ordering::Relaxed);
    }

    /// An option whose framework leaves unfitting steps alone came only from
    /// the job (sbatch/salloc), not from this srun.
    fn inherited(&self) -> bool {
        FRAMEWORKS.iter().enumerate().any(|(i, f)| {
            f.skip_when_inherited
                && std::env::var_os(inherited_var(f)).is_some()
                && self.calls[i].load(Ordering::Relaxed) <= 1
        })
    }

    /// After slurmctld created the step and before anything is launched:
    /// check the step, fetch its task map, and hand the tasks the map or a
    /// verdict. It fails only when srun made its own allocation.
    pub fn local_user_init(&self, spank: &Spank) -> i32 {
        let rc = guard(
            "local_user_init",
            Some(spank),
            || match options::step_settings(spank) {
                Ok(Some(settings)) => self.decide(spank, &settings),
                Ok(None) => Ok(()),
                Err(e) => self.refuse(spank, e),
            },
        );
        if self.own_allocation { rc } else { 0 }
    }

    /// Decides for a step that asked for the plugin. Err: refuse now (srun
    /// exits, nothing launched); Ok: srun launches, the tasks apply the
    /// variable.
    fn decide(&self, spank: &Spank, settings: &Settings) -> Result<()> {
        let job = spank.job_id()?;
        let step = spank.step_id()?;
        let decided = map_for(spank, settings, job, step)
            .and_then(|map| Ok((network_for(settings, &map, job, step)?, map)));
        match decided {
            Ok((network, map)) => {
                hand(network::VAR, &network)?;
                hand_to_tasks(&map)
            }
            Err(e) => self.refuse(spank, e),
        }
    }

    /// What cannot run: skipped when only inherited, refused before launch
    /// when srun can end the job, else handed to the tasks to fail.
    fn refuse(&self, spank: &Spank, e: Error) -> Result<()> {
        let job = spank.job_id()?;
        let step = spank.step_id()?;
        let verdict = if self.inherited() {
            log::warn!(
                "{e}; the --tf-cluster inherited from the job is not applied to this step (give this srun --tf-cluster=SPEC, or --tf-cluster=off)"
            );
            Verdict::Skip
        } else if self.own_allocation {
            return Err(e);
        } else {
            log::error!("{e}");
            Verdict::Refused
        };
        hand_to_tasks(&verdict.encode(job, step))
    }
}

/// Sets the variable every task of the step inherits.
fn hand_to_tasks(value: &str) -> Result<()> {
    hand(task_map::VAR, value)
}

/// Sets `name`, which every task of the step inherits.
fn hand(name: &str, value: &str) -> Result<()> {
    // SAFETY: srun's launch threads read its environment only after this
    // callback returns (the value reaches the tasks from there).
    unsafe { std::env::set_var(name, value) };
    Ok(())
}

/// The step's network for [`network::VAR`]: `--tf-network`, or the subnet
/// of every node's template name, resolved here (srun is the user's own
/// process: a slow DNS delays this srun, never a slurmstepd), and the
/// interface variables the user set. The nodes are the map's, else the
/// allocation's.
fn network_for(settings: &Settings, map: &str, job: u32, step: u32) -> Result<String> {
    let needs_hosts = settings.network.is_none() && settings.host_template.is_some();
    let hosts = match needs_hosts {
        false => None,
        true => Some(step_hosts(map, job, step).ok_or_else(|| {
            Error::new(
                "srun knows no node list to resolve the host template's names: name the network with --tf-network=IFNAME|CIDR",
            )
        })?),
    };
    let handed = network::for_step(
        settings,
        hosts.iter().flat_map(|h| h.iter()),
        |name| ProcessEnv.resolve(name),
        |name| std::env::var_os(name).is_some(),
    )?;
    Ok(handed.encode(job, step))
}

/// The step's nodes: the map's, else the allocation's (a superset).
fn step_hosts(map: &str, job: u32, step: u32) -> Option<core::hostlist::HostList> {
    if let Ok(task_map::Found::Ours(map)) = task_map::TaskMap::decode(map, job, step) {
        return Some(map.hosts);
    }
    ["SLURM_JOB_NODELIST", "SLURM_NODELIST"]
        .iter()
        .find_map(|v| std::env::var(v).ok())
        .and_then(|list| core::hostlist::HostList::parse(&list, MAX_NODES as usize).ok())
}

/// srun's environment names no job and its command line no --jobid. A
/// `--jobid` among the program's own arguments only makes this false, the
/// safe side.
fn outside_any_allocation() -> bool {
    let in_job = ["SLURM_JOB_ID", "SLURM_JOBID"]
        .iter()
        .any(|v| std::env::var_os(v).is_some());
    let jobid_arg = std::env::args_os().any(|a| a.as_encoded_bytes().starts_with(b"--jobid"));
    !in_job && !jobid_arg
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
    core::check_before_launch(settings, map.runs.len(), Some(&hosts_text))?;
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
/// component order, read from srun's environment by the core's readers
/// (None: not a heterogeneous step).
fn het_components() -> Result<Option<Vec<(u32, core::hostlist::HostList)>>> {
    let env = &mut ProcessEnv;
    let Some(size) = het_size(env)? else {
        return Ok(None);
    };
    let mut budget = MAX_NODES as usize;
    (0..size)
        .map(|k| Ok((het_job_id(env, k)?, het_nodelist(env, k, &mut budget)?)))
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
    components: &[(u32, core::hostlist::HostList)],
) -> Result<String> {
    let start = std::time::Instant::now();
    let mut layouts = Vec::with_capacity(components.len());
    for &(component_job, _) in components {
        match fetch(spank, component_job, step) {
            Ok((component, _)) => layouts.push(component.into_parts()?),
            Err(e) => {
                let tasks = number(&mut ProcessEnv, "SLURM_NTASKS")?
                    .ok_or_else(|| Error::new("heterogeneous step without SLURM_NTASKS"))?;
                core::check_before_launch(settings, tasks, None)?;
                log::info!("{e}: the tasks rebuild the layout");
                return Ok(Verdict::None.encode(job, step));
            }
        }
    }
    let map = task_map::TaskMap::from_components(job, step, &layouts)?;
    let hosts_text = map.hosts.iter().collect::<Vec<_>>().join(",");
    core::check_before_launch(settings, map.runs.len(), Some(&hosts_text))?;
    check_gpus(settings, &map)?;
    let nodelists: Vec<_> = components.iter().map(|(_, nodes)| nodes.clone()).collect();
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
    let most = map
        .runs
        .counts(map.hosts.len())
        .into_iter()
        .max()
        .unwrap_or(0);
    let request = gpus::SrunRequest::from_env(|name| std::env::var(name).ok());
    let rules = core::frameworks::gpu_rules(settings.frameworks);
    gpus::check_before_launch(settings, rules, &request, most)
}

/// The layout of step `job`.`step` from slurmctld (or the injected fault).
fn fetch(
    spank: &Spank,
    job: u32,
    step: u32,
) -> Result<(step_layout_rpc::Component, std::time::Duration)> {
    if fault::active("layout_rpc", Some(spank)) {
        return Err(Error::new("slurmctld gave no layout: fault injected"));
    }
    step_layout_rpc::fetch(job, step)
}
