//! CUDA_VISIBLE_DEVICES per task: local task k gets the k-th slice of the
//! node's GPUs, using Slurm's own tokens (`4,5,6,7` → `4,5` | `6,7`), never
//! ordinals in their place.

use super::error::{Result, bail, shown};
use super::settings::Settings;

/// How the GPUs of a node are shared among its tasks. `per_task == 0` means
/// CPU-only: CUDA_VISIBLE_DEVICES stays as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuPlan {
    tokens: Vec<String>,
    per_task: usize,
}

impl GpuPlan {
    /// A plan that leaves CUDA_VISIBLE_DEVICES alone.
    pub fn untouched() -> GpuPlan {
        GpuPlan {
            tokens: Vec::new(),
            per_task: 0,
        }
    }

    /// `visible`: Slurm's CUDA_VISIBLE_DEVICES; `probed`: the node's GPU count
    /// when that is unset and no count was configured; `max_local_tasks`: the
    /// most tasks of the step on one node (TensorFlow's rule for the default).
    pub fn new(
        settings: &Settings,
        visible: Option<&str>,
        probed: Option<u32>,
        max_local_tasks: u32,
    ) -> Result<GpuPlan> {
        let given = parse_tokens(visible.unwrap_or(""))?;
        let tokens: Vec<String> = match (settings.gpus_per_node, visible) {
            (Some(n), _) if !given.is_empty() => {
                if n as usize > given.len() {
                    bail!(
                        "gpus-per-node is {n} but Slurm gave this step {} GPU(s) on this node (CUDA_VISIBLE_DEVICES={})",
                        given.len(),
                        visible.unwrap_or_default()
                    );
                }
                given[..n as usize].iter().map(|t| t.to_string()).collect()
            }
            (Some(n), _) => (0..n).map(|i| i.to_string()).collect(),
            (None, Some(_)) => given.iter().map(|t| t.to_string()).collect(),
            (None, None) => (0..probed.unwrap_or(0)).map(|i| i.to_string()).collect(),
        };
        let per_task = match settings.gpus_per_task {
            Some(n) => n as usize,
            None => tokens.len() / max_local_tasks.max(1) as usize,
        };
        if per_task * max_local_tasks as usize > tokens.len() {
            bail!(
                "{per_task} GPU(s) per task × {max_local_tasks} task(s) on a node needs {} GPUs, but the node has {}",
                per_task * max_local_tasks as usize,
                tokens.len()
            );
        }
        Ok(GpuPlan { tokens, per_task })
    }

    /// The CUDA_VISIBLE_DEVICES of local task `local`, or None to leave it.
    pub fn for_local(&self, local: u32) -> Option<String> {
        if self.per_task == 0 {
            return None;
        }
        let first = local as usize * self.per_task;
        Some(self.tokens[first..first + self.per_task].join(","))
    }
}

/// Whether the node's GPUs must be counted: only when GPUs are to be set and
/// neither Slurm nor the settings say how many there are.
pub fn needs_probe(settings: &Settings, visible: Option<&str>, bound_by_slurm: bool) -> bool {
    settings.auto_set_gpu
        && !bound_by_slurm
        && settings.gpus_per_node.is_none()
        && visible.is_none()
}

/// `0,1` / `GPU-8e2c…` / `MIG-…/1/0`; empty means no GPUs.
fn parse_tokens(list: &str) -> Result<Vec<&str>> {
    if list.is_empty() {
        return Ok(Vec::new());
    }
    let tokens: Vec<&str> = list.split(',').collect();
    for t in &tokens {
        let ok = !t.is_empty()
            && t.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '/' | ':' | '.'));
        if !ok {
            bail!(
                "bad CUDA_VISIBLE_DEVICES {}: {} is not a GPU id",
                shown(list),
                shown(t)
            );
        }
    }
    Ok(tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(per_node: Option<u32>, per_task: Option<u32>) -> Settings {
        Settings {
            gpus_per_node: per_node,
            gpus_per_task: per_task,
            ..Settings::default()
        }
    }

    fn slices(plan: &GpuPlan, tasks: u32) -> Vec<Option<String>> {
        (0..tasks).map(|k| plan.for_local(k)).collect()
    }

    #[test]
    fn slices_slurms_own_tokens() {
        let plan = GpuPlan::new(&settings(None, None), Some("4,5,6,7"), None, 2).unwrap();
        assert_eq!(slices(&plan, 2), [Some("4,5".into()), Some("6,7".into())]);
        let plan = GpuPlan::new(&settings(None, None), Some("2,3"), None, 2).unwrap();
        assert_eq!(slices(&plan, 2), [Some("2".into()), Some("3".into())]);
    }

    #[test]
    fn configured_counts() {
        // TF's test: 2 GPUs per node, 1 per task, no list from Slurm.
        let plan = GpuPlan::new(&settings(Some(2), Some(1)), Some(""), None, 2).unwrap();
        assert_eq!(slices(&plan, 2), [Some("0".into()), Some("1".into())]);
        // 4 per node, 2 per task.
        let plan = GpuPlan::new(&settings(Some(4), Some(2)), None, None, 2).unwrap();
        assert_eq!(slices(&plan, 2), [Some("0,1".into()), Some("2,3".into())]);
        // Fewer than Slurm gave: the first ones.
        let plan = GpuPlan::new(&settings(Some(2), None), Some("6,7,8"), None, 1).unwrap();
        assert_eq!(slices(&plan, 1), [Some("6,7".into())]);
    }

    #[test]
    fn cpu_only_leaves_the_variable_alone() {
        for (per_node, visible, probed, tasks) in [
            (Some(0), None, None, 2),
            (Some(1), None, None, 2),
            (None, Some(""), None, 1),
            (None, None, Some(0), 4),
            (None, None, None, 4),
        ] {
            let plan = GpuPlan::new(&settings(per_node, None), visible, probed, tasks).unwrap();
            assert_eq!(plan.for_local(0), None, "{per_node:?} {visible:?}");
        }
    }

    #[test]
    fn probed_count_gives_ordinals() {
        let plan = GpuPlan::new(&settings(None, None), None, Some(8), 4).unwrap();
        assert_eq!(plan.for_local(1), Some("2,3".into()));
    }

    #[test]
    fn too_many_gpus_is_an_error() {
        let e = GpuPlan::new(&settings(Some(4), Some(4)), None, None, 2)
            .unwrap_err()
            .to_string();
        assert!(e.contains("needs 8 GPUs, but the node has 4"), "{e}");
        let e = GpuPlan::new(&settings(Some(4), None), Some("0,1"), None, 1)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("gpus-per-node is 4 but Slurm gave this step 2"),
            "{e}"
        );
        let e = GpuPlan::new(&settings(None, Some(1)), Some(""), None, 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("the node has 0"), "{e}");
    }

    #[test]
    fn garbage_lists_are_refused() {
        for bad in ["0,,1", ",", "0 1", "0;rm", "é"] {
            let e = GpuPlan::new(&settings(None, None), Some(bad), None, 1)
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("bad CUDA_VISIBLE_DEVICES"), "{bad}: {e}");
        }
    }

    #[test]
    fn probe_only_when_nothing_else_says() {
        let s = Settings::default();
        assert!(needs_probe(&s, None, false));
        assert!(!needs_probe(&s, Some("0"), false));
        assert!(!needs_probe(&s, None, true));
        assert!(!needs_probe(&settings(Some(2), None), None, false));
        let off = Settings {
            auto_set_gpu: false,
            ..Settings::default()
        };
        assert!(!needs_probe(&off, None, false));
    }
}
