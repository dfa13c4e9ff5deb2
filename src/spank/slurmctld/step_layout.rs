//! srun's side of the task map: the step's layout as slurmctld made it
//! (`slurm_job_step_layout_get`, one RPC per srun step, bounded by Slurm's
//! MessageTimeout), turned into a [`TaskMap`].

use std::ffi::CStr;
use std::time::{Duration, Instant};

use super::super::bindings as sys;
use super::api;
use crate::core::hostlist::HostList;
use crate::core::task_map::TaskMap;
use crate::core::{Error, MAX_NODES, MAX_TASKS, Result};

/// A step's layout, as Slurm gave it.
pub struct Component {
    /// The node list as Slurm wrote it (node index i = the i-th name).
    pub nodes: String,
    /// The global task ids of each node.
    pub tids: Vec<Vec<u32>>,
}

/// Frees the layout whatever happens while it is read.
struct Owned(*mut sys::slurm_step_layout_t);

impl Drop for Owned {
    fn drop(&mut self) {
        // SAFETY: a layout slurm_job_step_layout_get returned, freed once.
        unsafe { sys::slurm_job_step_layout_free(self.0) }
    }
}

/// The layout of step `step` of job `job`, and how long slurmctld took to
/// give it.
pub fn fetch(job: u32, step: u32) -> Result<(Component, Duration)> {
    let start = Instant::now();
    // SAFETY: a valid step id; the result is NULL or a layout we own.
    let layout = unsafe { sys::slurm_job_step_layout_get(&mut api::step_id(job, step)) };
    let took = start.elapsed();
    let layout = Owned(
        api::non_null(layout, || {
            format!("slurmctld gave no layout for step {job}.{step}")
        })?
        .as_ptr(),
    );
    // SAFETY: non-NULL, filled by Slurm.
    let l = unsafe { &*layout.0 };
    let nodes = l.node_cnt as usize;
    if l.node_list.is_null() || l.tasks.is_null() || l.tids.is_null() {
        return Err(Error::new("slurmctld's step layout is incomplete"));
    }
    if nodes > MAX_TASKS as usize || l.task_cnt > MAX_TASKS {
        return Err(Error::new(format!(
            "the step has {} tasks on {nodes} nodes; more than {MAX_TASKS} tasks cannot be laid out",
            l.task_cnt
        )));
    }
    // SAFETY: node_list is a NUL-terminated string of the layout.
    let list = unsafe { CStr::from_ptr(l.node_list) }
        .to_str()
        .map_err(|_| Error::new("the step's node list is not UTF-8"))?
        .to_string();
    // SAFETY: `tasks` and `tids` have node_cnt entries, tids[i] tasks[i].
    let counts = unsafe { std::slice::from_raw_parts(l.tasks, nodes) };
    let rows = unsafe { std::slice::from_raw_parts(l.tids, nodes) };
    let mut tids = Vec::with_capacity(nodes);
    let mut total = 0usize;
    for (&count, &row) in counts.iter().zip(rows) {
        total += usize::from(count);
        if total > l.task_cnt as usize || row.is_null() {
            return Err(Error::new("slurmctld's step layout does not add up"));
        }
        // SAFETY: row has `count` task ids.
        tids.push(unsafe { std::slice::from_raw_parts(row, usize::from(count)) }.to_vec());
    }
    Ok((Component { nodes: list, tids }, took))
}

impl Component {
    /// The step's task map, and its node list text.
    pub fn into_map(self, job: u32, step: u32) -> Result<(TaskMap, String)> {
        let hosts = HostList::parse(&self.nodes, MAX_NODES as usize)?;
        Ok((
            TaskMap::from_tids(job, step, hosts, &self.tids)?,
            self.nodes,
        ))
    }

    /// The hosts and each one's task ids, for merging components.
    pub fn into_parts(self) -> Result<(HostList, Vec<Vec<u32>>)> {
        Ok((HostList::parse(&self.nodes, MAX_NODES as usize)?, self.tids))
    }
}
