//! The node's GPU plan under every rule and way of asking Slurm for GPUs.

use super::bind::GpuBind;
use super::devices::{MAX_GPUS, Visible};
use super::plan::{GpuPlan, NodeGpus};
use super::rules::Rules;
use super::rules::examples::{JAX, TF, TORCH, TORCH_JAX};
use crate::error::Result;
use crate::settings::Settings;
use crate::step::needs_probe;

fn settings(per_node: Option<u32>, per_task: Option<u32>) -> Settings {
    Settings {
        gpus_per_node: per_node,
        gpus_per_task: per_task,
        ..Settings::default()
    }
}

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
