//! srun's one hand-off to the tasks of its step: everything srun decided
//! before launch, in one versioned variable, [`VAR`], set once by srun and
//! checked once on each node (the step it names, its version, its length).
//!
//! Format (version 1): `1;JOB.STEP` then `;`-separated fields, each at most
//! once, in this order:
//!
//! ```text
//! hosts=HOSTLIST;runs=RUNS | verdict=none|skip|refused|plain   exactly one of the two
//! record=HEX;record-log;requeue-on=N;requeue-max=N   after verdict=plain
//!                        only (requeue-max always; the record's directory
//!                        in hex): a step without a framework option
//! net=NETWORK            the step's network (none without the field)
//! kept=NAME,…            interface variables srun's environment held
//! leave-out=BITS         frameworks the step only inherited, left out (their
//!                        indices in crate::frameworks::FRAMEWORKS, as bits)
//! no-resv-ports          Slurm reserved no ports for the step
//! tres-bind=TEXT | no-tres-bind   the step's GPU binding as slurmctld recorded it
//! off-overridden         an inherited --tf-off, beaten by an srun option
//! restart=K              the job's restart count (K > 0)
//! secret=HEX             the step's secret (crate::secret), drawn once by
//!                        srun for every component of the step
//! ```
//!
//! e.g. `1;4242.0;hosts=node[1-3];runs=0*3,2,1;net=ib0;no-resv-ports`.
//! The map: `HOSTS` names the step's nodes (node index i = the i-th name),
//! `RUNS` the node index of every rank ([`Runs`]). A verdict instead: `none`,
//! srun could not get the layout (the tasks rebuild it); `skip`, the step
//! inherited a spec that does not fit it (nothing is set); `refused`, srun
//! refused the step and said why (every task fails before exec); `plain`,
//! a step without a framework option that `--tf-record` or
//! `--tf-requeue-on` makes the plugin's (no variable is set; slurmstepd
//! writes its record or requeues its job as srun decided, [`Plain`]).
//!
//! srun's early word, `1;srun` then the fields `inherited=BITS`,
//! `off-overridden`, `restart=K`, `net=NETWORK`, `secret=HEX` (each at most once,
//! in this order; `net`: a heterogeneous step's network of its host template,
//! resolved over every component's nodes): what
//! srun knows once it parsed its options, before slurmctld creates the step
//! ([`Early`]). srun sets it for every step that asks for the plugin, before
//! Slurm copies its environment for each component of the step; its word on
//! the step then replaces it where it reaches (every task of a plain step,
//! one component of a heterogeneous one).
//!
//! A `SLURM_` name: srun passes it even with `--export=NONE`. Only the tasks
//! of the step it names read it: a value made for another step (an outer
//! srun's, one the user exported) is not srun's word. srun sets it for every
//! step that asks for the plugin and empties one it finds for any other, as
//! Slurm copies srun's environment before `local_user_init` (a variable set
//! there wins, one removed does not).

use crate::error::{Error, Result, shown};
use crate::gpus::bind::{GpuBind, Recorded};
use crate::hostlist::HostList;
use crate::limits::MAX_NODES;
use crate::network::addresses::{Network, VARS};
use crate::number::parse_u32;
use crate::runs::Runs;
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
}

impl Plain {
    /// What `settings` say of the record and the requeue.
    pub fn of(settings: &Settings) -> Plain {
        Plain {
            record: settings.record.clone(),
            record_log: settings.record_log,
            requeue_on: settings.requeue_on,
            requeue_max: settings.requeue_max,
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
            ..Settings::default()
        }
    }

    /// Its fields after `verdict=plain` (the record's directory in hex: it
    /// may hold any character but a control one).
    fn encode(&self, text: &mut String) {
        if let Some(dir) = &self.record {
            text.push_str(";record=");
            for b in dir.bytes() {
                text.push_str(&format!("{b:02x}"));
            }
        }
        if self.record_log {
            text.push_str(";record-log");
        }
        if let Some(code) = self.requeue_on {
            text.push_str(&format!(";requeue-on={code}"));
        }
        text.push_str(&format!(";requeue-max={}", self.requeue_max));
    }

    /// Its fields, each checked as its setting is.
    fn decode(fields: &mut Fields, bad: Bad) -> Result<Plain> {
        let mut settings = Settings::default();
        let mut set = |key: &str, value: &str| {
            settings
                .set(key, value)
                .map_err(|e| bad(&format!("plain: {e}")))
        };
        match next_field(fields, "record") {
            None => {}
            Some(Some(hex)) => {
                let dir = unhex(hex).ok_or_else(|| bad("plain: record is not hex"))?;
                set("record", &dir)?;
            }
            Some(None) => return Err(bad("a field without its value")),
        }
        match next_field(fields, "record-log") {
            None => {}
            Some(None) => set("record-log", "true")?,
            Some(Some(_)) => return Err(bad("a flag with a value")),
        }
        if let Some(code) = next_field(fields, "requeue-on") {
            set("requeue-on", code.unwrap_or_default())?;
        }
        match next_field(fields, "requeue-max") {
            Some(Some(max)) => set("requeue-max", max)?,
            _ => return Err(bad("plain: no requeue-max")),
        }
        Ok(Plain::of(&settings))
    }
}

/// `hex` as UTF-8 text: None for an odd length, a non-hex digit or bytes
/// that are not UTF-8.
fn unhex(hex: &str) -> Option<String> {
    if hex.len() % 2 != 0 {
        return None;
    }
    let bytes = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    String::from_utf8(bytes).ok()
}

/// The verdicts without a map, as the hand-off writes them.
const WORDS: [(Verdict, &str); 3] = [
    (Verdict::Rebuild, "none"),
    (Verdict::Skip, "skip"),
    (Verdict::Refused, "refused"),
];

/// The step's GPU binding as slurmctld recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepBind {
    /// The step binds no TRES.
    None,
    /// Its `tres_bind` (`gres/gpu:per_task:1`).
    Bound(String),
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

/// srun's word on one step. Its fields are read and written here only:
/// srun fills it through its methods, the tasks through [`Word::applied`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handoff {
    job: u32,
    step: u32,
    verdict: Verdict,
    /// The step's network (None: the step names none).
    network: Option<Network>,
    /// The interface variables srun's environment held (for `tf-cluster
    /// explain` and the logs: a node keeps what its step's environment
    /// holds).
    kept: Vec<String>,
    /// Frameworks the step only inherited and that do not fit it.
    left_out: Frameworks,
    /// Slurm reserved no ports for the step: a SLURM_STEP_RESV_PORTS the
    /// tasks see is one srun's environment passed on (an outer step's, the
    /// user's), not this step's.
    no_resv_ports: bool,
    /// The step's GPU binding as slurmctld recorded it (what slurmstepd
    /// gives the tasks as SLURMD_TRES_BIND): None when srun had no record.
    /// A task a container plugin moved reads this, never its environment.
    tres_bind: Option<StepBind>,
    /// A `--tf-off` the step only inherited, beaten by a framework option
    /// given to this srun.
    off_overridden: bool,
    /// The job's restart count as srun learnt it (0: the first incarnation).
    restart_count: u32,
    /// The step's secret (None: srun drew none).
    secret: Option<Secret>,
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
    /// Frameworks the step only inherited from the job, whose option leaves
    /// unfitting steps alone: left out where they do not fit.
    inherited: Frameworks,
    /// A `--tf-off` the step only inherited, beaten by a framework option
    /// given to this srun.
    off_overridden: bool,
    /// The job's restart count as srun learnt it (0: the first
    /// incarnation).
    restart_count: u32,
    /// A heterogeneous step's network named by its host template, which
    /// srun resolved over every component's nodes (the components its
    /// hand-off does not reach resolve no name). None: srun resolved none.
    network: Option<Network>,
    /// The step's secret, the same in every component's word.
    secret: Option<Secret>,
}

/// The id field of an early word.
const EARLY_ID: &str = "srun";

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
            inherited,
            off_overridden,
            restart_count,
            network,
            secret,
        }
    }

    /// The variable's value.
    pub fn encode(&self) -> String {
        let mut text = format!("1;{EARLY_ID}");
        if !self.inherited.is_empty() {
            text.push_str(&format!(";inherited={}", self.inherited.0));
        }
        if self.off_overridden {
            text.push_str(";off-overridden");
        }
        if self.restart_count > 0 {
            text.push_str(&format!(";restart={}", self.restart_count));
        }
        if let Some(network) = &self.network {
            text.push_str(&format!(";net={network}"));
        }
        push_secret(&mut text, self.secret.as_ref());
        text
    }

    /// srun's early word in `text`: None when `text` is not one (empty, or
    /// a word on a step); a malformed one is refused.
    pub fn decode(text: &str) -> Result<Option<Early>> {
        let bad = |why: &str| -> Error { Error::new(format!("bad {VAR} {}: {why}", shown(text))) };
        let Some(rest) = text
            .strip_prefix("1;")
            .and_then(|r| r.strip_prefix(EARLY_ID))
        else {
            return Ok(None);
        };
        if !(rest.is_empty() || rest.starts_with(';')) {
            return Ok(None);
        }
        if text.len() > MAX_LEN {
            return Err(bad(&format!("longer than {MAX_LEN} bytes")));
        }
        let mut early = Early::default();
        let mut fields = rest.split(';').skip(1).peekable();
        let mut field = |key: &str| next_field(&mut fields, key);
        match field("inherited") {
            None => {}
            Some(Some(bits)) => {
                early.inherited =
                    frameworks(bits).ok_or_else(|| bad("inherited names no framework"))?
            }
            Some(None) => return Err(bad("a field without its value")),
        }
        match field("off-overridden") {
            None => {}
            Some(None) => early.off_overridden = true,
            Some(Some(_)) => return Err(bad("a flag with a value")),
        }
        match field("restart") {
            None => {}
            Some(k) => {
                early.restart_count = k
                    .and_then(parse_u32)
                    .ok_or_else(|| bad("restart is not a count"))?
            }
        }
        match field("net") {
            None => {}
            Some(net) => {
                early.network = Some(
                    Network::parse(net.unwrap_or_default())
                        .map_err(|e| bad(&format!("net: {e}")))?,
                )
            }
        }
        early.secret = secret(field("secret")).map_err(&bad)?;
        match fields.next() {
            None => Ok(Some(early)),
            Some(f) => Err(bad(&format!("unknown or misplaced field {}", shown(f)))),
        }
    }
}

/// srun's plain word ([`Plain`]) on a step whose options ask for a
/// framework: not srun's word on this step as it is.
const PLAIN_ASKED: &str =
    "srun's word says this step asks for no framework, but its options ask for one";

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
    /// component its hand-off did not reach.
    pub early_only: bool,
}

impl Word {
    /// srun's word in `text` (the variable's value, None when unset) for a
    /// task of step `job_step` (its own ids, from Slurm; None: unknown). A
    /// malformed value is refused.
    pub fn decode(text: Option<&str>, job_step: Option<(u32, u32)>) -> Result<Word> {
        let Some(text) = text.filter(|t| !t.is_empty()) else {
            return Ok(Word::Nothing);
        };
        if let Some(early) = Early::decode(text)? {
            return Ok(Word::Early(early));
        }
        let Some((job, step)) = job_step else {
            return Err(Error::new(format!(
                "{VAR} is set but the task's job and step ids are unknown"
            )));
        };
        Ok(Handoff::decode(text, job, step)?.map_or(Word::Nothing, Word::Handoff))
    }

    /// srun refused the step (a step whose options ask for no framework
    /// reads only this and [`Word::plain`]: srun refuses a `--tf-<key>`
    /// given alone that cannot act there).
    pub fn refused(&self) -> bool {
        matches!(self, Word::Handoff(h) if matches!(h.verdict, Verdict::Refused))
    }

    /// What srun decided for a step without a framework option that its
    /// `--tf-record` or `--tf-requeue-on` makes the plugin's (None: srun
    /// said no such thing of this step), with the job's restart count as
    /// srun learnt it.
    pub fn plain(&self) -> Option<(&Plain, u32)> {
        match self {
            Word::Handoff(h) => match &h.verdict {
                Verdict::Plain(plain) => Some((plain, h.restart_count)),
                _ => None,
            },
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
        let off_overridden = match &self {
            Word::Handoff(h) => h.off_overridden,
            Word::Early(e) => e.off_overridden,
            Word::Nothing => false,
        };
        let Some(mut settings) = read(off_overridden)? else {
            return Ok(Applied::NotAsked);
        };
        if let Word::Handoff(h) = &self {
            settings.frameworks = settings.frameworks.without(h.left_out);
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
        };
        match self {
            Word::Nothing => {}
            Word::Early(early) => {
                said.restart_count = Some(early.restart_count);
                said.secret = early.secret;
                said.inherited = early.inherited;
                said.network = early.network.map(Some);
                said.early_only = true;
            }
            Word::Handoff(h) => {
                (said.from_srun, said.map_hosts) = match h.verdict {
                    Verdict::Skip => return Ok(Applied::LeftAlone),
                    Verdict::Refused => return Ok(Applied::Refused),
                    Verdict::Plain(_) => return Err(Error::new(PLAIN_ASKED)),
                    Verdict::Rebuild => (FromSrun::NoMap, None),
                    Verdict::Map { map, hosts } => (FromSrun::Map(map), Some(hosts)),
                };
                said.restart_count = Some(h.restart_count);
                said.secret = h.secret;
                said.network = Some(h.network);
                said.no_resv_ports = h.no_resv_ports;
                said.recorded_bind = h.tres_bind.map_or(Recorded::Unknown, StepBind::recorded);
            }
        }
        Ok(Applied::Step(Box::new(said)))
    }
}

/// The next of the `;`-separated `fields` when it is `key` (Some(None), a
/// flag) or `key=VALUE` (Some(Some(VALUE))), taken; None, and left, when
/// it is another: each field at most once, in its place.
fn next_field<'t>(
    fields: &mut std::iter::Peekable<impl Iterator<Item = &'t str>>,
    key: &str,
) -> Option<Option<&'t str>> {
    let f = *fields.peek()?;
    let got = match f.split_once('=') {
        Some((k, value)) if k == key => Some(Some(value)),
        None if f == key => Some(None),
        _ => None,
    };
    if got.is_some() {
        fields.next();
    }
    got
}

/// `;secret=HEX` after `text`, when there is one.
fn push_secret(text: &mut String, secret: Option<&Secret>) {
    if let Some(secret) = secret {
        text.push_str(";secret=");
        text.push_str(&secret.hex());
    }
}

/// The secret field as [`next_field`] found it: Err with why it is bad.
fn secret(got: Option<Option<&str>>) -> std::result::Result<Option<Secret>, &'static str> {
    match got {
        None => Ok(None),
        Some(Some(hex)) => Secret::parse(hex)
            .map(Some)
            .ok_or("secret is not 80 hex digits"),
        Some(None) => Err("a field without its value"),
    }
}

/// A set of frameworks written as bits (their indices in
/// crate::frameworks::FRAMEWORKS): None unless every bit names one.
fn frameworks(bits: &str) -> Option<Frameworks> {
    parse_u32(bits)
        .and_then(|b| u8::try_from(b).ok())
        .map(Frameworks)
        .filter(|f| f.0 & !Frameworks::all().0 == 0)
}

/// The fields of a hand-off after its id, as [`next_field`] takes them.
type Fields<'t> = std::iter::Peekable<std::str::Split<'t, char>>;

/// Why a value is bad, with the value.
type Bad<'b> = &'b dyn Fn(&str) -> Error;

impl Handoff {
    /// srun's word on step `job`.`step` with `verdict` and nothing else.
    pub fn new(job: u32, step: u32, verdict: Verdict) -> Handoff {
        Handoff {
            job,
            step,
            verdict,
            network: None,
            kept: Vec::new(),
            left_out: Frameworks::default(),
            no_resv_ports: false,
            tres_bind: None,
            off_overridden: false,
            restart_count: 0,
            secret: None,
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
        handoff.off_overridden = off_overridden;
        handoff.restart_count = restart_count;
        handoff.secret = secret;
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
        self.no_resv_ports = record.is_some_and(|r| !r.resv_ports);
        self.tres_bind = record.map(|r| match r.tres_bind {
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
        self.network = network;
        self.kept = kept;
        self.fits().map(drop)
    }

    /// The frameworks the step only inherited and that do not fit it, left
    /// out.
    pub fn leave_out(&mut self, left_out: Frameworks) {
        self.left_out = left_out;
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
        self.network = None;
        self.kept.clear();
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

    /// The word with its task map's runs garbled (a test build's fault):
    /// None without a map.
    pub fn garbled(&self) -> Option<String> {
        match &self.verdict {
            Verdict::Map { hosts, .. } => Some(format!(
                "1;{}.{};hosts={hosts};runs=garbage",
                self.job, self.step
            )),
            _ => None,
        }
    }

    /// The variable's value.
    pub fn encode(&self) -> String {
        let mut text = format!("1;{}.{}", self.job, self.step);
        match &self.verdict {
            Verdict::Map { map, hosts } => {
                text.push_str(&format!(";hosts={hosts};runs={}", map.runs.text()))
            }
            Verdict::Plain(plain) => {
                text.push_str(";verdict=plain");
                plain.encode(&mut text);
            }
            v => {
                let word = WORDS.iter().find(|(w, _)| w == v).map(|(_, s)| *s);
                text.push_str(&format!(";verdict={}", word.unwrap_or_default()));
            }
        }
        if let Some(network) = &self.network {
            text.push_str(&format!(";net={network}"));
        }
        if !self.kept.is_empty() {
            text.push_str(&format!(";kept={}", self.kept.join(",")));
        }
        if !self.left_out.is_empty() {
            text.push_str(&format!(";leave-out={}", self.left_out.0));
        }
        if self.no_resv_ports {
            text.push_str(";no-resv-ports");
        }
        match &self.tres_bind {
            Some(StepBind::Bound(bind)) if !bind.contains(';') && !bind.is_empty() => {
                text.push_str(&format!(";tres-bind={bind}"));
            }
            Some(StepBind::Bound(_)) | None => {}
            Some(StepBind::None) => text.push_str(";no-tres-bind"),
        }
        if self.off_overridden {
            text.push_str(";off-overridden");
        }
        if self.restart_count > 0 {
            text.push_str(&format!(";restart={}", self.restart_count));
        }
        push_secret(&mut text, self.secret.as_ref());
        text
    }

    /// srun's word on step `job`.`step` (the task's own ids, from Slurm's
    /// items) in `text`: None when it names another step (an outer srun's,
    /// or empty: srun had nothing to say); a malformed value, or one of
    /// another version, is refused.
    pub fn decode(text: &str, job: u32, step: u32) -> Result<Option<Handoff>> {
        let bad = |why: &str| -> Error { Error::new(format!("bad {VAR} {}: {why}", shown(text))) };
        if text.is_empty() {
            return Ok(None);
        }
        if text.len() > MAX_LEN {
            return Err(bad(&format!("longer than {MAX_LEN} bytes")));
        }
        let mut fields = text.split(';');
        if step_named(&mut fields, &bad)? != Some((job, step)) {
            return Ok(None);
        }
        let mut fields = fields.peekable();
        let verdict = verdict(&mut fields, job, step, &bad)?;
        let mut handoff = Handoff::new(job, step, verdict);
        handoff.read_fields(&mut fields, &bad)?;
        match fields.next() {
            None => Ok(Some(handoff)),
            Some(f) => Err(bad(&format!("unknown or misplaced field {}", shown(f)))),
        }
    }

    /// The fields after the verdict, each in its place.
    fn read_fields<'t>(&mut self, fields: &mut Fields<'t>, bad: Bad) -> Result<()> {
        let mut field = |key: &str| next_field(fields, key);
        // A flag stands alone, a value follows `=`.
        let flag = |got: Option<Option<&str>>| match got {
            Some(Some(_)) => Err(bad("a flag with a value")),
            got => Ok(got.is_some()),
        };
        let value = |got: Option<Option<&'t str>>| match got {
            Some(None) => Err(bad("a field without its value")),
            got => Ok(got.flatten()),
        };
        if let Some(net) = value(field("net"))? {
            self.network = Some(Network::parse(net).map_err(|e| bad(&e))?);
        }
        if let Some(names) = value(field("kept"))? {
            for name in names.split(',') {
                match VARS.iter().find(|v| v.name == name) {
                    Some(v) => self.kept.push(v.name.to_string()),
                    None => {
                        return Err(bad(
                            "kept names a variable that is not an interface variable",
                        ));
                    }
                }
            }
        }
        if let Some(bits) = value(field("leave-out"))? {
            self.left_out = frameworks(bits).ok_or_else(|| bad("leave-out names no framework"))?;
        }
        self.no_resv_ports = flag(field("no-resv-ports"))?;
        self.tres_bind = match (value(field("tres-bind"))?, flag(field("no-tres-bind"))?) {
            (Some(bind), false) if !bind.is_empty() => Some(StepBind::Bound(bind.into())),
            (None, true) => Some(StepBind::None),
            (None, false) => None,
            _ => return Err(bad("a bad GPU binding")),
        };
        self.off_overridden = flag(field("off-overridden"))?;
        if let Some(k) = value(field("restart"))? {
            self.restart_count = parse_u32(k).ok_or_else(|| bad("restart is not a count"))?;
        }
        self.secret = secret(field("secret")).map_err(bad)?;
        Ok(())
    }
}

/// The step a word names, from its version and id fields: None for srun's
/// early word, which names no step.
fn step_named<'t>(
    fields: &mut impl Iterator<Item = &'t str>,
    bad: Bad,
) -> Result<Option<(u32, u32)>> {
    let (Some(version), Some(id)) = (fields.next(), fields.next()) else {
        return Err(bad("not 1;JOB.STEP;…"));
    };
    if version != "1" {
        return Err(bad(
            "unknown version (is srun's tf-cluster the same build as the node's?)",
        ));
    }
    if id == EARLY_ID {
        return Ok(None);
    }
    let Some((j, s)) = id.split_once('.') else {
        return Err(bad("no JOB.STEP"));
    };
    match (parse_u32(j), parse_u32(s)) {
        (Some(j), Some(s)) => Ok(Some((j, s))),
        _ => Err(bad("JOB.STEP is not two numbers")),
    }
}

/// A hand-off's verdict: its map (`hosts=…;runs=…`) or its word.
fn verdict(fields: &mut Fields, job: u32, step: u32, bad: Bad) -> Result<Verdict> {
    let mut field = |key: &str| next_field(fields, key);
    Ok(match (field("hosts"), field("runs"), field("verdict")) {
        (Some(Some(list)), Some(Some(runs)), None) => {
            let hosts = HostList::parse(list, MAX_NODES as usize)
                .map_err(|e| Error::new(format!("{VAR}: {e}")))?;
            let runs = Runs::parse(runs, hosts.len())
                .map_err(|e| Error::new(format!("bad {VAR} runs {}: {e}", shown(runs))))?;
            Verdict::Map {
                map: TaskMap::from_runs(job, step, hosts, runs)?,
                hosts: list.to_string(),
            }
        }
        (None, None, Some(Some("plain"))) => Verdict::Plain(Plain::decode(fields, bad)?),
        (None, None, Some(Some(word))) => match WORDS.iter().find(|(_, w)| *w == word) {
            Some((v, _)) => v.clone(),
            None => return Err(bad("an unknown verdict")),
        },
        _ => return Err(bad("neither hosts=…;runs=… nor verdict=…")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(list: &str) -> HostList {
        HostList::parse(list, 1000).unwrap()
    }

    fn mapped(node_of: &[u32], nodes: &str) -> Handoff {
        let map = TaskMap::new(7, 3, hosts(nodes), node_of.to_vec()).unwrap();
        Handoff::new(
            7,
            3,
            Verdict::Map {
                map,
                hosts: nodes.to_string(),
            },
        )
    }

    fn round_trip(handoff: &Handoff) -> String {
        let text = handoff.encode();
        let back = Handoff::decode(&text, handoff.job, handoff.step).unwrap();
        assert_eq!(back.as_ref(), Some(handoff), "{text}");
        text
    }

    /// The layouts measured on Slurm (block, cyclic, 26.05's topology order,
    /// plane, descending nodes) and thousands of tasks stay small.
    #[test]
    fn layouts_encode_to_runs() {
        for (node_of, nodes, want) in [
            (
                vec![0, 1, 1, 1, 2],
                "node[1-3]",
                "1;7.3;hosts=node[1-3];runs=0,1*3,2",
            ),
            (
                vec![0, 1, 2, 1, 1],
                "node[1-3]",
                "1;7.3;hosts=node[1-3];runs=0-2,1*2",
            ),
            (
                vec![0, 0, 0, 2, 1],
                "node[1-3]",
                "1;7.3;hosts=node[1-3];runs=0*3,2-1",
            ),
            (
                (0..12).map(|r| (r / 2) % 3).collect(),
                "n[1-3]",
                "1;7.3;hosts=n[1-3];runs=0-2*2x2",
            ),
            (vec![2, 1, 0], "n[1-3]", "1;7.3;hosts=n[1-3];runs=2-0"),
            (
                (0..4096).map(|r| r / 8).collect(),
                "n[0-511]",
                "1;7.3;hosts=n[0-511];runs=0-511*8",
            ),
            (
                (0..4096).map(|r| r % 512).collect(),
                "n[0-511]",
                "1;7.3;hosts=n[0-511];runs=0-511x8",
            ),
        ] {
            assert_eq!(round_trip(&mapped(&node_of, nodes)), want);
        }
    }

    /// Every field round-trips, for its own step only.
    #[test]
    fn every_field_round_trips_for_its_own_step() {
        let mut full = mapped(&[0, 1], "n[1-2]");
        full.network = Some(Network::parse("10.98.0.0/29").unwrap());
        full.kept = vec!["NCCL_SOCKET_IFNAME".into(), "TP_SOCKET_IFNAME".into()];
        full.left_out = Frameworks(0b101);
        full.no_resv_ports = true;
        full.tres_bind = Some(StepBind::Bound("gres/gpu:per_task:1".into()));
        full.off_overridden = true;
        full.restart_count = 2;
        full.secret = Some(Secret::from_bytes([0xab; crate::secret::LEN]));
        let ab = "ab".repeat(crate::secret::LEN);
        assert_eq!(
            round_trip(&full),
            format!(
                "1;7.3;hosts=n[1-2];runs=0-1;net=10.98.0.0/29;kept=NCCL_SOCKET_IFNAME,TP_SOCKET_IFNAME;leave-out=5;no-resv-ports;tres-bind=gres/gpu:per_task:1;off-overridden;restart=2;secret={ab}"
            )
        );
        for v in [Verdict::Rebuild, Verdict::Skip, Verdict::Refused] {
            let mut h = Handoff::new(7, 3, v);
            h.tres_bind = Some(StepBind::None);
            round_trip(&h);
        }
        let text = full.encode();
        assert_eq!(Handoff::decode(&text, 7, 4).unwrap(), None);
        assert_eq!(Handoff::decode(&text, 8, 3).unwrap(), None);
        // srun empties the variable of a step that did not ask.
        assert_eq!(Handoff::decode("", 7, 3).unwrap(), None);
    }

    /// The early word round-trips, names no step, and is told apart from
    /// a word on a step.
    #[test]
    fn the_early_word_round_trips_and_names_no_step() {
        let full = Early {
            inherited: Frameworks(0b011),
            off_overridden: true,
            restart_count: 5,
            network: Some(Network::parse("10.98.0.0/29").unwrap()),
            secret: Some(Secret::from_bytes([0x0f; crate::secret::LEN])),
        };
        let text = full.encode();
        let hex = "0f".repeat(crate::secret::LEN);
        assert_eq!(
            text,
            format!("1;srun;inherited=3;off-overridden;restart=5;net=10.98.0.0/29;secret={hex}")
        );
        assert_eq!(
            Word::decode(Some(&text), None).unwrap(),
            Word::Early(full.clone())
        );
        assert_eq!(Early::decode(&text).unwrap(), Some(full));
        assert_eq!(Early::decode("1;srun").unwrap(), Some(Early::default()));
        assert_eq!(Early::default().encode(), "1;srun");
        assert_eq!(Handoff::decode(&text, 7, 3).unwrap(), None);
        for other in ["", "1;7.3;verdict=none", "1;srunx", "2;srun"] {
            assert_eq!(Early::decode(other).unwrap(), None, "{other}");
        }
        for (text, why) in [
            ("1;srun;inherited=16", "no framework"),
            ("1;srun;inherited", "without its value"),
            ("1;srun;off-overridden=1", "a flag with a value"),
            ("1;srun;restart=x", "restart"),
            ("1;srun;restart", "restart"),
            ("1;srun;restart=1;off-overridden", "misplaced"),
            ("1;srun;net=10.98.0.0/33", "net: "),
            ("1;srun;net", "net: "),
            ("1;srun;net=ib0;restart=1", "misplaced"),
            ("1;srun;verdict=none", "misplaced"),
            ("1;srun;secret=abc", "80 hex digits"),
            ("1;srun;secret", "without its value"),
        ] {
            let e = Early::decode(text).unwrap_err().to_string();
            assert!(e.contains(why), "{text}: {e}");
        }
    }

    /// A step without a framework option: srun's word carries what its
    /// tasks apply (the record's directory whatever it holds, the requeue)
    /// and round-trips; a reader takes it as this step's word alone, and
    /// it refuses a value its setting would.
    #[test]
    fn a_plain_word_round_trips_with_the_record_and_the_requeue() {
        let plain = Plain {
            record: Some("/home/me/runs;x=1 é".into()),
            record_log: true,
            requeue_on: Some(43),
            requeue_max: 2,
        };
        let mut h = Handoff::undecided(7, 3, false, 1, None);
        h.plain(plain.clone());
        let text = round_trip(&h);
        assert_eq!(
            text,
            "1;7.3;verdict=plain;record=2f686f6d652f6d652f72756e733b783d3120c3a9;record-log;requeue-on=43;requeue-max=2;restart=1"
        );
        let word = Word::decode(Some(&text), Some((7, 3))).unwrap();
        assert_eq!(word.plain(), Some((&plain, 1)));
        assert!(!word.refused());
        assert_eq!(
            Word::decode(Some(&text), Some((7, 4))).unwrap().plain(),
            None
        );
        // The settings it stands for: no framework, these values.
        let settings = plain.settings();
        assert!(settings.frameworks.is_empty());
        assert_eq!(settings.record.as_deref(), Some("/home/me/runs;x=1 é"));
        assert!(settings.record_log);
        assert_eq!((settings.requeue_on, settings.requeue_max), (Some(43), 2));
        assert_eq!(Plain::of(&settings), plain);
        // The least: the requeue's cap alone, at its default.
        let bare = Plain::of(&Settings::default());
        let mut h = Handoff::new(7, 3, Verdict::Rebuild);
        h.plain(bare);
        assert_eq!(round_trip(&h), "1;7.3;verdict=plain;requeue-max=3");
        // A step whose options ask for a framework is no plain step.
        let asked = Options::Read(Box::new(|_| Ok(Some(Settings::default()))));
        assert!(word.applied(asked).is_err());
        for (text, why) in [
            ("1;7.3;verdict=plain", "no requeue-max"),
            (
                "1;7.3;verdict=plain;record=2f61;requeue-max=3;record-log",
                "misplaced",
            ),
            (
                "1;7.3;verdict=plain;record=7265;requeue-max=3",
                "not an absolute directory",
            ),
            ("1;7.3;verdict=plain;record=2f6;requeue-max=3", "not hex"),
            ("1;7.3;verdict=plain;record=2fzz;requeue-max=3", "not hex"),
            ("1;7.3;verdict=plain;record=2fff;requeue-max=3", "not hex"),
            (
                "1;7.3;verdict=plain;record;requeue-max=3",
                "without its value",
            ),
            (
                "1;7.3;verdict=plain;record-log=1;requeue-max=3",
                "a flag with a value",
            ),
            (
                "1;7.3;verdict=plain;requeue-on=1;requeue-max=3",
                "an exit code must be 3-125",
            ),
            (
                "1;7.3;verdict=plain;requeue-on;requeue-max=3",
                "an exit code must be 3-125",
            ),
            (
                "1;7.3;verdict=plain;requeue-max=1001",
                "a count of requeues",
            ),
        ] {
            let e = Handoff::decode(text, 7, 3)
                .map(|_| ())
                .unwrap_err()
                .to_string();
            assert!(e.contains(why), "{text}: {e}");
        }
    }

    #[test]
    fn bad_values_are_refused() {
        for (text, why) in [
            ("1", "not 1;JOB.STEP"),
            ("2;7.3;verdict=none", "unknown version"),
            ("1;7;verdict=none", "no JOB.STEP"),
            ("1;7.x;verdict=none", "not two numbers"),
            ("1;7.3", "neither"),
            ("1;7.3;verdict=maybe", "unknown verdict"),
            ("1;7.3;hosts=n1", "neither"),
            ("1;7.3;hosts=n1;runs=0;verdict=none", "neither"),
            ("1;7.3;verdict=none;", "unknown or misplaced field \"\""),
            ("1;7.3;no-resv-ports;verdict=none", "neither"),
            ("1;7.3;verdict=none;restart=1;no-resv-ports", "misplaced"),
            ("1;7.3;verdict=none;ports", "misplaced"),
            ("1;7.3;verdict=none;secret=zz", "80 hex digits"),
            ("1;7.3;hosts=n[1-2];runs=0", "node n2 runs no task"),
            ("1;7.3;hosts=n1,n1;runs=0-1", "names node n1 twice"),
            ("1;7.3;hosts=n1;runs=1", "node index 1"),
            ("1;7.3;hosts=n1;runs=0x0", "a count of 0"),
            ("1;7.3;hosts=n1;runs=0*4294967295x4294967295", "more than"),
            (
                "1;7.3;hosts=n1;runs=garbage",
                "bad SLURM_TF_CLUSTER runs \"garbage\"",
            ),
            ("1;7.3;verdict=none;net=", "net"),
            ("1;7.3;verdict=none;kept=PATH", "not an interface variable"),
            ("1;7.3;verdict=none;kept=", "not an interface variable"),
            ("1;7.3;verdict=none;leave-out=tf-cluster", "no framework"),
            ("1;7.3;verdict=none;leave-out=16", "no framework"),
            ("1;7.3;verdict=none;leave-out=", "no framework"),
            ("1;7.3;verdict=none;tres-bind=", "GPU binding"),
            ("1;7.3;verdict=none;tres-bind=x;no-tres-bind", "GPU binding"),
            ("1;7.3;verdict=none;restart=", "restart"),
            ("1;7.3;verdict=none;restart=-1", "restart"),
            ("1;7.3;verdict=none;restart=+1", "restart"),
            ("1;7.3;verdict=none;no-resv-ports=1", "a flag with a value"),
            ("1;7.3;verdict=none;net", "without its value"),
        ] {
            let e = Handoff::decode(text, 7, 3)
                .map(|_| ())
                .unwrap_err()
                .to_string();
            assert!(e.contains(why), "{text}: {e}");
        }
        let long = format!("1;7.3;hosts=n1;runs={}", "0,".repeat(MAX_LEN));
        let e = Handoff::decode(&long, 7, 3).unwrap_err().to_string();
        assert!(e.contains("longer than"), "{e}");
    }
}
