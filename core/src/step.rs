//! The facts about one task that the plugin reads from Slurm, exactly as
//! slurmstepd hands them to the task (the CLI twin reads the same names from
//! its own environment).

use super::distribution::Distribution;
use super::error::{Error, Result, bail, shown};
use super::gpus::bind::GpuBind;
use super::gpus::devices::Visible;
use super::handoff::{self, Decision, Handoff, Verdict};
use super::hostlist::HostList;
use super::interfaces::NodeNetwork;
use super::limits::{MAX_NODES, MAX_TASKS, check_size};
use super::network;
use super::number::parse_u32;
use super::settings::Settings;
use super::source::{Probe, Source};
use super::task_map::TaskMap;
use super::tasks_per_node;

/// Components a heterogeneous step may have (Slurm's own limit is 128).
const MAX_HET_COMPONENTS: u32 = 128;

/// What srun said of the step's layout, in its hand-off ([`handoff::VAR`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum FromSrun {
    /// The step's task map.
    Map(TaskMap),
    /// srun could not get the map: the tasks rebuild the layout.
    NoMap,
    /// No word from srun (the CLI, or a map made for another step, which a
    /// nested srun inherits): the layout is rebuilt.
    #[default]
    Nothing,
}

/// What [`Step::gather`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gathered {
    /// srun left the step alone (it inherited a spec that does not fit it).
    Skip,
    /// srun refused the step and said why: every task fails.
    Refused,
    /// A step to lay out.
    Step(Box<Step>),
}

impl Gathered {
    /// The step, or an error for a step that gets no variables.
    pub fn step(self) -> Result<Step> {
        match self {
            Gathered::Step(step) => Ok(*step),
            Gathered::Skip => bail!("srun left this step alone"),
            Gathered::Refused => bail!("srun refused this step"),
        }
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
    /// The device variables as Slurm's gres set them (CUDA_VISIBLE_DEVICES,
    /// ROCR_VISIBLE_DEVICES, ZE_AFFINITY_MASK, GPU_DEVICE_ORDINAL).
    pub visible_gpus: Visible,
    /// Slurm's GPU binding of the step's tasks (SLURMD_TRES_BIND).
    pub gpu_bind: Option<GpuBind>,
    /// SLURM_GPUS_ON_NODE: the step's GPUs on this node, a count.
    pub gpus_on_node: Option<u32>,
    /// GPUs found on the node, when nothing else says how many there are.
    pub node_gpus: Option<u32>,
    /// SLURM_JOB_NODELIST_HET_GROUP_k of each component of a heterogeneous
    /// step, in component order (the order its ranks follow); empty otherwise.
    pub het_nodelists: Vec<HostList>,
    /// The hosts of SLURM_HOSTFILE, read for an arbitrary distribution.
    pub hostfile: Option<HostList>,
    /// SLURMD_NODENAME: the node this task runs on, set by slurmd.
    pub nodename: Option<String>,
    /// What srun said of this very step.
    pub from_srun: FromSrun,
    /// The task's job and step ids ([`Source::job_step`]).
    pub job_step: Option<(u32, u32)>,
    /// The heterogeneous job's id (SLURM_JOB_ID_HET_GROUP_0, its first
    /// component's), the same in every component's tasks, where the task's
    /// own job id is one of the components' (each component has its own).
    pub het_job_id: Option<u32>,
    /// SLURM_TOPOLOGY_ADDR_PATTERN (`node`, or `switch.switch.node` under
    /// topology/tree), read only where Slurm fills the nodes of a block
    /// distribution in topology order ([`Source::blocks_follow_topology`]).
    pub block_topology: Option<String>,
    /// This node's interface on the step's network, if the step names one
    /// ([`network::for_node`]).
    pub network: Option<NodeNetwork>,
}

/// The variable that names one run of a step: the job (a heterogeneous
/// job's first component), the step and the job's restart count, the same
/// in every task of the step. Scripts key logs and checkpoints on it.
pub const RUN_ID_VAR: &str = "TF_CLUSTER_RUN_ID";

/// The refusal of a heterogeneous step srun was started for from outside
/// its job (`srun --jobid=J --het-group=0,1` from a login shell): neither
/// srun nor the components its word does not reach have the job's
/// heterogeneous variables, so no one can lay the step out (within Error's
/// 300 characters).
pub const OUTSIDE_HET: &str = "a heterogeneous step, but srun was started outside the job (--jobid): its environment lacks the job's SLURM_JOB_NODELIST_HET_GROUP_k, so srun cannot learn the other components' layouts; run this srun inside the job (batch script, salloc shell)";

/// The job's restart count as srun reads it: SLURM_RESTART_COUNT, which
/// Slurm sets (only when non-zero) in a requeued job's batch step, and every
/// srun of its script inherits. 0 without it.
pub fn restart_count(source: &mut impl Source) -> Result<u32> {
    Ok(number(source, "SLURM_RESTART_COUNT")?.unwrap_or(0))
}

impl Step {
    /// The id of this run of the step, after `restarts` restarts of the job:
    /// `JOB.STEP` for its first incarnation, `JOB.STEP.rK` after K restarts
    /// (a requeued job keeps its id and starts its step ids at 0 again, so
    /// JOB.STEP alone would repeat). None when the ids are unknown.
    pub fn run_id(&self, restarts: u32) -> Option<String> {
        let (job, step) = self.job_step?;
        let job = self.het_job_id.unwrap_or(job);
        Some(match restarts {
            0 => format!("{job}.{step}"),
            k => format!("{job}.{step}.r{k}"),
        })
    }

    /// Reads the step from `source`, with srun's hand-off read there too.
    pub fn gather(settings: &Settings, source: &mut (impl Source + Probe)) -> Result<Gathered> {
        // The step's size before srun's map: nothing larger than the plugin
        // lays out is read further (gather_handed checks it again).
        if let Some(n) = number(source, "SLURM_STEP_NUM_TASKS")? {
            check_size(u64::from(n), 0)?;
        }
        let job_step = source.job_step()?;
        let handoff = handed(source, job_step)?;
        Step::gather_handed(settings, source, handoff)
    }

    /// Reads the step from `source`, with srun's hand-off for this very step
    /// as the caller read and checked it (None: srun said nothing).
    pub fn gather_handed(
        settings: &Settings,
        source: &mut (impl Source + Probe),
        handoff: Option<Handoff>,
    ) -> Result<Gathered> {
        // The step's size first: nothing larger than the plugin lays out is
        // read further.
        let num_tasks = number(source, "SLURM_STEP_NUM_TASKS")?;
        if let Some(n) = num_tasks {
            check_size(u64::from(n), 0)?;
        }
        // The step's node list next: srun's map names the same list, which
        // is then expanded once.
        let nodelist = source.var("SLURM_STEP_NODELIST")?;
        let mut reused = None;
        let (from_srun, handed_network) = match handoff {
            Some(h) => {
                let from_srun = match h.decision {
                    Decision::Verdict(Verdict::Skip) => return Ok(Gathered::Skip),
                    Decision::Verdict(Verdict::Refused) => return Ok(Gathered::Refused),
                    Decision::Verdict(Verdict::None) => FromSrun::NoMap,
                    Decision::Map { map, hosts } => {
                        // srun's map names the step's node list as Slurm
                        // wrote it: the same text is expanded once.
                        if Some(&hosts) == nodelist.as_ref() {
                            reused = Some(map.hosts.clone());
                        }
                        FromSrun::Map(map)
                    }
                };
                (from_srun, Some(h.network))
            }
            None => (FromSrun::Nothing, None),
        };
        let hosts = match reused {
            Some(hosts) => Some(hosts),
            None => nodelist
                .as_deref()
                .map(|list| hosts(list, "SLURM_STEP_NODELIST"))
                .transpose()?,
        };
        let job_step = source.job_step()?;
        let mut step = Step {
            procid: number(source, "SLURM_PROCID")?,
            num_tasks,
            hosts,
            tasks_per_node: source
                .var("SLURM_STEP_TASKS_PER_NODE")?
                .map(|text| tasks_per_node::parse(&text, MAX_NODES as usize))
                .transpose()?,
            distribution: Distribution::Block,
            node_id: number(source, "SLURM_NODEID")?,
            gtids: source.var("SLURM_GTIDS")?.map(|g| gtids(&g)).transpose()?,
            resv_ports: source.var("SLURM_STEP_RESV_PORTS")?,
            visible_gpus: Visible::read(|name| source.var(name))?,
            gpu_bind: source
                .var("SLURMD_TRES_BIND")?
                .and_then(|b| GpuBind::parse(&b)),
            gpus_on_node: number(source, "SLURM_GPUS_ON_NODE")?,
            node_gpus: None,
            het_nodelists: Vec::new(),
            hostfile: None,
            nodename: source.var("SLURMD_NODENAME")?,
            het_job_id: het_job_id_of(source, job_step)?,
            job_step,
            from_srun,
            block_topology: None,
            network: None,
        };
        // Without srun's map, the layout is rebuilt from variables a user
        // could also set: each is only a hint, checked against SLURM_GTIDS
        // and SLURMD_NODENAME. With the map none of them is read.
        if !matches!(step.from_srun, FromSrun::Map(_)) {
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
        if needs_probe(
            settings,
            &step.visible_gpus,
            step.gpu_bind.as_ref(),
            step.gpus_on_node,
        ) {
            step.node_gpus = Some(source.gpu_count()?);
        }
        step.network =
            network::for_node(settings, source, handed_network, step.nodename.as_deref())?;
        Ok(Gathered::Step(Box::new(step)))
    }
}

/// Whether the node's GPUs must be counted: only when GPUs are to be set and
/// neither Slurm nor the settings say how many there are.
/// (SLURM_GPUS_ON_NODE set: Slurm gave the step GPUs but no list, so a
/// count of the node's would name GPUs that may not be the step's.)
pub fn needs_probe(
    settings: &Settings,
    visible: &Visible,
    bind: Option<&GpuBind>,
    gpus_on_node: Option<u32>,
) -> bool {
    settings.auto_set_gpu
        && !bind.is_some_and(GpuBind::per_task)
        && settings.gpus_per_node.is_none()
        && visible.is_unset()
        && gpus_on_node.is_none()
}

/// The variable `name` as a plain count.
pub fn number(source: &mut impl Source, name: &str) -> Result<Option<u32>> {
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
    HostList::parse(list, MAX_NODES as usize).map_err(|e| Error::new(format!("{name}: {e}")))
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

/// srun's hand-off for this step ([`handoff::VAR`]), if srun left one.
/// `job_step`: the task's own ids ([`Source::job_step`]).
pub fn handed(source: &mut impl Source, job_step: Option<(u32, u32)>) -> Result<Option<Handoff>> {
    let Some(text) = source.var(handoff::VAR)?.filter(|t| !t.is_empty()) else {
        return Ok(None);
    };
    let Some((job, step)) = job_step else {
        bail!(
            "{} is set but the task's job and step ids are unknown",
            handoff::VAR
        );
    };
    Handoff::decode(&text, job, step)
}

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
fn het_job_id_of(source: &mut impl Source, job_step: Option<(u32, u32)>) -> Result<Option<u32>> {
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
fn het_nodelists(source: &mut impl Source) -> Result<Vec<HostList>> {
    let Some(size) = het_size(source)? else {
        return Ok(Vec::new());
    };
    let mut budget = MAX_NODES as usize;
    (0..size)
        .map(|k| het_nodelist(source, k, &mut budget))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Vars<'a>(&'a [(&'a str, &'a str)]);

    impl Source for Vars<'_> {
        fn var(&mut self, name: &str) -> Result<Option<String>> {
            Ok(self
                .0
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string()))
        }
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
                het_job_id_of(&mut Vars(&vars), Some((own, 0))),
                Ok(Some(15))
            );
        }
        assert_eq!(het_job_id_of(&mut Vars(&vars), Some((17, 0))), Ok(None));
        assert_eq!(het_job_id_of(&mut Vars(&vars), None), Ok(None));
        assert_eq!(het_job_id_of(&mut Vars(&[]), Some((15, 0))), Ok(None));
        let forged = [("SLURM_HET_SIZE", "x"), ("SLURM_JOB_ID_HET_GROUP_0", "15")];
        assert_eq!(het_job_id_of(&mut Vars(&forged), Some((15, 0))), Ok(None));
    }

    /// srun and slurmstepd read the het variables with the same readers:
    /// srun once took `+2` (str::parse) where the tasks refused it.
    #[test]
    fn het_variables_have_one_reader() {
        for bad in ["+2", " 2", "0", "129", "two"] {
            let e = het_size(&mut Vars(&[("SLURM_HET_SIZE", bad)])).unwrap_err();
            assert!(
                e.to_string().contains("not a component count"),
                "{bad}: {e}"
            );
        }
        assert_eq!(
            het_size(&mut Vars(&[("SLURM_PACK_SIZE", "2")])),
            Ok(Some(2))
        );
        assert_eq!(het_size(&mut Vars(&[])), Ok(None));
        let e = het_job_id(&mut Vars(&[("SLURM_JOB_ID_HET_GROUP_1", "+7")]), 1).unwrap_err();
        assert!(e.to_string().contains("not a job id"), "{e}");
        let vars = [
            ("SLURM_JOB_NODELIST_HET_GROUP_0", "n[1-3]"),
            ("SLURM_JOB_NODELIST_PACK_GROUP_1", "n[4-5]"),
        ];
        let mut budget = 4;
        assert_eq!(
            het_nodelist(&mut Vars(&vars), 0, &mut budget)
                .unwrap()
                .len(),
            3
        );
        assert_eq!(budget, 1);
        // The components share one budget of names.
        let e = het_nodelist(&mut Vars(&vars), 1, &mut budget).unwrap_err();
        assert!(e.to_string().contains("more than 1 hosts"), "{e}");
    }
}
