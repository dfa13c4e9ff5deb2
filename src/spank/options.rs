//! The options the plugin adds to srun, sbatch and salloc, made from the
//! core's tables: one per framework (`--tf-cluster`, `--torch-cluster`,
//! `--jax-cluster`) and `--tf-<key>` per setting. Each option carries what
//! it means; Slurm's `val` is only its place in [`all`]. Slurm keeps pointers
//! to the options, so they are made once per process and never freed (a few
//! hundred bytes).

use std::ffi::{CString, c_char, c_int};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

use super::bindings as sys;
use super::guard::guard;
use super::handle::{self, RawOption, Spank};
pub use crate::core::frameworks::{ALL_OFF, OFF};
use crate::core::frameworks::{ALL_OFF_HELP, FRAMEWORKS, Framework, Frameworks};
use crate::core::settings::{SETTINGS, Setting};
use crate::core::{Error, Result, Settings};

/// What an option stands for.
#[derive(Clone, Copy)]
pub enum Meaning {
    /// Asks for a framework's variables (`=off`: not for this step).
    Framework(&'static Framework),
    /// Sets a setting for the step.
    Setting(&'static Setting),
    /// [`ALL_OFF`]: no framework for this step, whatever it inherited.
    AllOff,
}

pub struct SpankOption {
    pub raw: RawOption,
    /// The name without `--` (`tf-cluster`).
    pub name: String,
    pub meaning: Meaning,
}

/// How sbatch/salloc hand a framework's option to the job's steps
/// (`SLURM_SPANK__SLURM_SPANK_OPTION_<plugin>_<option>`): srun reads it
/// before its own command line.
pub fn inherited_var(f: &Framework) -> String {
    inherited_var_of(f.option)
}

/// How sbatch/salloc hand option `name` down (see [`inherited_var`]).
pub fn inherited_var_of(name: &str) -> String {
    format!(
        "SLURM_SPANK__SLURM_SPANK_OPTION_tf_cluster_{}",
        name.replace('-', "_")
    )
}

/// Every option: the frameworks' first, then the settings', then
/// [`ALL_OFF`].
pub fn all() -> &'static [SpankOption] {
    static OPTIONS: OnceLock<Vec<SpankOption>> = OnceLock::new();
    OPTIONS.get_or_init(|| {
        let frameworks = FRAMEWORKS.iter().map(|&f| {
            // has_arg 2: the argument is optional (`--tf-cluster` alone =
            // all workers; `--torch-cluster=off` turns an inherited one off).
            let arg = f.arg.as_ref().map_or(OFF, |a| a.name);
            let help = format!(
                "{}; ={OFF}: not for this step, though the job asked",
                f.help
            );
            (f.option.to_string(), arg, help, 2, Meaning::Framework(f))
        });
        let settings = SETTINGS.iter().map(|s| {
            let name = format!("tf-{}", s.key);
            (name, s.arg, s.help.to_string(), 1, Meaning::Setting(s))
        });
        let all_off = (
            ALL_OFF.to_string(),
            "",
            ALL_OFF_HELP.to_string(),
            0,
            Meaning::AllOff,
        );
        frameworks
            .chain(settings)
            .chain(std::iter::once(all_off))
            .zip(0..)
            .map(|((name, arg, help, has_arg, meaning), val)| {
                option(name, arg, help, val, has_arg, meaning)
            })
            .collect()
    })
}

/// The option Slurm's callback names by `val`.
fn given(val: c_int) -> Option<&'static SpankOption> {
    all().get(usize::try_from(val).ok()?)
}

/// How often each option's callback ran in this process, by `val`. srun
/// reads the value sbatch/salloc handed down first, then its own command
/// line: one call with the inherited variable set means the option was only
/// inherited.
static CALLS: OnceLock<Vec<AtomicU32>> = OnceLock::new();

/// How often the callback of `option` ran in this srun (see [`CALLS`]).
pub fn calls(option: &str) -> u32 {
    let Some(i) = all().iter().position(|o| o.name == option) else {
        return 0;
    };
    CALLS
        .get()
        .and_then(|c| c.get(i))
        .map_or(0, |c| c.load(Ordering::Relaxed))
}

/// An option's value, checked as soon as srun/sbatch/salloc parse it, so a
/// typo is refused before anything is submitted, and counted ([`calls`]).
/// In slurmstepd it always succeeds: the task decides there.
extern "C" fn option_given(val: c_int, optarg: *const c_char, remote: c_int) -> c_int {
    if remote != 0 {
        return 0;
    }
    guard("option", None, || {
        let counts = CALLS.get_or_init(|| all().iter().map(|_| AtomicU32::new(0)).collect());
        if let Some(count) = usize::try_from(val).ok().and_then(|i| counts.get(i)) {
            count.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: Slurm passes NULL or a NUL-terminated option value.
        let value = unsafe { handle::option_value(optarg) }?;
        match given(val).map(|o| o.meaning) {
            Some(Meaning::Framework(f)) => crate::core::frameworks::check_value(f, &value),
            Some(Meaning::Setting(setting)) => Settings::default()
                .set(setting.key, &value)
                .map_err(|e| Error::new(format!("--tf-{e}"))),
            Some(Meaning::AllOff) | None => Ok(()),
        }
    })
}

fn option(
    name: String,
    arg: &str,
    help: String,
    val: c_int,
    has_arg: c_int,
    meaning: Meaning,
) -> SpankOption {
    let leak = |s: String| -> *mut c_char {
        CString::new(s)
            .expect("options are declared without NUL bytes")
            .into_raw()
    };
    SpankOption {
        raw: RawOption(sys::spank_option {
            name: leak(name.clone()),
            arginfo: leak(arg.to_string()),
            usage: leak(format!("tf-cluster: {help}")),
            has_arg,
            val,
            cb: Some(option_given),
        }),
        name,
        meaning,
    }
}

/// The step's settings (site defaults from plugstack.conf, then the step's
/// options), or None when the step asked for no framework (or turned each
/// off: `--tf-cluster=off`, `--tf-off`). `off_overridden`: a `--tf-off` the
/// step only inherited is beaten by a framework option given to srun itself
/// (srun tells; the tasks learn it from srun's [`Word`]).
pub fn step_settings(spank: &Spank, off_overridden: bool) -> Result<Option<Settings>> {
    let mut asked = Vec::new();
    for option in all() {
        match option.meaning {
            Meaning::Framework(f) => match spank.getopt(&option.raw)? {
                Some(value) if value == OFF => {}
                Some(value) => asked.push((f, value)),
                None => {}
            },
            Meaning::AllOff if !off_overridden && spank.getopt(&option.raw)?.is_some() => {
                return Ok(None);
            }
            _ => {}
        }
    }
    if asked.is_empty() {
        return Ok(None);
    }
    let mut settings = Settings::from_admin_args(spank.args()?)?;
    settings.frameworks = Frameworks::default();
    for (f, value) in asked {
        settings.frameworks = settings.frameworks.with(f);
        if let Some(arg) = &f.arg {
            (arg.set)(&mut settings, &value)?;
        }
    }
    for option in all() {
        let Meaning::Setting(setting) = option.meaning else {
            continue;
        };
        if let Some(value) = spank.getopt(&option.raw)? {
            settings
                .set(setting.key, &value)
                .map_err(|e| Error::new(format!("--tf-{e}")))?;
        }
    }
    Ok(Some(settings))
}

/// What srun says of its step beside the task map, in one variable:
/// `JOB.STEP[;leave-out=OPTION,…][;no-resv-ports][;tres-bind=TEXT|;no-tres-bind]
/// [;off-overridden][;restart=K]`, e.g. `4242.3;leave-out=tf-cluster;no-tres-bind`. A
/// `SLURM_` name: srun passes it even with --export=NONE. Only the tasks of
/// that very step read it. srun sets it for every step that asks for the
/// plugin, so a value the user exported or an outer step left never reaches
/// such a step's tasks (Slurm copies srun's environment before
/// `local_user_init`: a variable set there wins, one removed does not).
pub const WORD_VAR: &str = "SLURM_TF_CLUSTER_STEP";

/// srun's word on its step.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Word {
    /// Frameworks the step only inherited and that do not fit it.
    pub left_out: Frameworks,
    /// Slurm reserved no ports for the step: a SLURM_STEP_RESV_PORTS the
    /// tasks see is one srun's environment passed on (an outer step's, the
    /// user's), not this step's.
    pub no_resv_ports: bool,
    /// The step's GPU binding as slurmctld recorded it (the value
    /// slurmstepd gives the tasks as SLURMD_TRES_BIND): None when srun had
    /// no record. A task that a container plugin moved reads this, never
    /// its environment, which may be the image's.
    pub tres_bind: Option<StepBind>,
    /// A `--tf-off` the step only inherited, beaten by a framework option
    /// given to this srun.
    pub off_overridden: bool,
    /// The job's restart count as srun learnt it (0: the first incarnation).
    pub restart_count: u32,
}

/// The step's GPU binding as slurmctld recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepBind {
    /// The step binds no TRES.
    None,
    /// Its `tres_bind` (`gres/gpu:per_task:1`).
    Bound(String),
}

impl Word {
    /// srun: hands the word on to the step's tasks (always a value: see
    /// [`WORD_VAR`]).
    pub fn hand_to_tasks(&self, job: u32, step: u32) {
        // SAFETY: as srun::hand_to_tasks: srun reads its environment for the
        // launch only after local_user_init returns.
        unsafe { std::env::set_var(WORD_VAR, self.encode(job, step)) }
    }

    /// The variable's value.
    fn encode(&self, job: u32, step: u32) -> String {
        let mut text = format!("{job}.{step}");
        if !self.left_out.is_empty() {
            let names: Vec<&str> = self.left_out.iter().map(|f| f.option).collect();
            text.push_str(&format!(";leave-out={}", names.join(",")));
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
        text
    }

    /// srun's word on step `job`.`step` in `text` (the variable's value, if
    /// any). A value made for another step is ignored; a malformed one for
    /// this step is refused.
    fn decode(text: Option<&str>, job: u32, step: u32) -> Result<Word> {
        let mut word = Word::default();
        let Some(text) = text else {
            return Ok(word);
        };
        let bad = || Error::new(format!("bad {WORD_VAR} {text:?}"));
        let mut fields = text.split(';');
        if fields.next() != Some(&format!("{job}.{step}")) {
            return Ok(word);
        }
        for field in fields {
            match field.split_once('=') {
                Some(("leave-out", names)) => {
                    for name in names.split(',') {
                        let f = FRAMEWORKS
                            .iter()
                            .find(|f| f.option == name)
                            .ok_or_else(bad)?;
                        word.left_out = word.left_out.with(f);
                    }
                }
                Some(("restart", k)) => {
                    word.restart_count = crate::core::number::parse_u32(k).ok_or_else(bad)?;
                }
                Some(("tres-bind", bind)) if !bind.is_empty() => {
                    word.tres_bind = Some(StepBind::Bound(bind.to_string()));
                }
                None if field == "no-resv-ports" => word.no_resv_ports = true,
                None if field == "no-tres-bind" => word.tres_bind = Some(StepBind::None),
                None if field == "off-overridden" => word.off_overridden = true,
                _ => return Err(bad()),
            }
        }
        Ok(word)
    }
}

/// In slurmstepd, for one task: the step's settings without the frameworks
/// srun left out, and srun's word (None when no framework is left).
pub fn task_settings(spank: &Spank) -> Result<Option<(Settings, Word)>> {
    let text = spank.getenv(WORD_VAR)?;
    let word = Word::decode(text.as_deref(), spank.job_id()?, spank.step_id()?)?;
    let Some(mut settings) = step_settings(spank, word.off_overridden)? else {
        return Ok(None);
    };
    settings.restart_count = word.restart_count;
    let asked = settings.frameworks;
    settings.frameworks = Frameworks::default();
    for f in asked.iter().filter(|&f| !word.left_out.contains(f)) {
        settings.frameworks = settings.frameworks.with(f);
    }
    Ok((!settings.frameworks.is_empty()).then_some((settings, word)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::frameworks::{jax, pytorch, tensorflow};

    /// The names sbatch/salloc give the options they hand down (measured on
    /// Slurm 22.05: `--tf-cluster` comes back as the first).
    #[test]
    fn inherited_variables_are_slurms_names() {
        assert_eq!(
            inherited_var(&tensorflow::FRAMEWORK),
            "SLURM_SPANK__SLURM_SPANK_OPTION_tf_cluster_tf_cluster"
        );
        assert_eq!(
            inherited_var(&pytorch::FRAMEWORK),
            "SLURM_SPANK__SLURM_SPANK_OPTION_tf_cluster_torch_cluster"
        );
    }

    /// srun's word round-trips for its own step only; a malformed value
    /// for the step fails closed.
    #[test]
    fn the_word_is_for_its_own_step() {
        let both = Frameworks::only(&tensorflow::FRAMEWORK).with(&jax::FRAMEWORK);
        let word = Word {
            left_out: both,
            no_resv_ports: true,
            tres_bind: Some(StepBind::Bound("gres/gpu:per_task:1".into())),
            off_overridden: true,
            restart_count: 2,
        };
        let text = word.encode(42, 3);
        assert_eq!(
            text,
            "42.3;leave-out=tf-cluster,jax-cluster;no-resv-ports;tres-bind=gres/gpu:per_task:1;off-overridden;restart=2"
        );
        assert_eq!(Word::decode(Some(&text), 42, 3).unwrap(), word);
        assert_eq!(Word::decode(Some(&text), 42, 4).unwrap(), Word::default());
        assert_eq!(Word::decode(None, 42, 3).unwrap(), Word::default());
        // Always a value, so that it overwrites one the user exported.
        assert_eq!(Word::default().encode(42, 3), "42.3");
        let unbound = Word {
            tres_bind: Some(StepBind::None),
            ..Word::default()
        };
        assert_eq!(unbound.encode(42, 3), "42.3;no-tres-bind");
        // A requeued job's restart count reaches every task.
        let requeued = Word {
            restart_count: 1,
            ..Word::default()
        };
        assert_eq!(requeued.encode(42, 0), "42.0;restart=1");
        assert_eq!(
            Word::decode(Some("42.0;restart=1"), 42, 0).unwrap(),
            requeued
        );
        assert_eq!(
            Word::decode(Some("42.3;no-tres-bind"), 42, 3).unwrap(),
            unbound
        );
        for bad in [
            "42.3;",
            "42.3;leave-out=",
            "42.3;leave-out=tf-cluster,nope",
            "42.3;ports",
            "42.3;tres-bind=",
            "42.3;restart=",
            "42.3;restart=-1",
            "42.3;restart=x",
        ] {
            assert!(Word::decode(Some(bad), 42, 3).is_err(), "{bad}");
        }
    }

    #[test]
    fn framework_values_are_a_spec_or_off() {
        assert!(crate::core::frameworks::check_value(&pytorch::FRAMEWORK, "").is_ok());
        assert!(crate::core::frameworks::check_value(&pytorch::FRAMEWORK, OFF).is_ok());
        assert!(crate::core::frameworks::check_value(&jax::FRAMEWORK, OFF).is_ok());
        assert!(crate::core::frameworks::check_value(&tensorflow::FRAMEWORK, OFF).is_ok());
        assert!(crate::core::frameworks::check_value(&tensorflow::FRAMEWORK, "ps:1").is_ok());
        assert!(crate::core::frameworks::check_value(&pytorch::FRAMEWORK, "elastic:2").is_ok());
        let e = crate::core::frameworks::check_value(&pytorch::FRAMEWORK, "yes").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("--torch-cluster=\"yes\": use static, elastic")
        );
        let e = crate::core::frameworks::check_value(&jax::FRAMEWORK, "yes").unwrap_err();
        assert_eq!(
            e.to_string(),
            "--jax-cluster takes no value but off (not \"yes\")"
        );
    }
}
