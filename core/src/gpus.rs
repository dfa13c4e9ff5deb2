//! CUDA_VISIBLE_DEVICES per task: local task k gets the k-th slice of the
//! node's GPUs, using Slurm's own tokens (`4,5,6,7` → `4,5` | `6,7`), never
//! ordinals in their place.

use super::error::{Result, bail, shown};
use super::settings::Settings;
use std::fmt::Write;

/// Most GPUs a node, a task or Slurm's list may name: far above any real
/// node, low enough that no count a user gives makes the task build a huge
/// list before its limits apply.
pub const MAX_GPUS: u32 = 1024;

/// How the GPUs of a node are shared among its tasks. `per_task == 0` means
/// CPU-only: CUDA_VISIBLE_DEVICES stays as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuPlan {
    /// The node's GPU tokens joined by commas (one string, not one per GPU),
    list: String,
    /// and how many there are.
    count: usize,
    per_task: usize,
}

impl GpuPlan {
    /// A plan that leaves CUDA_VISIBLE_DEVICES alone.
    pub fn untouched() -> GpuPlan {
        GpuPlan {
            list: String::new(),
            count: 0,
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
        let given = visible.unwrap_or("");
        let given_count = count_tokens(given)?;
        let mut plan = GpuPlan::untouched();
        match (settings.gpus_per_node, visible) {
            (Some(n), _) if given_count > 0 => {
                if n as usize > given_count {
                    bail!(
                        "gpus-per-node is {n} but Slurm gave this step {} GPU(s) on this node (CUDA_VISIBLE_DEVICES={})",
                        given_count,
                        visible.unwrap_or_default()
                    );
                }
                // The first n tokens joined by commas: the list up to its n-th comma.
                let end = token_end(given, given_count, n as usize);
                plan.list = given[..end].to_string();
                plan.count = n as usize;
            }
            (Some(n), _) => plan.ordinals(n),
            (None, Some(_)) => {
                plan.list = given.to_string();
                plan.count = given_count;
            }
            (None, None) => plan.ordinals(probed.unwrap_or(0)),
        }
        let tokens = plan.count;
        plan.per_task = match settings.gpus_per_task {
            Some(n) => n as usize,
            None => tokens / max_local_tasks.max(1) as usize,
        };
        let per_task = plan.per_task;
        if per_task * max_local_tasks as usize > tokens {
            bail!(
                "{per_task} GPU(s) per task × {max_local_tasks} task(s) on a node needs {} GPUs, but the node has {}",
                per_task * max_local_tasks as usize,
                tokens
            );
        }
        Ok(plan)
    }

    /// Tokens `0`, `1`, … `n-1`.
    fn ordinals(&mut self, n: u32) {
        for i in 0..n {
            if i > 0 {
                self.list.push(',');
            }
            let _ = write!(self.list, "{i}");
        }
        self.count = n as usize;
    }

    /// The node's GPUs for every local task (PyTorch's rule), or None to
    /// leave CUDA_VISIBLE_DEVICES.
    pub fn whole(&self) -> Option<String> {
        (self.per_task > 0).then(|| self.list.clone())
    }

    /// The GPUs of local task `local` as JAX numbers the visible ones: from 0
    /// when the task sees its slice only, at the slice's place when it sees
    /// the whole node (`whole`).
    pub fn device_ids(&self, local: u32, whole: bool) -> Option<String> {
        if self.per_task == 0 {
            return None;
        }
        let first = if whole {
            local as usize * self.per_task
        } else {
            0
        };
        let ids: Vec<String> = (first..first + self.per_task)
            .map(|i| i.to_string())
            .collect();
        Some(ids.join(","))
    }

    /// The CUDA_VISIBLE_DEVICES of local task `local`, or None to leave it.
    pub fn for_local(&self, local: u32) -> Option<String> {
        if self.per_task == 0 {
            return None;
        }
        // The tokens of one task are consecutive: their part of the list is
        // them joined by commas.
        let first = local as usize * self.per_task;
        let last = first + self.per_task;
        assert!(last <= self.count, "local task {local} has no GPUs");
        let start = if first == 0 {
            0
        } else {
            token_end(&self.list, self.count, first) + 1
        };
        let end = token_end(&self.list, self.count, last);
        Some(self.list[start..end].to_string())
    }
}

/// Where the first `n` of the `count` tokens of `list` end.
fn token_end(list: &str, count: usize, n: usize) -> usize {
    if n == 0 {
        return 0;
    }
    if n == count {
        return list.len();
    }
    let commas = list.bytes().enumerate().filter(|&(_, b)| b == b',');
    commas.map(|(i, _)| i).nth(n - 1).unwrap_or(list.len())
}

/// Whether the node's GPUs must be counted: only when GPUs are to be set and
/// neither Slurm nor the settings say how many there are.
pub fn needs_probe(settings: &Settings, visible: Option<&str>, bound_by_slurm: bool) -> bool {
    settings.auto_set_gpu
        && !bound_by_slurm
        && settings.gpus_per_node.is_none()
        && visible.is_none()
}

/// Checks `0,1` / `GPU-8e2c…` / `MIG-…/1/0` and counts its tokens; empty
/// means no GPUs.
fn count_tokens(list: &str) -> Result<usize> {
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
            bail!(
                "bad CUDA_VISIBLE_DEVICES {}: {} is not a GPU id",
                shown(list),
                shown(t)
            );
        }
        count += 1;
        if count > MAX_GPUS as usize {
            bail!("CUDA_VISIBLE_DEVICES lists more than {MAX_GPUS} GPUs");
        }
    }
    Ok(count)
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
    fn zero_gpus_per_node_with_a_list_from_slurm() {
        // `--tf-gpus-per-node=0 --gres=gpu:4`: nothing to share, no wrap-around.
        let plan = GpuPlan::new(&settings(Some(0), None), Some("0,1,2,3"), None, 2).unwrap();
        assert_eq!(slices(&plan, 2), [None, None]);
    }

    #[test]
    fn long_lists_are_refused() {
        let list = vec!["0"; MAX_GPUS as usize + 1].join(",");
        let e = GpuPlan::new(&settings(None, None), Some(&list), None, 1).unwrap_err();
        assert!(e.to_string().contains("more than 1024 GPUs"), "{e}");
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
