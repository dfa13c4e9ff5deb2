//! slurmstepd's side at the ends: a task's (`task_exit`, and a refusing
//! task's ending of its step) and the step's on this node (`exit`). Each
//! runs in slurmstepd itself or a task as the module above says; none
//! fails.

use std::sync::PoisonError;

use super::super::guard::{Answer, caught, guard};
use super::super::handle::Spank;
use super::super::slurmctld::step_kill::{HostKill, end_from_host, end_refused_step};
use super::{Prepared, Stepd};

impl Stepd {
    /// A refusing task ends its step on every node: it asks slurmstepd to,
    /// through the shared page, so that a node sends the kill once however
    /// many of its tasks refuse (behind a container plugin the task could
    /// not send it anyway: no munged socket there). Without the page (it
    /// could not be mapped) a task on the host sends it itself.
    pub(super) fn end_step(&self, spank: &Spank) {
        if let Some(host_kill) = self.host_kill.get() {
            host_kill.ask();
            return;
        }
        if !self.moved() {
            end_refused_step(spank);
        }
    }

    /// In slurmstepd itself (Slurm's `_wait_for_any_task`, as root, on the
    /// host), after each task of the node exits: the task's end in the
    /// step's record, the requeue on the step's code, and, when a task
    /// asked, the first such call on the node ends the step on every node.
    /// Each part in its own guard: a panic in one is said once, the others
    /// still run, and slurmstepd goes on. A step that did not ask for the
    /// plugin has no record, settings or page: each part returns at once.
    /// Never fails: a failure here is no task's.
    pub fn task_exit(&self, spank: &Spank) -> i32 {
        guard("task_exit_record", Some(spank), Answer::Succeeds, || {
            if let Some(Some(record)) = self.record.get() {
                super::super::record::task_exit(spank, record);
            }
            Ok(())
        });
        guard("task_exit_requeue", Some(spank), Answer::Succeeds, || {
            self.requeue(spank);
            super::super::bad_node::record(self.record.get().and_then(Option::as_deref));
            Ok(())
        });
        guard("task_exit", Some(spank), Answer::Succeeds, || {
            if let Some(host_kill) = self.host_kill.get()
                && host_kill.take()
                && !super::super::slurmctld::requeue::requeued()
            {
                end_from_host(spank);
            }
            Ok(())
        })
    }

    /// The requeue on the step's code, as srun's word or the node's share
    /// set it. A task the plugin refused exits with 1, whatever the step's
    /// code: never a requeue on the code; a step the preflight refused
    /// here is requeued (without this node) in a step with
    /// `--tf-requeue-on`.
    fn requeue(&self, spank: &Spank) {
        let refused_here = self.host_kill.get().is_some_and(HostKill::refused_here);
        let name = super::super::bad_node::own_name();
        let node = name.as_deref();
        match &*self.node.lock().unwrap_or_else(PoisonError::into_inner) {
            Some(Prepared::Ready(r)) if !refused_here => {
                super::super::slurmctld::requeue::task_exit(spank, r.node.settings(), node);
            }
            Some(Prepared::Plain(settings)) => {
                super::super::slurmctld::requeue::task_exit(spank, settings, node);
            }
            Some(Prepared::Failed(_))
                if refused_here && let Some(s) = self.preflight_refused.get() =>
            {
                super::super::slurmctld::requeue::refused(spank, s, node);
            }
            _ => {}
        }
    }

    /// slurmstepd, once per node after every task of the step ended, as
    /// root on the host: removes the step's private directory (a task
    /// ended by `scancel` may not have). Never fails.
    pub fn exit(&self) -> i32 {
        if let Some(dir) = self.private_dir.get() {
            let _ = caught("exit", || {
                if let Err(why) = dir.remove() {
                    log::warn!("cannot remove the step's directory {}: {why}", dir.path());
                }
                Ok(())
            });
        }
        0
    }
}
