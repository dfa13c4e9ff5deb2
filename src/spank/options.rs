//! The options the plugin adds to srun, sbatch and salloc, made from the
//! core's one table of settings (core::settings): `--tf-cluster` and one
//! `--tf-<key>` per setting. Slurm keeps pointers to the options, so they are
//! made once per process and never freed (a few hundred bytes).

use std::ffi::{CString, c_char, c_int};
use std::sync::OnceLock;

use super::bindings as sys;
use crate::core::settings::{FRAMEWORKS, Framework, SETTINGS, Setting};

pub struct SpankOption(sys::spank_option);

// SAFETY: the option's strings are leaked, immutable C strings; neither Slurm
// nor this plugin ever writes to the struct.
unsafe impl Sync for SpankOption {}
unsafe impl Send for SpankOption {}

impl SpankOption {
    pub fn as_ptr(&'static self) -> *mut sys::spank_option {
        (&self.0 as *const sys::spank_option).cast_mut()
    }
}

/// How sbatch/salloc hand `--tf-cluster` to the job's steps: srun reads it
/// before its own command line.
pub const INHERITED_VAR: &str = "SLURM_SPANK__SLURM_SPANK_OPTION_tf_cluster_tf_cluster";

/// Every option: the frameworks' (`--tf-cluster`, `--torch-cluster`,
/// `--jax-cluster`: val 0, 1, 2) first, then setting i (val 3 + i).
pub fn all() -> &'static [SpankOption] {
    static OPTIONS: OnceLock<Vec<SpankOption>> = OnceLock::new();
    OPTIONS.get_or_init(|| {
        // has_arg 2: the argument is optional (`--tf-cluster` alone = all workers).
        let frameworks = FRAMEWORKS.iter().zip(0..).map(|(f, val)| {
            let has_arg = if f.arg.is_some() { 2 } else { 0 };
            option(f.option.into(), f.arg.unwrap_or(""), f.help, val, has_arg)
        });
        let settings = SETTINGS
            .iter()
            .zip(FRAMEWORKS.len() as c_int..)
            .map(|(s, val)| option(format!("tf-{}", s.key), s.arg, s.help, val, 1));
        frameworks.chain(settings).collect()
    })
}

/// Each framework with its option.
pub fn frameworks() -> impl Iterator<Item = (&'static Framework, &'static SpankOption)> {
    FRAMEWORKS.iter().zip(&all()[..FRAMEWORKS.len()])
}

/// Each setting with its option.
pub fn settings() -> impl Iterator<Item = (&'static Setting, &'static SpankOption)> {
    SETTINGS.iter().zip(&all()[FRAMEWORKS.len()..])
}

/// What an option callback's `val` stands for.
pub enum Given {
    /// `--tf-cluster`'s role spec.
    Cluster,
    /// A flag with nothing to check.
    Framework,
    Setting(&'static Setting),
}

pub fn given(val: c_int) -> Option<Given> {
    match usize::try_from(val).ok()? {
        0 => Some(Given::Cluster),
        v if v < FRAMEWORKS.len() => Some(Given::Framework),
        v => SETTINGS.get(v - FRAMEWORKS.len()).map(Given::Setting),
    }
}

fn option(name: String, arg: &str, help: &str, val: c_int, has_arg: c_int) -> SpankOption {
    let leak = |s: String| -> *mut c_char {
        CString::new(s)
            .expect("options are declared without NUL bytes")
            .into_raw()
    };
    SpankOption(sys::spank_option {
        name: leak(name),
        arginfo: leak(arg.to_string()),
        usage: leak(format!("tf-cluster: {help}")),
        has_arg,
        val,
        cb: Some(super::callbacks::option_given),
    })
}
