//! The device variables Slurm's gres/gpu plugin sets to a task's list, and
//! the checks of one list's tokens.

use crate::error::{Result, bail, shown};

pub use crate::limits::MAX_GPUS;

/// The variables Slurm's gres/gpu plugin sets to a task's device list
/// (gres_common.c, `gres_common_gpu_set_env`, 22.05 to 26.05): by gres.conf
/// `Flags=nvidia_gpu_env`, `amd_gpu_env`, `intel_gpu_env`, `opencl_env`, all
/// four without Flags. The plugin slices and binds each one it finds.
pub const DEVICE_VARS: [&str; 4] = [
    "CUDA_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "ZE_AFFINITY_MASK",
    "GPU_DEVICE_ORDINAL",
];

/// The device lists Slurm gave one task: each variable of [`DEVICE_VARS`]
/// that is set, with its value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Visible {
    pub(super) lists: Vec<(&'static str, String)>,
}

impl Visible {
    /// From a lookup of the task's variables.
    pub fn read<E>(
        mut var: impl FnMut(&str) -> std::result::Result<Option<String>, E>,
    ) -> std::result::Result<Visible, E> {
        let mut lists = Vec::new();
        for name in DEVICE_VARS {
            if let Some(value) = var(name)? {
                lists.push((name, value));
            }
        }
        Ok(Visible { lists })
    }

    /// From (name, value) pairs; names outside [`DEVICE_VARS`] are ignored.
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Visible {
        let mut lists = Vec::new();
        for (name, value) in pairs {
            if let Some(&known) = DEVICE_VARS.iter().find(|&&v| v == name) {
                lists.push((known, value.to_string()));
            }
        }
        Visible { lists }
    }

    /// No device variable is set at all.
    pub fn is_unset(&self) -> bool {
        self.lists.is_empty()
    }

    /// The value of `name`, if set.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.lists
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// How many GPUs the lists name: every list checked, and all must name
    /// as many (Slurm writes one list into each).
    pub fn count(&self) -> Result<usize> {
        let mut count: Option<(&str, usize)> = None;
        for (name, list) in &self.lists {
            let n = count_tokens(name, list)?;
            match count {
                Some((first, m)) if m != n => bail!(
                    "{first} names {m} GPU(s) but {name} names {n}: the device variables disagree, so no GPU choice is safe (unset the one not from Slurm, or use --tf-auto-set-gpu=false)"
                ),
                Some(_) => {}
                None => count = Some((name, n)),
            }
        }
        Ok(count.map_or(0, |(_, n)| n))
    }
}

/// Where the first `n` of the `count` tokens of `list` end.
pub(super) fn token_end(list: &str, count: usize, n: usize) -> usize {
    if n == 0 {
        return 0;
    }
    if n == count {
        return list.len();
    }
    let commas = list.bytes().enumerate().filter(|&(_, b)| b == b',');
    commas.map(|(i, _)| i).nth(n - 1).unwrap_or(list.len())
}

/// Checks `0,1` / `GPU-8e2c…` / `MIG-…/1/0` (the list of variable `name`)
/// and counts its tokens; empty means no GPUs.
pub(super) fn count_tokens(name: &str, list: &str) -> Result<usize> {
    if list.is_empty() {
        return Ok(0);
    }
    let mut count = 0;
    for t in list.split(',') {
        let ok = !t.is_empty()
            && t.bytes().all(|c| {
                c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'/' | b':' | b'.')
            });
        if !ok {
            bail!("bad {name} {}: {} is not a GPU id", shown(list), shown(t));
        }
        count += 1;
        if count > MAX_GPUS as usize {
            bail!("{name} lists more than {MAX_GPUS} GPUs");
        }
    }
    Ok(count)
}
