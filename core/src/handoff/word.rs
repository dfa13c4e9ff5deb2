//! srun's two words and the fields they carry, and srun's setters: what
//! srun fills in before it encodes its word (`wire.rs`).

use crate::addresses::Network;
use crate::error::{Error, Result};
use crate::secret::Secret;
use crate::settings::{Frameworks, Settings};
use crate::task_map::TaskMap;

/// The variable srun sets and every task of its step inherits.
pub const VAR: &str = "SLURM_TF_CLUSTER";

/// Longest value srun hands out and a task reads: far above a regular
/// layout (a few dozen bytes), below the 131,072 bytes Slurm's setenv and
/// execve take for one variable (Slurm 22.05 drops a longer one silently),
/// with room beside it for TF_CONFIG.
pub const MAX_LEN: usize = 64 * 1024;

/// srun's verdict on the step: the one word every reader of the hand-off
/// acts on (slurmstepd and the CLI twin alike, through [`Word::applied`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Lay the step out from srun's task map (beside it the step's node
    /// list as Slurm wrote it).
    Map { map: TaskMap, hosts: String },
    /// srun could not get the map: the layout is rebuilt from the step's
    /// facts.
    Rebuild,
    /// Leave the step alone: nothing is set.
    Skip,
    /// srun refused the step and said why: every task fails.
    Refused,
    /// A step without a framework option given `--tf-record` or
    /// `--tf-requeue-on`: its tasks get no variable, and slurmstepd applies
    /// what srun decided.
    Plain(Plain),
}

/// What srun decided for a step that asks for no framework option but was
/// given `--tf-record` or `--tf-requeue-on` (crate::settings::Alone): the
/// record and the requeue as the site's defaults and the step's options
/// (given or handed down) set them, and nothing of a framework.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plain {
    pub record: Option<String>,
    pub record_log: bool,
    pub requeue_on: Option<u8>,
    pub requeue_max: u32,
    pub exclude_max: u32,
}

impl Plain {
    /// What `settings` say of the record and the requeue.
    pub fn of(settings: &Settings) -> Plain {
        Plain {
            record: settings.record.clone(),
            record_log: settings.record_log,
            requeue_on: settings.requeue_on,
            requeue_max: settings.requeue_max,
            exclude_max: settings.exclude_max,
        }
    }

    /// The step's settings: these, no framework, every other at its default.
    pub fn settings(&self) -> Settings {
        Settings {
            frameworks: Frameworks::default(),
            record: self.record.clone(),
            record_log: self.record_log,
            requeue_on: self.requeue_on,
            requeue_max: self.requeue_max,
            exclude_max: self.exclude_max,
            ..Settings::default()
        }
    }
}

/// The step's GPU binding as slurmctld recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepBind {
    /// The step binds no TRES.
    None,
    /// Its `tres_bind` (`gres/gpu:per_task:1`).
    Bound(String),
}

/// srun's word on one step. Its fields are read and written in
/// crate::handoff only: srun fills it through its methods, the tasks
/// through [`Word::applied`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handoff {
    pub(super) job: u32,
    pub(super) step: u32,
    pub(super) verdict: Verdict,
    /// Everything after the verdict.
    pub(super) fields: Fields,
}

/// The fields after a word's id (and a step's verdict), each written and
/// read by one encoder and one parser (`wire.rs`) and applied in one place
/// (`applied.rs`), whichever word holds it: srun's early word holds
/// `inherited` and the fields both words carry, its word on a step every
/// other one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Fields {
    /// Frameworks the step only inherited from the job, whose option leaves
    /// unfitting steps alone: left out where they do not fit (the early
    /// word).
    pub(super) inherited: Frameworks,
    /// The step's network (None: the step names none). In the early word, a
    /// heterogeneous step's network named by its host template, which srun
    /// resolved over every component's nodes (the components its hand-off
    /// does not reach resolve no name; None: srun resolved none).
    pub(super) network: Option<Network>,
    /// The interface variables srun's environment held (for `tf-cluster
    /// explain` and the logs: a node keeps what its step's environment
    /// holds).
    pub(super) kept: Vec<String>,
    /// Frameworks the step only inherited and that do not fit it.
    pub(super) left_out: Frameworks,
    /// Slurm reserved no ports for the step: a SLURM_STEP_RESV_PORTS the
    /// tasks see is one srun's environment passed on (an outer step's, the
    /// user's), not this step's.
    pub(super) no_resv_ports: bool,
    /// The step's GPU binding as slurmctld recorded it (what slurmstepd
    /// gives the tasks as SLURMD_TRES_BIND): None when srun had no record.
    /// A task a container plugin moved reads this, never its environment.
    pub(super) tres_bind: Option<StepBind>,
    /// A `--tf-off` the step only inherited, beaten by a framework option
    /// given to this srun.
    pub(super) off_overridden: bool,
    /// The job's restart count as srun learnt it (0: the first incarnation).
    pub(super) restart_count: u32,
    /// The step's secret (None: srun drew none), the same in every
    /// component's word.
    pub(super) secret: Option<Secret>,
    /// srun refused the step before it existed (the early word only): what
    /// it decides then reaches every component, the ones its word on the
    /// step does not reach included.
    pub(super) refused: bool,
    /// The `--tf-<key>` options given to srun itself, not only handed down
    /// (the early word only): an `srun --async` step's tasks, which srun's
    /// word on the step never reaches, check them as srun would.
    pub(super) given: Vec<String>,
}

/// slurmctld's record of a step, as srun hands it on ([`Handoff::record`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// Slurm reserved ports for the step.
    pub resv_ports: bool,
    /// The step's `tres_bind` (None: it binds no TRES).
    pub tres_bind: Option<&'a str>,
}

/// srun's early word ([`Early::encode`]): what srun knew of the step after
/// parsing its options and before slurmctld created the step. Slurm copies
/// srun's environment for every component of a heterogeneous step before
/// srun's word on the step exists, and that word reaches one component only
/// (srun's `_launch_one_app` runs the plugins' `local_user_init` for the
/// first component to launch): the others have this one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Early {
    /// Its fields: `inherited`, `off_overridden`, `restart_count`,
    /// `network`, `secret`, `refused`, `given`.
    pub(super) fields: Fields,
}

impl Early {
    /// srun's early word: the frameworks the step only `inherited`, whether
    /// an inherited `--tf-off` was beaten (`off_overridden`), the job's
    /// `restart_count`, a heterogeneous step's `network`, the step's
    /// `secret`.
    pub fn new(
        inherited: Frameworks,
        off_overridden: bool,
        restart_count: u32,
        network: Option<Network>,
        secret: Option<Secret>,
    ) -> Early {
        Early {
            fields: Fields {
                inherited,
                off_overridden,
                restart_count,
                network,
                secret,
                ..Fields::default()
            },
        }
    }

    /// srun refused the step before it exists (a heterogeneous step's host
    /// template it cannot resolve): every component's tasks fail before
    /// exec, the ones srun's word on the step does not reach included.
    pub fn refuse(&mut self) {
        self.fields.refused = true;
    }

    /// The `--tf-<key>` options `given` to srun itself (names `tf-<key>`).
    pub fn given(&mut self, given: Vec<String>) {
        self.fields.given = given;
    }
}

/// srun's word to a task, as the task finds it in [`VAR`]: the one value
/// every field of the hand-off is read from, by [`Word::applied`] alone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Word {
    /// No word for this step (an srun without the plugin, the CLI outside a
    /// step, a value made for another step).
    #[default]
    Nothing,
    /// Only srun's early word: a heterogeneous step's component its
    /// hand-off did not reach.
    Early(Early),
    /// srun's hand-off to this very step.
    Handoff(Handoff),
}

/// What srun said of the step's layout, in its hand-off ([`VAR`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum FromSrun {
    /// The step's task map.
    Map(TaskMap),
    /// srun could not get the map: the tasks rebuild the layout.
    NoMap,
    /// No word from srun (the CLI, or a map made for another step, which a
    /// nested srun inherits): the layout is rebuilt.
    #[default]
    Nothing,
}

impl Handoff {
    /// srun's word on step `job`.`step` with `verdict` and nothing else.
    pub fn new(job: u32, step: u32, verdict: Verdict) -> Handoff {
        Handoff {
            job,
            step,
            verdict,
            fields: Fields::default(),
        }
    }

    /// srun's word on step `job`.`step` before it decided (a verdict of
    /// `none`): whether an inherited `--tf-off` was beaten, the job's
    /// restart count, the step's secret.
    pub fn undecided(
        job: u32,
        step: u32,
        off_overridden: bool,
        restart_count: u32,
        secret: Option<Secret>,
    ) -> Handoff {
        let mut handoff = Handoff::new(job, step, Verdict::Rebuild);
        handoff.fields.off_overridden = off_overridden;
        handoff.fields.restart_count = restart_count;
        handoff.fields.secret = secret;
        handoff
    }

    /// The step the word names: (job, step).
    pub fn job_step(&self) -> (u32, u32) {
        (self.job, self.step)
    }

    /// srun's verdict on the step.
    pub fn verdict(&self) -> &Verdict {
        &self.verdict
    }

    /// slurmctld's record of the step (None: srun has none): its reserved
    /// ports and GPU binding are srun's word even where the layout cannot
    /// be had. The tasks read the step's reserved ports from
    /// SLURM_STEP_RESV_PORTS, which Slurm sets only for a step it reserved
    /// ports for: otherwise the one in srun's environment (an outer step's,
    /// the user's) passes through.
    pub fn record(&mut self, record: Option<Record>) {
        self.fields.no_resv_ports = record.is_some_and(|r| !r.resv_ports);
        self.fields.tres_bind = record.map(|r| match r.tres_bind {
            Some(bind) => StepBind::Bound(bind.to_string()),
            None => StepBind::None,
        });
    }

    /// srun's decision on the step: its layout's `verdict`, its `network`,
    /// the interface variables srun's environment `kept`; refused when the
    /// word would not fit in [`MAX_LEN`].
    pub fn decided(
        &mut self,
        verdict: Verdict,
        network: Option<Network>,
        kept: Vec<String>,
    ) -> Result<()> {
        self.verdict = verdict;
        self.fields.network = network;
        self.fields.kept = kept;
        self.fits().map(drop)
    }

    /// The frameworks the step only inherited and that do not fit it, left
    /// out.
    pub fn leave_out(&mut self, left_out: Frameworks) {
        self.fields.left_out = left_out;
    }

    /// A step without a framework option that `plain` makes the plugin's:
    /// its tasks get no variable; slurmstepd records it or requeues its job.
    pub fn plain(&mut self, plain: Plain) {
        self.verdict = Verdict::Plain(plain);
    }

    /// srun leaves the step alone: nothing is set.
    pub fn skip(&mut self) {
        self.verdict = Verdict::Skip;
    }

    /// srun refused the step and said why: every task fails; nothing of a
    /// layout is handed on.
    pub fn refuse(&mut self) {
        self.verdict = Verdict::Refused;
        self.fields.network = None;
        self.fields.kept.clear();
    }

    /// The word's length, within [`MAX_LEN`] (one variable holds less than
    /// 131,072 bytes, and Slurm 22.05 drops a longer one silently).
    pub fn fits(&self) -> Result<usize> {
        let len = self.encode().len();
        if len > MAX_LEN {
            return Err(Error::new(format!(
                "the step's task map would be {len} bytes, over the {MAX_LEN} srun hands to its tasks; use a regular distribution (block, cyclic or plane)"
            )));
        }
        Ok(len)
    }

    /// srun's verdict of step `map` (its node list written `hosts`), once
    /// the word it makes alone fits in [`MAX_LEN`]; with its length.
    pub fn map_verdict(map: TaskMap, hosts: String) -> Result<(Verdict, usize)> {
        let handoff = Handoff::new(map.job, map.step, Verdict::Map { map, hosts });
        let len = handoff.fits()?;
        Ok((handoff.verdict, len))
    }
}
