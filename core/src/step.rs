//! The facts about one task that the plugin reads from Slurm, exactly as
//! slurmstepd hands them to the task (the CLI twin reads the same names from
//! its own environment).

use super::distribution::Distribution;
use super::error::{Error, Result, bail, shown};
use super::gpus::bind::GpuBind;
use super::gpus::bind::Recorded;
use super::gpus::devices::Visible;
use super::handoff::{self, FromSrun, Said};
use super::het::{het_job_id_of, het_nodelists, rebuildable};
use super::hostlist::HostList;
use super::limits::{MAX_NODES, MAX_TASKS, check_size};
use super::network;
use super::number::parse_u32;
use super::secret::Secret;
use super::settings::Frameworks;
use super::settings::Settings;
use super::source::{Probe, Source};
use super::step_kind::{Asked, StepKind};
use super::tasks_per_node;
use crate::addresses::{Network, NodeNetwork};
use crate::step_roles::ENGINE_VARS;

/// What [`Step::gather_handed`] found: srun's verdict on the step, or the step
/// with srun's word applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gathered {
    /// Nothing is set: the step asks for no framework, srun left out every
    /// one it asked for, or srun left the step alone (it inherited a spec
    /// that does not fit it).
    Skip,
    /// srun refused the step and said why: every task fails.
    Refused,
    /// A step to lay out.
    Step(Box<Handed>),
}

/// A step to lay out, with what srun's word says of it beside the step's
/// facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handed {
    /// The step's settings, without the frameworks srun left out.
    pub settings: Settings,
    pub step: Step,
    /// Frameworks the step only inherited (srun's early word: a component
    /// its hand-off did not reach), left out where the step does not fit
    /// them, as srun leaves them out of the components its hand-off reaches.
    pub inherited: Frameworks,
    /// The step's GPU binding as srun recorded it, for a task a container
    /// plugin moved.
    pub recorded_bind: Recorded,
}

impl Gathered {
    /// The step, or an error for a step that gets no variables.
    pub fn step(self) -> Result<Step> {
        self.handed().map(|h| h.step)
    }

    /// The step and srun's word on it, or an error for a step that gets no
    /// variables.
    pub fn handed(self) -> Result<Handed> {
        match self {
            Gathered::Step(handed) => Ok(*handed),
            Gathered::Skip => bail!(
                "no variables for this step (srun left it alone, or left out each framework it asks for)"
            ),
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
    /// The job's restart count (0: its first incarnation), as srun learnt it
    /// from its environment's SLURM_RESTART_COUNT and handed it on.
    pub restart_count: u32,
    /// The task's job and step ids ([`Source::job_step`]).
    pub job_step: Option<(u32, u32)>,
    /// The step's secret, as srun drew it and handed it on (None: no word
    /// from srun).
    pub secret: Option<Secret>,
    /// The heterogeneous job's id (SLURM_JOB_ID_HET_GROUP_0, its first
    /// component's), the same in every component's tasks, where the task's
    /// own job id is one of the components' (each component has its own).
    pub het_job_id: Option<u32>,
    /// SLURM_TOPOLOGY_ADDR_PATTERN (`node`, or `switch.switch.node` under
    /// topology/tree), read only where Slurm fills the nodes of a block
    /// distribution in topology order ([`Source::blocks_follow_topology`]).
    pub block_topology: Option<String>,
    /// topology.conf's blocks as the node reads them (topology/block: an
    /// NVLink domain each), for each task's domain.
    pub nvl_blocks: Option<crate::topology_blocks::Blocks>,
    /// This node's interface on the step's network, if the step names one
    /// ([`network::decision::for_node`]).
    pub network: Option<NodeNetwork>,
    /// This node's address for the inference engines of a step with roles
    /// (VLLM_HOST_IP): its address on the step's network, else the one its
    /// name has in /etc/hosts (None: its name is used).
    pub engine_host: Option<String>,
    /// The engines' variables the step's environment holds (the user's
    /// own, kept).
    pub engine_kept: Vec<String>,
}

/// The variable that names one run of a step: the job (a heterogeneous
/// job's first component), the step and the job's restart count, the same
/// in every task of the step. Scripts key logs and checkpoints on it.
pub const RUN_ID_VAR: &str = "TF_CLUSTER_RUN_ID";

/// The job's restart count as srun reads it: SLURM_RESTART_COUNT, which
/// Slurm sets (only when non-zero) in a requeued job's batch step, and every
/// srun of its script inherits. 0 without it.
pub fn restart_count(source: &mut impl Source) -> Result<u32> {
    Ok(number(source, "SLURM_RESTART_COUNT")?.unwrap_or(0))
}

/// The id of run `restart_count` of step `job`.`step` ([`Step::run_id`]).
pub fn run_id(job: u32, step: u32, restart_count: u32) -> String {
    match restart_count {
        0 => format!("{job}.{step}"),
        k => format!("{job}.{step}.r{k}"),
    }
}

impl Step {
    /// The id of this run of the step: `JOB.STEP` for the job's first
    /// incarnation, `JOB.STEP.rK` after K restarts (a requeued job keeps its
    /// id and starts its step ids at 0 again, so JOB.STEP alone would
    /// repeat). None when the ids are unknown.
    pub fn run_id(&self) -> Option<String> {
        let (job, step) = self.job_step?;
        let job = self.het_job_id.unwrap_or(job);
        Some(run_id(job, step, self.restart_count))
    }

    /// [`Step::gather_handed`] for a step whose settings are `settings`
    /// whatever srun's word says of an inherited `--tf-off` (the CLI, whose
    /// options are the ones given to it; the tests).
    pub fn gather(settings: &Settings, source: &mut (impl Source + Probe)) -> Result<Gathered> {
        Step::gather_handed(source, |_| Ok(Some(settings.clone())))
    }

    /// srun's word to the task ([`StepKind::of`]) applied to the step
    /// `source` shows, for the CLI twin (slurmstepd asks [`StepKind::of`]
    /// itself, then [`Step::gather_said`]). `settings` makes the step's
    /// settings from its options, told whether srun's word says an
    /// inherited `--tf-off` was beaten (None: the step asks for nothing).
    pub fn gather_handed(
        source: &mut (impl Source + Probe),
        settings: impl FnOnce(bool) -> Result<Option<Settings>>,
    ) -> Result<Gathered> {
        Step::num_tasks(source)?;
        let asked = Asked::Known {
            framework: true,
            settings: Box::new(settings),
        };
        let word = source.var(handoff::VAR)?;
        match StepKind::of(word.as_deref(), source.job_step()?, asked)? {
            StepKind::Nothing | StepKind::Plain { .. } | StepKind::Alone { .. } => {
                Ok(Gathered::Skip)
            }
            StepKind::Refused => Ok(Gathered::Refused),
            StepKind::Framework(said) => Step::gather_said(source, *said)
                .map(Box::new)
                .map(Gathered::Step),
        }
    }

    /// The step's task count, within what the plugin lays out: read first
    /// for a framework step (before srun's word), so that nothing larger is
    /// read further.
    pub fn num_tasks(source: &mut impl Source) -> Result<Option<u32>> {
        let num_tasks = number(source, "SLURM_STEP_NUM_TASKS")?;
        if let Some(n) = num_tasks {
            check_size(u64::from(n), 0)?;
        }
        Ok(num_tasks)
    }

    /// The framework step `source` shows, with what srun's word `said` of
    /// it ([`StepKind::Framework`]).
    pub fn gather_said(source: &mut (impl Source + Probe), said: Said) -> Result<Handed> {
        let num_tasks = Step::num_tasks(source)?;
        let job_step = source.job_step()?;
        // No word from srun at all (an srun without the plugin): the job's
        // restart count where srun reads it.
        let restart_count = said
            .restart_count
            .map_or_else(|| restart_count(source), Ok)?;
        if said.early_only {
            rebuildable(source, num_tasks)?;
        }
        let Said {
            settings,
            from_srun,
            map_hosts,
            network: handed_network,
            inherited,
            no_resv_ports,
            recorded_bind,
            secret,
            ..
        } = said;
        let mut step = Step::read(
            source,
            num_tasks,
            job_step,
            (from_srun, map_hosts),
            no_resv_ports,
        )?;
        step.restart_count = restart_count;
        step.secret = secret;
        // Without srun's map, the layout is rebuilt from variables a user
        // could also set: each is only a hint, checked against SLURM_GTIDS
        // and SLURMD_NODENAME. With the map none of them is read.
        if !matches!(step.from_srun, FromSrun::Map(_)) {
            step.read_hints(source)?;
        }
        step.read_node(&settings, source, handed_network)?;
        Ok(Handed {
            settings,
            step,
            inherited,
            recorded_bind,
        })
    }

    /// What only the node can say: its GPU count where the step's GPUs
    /// need it, and the step's network on this node.
    fn read_node(
        &mut self,
        settings: &Settings,
        source: &mut (impl Source + Probe),
        handed_network: Option<Option<Network>>,
    ) -> Result<()> {
        if needs_probe(
            settings,
            &self.visible_gpus,
            self.gpu_bind.as_ref(),
            self.gpus_on_node,
        ) {
            self.node_gpus = Some(source.gpu_count()?);
        }
        // Only where Slurm runs topology/block (its address pattern names
        // blocks): a topology.conf it does not use names no domain.
        let pattern = source.var("SLURM_TOPOLOGY_ADDR_PATTERN")?;
        if pattern.is_some_and(|p| p.split('.').any(|level| level == "block")) {
            self.nvl_blocks = source
                .topology_conf()
                .and_then(|text| crate::topology_blocks::Blocks::parse(&text));
        }
        self.network = network::decision::for_node(
            settings,
            source,
            handed_network,
            self.nodename.as_deref(),
        )?;
        if let Some(roles) = &settings.step_roles {
            self.read_engines(source)?;
            // Roles named by component: the components' nodes tell their tasks.
            if roles.0.iter().all(|r| r.count.is_none()) && self.het_nodelists.is_empty() {
                self.het_nodelists = het_nodelists(source)?;
            }
        }
        Ok(())
    }

    /// What a step with roles gives the inference engines: this node's
    /// address on the step's network, else its name's in /etc/hosts, and
    /// the engines' variables the user set.
    fn read_engines(&mut self, source: &mut (impl Source + Probe)) -> Result<()> {
        for name in ENGINE_VARS {
            if source.var(name)?.is_some() {
                self.engine_kept.push(name.to_string());
            }
        }
        self.engine_host = match (&self.network, &self.nodename) {
            (Some(node), _) => node.address.map(|a| a.to_string()),
            (None, Some(name)) => {
                let addrs = source.resolve(name).unwrap_or_default();
                let v4 = addrs.iter().find(|a| a.is_ipv4() && !a.is_loopback());
                v4.or(addrs.iter().find(|a| !a.is_loopback()))
                    .map(|a| a.to_string())
            }
            (None, None) => None,
        };
        Ok(())
    }

    /// The step's facts every task reads, srun's map or not. `map_hosts`:
    /// srun's map's node list as srun wrote it, whose hosts are `from_srun`'s
    /// when it is the step's node list's text (then expanded once);
    /// `no_resv_ports`: Slurm reserved no ports for the step (it sets
    /// SLURM_STEP_RESV_PORTS only for a step it reserved ports for, and else
    /// passes on the one in srun's environment).
    fn read(
        source: &mut (impl Source + Probe),
        num_tasks: Option<u32>,
        job_step: Option<(u32, u32)>,
        from_srun: (FromSrun, Option<String>),
        no_resv_ports: bool,
    ) -> Result<Step> {
        let (from_srun, map_hosts) = from_srun;
        let nodelist = source.var("SLURM_STEP_NODELIST")?;
        let hosts = match (&from_srun, map_hosts) {
            (FromSrun::Map(map), Some(text)) if Some(&text) == nodelist.as_ref() => {
                Some(map.hosts.clone())
            }
            _ => nodelist
                .as_deref()
                .map(|list| hosts(list, "SLURM_STEP_NODELIST"))
                .transpose()?,
        };
        Ok(Step {
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
            resv_ports: match no_resv_ports {
                true => None,
                false => source.var("SLURM_STEP_RESV_PORTS")?,
            },
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
            restart_count: 0,
            secret: None,
            from_srun,
            block_topology: None,
            nvl_blocks: None,
            network: None,
            engine_host: None,
            engine_kept: Vec::new(),
        })
    }

    /// The hints a layout is rebuilt from without srun's map: the
    /// distribution, a heterogeneous step's components, the topology's
    /// order, an arbitrary distribution's host file.
    fn read_hints(&mut self, source: &mut (impl Source + Probe)) -> Result<()> {
        let dist = source.var("SLURM_DISTRIBUTION")?;
        let plane = source.var("SLURM_DIST_PLANESIZE")?;
        self.distribution = Distribution::from_env(dist.as_deref(), plane.as_deref())?;
        self.het_nodelists = het_nodelists(source)?;
        if source.blocks_follow_topology() {
            self.block_topology = source.var("SLURM_TOPOLOGY_ADDR_PATTERN")?;
        }
        if self.distribution == Distribution::Arbitrary && self.het_nodelists.is_empty() {
            let Some(path) = source.var("SLURM_HOSTFILE")? else {
                bail!(
                    "the layout of an arbitrary distribution is only known from SLURM_HOSTFILE, which is not set"
                );
            };
            self.hostfile = Some(hostfile_hosts(&source.read_file(&path)?)?);
        }
        Ok(())
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
