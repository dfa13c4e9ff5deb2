//! The counts phase: the step's nodes and the tasks on each, as slurmctld
//! decides them (measured on the testbed, Slurm 22.05-26.05): inside an
//! allocation srun takes the job's node count (fewer when there are fewer
//! tasks), the -w nodes and then the allocation's first others, over the
//! job's CPUs per node; outside one, a new job packs its nodes' CPUs first
//! (core::step_layout::job_cpus), -w's nodes before the others. The step
//! layout then deals the tasks over those CPUs (core::step_layout).

use std::collections::HashMap;

use tf_cluster_core::distribution::Distribution;
use tf_cluster_core::step_layout::{job_cpus, tasks_per_node};
use tf_cluster_core::{Error, Result, check_size};

use super::nodes::{Origin, Pool};
use super::shape::Request;

/// What Slurm does with a new job its nodes cannot hold.
const NOT_AVAILABLE: &str = "Slurm refuses the job (Requested node configuration is not available: 24.11) or leaves it pending for ever (22.05, 26.05)";

/// The step's nodes (in Slurm's order) and the tasks on each.
#[derive(Debug)]
pub struct Counted {
    pub hosts: Vec<String>,
    pub counts: Vec<u32>,
    pub tasks: u32,
}

/// The nodes and counts of a block, cyclic or plane step: `required` are
/// pool positions -w names.
pub fn regular(
    req: &Request,
    pool: &Pool,
    required: &[usize],
    job_nodes: Option<u32>,
    notes: &mut Vec<String>,
) -> Result<Counted> {
    let nodes = node_count(req, pool, required, job_nodes, notes);
    let tasks = req
        .ntasks
        .or(req.per_node.map(|k| nodes.saturating_mul(k)))
        .unwrap_or(nodes);
    let nodes = if tasks < nodes {
        notes.push(format!(
            "{tasks} task(s) on {nodes} nodes: srun runs them on {tasks} node(s) (its warning \"can't run {tasks} processes on {nodes} nodes, setting nnodes to {tasks}\")"
        ));
        tasks
    } else {
        nodes
    };
    check_size(u64::from(tasks), nodes as usize)?;
    let chosen = choose(pool, required, nodes as usize)?;
    if pool.origin == Origin::Allocation && chosen.len() < pool.names.len() {
        notes.push(
            "a step on fewer nodes than the job's: shown are the -w nodes and the job's first others, as Slurm 22.05-24.11 picks them (26.05 may pick other nodes of the job)".into(),
        );
    }
    let per_node = honoured_per_node(req, pool.origin, tasks, nodes, notes)?;
    let cpus = step_cpus(pool, &chosen, required, tasks, per_node, req.dist)?;
    let counts = tasks_per_node(tasks, &cpus, req.dist);
    Ok(Counted {
        hosts: chosen.iter().map(|&i| pool.names[i].clone()).collect(),
        counts,
        tasks,
    })
}

/// The step's node count: -N, else the job's, else -w's, else as many of
/// the partition's nodes as the tasks need (their CPUs, or the
/// per-node count).
fn node_count(
    req: &Request,
    pool: &Pool,
    required: &[usize],
    job_nodes: Option<u32>,
    notes: &mut Vec<String>,
) -> u32 {
    if let Some(n) = req.nodes {
        return n;
    }
    if pool.origin == Origin::Allocation {
        return job_nodes.unwrap_or(pool.names.len() as u32);
    }
    if !required.is_empty() {
        return required.len() as u32;
    }
    match (req.ntasks, req.per_node, &pool.cpus) {
        (Some(n), Some(k), _) => n.div_ceil(k),
        (Some(n), None, Some(cpus)) => {
            let mut have = 0u64;
            let fit = cpus.iter().position(|&c| {
                have += u64::from(c);
                have >= u64::from(n)
            });
            fit.map_or(cpus.len(), |i| i + 1) as u32
        }
        (Some(_), None, None) => {
            notes.push(
                "-n without -N: Slurm picks the node count from the nodes' CPUs, unknown here; previewed on 1 node (give -N)".into(),
            );
            1
        }
        _ => 1,
    }
}

/// The -w nodes (the first `nodes` of them), then the pool's first others,
/// in the pool's order.
fn choose(pool: &Pool, required: &[usize], nodes: usize) -> Result<Vec<usize>> {
    let mut chosen: Vec<usize> = required.iter().copied().take(nodes).collect();
    let mut taken = vec![false; pool.names.len()];
    chosen.iter().for_each(|&i| taken[i] = true);
    let others = (0..pool.names.len()).filter(|&i| !taken[i]);
    let more: Vec<usize> = others.take(nodes - chosen.len()).collect();
    chosen.extend(more);
    if chosen.len() < nodes {
        return Err(Error::new(match pool.origin {
            Origin::Allocation => format!(
                "{nodes} node(s) asked but the allocation has {}",
                pool.names.len()
            ),
            Origin::Cluster => format!(
                "{nodes} node(s) asked but the default partition has {}: {NOT_AVAILABLE}",
                pool.names.len()
            ),
            Origin::Listed => format!(
                "-N {nodes} but -w names {} node(s), and the cluster's other nodes are unknown here: name every node of the step",
                pool.names.len()
            ),
        }));
    }
    chosen.sort_unstable();
    Ok(chosen)
}

/// --ntasks-per-node as srun takes it: a most per node, which srun ignores
/// with a warning inside an allocation when the tasks do not fit it, and
/// which a new job cannot be given then.
fn honoured_per_node(
    req: &Request,
    origin: Origin,
    tasks: u32,
    nodes: u32,
    notes: &mut Vec<String>,
) -> Result<Option<u32>> {
    let Some(k) = req.per_node else {
        return Ok(None);
    };
    if u64::from(tasks) <= u64::from(nodes) * u64::from(k) {
        if origin != Origin::Allocation && req.nodes.is_some() && req.ntasks.is_some() {
            notes.push(format!(
                "--ntasks-per-node={k} with -N and -n: Slurm 22.05 ignores it for a new job (measured: -N3 -n5 --ntasks-per-node=2 runs 3,1,1 there); shown as 24.11 and 26.05 take it"
            ));
        }
        return Ok(Some(k));
    }
    if origin == Origin::Allocation {
        notes.push(format!(
            "--ntasks-per-node={k}: srun ignores it (its warning \"can't honor --ntasks-per-node set to {k} which doesn't match the requested tasks {tasks} with the maximum number of requested nodes {nodes}\")"
        ));
        return Ok(None);
    }
    Err(Error::new(format!(
        "{tasks} tasks do not fit {nodes} node(s) at --ntasks-per-node={k}: {NOT_AVAILABLE}"
    )))
}

/// The CPUs the step has on each chosen node: the allocation's, else a new
/// job's share of the nodes' CPUs (-w's nodes served first), else every
/// task's; capped by --ntasks-per-node (but for plane, whose size it is).
fn step_cpus(
    pool: &Pool,
    chosen: &[usize],
    required: &[usize],
    tasks: u32,
    per_node: Option<u32>,
    dist: Distribution,
) -> Result<Vec<u32>> {
    // A new job holds at most --ntasks-per-node tasks per node; inside an
    // allocation srun hands the step layout the option as a most per node
    // but for plane, whose size it is then.
    let plane = matches!(dist, Distribution::Plane(_)) && pool.origin == Origin::Allocation;
    let cap = |c: u32| match per_node {
        Some(k) if !plane => c.min(k),
        _ => c,
    };
    let have: Vec<u32> = match &pool.cpus {
        Some(cpus) => chosen.iter().map(|&i| cap(cpus[i])).collect(),
        None => chosen.iter().map(|_| cap(tasks)).collect(),
    };
    let total: u64 = have.iter().map(|&c| u64::from(c)).sum();
    let known = pool.cpus.is_some() || per_node.is_some();
    if known && u64::from(tasks) > total {
        return Err(Error::new(match pool.origin {
            Origin::Allocation => format!(
                "{tasks} tasks but the step's nodes have {total} CPUs of the job: srun would be refused (More processors requested than permitted)"
            ),
            _ => format!("{tasks} tasks but the nodes have {total} CPUs: {NOT_AVAILABLE}"),
        }));
    }
    if pool.origin == Origin::Allocation {
        return Ok(have);
    }
    // A new job: its CPUs taken in node order, -w's nodes first.
    let mut wanted = vec![false; pool.names.len()];
    required.iter().for_each(|&i| wanted[i] = true);
    let mut order: Vec<usize> = (0..chosen.len()).collect();
    order.sort_by_key(|&i| !wanted[chosen[i]]);
    let ordered: Vec<u32> = order.iter().map(|&i| have[i]).collect();
    let mut cpus = vec![0; chosen.len()];
    for (&i, c) in order.iter().zip(job_cpus(&ordered, u64::from(tasks))) {
        cpus[i] = c;
    }
    Ok(cpus)
}

/// The nodes and counts of an arbitrary step: rank r on the r-th host of
/// `listed` (the first `tasks`), each node once, in the pool's order.
pub fn arbitrary(req: &Request, pool: &Pool, listed: &[String]) -> Result<Counted> {
    let tasks = req.ntasks.unwrap_or(listed.len() as u32).max(1);
    if tasks as usize > listed.len() {
        return Err(Error::new(format!(
            "-m arbitrary with {tasks} tasks but the host list names {} host(s): one per task",
            listed.len()
        )));
    }
    let mut per_host: HashMap<&str, u32> = HashMap::new();
    for host in &listed[..tasks as usize] {
        *per_host.entry(host.as_str()).or_default() += 1;
    }
    check_size(u64::from(tasks), per_host.len())?;
    let mut hosts: Vec<(usize, &str, u32)> = Vec::with_capacity(per_host.len());
    for (host, n) in per_host {
        let at = pool
            .position(host)
            .ok_or_else(|| Error::new(format!("{host}: not a node the step may use")))?;
        hosts.push((at, host, n));
    }
    hosts.sort_unstable();
    Ok(Counted {
        hosts: hosts.iter().map(|(_, h, _)| h.to_string()).collect(),
        counts: hosts.iter().map(|(_, _, n)| *n).collect(),
        tasks,
    })
}
