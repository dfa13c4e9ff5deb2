//! srun's two words as text: each one's encoder, and the one parser of
//! both, a word's header (`1;srun` or `1;JOB.STEP`) and then its fields,
//! each at most once and in its place, each read and written by one arm.

use super::word::{Early, Fields, Handoff, MAX_LEN, Plain, StepBind, VAR, Verdict, Word};
use crate::addresses::{Network, VARS};
use crate::error::{Error, Result, shown};
use crate::hostlist::HostList;
use crate::limits::MAX_NODES;
use crate::number::parse_u32;
use crate::runs::Runs;
use crate::secret::Secret;
use crate::settings::{Frameworks, Settings};
use crate::task_map::TaskMap;

/// The id field of an early word.
const EARLY_ID: &str = "srun";

/// The fields of a word after its header (and a step's verdict), as [`next_field`] takes them.
type Split<'t> = std::iter::Peekable<std::str::Split<'t, char>>;

/// Why a value is bad, with the value.
type Bad<'b> = &'b dyn Fn(&str) -> Error;

/// A field after a word's header (and a step's verdict).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    Inherited,
    Net,
    Kept,
    LeaveOut,
    NoResvPorts,
    TresBind,
    NoTresBind,
    OffOverridden,
    Restart,
    Secret,
    Refused,
    Given,
}

/// srun's early word's fields, in their order.
const EARLY: [Key; 7] = [
    Key::Inherited,
    Key::OffOverridden,
    Key::Restart,
    Key::Net,
    Key::Secret,
    Key::Refused,
    Key::Given,
];

/// The fields of srun's word on a step after its verdict, in their order.
const STEP: [Key; 9] = [
    Key::Net,
    Key::Kept,
    Key::LeaveOut,
    Key::NoResvPorts,
    Key::TresBind,
    Key::NoTresBind,
    Key::OffOverridden,
    Key::Restart,
    Key::Secret,
];

impl Key {
    /// The field's name on the wire.
    fn name(self) -> &'static str {
        match self {
            Key::Inherited => "inherited",
            Key::Net => "net",
            Key::Kept => "kept",
            Key::LeaveOut => "leave-out",
            Key::NoResvPorts => "no-resv-ports",
            Key::TresBind => "tres-bind",
            Key::NoTresBind => "no-tres-bind",
            Key::OffOverridden => "off-overridden",
            Key::Restart => "restart",
            Key::Secret => "secret",
            Key::Refused => "refused",
            Key::Given => "given",
        }
    }
}

impl Fields {
    /// `key`'s field as written: None, left out; Some(None), a flag;
    /// Some(Some(VALUE)), `key=VALUE`.
    fn written(&self, key: Key) -> Option<Option<String>> {
        let value = |v: String| Some(Some(v));
        match key {
            Key::Inherited if !self.inherited.is_empty() => value(self.inherited.0.to_string()),
            Key::Net => self.network.as_ref().and_then(|n| value(n.to_string())),
            Key::Kept if !self.kept.is_empty() => value(self.kept.join(",")),
            Key::LeaveOut if !self.left_out.is_empty() => value(self.left_out.0.to_string()),
            Key::NoResvPorts if self.no_resv_ports => Some(None),
            // A binding the wire cannot carry is left out (none recorded).
            Key::TresBind => match &self.tres_bind {
                Some(StepBind::Bound(b)) if !b.contains(';') && !b.is_empty() => value(b.clone()),
                _ => None,
            },
            Key::NoTresBind if self.tres_bind == Some(StepBind::None) => Some(None),
            Key::OffOverridden if self.off_overridden => Some(None),
            Key::Restart if self.restart_count > 0 => value(self.restart_count.to_string()),
            Key::Secret => self.secret.as_ref().and_then(|s| value(s.hex())),
            Key::Refused if self.refused => Some(None),
            Key::Given if !self.given.is_empty() => value(self.given.join(",")),
            _ => None,
        }
    }

    /// The fields of `keys` that hold something, after `text`.
    fn encode(&self, keys: &[Key], text: &mut String) {
        for &key in keys {
            match self.written(key) {
                None => {}
                Some(None) => text.push_str(&format!(";{}", key.name())),
                Some(Some(value)) => text.push_str(&format!(";{}={value}", key.name())),
            }
        }
    }

    /// The fields of `keys`, each at most once and in its place; any other
    /// is refused.
    fn decode(fields: &mut Split, keys: &[Key], bad: Bad) -> Result<Fields> {
        let mut read = Fields::default();
        for &key in keys {
            if let Some(got) = next_field(fields, key.name()) {
                read.set(key, got, bad)?;
            }
        }
        match fields.next() {
            None => Ok(read),
            Some(f) => Err(bad(&format!("unknown or misplaced field {}", shown(f)))),
        }
    }

    /// `key`'s field as [`next_field`] found it (`got`), checked.
    fn set(&mut self, key: Key, got: Option<&str>, bad: Bad) -> Result<()> {
        // A flag stands alone, a value follows `=`.
        let value =
            || got.ok_or_else(|| bad(&format!("{}: a field without its value", key.name())));
        let flag = || got.map_or(Ok(true), |_| Err(bad("a flag with a value")));
        let no_framework = || bad(&format!("{} names no framework", key.name()));
        match key {
            Key::Inherited => self.inherited = frameworks(value()?).ok_or_else(no_framework)?,
            Key::LeaveOut => self.left_out = frameworks(value()?).ok_or_else(no_framework)?,
            Key::Net => {
                let net = Network::parse(value()?).map_err(|e| bad(&format!("net: {e}")))?;
                self.network = Some(net);
            }
            Key::Kept => self.kept = kept(value()?).map_err(bad)?,
            Key::NoResvPorts => self.no_resv_ports = flag()?,
            Key::TresBind => match value()? {
                "" => return Err(bad("a bad GPU binding")),
                bind => self.tres_bind = Some(StepBind::Bound(bind.into())),
            },
            Key::NoTresBind => {
                flag()?;
                if self.tres_bind.is_some() {
                    return Err(bad("a bad GPU binding"));
                }
                self.tres_bind = Some(StepBind::None);
            }
            Key::OffOverridden => self.off_overridden = flag()?,
            Key::Refused => self.refused = flag()?,
            Key::Given => self.given = given(value()?).map_err(bad)?,
            Key::Restart => {
                self.restart_count =
                    parse_u32(value()?).ok_or_else(|| bad("restart is not a count"))?
            }
            Key::Secret => {
                let secret =
                    Secret::parse(value()?).ok_or_else(|| bad("secret is not 80 hex digits"))?;
                self.secret = Some(secret);
            }
        }
        Ok(())
    }
}

/// The interface variables a `kept` field names: Err unless each is one.
fn kept(names: &str) -> std::result::Result<Vec<String>, &'static str> {
    names
        .split(',')
        .map(|name| match VARS.iter().find(|v| v.name == name) {
            Some(v) => Ok(v.name.to_string()),
            None => Err("kept names a variable that is not an interface variable"),
        })
        .collect()
}

/// The `--tf-<key>` options a `given` field names: Err unless each is a
/// setting's.
fn given(names: &str) -> std::result::Result<Vec<String>, &'static str> {
    names
        .split(',')
        .map(|name| match crate::frameworks::is_setting_option(name) {
            true => Ok(name.to_string()),
            false => Err("given names an option that is no setting's"),
        })
        .collect()
}

/// What a word's header names: srun's early word, or a step.
#[derive(Debug, PartialEq, Eq)]
enum Id {
    Early,
    Step(u32, u32),
}

/// A word's header, the one both words start with: its length, its version,
/// and its id (`srun`, or `JOB.STEP`); with the fields after it.
fn header<'t>(text: &'t str, bad: Bad) -> Result<(Id, Split<'t>)> {
    if text.len() > MAX_LEN {
        return Err(bad(&format!("longer than {MAX_LEN} bytes")));
    }
    let mut fields = text.split(';');
    let (Some(version), Some(id)) = (fields.next(), fields.next()) else {
        return Err(bad("not 1;JOB.STEP;…"));
    };
    if version != "1" {
        return Err(bad(
            "unknown version (is srun's tf-cluster the same build as the node's?)",
        ));
    }
    let id = if id == EARLY_ID {
        Id::Early
    } else {
        let Some((j, s)) = id.split_once('.') else {
            return Err(bad("no JOB.STEP"));
        };
        match (parse_u32(j), parse_u32(s)) {
            (Some(j), Some(s)) => Id::Step(j, s),
            _ => return Err(bad("JOB.STEP is not two numbers")),
        }
    };
    Ok((id, fields.peekable()))
}

/// The error of a bad word `text`, saying why.
fn bad_word(text: &str) -> impl Fn(&str) -> Error + '_ {
    move |why: &str| Error::new(format!("bad {VAR} {}: {why}", shown(text)))
}

impl Early {
    /// The variable's value.
    pub fn encode(&self) -> String {
        let mut text = format!("1;{EARLY_ID}");
        self.fields.encode(&EARLY, &mut text);
        text
    }

    /// srun's early word in `text`: None when `text` is not one (empty, or
    /// a word on a step); a malformed one is refused.
    pub fn decode(text: &str) -> Result<Option<Early>> {
        let rest = text
            .strip_prefix("1;")
            .and_then(|r| r.strip_prefix(EARLY_ID));
        if !rest.is_some_and(|r| r.is_empty() || r.starts_with(';')) {
            return Ok(None);
        }
        let bad = bad_word(text);
        let (_, mut fields) = header(text, &bad)?;
        let fields = Fields::decode(&mut fields, &EARLY, &bad)?;
        Ok(Some(Early { fields }))
    }
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
}

impl Handoff {
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
        self.fields.encode(&STEP, &mut text);
        text
    }

    /// srun's word on step `job`.`step` (the task's own ids, from Slurm's
    /// items) in `text`: None when it names another step (an outer srun's,
    /// or empty: srun had nothing to say); a malformed value, or one of
    /// another version, is refused.
    pub fn decode(text: &str, job: u32, step: u32) -> Result<Option<Handoff>> {
        if text.is_empty() {
            return Ok(None);
        }
        let bad = bad_word(text);
        let (id, mut fields) = header(text, &bad)?;
        if id != Id::Step(job, step) {
            return Ok(None);
        }
        let verdict = verdict(&mut fields, job, step, &bad)?;
        let fields = Fields::decode(&mut fields, &STEP, &bad)?;
        Ok(Some(Handoff {
            job,
            step,
            verdict,
            fields,
        }))
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
}

impl Plain {
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
        text.push_str(&format!(";exclude-max={}", self.exclude_max));
    }

    /// Its fields, each checked as its setting is.
    fn decode(fields: &mut Split, bad: Bad) -> Result<Plain> {
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
        // Absent from an older srun's word: the default.
        match next_field(fields, "exclude-max") {
            None => {}
            Some(Some(max)) => set("exclude-max", max)?,
            Some(None) => return Err(bad("a field without its value")),
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

/// A set of frameworks written as bits (their indices in
/// crate::frameworks::FRAMEWORKS): None unless every bit names one.
fn frameworks(bits: &str) -> Option<Frameworks> {
    parse_u32(bits)
        .and_then(|b| u8::try_from(b).ok())
        .map(Frameworks)
        .filter(|f| f.0 & !Frameworks::all().0 == 0)
}

/// A hand-off's verdict: its map (`hosts=…;runs=…`) or its word.
fn verdict(fields: &mut Split, job: u32, step: u32, bad: Bad) -> Result<Verdict> {
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
