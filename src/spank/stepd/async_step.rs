//! An `srun --async` step (Slurm 26.05, the job's step manager): that srun
//! returns once the step is submitted and runs no `local_user_init`, so its
//! tasks hold srun's early word only (core::handoff), never its word on the
//! step: no task map, no check of the step. Here slurmstepd does, once per
//! node in `user_init`, what srun does for a plain step: it learns the
//! step's layout as slurmctld made it (super::sattach: Slurm's `sattach
//! --layout`, exec'd in a child killed at its deadline, as the user) and
//! makes the exact task map of it, checks the step as srun would before
//! launch (the `--tf-<key>` options srun was given, as its early word names
//! them; each framework's refusals), and decides a step without a framework
//! option whose `--tf-record` or `--tf-requeue-on` makes it the plugin's.
//! Only where srun handed no map (its early word alone) and Slurm's own task
//! count is the whole step's (core::het::early_case): a heterogeneous step's
//! component is rebuilt as before. The layout is slurmctld's alone, never a
//! variable: the step's environment only picks the case, and the map is
//! checked against Slurm's own counts here and each task's ids in
//! `task_init`. Once per node, before any task is forked, never per task.
//! Without the layout the step fails in every task, in one line naming the
//! async case (core::het::ASYNC_STEP), and the refusing tasks end the step.
//!
//! srun's other facts of a plain step are taken as srun takes them where
//! slurmctld gives no record: the step's reserved ports from its
//! environment, its GPU binding unknown (a task a container plugin moved
//! and that Slurm binds per task is refused), its network decided on each
//! node.

use super::super::fault;
use super::super::handle::Spank;
use super::super::options;
use super::host::OnHost;
use crate::core::frameworks::{Frameworks, check_given_settings};
use crate::core::handoff::{FromSrun, Said};
use crate::core::het::{ASYNC_STEP, EarlyCase, early_case};
use crate::core::task_map::TaskMap;
use crate::core::{self, Error, Result, Settings, Source, Step};

/// The start of a refusal srun would have made before launch.
const REFUSED: &str = "an srun --async step, which srun cannot refuse before it runs";

/// srun's refusal `e` of a step it could not see.
fn refusal(e: Error) -> Error {
    Error::new(format!("{REFUSED}: {}", e.message()))
}

/// Whether the step, which has only srun's early word, is an async one.
fn is_async(spank: &Spank) -> Result<bool> {
    let mut host = OnHost(spank);
    let num_tasks = Step::num_tasks(&mut host)?;
    Ok(early_case(&mut host, num_tasks)? == EarlyCase::Async)
}

/// A framework step's `said`, with the step's task map from slurmctld where
/// it is an async step; any other step's as it is. None: srun would have
/// left out every framework it asks for (only inherited, and unfitting).
pub fn with_layout(spank: &Spank, mut said: Said) -> Result<Option<Said>> {
    if !said.early_only || !is_async(spank)? {
        return Ok(Some(said));
    }
    let given: Vec<&str> = said.given.iter().map(String::as_str).collect();
    check_given_settings(&given, said.settings.frameworks).map_err(refusal)?;
    let (job, step) = (spank.job_id()?, spank.step_id()?);
    let (map, hosts) = layout(spank, job, step)
        .map_err(|e| Error::new(format!("{ASYNC_STEP}: {}", e.message())))?;
    let Some(frameworks) = check_before_launch(spank, &said, &map, &hosts)? else {
        return Ok(None);
    };
    said.settings.frameworks = frameworks;
    said.from_srun = FromSrun::Map(map);
    said.map_hosts = Some(hosts);
    said.early_only = false;
    Ok(Some(said))
}

/// A step without a framework option whose srun was `given` `--tf-<key>`
/// options, with srun's early word alone: on an async step, srun's decision
/// (refused, or the settings of its record and requeue, from the site's
/// defaults and the step's options); None: a heterogeneous step's
/// component, which srun refused (it refuses any such het step).
pub fn alone(spank: &Spank, given: &[String]) -> Result<Option<Box<Settings>>> {
    if !is_async(spank)? {
        return Ok(None);
    }
    let given: Vec<&str> = given.iter().map(String::as_str).collect();
    check_given_settings(&given, Frameworks::default()).map_err(refusal)?;
    options::plain_settings(spank).map(|s| Some(Box::new(s)))
}

/// The step's task map from slurmctld, with its node list as Slurm wrote
/// it, checked against slurmstepd's own counts (the step's tasks, this
/// node's).
fn layout(spank: &Spank, job: u32, step: u32) -> Result<(TaskMap, String)> {
    if fault::active("async_layout_rpc", Some(spank)) {
        return Err(Error::new("slurmctld gave no layout: fault injected"));
    }
    let start = std::time::Instant::now();
    let component = super::sattach::layout(job, step, spank.job_uid()?)?;
    let took = start.elapsed();
    let (map, hosts) = component.into_map(job, step)?;
    let here = map
        .runs
        .counts(map.hosts.len())
        .get(spank.node_id()? as usize)
        .copied();
    if map.runs.len() != spank.total_task_count()? || here != Some(spank.local_task_count()?) {
        return Err(Error::new(format!(
            "slurmctld's layout of step {job}.{step} is not the one this node runs"
        )));
    }
    log::debug!(
        "task map of async step {job}.{step} from sattach in {} ms",
        took.as_millis()
    );
    Ok((map, hosts))
}

/// srun's checks of a step before launch (core::check_before_launch), on
/// the map: the frameworks that pass them (None: none is left). Where they
/// refuse, the frameworks the step only inherited are left out, as srun
/// leaves them out, and what the step asked of srun itself must pass alone.
fn check_before_launch(
    spank: &Spank,
    said: &Said,
    map: &TaskMap,
    hosts: &str,
) -> Result<Option<Frameworks>> {
    let command = spank.job_argv().ok();
    let resv_ports = OnHost(spank).var("SLURM_STEP_RESV_PORTS")?;
    let most_local = map
        .runs
        .counts(map.hosts.len())
        .into_iter()
        .max()
        .unwrap_or(0);
    let launch = core::Launch {
        tasks: map.runs.len(),
        nodelist: Some(hosts),
        nodes: Some(map.hosts.len() as u32),
        resv_ports: resv_ports.as_deref(),
        most_local: Some(most_local),
        command: command.as_deref(),
        components: None,
    };
    let check = |frameworks: Frameworks| {
        let mut settings = said.settings.clone();
        settings.frameworks = frameworks;
        core::check_before_launch(&settings, &launch)
    };
    let all = said.settings.frameworks;
    let e = match check(all) {
        Ok(()) => return Ok(Some(all)),
        Err(e) => e,
    };
    let rest = all.without(said.inherited);
    if rest == all {
        return Err(refusal(e));
    }
    log::warn!("{e}; the frameworks inherited from the job are not applied to this async step");
    if rest.is_empty() {
        return Ok(None);
    }
    check(rest).map_err(refusal)?;
    Ok(Some(rest))
}
