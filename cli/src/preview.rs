//! A preview of a step that does not exist yet: on a login node from srun's
//! own shape options (`-N`, `-n`, `--ntasks-per-node`, `-w`, `-m`,
//! `--gpus-per-node`, `--gres`), inside an allocation (an salloc shell, a
//! batch script) from the job's variables, which those options override as
//! they override them for srun.
//!
//! The preview only synthesises the variables Slurm would give the step's
//! tasks (SLURM_STEP_NODELIST, SLURM_STEP_TASKS_PER_NODE,
//! SLURM_DISTRIBUTION, the GPU list, …) and hands them to the core as a
//! [`Source`]: the same code as in slurmstepd places the ranks. What it
//! computes itself is what Slurm computes before the step starts: the nodes
//! and how many tasks each runs (slurm_step_layout.c counts them so).

use clap::Args;
use tf_cluster_core::distribution::Distribution;
use tf_cluster_core::hostlist::HostList;
use tf_cluster_core::number::parse_u32;
use tf_cluster_core::{
    Error, MAX_NODES, MAX_TASKS, Probe, Result, Source, check_size, tasks_per_node,
};

/// srun's options that shape a step, as srun spells them.
#[derive(Args, Debug, Default, Clone)]
#[command(next_help_heading = "Shape of the step (srun's options; outside a step)")]
pub struct Shape {
    /// Nodes of the step (default: -w's count, else the job's SLURM_NNODES, else 1).
    #[arg(short = 'N', long = "nodes", value_name = "N")]
    pub nodes: Option<String>,
    /// Tasks of the step (default: --ntasks-per-node per node, else the job's SLURM_NTASKS, else one per node).
    #[arg(short = 'n', long = "ntasks", value_name = "N")]
    pub ntasks: Option<String>,
    /// Tasks on each node.
    #[arg(long = "ntasks-per-node", value_name = "N")]
    pub ntasks_per_node: Option<String>,
    /// The step's nodes, a Slurm hostlist such as node[1-3] (with -m arbitrary: one host per task, in rank order).
    #[arg(short = 'w', long = "nodelist", value_name = "HOSTLIST")]
    pub nodelist: Option<String>,
    /// block (default), cyclic, plane=N or arbitrary (what follows ':' is ignored).
    #[arg(short = 'm', long = "distribution", value_name = "DIST")]
    pub distribution: Option<String>,
    /// GPUs on each node of the step ([TYPE:]N).
    #[arg(long = "gpus-per-node", value_name = "[TYPE:]N")]
    pub gpus_per_node: Option<String>,
    /// Generic resources on each node; gpu[:TYPE][:N] entries count as GPUs.
    #[arg(long = "gres", value_name = "LIST")]
    pub gres: Option<String>,
    /// srun's --gpus-per-task: refused here (Slurm then binds GPUs per task).
    #[arg(long = "gpus-per-task", value_name = "N", hide = true)]
    pub gpus_per_task: Option<String>,
    /// `env` outside a step: the rank whose variables to print (default 0).
    #[arg(long = "rank", value_name = "R")]
    pub rank: Option<String>,
}

impl Shape {
    /// Whether any shape option was given (`--rank` is not one).
    pub fn given(&self) -> bool {
        self.nodes.is_some()
            || self.ntasks.is_some()
            || self.ntasks_per_node.is_some()
            || self.nodelist.is_some()
            || self.distribution.is_some()
            || self.gpus_per_node.is_some()
            || self.gres.is_some()
            || self.gpus_per_task.is_some()
    }
}

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

/// What the job says (empty on a login node).
#[derive(Debug, Default)]
struct Job {
    id: Option<String>,
    hosts: Option<HostList>,
    nnodes: Option<u32>,
    ntasks: Option<u32>,
    ntasks_per_node: Option<u32>,
    tasks_per_node: Option<Vec<u32>>,
    cpus: Option<Vec<u32>>,
    distribution: Option<String>,
    plane_size: Option<String>,
    gpus: Option<u32>,
}

fn count(text: &str, what: &str) -> Result<u32> {
    match parse_u32(text) {
        Some(n) if n > 0 => Ok(n),
        _ => Err(Error::new(format!("{what} {text:?}: not a count"))),
    }
}

fn env_count(env: &mut impl Source, name: &str) -> Result<Option<u32>> {
    env.var(name)?.map(|v| count(&v, name)).transpose()
}

/// `[TYPE:]N` (--gpus-per-node, SLURM_GPUS_PER_NODE): N.
fn gpus_per_node(text: &str, what: &str) -> Result<u32> {
    let n = text.rsplit(':').next().unwrap_or_default();
    match parse_u32(n) {
        Some(n) => Ok(n),
        _ => Err(Error::new(format!(
            "{what} {text:?}: not a GPU count ([TYPE:]N)"
        ))),
    }
}

/// The GPUs of `--gres=LIST`: gpu, gpu:N, gpu:TYPE:N entries, others skipped.
fn gres_gpus(text: &str) -> Result<Option<u32>> {
    let mut total = None;
    for entry in text.split(',') {
        let entry = entry.strip_prefix("gres/").unwrap_or(entry);
        let mut parts = entry.split(':');
        if parts.next() != Some("gpu") {
            continue;
        }
        let rest: Vec<&str> = parts.collect();
        let n = match rest.as_slice() {
            [] => 1,
            [n] | [_, n] if parse_u32(n).is_some() => parse_u32(n).unwrap_or_default(),
            [_] => 1,
            _ => {
                return Err(Error::new(format!("--gres {text:?}: not gpu[:TYPE][:N]")));
            }
        };
        total = Some(total.unwrap_or(0) + n);
    }
    Ok(total)
}

impl Job {
    fn read(env: &mut impl Source) -> Result<Job> {
        let hosts = match env.var("SLURM_JOB_NODELIST")? {
            Some(list) => Some(
                HostList::parse(&list, MAX_NODES as usize)
                    .map_err(|e| Error::new(format!("SLURM_JOB_NODELIST: {e}")))?,
            ),
            None => None,
        };
        let list = |name: &str, text: String| {
            tasks_per_node::parse(&text, MAX_NODES as usize)
                .map_err(|e| Error::new(format!("{name}: {e}")))
        };
        let tasks_per_node = env
            .var("SLURM_TASKS_PER_NODE")?
            .map(|t| list("SLURM_TASKS_PER_NODE", t))
            .transpose()?;
        let mut cpus = env
            .var("SLURM_JOB_CPUS_PER_NODE")?
            .map(|t| list("SLURM_JOB_CPUS_PER_NODE", t))
            .transpose()?;
        if let (Some(cpus), Some(per_task)) = (&mut cpus, env_count(env, "SLURM_CPUS_PER_TASK")?) {
            cpus.iter_mut().for_each(|c| *c /= per_task);
        }
        let gpus = match env.var("SLURM_GPUS_PER_NODE")? {
            Some(g) => Some(gpus_per_node(&g, "SLURM_GPUS_PER_NODE")?),
            None => match env_count(env, "SLURM_GPUS_ON_NODE") {
                Ok(Some(n)) => Some(n),
                _ => env
                    .var("SLURM_JOB_GPUS")?
                    .filter(|ids| !ids.is_empty())
                    .map(|ids| ids.split(',').count() as u32),
            },
        };
        Ok(Job {
            id: env.var("SLURM_JOB_ID")?,
            hosts,
            nnodes: env_count(env, "SLURM_NNODES")?,
            ntasks: env_count(env, "SLURM_NTASKS")?,
            ntasks_per_node: env_count(env, "SLURM_NTASKS_PER_NODE")?,
            tasks_per_node,
            cpus,
            distribution: env.var("SLURM_DISTRIBUTION")?,
            plane_size: env.var("SLURM_DIST_PLANESIZE")?,
            gpus,
        })
    }
}

/// `-m` as srun takes it: the node level before ':' (`plane=N` carries its
/// size), as SLURM_DISTRIBUTION and SLURM_DIST_PLANESIZE say it.
fn distribution(text: &str) -> Result<(Distribution, String, Option<String>)> {
    let node_level = text.split([':', ',']).next().unwrap_or_default();
    let (name, size) = match node_level.split_once('=') {
        Some(("plane", size)) => ("plane", Some(size.to_string())),
        _ => (node_level, None),
    };
    let dist = Distribution::from_env(Some(name), size.as_deref()).map_err(|_| {
        Error::new(format!(
            "-m/--distribution {text:?}: use block, cyclic, plane=N or arbitrary"
        ))
    })?;
    Ok((dist, name.to_string(), size))
}

/// Names in Slurm's usual node order: by prefix, then by number.
fn natural_key(name: &str) -> (String, u64, String) {
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let (prefix, number) = name.split_at(name.len() - digits);
    (
        prefix.to_string(),
        number.parse().unwrap_or(0),
        name.to_string(),
    )
}

/// Tasks per node as Slurm's step layout counts them (slurm_step_layout.c):
/// block and cyclic deal one task per node per round, first over the nodes
/// with a CPU left (`cpus`, when known), then over every node; plane deals
/// `plane` tasks per node per round. `cap`: --ntasks-per-node.
pub fn deal(
    tasks: u32,
    nodes: usize,
    cpus: Option<&[u32]>,
    cap: Option<u32>,
    plane: Option<u32>,
) -> Vec<u32> {
    let mut counts = vec![0u32; nodes];
    let limit = |i: usize| {
        let c = cpus.map_or(u32::MAX, |c| c[i].max(1));
        c.min(cap.unwrap_or(u32::MAX))
    };
    let cap = cap.unwrap_or(u32::MAX);
    let step = plane.unwrap_or(1);
    let mut left = tasks;
    let mut over = false;
    let mut round: u32 = 0;
    while left > 0 {
        let mut room = false;
        let mut placed = false;
        for (i, c) in counts.iter_mut().enumerate() {
            if left == 0 {
                break;
            }
            let within = plane.is_some() || round < limit(i);
            if (within || over) && *c < cap {
                let take = step.min(left).min(cap - *c);
                *c += take;
                left -= take;
                placed = true;
                if round + 1 < limit(i) {
                    room = true;
                }
            }
        }
        if !room {
            if over && !placed {
                break; // the caller checked tasks <= nodes × cap
            }
            over = true;
        }
        round += 1;
    }
    counts
}

/// Lays out the step srun would start here with `shape`, from the job's
/// variables (`env`) where no option says otherwise.
pub fn preview(shape: &Shape, env: &mut (impl Source + Probe), place: Place) -> Result<Preview> {
    if shape.gpus_per_task.is_some() {
        return Err(Error::new(
            "srun's --gpus-per-task makes Slurm bind GPUs to each task, which a preview cannot show: preview with --gpus-per-node=N, or run explain in the step (the plugin's own setting is --tf-gpus-per-task)",
        ));
    }
    // In a step, srun's own variables are the job's (as a nested srun
    // reads them).
    let job = match place {
        Place::Allocation | Place::Step => Job::read(env)?,
        Place::Login => Job::default(),
    };
    let mut notes = Vec::new();
    let rank = shape.rank.as_deref().map(|r| match parse_u32(r) {
        Some(n) => Ok(n),
        _ => Err(Error::new(format!("--rank {r:?}: not a rank"))),
    });
    let rank = rank.transpose()?.unwrap_or(0);
    let opt = |v: &Option<String>, what: &str| v.as_deref().map(|t| count(t, what)).transpose();
    let nodes = match shape.nodes.as_deref() {
        Some(t) if t.contains('-') => {
            return Err(Error::new(format!(
                "-N/--nodes {t:?}: a range; the preview needs one node count"
            )));
        }
        _ => opt(&shape.nodes, "-N/--nodes")?,
    };
    let ntasks_given = opt(&shape.ntasks, "-n/--ntasks")?;
    let per_node_given = opt(&shape.ntasks_per_node, "--ntasks-per-node")?;
    // The job's task count stands unless a task option is given (srun
    // reads SLURM_NTASKS, SLURM_NTASKS_PER_NODE and SLURM_NNODES as -n,
    // --ntasks-per-node and -N).
    let task_option = ntasks_given.is_some() || per_node_given.is_some();
    let ntasks = ntasks_given.or(if task_option { None } else { job.ntasks });
    let per_node = per_node_given.or(if task_option {
        None
    } else {
        job.ntasks_per_node
    });
    let (dist, dist_name, plane_size) = match (&shape.distribution, &job.distribution) {
        (Some(m), _) => distribution(m)?,
        (None, Some(d)) => {
            let dist = Distribution::from_env(Some(d), job.plane_size.as_deref())?;
            (dist, d.clone(), job.plane_size.clone())
        }
        (None, None) => (Distribution::Block, "block".into(), None),
    };
    let arbitrary = dist == Distribution::Arbitrary;

    // The nodes to choose from, in Slurm's order, and the arbitrary host file.
    let mut hostfile = None;
    // srun -m arbitrary without -w reads SLURM_HOSTFILE: one host (or
    // hostlist) per line, `#` comments.
    let from_file = match (&shape.nodelist, arbitrary) {
        (None, true) => match env.var("SLURM_HOSTFILE")? {
            Some(path) => {
                let text = env.read_file(&path)?;
                let lines: Vec<&str> = text
                    .lines()
                    .map(|l| l.split('#').next().unwrap_or_default().trim())
                    .filter(|l| !l.is_empty())
                    .collect();
                Some(lines.join(","))
            }
            None => None,
        },
        _ => None,
    };
    let listed: Option<Vec<String>> = match shape.nodelist.as_ref().or(from_file.as_ref()) {
        None => None,
        Some(list) => {
            let budget = if arbitrary { MAX_TASKS } else { MAX_NODES } as usize;
            let hosts = HostList::parse(list, budget)
                .map_err(|e| Error::new(format!("-w/--nodelist: {e}")))?;
            let mut names: Vec<String> = hosts.iter().map(str::to_string).collect();
            if arbitrary {
                hostfile = Some(names.join("\n"));
            }
            let written = names.clone();
            names.sort_by_key(|n| natural_key(n));
            names.dedup();
            // In an allocation the job's own order is taken (below).
            if !arbitrary && names != written && job.hosts.is_none() {
                notes.push(format!(
                    "-w {list}: Slurm orders a step's nodes as slurm.conf lists them, taken here as by name: {}",
                    names.join(",")
                ));
            }
            Some(names)
        }
    };
    if arbitrary && hostfile.is_none() {
        return Err(Error::new(
            "-m arbitrary: give -w (or SLURM_HOSTFILE) with one host per task, in rank order",
        ));
    }
    let (pool, cpus_pool): (Option<Vec<String>>, Option<Vec<u32>>) = match &job.hosts {
        Some(alloc) => {
            let alloc: Vec<String> = alloc.iter().map(str::to_string).collect();
            let cpus = job.cpus.clone().filter(|c| c.len() == alloc.len());
            match &listed {
                Some(names) => {
                    if let Some(out) = names.iter().find(|n| !alloc.contains(n)) {
                        return Err(Error::new(format!(
                            "-w names {out}, which is not in job {}'s allocation {}",
                            job.id.as_deref().unwrap_or("?"),
                            alloc.join(",")
                        )));
                    }
                    let keep: Vec<usize> = (0..alloc.len())
                        .filter(|&i| names.contains(&alloc[i]))
                        .collect();
                    let cpus = cpus.map(|c| keep.iter().map(|&i| c[i]).collect());
                    (
                        Some(keep.into_iter().map(|i| alloc[i].clone()).collect()),
                        cpus,
                    )
                }
                None => (Some(alloc), cpus),
            }
        }
        None if place == Place::Allocation => {
            return Err(Error::new(
                "SLURM_JOB_ID is set but SLURM_JOB_NODELIST is not: the allocation's nodes are unknown",
            ));
        }
        None => (listed.clone(), None),
    };

    // Nodes of the step.
    let job_nodes = match (&listed, job.nnodes) {
        (None, Some(n)) if shape.nodes.is_none() => Some(n),
        _ => None,
    };
    let mut n_nodes = match (nodes, &listed, &pool) {
        (Some(n), _, _) => n,
        (None, Some(names), _) => names.len() as u32,
        (None, None, Some(alloc)) => job_nodes.unwrap_or(alloc.len() as u32),
        (None, None, None) => match (ntasks, per_node) {
            (Some(n), Some(k)) => n.div_ceil(k),
            (Some(_), None) => {
                notes.push(
                    "-n without -N: Slurm picks the node count from the nodes' CPUs; previewed on 1 node (give -N)".into(),
                );
                1
            }
            _ => 1,
        },
    };
    if let Some(names) = &listed
        && nodes.is_some_and(|n| n as usize != names.len())
        && !arbitrary
    {
        return Err(Error::new(format!(
            "-N {} but -w names {} node(s): name every node of the step",
            n_nodes,
            names.len()
        )));
    }
    if let Some(alloc) = &pool
        && n_nodes as usize > alloc.len()
    {
        return Err(Error::new(format!(
            "{n_nodes} node(s) asked but the allocation has {}",
            alloc.len()
        )));
    }
    // Tasks of the step.
    let mut n_tasks = match (ntasks, per_node) {
        (Some(n), _) => n,
        (None, Some(k)) => n_nodes
            .checked_mul(k)
            .ok_or_else(|| Error::new("too many tasks"))?,
        (None, None) if arbitrary => hostfile.as_ref().map_or(0, |h| h.lines().count() as u32),
        (None, None) => n_nodes,
    };
    if arbitrary {
        let listed_tasks = hostfile.as_ref().map_or(0, |h| h.lines().count() as u32);
        if n_tasks > listed_tasks {
            return Err(Error::new(format!(
                "-m arbitrary with {n_tasks} tasks but the host list names {listed_tasks} host(s): one per task"
            )));
        }
        n_tasks = n_tasks.max(1);
    }
    check_size(u64::from(n_tasks), n_nodes as usize)?;
    if n_tasks < n_nodes && !arbitrary {
        if listed.is_some() {
            return Err(Error::new(format!(
                "{n_tasks} task(s) cannot use the {n_nodes} nodes -w names"
            )));
        }
        notes.push(format!(
            "{n_tasks} task(s) on {n_nodes} nodes: srun runs them on {n_tasks} node(s), as here"
        ));
        n_nodes = n_tasks;
    }
    if let Some(k) = per_node
        && !arbitrary
        && u64::from(n_tasks) > u64::from(n_nodes) * u64::from(k)
    {
        return Err(Error::new(format!(
            "{n_tasks} tasks do not fit {n_nodes} node(s) at --ntasks-per-node={k}"
        )));
    }

    // The step's nodes, and the tasks on each.
    let invented = pool.is_none();
    let (hosts, counts) = if arbitrary {
        let text = hostfile.as_ref().expect("checked above");
        let used: Vec<&str> = text.lines().take(n_tasks as usize).collect();
        // In the allocation's node order when in one, else by name.
        let names = pool
            .clone()
            .or(listed.clone())
            .expect("arbitrary has a host list");
        let hosts: Vec<String> = names
            .into_iter()
            .filter(|n| used.contains(&n.as_str()))
            .collect();
        let counts = hosts
            .iter()
            .map(|h| used.iter().filter(|u| **u == h).count() as u32)
            .collect();
        (hosts, counts)
    } else {
        let hosts: Vec<String> = match &pool {
            Some(names) => names.iter().take(n_nodes as usize).cloned().collect(),
            None => (1..=n_nodes).map(|i| format!("node{i}")).collect(),
        };
        let cpus = cpus_pool.map(|c| c[..hosts.len()].to_vec());
        let job_counts = job.tasks_per_node.as_ref().filter(|c| {
            !shape.given()
                && c.len() == hosts.len()
                && job.ntasks == Some(n_tasks)
                && c.iter().map(|&x| u64::from(x)).sum::<u64>() == u64::from(n_tasks)
        });
        let counts = match (job_counts, dist) {
            (Some(c), _) => c.clone(),
            (None, Distribution::Plane(size)) => {
                deal(n_tasks, hosts.len(), None, per_node, Some(size))
            }
            (None, _) => deal(n_tasks, hosts.len(), cpus.as_deref(), per_node, None),
        };
        (hosts, counts)
    };
    if invented {
        notes.push(match hosts.len() {
            1 => "node name node1 is invented (no -w/--nodelist): Slurm picks the node at launch"
                .to_string(),
            n => format!(
                "node names node[1-{n}] are invented (no -w/--nodelist): Slurm picks the nodes at launch"
            ),
        });
    }

    let mut vars: Vec<(&'static str, String)> = vec![
        ("SLURM_STEP_NUM_TASKS", n_tasks.to_string()),
        ("SLURM_STEP_NODELIST", hosts.join(",")),
        (
            "SLURM_STEP_TASKS_PER_NODE",
            counts
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(","),
        ),
    ];
    if dist != Distribution::Block {
        vars.push(("SLURM_DISTRIBUTION", dist_name));
    }
    if let Some(size) = plane_size {
        vars.push(("SLURM_DIST_PLANESIZE", size));
    }
    if arbitrary {
        vars.push(("SLURM_HOSTFILE", HOSTFILE.to_string()));
    }
    let gpus = match (&shape.gpus_per_node, &shape.gres) {
        (Some(_), Some(_)) => {
            return Err(Error::new(
                "--gpus-per-node and --gres=gpu both given: give one",
            ));
        }
        (Some(g), None) => Some(gpus_per_node(g, "--gpus-per-node")?),
        (None, Some(g)) => gres_gpus(g)?,
        (None, None) => job.gpus,
    };
    if let Some(g) = gpus.filter(|&g| g > 0) {
        if g > tf_cluster_core::MAX_GPUS {
            return Err(Error::new(format!(
                "{g} GPUs per node: at most {}",
                tf_cluster_core::MAX_GPUS
            )));
        }
        let ids: Vec<String> = (0..g).map(|i| i.to_string()).collect();
        vars.push(("CUDA_VISIBLE_DEVICES", ids.join(",")));
        vars.push(("SLURM_GPUS_ON_NODE", g.to_string()));
        notes.push(format!(
            "GPUs: {g} per node, shown as ids 0-{}; each node's are the ids Slurm gives the step there",
            g - 1
        ));
    }
    Ok(Preview {
        vars,
        hostfile,
        notes,
        rank,
        tasks: n_tasks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// slurm_step_layout.c counts block and cyclic tasks as a cyclic deal
    /// ("to effectively deal with heterogeneous nodes, we fake a cyclic
    /// distribution"): the first nodes get the extra task.
    #[test]
    fn counts_as_slurms_step_layout() {
        assert_eq!(deal(3, 2, None, None, None), [2, 1]);
        assert_eq!(deal(5, 3, None, None, None), [2, 2, 1]);
        assert_eq!(deal(4, 2, None, None, None), [2, 2]);
        // Nodes with a CPU left come first, then every node (oversubscribed).
        assert_eq!(deal(4, 2, Some(&[1, 4]), None, None), [1, 3]);
        // Rounds 0-1 fill the CPUs (1 + 2), then one task per node per round.
        assert_eq!(deal(6, 2, Some(&[1, 2]), None, None), [3, 3]);
        // --ntasks-per-node caps each node.
        assert_eq!(deal(3, 2, None, Some(2), None), [2, 1]);
        assert_eq!(deal(6, 3, None, Some(2), None), [2, 2, 2]);
        // plane=N deals N tasks per node per round.
        assert_eq!(deal(6, 2, None, None, Some(4)), [4, 2]);
        assert_eq!(deal(5, 2, None, None, Some(2)), [3, 2]);
        assert_eq!(deal(6, 2, None, Some(3), Some(2)), [3, 3]);
    }

    #[test]
    fn gres_counts_gpus_only() {
        assert_eq!(gres_gpus("gpu:4").unwrap(), Some(4));
        assert_eq!(gres_gpus("gpu:a100:2").unwrap(), Some(2));
        assert_eq!(gres_gpus("gpu").unwrap(), Some(1));
        assert_eq!(gres_gpus("nic:1,gpu:2").unwrap(), Some(2));
        assert_eq!(gres_gpus("nic:1").unwrap(), None);
        assert!(gres_gpus("gpu:a:b:c").is_err());
        assert_eq!(gpus_per_node("a100:4", "x").unwrap(), 4);
        assert!(gpus_per_node("four", "x").is_err());
    }

    #[test]
    fn distributions_as_srun_spells_them() {
        assert_eq!(distribution("block").unwrap().0, Distribution::Block);
        assert_eq!(
            distribution("cyclic:block").unwrap().0,
            Distribution::Cyclic
        );
        assert_eq!(distribution("plane=3").unwrap().0, Distribution::Plane(3));
        assert_eq!(
            distribution("arbitrary").unwrap().0,
            Distribution::Arbitrary
        );
        assert!(distribution("plane").is_err());
        assert!(distribution("round").is_err());
    }

    #[test]
    fn node_names_in_slurms_usual_order() {
        let mut names = vec!["n10", "n9", "a1", "n1"];
        names.sort_by_key(|n| natural_key(n));
        assert_eq!(names, ["a1", "n1", "n9", "n10"]);
    }
}
