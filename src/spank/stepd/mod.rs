//! slurmstepd's side: apply srun's decision, in two steps.
//!
//! `user_init`, once per node: read the host's facts and make the node's
//! share of the step (core::Node: the layout, ports, GPUs, TensorFlow's
//! cluster). Slurm runs it in slurmstepd (mgr.c `_fork_all_tasks`), as the
//! user (privileges dropped; in a CLONE_VM child joined to the job's
//! namespace with `PrologFlags=contain`, still as the user), after the
//! step's environment is set and before any task is forked; what it makes
//! here every forked task inherits. It is the one hook that fits:
//! `task_init_privileged` runs per task, as root, and (like `task_init`)
//! after `fork`; and container plugins enter their namespaces only later, in
//! `task_init` (pyxis_slurmstepd.c: `enroot_start_once` then `setns` there;
//! its `user_init` only prepares the container). A failure in `user_init`
//! would drain the node of a batch job, so nothing fails here: an error
//! becomes the step's, carried to each task. Real slurmstepd always runs
//! `user_init` before the tasks; a task that finds no share (it did not
//! run) fails if its step asked for the plugin, rather than make the share
//! alone from inside a container, and is left alone otherwise.
//!
//! `task_init`, in each task just before exec and as the user: take the
//! task's own part (its rank and local id) and set its variables. A failure
//! here ends this task with exit code 1 and leaves the node in service, so
//! every refusal slurmstepd makes is made here (fail closed).
//!
//! The task's rank and local id are Slurm's SPANK items (in a
//! heterogeneous step, the node's share's rank of the local id), never
//! SLURM_PROCID: a container plugin listed earlier in plugstack.conf (pyxis)
//! imports the image's environment over the task's in its own `task_init`,
//! before this one, and an image may set it.
//!
//! One fact is the task's alone: when Slurm binds GPUs to each task
//! (`--gpus-per-task`, `--gpu-bind=…`), it writes the task's own list only in
//! the task, just before the SPANK `task_init` hooks (task.c `exec_task`), so
//! the task reads it there. Behind a container plugin that list may be the
//! image's, and no hook on the host can see the task's list earlier. So
//! `task_init_privileged` (as root, in the task, after Slurm put it in the
//! job's container if any, before any plugin's `task_init`; pyxis has none)
//! notes the task's mount namespace, and a task bound per task whose
//! namespace has changed by `task_init`, or that cannot tell, is refused
//! rather than read the image's list. Whether the step is bound comes from
//! the task's SLURMD_TRES_BIND only on the host; in a moved task from srun's
//! record of the step (its word), as the image may set that variable too.
//! Tasks not bound per task take the node's plan and read nothing.
//!
//! A task must reach the node's network: every address, interface and port
//! set here names it. A framework step that asks a container plugin for a
//! network namespace of its own (its `container-unshare` option naming
//! `net`, found by name whatever the plugstack order; host.rs) fails in
//! `user_init`'s share, and `user_init` notes the node's network namespace
//! so that a task a plugin before this one moved into another is refused in
//! `task_init` too.
//!
//! A refusing task ends its step on every node (super::slurmctld::step_kill), so
//! that a node deciding otherwise does not run on. The task only raises a
//! flag in a small page `user_init` maps (`MAP_SHARED`, before the fork:
//! every task shares it) for a step that asked for the plugin; `task_exit`,
//! which Slurm runs in slurmstepd itself as root on the host after each
//! task exits (mgr.c `_wait_for_any_task`; with
//! `SlurmdParameters=contain_spank` in a CLONE_VM child joined to the job's
//! container), sends the kill once per node, however many of its tasks
//! refused, naming the step by slurmstepd's own ids and a heterogeneous
//! step's leader as slurmctld records it (super::slurmctld::job_record).
//! Behind a container plugin the task could not send it anyway (munged's
//! socket is not in the container), and no variable (srun's environment,
//! which the user controls, or an image's SLURM_JOB_ID) may choose what is
//! killed or requeued. `task_exit` takes no alarm (it
//! is slurmstepd's own process: Slurm's RPC timeouts bound it) and always
//! returns 0. A step that did not ask has no page, and `task_exit` returns
//! at once. A step without a framework option that `--tf-record` or
//! `--tf-requeue-on` made the plugin's (srun's word, `verdict=plain`) sets
//! no variable and refuses no task, so it has no page either: `task_exit`
//! only writes each task's end and requeues on the step's code.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock, PoisonError};

use super::bounded_child::Ids;
use super::fault;
use super::guard::{Answer, caught, guard};
use super::handle::Spank;
use super::options;
use super::private_dir::PrivateDir;
use super::slurmctld::step_kill::HostKill;
use crate::core::gpus::bind::Recorded;
use crate::core::handoff;
use crate::core::os::slurm_conf_file;
use crate::core::record::DebugFiles;
use crate::core::{self, Asked, Error, Node, Result, Settings, Step, StepKind};

mod apply;
mod async_step;
mod bind;
mod ends;
mod host;
mod sattach;

use apply::{Ready, apply, c_strings};
use host::{OnHost, entered_namespaces, host_env, mount_namespace, net_namespace};

/// slurm.h: step ids above this are special (batch script, extern, interactive).
const SLURM_MAX_NORMAL_STEP_ID: u32 = 0xffff_fff0;

/// slurmstepd's state.
pub struct Stepd {
    /// slurmstepd could not register the options, so it cannot tell whether
    /// a step asked for the plugin: the steps srun marked fail.
    registration_failed: bool,
    /// The node's share of the step, made by `user_init` (None: it did not
    /// run, and a task of a step that asked for the plugin fails).
    node: Mutex<Option<Prepared>>,
    /// In a task: the mount namespace Slurm put it in, read in
    /// `task_init_privileged` (None: not read, or unreadable).
    placed_in: OnceLock<Option<PathBuf>>,
    /// The page the node's tasks share with slurmstepd, mapped by
    /// `user_init` for a step that asked for the plugin: a task refusing
    /// behind a container asks there for slurmstepd to end the step.
    host_kill: OnceLock<HostKill>,
    /// The step's record on this node, begun by `user_init`.
    record: OnceLock<Option<Box<super::record::Record>>>,
    /// The step's private directory on this node (a `--ray-cluster`
    /// step's), removed at the step's end.
    private_dir: OnceLock<PrivateDir>,
    /// The step's settings when the preflight refused it on this node in
    /// a step with `--tf-requeue-on`: `task_exit` requeues the job.
    preflight_refused: OnceLock<Box<Settings>>,
}

/// What `user_init` made of the step for this node's tasks.
enum Prepared {
    /// The step did not ask for the plugin, srun left it alone, or it is no
    /// step's tasks (batch script, extern step): nothing is set.
    Nothing,
    /// srun refused the step and said why, once for the step: every task
    /// fails, and none ends the step (it ends anyway).
    Refused,
    /// Every task of the node fails with this error (not said again when
    /// it was already said once, `Kind::Reported`).
    Failed(Error),
    /// The node's share of the step.
    Ready(Box<Ready>),
    /// A step without a framework option that its `--tf-record` or
    /// `--tf-requeue-on` made the plugin's: no task gets a variable; these
    /// settings (srun's word) say what `task_exit` records and requeues.
    Plain(Box<Settings>),
}

/// Most bytes of variables made ahead for a node's tasks: beyond it (a
/// TF_CONFIG of many ranks times many tasks on one node) each task renders
/// its own, as slurmstepd's memory must stay bounded.
const AHEAD_BUDGET: usize = 16 << 20;

impl Stepd {
    pub fn new(registration_failed: bool) -> Stepd {
        Stepd {
            registration_failed,
            node: Mutex::new(None),
            placed_in: OnceLock::new(),
            host_kill: OnceLock::new(),
            record: OnceLock::new(),
            private_dir: OnceLock::new(),
            preflight_refused: OnceLock::new(),
        }
    }

    /// Once per node, before the tasks: never fails (see the module).
    pub fn user_init(&self, spank: &Spank) -> i32 {
        // A test build's fault: as if slurmstepd had not run the hook.
        if fault::active("no_user_init", Some(spank)) {
            return 0;
        }
        // A panic is an error the panic hook said once for the node.
        let prepared = match caught("user_init", || {
            fault::inject("user_init", Some(spank));
            self.prepare(spank)
        }) {
            Ok(prepared) => prepared,
            Err(e) => Prepared::Failed(e),
        };
        // Before any task is forked, so that every task shares it; only for
        // a step that asked for the plugin (a framework-less one refuses no
        // task). Without it a refusing task on the host ends the step itself.
        let _ = caught("user_init_end", || {
            fault::inject("user_init_end", Some(spank));
            if !matches!(prepared, Prepared::Nothing | Prepared::Plain(_))
                && let Some(page) = HostKill::map()
            {
                let _ = self.host_kill.set(page);
            }
            Ok(())
        });
        *self.node.lock().unwrap_or_else(PoisonError::into_inner) = Some(prepared);
        0
    }

    fn prepare(&self, spank: &Spank) -> Result<Prepared> {
        // The batch script, salloc's interactive step and the extern step
        // inherit the job's options but are not the step's tasks: nothing
        // of theirs is read, whatever their environment holds.
        if spank.step_id()? > SLURM_MAX_NORMAL_STEP_ID {
            return Ok(Prepared::Nothing);
        }
        let said = match self.kind(spank)? {
            StepKind::Nothing => return Ok(Prepared::Nothing),
            StepKind::Refused => return Ok(Prepared::Refused),
            StepKind::Plain { settings, restart } => {
                return Ok(self.plain(spank, settings, restart));
            }
            StepKind::Alone { given, restart } => {
                let settings = async_step::alone(spank, &given)?;
                return Ok(settings.map_or(Prepared::Refused, |s| self.plain(spank, s, restart)));
            }
            StepKind::Framework(said) => *said,
        };
        // An srun --async step's map, from slurmctld (async_step.rs).
        let Some(said) = async_step::with_layout(spank, said)? else {
            return Ok(Prepared::Nothing);
        };
        let host_env = host_env(spank)?;
        // A container plugin's network of its own, asked for (see host.rs).
        host::refuse_unshared_network(spank, &host_env)?;
        // srun's word applied in the core, as the CLI twin applies it.
        let handed = Step::gather_said(&mut OnHost(spank), said)?;
        let recorded_bind = handed.recorded_bind.clone();
        let Some(node) = Node::prepare_handed(handed)? else {
            return Ok(Prepared::Nothing);
        };
        self.ready(spank, node, recorded_bind, host_env)
    }

    /// What this node makes of its step: the one decision, in the core,
    /// from srun's word (its variable and Slurm's ids) and the step's
    /// options, for `user_init` and a task that saw none alike.
    fn kind(&self, spank: &Spank) -> Result<StepKind> {
        let framework = !self.registration_failed && options::asks(spank)?;
        if framework {
            Step::num_tasks(&mut OnHost(spank))?;
        }
        let asked = match self.registration_failed {
            true => Asked::Unknown,
            false => Asked::Known {
                framework,
                settings: Box::new(|off_overridden| options::step_settings(spank, off_overridden)),
            },
        };
        let word = spank.getenv(handoff::VAR)?;
        let ids = (spank.job_id()?, spank.step_id()?);
        StepKind::of(word.as_deref(), Some(ids), asked)
    }

    /// A step without a framework option, as srun decided it: its record
    /// begun (the node's line; each rank's comes with its end), nothing for
    /// its tasks.
    fn plain(&self, spank: &Spank, settings: Box<Settings>, restart: u32) -> Prepared {
        let record = super::record::begin_plain(spank, &settings, restart).map(Box::new);
        let _ = self.record.set(record);
        Prepared::Plain(settings)
    }

    /// The node's share made ready for its tasks: the step's record and
    /// private directory begun, the preflight checks run, the tasks'
    /// variables made ahead.
    fn ready(
        &self,
        spank: &Spank,
        node: Node,
        recorded_bind: Recorded,
        host_env: HashMap<String, String>,
    ) -> Result<Prepared> {
        // The node's files read once, here on the host (see bind.rs);
        // gres.conf for the binding and the preflight alike.
        let gres = slurm_conf_file("gres.conf").unwrap_or_default();
        let bind = bind::prepare(spank, &node, &gres, &host_env);
        let placed = |local| bind.as_ref()?.placed(&node, local);
        let record = super::record::begin(spank, &node, &placed).map(Box::new);
        // Only where the run's directory was made. The step's environment
        // as srun sent it (here on the host, before any container plugin)
        // says what the user set: that wins, these are defaults.
        let debug_files = record.as_ref().and_then(|r| {
            DebugFiles::new(r.run_dir(), node.ras_port(), |name| {
                host_env.get(name).map(String::as_str)
            })
        });
        let _ = self.record.set(record);
        if let Some(dir) = private_dir(spank, &node) {
            let _ = self.private_dir.set(dir);
        }
        super::bad_node::preflight(spank, &node, &gres, &self.preflight_refused)?;
        let imex = host::imex_needed(&bind::kernel_root(spank), &node, &host_env);
        let here = node.render_here(AHEAD_BUDGET).map(|tasks| {
            tasks
                .into_iter()
                .map(|(rank, injection)| {
                    if let Ok(i) = &injection {
                        log::debug!("{}", core::task_log_line(node.step(), rank, i));
                    }
                    (rank, injection.and_then(c_strings))
                })
                .collect()
        });
        Ok(Prepared::Ready(Box::new(Ready {
            node,
            recorded_bind,
            here,
            host_env,
            debug_files,
            net_ns: net_namespace(),
            imex,
            bind,
        })))
    }

    /// In each task, as root, before any plugin's `task_init`: notes the
    /// task's mount namespace, for a task that will read its own GPU list
    /// and for a refusing task, which must know whether it is still on the
    /// host (see the module). Only for a step that asked for the plugin;
    /// never fails.
    pub fn task_init_privileged(&self) -> i32 {
        let _ = caught("task_init_privileged", || {
            let prepared = self.node.lock().unwrap_or_else(PoisonError::into_inner);
            if matches!(
                &*prepared,
                Some(Prepared::Ready(_) | Prepared::Failed(_) | Prepared::Refused)
            ) {
                let _ = self.placed_in.set(mount_namespace());
            }
            Ok(())
        });
        0
    }

    pub fn task_init(&self, spank: &Spank) -> i32 {
        // srun refused the step: every task fails alike, none ends it.
        let mut srun_refused = false;
        let rc = guard("task_init", Some(spank), Answer::Fails, || {
            let prepared = self.node.lock().unwrap_or_else(PoisonError::into_inner);
            match &*prepared {
                None => self.without_user_init(spank, &mut srun_refused),
                Some(Prepared::Nothing | Prepared::Plain(_)) => Ok(()),
                Some(Prepared::Refused) => {
                    srun_refused = true;
                    Err(Error::reported("srun refused this step"))
                }
                Some(Prepared::Failed(e)) => Err(e.clone()),
                Some(Prepared::Ready(ready)) => apply(spank, ready, || self.moved()),
            }
        });
        if rc != 0 && !srun_refused {
            // Another node may have decided otherwise: end the step there too.
            guard("end_step", Some(spank), Answer::Succeeds, || {
                self.end_step(spank);
                Ok(())
            });
        }
        rc
    }

    /// In a task: whether a plugin before this one moved it into other
    /// namespaces since `task_init_privileged` (unknown counts as moved).
    fn moved(&self) -> bool {
        let placed = self.placed_in.get().and_then(Option::as_deref);
        entered_namespaces(placed, mount_namespace().as_deref())
    }

    /// Without `user_init`'s share (it did not run): a step that asked for
    /// the plugin fails, any other is left alone. Whether it asked is the
    /// same decision `user_init` makes ([`Stepd::kind`]).
    fn without_user_init(&self, spank: &Spank, srun_refused: &mut bool) -> Result<()> {
        if spank.step_id()? > SLURM_MAX_NORMAL_STEP_ID {
            return Ok(());
        }
        match self.kind(spank)? {
            StepKind::Nothing => Ok(()),
            StepKind::Refused => {
                *srun_refused = true;
                Err(Error::reported("srun refused this step"))
            }
            // Its record and requeue were srun's word: not run without.
            StepKind::Plain { .. } | StepKind::Framework(_) | StepKind::Alone { .. } => {
                Err(Error::new(NO_USER_INIT))
            }
        }
    }
}

/// A task of a step that asked for the plugin, without the node's share.
const NO_USER_INIT: &str = "slurmstepd did not run user_init for this step, so the node's share was not made: failing rather than guessing";

/// The step's private directory on this node, with the job's user's ids
/// (`user_init` runs with them): a `--ray-cluster` step's.
fn private_dir(spank: &Spank, node: &Node) -> Option<PrivateDir> {
    let dir = node.private_dir()?;
    let ids = Ids {
        uid: spank.job_uid().ok()?,
        gid: spank.job_gid().ok()?,
        groups: super::record::groups(),
    };
    PrivateDir::new(&dir, ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whole, on one line: Error keeps at most 300 characters.
    #[test]
    fn the_no_user_init_refusal_is_one_short_line() {
        for text in [
            NO_USER_INIT,
            crate::core::het::NO_HET_VARIABLES,
            crate::core::het::OUTSIDE_HET,
        ] {
            assert_eq!(Error::new(text).message(), text);
            assert!(!text.contains('\n'));
        }
    }
}
