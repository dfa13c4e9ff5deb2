//! One node's GPU plan: which device list each local task gets, by the
//! step's frameworks' rules (see the module above for the rules).

use std::fmt::Write;

use super::bind::GpuBind;
use super::devices::{DEVICE_VARS, Visible, token_end};
use super::refusals::{jax_shared, oversubscribed, torch_bound};
use super::rules::Rules;
use crate::error::{Result, bail};
use crate::settings::Settings;

/// How the plan hands GPUs to the node's tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Leave every device variable as Slurm set it; no JAX ids.
    Leave,
    /// Slurm's exclusive per-task binding kept; JAX numbers the task's `m`.
    Bound(usize),
    /// Local task k gets the k-th slice.
    Slice,
    /// Every local task gets the whole list (PyTorch).
    Whole,
}

/// What one node's tasks get: the device lists (each vendor variable in its
/// own tokens) and the rule sharing them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuPlan {
    /// The lists to share, in [`DEVICE_VARS`] order, each cut to the GPUs
    /// the plan uses.
    lists: Vec<(&'static str, String)>,
    /// How many GPUs each list names.
    count: usize,
    /// The width of one task's slice.
    per_task: usize,
    mode: Mode,
    /// Whether the tasks are told their own devices (JAX_LOCAL_DEVICE_IDS).
    own_ids: bool,
    /// The local tasks the GPUs are shared among.
    tasks: usize,
}

/// What a node says about its GPUs, for [`GpuPlan::new`].
#[derive(Debug, Clone, Copy)]
pub struct NodeGpus<'a> {
    /// The device variables of the task, as Slurm set them.
    pub visible: &'a Visible,
    /// SLURMD_TRES_BIND, parsed (None: unset, or no GPU part).
    pub bind: Option<&'a GpuBind>,
    /// The node's GPU count when no variable is set and no count was
    /// configured (crate::step::needs_probe).
    pub probed: Option<u32>,
    /// The most tasks of the step on one node, the same on every node (srun's
    /// map, or SLURM_STEP_TASKS_PER_NODE): TensorFlow's slice width, and the
    /// tasks a GPU binding must keep apart, so that every node decides alike.
    pub local_tasks: u32,
    /// The tasks of the step on this node (SLURM_GTIDS): PyTorch's and JAX's
    /// rules share this node's GPUs among them.
    pub node_tasks: u32,
    /// SLURM_GPUS_ON_NODE: how many GPUs Slurm gave the step on this node.
    pub gpus_on_node: Option<u32>,
}

impl GpuPlan {
    /// A plan that leaves every device variable alone.
    pub fn untouched() -> GpuPlan {
        GpuPlan {
            lists: Vec::new(),
            count: 0,
            per_task: 0,
            mode: Mode::Leave,
            own_ids: false,
            tasks: 1,
        }
    }

    /// The plan for `frameworks` on a node: Err refuses the task with one
    /// line naming what to use instead.
    pub fn new(settings: &Settings, rules: Rules, node: NodeGpus) -> Result<GpuPlan> {
        let mut plan = GpuPlan::untouched();
        if !settings.auto_set_gpu {
            return Ok(plan);
        }
        plan.own_ids = rules.own_ids.is_some();
        let given_count = node.visible.count()?;
        let tasks = if rules.one_each() {
            node.node_tasks
        } else {
            node.local_tasks
        }
        .max(1);
        plan.tasks = tasks as usize;
        if plan.keep_binding(rules, &node, given_count, tasks)? {
            return Ok(plan);
        }
        plan.take_lists(settings, &node, given_count)?;
        plan.share(settings, rules, tasks)?;
        Ok(plan)
    }

    /// Slurm's own GPU binding, when it decides the plan: true when it did
    /// (the plan then leaves the lists, or keeps an exclusive binding).
    fn keep_binding(
        &mut self,
        rules: Rules,
        node: &NodeGpus,
        given_count: usize,
        tasks: u32,
    ) -> Result<bool> {
        // Whether Slurm's binding keeps tasks apart is checked for the
        // fullest node's tasks, on every node alike. The counts below stay
        // this node's: its GPUs may be fewer than the fullest node's
        // (`-N2 -n4 --gpus=4` gives 3 + 1), and a node that refuses ends the
        // step everywhere (src/spank/slurmctld/step_kill.rs).
        let fullest = node.local_tasks.max(tasks);
        if no_list_under_bind_none(rules, node, given_count)? {
            *self = GpuPlan::untouched();
            return Ok(true);
        }
        let Some(bind) = node.bind.filter(|b| b.per_task()) else {
            return Ok(false);
        };
        if given_count == 0 {
            // Bound but no list (gres.conf no_gpu_env): nothing to keep.
            *self = GpuPlan::untouched();
            return Ok(true);
        }
        if let Some(option) = rules.whole {
            bail!("{}", torch_bound(option, bind));
        }
        if let Some(option) = rules.own_ids {
            if !bind.exclusive(fullest) {
                bail!("{}", jax_shared(option, bind, fullest));
            }
            self.mode = Mode::Bound(given_count);
        }
        Ok(true)
    }

    /// The lists to share: Slurm's (cut to `gpus-per-node`), or ordinals
    /// for a count the settings or the node's probe give.
    fn take_lists(
        &mut self,
        settings: &Settings,
        node: &NodeGpus,
        given_count: usize,
    ) -> Result<()> {
        match (settings.gpus_per_node, node.visible.is_unset()) {
            (Some(n), _) if given_count > 0 => {
                if n as usize > given_count {
                    bail!(
                        "gpus-per-node is {n} but Slurm gave this step {given_count} GPU(s) on this node ({})",
                        node.visible
                            .lists
                            .iter()
                            .map(|(k, v)| format!("{k}={v}"))
                            .next()
                            .unwrap_or_default()
                    );
                }
                // The first n tokens of each list: up to its n-th comma.
                for (name, list) in &node.visible.lists {
                    let end = token_end(list, given_count, n as usize);
                    self.lists.push((name, list[..end].to_string()));
                }
                self.count = n as usize;
            }
            (Some(n), _) => self.ordinals(n),
            (None, false) => {
                self.lists = node.visible.lists.clone();
                self.count = given_count;
            }
            (None, true) => self.ordinals(node.probed.unwrap_or(0)),
        }
        Ok(())
    }

    /// How the lists are shared among `tasks` local tasks: each task's
    /// width and the mode, or a refusal when they do not go round.
    fn share(&mut self, settings: &Settings, rules: Rules, tasks: u32) -> Result<()> {
        let n = self.count;
        if rules.one_each() && n > 0 && tasks as usize > n {
            bail!("{}", oversubscribed(rules, tasks, n));
        }
        self.per_task = match settings.gpus_per_task {
            Some(s) => s as usize,
            None => n / tasks as usize,
        };
        if self.per_task * tasks as usize > n {
            bail!(
                "{} GPU(s) per task × {tasks} task(s) on a node needs {} GPUs, but the node has {n}",
                self.per_task,
                self.per_task * tasks as usize,
            );
        }
        self.mode = match (self.per_task, rules.whole.is_some()) {
            (0, _) => Mode::Leave,
            (_, true) => Mode::Whole,
            (_, false) => Mode::Slice,
        };
        Ok(())
    }

    /// Tokens `0`, `1`, … `n-1` in CUDA_VISIBLE_DEVICES (the HIP runtime
    /// reads it too).
    fn ordinals(&mut self, n: u32) {
        let mut list = String::new();
        for i in 0..n {
            if i > 0 {
                list.push(',');
            }
            let _ = write!(list, "{i}");
        }
        self.lists = vec![(DEVICE_VARS[0], list)];
        self.count = n as usize;
    }

    /// The device variables of local task `local` (empty: leave them all).
    pub fn task_vars(&self, local: u32) -> Vec<(&'static str, String)> {
        match self.mode {
            Mode::Leave | Mode::Bound(_) => Vec::new(),
            Mode::Whole => self.lists.clone(),
            Mode::Slice => self
                .lists
                .iter()
                .map(|(name, list)| (*name, self.slice(list, local)))
                .collect(),
        }
    }

    /// The first device variable of local task `local` (for `explain`).
    pub fn for_local(&self, local: u32) -> Option<String> {
        self.task_vars(local).into_iter().next().map(|(_, v)| v)
    }

    /// JAX_LOCAL_DEVICE_IDS of local task `local`: JAX numbers the GPUs the
    /// task sees from 0, so its own slice is 0..s-1 when it sees only that
    /// slice. When it sees the whole node (with PyTorch), local task k takes
    /// k, k+L, k+2L, … (L local tasks): its PyTorch GPU (the k-th) is among
    /// its JAX devices, and no two tasks share one.
    pub fn jax_ids(&self, local: u32) -> Option<String> {
        if !self.own_ids {
            return None;
        }
        let ids = match self.mode {
            Mode::Leave => return None,
            Mode::Bound(m) => 0..m,
            Mode::Slice => 0..self.per_task,
            Mode::Whole => {
                let ids: Vec<String> = (0..self.per_task)
                    .map(|j| (local as usize + j * self.tasks).to_string())
                    .collect();
                return Some(ids.join(","));
            }
        };
        let ids: Vec<String> = ids.map(|i| i.to_string()).collect();
        Some(ids.join(","))
    }

    /// The tokens of local task `local` in `list`: consecutive, so their
    /// part of the list is them joined by commas.
    fn slice(&self, list: &str, local: u32) -> String {
        let first = local as usize * self.per_task;
        let last = first + self.per_task;
        assert!(last <= self.count, "local task {local} has no GPUs");
        let start = if first == 0 {
            0
        } else {
            token_end(list, self.count, first) + 1
        };
        let end = token_end(list, self.count, last);
        list[start..end].to_string()
    }
}

/// Slurm 22.05 sets no device list at all under --gpu-bind=none, though the
/// step has GPUs on the node: true when so (the lists are left alone),
/// refused where every rank takes a GPU of its own.
fn no_list_under_bind_none(rules: Rules, node: &NodeGpus, given_count: usize) -> Result<bool> {
    let no_list = node.bind == Some(&GpuBind::None)
        && given_count == 0
        && node.gpus_on_node.is_some_and(|n| n > 0);
    if !no_list {
        return Ok(false);
    }
    if rules.one_each() {
        bail!(
            "--gpu-bind=none: Slurm gave this task's node {} GPU(s) but no CUDA_VISIBLE_DEVICES (Slurm 22.05 does so), so no GPU can be chosen; leave out --gpu-bind=none",
            node.gpus_on_node.unwrap_or_default()
        );
    }
    Ok(true)
}
