//! Deliberate faults, to prove the plugin's handling of them on a real Slurm
//! (feature `fault-injection`, built only for the tests). With
//! `TF_CLUSTER_FAULT=<name>` in srun's or the task's environment, hook
//! `<name>` panics, and the named fault points ([`active`]) fire. Without
//! the feature both are empty functions.

use super::handle::Spank;

#[cfg(feature = "fault-injection")]
pub fn active(name: &str, spank: Option<&Spank>) -> bool {
    const VAR: &str = "TF_CLUSTER_FAULT";
    let wanted = match spank {
        Some(s) if s.remote() => s.getenv(VAR).ok().flatten(),
        _ => std::env::var(VAR).ok(),
    };
    wanted.as_deref() == Some(name)
}

#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub fn active(_name: &str, _spank: Option<&Spank>) -> bool {
    false
}

pub fn inject(hook: &str, spank: Option<&Spank>) {
    if active(hook, spank) {
        panic!("fault injected in {hook}");
    }
}

/// In a hook's whole call (super::guard::whole), before the side's body:
/// `TF_CLUSTER_FAULT=whole_<hook>` panics there, outside every part's
/// guard.
pub fn inject_whole(hook: &str, spank: &Spank) {
    if cfg!(feature = "fault-injection") && active(&format!("whole_{hook}"), Some(spank)) {
        panic!("fault injected in the whole {hook} hook");
    }
}
