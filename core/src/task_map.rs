//! The step's task map: which node runs every rank, as srun learnt it from
//! slurmctld (`slurm_job_step_layout_get`) and hands to every task in its
//! hand-off (crate::handoff). With it no task has to rebuild the layout from
//! what it can see, so every distribution (topology-ordered blocks, cyclic,
//! plane, arbitrary, heterogeneous components) is exact.

use super::error::{Result, bail};
use super::hostlist::HostList;
use super::limits::MAX_TASKS;
use super::runs::Runs;

/// A step's ranks and the nodes they run on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskMap {
    pub job: u32,
    pub step: u32,
    pub hosts: HostList,
    /// Node index (into `hosts`) of each rank, as runs.
    pub runs: Runs,
}

impl TaskMap {
    /// The map from each node's global task ids, as Slurm's step layout gives
    /// them (`tids[i]` runs on node `i`); every rank 0..n must appear once.
    pub fn from_tids(job: u32, step: u32, hosts: HostList, tids: &[Vec<u32>]) -> Result<TaskMap> {
        if tids.len() != hosts.len() {
            bail!(
                "the step layout names {} node(s) but gives tasks for {}",
                hosts.len(),
                tids.len()
            );
        }
        let total: usize = tids.iter().map(Vec::len).sum();
        if total > MAX_TASKS as usize {
            bail!("the step layout has {total} tasks, more than {MAX_TASKS}");
        }
        let mut node_of = vec![u32::MAX; total];
        for (node, ids) in tids.iter().enumerate() {
            for &rank in ids {
                match node_of.get_mut(rank as usize) {
                    Some(slot) if *slot == u32::MAX => *slot = node as u32,
                    _ => bail!("the step layout gives task {rank} twice or out of range"),
                }
            }
        }
        TaskMap::new(job, step, hosts, node_of)
    }

    /// The map of a heterogeneous step from its components' layouts, in
    /// component order: component k's task ids count from the tasks of the
    /// components before it (as SLURM_PROCID does). A node shared by two
    /// components appears once.
    pub fn from_components(
        job: u32,
        step: u32,
        components: &[(HostList, Vec<Vec<u32>>)],
    ) -> Result<TaskMap> {
        let mut names: Vec<&str> = Vec::new();
        let mut tids: Vec<Vec<u32>> = Vec::new();
        let mut offset = 0u32;
        for (hosts, rows) in components {
            if rows.len() != hosts.len() {
                bail!(
                    "a component's layout names {} node(s) but gives tasks for {}",
                    hosts.len(),
                    rows.len()
                );
            }
            let mut size = 0u32;
            for (host, row) in hosts.iter().zip(rows) {
                let node = match names.iter().position(|&n| n == host) {
                    Some(i) => i,
                    None => {
                        names.push(host);
                        tids.push(Vec::new());
                        names.len() - 1
                    }
                };
                for &t in row {
                    let Some(rank) = offset.checked_add(t).filter(|&r| r < MAX_TASKS) else {
                        bail!("the heterogeneous step has more than {MAX_TASKS} tasks");
                    };
                    tids[node].push(rank);
                }
                size += row.len() as u32;
            }
            offset = offset.saturating_add(size);
        }
        for row in &mut tids {
            row.sort_unstable();
        }
        TaskMap::from_tids(job, step, HostList::from_names(names), &tids)
    }

    /// Checks that the hosts are distinct and each runs a task.
    pub fn new(job: u32, step: u32, hosts: HostList, node_of: Vec<u32>) -> Result<TaskMap> {
        if let Some(&n) = node_of.iter().find(|&&n| n as usize >= hosts.len()) {
            bail!("the task map places a task on node index {n}, beyond its hosts");
        }
        TaskMap::from_runs(job, step, hosts, Runs::from_node_of(&node_of))
    }

    /// The map from runs, checked: the hosts are distinct and each runs a
    /// task.
    pub fn from_runs(job: u32, step: u32, hosts: HostList, runs: Runs) -> Result<TaskMap> {
        if let Some(dup) = hosts.first_duplicate() {
            bail!("the task map names node {dup} twice");
        }
        if let Some(i) = runs.counts(hosts.len()).iter().position(|&c| c == 0) {
            bail!("the task map's node {} runs no task", hosts.get(i));
        }
        Ok(TaskMap {
            job,
            step,
            hosts,
            runs,
        })
    }

    /// The node index of every rank (srun's side: the map is expanded once
    /// per step there, never per task).
    pub fn node_of(&self) -> Vec<u32> {
        self.runs.iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(list: &str) -> HostList {
        HostList::parse(list, 1000).unwrap()
    }

    #[test]
    fn from_tids_is_the_layout() {
        let tids = [vec![0], vec![1, 3, 4], vec![2]];
        let map = TaskMap::from_tids(1, 0, hosts("node[1-3]"), &tids).unwrap();
        assert_eq!(map.node_of(), [0, 1, 2, 1, 1]);
        for bad in [
            vec![vec![0], vec![0]],
            vec![vec![0], vec![2]],
            vec![vec![0]],
        ] {
            assert!(
                TaskMap::from_tids(1, 0, hosts("n[1-2]"), &bad).is_err(),
                "{bad:?}"
            );
        }
    }
}
