//! The facts about one task that the plugin reads from Slurm, exactly as
//! slurmstepd hands them to the task (the CLI twin reads the same names from
//! its own environment).

use super::error::{Error, Result, bail, shown};
use super::gpus;
use super::hostlist::HostList;
use super::layout::Distribution;
use super::number::parse_u32;
use super::settings::Settings;
use super::task_map::{self, Found, TaskMap, Verdict};
use super::{MAX_TASKS, tasks_per_node};

/// Components a heterogeneous step may have (Slurm's own limit is 128).
const MAX_HET_COMPONENTS: u32 = 128;

/// Where the facts come from: slurmstepd's view of the task (the plugin) or
/// the process environment (the CLI). The node-reading methods are called
/// only when the step needs them.
pub trait Source {
    /// A variable of the task's environment.
    fn var(&mut self, name: &str) -> Result<Option<String>>;
    /// The number of GPUs the node has.
    fn gpu_count(&mut self) -> Result<u32>;
    /// A file named by the user (SLURM_HOSTFILE), read as the user.
    fn read_file(&mut self, path: &str) -> Result<String>;
    /// The task's job and step ids. The plugin asks Slurm (S_JOB_ID,
    /// S_JOB_STEPID), which no user can forge; by default they are read from
    /// SLURM_JOB_ID and SLURM_STEP_ID.
    fn job_step(&mut self) -> Result<Option<(u32, u32)>> {
        let job = self.var("SLURM_JOB_ID")?;
        let step = self.var("SLURM_STEP_ID")?;
        Ok(job
            .as_deref()
            .and_then(parse_u32)
            .zip(step.as_deref().and_then(parse_u32)))
    }
    /// Whether this Slurm fills the nodes of a block distribution in
    /// topology order (25.05 on; the plugin knows it from the headers it was
    /// built with). Then, without srun's map, a task reads
    /// SLURM_TOPOLOGY_ADDR_PATTERN to refuse what it cannot rebuild.
    fn blocks_follow_topology(&self) -> bool {
        false
    }
}

/// One task's facts, parsed: malformed values are refused here, with the
/// variable's name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Step {
    /// SLURM_PROCID: the global rank (het-aware, unlike S_TASK_GLOBAL_ID).
    pub procid: Option<u32>,
    /// SLURM_STEP_NUM_TASKS.
    pub num_tasks: Option<u32>,
    /// SLURM_STEP_NODELIST: sorted by Slurm, not in rank order.
    pub hosts: Option<HostList>,
    /// SLURM_STEP_TASKS_PER_NODE, in node-list order.
    pub tasks_per_node: Option<Vec<u32>>,
    /// SLURM_DISTRIBUTION (set only with `srun -m`) and SLURM_DIST_PLANESIZE;
    /// read only without srun's map.
    pub distribution: Distribution,
    /// SLURM_NODEID: this node's index in the node list.
    pub node_id: Option<u32>,
    /// SLURM_GTIDS: the global ids of the tasks on this node, the ground truth.
    pub gtids: Option<Vec<u32>>,
    /// SLURM_STEP_RESV_PORTS, as Slurm writes it (read by ports::ports).
    pub resv_ports: Option<String>,
    /// CUDA_VISIBLE_DEVICES as Slurm's gres set it (read by gpus).
    pub cuda_visible_devices: Option<String>,
    /// SLURMD_TRES_BIND is set: Slurm already bound GPUs per task.
    pub gpus_bound_by_slurm: bool,
    /// GPUs found on the node, when nothing else says how many there are.
    pub node_gpus: Option<u32>,
    /// SLURM_JOB_NODELIST_HET_GROUP_k of each component of a heterogeneous
    /// step, in component order (the order its ranks follow); empty otherwise.
    pub het_nodelists: Vec<HostList>,
    /// The hosts of SLURM_HOSTFILE, read for an arbitrary distribution.
    pub hostfile: Option<HostList>,
    /// SLURMD_NODENAME: the node this task runs on, set by slurmd.
    pub nodename: Option<String>,
    /// srun's task map for this very step ([`task_map::VAR`]); a map made for
    /// another step (inherited by a nested srun) is left out.
    pub task_map: Option<TaskMap>,
    /// srun's verdict when it gave no map (None: no word from srun at all).
    pub verdict: Option<Verdict>,
    /// SLURM_TOPOLOGY_ADDR_PATTERN (`node`, or `switch.switch.node` under
    /// topology/tree), read only where Slurm fills the nodes of a block
    /// distribution in topology order ([`Source::blocks_follow_topology`]).
    pub block_topology: Option<String>,
    /// The task's job and step ids ([`Source::job_step`]), read for
    /// `--torch-cluster`: torchrun's rendezvous id.
    pub job_step: Option<(u32, u32)>,
}

impl Step {
    /// Reads the step from `source`.
    pub fn gather(settings: &Settings, source: &mut impl Source) -> Result<Step> {
        let (task_map, verdict) = from_srun(source)?;
        if matches!(verdict, Some(Verdict::Skip | Verdict::Refused)) {
            return Ok(Step {
                verdict,
                ..Step::default()
            });
        }
        let mut step = Step {
            procid: number(source, "SLURM_PROCID")?,
            num_tasks: number(source, "SLURM_STEP_NUM_TASKS")?,
            hosts: source
                .var("SLURM_STEP_NODELIST")?
                .map(|list| hosts(&list, "SLURM_STEP_NODELIST"))
                .transpose()?,
            tasks_per_node: source
                .var("SLURM_STEP_TASKS_PER_NODE")?
                .map(|text| tasks_per_node::parse(&text, MAX_TASKS as usize))
                .transpose()?,
            distribution: Distribution::Block,
            node_id: number(source, "SLURM_NODEID")?,
            gtids: source.var("SLURM_GTIDS")?.map(|g| gtids(&g)).transpose()?,
            resv_ports: source.var("SLURM_STEP_RESV_PORTS")?,
            cuda_visible_devices: source.var("CUDA_VISIBLE_DEVICES")?,
            gpus_bound_by_slurm: source.var("SLURMD_TRES_BIND")?.is_some(),
            node_gpus: None,
            het_nodelists: Vec::new(),
            hostfile: None,
            nodename: source.var("SLURMD_NODENAME")?,
            task_map,
            verdict,
            block_topology: None,
            job_step: None,
        };
        if settings.frameworks.torch {
            step.job_step = source.job_step()?;
        }
        // Without srun's map, the layout is rebuilt from variables a user
        // could also set: each is only a hint, checked against SLURM_GTIDS
        // and SLURMD_NODENAME. With the map none of them is read.
        if step.task_map.is_none() {
            let dist = source.var("SLURM_DISTRIBUTION")?;
            let plane = source.var("SLURM_DIST_PLANESIZE")?;
            step.distribution = Distribution::from_env(dist.as_deref(), plane.as_deref())?;
            step.het_nodelists = het_nodelists(source)?;
            if source.blocks_follow_topology() {
                step.block_topology = source.var("SLURM_TOPOLOGY_ADDR_PATTERN")?;
            }
            if step.distribution == Distribution::Arbitrary && step.het_nodelists.is_empty() {
                let Some(path) = source.var("SLURM_HOSTFILE")? else {
                    bail!(
                        "the layout of an arbitrary distribution is only known from SLURM_HOSTFILE, which is not set"
                    );
                };
                step.hostfile = Some(hostfile_hosts(&source.read_file(&path)?)?);
            }
        }
        if gpus::needs_probe(
            settings,
            step.cuda_visible_devices.as_deref(),
            step.gpus_bound_by_slurm,
        ) {
            step.node_gpus = Some(source.gpu_count()?);
        }
        Ok(step)
    }
}

/// The variable `name` as a plain count.
fn number(source: &mut impl Source, name: &str) -> Result<Option<u32>> {
    match source.var(name)? {
        None => Ok(None),
        Some(text) => match parse_u32(&text) {
            Some(n) => Ok(Some(n)),
            None => bail!("{name} is {}, not a number", shown(&text)),
        },
    }
}

/// A host list named by the variable `name`.
fn hosts(list: &str, name: &str) -> Result<HostList> {
    HostList::parse(list, MAX_TASKS as usize).map_err(|e| Error::new(format!("{name}: {e}")))
}

/// SLURM_GTIDS: comma-separated task ids.
fn gtids(text: &str) -> Result<Vec<u32>> {
    text.split(',')
        .take(MAX_TASKS as usize + 1)
        .map(|id| match parse_u32(id) {
            Some(n) => Ok(n),
            None => bail!("SLURM_GTIDS is {}, not a list of task ids", shown(text)),
        })
        .collect()
}

/// SLURM_HOSTFILE: one host name or hostlist per line, `#` comments.
fn hostfile_hosts(text: &str) -> Result<HostList> {
    let lines: Vec<&str> = text
        .lines()
        .map(|l| l.split('#').next().unwrap_or_default().trim())
        .filter(|l| !l.is_empty())
        .collect();
    hosts(&lines.join(","), "SLURM_HOSTFILE")
}

/// srun's map or verdict for this step, if srun left one.
fn from_srun(source: &mut impl Source) -> Result<(Option<TaskMap>, Option<Verdict>)> {
    let Some(text) = source.var(task_map::VAR)? else {
        return Ok((None, None));
    };
    let Some((job, step)) = source.job_step()? else {
        bail!(
            "{} is set but the task's job and step ids are unknown",
            task_map::VAR
        );
    };
    Ok(match TaskMap::decode(&text, job, step)? {
        Found::Ours(map) => (Some(map), None),
        Found::Verdict(v) => (None, Some(v)),
        Found::Other => (None, None),
    })
}

/// The node list of each component of a heterogeneous step (Slurm 22.05 says
/// PACK where later releases say HET).
fn het_nodelists(source: &mut impl Source) -> Result<Vec<HostList>> {
    let size = match source.var("SLURM_HET_SIZE")? {
        Some(n) => n,
        None => match source.var("SLURM_PACK_SIZE")? {
            Some(n) => n,
            None => return Ok(Vec::new()),
        },
    };
    let size = match parse_u32(&size) {
        Some(n @ 1..=MAX_HET_COMPONENTS) => n,
        _ => bail!("SLURM_HET_SIZE is {}, not a component count", shown(&size)),
    };
    // The components share one budget of names: a forged variable per
    // component must not multiply what a task may expand.
    let mut left = MAX_TASKS as usize;
    let mut lists = Vec::with_capacity(size as usize);
    for k in 0..size {
        let het = format!("SLURM_JOB_NODELIST_HET_GROUP_{k}");
        let list = match source.var(&het)? {
            Some(list) => list,
            None => match source.var(&format!("SLURM_JOB_NODELIST_PACK_GROUP_{k}"))? {
                Some(list) => list,
                None => bail!("heterogeneous step without {het}"),
            },
        };
        let hosts = HostList::parse(&list, left).map_err(|e| Error::new(format!("{het}: {e}")))?;
        left -= hosts.len();
        lists.push(hosts);
    }
    Ok(lists)
}
