//! A heterogeneous step as one concept, for srun and the tasks alike: the
//! job's variables (SLURM_HET_SIZE, SLURM_JOB_ID_HET_GROUP_k,
//! SLURM_JOB_NODELIST_HET_GROUP_k; Slurm 22.05 says PACK where later releases
//! say HET), one reader each; its components; its leader; and its refusals.
//! What needs slurmctld (each component's layout, whether a neighbouring job
//! runs this srun's step) stays in srun.

use super::distribution::{self, Distribution};
use super::error::{Error, Result, bail, shown};
use super::hostlist::HostList;
use super::limits::MAX_NODES;
use super::number::parse_u32;
use super::source::Source;
use super::task_map::TaskMap;

/// Components a heterogeneous job may have (Slurm's own limit is 128).
pub const MAX_HET_COMPONENTS: u32 = 128;

/// The number of components of a heterogeneous job (None: not one), from
/// SLURM_HET_SIZE (Slurm 22.05 says PACK where later releases say HET).
pub fn het_size(source: &mut impl Source) -> Result<Option<u32>> {
    let Some(size) = het_var(source, "SLURM_HET_SIZE", "SLURM_PACK_SIZE")? else {
        return Ok(None);
    };
    match parse_u32(&size) {
        Some(n @ 1..=MAX_HET_COMPONENTS) => Ok(Some(n)),
        _ => bail!("SLURM_HET_SIZE is {}, not a component count", shown(&size)),
    }
}

/// Component `k`'s job id, SLURM_JOB_ID_HET_GROUP_k.
pub fn het_job_id(source: &mut impl Source, k: u32) -> Result<u32> {
    let het = format!("SLURM_JOB_ID_HET_GROUP_{k}");
    let value = het_var(source, &het, &format!("SLURM_JOB_ID_PACK_GROUP_{k}"))?;
    match value.as_deref().map(|v| (v, parse_u32(v))) {
        Some((_, Some(job))) => Ok(job),
        Some((v, None)) => bail!("{het} is {}, not a job id", shown(v)),
        None => bail!("heterogeneous job without {het}"),
    }
}

/// The heterogeneous job's id, when the task's own job (`job_step`) is one
/// of its components: the one id every component's tasks read alike. Only a
/// name for the step (PyTorch's rendezvous id): malformed variables, which
/// srun's map makes harmless elsewhere, give None rather than an error.
pub(crate) fn het_job_id_of(
    source: &mut impl Source,
    job_step: Option<(u32, u32)>,
) -> Result<Option<u32>> {
    let Some((own, _)) = job_step else {
        return Ok(None);
    };
    let Ok(Some(size)) = het_size(source) else {
        return Ok(None);
    };
    let mut first = None;
    for k in 0..size {
        let Ok(id) = het_job_id(source, k) else {
            return Ok(None);
        };
        first = first.or(Some(id));
        if id == own {
            return Ok(first);
        }
    }
    Ok(None)
}

/// Component `k`'s node list, SLURM_JOB_NODELIST_HET_GROUP_k. The components
/// share one `budget` of names: a forged variable per component must not
/// multiply what a task may expand.
pub fn het_nodelist(source: &mut impl Source, k: u32, budget: &mut usize) -> Result<HostList> {
    let het = format!("SLURM_JOB_NODELIST_HET_GROUP_{k}");
    let Some(list) = het_var(source, &het, &format!("SLURM_JOB_NODELIST_PACK_GROUP_{k}"))? else {
        bail!("heterogeneous step without {het}");
    };
    let hosts = HostList::parse(&list, *budget).map_err(|e| Error::new(format!("{het}: {e}")))?;
    *budget -= hosts.len();
    Ok(hosts)
}

fn het_var(source: &mut impl Source, het: &str, pack: &str) -> Result<Option<String>> {
    match source.var(het)? {
        Some(v) => Ok(Some(v)),
        None => source.var(pack),
    }
}

/// The node list of each component of a heterogeneous step, in component
/// order; empty otherwise.
pub(crate) fn het_nodelists(source: &mut impl Source) -> Result<Vec<HostList>> {
    let Some(size) = het_size(source)? else {
        return Ok(Vec::new());
    };
    let mut budget = MAX_NODES as usize;
    (0..size)
        .map(|k| het_nodelist(source, k, &mut budget))
        .collect()
}

/// The nodes whose host-template names srun resolves before a
/// heterogeneous step of `components` components exists (None: the job is
/// not a heterogeneous one, or the step has one component, which srun's
/// hand-off reaches whole): every component's node list, in component
/// order, each node once. srun's early word is all that reaches the
/// components its hand-off does not, and which components the step runs on
/// is not known before slurmctld creates it: each component's nodes are
/// resolved over its own list, all of them.
pub fn early_template_hosts(
    source: &mut impl Source,
    components: u32,
) -> Result<Option<Vec<String>>> {
    if components < 2 {
        return Ok(None);
    }
    let lists = het_nodelists(source)?;
    if lists.len() < 2 {
        return Ok(None);
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut hosts = Vec::new();
    for list in &lists {
        for host in list.iter() {
            if seen.insert(host) {
                hosts.push(host.to_string());
            }
        }
    }
    Ok(Some(hosts))
}

/// The node list of the component of a heterogeneous job whose job id is
/// `job` (the job of a step of one component, `--het-group=1`): its
/// SLURM_JOB_NODELIST_HET_GROUP_k. None: not a heterogeneous job, or `job`
/// none of its components. srun's own SLURM_JOB_NODELIST is component 0's
/// whatever component the step runs on.
pub fn component_nodelist(source: &mut impl Source, job: u32) -> Result<Option<HostList>> {
    let Some(size) = het_size(source)? else {
        return Ok(None);
    };
    for k in 0..size {
        if het_job_id(source, k)? == job {
            let mut budget = MAX_NODES as usize;
            return het_nodelist(source, k, &mut budget).map(Some);
        }
    }
    Ok(None)
}

/// A component of a heterogeneous step that srun's hand-off did not reach
/// and that lacks the job's heterogeneous variables.
pub const NO_HET_VARIABLES: &str = "this component of a heterogeneous step has neither srun's task map nor the job's SLURM_JOB_NODELIST_HET_GROUP_k (srun started outside the job, with --jobid, or a heterogeneous step in a plain allocation): its layout cannot be known";

/// The refusal of a heterogeneous step srun was started for from outside
/// its job (`srun --jobid=J --het-group=0,1` from a login shell): neither
/// srun nor the components its word does not reach have the job's
/// heterogeneous variables, so no one can lay the step out (within Error's
/// 300 characters).
pub const OUTSIDE_HET: &str = "a heterogeneous step, but srun was started outside the job (--jobid): its environment lacks the job's SLURM_JOB_NODELIST_HET_GROUP_k, so srun cannot learn the other components' layouts; run this srun inside the job (batch script, salloc shell)";

/// A task of an `srun --async` step (Slurm 26.05) whose layout slurmstepd
/// could not get from slurmctld (srun returns once the step is submitted
/// and runs no `local_user_init`, so it hands the tasks no task map): the
/// start of the refusal, the reason after it (within Error's 300
/// characters).
pub const ASYNC_STEP: &str = "an srun --async step (srun hands it no task map) whose layout slurmstepd could not get from slurmctld, so it cannot be known here";

/// Only srun's early word, and the node cannot tell which case (a source
/// without Slurm's component task count: the CLI).
pub const EARLY_ONLY: &str = "srun's task map did not reach this task (an srun --async step, or a component of a heterogeneous step without the job's SLURM_JOB_NODELIST_HET_GROUP_k): its layout cannot be known";

/// Which step has only srun's early word ([`early_case`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EarlyCase {
    /// A component of a heterogeneous step, rebuilt from the job's
    /// heterogeneous variables.
    Het,
    /// A component of a heterogeneous step without them: refused.
    HetWithoutVariables,
    /// An `srun --async` step: slurmstepd asks slurmctld for its layout.
    Async,
    /// The node cannot tell (no Slurm task count: the CLI).
    Unknown,
}

/// The case of a step srun's hand-off did not reach (only its early word
/// did), whose task count is `num_tasks` (SLURM_STEP_NUM_TASKS): a
/// component of a heterogeneous step (the job's heterogeneous variables
/// set, or slurmstepd's own task count, the component's, fewer than the
/// step's), else an `srun --async` step. The counts only pick the case:
/// an async step's layout then comes from slurmctld alone, and a
/// component's is checked against Slurm's own ids in every task.
pub fn early_case(source: &mut impl Source, num_tasks: Option<u32>) -> Result<EarlyCase> {
    if het_size(source).ok().flatten().is_some() {
        return Ok(EarlyCase::Het);
    }
    Ok(match source.component_tasks()? {
        None => EarlyCase::Unknown,
        Some(n) if Some(n) == num_tasks => EarlyCase::Async,
        Some(_) => EarlyCase::HetWithoutVariables,
    })
}

/// A step srun's hand-off did not reach ([`early_case`]): a component of a
/// heterogeneous step is rebuilt from the job's heterogeneous variables; any
/// other is refused naming its case (an async step reaches this only where
/// slurmstepd did not get its layout).
pub fn rebuildable(source: &mut impl Source, num_tasks: Option<u32>) -> Result<()> {
    match early_case(source, num_tasks)? {
        EarlyCase::Het => Ok(()),
        EarlyCase::Unknown => bail!("{EARLY_ONLY}"),
        EarlyCase::Async => bail!("{ASYNC_STEP}"),
        EarlyCase::HetWithoutVariables => bail!("{NO_HET_VARIABLES}"),
    }
}

/// The leader's job of a heterogeneous job whose component `job`
/// slurmctld records with `het_job_id` = `recorded` (its own record of the
/// job, never a variable: srun's environment is the user's to forge): the
/// leader when it is another, earlier job of the same heterogeneous job
/// (its components have consecutive ids after the leader's); None for a job
/// that is no component (0, NO_VAL) or is the leader itself.
pub fn leader(job: u32, recorded: u32) -> Option<u32> {
    (recorded != 0 && recorded < job && job - recorded < MAX_HET_COMPONENTS).then_some(recorded)
}

/// The job id and node list of each component of a heterogeneous job, in
/// component order (None: not a heterogeneous step).
pub fn components(source: &mut impl Source) -> Result<Option<Vec<(u32, HostList)>>> {
    let Some(size) = het_size(source)? else {
        return Ok(None);
    };
    let mut budget = MAX_NODES as usize;
    (0..size)
        .map(|k| {
            Ok((
                het_job_id(source, k)?,
                het_nodelist(source, k, &mut budget)?,
            ))
        })
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

/// Whether srun's environment shows a step of several components of a
/// heterogeneous job, which srun's word on the step reaches in one only:
/// SLURM_HET_SIZE of 2 or more, and SLURM_NTASKS (the whole step's tasks)
/// more than this component's `own_tasks` (unknown either side counts as
/// more). A `--het-group=1` step is one component: srun's word reaches it
/// whole.
pub fn several_components(source: &mut impl Source, own_tasks: Option<u32>) -> bool {
    if !matches!(het_size(source), Ok(Some(2..))) {
        return false;
    }
    match (all_tasks(source), own_tasks) {
        (Some(all), Some(own)) => all > own,
        _ => true,
    }
}

/// Whether srun's environment hints at a heterogeneous step it does not
/// describe: SLURM_NTASKS (Slurm sets it to the whole step's tasks) more
/// than this component's `tasks`, and no heterogeneous variables (an srun
/// started outside the job). Only slurmctld can tell (see srun).
pub fn undescribed(source: &mut impl Source, tasks: u32) -> bool {
    let total = all_tasks(source).unwrap_or(0);
    total > tasks && matches!(het_size(source), Ok(None))
}

/// SLURM_NTASKS as a count (None: unset or not one).
fn all_tasks(source: &mut impl Source) -> Option<u32> {
    source
        .var("SLURM_NTASKS")
        .ok()
        .flatten()
        .and_then(|t| parse_u32(&t))
}

/// srun's check of a heterogeneous step. Slurm runs srun's
/// `local_user_init` once for the whole step and hands what it sets to one
/// component's tasks only (srun.c, `_launch_one_app`: "Run pre-launch once
/// for entire hetjob"); the other components rebuild the layout, in blocks
/// over the components' node lists in component order. This refuses a step
/// whose real map differs from that rebuild, before anything runs.
pub fn check_het_rebuild(map: &TaskMap, het_nodelists: &[HostList]) -> Result<()> {
    let counts = map.runs.counts(map.hosts.len());
    let (hosts, counts) = distribution::het_order(&map.hosts, &counts, het_nodelists)?;
    let rebuilt = distribution::place(&counts, Distribution::Block);
    for (rank, (p, node)) in rebuilt.iter().zip(map.runs.iter()).enumerate() {
        let (guess, real) = (hosts.get(p.node as usize), map.hosts.get(node as usize));
        if guess != real {
            bail!(
                "rank {rank} of this heterogeneous step runs on {real}, not on {guess} as the components that srun's task map cannot reach would take it: Slurm hands srun's variables to one component only, so lay out every component in blocks (-m block) or run the components as separate steps"
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::Given;

    fn task(list: &[(&str, &str)]) -> Given {
        Given::vars(list.iter().copied())
    }

    /// Only srun's early word: a task of a heterogeneous job is rebuilt;
    /// otherwise refused with the case Slurm's own task count tells (the
    /// whole step's: an async step; fewer: a heterogeneous component), and
    /// with both cases named where the node has no such count.
    #[test]
    fn an_early_word_alone_is_refused_naming_its_case() {
        let step = [("SLURM_STEP_NUM_TASKS", "6")];
        let with = |count: Option<u32>, vars: &[(&str, &str)]| {
            let mut given = task(vars);
            given.component_tasks = count;
            rebuildable(&mut given, Some(6)).map_err(|e| e.message().to_string())
        };
        assert_eq!(with(Some(6), &step), Err(ASYNC_STEP.to_string()));
        assert_eq!(with(Some(2), &step), Err(NO_HET_VARIABLES.to_string()));
        assert_eq!(with(None, &step), Err(EARLY_ONLY.to_string()));
        let het = [("SLURM_STEP_NUM_TASKS", "6"), ("SLURM_HET_SIZE", "2")];
        assert_eq!(with(Some(2), &het), Ok(()));
        let case = |count: Option<u32>, vars: &[(&str, &str)]| {
            let mut given = task(vars);
            given.component_tasks = count;
            early_case(&mut given, Some(6)).unwrap()
        };
        assert_eq!(case(Some(6), &step), EarlyCase::Async);
        assert_eq!(case(Some(2), &step), EarlyCase::HetWithoutVariables);
        assert_eq!(case(None, &step), EarlyCase::Unknown);
        assert_eq!(case(Some(6), &het), EarlyCase::Het);
        for text in [ASYNC_STEP, EARLY_ONLY, NO_HET_VARIABLES] {
            assert_eq!(Error::new(text).message(), text, "within 300 characters");
        }
        assert!(ASYNC_STEP.contains("--async") && !ASYNC_STEP.contains("heterogeneous"));
    }

    /// Every component's task finds the same heterogeneous job id (the first
    /// component's), and only when its own job is one of the components.
    #[test]
    fn het_job_id_is_the_first_components() {
        let vars = [
            ("SLURM_HET_SIZE", "2"),
            ("SLURM_JOB_ID_HET_GROUP_0", "15"),
            ("SLURM_JOB_ID_HET_GROUP_1", "16"),
        ];
        for own in [15, 16] {
            assert_eq!(
                het_job_id_of(&mut task(&vars), Some((own, 0))),
                Ok(Some(15))
            );
        }
        assert_eq!(het_job_id_of(&mut task(&vars), Some((17, 0))), Ok(None));
        assert_eq!(het_job_id_of(&mut task(&vars), None), Ok(None));
        assert_eq!(het_job_id_of(&mut task(&[]), Some((15, 0))), Ok(None));
        let forged = [("SLURM_HET_SIZE", "x"), ("SLURM_JOB_ID_HET_GROUP_0", "15")];
        assert_eq!(het_job_id_of(&mut task(&forged), Some((15, 0))), Ok(None));
    }

    /// srun and slurmstepd read the het variables with the same readers:
    /// srun once took `+2` (str::parse) where the tasks refused it.
    #[test]
    fn het_variables_have_one_reader() {
        for bad in ["+2", " 2", "0", "129", "two"] {
            let e = het_size(&mut task(&[("SLURM_HET_SIZE", bad)])).unwrap_err();
            assert!(
                e.to_string().contains("not a component count"),
                "{bad}: {e}"
            );
        }
        assert_eq!(
            het_size(&mut task(&[("SLURM_PACK_SIZE", "2")])),
            Ok(Some(2))
        );
        assert_eq!(het_size(&mut task(&[])), Ok(None));
        let e = het_job_id(&mut task(&[("SLURM_JOB_ID_HET_GROUP_1", "+7")]), 1).unwrap_err();
        assert!(e.to_string().contains("not a job id"), "{e}");
        let vars = [
            ("SLURM_JOB_NODELIST_HET_GROUP_0", "n[1-3]"),
            ("SLURM_JOB_NODELIST_PACK_GROUP_1", "n[4-5]"),
        ];
        let mut budget = 4;
        assert_eq!(
            het_nodelist(&mut task(&vars), 0, &mut budget)
                .unwrap()
                .len(),
            3
        );
        assert_eq!(budget, 1);
        // The components share one budget of names.
        let e = het_nodelist(&mut task(&vars), 1, &mut budget).unwrap_err();
        assert!(e.to_string().contains("more than 1 hosts"), "{e}");
    }

    fn two_components() -> Vec<(&'static str, &'static str)> {
        vec![
            ("SLURM_HET_SIZE", "2"),
            ("SLURM_JOB_ID_HET_GROUP_0", "15"),
            ("SLURM_JOB_ID_HET_GROUP_1", "16"),
            ("SLURM_JOB_NODELIST_HET_GROUP_0", "node1"),
            ("SLURM_JOB_NODELIST_HET_GROUP_1", "node[2-3]"),
            // srun's own: component 0's, whatever component the step is.
            ("SLURM_JOB_NODELIST", "node1"),
        ]
    }

    /// A step of one component of a heterogeneous job (`--het-group=1`)
    /// finds its own component's nodes by its job id, never component 0's
    /// (SLURM_JOB_NODELIST in srun's environment).
    #[test]
    fn a_components_nodes_are_found_by_its_job_id() {
        let vars = two_components();
        let list = |job| {
            component_nodelist(&mut task(&vars), job)
                .unwrap()
                .map(|l| l.iter().collect::<Vec<_>>().join(","))
        };
        assert_eq!(list(16).as_deref(), Some("node2,node3"));
        assert_eq!(list(15).as_deref(), Some("node1"));
        assert_eq!(list(17), None, "not a component");
        assert_eq!(component_nodelist(&mut task(&[]), 15), Ok(None));
        // A component without its node list is an error, not another's.
        let e = component_nodelist(&mut task(&vars[..4]), 16).unwrap_err();
        assert!(
            e.to_string().contains("SLURM_JOB_NODELIST_HET_GROUP_1"),
            "{e}"
        );
    }

    /// Before a step of several components exists, srun resolves the names
    /// of every component's nodes, each once; a step of one component, or
    /// a job that is not heterogeneous, resolves nothing early.
    #[test]
    fn early_names_cover_every_components_own_nodes() {
        let vars = two_components();
        assert_eq!(
            early_template_hosts(&mut task(&vars), 2).unwrap(),
            Some(vec!["node1".into(), "node2".into(), "node3".into()])
        );
        assert_eq!(early_template_hosts(&mut task(&vars), 1).unwrap(), None);
        let plain = [("SLURM_JOB_NODELIST", "node[1-3]")];
        assert_eq!(early_template_hosts(&mut task(&plain), 2).unwrap(), None);
        let mut overlapping = vars.clone();
        overlapping[4].1 = "node[1-2]";
        assert_eq!(
            early_template_hosts(&mut task(&overlapping), 2).unwrap(),
            Some(vec!["node1".into(), "node2".into()])
        );
    }

    /// slurmctld's het_job_id names another job only as a heterogeneous
    /// job's leader: an earlier job close before this one; the leader's own
    /// record (its own id), a plain job's (0) or NO_VAL name none.
    #[test]
    fn only_a_near_earlier_job_is_a_leader() {
        assert_eq!(leader(30, 28), Some(28));
        assert_eq!(leader(30, 30), None, "the leader itself");
        assert_eq!(leader(30, 31), None, "a later job");
        assert_eq!(leader(300, 1), None, "far before");
        assert_eq!(leader(30, 0), None, "no heterogeneous job");
        assert_eq!(leader(30, u32::MAX - 1), None, "NO_VAL");
    }
}
