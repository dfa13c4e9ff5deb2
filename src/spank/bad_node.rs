//! A bad node costs seconds, not the run: in a step with `--tf-requeue-on`
//! a node the preflight refuses has its slurmstepd requeue the job, without
//! that node (super::slurmctld::requeue, super::slurmctld::exclude), instead
//! of failing the run. Without `--tf-requeue-on` a refusal stays a refusal.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use super::handle::Spank;
use super::record::Record;
use crate::core::{Error, Node, Result, Settings};

/// The node's preflight (super::preflight). Its refusal, in a step with
/// `--tf-requeue-on`, says that the job is requeued, and leaves the step's
/// settings in `refused` for `task_exit`, which requeues it.
pub fn preflight(
    spank: &Spank,
    node: &Node,
    gres: &str,
    refused: &OnceLock<Box<Settings>>,
) -> Result<()> {
    let Err(e) = super::preflight::run(spank, node, gres) else {
        return Ok(());
    };
    let settings = node.settings();
    if settings.requeue_on.is_none() {
        return Err(e);
    }
    let _ = refused.set(Box::new(settings.clone()));
    let without = match settings.exclude_max {
        0 => "",
        _ => " without this node",
    };
    Err(Error::new(format!(
        "{}: the job is requeued{without} (--tf-requeue-on)",
        e.message()
    )))
}

/// After the requeue: the node this slurmstepd excluded, and why, in the
/// step's record (once).
pub fn record(record: Option<&Record>) {
    static WRITTEN: AtomicBool = AtomicBool::new(false);
    if let (Some(record), Some((node, why))) = (record, super::slurmctld::exclude::excluded())
        && !WRITTEN.swap(true, Ordering::SeqCst)
    {
        super::record::excluded(record, node, why);
    }
}

/// slurmstepd's own name of its node (slurmstepd.c sets SLURMD_NODENAME in
/// its own environment, from slurmd's configuration): the node a requeue
/// excludes, and only where slurmctld records it among the job's nodes.
pub fn own_name() -> Option<String> {
    std::env::var("SLURMD_NODENAME").ok()
}
