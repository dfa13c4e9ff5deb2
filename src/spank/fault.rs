//! Deliberate panics, to prove the panic guard of every hook on a real Slurm
//! (feature `fault-injection`, built only for the tests). With
//! `TF_CLUSTER_FAULT=<hook>` in srun's or the task's environment, that hook
//! panics. Without the feature this is an empty function.

use super::handle::Spank;

#[cfg(feature = "fault-injection")]
pub fn inject(hook: &str, spank: Option<&Spank>) {
    const VAR: &str = "TF_CLUSTER_FAULT";
    let wanted = match spank {
        Some(s) if s.remote() => s.getenv(VAR).ok().flatten(),
        _ => std::env::var(VAR).ok(),
    };
    if wanted.as_deref() == Some(hook) {
        panic!("fault injected in {hook}");
    }
}

#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub fn inject(_hook: &str, _spank: Option<&Spank>) {}
