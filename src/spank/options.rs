//! The options the plugin adds to srun, sbatch and salloc: `--tf-cluster`
//! and one `--tf-<key>` per setting. Slurm keeps pointers to the table, so it
//! is a static; Slurm only reads it.

use std::cell::UnsafeCell;
use std::ffi::{c_char, c_int};

use super::bindings as sys;
use crate::core::settings::{CLUSTER_OPTION, KNOBS, Knob};

pub struct SpankOption(UnsafeCell<sys::spank_option>);

// SAFETY: neither Slurm nor this plugin ever writes to the table.
unsafe impl Sync for SpankOption {}

impl SpankOption {
    pub fn as_ptr(&self) -> *mut sys::spank_option {
        self.0.get()
    }
}

/// `val` of the role spec option; knob i has `val` i + 1.
const CLUSTER_VAL: c_int = 0;

const fn option(knob: &Knob, val: c_int, has_arg: c_int) -> SpankOption {
    SpankOption(UnsafeCell::new(sys::spank_option {
        name: knob.option.as_ptr() as *mut c_char,
        arginfo: knob.arg.as_ptr() as *mut c_char,
        usage: knob.help.as_ptr() as *mut c_char,
        has_arg,
        val,
        cb: Some(super::callbacks::option_given),
    }))
}

/// How sbatch/salloc hand `--tf-cluster` to the job's steps: srun reads it
/// before its own command line.
pub const INHERITED_VAR: &str = "SLURM_SPANK__SLURM_SPANK_OPTION_tf_cluster_tf_cluster";

/// has_arg 2: the argument is optional (`--tf-cluster` alone = all workers).
pub static CLUSTER: SpankOption = option(&CLUSTER_OPTION, CLUSTER_VAL, 2);

pub static SETTINGS: [SpankOption; KNOBS.len()] = {
    let mut i = 0;
    // A const loop, as iterators are not const.
    let mut table = [const { option(&CLUSTER_OPTION, 0, 0) }; KNOBS.len()];
    while i < KNOBS.len() {
        table[i] = option(&KNOBS[i], i as c_int + 1, 1);
        i += 1;
    }
    table
};

/// The knob an option callback's `val` stands for; None for `--tf-cluster`.
pub fn knob_of(val: c_int) -> Option<&'static Knob> {
    KNOBS.get(usize::try_from(val).ok()?.checked_sub(1)?)
}
