//! The step's task map: which node runs every rank, as srun learnt it from
//! slurmctld (`slurm_job_step_layout_get`) and hands to every task in one
//! variable, [`VAR`]. With it no task has to rebuild the layout from what it
//! can see, so every distribution (topology-ordered blocks, cyclic, plane,
//! arbitrary, heterogeneous components) is exact.
//!
//! Format (version 1), fields separated by `;`:
//!
//! ```text
//! 1;JOB.STEP;HOSTS;RUNS          e.g. 1;4242.0;node[1-3];0*3,2,1
//! 1;JOB.STEP;VERDICT             none | skip | refused
//! ```
//!
//! A verdict instead of a map: `none`, srun could not get the layout (the
//! tasks rebuild it, as without srun); `skip`, the step inherited a spec
//! that does not fit it (nothing is set); `refused`, srun refused the step
//! and said why (every task fails before exec; srun cannot refuse the step
//! itself, as Slurm would keep the created step running).
//!
//! - `JOB.STEP`: the job and step the map was made for; a task of any other
//!   step (a nested srun, a value the user set) ignores it.
//! - `HOSTS`: a Slurm hostlist naming the step's nodes, node index i being the
//!   i-th name.
//! - `RUNS`: the node index of every rank in rank order, as comma-separated
//!   terms `A[-B][*K][xR]`: the nodes A to B (ascending or descending), each
//!   repeated K times, the whole repeated R times. A block step of 512 nodes
//!   with 8 tasks each is `0-511*8`, a cyclic one `0-511x8`, plane=2
//!   `0-511*2x4`.

use super::error::{Error, Result, bail, shown};
use super::hostlist::HostList;
use super::limits::{MAX_NODES, MAX_TASKS};
use super::number::parse_u32;
use super::runs::Runs;

/// The variable srun sets and every task of the step inherits.
/// (A `SLURM_` name: srun passes those to the tasks even with --export=NONE.)
pub const VAR: &str = "SLURM_TF_CLUSTER_MAP";

/// Longest map srun hands out (and a task reads): far above a regular layout
/// (a few dozen bytes), below what one variable may hold beside TF_CONFIG.
pub const MAX_LEN: usize = 64 * 1024;

/// A step's ranks and the nodes they run on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskMap {
    pub job: u32,
    pub step: u32,
    pub hosts: HostList,
    /// Node index (into `hosts`) of each rank, as runs.
    pub runs: Runs,
}

/// What a variable found in a task's environment says about this step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// Made by srun for this very step.
    Ours(TaskMap),
    /// srun's verdict for this step.
    Verdict(Verdict),
    /// Made for another step (inherited from an outer step): not evidence.
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// No map: rebuild the layout.
    None,
    /// Leave the step alone.
    Skip,
    /// Fail every task.
    Refused,
}

impl Verdict {
    fn word(self) -> &'static str {
        match self {
            Verdict::None => "none",
            Verdict::Skip => "skip",
            Verdict::Refused => "refused",
        }
    }

    /// The variable's value for step `job`.`step`.
    pub fn encode(self, job: u32, step: u32) -> String {
        format!("1;{job}.{step};{}", self.word())
    }
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

    fn from_runs(job: u32, step: u32, hosts: HostList, runs: Runs) -> Result<TaskMap> {
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

    /// The map as the variable's value, `hosts_text` being the step's
    /// hostlist as Slurm wrote it (names in node-index order).
    pub fn encode(&self, hosts_text: &str) -> String {
        format!(
            "1;{}.{};{hosts_text};{}",
            self.job,
            self.step,
            self.runs.text()
        )
    }

    /// Reads the variable's value; `job`/`step` are the task's own (from
    /// Slurm's items, not its environment).
    pub fn decode(text: &str, job: u32, step: u32) -> Result<Found> {
        TaskMap::decode_for(text, job, step, None)
    }

    /// [`TaskMap::decode`], reusing `nodelist` (SLURM_STEP_NODELIST's text and
    /// hosts) when the map names the hosts with the same text, as srun's map
    /// of a step does: a task then expands the list once.
    pub fn decode_for(
        text: &str,
        job: u32,
        step: u32,
        nodelist: Option<(&str, &HostList)>,
    ) -> Result<Found> {
        let bad = |why: &str| -> Result<Found> { bail!("bad {VAR} {}: {why}", shown(text)) };
        if text.len() > MAX_LEN {
            return bad(&format!("longer than {MAX_LEN} bytes"));
        }
        let mut fields = text.split(';');
        let (Some(version), Some(id), Some(hosts), runs, None) = (
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
        ) else {
            return bad("not 1;JOB.STEP;HOSTS;RUNS");
        };
        if version != "1" {
            return bad("unknown version (is srun's tf-cluster the same build as the node's?)");
        }
        let Some((j, s)) = id.split_once('.') else {
            return bad("no JOB.STEP");
        };
        let (Some(j), Some(s)) = (parse_u32(j), parse_u32(s)) else {
            return bad("JOB.STEP is not two numbers");
        };
        if (j, s) != (job, step) {
            return Ok(Found::Other);
        }
        let Some(runs) = runs else {
            return match [Verdict::None, Verdict::Skip, Verdict::Refused]
                .into_iter()
                .find(|v| v.word() == hosts)
            {
                Some(v) => Ok(Found::Verdict(v)),
                None => bad("not 1;JOB.STEP;HOSTS;RUNS nor a verdict"),
            };
        };
        let hosts = match nodelist {
            Some((same, parsed)) if same == hosts => parsed.clone(),
            _ => HostList::parse(hosts, MAX_NODES as usize)
                .map_err(|e| Error::new(format!("{VAR}: {e}")))?,
        };
        let runs = Runs::parse(runs, hosts.len())
            .map_err(|e| Error::new(format!("bad {VAR} runs {}: {e}", shown(runs))))?;
        Ok(Found::Ours(TaskMap::from_runs(job, step, hosts, runs)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(list: &str) -> HostList {
        HostList::parse(list, 1000).unwrap()
    }

    fn round_trip(node_of: &[u32], nodes: &str) -> String {
        let map = TaskMap::new(7, 3, hosts(nodes), node_of.to_vec()).unwrap();
        let text = map.encode(nodes);
        assert_eq!(
            TaskMap::decode(&text, 7, 3).unwrap(),
            Found::Ours(map),
            "{text}"
        );
        text
    }

    #[test]
    fn layouts_encode_to_runs() {
        // The examples measured on Slurm: srun -N3 -n5 (block), -m cyclic,
        // and 26.05's topology order (node1, node3, node2).
        assert_eq!(
            round_trip(&[0, 1, 1, 1, 2], "node[1-3]"),
            "1;7.3;node[1-3];0,1*3,2"
        );
        assert_eq!(
            round_trip(&[0, 1, 2, 1, 1], "node[1-3]"),
            "1;7.3;node[1-3];0-2,1*2"
        );
        assert_eq!(
            round_trip(&[0, 0, 0, 2, 1], "node[1-3]"),
            "1;7.3;node[1-3];0*3,2-1"
        );
        // Plane=2 over 3 nodes, 12 tasks; descending nodes.
        let plane: Vec<u32> = (0..12).map(|r| (r / 2) % 3).collect();
        assert_eq!(round_trip(&plane, "n[1-3]"), "1;7.3;n[1-3];0-2*2x2");
        assert_eq!(round_trip(&[2, 1, 0], "n[1-3]"), "1;7.3;n[1-3];2-0");
    }

    #[test]
    fn thousands_of_tasks_stay_small() {
        let block: Vec<u32> = (0..4096).map(|r| r / 8).collect();
        let cyclic: Vec<u32> = (0..4096).map(|r| r % 512).collect();
        let nodes = "n[0-511]";
        assert_eq!(round_trip(&block, nodes), "1;7.3;n[0-511];0-511*8");
        assert_eq!(round_trip(&cyclic, nodes), "1;7.3;n[0-511];0-511x8");
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

    #[test]
    fn verdicts_round_trip() {
        for v in [Verdict::None, Verdict::Skip, Verdict::Refused] {
            let text = v.encode(7, 3);
            assert_eq!(TaskMap::decode(&text, 7, 3).unwrap(), Found::Verdict(v));
            assert_eq!(TaskMap::decode(&text, 7, 4).unwrap(), Found::Other);
        }
    }

    #[test]
    fn another_steps_map_is_not_evidence() {
        assert_eq!(TaskMap::decode("1;7.2;n1;0", 7, 3).unwrap(), Found::Other);
        assert_eq!(TaskMap::decode("1;8.3;n1;0", 7, 3).unwrap(), Found::Other);
    }

    #[test]
    fn bad_maps_are_refused() {
        for (text, why) in [
            ("", "not 1;JOB.STEP"),
            ("1;7.3;maybe", "nor a verdict"),
            ("2;7.3;n1;0", "unknown version"),
            ("1;7;n1;0", "no JOB.STEP"),
            ("1;7.3;n1;0;", "not 1;JOB.STEP"),
            ("1;7.3;n[1-2];0", "node n2 runs no task"),
            ("1;7.3;n1,n1;0-1", "names node n1 twice"),
            ("1;7.3;n1;1", "node index 1"),
            ("1;7.3;n1;0x0", "a count of 0"),
            ("1;7.3;n1;0*4294967295x4294967295", "more than"),
            ("1;7.3;n1;0,", "\"\" is not a number"),
            ("1;7.3;n[1-2];0--1", "is not a number"),
        ] {
            let e = TaskMap::decode(text, 7, 3).unwrap_err().to_string();
            assert!(e.contains(why), "{text}: {e}");
        }
        let long = format!("1;7.3;n1;{}", "0,".repeat(MAX_LEN));
        assert!(
            TaskMap::decode(&long, 7, 3)
                .unwrap_err()
                .to_string()
                .contains("longer than")
        );
    }
}
