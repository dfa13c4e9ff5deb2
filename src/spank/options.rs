//! The options the plugin adds to srun, sbatch and salloc, made from the
//! core's one table of settings (core::settings): `--tf-cluster` and one
//! `--tf-<key>` per setting. Slurm keeps pointers to the options, so they are
//! made once per process and never freed (a few hundred bytes).

use std::ffi::{CString, c_char, c_int};
use std::sync::OnceLock;

use super::bindings as sys;
use crate::core::settings::{CLUSTER, SETTINGS, Setting};

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

/// Every option: `--tf-cluster` (val 0) first, then setting i (val i + 1).
pub fn all() -> &'static [SpankOption] {
    static OPTIONS: OnceLock<Vec<SpankOption>> = OnceLock::new();
    OPTIONS.get_or_init(|| {
        // has_arg 2: the argument is optional (`--tf-cluster` alone = all workers).
        std::iter::once(option(&CLUSTER, 0, 2))
            .chain(SETTINGS.iter().zip(1..).map(|(s, val)| option(s, val, 1)))
            .collect()
    })
}

/// `--tf-cluster`.
pub fn cluster() -> &'static SpankOption {
    &all()[0]
}

/// Each setting with its option.
pub fn settings() -> impl Iterator<Item = (&'static Setting, &'static SpankOption)> {
    SETTINGS.iter().zip(&all()[1..])
}

/// The setting an option callback's `val` stands for; None for `--tf-cluster`.
pub fn setting_of(val: c_int) -> Option<&'static Setting> {
    SETTINGS.get(usize::try_from(val).ok()?.checked_sub(1)?)
}

fn option(setting: &Setting, val: c_int, has_arg: c_int) -> SpankOption {
    let leak = |s: String| -> *mut c_char {
        CString::new(s)
            .expect("settings are declared without NUL bytes")
            .into_raw()
    };
    SpankOption(sys::spank_option {
        name: leak(format!("tf-{}", setting.key)),
        arginfo: leak(setting.arg.to_string()),
        usage: leak(format!("tf-cluster: {}", setting.help)),
        has_arg,
        val,
        cb: Some(super::callbacks::option_given),
    })
}
