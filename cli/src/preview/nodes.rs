//! The nodes phase: the nodes a step may run on, in Slurm's order, with the
//! CPUs each has for it: the allocation's (SLURM_JOB_NODELIST,
//! SLURM_JOB_CPUS_PER_NODE), else the default partition's as slurmctld
//! reports them (`scontrol show partition|node -o`), else only the -w list
//! with no CPU count (a note says so).

use std::collections::HashMap;

use tf_cluster_core::hostlist::HostList;
use tf_cluster_core::{Error, MAX_NODES, Result};

use super::job::Job;
use crate::slurm_cmd::field;

/// Where the nodes come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The job's allocation: every step node is one of these.
    Allocation,
    /// The default partition, from slurmctld.
    Cluster,
    /// Only what -w names (slurmctld did not answer): CPUs unknown.
    Listed,
}

/// The nodes to choose from, in Slurm's order.
#[derive(Debug, Clone)]
pub struct Pool {
    pub names: Vec<String>,
    /// Each node's CPUs for the step, when known.
    pub cpus: Option<Vec<u32>>,
    pub origin: Origin,
    index: HashMap<String, usize>,
}

impl Pool {
    pub fn new(names: Vec<String>, cpus: Option<Vec<u32>>, origin: Origin) -> Pool {
        let index = names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), i))
            .collect();
        Pool {
            names,
            cpus,
            origin,
            index,
        }
    }

    pub fn position(&self, name: &str) -> Option<usize> {
        self.index.get(name).copied()
    }

    /// The pool of a job (`job.hosts` set).
    pub fn of_job(job: &Job, hosts: &HostList) -> Pool {
        let names: Vec<String> = hosts.iter().map(str::to_string).collect();
        let cpus = job.cpus.clone().filter(|c| c.len() == names.len());
        Pool::new(names, cpus, Origin::Allocation)
    }

    /// On a login node: the default partition's nodes from slurmctld, else
    /// the `listed` names in Slurm's usual order (prefix, then number).
    pub fn of_cluster(listed: &[String], arbitrary: bool, notes: &mut Vec<String>) -> Pool {
        if let Some((names, cpus)) = cluster_nodes() {
            let pool = Pool::new(names, Some(cpus), Origin::Cluster);
            match listed.iter().find(|n| pool.position(n).is_none()) {
                None => return pool,
                Some(other) => notes.push(format!(
                    "{other} is not in the default partition: another partition's nodes are not known here, their CPU counts neither"
                )),
            }
        } else {
            notes.push(
                "the nodes' CPU counts are unknown (slurmctld did not answer `scontrol show node`): each node is taken to hold every task, so Slurm fills the first nodes and leaves one task to each other node (give --ntasks-per-node to set the counts)".into(),
            );
        }
        let mut names = listed.to_vec();
        names.sort_by_key(|n| natural_key(n));
        names.dedup();
        if !arbitrary && names != listed {
            notes.push(format!(
                "-w {}: Slurm orders a step's nodes as slurm.conf lists them, taken here as by name: {}",
                listed.join(","),
                names.join(",")
            ));
        }
        Pool::new(names, None, Origin::Listed)
    }
}

/// Names in Slurm's usual node order: by prefix, then by number.
pub fn natural_key(name: &str) -> (String, u64, String) {
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let (prefix, number) = name.split_at(name.len() - digits);
    (
        prefix.to_string(),
        number.parse().unwrap_or(0),
        name.to_string(),
    )
}

/// `scontrol ARGS`' output, or None when it fails or takes too long.
fn scontrol(args: &[&str]) -> Option<String> {
    ask("scontrol", args)
}

/// `PROGRAM ARGS`' output (a Slurm client's, crate::slurm_cmd), or None
/// when it fails or takes too long.
fn ask(program: &str, args: &[&str]) -> Option<String> {
    let argv: Vec<&str> = std::iter::once(program)
        .chain(args.iter().copied())
        .collect();
    crate::slurm_cmd::run(&argv).ok()
}

/// The default partition's nodes in slurmctld's order, with their CPUs.
fn cluster_nodes() -> Option<(Vec<String>, Vec<u32>)> {
    let partitions = scontrol(&["show", "partition", "-o"])?;
    let nodes = scontrol(&["show", "node", "-o"])?;
    parse_cluster(&partitions, &nodes)
}

/// The GPUs on each node of job `id` as slurmctld holds them, for a job
/// whose variables name none (`salloc --gres=gpu:N` sets no GPU variable;
/// a step there gets the job's GPUs all the same). From squeue's one field
/// (`%b`, the job's TRES per node), never from `scontrol show job`'s line:
/// its `Command=` holds the job's command as typed, newlines and
/// `Key=Value` words included.
pub fn job_gpus(id: &str) -> Option<u32> {
    let text = ask("squeue", &["-h", "-j", id, "-o", "%b"])?;
    parse_tres_per_node(text.lines().next()?)
}

/// The GPUs of squeue's `%b` (TRES per node): `gres:gpu:4` in 22.05,
/// `gres/gpu:4` later, `N/A` for none.
pub fn parse_tres_per_node(tres: &str) -> Option<u32> {
    let entries: Vec<&str> = tres
        .trim()
        .split(',')
        .map(|e| e.strip_prefix("gres:").unwrap_or(e))
        .collect();
    super::shape::gres_gpus(&entries.join(",")).ok().flatten()
}

/// The one parser of `scontrol show partition -o` and `scontrol show node -o`:
/// the default partition's nodes (every node when none is the default), in
/// the nodes' order, with CPUTot.
pub fn parse_cluster(partitions: &str, nodes: &str) -> Option<(Vec<String>, Vec<u32>)> {
    let default = partitions
        .lines()
        .find(|l| field(l, "Default") == Some("YES"))
        .and_then(|l| field(l, "Nodes"))
        .and_then(|list| HostList::parse(list, MAX_NODES as usize).ok());
    let member: Option<std::collections::HashSet<&str>> =
        default.as_ref().map(|h| h.iter().collect());
    let mut names = Vec::new();
    let mut cpus = Vec::new();
    for line in nodes.lines() {
        let (Some(name), Some(tot)) = (field(line, "NodeName"), field(line, "CPUTot")) else {
            continue;
        };
        if member.as_ref().is_some_and(|m| !m.contains(name)) {
            continue;
        }
        names.push(name.to_string());
        cpus.push(tot.parse().ok()?);
    }
    (!names.is_empty()).then_some((names, cpus))
}

/// The host list of `-w` (or SLURM_HOSTFILE's hosts), within `budget` names.
pub fn parse_list(list: &str, budget: usize) -> Result<Vec<String>> {
    let hosts =
        HostList::parse(list, budget).map_err(|e| Error::new(format!("-w/--nodelist: {e}")))?;
    Ok(hosts.iter().map(str::to_string).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_names_in_slurms_usual_order() {
        let mut names = vec!["n10", "n9", "a1", "n1"];
        names.sort_by_key(|n| natural_key(n));
        assert_eq!(names, ["a1", "n1", "n9", "n10"]);
    }

    #[test]
    fn the_jobs_gpus_per_node_in_either_spelling() {
        assert_eq!(parse_tres_per_node("gres:gpu:4\n"), Some(4));
        assert_eq!(parse_tres_per_node("gres/gpu:4"), Some(4));
        assert_eq!(parse_tres_per_node("gres:gpu:a100:2,gres:nic:1"), Some(2));
        assert_eq!(parse_tres_per_node("gres:nic:1"), None);
        assert_eq!(parse_tres_per_node("N/A"), None);
    }

    #[test]
    fn the_default_partitions_nodes_and_cpus() {
        let partitions = "PartitionName=gpu AllowGroups=ALL Default=NO Nodes=g[1-2] State=UP\n\
                          PartitionName=debug AllowGroups=ALL Default=YES Nodes=node[1-3] State=UP\n";
        let nodes = "NodeName=g1 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUTot=64 State=IDLE\n\
                     NodeName=node1 Arch=x86_64 CPUAlloc=0 CPUEfctv=4 CPUTot=4 State=IDLE\n\
                     NodeName=node2 Arch=x86_64 CPUTot=8 State=MIXED\n\
                     NodeName=node3 Arch=x86_64 CPUTot=2 State=IDLE\n";
        let (names, cpus) = parse_cluster(partitions, nodes).unwrap();
        assert_eq!(names, ["node1", "node2", "node3"]);
        assert_eq!(cpus, [4, 8, 2]);
        assert_eq!(parse_cluster("", "garbage\n"), None);
    }
}
