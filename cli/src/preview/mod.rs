//! A preview of a step that does not exist yet: on a login node from srun's
//! own shape options (`-N`, `-n`, `--ntasks-per-node`, `-w`, `-m`,
//! `--gpus-per-node`, `--gres`), inside an allocation (an salloc shell, a
//! batch script) from the job's variables, which those options override as
//! they override them for srun.
//!
//! In phases, one file each: the options ([`shape`], with the [`job`]'s
//! variables), the nodes ([`nodes`]: the allocation's, or the partition's
//! from slurmctld), the tasks per node ([`counts`], over the core's
//! `step_layout`), then the variables Slurm would give the step's tasks
//! (SLURM_STEP_NODELIST, SLURM_STEP_TASKS_PER_NODE, SLURM_DISTRIBUTION, the
//! GPU list, …), handed to the core as a [`Source`]: the placement of every
//! rank is the same code as in slurmstepd. srun's refusals before launch
//! are the core's very checks ([`check`]).

mod counts;
mod job;
mod nodes;
mod shape;

use tf_cluster_core::distribution::Distribution;
use tf_cluster_core::frameworks::gpu_rules;
use tf_cluster_core::gpus::{self, SrunRequest};
use tf_cluster_core::{
    Error, Launch, MAX_NODES, MAX_TASKS, Probe, Result, Settings, Source, check_before_launch,
    check_size,
};

use counts::Counted;
use job::Job;
use nodes::{Origin, Pool};
use shape::Request;
pub use shape::Shape;

/// Where the CLI runs, as far as its environment says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// Inside a step: SLURM_STEP_TASKS_PER_NODE is set.
    Step,
    /// Inside an allocation (an salloc shell, a batch script): SLURM_JOB_ID
    /// is set, but no step's variables.
    Allocation,
    /// Neither: a login node.
    Login,
}

/// Slurm's ids of the steps that are not srun's: the batch script's
/// (SLURM_BATCH_SCRIPT) and the shell salloc starts on a node with
/// `LaunchParameters=use_interactive_step` (SLURM_INTERACTIVE_STEP).
const NOT_SRUNS: [&str; 2] = ["4294967291", "4294967290"];

pub fn place(env: &mut impl Source) -> Result<Place> {
    let step = env.var("SLURM_STEP_ID")?;
    let not_sruns = step.as_deref().is_some_and(|s| NOT_SRUNS.contains(&s));
    if env.var("SLURM_STEP_TASKS_PER_NODE")?.is_some() && !not_sruns {
        Ok(Place::Step)
    } else if env.var("SLURM_JOB_ID")?.is_some() {
        Ok(Place::Allocation)
    } else {
        Ok(Place::Login)
    }
}

/// The step a preview lays out: the variables its tasks would find.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Preview {
    /// The variables Slurm would set in the step's tasks (those the core
    /// reads), but the rank's own.
    pub vars: Vec<(&'static str, String)>,
    /// The host file of an arbitrary distribution (one host per task).
    pub hostfile: Option<String>,
    /// What the preview assumed or could not know, one line each.
    pub notes: Vec<String>,
    /// The rank whose variables `env` prints.
    pub rank: u32,
    /// The step's tasks.
    pub tasks: u32,
    /// The step's nodes and the tasks on each.
    pub hosts: Vec<String>,
    pub counts: Vec<u32>,
    /// GPUs per node, when known.
    pub gpus: Option<u32>,
}

/// The path the synthesised SLURM_HOSTFILE names.
const HOSTFILE: &str = "(the -w list)";

/// The preview's variables as a [`Source`]: nothing else of this machine is
/// read (its GPUs, interfaces and host files are not the step's nodes').
pub struct Synthesised<'a> {
    pub preview: &'a Preview,
    pub rank: Option<u32>,
}

impl Source for Synthesised<'_> {
    fn var(&mut self, name: &str) -> Result<Option<String>> {
        if name == "SLURM_PROCID" {
            return Ok(self.rank.map(|r| r.to_string()));
        }
        Ok(self
            .preview
            .vars
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.clone()))
    }
}

impl Probe for Synthesised<'_> {
    fn gpu_count(&mut self) -> Result<u32> {
        Ok(0)
    }
    fn read_file(&mut self, path: &str) -> Result<String> {
        match (&self.preview.hostfile, path) {
            (Some(text), HOSTFILE) => Ok(text.clone()),
            _ => Err(Error::new(format!("{path}: not read by a preview"))),
        }
    }
}

/// Lays out the step srun would start here with `shape`, from the job's
/// variables (`env`) where no option says otherwise.
pub fn preview(shape: &Shape, env: &mut (impl Source + Probe), place: Place) -> Result<Preview> {
    // In a step, srun's own variables are the job's (as a nested srun
    // reads them).
    let mut job = match place {
        Place::Allocation | Place::Step => Job::read(env)?,
        Place::Login => Job::default(),
    };
    // A job of GPUs whose variables name none (`salloc --gres=gpu:N`):
    // slurmctld's word, unless a GPU option of the step says otherwise.
    if job.gpus.is_none() && shape.gpus_per_node.is_none() && shape.gres.is_none() {
        job.gpus = job.id.as_deref().and_then(nodes::job_gpus);
    }
    let req = Request::new(shape, &job)?;
    let mut notes = Vec::new();
    let listed = listed(&req, env)?;
    let arbitrary = req.dist == Distribution::Arbitrary;
    let pool = pool(&job, place, listed.as_deref(), arbitrary, &mut notes)?;
    let counted = count(&req, &job, &pool, listed.as_deref(), &mut notes)?;
    check_size(u64::from(counted.tasks), counted.hosts.len())?;
    if pool.origin != Origin::Allocation && req.nodelist.is_none() {
        notes.push(invented(&pool, &counted));
    }
    notes.push(
        "CPU binding is not shown: each node binds its tasks' CPUs at launch (near their GPUs with --tf-bind=gpu, else Slurm's task plugin)".into(),
    );
    let hostfile = (req.dist == Distribution::Arbitrary)
        .then(|| {
            listed
                .as_deref()
                .map(|l| l[..counted.tasks as usize].join("\n"))
        })
        .flatten();
    let vars = variables(&req, &counted, &mut notes);
    Ok(Preview {
        vars,
        hostfile,
        notes,
        rank: req.rank,
        tasks: counted.tasks,
        hosts: counted.hosts,
        counts: counted.counts,
        gpus: req.gpus,
    })
}

/// The hosts -w names (one per task with -m arbitrary, where SLURM_HOSTFILE
/// stands in for it: one host or host list per line, `#` comments).
fn listed(req: &Request, env: &mut (impl Source + Probe)) -> Result<Option<Vec<String>>> {
    let arbitrary = req.dist == Distribution::Arbitrary;
    let budget = if arbitrary { MAX_TASKS } else { MAX_NODES } as usize;
    let text = match (&req.nodelist, arbitrary) {
        (Some(list), _) => list.clone(),
        (None, true) => match env.var("SLURM_HOSTFILE")? {
            Some(path) => {
                let text = env.read_file(&path)?;
                let lines: Vec<&str> = text
                    .lines()
                    .map(|l| l.split('#').next().unwrap_or_default().trim())
                    .filter(|l| !l.is_empty())
                    .collect();
                lines.join(",")
            }
            None => {
                return Err(Error::new(
                    "-m arbitrary: give -w (or SLURM_HOSTFILE) with one host per task, in rank order",
                ));
            }
        },
        (None, false) => return Ok(None),
    };
    nodes::parse_list(&text, budget).map(Some)
}

/// The nodes phase: where the step's nodes come from.
fn pool(
    job: &Job,
    place: Place,
    listed: Option<&[String]>,
    arbitrary: bool,
    notes: &mut Vec<String>,
) -> Result<Pool> {
    let pool = match (&job.hosts, place) {
        (Some(hosts), _) => Pool::of_job(job, hosts),
        (None, Place::Allocation) => {
            return Err(Error::new(
                "SLURM_JOB_ID is set but SLURM_JOB_NODELIST is not: the allocation's nodes are unknown",
            ));
        }
        (None, _) => Pool::of_cluster(listed.unwrap_or_default(), arbitrary, notes),
    };
    if let (Origin::Allocation, Some(names)) = (pool.origin, listed)
        && let Some(out) = names.iter().find(|n| pool.position(n).is_none())
    {
        return Err(Error::new(format!(
            "-w names {out}, which is not in job {}'s allocation {}",
            job.id.as_deref().unwrap_or("?"),
            pool.names.join(",")
        )));
    }
    Ok(pool)
}

/// The counts phase, for any distribution.
fn count(
    req: &Request,
    job: &Job,
    pool: &Pool,
    listed: Option<&[String]>,
    notes: &mut Vec<String>,
) -> Result<Counted> {
    if req.dist == Distribution::Arbitrary {
        let listed = listed.expect("an arbitrary step has its host list");
        return counts::arbitrary(req, pool, listed);
    }
    // -w's nodes, each once, in the pool's order.
    let mut required: Vec<usize> = listed
        .unwrap_or_default()
        .iter()
        .filter_map(|n| pool.position(n))
        .collect();
    required.sort_unstable();
    required.dedup();
    let pool = match (pool.origin, listed) {
        // Nothing named, nothing known: node1, node2, … stand in.
        (Origin::Listed, None) => invent(req),
        _ => pool.clone(),
    };
    counts::regular(req, &pool, &required, job.nnodes, notes)
}

/// Names for the nodes Slurm will pick, where nothing names them.
fn invent(req: &Request) -> Pool {
    let n = req
        .nodes
        .or(match (req.ntasks, req.per_node) {
            (Some(n), Some(k)) => Some(n.div_ceil(k)),
            _ => None,
        })
        .unwrap_or(1)
        .min(MAX_NODES);
    Pool::new(
        (1..=n).map(|i| format!("node{i}")).collect(),
        None,
        Origin::Listed,
    )
}

/// The note on node names Slurm picks at launch.
fn invented(pool: &Pool, counted: &Counted) -> String {
    let shown = match counted.hosts.as_slice() {
        [one] => one.clone(),
        [first, .., last] => format!("{first}..{last}"),
        [] => String::new(),
    };
    match pool.origin {
        Origin::Cluster => format!(
            "nodes {shown}: the default partition's first nodes; Slurm picks the nodes at launch (idle ones first)"
        ),
        _ => format!(
            "node names {shown} are invented (no -w/--nodelist): Slurm picks the nodes at launch"
        ),
    }
}

/// The variables phase: what Slurm sets in the step's tasks.
fn variables(
    req: &Request,
    counted: &Counted,
    notes: &mut Vec<String>,
) -> Vec<(&'static str, String)> {
    let counts: Vec<String> = counted.counts.iter().map(u32::to_string).collect();
    let mut vars: Vec<(&'static str, String)> = vec![
        ("SLURM_STEP_NUM_TASKS", counted.tasks.to_string()),
        ("SLURM_STEP_NODELIST", counted.hosts.join(",")),
        ("SLURM_STEP_TASKS_PER_NODE", counts.join(",")),
    ];
    if req.dist != Distribution::Block {
        vars.push(("SLURM_DISTRIBUTION", req.dist_name.clone()));
    }
    if let Some(size) = &req.plane_size {
        vars.push(("SLURM_DIST_PLANESIZE", size.clone()));
    }
    if req.dist == Distribution::Arbitrary {
        vars.push(("SLURM_HOSTFILE", HOSTFILE.to_string()));
    }
    if let Some(g) = req.gpus.filter(|&g| g > 0) {
        let ids: Vec<String> = (0..g).map(|i| i.to_string()).collect();
        vars.push(("CUDA_VISIBLE_DEVICES", ids.join(",")));
        vars.push(("SLURM_GPUS_ON_NODE", g.to_string()));
        notes.push(format!(
            "GPUs: {g} per node, shown as ids 0-{}; each node's are the ids Slurm gives the step there",
            g - 1
        ));
    }
    vars
}

/// srun's refusals before launch, by the very checks srun makes
/// (core::check_before_launch, core::gpus::check_before_launch), on what
/// the preview knows: the step's tasks and nodes, the most tasks on a node,
/// the ports Slurm reserves where slurm.conf has `MpiParams=ports`
/// (`first_port` the range's first; `--resv-ports=N` N of them, else one
/// more than the fullest node's tasks, measured on 22.05-26.05), and the
/// command after `--`.
pub fn check(
    settings: &Settings,
    preview: &Preview,
    command: &[String],
    first_port: Option<u16>,
    resv_ports: Option<u32>,
) -> Result<()> {
    let most = preview.counts.iter().copied().max().unwrap_or(0);
    let reserved = first_port.map(|p| reservation(p, resv_ports.unwrap_or(most + 1)));
    let hosts = preview.hosts.join(",");
    check_before_launch(
        settings,
        &Launch {
            tasks: preview.tasks,
            nodelist: Some(&hosts),
            nodes: Some(preview.hosts.len() as u32),
            resv_ports: reserved.as_deref(),
            most_local: Some(most),
            command: (!command.is_empty()).then_some(command),
            components: None,
        },
    )
    .map_err(|e| match &reserved {
        // The core speaks of a step Slurm reserved for; before launch, what
        // srun would reserve, then srun's own refusal.
        Some(list) if e.to_string().starts_with("Slurm reserved") => Error::new(format!(
            "srun would reserve {} port(s) ({list}) on each node; srun would be refused ({e})",
            list_len(list)
        )),
        _ => e,
    })?;
    let request = SrunRequest {
        bind: None,
        gpus_per_node: preview.gpus,
    };
    gpus::check_before_launch(settings, gpu_rules(settings.frameworks), &request, most)
}

/// Slurm's reservation of `count` ports from the range's first.
fn reservation(first: u16, count: u32) -> String {
    let last = (u32::from(first) + count.max(1) - 1).min(u32::from(u16::MAX));
    match last {
        l if l == u32::from(first) => first.to_string(),
        l => format!("{first}-{l}"),
    }
}

/// How many ports `first-last` (or one port) holds.
fn list_len(list: &str) -> u32 {
    match list.split_once('-') {
        Some((a, b)) => b.parse::<u32>().unwrap_or(0) + 1 - a.parse::<u32>().unwrap_or(0),
        None => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reservation_holds_the_ports_counted() {
        assert_eq!(reservation(12000, 1), "12000");
        assert_eq!(reservation(12000, 2), "12000-12001");
        assert_eq!(reservation(12000, 4), "12000-12003");
        assert_eq!(reservation(65535, 4), "65535");
        assert_eq!(list_len("12000-12003"), 4);
        assert_eq!(list_len("12000"), 1);
    }
}
