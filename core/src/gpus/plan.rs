//! One node's GPU plan: which device list each local task gets, by the
//! step's frameworks' rules (see the module above for the rules).

use std::fmt::Write;

use super::bind::{GpuBind, describe};
use super::devices::{DEVICE_VARS, Visible, token_end};
use crate::error::{Result, bail};
use crate::settings::Settings;

/// What the step's frameworks ask of the GPUs, from each one's rule
/// (crate::frameworks::GpuRule), with the option that asked, for messages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rules {
    /// A framework's tasks see the whole node and pick their GPU by local
    /// rank (PyTorch's `set_device(LOCAL_RANK)`).
    pub whole: Option<&'static str>,
    /// A framework's tasks are told which GPUs they see are their own
    /// (JAX_LOCAL_DEVICE_IDS).
    pub own_ids: Option<&'static str>,
}

impl Rules {
    /// Every rank takes GPUs of its own (PyTorch's and JAX's common programs).
    pub(super) fn one_each(&self) -> bool {
        self.whole.is_some() || self.own_ids.is_some()
    }

    /// The options that asked for a GPU per rank, e.g. `--torch-cluster`.
    pub(super) fn who(&self) -> String {
        let options: Vec<String> = [self.whole, self.own_ids]
            .into_iter()
            .flatten()
            .map(|o| format!("--{o}"))
            .collect();
        options.join(" ")
    }
}

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
    /// configured ([`needs_probe`]).
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
        let one_each = rules.one_each();
        let tasks = if one_each {
            node.node_tasks
        } else {
            node.local_tasks
        }
        .max(1);
        plan.tasks = tasks as usize;
        // Whether Slurm's binding keeps tasks apart is checked for the
        // fullest node's tasks, on every node alike. The counts below stay
        // this node's: its GPUs may be fewer than the fullest node's
        // (`-N2 -n4 --gpus=4` gives 3 + 1), and a node that refuses ends the
        // step everywhere (src/spank/step_kill_rpc.rs).
        let fullest = node.local_tasks.max(tasks);
        if node.bind == Some(&GpuBind::None)
            && given_count == 0
            && node.gpus_on_node.is_some_and(|n| n > 0)
        {
            // Slurm 22.05 sets no device list at all under --gpu-bind=none,
            // though the step has GPUs on the node.
            if one_each {
                bail!(
                    "--gpu-bind=none: Slurm gave this task's node {} GPU(s) but no CUDA_VISIBLE_DEVICES (Slurm 22.05 does so), so no GPU can be chosen; leave out --gpu-bind=none",
                    node.gpus_on_node.unwrap_or_default()
                );
            }
            return Ok(GpuPlan::untouched());
        }
        if let Some(bind) = node.bind.filter(|b| b.per_task()) {
            if given_count == 0 {
                // Bound but no list (gres.conf no_gpu_env): nothing to keep.
                return Ok(GpuPlan::untouched());
            }
            if let Some(option) = rules.whole {
                bail!("{}", torch_bound(option, bind));
            }
            if let Some(option) = rules.own_ids {
                if !bind.exclusive(fullest) {
                    bail!("{}", jax_shared(option, bind, fullest));
                }
                plan.mode = Mode::Bound(given_count);
            }
            return Ok(plan);
        }
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
                    plan.lists.push((name, list[..end].to_string()));
                }
                plan.count = n as usize;
            }
            (Some(n), _) => plan.ordinals(n),
            (None, false) => {
                plan.lists = node.visible.lists.clone();
                plan.count = given_count;
            }
            (None, true) => plan.ordinals(node.probed.unwrap_or(0)),
        }
        let n = plan.count;
        if one_each && n > 0 && tasks as usize > n {
            bail!("{}", oversubscribed(rules, tasks, n));
        }
        plan.per_task = match settings.gpus_per_task {
            Some(s) => s as usize,
            None => n / tasks as usize,
        };
        if plan.per_task * tasks as usize > n {
            bail!(
                "{} GPU(s) per task × {tasks} task(s) on a node needs {} GPUs, but the node has {n}",
                plan.per_task,
                plan.per_task * tasks as usize,
            );
        }
        plan.mode = match (plan.per_task, rules.whole.is_some()) {
            (0, _) => Mode::Leave,
            (_, true) => Mode::Whole,
            (_, false) => Mode::Slice,
        };
        Ok(plan)
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

/// PyTorch under a per-task binding.
pub(super) fn torch_bound(option: &str, bind: &GpuBind) -> String {
    format!(
        "--{option}: Slurm binds GPUs to each task here ({}), so set_device(LOCAL_RANK) would name a GPU the task cannot see; use --gpus-per-node=N (or --gres=gpu:N) with --ntasks-per-node=N, or --tf-auto-set-gpu=false to keep Slurm's binding",
        describe(bind)
    )
}

/// A task Slurm binds to GPUs of its own, behind a container plugin: Slurm
/// writes the task's list (and SLURMD_TRES_BIND) only in the task, just
/// before the SPANK `task_init` hooks, and a plugin listed earlier (pyxis)
/// entered its namespaces and imported the image's environment first, so
/// the list the task shows may be the image's.
pub fn bound_behind_container(bind: &GpuBind) -> String {
    // One line within the message limit: a binding this plugin does not know
    // is not quoted.
    let binding = match bind {
        GpuBind::Other(_) => "--gpu-bind".to_string(),
        known => describe(known),
    };
    format!(
        "Slurm's GPU binding ({binding}) sets each task's GPU list only in the task, and a container plugin listed earlier (pyxis) entered its namespaces first, so the list may be the image's: use --gpus-per-node=N (or --gres=gpu:N) without --gpu-bind, or --tf-auto-set-gpu=false"
    )
}

/// JAX under a binding that lets tasks share GPUs.
pub(super) fn jax_shared(option: &str, bind: &GpuBind, tasks: u32) -> String {
    format!(
        "--{option}: Slurm's GPU binding ({}) lets the {tasks} tasks of a node share GPUs, and jax.distributed.initialize() would put two processes on one GPU; use --gpus-per-task=N, or --gpus-per-node=N without --gpu-bind",
        describe(bind)
    )
}

/// More tasks on a node than GPUs.
pub(super) fn oversubscribed(rules: Rules, tasks: u32, gpus: usize) -> String {
    let who = rules.who();
    format!(
        "{who}: {tasks} tasks on a node but {gpus} GPU(s) for them: every rank takes a GPU of its own; run at most {gpus} task(s) per node (--ntasks-per-node={gpus}), ask for more GPUs, or use --tf-auto-set-gpu=false"
    )
}

/// Whether the node's GPUs must be counted: only when GPUs are to be set and
/// neither Slurm nor the settings say how many there are.
/// (SLURM_GPUS_ON_NODE set: Slurm gave the step GPUs but no list, so a
/// count of the node's would name GPUs that may not be the step's.)
pub fn needs_probe(
    settings: &Settings,
    visible: &Visible,
    bind: Option<&GpuBind>,
    gpus_on_node: Option<u32>,
) -> bool {
    settings.auto_set_gpu
        && !bind.is_some_and(GpuBind::per_task)
        && settings.gpus_per_node.is_none()
        && visible.is_unset()
        && gpus_on_node.is_none()
}

#[cfg(test)]
mod tests {
    use super::super::devices::MAX_GPUS;
    use super::*;

    /// The refusal behind a container: one line within the message limit
    /// whatever the binding, naming it and what to use instead.
    #[test]
    fn bound_behind_a_container_is_one_short_line() {
        let cases = [
            GpuBind::PerTask(1),
            GpuBind::None,
            GpuBind::parse_gpu_bind("map_gpu:0,1,2,3"),
            GpuBind::PerTask(u32::MAX),
            GpuBind::Other("x".repeat(10_000)),
        ];
        for bind in cases {
            let text = bound_behind_container(&bind);
            assert!(text.chars().count() <= crate::error::MAX_MESSAGE, "{text}");
            assert!(!text.contains('\n'), "{text}");
            assert!(text.contains("--tf-auto-set-gpu=false"), "{text}");
            if !matches!(bind, GpuBind::Other(_)) {
                assert!(text.contains(&describe(&bind)), "{text}");
            }
        }
        assert_eq!(
            bound_behind_container(&GpuBind::PerTask(1)),
            "Slurm's GPU binding (--gpus-per-task=1) sets each task's GPU list only in the task, and a container plugin listed earlier (pyxis) entered its namespaces first, so the list may be the image's: use --gpus-per-node=N (or --gres=gpu:N) without --gpu-bind, or --tf-auto-set-gpu=false"
        );
    }

    fn settings(per_node: Option<u32>, per_task: Option<u32>) -> Settings {
        Settings {
            gpus_per_node: per_node,
            gpus_per_task: per_task,
            ..Settings::default()
        }
    }

    const TF: Rules = Rules {
        whole: None,
        own_ids: None,
    };
    const TORCH: Rules = Rules {
        whole: Some("torch-cluster"),
        own_ids: None,
    };
    const JAX: Rules = Rules {
        whole: None,
        own_ids: Some("jax-cluster"),
    };
    const TORCH_JAX: Rules = Rules {
        whole: Some("torch-cluster"),
        own_ids: Some("jax-cluster"),
    };
    /// TensorFlow's slice rule adds nothing beside PyTorch's whole list.
    const TF_TORCH: Rules = TORCH;

    fn cuda(list: &str) -> Visible {
        Visible::from_pairs([("CUDA_VISIBLE_DEVICES", list)])
    }

    /// The plan of `frameworks` for `visible`, `bind` (a SLURMD_TRES_BIND),
    /// `tasks` local tasks.
    fn plan(
        s: &Settings,
        f: Rules,
        visible: &Visible,
        bind: Option<&str>,
        tasks: u32,
    ) -> Result<GpuPlan> {
        let bind = bind.and_then(GpuBind::parse);
        GpuPlan::new(
            s,
            f,
            NodeGpus {
                visible,
                bind: bind.as_ref(),
                probed: None,
                local_tasks: tasks,
                node_tasks: tasks,
                gpus_on_node: None,
            },
        )
    }

    fn slices(plan: &GpuPlan, tasks: u32) -> Vec<Option<String>> {
        (0..tasks).map(|k| plan.for_local(k)).collect()
    }

    fn ids(plan: &GpuPlan, tasks: u32) -> Vec<Option<String>> {
        (0..tasks).map(|k| plan.jax_ids(k)).collect()
    }

    fn some(v: &[&str]) -> Vec<Option<String>> {
        v.iter().map(|s| Some(s.to_string())).collect()
    }

    fn err(r: Result<GpuPlan>) -> String {
        r.unwrap_err().to_string()
    }

    #[test]
    fn tensorflow_slices_slurms_own_tokens() {
        let s = settings(None, None);
        let p = plan(&s, TF, &cuda("4,5,6,7"), None, 2).unwrap();
        assert_eq!(slices(&p, 2), some(&["4,5", "6,7"]));
        assert_eq!(ids(&p, 2), [None, None]);
        let p = plan_of(&s, TF, "2,3", 2);
        assert_eq!(slices(&p, 2), some(&["2", "3"]));
        // 2 GPUs ÷ 3 tasks = 0: left as Slurm set it.
        let p = plan_of(&s, TF, "0,1", 3);
        assert_eq!(slices(&p, 3), [None, None, None]);
    }

    fn plan_of(s: &Settings, f: Rules, list: &str, tasks: u32) -> GpuPlan {
        plan(s, f, &cuda(list), None, tasks).unwrap()
    }

    #[test]
    fn tensorflow_keeps_slurms_binding() {
        for bind in [
            "gres/gpu:per_task:1",
            "gres/gpu:single:2",
            "gres/gpu:closest",
            "gpu:map_gpu:0,0",
        ] {
            let p = plan(&settings(None, None), TF, &cuda("1"), Some(bind), 4).unwrap();
            assert_eq!(p.task_vars(1), [], "{bind}");
        }
    }

    #[test]
    fn jax_keeps_an_exclusive_binding() {
        let s = settings(None, None);
        for bind in [
            "gpu:per_task:1",
            "gres/gpu:single:1",
            "gres/gpu:map_gpu:1,0",
            "gres/gpu:mask_gpu:1,2",
        ] {
            let p = plan(&s, JAX, &cuda("1"), Some(bind), 2).unwrap();
            assert_eq!(p.task_vars(1), [], "{bind}");
            assert_eq!(p.jax_ids(1).as_deref(), Some("0"), "{bind}");
        }
        let p = plan(&s, JAX, &cuda("2,3"), Some("gres/gpu:per_task:2"), 2).unwrap();
        assert_eq!(p.jax_ids(1).as_deref(), Some("0,1"));
        // --gpu-bind=none is no binding: JAX's slice.
        let p = plan(&s, JAX, &cuda("0,1,2,3"), Some("gres/gpu:none"), 2).unwrap();
        assert_eq!(slices(&p, 2), some(&["0,1", "2,3"]));
        assert_eq!(ids(&p, 2), some(&["0,1", "0,1"]));
    }

    #[test]
    fn jax_refuses_a_shared_binding() {
        let s = settings(None, None);
        for bind in [
            "gres/gpu:single:2",
            "gres/gpu:closest",
            "gres/gpu:map_gpu:0,0",
            "gres/gpu:mask_gpu:3,1",
        ] {
            let e = err(plan(&s, JAX, &cuda("0,1"), Some(bind), 2));
            assert!(e.starts_with("--jax-cluster: Slurm's GPU binding"), "{e}");
            assert!(e.contains("use --gpus-per-task=N"), "{e}");
        }
    }

    #[test]
    fn jax_slices_without_a_binding() {
        let s = settings(None, None);
        let p = plan_of(&s, JAX, "0,1,2,3", 4);
        assert_eq!(slices(&p, 4), some(&["0", "1", "2", "3"]));
        assert_eq!(ids(&p, 4), some(&["0", "0", "0", "0"]));
        let p = plan_of(&s, JAX, "0,1,2,3", 3);
        assert_eq!(slices(&p, 3), some(&["0", "1", "2"]));
        // --tf-gpus-per-task widens the slice.
        let p = plan_of(&settings(None, Some(2)), JAX, "0,1,2,3", 2);
        assert_eq!(ids(&p, 2), some(&["0,1", "0,1"]));
        // CPU only: nothing.
        let p = plan(&s, JAX, &Visible::default(), None, 2).unwrap();
        assert_eq!((p.for_local(0), p.jax_ids(0)), (None, None));
    }

    /// Slurm 22.05 sets no list under `--gpu-bind=none` (measured:
    /// SLURM_GPUS_ON_NODE=4, SLURMD_TRES_BIND=gpu:none, nothing else).
    #[test]
    fn no_lists_under_gpu_bind_none() {
        let s = settings(None, None);
        let bind = GpuBind::None;
        let node = |f| {
            GpuPlan::new(
                &s,
                f,
                NodeGpus {
                    visible: &Visible::default(),
                    bind: Some(&bind),
                    probed: None,
                    local_tasks: 2,
                    node_tasks: 2,
                    gpus_on_node: Some(4),
                },
            )
        };
        for f in [TORCH, JAX] {
            let e = err(node(f));
            assert!(e.contains("leave out --gpu-bind=none"), "{e}");
        }
        assert_eq!(node(TF).unwrap().for_local(0), None);
        assert!(!needs_probe(&s, &Visible::default(), Some(&bind), Some(4)));
    }

    /// A node with 1 task of a step whose fullest node has 3 (`-N2 -n4`).
    fn one_of_three(s: &Settings, f: Rules, list: &str, bind: Option<&GpuBind>) -> Result<GpuPlan> {
        GpuPlan::new(
            s,
            f,
            NodeGpus {
                visible: &cuda(list),
                bind,
                probed: None,
                local_tasks: 3,
                node_tasks: 1,
                gpus_on_node: None,
            },
        )
    }

    /// PyTorch and JAX share this node's GPUs among this node's tasks:
    /// `-N2 -n4 --gpus=4` gives node1 3 GPUs for 3 tasks and node2 1 for 1
    /// (measured on 22.05), a step that runs.
    #[test]
    fn this_nodes_tasks_count_for_torch_and_jax() {
        let s = settings(None, None);
        let torch = one_of_three(&s, TORCH, "0", None).unwrap();
        assert_eq!(torch.for_local(0).as_deref(), Some("0"));
        let jax = one_of_three(&s, JAX, "0", None).unwrap();
        assert_eq!(jax.jax_ids(0).as_deref(), Some("0"));
        let p = one_of_three(&settings(None, Some(2)), JAX, "0,1", None).unwrap();
        assert_eq!(p.jax_ids(0).as_deref(), Some("0,1"));
        // TensorFlow's width stays the fullest node's: 1 ÷ 3 = 0, untouched.
        assert_eq!(one_of_three(&s, TF, "0", None).unwrap().for_local(0), None);
    }

    /// Whether a binding lets tasks share GPUs is decided for the fullest
    /// node's tasks on every node: `--gpu-bind=map_gpu:0,1 --jax-cluster`
    /// with 3 + 1 tasks is refused on node2 too, where it is bound.
    #[test]
    fn a_shared_binding_is_judged_for_the_fullest_node() {
        let s = settings(None, None);
        let map = GpuBind::Map(vec![0, 1]);
        let e = err(one_of_three(&s, JAX, "0", Some(&map)));
        assert!(e.contains("lets the 3 tasks of a node share GPUs"), "{e}");
        let map = GpuBind::Map(vec![0, 1, 2]);
        assert!(one_of_three(&s, JAX, "0", Some(&map)).is_ok());
    }

    #[test]
    fn more_ranks_than_gpus_is_refused_for_torch_and_jax() {
        let s = settings(None, None);
        for f in [TORCH, JAX, TORCH_JAX] {
            let e = err(plan(&s, f, &cuda("0,1"), None, 3));
            assert!(e.contains("3 tasks on a node but 2 GPU(s)"), "{e}");
            assert!(e.contains("--ntasks-per-node=2"), "{e}");
        }
        // TensorFlow's rule stays: the list as Slurm set it.
        assert_eq!(plan_of(&s, TF, "0,1", 3).for_local(2), None);
        // Turned off: nothing checked, nothing set.
        let off = Settings {
            auto_set_gpu: false,
            ..Settings::default()
        };
        let p = plan(&off, TORCH, &cuda("0,1"), None, 3).unwrap();
        assert_eq!((p.for_local(0), p.jax_ids(0)), (None, None));
    }

    #[test]
    fn torch_sees_the_whole_node() {
        let s = settings(None, None);
        let p = plan_of(&s, TORCH, "4,5,6,7", 2);
        assert_eq!(slices(&p, 2), some(&["4,5,6,7", "4,5,6,7"]));
        assert_eq!(ids(&p, 2), [None, None]);
        // With JAX: local task k's JAX devices are k, k+L, …: its PyTorch
        // GPU (set_device(k)) among them, none shared with another task.
        let p = plan_of(&s, TORCH_JAX, "4,5,6,7", 2);
        assert_eq!(slices(&p, 2), some(&["4,5,6,7", "4,5,6,7"]));
        assert_eq!(ids(&p, 2), some(&["0,2", "1,3"]));
        let p = plan_of(&s, TORCH_JAX, "0,1,2,3", 4);
        assert_eq!(ids(&p, 4), some(&["0", "1", "2", "3"]));
        let p = plan_of(&s, TORCH_JAX, "0,1,2,3,4,5,6,7", 3);
        assert_eq!(ids(&p, 3), some(&["0,3", "1,4", "2,5"]));
        let p = plan_of(&s, TORCH_JAX, "0,1,2,3", 1);
        assert_eq!(ids(&p, 1), some(&["0,1,2,3"]));
        // With TensorFlow: the whole list too.
        let p = plan_of(&s, TF_TORCH, "0,1,2,3", 2);
        assert_eq!(slices(&p, 2), some(&["0,1,2,3", "0,1,2,3"]));
    }

    #[test]
    fn torch_refuses_any_per_task_binding() {
        let s = settings(None, None);
        for bind in [
            "gpu:per_task:1",
            "gres/gpu:single:1",
            "gres/gpu:closest",
            "gres/gpu:map_gpu:0,1",
        ] {
            for f in [TORCH, TORCH_JAX, TF_TORCH] {
                let e = err(plan(&s, f, &cuda("1"), Some(bind), 2));
                assert!(e.starts_with("--torch-cluster: Slurm binds GPUs"), "{e}");
                assert!(e.contains("--gpus-per-node=N"), "{e}");
                assert!(e.contains("--tf-auto-set-gpu=false"), "{e}");
            }
        }
    }

    #[test]
    fn every_vendor_variable_by_the_same_rule() {
        let visible = Visible::from_pairs([
            ("CUDA_VISIBLE_DEVICES", "0,1,2,3"),
            ("ROCR_VISIBLE_DEVICES", "0,1,2,3"),
            ("ZE_AFFINITY_MASK", "0,1,2,3"),
            ("GPU_DEVICE_ORDINAL", "0,1,2,3"),
        ]);
        let p = plan(&settings(None, None), JAX, &visible, None, 2).unwrap();
        assert_eq!(
            p.task_vars(1),
            [
                ("CUDA_VISIBLE_DEVICES", "2,3".to_string()),
                ("ROCR_VISIBLE_DEVICES", "2,3".to_string()),
                ("ZE_AFFINITY_MASK", "2,3".to_string()),
                ("GPU_DEVICE_ORDINAL", "2,3".to_string()),
            ]
        );
        // AMD alone (Flags=amd_gpu_env), UUIDs: Slurm's tokens kept.
        let amd = Visible::from_pairs([("ROCR_VISIBLE_DEVICES", "GPU-aa,GPU-bb")]);
        let p = plan(&settings(None, None), TF, &amd, None, 2).unwrap();
        assert_eq!(
            p.task_vars(1),
            [("ROCR_VISIBLE_DEVICES", "GPU-bb".to_string())]
        );
        // Intel with --tf-gpus-per-node: the first N of each.
        let intel = Visible::from_pairs([("ZE_AFFINITY_MASK", "3,5,7")]);
        let p = plan(&settings(Some(2), None), TORCH, &intel, None, 2).unwrap();
        assert_eq!(p.task_vars(0), [("ZE_AFFINITY_MASK", "3,5".to_string())]);
        // MIG tokens.
        let mig = cuda("MIG-a/1/0,MIG-b/2/0");
        let p = plan(&settings(None, None), JAX, &mig, None, 2).unwrap();
        assert_eq!(p.for_local(1).as_deref(), Some("MIG-b/2/0"));
        // Lists that disagree in count are refused.
        let bad = Visible::from_pairs([
            ("CUDA_VISIBLE_DEVICES", "0,1"),
            ("ROCR_VISIBLE_DEVICES", "0"),
        ]);
        let e = err(plan(&settings(None, None), TF, &bad, None, 1));
        assert!(e.contains("the device variables disagree"), "{e}");
    }

    #[test]
    fn configured_counts() {
        // TF's test: 2 GPUs per node, 1 per task, no list from Slurm.
        let p = plan(&settings(Some(2), Some(1)), TF, &cuda(""), None, 2).unwrap();
        assert_eq!(slices(&p, 2), some(&["0", "1"]));
        let p = plan(
            &settings(Some(4), Some(2)),
            TF,
            &Visible::default(),
            None,
            2,
        )
        .unwrap();
        assert_eq!(slices(&p, 2), some(&["0,1", "2,3"]));
        let p = plan_of(&settings(Some(2), None), TF, "6,7,8", 1);
        assert_eq!(slices(&p, 1), some(&["6,7"]));
    }

    #[test]
    fn cpu_only_leaves_the_variables_alone() {
        for (per_node, visible, probed, tasks) in [
            (Some(0), None, None, 2),
            (Some(1), None, None, 2),
            (None, Some(""), None, 1),
            (None, None, Some(0), 4),
            (None, None, None, 4),
        ] {
            let visible = visible.map_or_else(Visible::default, cuda);
            for f in [TF, TORCH, JAX] {
                let p = GpuPlan::new(
                    &settings(per_node, None),
                    f,
                    NodeGpus {
                        visible: &visible,
                        bind: None,
                        probed,
                        local_tasks: tasks,
                        node_tasks: tasks,
                        gpus_on_node: None,
                    },
                );
                if let Ok(p) = p {
                    assert_eq!(p.for_local(0), None, "{per_node:?} {visible:?}");
                    assert_eq!(p.jax_ids(0), None);
                } else {
                    // 1 GPU configured for 2 tasks: PyTorch/JAX refuse.
                    assert_eq!((per_node, f == TF), (Some(1), false));
                }
            }
        }
    }

    #[test]
    fn probed_count_gives_ordinals() {
        let p = GpuPlan::new(
            &settings(None, None),
            TF,
            NodeGpus {
                visible: &Visible::default(),
                bind: None,
                probed: Some(8),
                local_tasks: 4,
                node_tasks: 4,
                gpus_on_node: None,
            },
        )
        .unwrap();
        assert_eq!(
            p.task_vars(1),
            [("CUDA_VISIBLE_DEVICES", "2,3".to_string())]
        );
    }

    #[test]
    fn too_many_gpus_is_an_error() {
        let e = err(plan(
            &settings(Some(4), Some(4)),
            TF,
            &Visible::default(),
            None,
            2,
        ));
        assert!(e.contains("needs 8 GPUs, but the node has 4"), "{e}");
        let e = err(plan(&settings(Some(4), None), TF, &cuda("0,1"), None, 1));
        assert!(
            e.contains("gpus-per-node is 4 but Slurm gave this step 2"),
            "{e}"
        );
        let e = err(plan(&settings(None, Some(1)), TF, &cuda(""), None, 1));
        assert!(e.contains("the node has 0"), "{e}");
    }

    #[test]
    fn zero_gpus_per_node_with_a_list_from_slurm() {
        let p = plan_of(&settings(Some(0), None), TF, "0,1,2,3", 2);
        assert_eq!(slices(&p, 2), [None, None]);
    }

    #[test]
    fn long_and_garbage_lists_are_refused() {
        let list = vec!["0"; MAX_GPUS as usize + 1].join(",");
        let e = err(plan(&settings(None, None), TF, &cuda(&list), None, 1));
        assert!(e.contains("more than 1024 GPUs"), "{e}");
        for bad in ["0,,1", ",", "0 1", "0;rm", "é"] {
            let e = err(plan(&settings(None, None), TF, &cuda(bad), None, 1));
            assert!(e.starts_with("bad CUDA_VISIBLE_DEVICES"), "{bad}: {e}");
        }
        let e = err(plan(
            &settings(None, None),
            TF,
            &Visible::from_pairs([("ZE_AFFINITY_MASK", "0;1")]),
            None,
            1,
        ));
        assert!(e.starts_with("bad ZE_AFFINITY_MASK"), "{e}");
    }

    #[test]
    fn probe_only_when_nothing_else_says() {
        let s = Settings::default();
        let none = Visible::default();
        let per_task = GpuBind::PerTask(1);
        assert!(needs_probe(&s, &none, None, None));
        assert!(needs_probe(&s, &none, Some(&GpuBind::None), None));
        assert!(!needs_probe(&s, &cuda("0"), None, None));
        assert!(!needs_probe(
            &s,
            &Visible::from_pairs([("ROCR_VISIBLE_DEVICES", "0")]),
            None,
            None
        ));
        assert!(!needs_probe(&s, &none, Some(&per_task), None));
        assert!(!needs_probe(&settings(Some(2), None), &none, None, None));
        let off = Settings {
            auto_set_gpu: false,
            ..Settings::default()
        };
        assert!(!needs_probe(&off, &none, None, None));
    }
}
