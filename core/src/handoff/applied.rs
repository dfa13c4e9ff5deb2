//! srun's word applied to a step ([`Word::applied`]): the one place every
//! field of either word is read, for slurmstepd and the CLI twin alike.

use super::word::{Fields, FromSrun, Plain, StepBind, Verdict, Word};
use crate::addresses::Network;
use crate::error::{Error, Result};
use crate::gpus::bind::{GpuBind, Recorded};
use crate::secret::Secret;
use crate::settings::{Frameworks, Settings};

/// srun's plain word ([`Plain`]) on a step whose options ask for a
/// framework: not srun's word on this step as it is.
const PLAIN_ASKED: &str =
    "srun's word says this step asks for no framework, but its options ask for one";

/// What a reader of srun's word knows of the step's own options, for
/// [`Word::applied`].
pub enum Options<'a> {
    /// The step's settings from its options, told whether srun's word says
    /// an inherited `--tf-off` was beaten (None: the step asks for nothing).
    Read(Box<dyn FnOnce(bool) -> Result<Option<Settings>> + 'a>),
    /// The options could not be read (slurmstepd could not register them):
    /// a step srun handed a word asked for the plugin, and is refused.
    Unknown,
}

/// srun's word applied to a step ([`Word::applied`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// The step asks for no framework, or srun left out every one it asked
    /// for: nothing is set, nothing more is read.
    NotAsked,
    /// srun left the step alone (it inherited a spec that does not fit it):
    /// nothing is set.
    LeftAlone,
    /// srun refused the step and said why: every task fails.
    Refused,
    /// A step to lay out, with what srun said of it.
    Step(Box<Said>),
}

/// What srun's word says of a step to lay out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Said {
    /// The step's settings, without the frameworks srun left out.
    pub settings: Settings,
    /// What srun said of the layout.
    pub from_srun: FromSrun,
    /// With srun's map, the step's node list as srun wrote it (the same text
    /// as the step's SLURM_STEP_NODELIST, when Slurm wrote it so).
    pub map_hosts: Option<String>,
    /// The step's network as srun handed it (Some(None): the step names
    /// none); None: srun said nothing of it.
    pub network: Option<Option<Network>>,
    /// Frameworks the step only inherited (srun's early word: a component
    /// its hand-off did not reach), left out where the step does not fit
    /// them.
    pub inherited: Frameworks,
    /// Slurm reserved no ports for the step: its SLURM_STEP_RESV_PORTS is
    /// not read.
    pub no_resv_ports: bool,
    /// The step's GPU binding as srun recorded it.
    pub recorded_bind: Recorded,
    /// The job's restart count as srun learnt it (None: srun said nothing).
    pub restart_count: Option<u32>,
    /// The step's secret as srun drew it (None: srun drew none).
    pub secret: Option<Secret>,
    /// Only srun's early word reached the step: a heterogeneous step's
    /// component its hand-off did not reach, or an `srun --async` step.
    pub early_only: bool,
    /// The `--tf-<key>` options given to srun itself, as its early word
    /// names them (empty in its word on a step, which srun checked).
    pub given: Vec<String>,
}

impl Word {
    /// srun refused the step (a step whose options ask for no framework
    /// reads only this and [`Word::plain`]: srun refuses a `--tf-<key>`
    /// given alone that cannot act there).
    pub fn refused(&self) -> bool {
        match self {
            Word::Handoff(h) => matches!(h.verdict, Verdict::Refused),
            Word::Early(e) => e.fields.refused,
            Word::Nothing => false,
        }
    }

    /// What srun decided for a step without a framework option that its
    /// `--tf-record` or `--tf-requeue-on` makes the plugin's (None: srun
    /// said no such thing of this step), with the job's restart count as
    /// srun learnt it.
    pub fn plain(&self) -> Option<(&Plain, u32)> {
        match self {
            Word::Handoff(h) => match &h.verdict {
                Verdict::Plain(plain) => Some((plain, h.fields.restart_count)),
                _ => None,
            },
            _ => None,
        }
    }

    /// The `--tf-<key>` options srun's early word alone says were given to
    /// srun itself on a step without a framework option, with the job's
    /// restart count (None: another word, or none given): an `srun --async`
    /// step's, which srun never checked, or a heterogeneous step's component
    /// that srun refused and its word on the step does not reach.
    pub fn alone(&self) -> Option<(&[String], u32)> {
        match self {
            Word::Early(e) if !e.fields.given.is_empty() => {
                Some((&e.fields.given, e.fields.restart_count))
            }
            _ => None,
        }
    }

    /// srun's word applied to the step whose `options` say what it asks:
    /// the one place every field of srun's word is read, for slurmstepd
    /// (the node's share, a task without it, a node that could not register
    /// the options) and the CLI twin alike.
    pub fn applied(self, options: Options) -> Result<Applied> {
        let read = match options {
            Options::Read(read) => read,
            Options::Unknown => {
                return match self {
                    Word::Nothing => Ok(Applied::NotAsked),
                    Word::Early(_) | Word::Handoff(_) => Err(Error::new(
                        "srun handed this step its word, but the step's options cannot be read",
                    )),
                };
            }
        };
        // srun refused the step: whatever its options ask (a `--tf-<key>`
        // alone asks for no framework, and srun refuses that too).
        if self.refused() {
            return Ok(Applied::Refused);
        }
        let off_overridden = self.fields().is_some_and(|f| f.off_overridden);
        let Some(mut settings) = read(off_overridden)? else {
            return Ok(Applied::NotAsked);
        };
        if let Word::Handoff(h) = &self {
            settings.frameworks = settings.frameworks.without(h.fields.left_out);
        }
        if settings.frameworks.is_empty() {
            return Ok(Applied::NotAsked);
        }
        let mut said = Said {
            settings,
            from_srun: FromSrun::Nothing,
            map_hosts: None,
            network: None,
            inherited: Frameworks::default(),
            no_resv_ports: false,
            recorded_bind: Recorded::Unknown,
            restart_count: None,
            secret: None,
            early_only: false,
            given: Vec::new(),
        };
        let (fields, early_only) = match self {
            Word::Nothing => return Ok(Applied::Step(Box::new(said))),
            Word::Early(early) => (early.fields, true),
            Word::Handoff(h) => {
                (said.from_srun, said.map_hosts) = match h.verdict {
                    Verdict::Skip => return Ok(Applied::LeftAlone),
                    Verdict::Refused => return Ok(Applied::Refused),
                    Verdict::Plain(_) => return Err(Error::new(PLAIN_ASKED)),
                    Verdict::Rebuild => (FromSrun::NoMap, None),
                    Verdict::Map { map, hosts } => (FromSrun::Map(map), Some(hosts)),
                };
                (h.fields, false)
            }
        };
        said.heard(fields, early_only);
        Ok(Applied::Step(Box::new(said)))
    }

    /// The fields of srun's word (None: no word).
    fn fields(&self) -> Option<&Fields> {
        match self {
            Word::Nothing => None,
            Word::Early(early) => Some(&early.fields),
            Word::Handoff(h) => Some(&h.fields),
        }
    }
}

impl Said {
    /// What the `fields` of srun's word say, whichever word holds them
    /// (`early_only`: srun's early word alone).
    fn heard(&mut self, fields: Fields, early_only: bool) {
        self.restart_count = Some(fields.restart_count);
        self.secret = fields.secret;
        self.inherited = fields.inherited;
        self.no_resv_ports = fields.no_resv_ports;
        self.recorded_bind = fields
            .tres_bind
            .map_or(Recorded::Unknown, StepBind::recorded);
        // The early word names a network only where srun resolved one; a
        // word on the step names the step's, or says it has none.
        self.network = match (early_only, fields.network) {
            (true, None) => None,
            (_, network) => Some(network),
        };
        self.early_only = early_only;
        self.given = fields.given;
    }
}

impl StepBind {
    /// The binding as the GPU rules read it: a `tres_bind` without a GPU
    /// part binds no GPUs.
    fn recorded(self) -> Recorded {
        match self {
            StepBind::None => Recorded::None,
            StepBind::Bound(text) => GpuBind::parse(&text).map_or(Recorded::None, Recorded::Bound),
        }
    }
}
