//! The options the plugin adds to srun, sbatch and salloc, made from the
//! core's tables: one per framework (`--tf-cluster`, `--torch-cluster`,
//! `--jax-cluster`) and `--tf-<key>` per setting. Each option carries what
//! it means; Slurm's `val` is only its place in [`all`]. Slurm keeps pointers
//! to the options, so they are made once per process and never freed (a few
//! hundred bytes).

use std::ffi::{CString, c_char, c_int};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};

use super::bindings as sys;
use super::guard::{Answer, guard};
use super::handle::{self, RawOption, Spank};
pub use crate::core::frameworks::{ALL_OFF, OFF};
use crate::core::frameworks::{FRAMEWORKS, Framework, Frameworks, all_off_help};
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
            (name, s.arg, s.help_text(), 1, Meaning::Setting(s))
        });
        let all_off = (ALL_OFF.to_string(), "", all_off_help(), 0, Meaning::AllOff);
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
/// line: in one pass, one call with the inherited variable set means the
/// option was only inherited (see [`end_pass`]).
static CALLS: OnceLock<Vec<AtomicU32>> = OnceLock::new();

/// Per option, by `val`: the callback's calls counted into earlier passes
/// (see [`end_pass`]), and whether one of those passes had it from srun's
/// own command line.
static PASSES: OnceLock<Vec<(AtomicU32, AtomicBool)>> = OnceLock::new();

fn passes() -> &'static [(AtomicU32, AtomicBool)] {
    PASSES.get_or_init(|| {
        all()
            .iter()
            .map(|_| (AtomicU32::new(0), AtomicBool::new(false)))
            .collect()
    })
}

/// How often the callback of the option at `i` ran in this process.
fn calls_of(i: usize) -> u32 {
    CALLS
        .get()
        .and_then(|c| c.get(i))
        .map_or(0, |c| c.load(Ordering::Relaxed))
}

/// Whether one pass of srun's parsing, in which the option's callback ran
/// `calls` times, had the option from the command line: the value handed
/// down by sbatch/salloc (`inherited`) is one call of every pass.
pub fn given_in_pass(calls: u32, inherited: bool) -> bool {
    calls >= 2 || (calls == 1 && !inherited)
}

/// srun parses its options once per component of a heterogeneous step
/// (srun's opt.c: the environment, with the options sbatch/salloc handed
/// down, then the command line, then the plugins' `init_post_opt`, for each
/// component), so an inherited option is seen once per component. Called
/// from `init_post_opt`, at the end of each pass: the calls since the last
/// pass are judged as one pass.
pub fn end_pass() {
    for (i, option) in all().iter().enumerate() {
        let (counted, given) = &passes()[i];
        let now = calls_of(i);
        let before = counted.swap(now, Ordering::Relaxed);
        let inherited = std::env::var_os(inherited_var_of(&option.name)).is_some();
        if given_in_pass(now.saturating_sub(before), inherited) {
            given.store(true, Ordering::Relaxed);
        }
    }
}

/// Whether `option` was given to this srun itself, in any pass of its
/// parsing (see [`end_pass`]; calls after the last pass count as one more),
/// not only handed down by sbatch/salloc (or exported as their variable).
pub fn given_here(option: &str) -> bool {
    let Some(i) = all().iter().position(|o| o.name == option) else {
        return false;
    };
    let (counted, given) = &passes()[i];
    let inherited = std::env::var_os(inherited_var_of(option)).is_some();
    let rest = calls_of(i).saturating_sub(counted.load(Ordering::Relaxed));
    given.load(Ordering::Relaxed) || given_in_pass(rest, inherited)
}

/// The `--tf-<key>` setting options given to this srun itself (not only
/// handed down), by name.
pub fn settings_given_here() -> Vec<&'static str> {
    all()
        .iter()
        .filter(|o| matches!(o.meaning, Meaning::Setting(_)) && given_here(&o.name))
        .map(|o| o.name.as_str())
        .collect()
}

/// The last value each option's callback was given in this process, by
/// `val` (what `spank_option_getopt` returns later; Slurm refuses that call
/// in `init_post_opt`).
static VALUES: Mutex<Vec<Option<String>>> = Mutex::new(Vec::new());

/// The value srun's parsing last gave `option` (None: not given), from
/// the callbacks themselves: usable in `init_post_opt`.
pub fn seen(option: &str) -> Option<String> {
    let i = all().iter().position(|o| o.name == option)?;
    let values = VALUES.lock().unwrap_or_else(PoisonError::into_inner);
    values.get(i).cloned().flatten()
}

/// Whether srun's parsing gave it any framework option, from its command
/// line or handed down (`=off` is none), as the callbacks saw them.
pub fn seen_asking() -> bool {
    FRAMEWORKS
        .iter()
        .any(|f| seen(f.option).is_some_and(|v| v != OFF))
}

/// Whether srun's parsing saw a framework option or `--tf-off` at all, any
/// value (`=off` included), given or handed down: a step that says it
/// wants no framework, whose other `--tf-` options are then moot.
pub fn seen_framework_word() -> bool {
    seen(ALL_OFF).is_some() || FRAMEWORKS.iter().any(|f| seen(f.option).is_some())
}

/// Whether srun was given any framework option, from its command line or
/// handed down (`=off` is none): whether the step may ask for the plugin.
pub fn asks(spank: &Spank) -> Result<bool> {
    for option in all() {
        if let Meaning::Framework(_) = option.meaning {
            if spank.getopt(&option.raw)?.is_some_and(|v| v != OFF) {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// An option's value, checked as soon as srun/sbatch/salloc parse it, so a
/// typo is refused before anything is submitted, and counted ([`CALLS`]).
/// In slurmstepd it always succeeds: the task decides there.
extern "C" fn option_given(val: c_int, optarg: *const c_char, remote: c_int) -> c_int {
    if remote != 0 {
        return 0;
    }
    guard("option", None, Answer::Fails, || {
        let counts = CALLS.get_or_init(|| all().iter().map(|_| AtomicU32::new(0)).collect());
        if let Some(count) = usize::try_from(val).ok().and_then(|i| counts.get(i)) {
            count.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: Slurm passes NULL or a NUL-terminated option value.
        let value = unsafe { handle::option_value(optarg) }?;
        if let Ok(i) = usize::try_from(val) {
            let mut values = VALUES.lock().unwrap_or_else(PoisonError::into_inner);
            if values.len() < all().len() {
                values.resize(all().len(), None);
            }
            if let Some(slot) = values.get_mut(i) {
                *slot = Some(value.clone());
            }
        }
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
/// (srun tells; the tasks learn it from srun's hand-off).
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
    set_options(spank, &mut settings)?;
    Ok(Some(settings))
}

/// The settings of a step that asks for no framework option (srun's, in
/// `local_user_init`): the site's defaults, then the step's `--tf-<key>`
/// options, given or handed down; no framework.
pub fn plain_settings(spank: &Spank) -> Result<Settings> {
    let mut settings = Settings::from_admin_args(spank.args()?)?;
    settings.frameworks = Frameworks::default();
    set_options(spank, &mut settings)?;
    Ok(settings)
}

/// The step's `--tf-<key>` options set over `settings`.
fn set_options(spank: &Spank, settings: &mut Settings) -> Result<()> {
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
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::frameworks::by_option;

    /// The table's frameworks the tests below name.
    fn framework(option: &str) -> &'static Framework {
        by_option(option).unwrap()
    }

    /// The names sbatch/salloc give the options they hand down (measured on
    /// Slurm 22.05: `--tf-cluster` comes back as the first).
    #[test]
    fn inherited_variables_are_slurms_names() {
        assert_eq!(
            inherited_var(framework("tf-cluster")),
            "SLURM_SPANK__SLURM_SPANK_OPTION_tf_cluster_tf_cluster"
        );
        assert_eq!(
            inherited_var(framework("torch-cluster")),
            "SLURM_SPANK__SLURM_SPANK_OPTION_tf_cluster_torch_cluster"
        );
    }

    /// srun parses its options once per component of a heterogeneous step,
    /// each pass reading the value sbatch/salloc handed down: an option only
    /// inherited is one call per pass, never "given to srun", however many
    /// components (two passes once counted as given: 2 calls).
    #[test]
    fn an_option_is_judged_per_parse_pass() {
        // Inherited only: one call in each of two passes.
        assert!(!given_in_pass(1, true));
        assert!(!(given_in_pass(1, true) || given_in_pass(1, true)));
        // Inherited and on srun's command line: two calls in a pass.
        assert!(given_in_pass(2, true));
        // On the command line only, in any pass.
        assert!(given_in_pass(1, false));
        assert!(!given_in_pass(0, false) && given_in_pass(1, false));
        assert!(!given_in_pass(0, true));
    }

    #[test]
    fn framework_values_are_a_spec_or_off() {
        assert!(crate::core::frameworks::check_value(framework("torch-cluster"), "").is_ok());
        assert!(crate::core::frameworks::check_value(framework("torch-cluster"), OFF).is_ok());
        assert!(crate::core::frameworks::check_value(framework("jax-cluster"), OFF).is_ok());
        assert!(crate::core::frameworks::check_value(framework("tf-cluster"), OFF).is_ok());
        assert!(crate::core::frameworks::check_value(framework("tf-cluster"), "ps:1").is_ok());
        assert!(
            crate::core::frameworks::check_value(framework("torch-cluster"), "elastic:2").is_ok()
        );
        let e =
            crate::core::frameworks::check_value(framework("torch-cluster"), "yes").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("--torch-cluster=\"yes\": use static, elastic")
        );
        let e = crate::core::frameworks::check_value(framework("jax-cluster"), "yes").unwrap_err();
        assert_eq!(
            e.to_string(),
            "--jax-cluster takes no value but off (not \"yes\")"
        );
    }
}
