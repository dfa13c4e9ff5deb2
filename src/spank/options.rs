//! The options the plugin adds to srun, sbatch and salloc, made from the
//! core's tables: one per framework (`--tf-cluster`, `--torch-cluster`,
//! `--jax-cluster`) and `--tf-<key>` per setting. Each option carries what
//! it means; Slurm's `val` is only its place in [`all`]. Slurm keeps pointers
//! to the options, so they are made once per process and never freed (a few
//! hundred bytes).

use std::ffi::{CString, c_char, c_int};
use std::sync::OnceLock;

use super::bindings as sys;
use super::handle::Spank;
use crate::core::frameworks::{FRAMEWORKS, Framework, Frameworks};
use crate::core::settings::{SETTINGS, Setting};
use crate::core::{Error, Result, Settings};

/// What an option stands for.
#[derive(Clone, Copy)]
pub enum Meaning {
    /// Asks for a framework's variables.
    Framework(&'static Framework),
    /// Sets a setting for the step.
    Setting(&'static Setting),
}

pub struct SpankOption {
    raw: sys::spank_option,
    pub meaning: Meaning,
}

// SAFETY: the option's strings are leaked, immutable C strings; neither Slurm
// nor this plugin ever writes to the struct.
unsafe impl Sync for SpankOption {}
unsafe impl Send for SpankOption {}

impl SpankOption {
    pub fn as_ptr(&'static self) -> *mut sys::spank_option {
        (&self.raw as *const sys::spank_option).cast_mut()
    }
}

/// How sbatch/salloc hand a framework's option to the job's steps
/// (`SLURM_SPANK__SLURM_SPANK_OPTION_<plugin>_<option>`): srun reads it
/// before its own command line.
pub fn inherited_var(f: &Framework) -> String {
    format!(
        "SLURM_SPANK__SLURM_SPANK_OPTION_tf_cluster_{}",
        f.option.replace('-', "_")
    )
}

/// Every option: the frameworks' first, then the settings'.
pub fn all() -> &'static [SpankOption] {
    static OPTIONS: OnceLock<Vec<SpankOption>> = OnceLock::new();
    OPTIONS.get_or_init(|| {
        let frameworks = FRAMEWORKS.iter().map(|&f| {
            // has_arg 2: the argument is optional (`--tf-cluster` alone = all workers).
            let (arg, has_arg) = f.arg.as_ref().map_or(("", 0), |a| (a.name, 2));
            (
                f.option.to_string(),
                arg,
                f.help,
                has_arg,
                Meaning::Framework(f),
            )
        });
        let settings = SETTINGS.iter().map(|s| {
            let name = format!("tf-{}", s.key);
            (name, s.arg, s.help, 1, Meaning::Setting(s))
        });
        frameworks
            .chain(settings)
            .zip(0..)
            .map(|((name, arg, help, has_arg, meaning), val)| {
                option(name, arg, help, val, has_arg, meaning)
            })
            .collect()
    })
}

/// The option Slurm's callback names by `val`.
pub fn given(val: c_int) -> Option<&'static SpankOption> {
    all().get(usize::try_from(val).ok()?)
}

fn option(
    name: String,
    arg: &str,
    help: &str,
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
        raw: sys::spank_option {
            name: leak(name),
            arginfo: leak(arg.to_string()),
            usage: leak(format!("tf-cluster: {help}")),
            has_arg,
            val,
            cb: Some(super::hooks::option_given),
        },
        meaning,
    }
}

/// The `--tf-cluster` value that turns off a spec inherited from the job.
pub const OFF: &str = "off";

/// The step's settings (site defaults from plugstack.conf, then the step's
/// options), or None when the step asked for no framework (or said
/// `--tf-cluster=off`).
pub fn step_settings(spank: &Spank) -> Result<Option<Settings>> {
    let mut asked = Vec::new();
    for option in all() {
        if let Meaning::Framework(f) = option.meaning {
            match spank.getopt(option)? {
                Some(value) if value == OFF => {}
                Some(value) => asked.push((f, value)),
                None => {}
            }
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
        if let Some(value) = spank.getopt(option)? {
            settings
                .set(setting.key, &value)
                .map_err(|e| Error::new(format!("--tf-{e}")))?;
        }
    }
    Ok(Some(settings))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::frameworks::{pytorch, tensorflow};

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
}
