//! Slurm's GPU binding of a step's tasks (SLURMD_TRES_BIND, srun's
//! --gpu-bind), parsed.

use crate::error::shown;

/// Slurm's GPU binding of a step's tasks, from SLURMD_TRES_BIND (set by
/// slurmstepd: `gpu:per_task:1` in 22.05, `gres/gpu:per_task:1` from 23.02
/// on) or srun's SLURM_TRES_BIND / SLURM_GPU_BIND (tres_bind.c grammar).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuBind {
    /// `none`: every task sees the step's GPUs of its node.
    None,
    /// `per_task:N` (`--gpus-per-task=N`): N GPUs of its own per task.
    PerTask(u32),
    /// `single:K` (`--ntasks-per-gpu=K`): K tasks share each GPU.
    Single(u32),
    /// `map_gpu:` / `map:`: local task k gets the GPU of entry k (cycling).
    Map(Vec<u64>),
    /// `mask_gpu:` / `mask:`: local task k gets the GPUs of mask k (cycling).
    Mask(Vec<u64>),
    /// `closest`: the GPUs nearest the task's CPUs; tasks may share them.
    Closest,
    /// Anything else this plugin does not know: taken as shared.
    Other(String),
}

/// Most entries of a map or mask the plugin expands (`0*100000` would
/// otherwise be a huge list).
const MAX_BIND_ENTRIES: usize = 4096;

impl GpuBind {
    /// The GPU part of a tres_bind string (`gres/gpu:verbose,single:1+…`),
    /// or None when it has none.
    pub fn parse(tres_bind: &str) -> Option<GpuBind> {
        let rest = tres_bind.split('+').find_map(|part| {
            part.strip_prefix("gres/gpu:")
                .or_else(|| part.strip_prefix("gpu:"))
        })?;
        Some(GpuBind::parse_gpu_bind(rest))
    }

    /// One `--gpu-bind` value (`closest`, `single:2`, `map_gpu:0,1`, …).
    pub fn parse_gpu_bind(value: &str) -> GpuBind {
        let rest = strip_prefix_ci(value, "verbose,").unwrap_or(value);
        let number = crate::number::parse_u32;
        if strip_prefix_ci(rest, "none").is_some() {
            GpuBind::None
        } else if strip_prefix_ci(rest, "closest").is_some() {
            GpuBind::Closest
        } else if let Some(n) = strip_prefix_ci(rest, "per_task:").and_then(number) {
            GpuBind::PerTask(n)
        } else if let Some(n) = strip_prefix_ci(rest, "single:").and_then(number) {
            GpuBind::Single(n)
        } else if let Some(list) =
            strip_prefix_ci(rest, "map_gpu:").or_else(|| strip_prefix_ci(rest, "map:"))
        {
            expand(list, false).map_or_else(|| GpuBind::Other(rest.into()), GpuBind::Map)
        } else if let Some(list) =
            strip_prefix_ci(rest, "mask_gpu:").or_else(|| strip_prefix_ci(rest, "mask:"))
        {
            expand(list, true).map_or_else(|| GpuBind::Other(rest.into()), GpuBind::Mask)
        } else {
            GpuBind::Other(rest.into())
        }
    }

    /// Slurm binds GPUs per task: each task's device list is its own part.
    pub fn per_task(&self) -> bool {
        !matches!(self, GpuBind::None)
    }

    /// No two of the first `local_tasks` tasks of a node share a GPU.
    pub fn exclusive(&self, local_tasks: u32) -> bool {
        let l = local_tasks as usize;
        match self {
            GpuBind::None => local_tasks <= 1,
            GpuBind::PerTask(n) => *n > 0,
            GpuBind::Single(k) => *k == 1 || local_tasks <= 1,
            GpuBind::Map(entries) => {
                l <= entries.len() && {
                    let mut first: Vec<u64> = entries[..l].to_vec();
                    first.sort_unstable();
                    first.windows(2).all(|w| w[0] != w[1])
                }
            }
            GpuBind::Mask(masks) => {
                l <= masks.len() && {
                    let mut seen = 0u64;
                    masks[..l].iter().all(|&m| {
                        let ok = m != 0 && seen & m == 0;
                        seen |= m;
                        ok
                    })
                }
            }
            GpuBind::Closest | GpuBind::Other(_) => local_tasks <= 1,
        }
    }
}

fn strip_prefix_ci<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let head = text.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &text[prefix.len()..])
}

/// A map (`0,1*2`) or mask (`0x3,c*2`) list with its `*N` repeats expanded.
fn expand(list: &str, hex: bool) -> Option<Vec<u64>> {
    let mut out = Vec::new();
    for tok in list.split(',') {
        let (value, times) = match tok.split_once('*') {
            Some((v, t)) => (v, crate::number::parse_u32(t)? as usize),
            None => (tok, 1),
        };
        let value = if hex {
            let v = value.strip_prefix("0x").unwrap_or(value);
            crate::number::parse_hex_u64(v)?
        } else {
            crate::number::parse_u64(value)?
        };
        if out.len() + times > MAX_BIND_ENTRIES {
            return None;
        }
        out.extend(std::iter::repeat_n(value, times));
    }
    Some(out)
}

pub(super) fn describe(bind: &GpuBind) -> String {
    match bind {
        GpuBind::None => "--gpu-bind=none".into(),
        GpuBind::PerTask(n) => format!("--gpus-per-task={n}"),
        GpuBind::Single(k) => format!("--gpu-bind=single:{k}"),
        GpuBind::Map(_) => "--gpu-bind=map_gpu".into(),
        GpuBind::Mask(_) => "--gpu-bind=mask_gpu".into(),
        GpuBind::Closest => "--gpu-bind=closest".into(),
        GpuBind::Other(text) => format!("--gpu-bind={}", shown(text)),
    }
}

/// The step's GPU binding as srun recorded it from slurmctld, in its word
/// (crate::handoff).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Recorded {
    /// srun had no record of the step.
    #[default]
    Unknown,
    /// The step binds no GPUs.
    None,
    /// The step's binding.
    Bound(GpuBind),
}

/// Which GPU binding a task believes, and whether a plugin before this one
/// moved it into other namespaces (`moved`, asked only when a binding
/// shows). On the host the task's own SLURMD_TRES_BIND (`in_task`) is
/// Slurm's. In a task a container plugin moved it may be the image's: srun's
/// `recorded` binding decides there (the task's variable only where srun had
/// no record), so an image binds nothing srun did not see, and hides no
/// binding it did.
pub fn believed(
    in_task: Option<GpuBind>,
    recorded: &Recorded,
    moved: impl FnOnce() -> bool,
) -> (Option<GpuBind>, bool) {
    if in_task.is_none() && !matches!(recorded, Recorded::Bound(_)) {
        return (None, false);
    }
    match moved() {
        false => (in_task, false),
        true => match recorded {
            Recorded::Unknown => (in_task, true),
            Recorded::None => (None, true),
            Recorded::Bound(bind) => (Some(bind.clone()), true),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Slurm's numbers are plain digits: a sign or space is no count.
    #[test]
    fn signed_numbers_are_not_slurms() {
        let p = GpuBind::parse_gpu_bind;
        assert_eq!(p("per_task:+1"), GpuBind::Other("per_task:+1".into()));
        assert_eq!(p("map_gpu:+1,0"), GpuBind::Other("map_gpu:+1,0".into()));
        assert_eq!(p("map_gpu:0*+2"), GpuBind::Other("map_gpu:0*+2".into()));
        assert_eq!(p("mask_gpu:0x+3"), GpuBind::Other("mask_gpu:0x+3".into()));
        assert_eq!(p("map_gpu:1*2"), GpuBind::Map(vec![1, 1]));
    }

    #[test]
    fn tres_bind_forms() {
        let p = |t: &str| GpuBind::parse(t).unwrap();
        assert_eq!(p("gpu:per_task:1"), GpuBind::PerTask(1)); // 22.05
        assert_eq!(p("gres/gpu:per_task:2"), GpuBind::PerTask(2)); // 24.11+
        assert_eq!(p("gres/gpu:verbose,single:1"), GpuBind::Single(1));
        assert_eq!(p("gres/gpu:none"), GpuBind::None);
        assert_eq!(p("gres/gpu:closest"), GpuBind::Closest);
        assert_eq!(
            p("gres/gpu:map_gpu:0,1*2,3"),
            GpuBind::Map(vec![0, 1, 1, 3])
        );
        assert_eq!(p("gres/gpu:map:1,0"), GpuBind::Map(vec![1, 0]));
        assert_eq!(p("gres/gpu:mask_gpu:0x3,c"), GpuBind::Mask(vec![3, 12]));
        assert_eq!(p("gres/gpu:mask:1*2"), GpuBind::Mask(vec![1, 1]));
        assert_eq!(p("gres/nic:none+gres/gpu:single:2"), GpuBind::Single(2));
        assert!(matches!(p("gres/gpu:bogus"), GpuBind::Other(_)));
        assert!(matches!(
            p("gres/gpu:map_gpu:0*99999999"),
            GpuBind::Other(_)
        ));
        assert_eq!(GpuBind::parse("gres/nic:none"), None);
        assert_eq!(GpuBind::parse(""), None);
    }

    #[test]
    fn which_bindings_are_exclusive() {
        let p = |t: &str| GpuBind::parse(t).unwrap();
        assert!(p("gres/gpu:per_task:1").exclusive(4));
        assert!(p("gres/gpu:single:1").exclusive(4));
        assert!(!p("gres/gpu:single:2").exclusive(2));
        assert!(p("gres/gpu:single:2").exclusive(1));
        assert!(p("gres/gpu:map_gpu:3,2,1,0").exclusive(4));
        assert!(!p("gres/gpu:map_gpu:0,0,1").exclusive(2));
        // Cycling: a fifth task takes entry 0 again.
        assert!(!p("gres/gpu:map_gpu:0,1,2,3").exclusive(5));
        assert!(p("gres/gpu:map_gpu:0,1,0").exclusive(2));
        assert!(p("gres/gpu:mask_gpu:0x3,0xc").exclusive(2));
        assert!(!p("gres/gpu:mask_gpu:0x3,0x6").exclusive(2));
        assert!(!p("gres/gpu:mask_gpu:0,1").exclusive(2));
        assert!(!p("gres/gpu:closest").exclusive(2));
        assert!(p("gres/gpu:closest").exclusive(1));
    }

    /// On the host the task's own binding is believed; in a moved task,
    /// srun's record (the task's only without one); nothing shows, nothing
    /// is asked.
    #[test]
    fn a_moved_task_believes_srun() {
        let own = Some(GpuBind::PerTask(1));
        let srun = Recorded::Bound(GpuBind::Single(2));
        let never = || -> bool { panic!("asked without a binding") };
        assert_eq!(believed(None, &Recorded::Unknown, never), (None, false));
        assert_eq!(believed(None, &Recorded::None, never), (None, false));
        assert_eq!(believed(own.clone(), &srun, || false), (own.clone(), false));
        assert_eq!(
            believed(own.clone(), &srun, || true),
            (Some(GpuBind::Single(2)), true)
        );
        assert_eq!(
            believed(None, &srun, || true),
            (Some(GpuBind::Single(2)), true)
        );
        assert_eq!(
            believed(own.clone(), &Recorded::None, || true),
            (None, true)
        );
        assert_eq!(
            believed(own.clone(), &Recorded::Unknown, || true),
            (own, true)
        );
    }
}
