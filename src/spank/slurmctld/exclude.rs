//! `--tf-exclude-max=N` beside `--tf-requeue-on`: the node whose task ended
//! with the code (or that the preflight refused) is added to the job's
//! excluded nodes as the job is requeued, so that its next incarnation
//! runs elsewhere (crate::core::exclusion decides).
//!
//! Sent by slurmstepd as root, after the requeue (slurmctld changes a job's
//! excluded nodes only while it is pending), for the job the requeue named:
//! the step's own, from slurmctld's record ([`Targets`], never a variable;
//! a heterogeneous job's components are not excluded from). The node is
//! slurmstepd's own name, and is excluded only where slurmctld records it
//! among the job's nodes: a job loses at most nodes it ran on. Per event:
//! two reads (the job's record, its partition's nodes) before the requeue,
//! one update after it, each bounded by Slurm's MessageTimeout; none when
//! the setting is 0.

use std::ffi::{CStr, CString, c_char};
use std::sync::OnceLock;

use super::super::bindings as sys;
use super::api;
use super::job_record::{self, Targets};
use crate::core::exclusion::{Exclusion, Placement, decide};
use crate::core::{Error, Result, Settings};

/// slurm.h's `SHOW_ALL`: hidden partitions too.
const SHOW_ALL: u16 = 0x0001;
/// Most bytes of one string read from slurmctld's records.
const MAX_TEXT: usize = 1 << 20;

/// The node this slurmstepd excluded and why, for the step's record.
static EXCLUDED: OnceLock<(String, String)> = OnceLock::new();

/// The node this slurmstepd excluded from the job and why, once made.
pub fn excluded() -> Option<&'static (String, String)> {
    EXCLUDED.get()
}

/// An exclusion decided before the requeue, sent after it.
pub struct Plan {
    job: u32,
    node: String,
    exclusion: Exclusion,
}

impl Plan {
    /// The job's record and its partition's nodes read, and the exclusion
    /// of `node` decided; None when the setting is off or the job is a
    /// heterogeneous one's component (its leader is requeued).
    pub fn read(targets: Targets, node: &str, settings: &Settings) -> Option<Plan> {
        if settings.exclude_max == 0 || !targets.is_own() {
            return None;
        }
        let job = targets.whole();
        let exclusion = match placement(job) {
            Ok(p) => decide(node, settings.exclude_max, &p),
            Err(e) => Exclusion::Not(Some(format!("{node} is not excluded: {e}"))),
        };
        Some(Plan {
            job,
            node: node.to_string(),
            exclusion,
        })
    }

    /// After the requeue: the job's excluded nodes and the plugin's count
    /// updated in one request; `why` the requeue's cause. The words the
    /// requeue's line ends with.
    pub fn send(self, why: &str) -> String {
        let (exc_nodes, admin_comment, count) = match self.exclusion {
            Exclusion::Not(None) => return String::new(),
            Exclusion::Not(Some(line)) => return format!("; {line}"),
            Exclusion::Add {
                exc_nodes,
                admin_comment,
                count,
            } => (exc_nodes, admin_comment, count),
        };
        let node = &self.node;
        match update(self.job, &exc_nodes, &admin_comment) {
            Ok(()) => {
                let _ = EXCLUDED.set((node.clone(), why.to_string()));
                format!(
                    "; {node} excluded from the job ({count} node(s) by tf-cluster; ExcNodeList={exc_nodes})"
                )
            }
            Err(e) => format!("; {node} is not excluded: {e}"),
        }
    }
}

/// One update of the job, as root: its excluded nodes and admin comment.
fn update(job: u32, exc_nodes: &str, admin_comment: &str) -> Result<()> {
    let c = |s: &str| CString::new(s).map_err(|_| Error::new("a NUL in slurmctld's record"));
    let (exc_nodes, admin_comment) = (c(exc_nodes)?, c(admin_comment)?);
    // SAFETY: all-zero is a valid start, which slurm_init_job_desc_msg
    // fills with Slurm's "unset" values.
    let mut desc: sys::job_desc_msg_t = unsafe { std::mem::zeroed() };
    // SAFETY: a descriptor we own.
    unsafe { sys::slurm_init_job_desc_msg(&mut desc) };
    #[cfg(not(slurm_requeue_by_id))]
    {
        desc.job_id = job;
    }
    // 26.05 on (as slurm_requeue): the job named by a step id.
    #[cfg(slurm_requeue_by_id)]
    {
        desc.step_id = api::step_id(job, sys::NO_VAL);
    }
    desc.exc_nodes = exc_nodes.as_ptr().cast_mut();
    desc.admin_comment = admin_comment.as_ptr().cast_mut();
    // SAFETY: the descriptor's strings outlive the call; libslurm sends
    // the RPC and keeps no pointer.
    let rc = unsafe { sys::slurm_update_job(&mut desc) };
    api::check(rc, || "slurmctld did not update the job".to_string())
}

/// Frees a response whatever happens while it is read.
struct Owned<T>(*mut T, unsafe extern "C" fn(*mut T));

impl<T> Drop for Owned<T> {
    fn drop(&mut self) {
        // SAFETY: a response its request filled, freed once.
        unsafe { (self.1)(self.0) }
    }
}

/// The job's placement as slurmctld records it, with its partition's
/// nodes: two reads.
fn placement(job: u32) -> Result<Placement> {
    let (mut placement, partition) = job_record::with_job(job, |j| {
        let placement = Placement {
            nodes: text(j.nodes)?,
            exc_nodes: text(j.exc_nodes)?,
            req_nodes: text(j.req_nodes)?,
            admin_comment: text(j.admin_comment)?,
            num_nodes: j.num_nodes,
            partition_nodes: None,
        };
        Ok((placement, text(j.partition)?))
    })?;
    placement.partition_nodes = partition_nodes(&partition)?;
    Ok(placement)
}

/// The nodes of partition `name` (one read of every partition's record).
fn partition_nodes(name: &str) -> Result<Option<String>> {
    let mut resp: *mut sys::partition_info_msg_t = std::ptr::null_mut();
    // SAFETY: `resp` is written with NULL or a response we own.
    let rc = unsafe { sys::slurm_load_partitions(0, &mut resp, SHOW_ALL) };
    let what = || "slurmctld gave no partition record".to_string();
    api::check(rc, what)?;
    let resp = Owned(
        api::non_null(resp, what)?.as_ptr(),
        sys::slurm_free_partition_info_msg,
    );
    // SAFETY: non-NULL, filled by Slurm.
    let r = unsafe { &*resp.0 };
    if r.partition_array.is_null() {
        return Ok(None);
    }
    // SAFETY: partition_array holds record_count records.
    let parts = unsafe { std::slice::from_raw_parts(r.partition_array, r.record_count as usize) };
    for p in parts {
        if text(p.name)? == name {
            return Ok(Some(text(p.nodes)?));
        }
    }
    Ok(None)
}

/// A string of a record ("" when NULL), bounded.
fn text(p: *const c_char) -> Result<String> {
    if p.is_null() {
        return Ok(String::new());
    }
    // SAFETY: a NUL-terminated string of the response.
    let s = unsafe { CStr::from_ptr(p) };
    if s.count_bytes() > MAX_TEXT {
        return Err(Error::new("slurmctld's record holds an overlong value"));
    }
    Ok(s.to_string_lossy().into_owned())
}
