//! The device each task's common program picks, under every way of asking
//! Slurm for GPUs, on the testbed's 3 nodes × 4 fake GPUs (docker/testbed.sh;
//! gres.conf without Flags, so Slurm sets CUDA_VISIBLE_DEVICES,
//! ROCR_VISIBLE_DEVICES, ZE_AFFINITY_MASK and GPU_DEVICE_ORDINAL alike).
//!
//! For every request form × `--torch-cluster`, `--jax-cluster`,
//! `--tf-cluster` (and PyTorch with JAX), each task prints what it sees; the
//! device its program would use is derived from that alone:
//! - PyTorch, `set_device(LOCAL_RANK)`: the LOCAL_RANK-th token of its list;
//! - JAX, `jax.distributed.initialize()`: the tokens at JAX_LOCAL_DEVICE_IDS,
//!   else at SLURM_LOCALID (JAX's own Slurm default);
//! - TensorFlow: every token of its list.
//!
//! Each picked token must be one Slurm gave the task's step on its node
//! (SLURM_STEP_GPUS, the node's real device numbers: the testbed runs
//! without ConstrainDevices), visible to the task, and for PyTorch and JAX
//! no two ranks of a node may pick the same. Where no rule can hold, the
//! step must be refused with one line, by srun before launch where srun can
//! see the request (Slurm 24.11 on), else by the tasks before their program.
//!
//! And each task is born next to its GPUs ([`tasks_are_born_next_to_their_gpus`]):
//! on fixture kernel files, every task runs on the CPUs near the GPUs it uses.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};

use common::outputs::Outputs;
use common::{exec_for, srun, testbed};

/// One task's view.
#[derive(Debug, Clone)]
struct Seen {
    rank: u32,
    host: String,
    local: u32,
    vars: BTreeMap<&'static str, Option<String>>,
}

const VARS: [&str; 8] = [
    "CUDA_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "ZE_AFFINITY_MASK",
    "GPU_DEVICE_ORDINAL",
    "LOCAL_RANK",
    "JAX_LOCAL_DEVICE_IDS",
    "SLURM_STEP_GPUS",
    "SLURMD_TRES_BIND",
];

fn probe() -> String {
    let mut p = String::from(r#"printf 'GPU\t%s\t%s\t%s"#);
    for _ in VARS {
        p.push_str(r"\t%s");
    }
    p.push_str(r#"\n' "$SLURM_PROCID" "$(hostname)" "$SLURM_LOCALID""#);
    for v in VARS {
        p.push_str(&format!(r#" "${{{v}-<unset>}}""#));
    }
    p
}

struct Outcome {
    code: Option<i32>,
    tasks: Vec<Seen>,
    /// The plugin's messages, each with where it came from (true: srun).
    messages: Vec<(bool, String)>,
    text: String,
}

fn run(args: &[&str]) -> Outcome {
    let probe = probe();
    let mut cmd = vec!["--time=2"];
    cmd.extend_from_slice(args);
    cmd.extend_from_slice(&["bash", "-c", &probe]);
    // Each task's lines from its own file.
    let out = common::srun_tasks(&cmd);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let mut tasks: Vec<Seen> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("GPU\t"))
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            assert_eq!(f.len(), 3 + VARS.len(), "probe line {l:?}");
            Seen {
                rank: f[0].parse().unwrap(),
                host: f[1].into(),
                local: f[2].parse().unwrap(),
                vars: VARS
                    .iter()
                    .zip(&f[3..])
                    .map(|(&k, &v)| (k, (v != "<unset>").then(|| v.to_string())))
                    .collect(),
            }
        })
        .collect();
    tasks.sort_by_key(|t| t.rank);
    let messages = stderr
        .lines()
        .filter_map(|l| {
            l.split_once("tf-cluster: ")
                .map(|(head, m)| (!head.contains("slurmstepd"), m.to_string()))
        })
        .collect();
    Outcome {
        code: out.status.code(),
        tasks,
        messages,
        text: format!("{stdout}{stderr}"),
    }
}

/// Slurm 24.11 on writes srun's own GPU options into its environment before
/// the plugin's srun callback; 22.05 does not (srun.c, set_env_from_opts).
fn srun_sees_its_options() -> bool {
    std::env::var("TFC_SUITE").map_or(true, |s| s != "bookworm")
}

fn tokens(list: &Option<String>) -> Vec<String> {
    match list {
        Some(l) if !l.is_empty() => l.split(',').map(String::from).collect(),
        _ => Vec::new(),
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Fw {
    Tf,
    Torch,
    Jax,
    TorchJax,
}

impl Fw {
    fn args(self) -> &'static [&'static str] {
        match self {
            Fw::Tf => &["--tf-cluster"],
            Fw::Torch => &["--torch-cluster"],
            Fw::Jax => &["--jax-cluster"],
            Fw::TorchJax => &["--torch-cluster", "--jax-cluster"],
        }
    }
}

/// What a case must give.
#[derive(Clone, Copy, Debug)]
enum Want {
    /// Runs; every picked device is right.
    Runs,
    /// Refused with a message containing this; `early`: srun refuses
    /// before launch where it can see the request.
    Refused(&'static str, bool),
    /// Runs, except on Slurm 22.05 where it is refused with this message.
    RunsBut2205(&'static str),
}

/// The devices `fw`'s common program picks in task `t`: (PyTorch's, JAX's).
fn picks(fw: Fw, t: &Seen) -> (Vec<String>, Vec<String>) {
    let list = tokens(&t.vars["CUDA_VISIBLE_DEVICES"]);
    let at = |i: usize| {
        list.get(i).cloned().unwrap_or_else(|| {
            panic!(
                "rank {} picks index {i} of {list:?}: not a GPU it can see",
                t.rank
            )
        })
    };
    let torch = match fw {
        Fw::Torch | Fw::TorchJax => {
            let k: usize = t.vars["LOCAL_RANK"].as_deref().unwrap().parse().unwrap();
            vec![at(k)]
        }
        _ => Vec::new(),
    };
    let jax = match fw {
        Fw::Jax | Fw::TorchJax => match &t.vars["JAX_LOCAL_DEVICE_IDS"] {
            Some(ids) => ids.split(',').map(|i| at(i.parse().unwrap())).collect(),
            None => vec![at(t.local as usize)],
        },
        Fw::Tf => list.clone(),
        Fw::Torch => Vec::new(),
    };
    (torch, jax)
}

fn check(case: &str, args: &[&str], fw: Fw, want: Want, tasks: u32) -> String {
    let mut all: Vec<&str> = args.to_vec();
    all.extend_from_slice(fw.args());
    let out = run(&all);
    let ctx = format!("{case} {fw:?} (srun {}):\n{}", all.join(" "), out.text);
    let old = std::env::var("TFC_SUITE").is_ok_and(|s| s == "bookworm");
    let want = match want {
        Want::RunsBut2205(why) if old => Want::Refused(why, false),
        Want::RunsBut2205(_) => Want::Runs,
        w => w,
    };
    match want {
        Want::RunsBut2205(_) => unreachable!(),
        Want::Refused(why, early) => {
            assert_ne!(out.code, Some(0), "should be refused: {ctx}");
            assert!(out.tasks.is_empty(), "tasks ran: {ctx}");
            let mut msgs = out.messages.clone();
            msgs.dedup();
            assert!(!msgs.is_empty(), "no message: {ctx}");
            assert!(
                msgs.iter().all(|(_, m)| m.contains(why)),
                "want {why:?}: {ctx}"
            );
            let by_srun = msgs.iter().all(|(srun, _)| *srun);
            if early && srun_sees_its_options() {
                assert!(by_srun, "srun should refuse before launch: {ctx}");
            }
            format!(
                "{case} {fw:?}: refused by {}",
                if by_srun { "srun" } else { "the tasks" }
            )
        }
        Want::Runs => {
            assert_eq!(out.code, Some(0), "{ctx}");
            assert_eq!(out.tasks.len() as u32, tasks, "{ctx}");
            let mut per_node: BTreeMap<&str, Vec<String>> = BTreeMap::new();
            let mut summary = Vec::new();
            for t in &out.tasks {
                // Every vendor variable Slurm set equals CUDA's (sliced alike).
                for v in [
                    "ROCR_VISIBLE_DEVICES",
                    "ZE_AFFINITY_MASK",
                    "GPU_DEVICE_ORDINAL",
                ] {
                    assert_eq!(
                        t.vars[v], t.vars["CUDA_VISIBLE_DEVICES"],
                        "rank {} {v}: {ctx}",
                        t.rank
                    );
                }
                let step_gpus = tokens(&t.vars["SLURM_STEP_GPUS"]);
                let (torch, jax) = picks(fw, t);
                for d in torch.iter().chain(&jax) {
                    assert!(
                        step_gpus.contains(d),
                        "rank {} picks {d}, not among the step's GPUs {step_gpus:?}: {ctx}",
                        t.rank
                    );
                }
                if fw == Fw::TorchJax {
                    assert!(jax.contains(&torch[0]), "rank {}: {ctx}", t.rank);
                }
                if fw != Fw::Tf {
                    let own = if jax.is_empty() { &torch } else { &jax };
                    per_node.entry(&t.host).or_default().extend(own.clone());
                }
                summary.push(format!(
                    "r{}@{}:{} C={} LR={} J={}",
                    t.rank,
                    t.host,
                    t.local,
                    t.vars["CUDA_VISIBLE_DEVICES"].as_deref().unwrap_or("-"),
                    t.vars["LOCAL_RANK"].as_deref().unwrap_or("-"),
                    t.vars["JAX_LOCAL_DEVICE_IDS"].as_deref().unwrap_or("-"),
                ));
            }
            for (host, picked) in per_node {
                let distinct: BTreeSet<&String> = picked.iter().collect();
                assert_eq!(
                    distinct.len(),
                    picked.len(),
                    "two ranks on {host} pick one GPU ({picked:?}): {ctx}"
                );
            }
            format!("{case} {fw:?}: {}", summary.join(" | "))
        }
    }
}

const TORCH_BOUND: &str = "--torch-cluster: Slurm binds GPUs to each task here";
const JAX_SHARED: &str = "--jax-cluster: Slurm's GPU binding";
const OVER: &str = "tasks on a node but";

/// Every request form with its outcome per framework:
/// (case, srun args, tasks, [tf, torch, jax, torch+jax]). Binding forms run
/// 2 tasks on each of 2 nodes: Slurm 22.05 does not bind GPUs per task on a
/// node where the step has a single task (no SLURMD_TRES_BIND there, the
/// whole list), measured with `-N2 -n4` (3 + 1 tasks).
#[rustfmt::skip]
fn forms() -> Vec<(&'static str, Vec<&'static str>, u32, [Want; 4])> {
    use Want::*;
    let none = RunsBut2205("leave out --gpu-bind=none");
    let ok = [Runs, Runs, Runs, Runs];
    let bound = [Runs, Refused(TORCH_BOUND, true), Runs, Refused(TORCH_BOUND, true)];
    let shared = [Runs, Refused(TORCH_BOUND, true), Refused(JAX_SHARED, true), Refused(TORCH_BOUND, true)];
    vec![
        ("gres", vec!["-N2", "-n4", "--gres=gpu:4"], 4, ok),
        ("gres 3 tasks", vec!["-N1", "-n3", "--gres=gpu:4"], 3, ok),
        ("gpus", vec!["-N2", "-n4", "--gpus=8"], 4, ok),
        ("gpus-per-node", vec!["-N2", "-n4", "--gpus-per-node=4"], 4, ok),
        ("gpus-per-node 2 for 3", vec!["-N1", "-n3", "--gpus-per-node=2"], 3,
            [Runs, Refused(OVER, true), Refused(OVER, true), Refused(OVER, true)]),
        ("gres 2 for 3", vec!["-N1", "-n3", "--gres=gpu:2"], 3,
            [Runs, Refused(OVER, false), Refused(OVER, false), Refused(OVER, false)]),
        ("gpus-per-task", vec!["-N2", "--ntasks-per-node=2", "--gpus-per-task=1"], 4, bound),
        ("gpus-per-task 2", vec!["-N2", "--ntasks-per-node=2", "--gpus-per-task=2"], 4, bound),
        ("gpu-bind none", vec!["-N2", "--ntasks-per-node=2", "--gres=gpu:4", "--gpu-bind=none"], 4,
            [Runs, none, none, none]),
        ("gpu-bind single:1", vec!["-N2", "--ntasks-per-node=2", "--gres=gpu:4", "--gpu-bind=single:1"], 4, bound),
        ("gpu-bind single:2", vec!["-N1", "-n4", "--gres=gpu:4", "--gpu-bind=single:2"], 4, shared),
        ("gpu-bind closest", vec!["-N2", "--ntasks-per-node=2", "--gres=gpu:4", "--gpu-bind=closest"], 4, shared),
        ("gpu-bind map_gpu", vec!["-N2", "--ntasks-per-node=2", "--gres=gpu:4", "--gpu-bind=map_gpu:3,1"], 4, bound),
        ("gpu-bind map_gpu cycling", vec!["-N1", "-n3", "--gres=gpu:4", "--gpu-bind=map_gpu:3,1"], 3, shared),
        ("gpu-bind map_gpu shared", vec!["-N2", "--ntasks-per-node=2", "--gres=gpu:4", "--gpu-bind=map_gpu:0,0"], 4, shared),
        ("gpu-bind mask_gpu", vec!["-N2", "--ntasks-per-node=2", "--gres=gpu:4", "--gpu-bind=mask_gpu:0x3,0xc"], 4, bound),
        ("gres-flags enforce-binding", vec!["-N2", "-n4", "--gres=gpu:4", "--gres-flags=enforce-binding"], 4, ok),
    ]
}

fn run_forms(which: &[&str]) {
    let _t = testbed();
    let mut report = Vec::new();
    for (case, args, tasks, wants) in forms() {
        if !which.contains(&case) {
            continue;
        }
        for (fw, want) in [Fw::Tf, Fw::Torch, Fw::Jax, Fw::TorchJax]
            .into_iter()
            .zip(wants)
        {
            report.push(check(case, &args, fw, want, tasks));
        }
    }
    eprintln!("{}", report.join("\n"));
}

#[test]
fn gpus_per_node_forms() {
    run_forms(&[
        "gres",
        "gres 3 tasks",
        "gpus",
        "gpus-per-node",
        "gpus-per-node 2 for 3",
        "gres 2 for 3",
        "gres-flags enforce-binding",
    ]);
}

#[test]
fn gpus_per_task_forms() {
    run_forms(&["gpus-per-task", "gpus-per-task 2"]);
}

#[test]
fn gpu_bind_forms() {
    run_forms(&[
        "gpu-bind none",
        "gpu-bind single:1",
        "gpu-bind single:2",
        "gpu-bind closest",
        "gpu-bind map_gpu",
        "gpu-bind map_gpu cycling",
        "gpu-bind map_gpu shared",
        "gpu-bind mask_gpu",
    ]);
}

/// TensorFlow's rule, exactly: its slice of the node's list, or Slurm's
/// binding kept, or (2 ÷ 3 = 0) the list as Slurm set it.
#[test]
fn tensorflow_slices() {
    let _t = testbed();
    let out = run(&["-N1", "-n2", "-w", "node2", "--gres=gpu:4", "--tf-cluster"]);
    let seen: Vec<_> = out
        .tasks
        .iter()
        .map(|t| t.vars["CUDA_VISIBLE_DEVICES"].clone())
        .collect();
    assert_eq!(
        seen,
        [Some("0,1".into()), Some("2,3".into())],
        "{}",
        out.text
    );
    let out = run(&["-N1", "-n3", "--gpus-per-node=2", "--tf-cluster"]);
    assert_eq!(out.tasks.len(), 3, "{}", out.text);
    assert!(
        out.tasks
            .iter()
            .all(|t| tokens(&t.vars["CUDA_VISIBLE_DEVICES"]).len() == 2),
        "{}",
        out.text
    );
}

/// `--tf-auto-set-gpu=false` turns the GPU rules off: Slurm's binding and
/// lists stay, more ranks than GPUs run.
#[test]
fn turned_off_runs_as_slurm_set_it() {
    let _t = testbed();
    for args in [
        &["-N1", "-n3", "--gpus-per-node=2"][..],
        &["-N1", "-n2", "--gpus-per-task=1"][..],
    ] {
        let mut all = args.to_vec();
        all.extend([
            "--torch-cluster",
            "--jax-cluster",
            "--tf-auto-set-gpu=false",
        ]);
        let out = run(&all);
        assert_eq!(out.code, Some(0), "{}", out.text);
        assert!(
            out.tasks
                .iter()
                .all(|t| t.vars["JAX_LOCAL_DEVICE_IDS"].is_none()),
            "{}",
            out.text
        );
    }
}

/// Fewer GPUs than asked: no GPUs to share while Slurm gave four: left as Slurm set it.
#[test]
fn no_gpus_to_share_leaves_slurms_list() {
    let _t = testbed();
    let run = srun(&[
        "-N1",
        "-n2",
        "-w",
        "node2",
        "--gres=gpu:4",
        "--tf-cluster",
        "--tf-gpus-per-node=0",
    ]);
    run.assert_ran(2);
    assert_eq!(run.gpus(), [Some("0,1,2,3"); 2]);
}

/// `--gres=gpu:2` with two tasks per node: one GPU each, the ids Slurm gave the step on that
/// node (SLURM_STEP_GPUS), in order. Another step of the job holds two GPUs of each node
/// meanwhile (both `--exact`: each step only the CPUs it asks for, so they run side by side),
/// so the step's ids are not the 0 and 1 of an idle node: which two Slurm gives is its own
/// choice (and another test's job on the node changes it too), never the test's.
#[test]
fn gres_gpus_are_sliced() {
    let _t = testbed();
    let outputs = Outputs::new("gres-sliced");
    let [out, err] = outputs.srun_args();
    let held = format!("/home/alice/.gres-held-{}", std::process::id());
    let probe = r#"printf 'GPUS\t%s\t%s\t%s\t%s\n' "$SLURM_LOCALID" "$(hostname)" "${SLURM_STEP_GPUS-unset}" "${CUDA_VISIBLE_DEVICES-unset}""#;
    let probe = probe.replace('\'', r"'\''");
    // The holding step writes its GPUs per node; the script prints them (HELD lines).
    let script = format!(
        "srun -N2 -n2 --exact --gres=gpu:2 bash -c 'echo $SLURM_STEP_GPUS > {held}.tmp.$(hostname); \
         mv {held}.tmp.$(hostname) {held}.$(hostname); exec sleep 300' &\n\
         holder=$!\n\
         for _ in $(seq 600); do [ -e {held}.node1 ] && [ -e {held}.node2 ] && break; sleep 0.2; done\n\
         for h in node1 node2; do printf 'HELD\\t%s\\t%s\\n' $h \"$(cat {held}.$h)\"; done\n\
         srun {out} {err} -N2 -n4 --ntasks-per-node=2 --exact --gres=gpu:2 --tf-cluster bash -c '{probe}'\n\
         rc=$?; rm -f {held}.*; kill $holder; wait; exit $rc"
    );
    let ran = exec_for(
        300,
        &[
            "salloc",
            "-N2",
            "-w",
            "node[1-2]",
            "--ntasks-per-node=3",
            "--gres=gpu:4",
            "bash",
            "-c",
            &script,
        ],
    );
    let context = format!("{ran:?}\n{}", outputs.dump());
    assert!(ran.status.success(), "{context}");
    let said = String::from_utf8_lossy(&ran.stdout);
    let held: BTreeMap<&str, BTreeSet<&str>> = said
        .lines()
        .filter_map(|l| l.strip_prefix("HELD\t")?.split_once('\t'))
        .map(|(host, gpus)| (host, gpus.split(',').collect()))
        .collect();
    assert_eq!(held.len(), 2, "{context}");
    let stdout = outputs.stdout();
    let tasks: Vec<Vec<&str>> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("GPUS\t"))
        .map(|l| l.split('\t').collect())
        .collect();
    assert_eq!(tasks.len(), 4, "{context}");
    for t in &tasks {
        let (local, host, step_gpus, cuda) = (t[0], t[1], t[2], t[3]);
        let slurms: Vec<&str> = step_gpus.split(',').collect();
        assert_eq!(slurms.len(), 2, "{context}");
        assert!(
            slurms.iter().all(|g| !held[host].contains(g)),
            "the step got a held GPU on {host}: {context}"
        );
        let local: usize = local.parse().unwrap();
        assert_eq!(cuda, slurms[local], "{context}");
    }
}

/// The same gres GPUs for PyTorch and JAX: with `--torch-cluster` every
/// local task sees the node's GPUs (set_device(LOCAL_RANK) picks its own);
/// with `--jax-cluster` each sees its slice and JAX_LOCAL_DEVICE_IDS numbers
/// it from 0.
#[test]
fn gres_gpus_for_pytorch_and_jax() {
    let _t = testbed();
    let probe = r#"echo "GPUS $SLURM_LOCALID ${CUDA_VISIBLE_DEVICES-unset} ${LOCAL_RANK-unset} ${JAX_LOCAL_DEVICE_IDS-unset}""#;
    let lines = |framework: &str| {
        let out =
            common::srun_tasks(&["-N1", "-n2", "--gres=gpu:4", framework, "bash", "-c", probe]);
        assert!(out.status.success(), "{out:?}");
        let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.starts_with("GPUS "))
            .map(String::from)
            .collect();
        lines.sort();
        lines
    };
    assert_eq!(
        lines("--torch-cluster"),
        ["GPUS 0 0,1,2,3 0 unset", "GPUS 1 0,1,2,3 1 unset"]
    );
    assert_eq!(
        lines("--jax-cluster"),
        ["GPUS 0 0,1 unset 0,1", "GPUS 1 2,3 unset 0,1"]
    );
}

/// `--tf-gpus-per-task` and `--tf-gpus-per-node` choose the slice.
#[test]
fn gpu_settings_choose_the_slice() {
    let _t = testbed();
    let run = srun(&[
        "-N1",
        "-n2",
        "--gres=gpu:4",
        "--tf-cluster",
        "--tf-gpus-per-task=1",
    ]);
    run.assert_ran(2);
    assert_eq!(run.gpus(), [Some("0"), Some("1")]);
    let run = srun(&[
        "-N1",
        "-n1",
        "--gres=gpu:4",
        "--tf-cluster",
        "--tf-gpus-per-node=3",
    ]);
    assert_eq!(run.assert_ran(1).gpus(), [Some("0,1,2")]);
}

/// With `--gpus-per-task` Slurm binds GPUs per task itself: left alone.
#[test]
fn gpus_bound_by_slurm_are_left_alone() {
    let _t = testbed();
    let args = ["-N1", "-n2", "-w", "node3", "--gpus-per-task=1"];
    let plain = srun(&args);
    let with: Vec<&str> = args.iter().copied().chain(["--tf-cluster"]).collect();
    let run = srun(&with);
    run.assert_workers(2);
    assert_eq!(run.gpus(), plain.assert_ran(2).gpus());
    assert!(run.gpus().iter().all(Option::is_some));
}

/// A CPU-only step: TF_CONFIG, and CUDA_VISIBLE_DEVICES stays unset.
#[test]
fn cpu_only_step() {
    let _t = testbed();
    let run = srun(&["-N3", "-n3", "--tf-cluster"]);
    run.assert_workers(3);
    assert_eq!(run.gpus(), [None; 3]);
}

/// The nodes' kernel files as the NVIDIA driver and sysfs show them, on the
/// shared /home: GPU i's minor i at PCI 0000:0i:00.0, GPUs 0-1 near CPU 0
/// and 2-3 near CPU 1 (NUMA node 0 holds both). Only the plugin's test build
/// reads them, under TF_CLUSTER_TEST_KERNEL_ROOT (a release build reads `/`).
fn kernel_fixture() -> &'static str {
    let root = common::run_dir().join("home/alice/tfc-kernel");
    let write = |path: &str, text: &str| {
        let file = root.join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, text).unwrap();
    };
    write("sys/devices/system/node/node0/cpulist", "0-1\n");
    for gpu in 0..4 {
        let pci = format!("0000:0{gpu}:00.0");
        let info = format!("Model: \t\t Fixture\nDevice Minor: \t {gpu}\nBus Location: \t {pci}\n");
        write(&format!("proc/driver/nvidia/gpus/{pci}/information"), &info);
        let near = if gpu < 2 { "0\n" } else { "1\n" };
        write(&format!("sys/bus/pci/devices/{pci}/local_cpulist"), near);
        write(&format!("sys/bus/pci/devices/{pci}/numa_node"), "0\n");
    }
    "TF_CLUSTER_TEST_KERNEL_ROOT=/home/alice/tfc-kernel"
}

/// Each task's rank, its CPUs (Cpus_allowed_list) and TF_CLUSTER_CPUS.
const CPU_PROBE: &str = r#"printf 'CPU %s %s %s\n' "$SLURM_PROCID" "$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)" "${TF_CLUSTER_CPUS-unset}""#;

/// `srun ARGS` with the fixture: each rank's (CPUs, TF_CLUSTER_CPUS), and
/// the step's text for messages.
fn cpus_of(args: &[&str], command: &[&str]) -> (Vec<(String, String)>, String) {
    let mut all = vec!["--time=2"];
    all.extend_from_slice(args);
    all.extend_from_slice(command);
    let out = common::srun_tasks_env(&[kernel_fixture()], &all);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let text = format!(
        "srun {}:\n{stdout}{}",
        all.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut ranks: Vec<(u32, String, String)> = stdout
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.strip_prefix("CPU ")?.split(' ').collect();
            Some((f[0].parse().ok()?, f[1].to_string(), f.get(2)?.to_string()))
        })
        .collect();
    ranks.sort();
    let ranks = ranks.into_iter().map(|(_, c, v)| (c, v)).collect();
    (ranks, text)
}

/// Each task runs on the CPUs near the GPU it uses, against Slurm's own
/// binding (the testbed's task/none binds none: every task would run on
/// 0-1), with the fixture: GPUs 0-1 near CPU 0, 2-3 near CPU 1. Under each
/// way of giving GPUs: TensorFlow's slices, Slurm's per-task binding and
/// a --gpu-bind map, PyTorch's LOCAL_RANK-th GPU (seen from a Python thread
/// started before any framework); behind the container stand-in (its
/// task_init moves the task first). An explicit --cpu-bind wins, said once;
/// --tf-bind=off binds nothing.
#[test]
fn tasks_are_born_next_to_their_gpus() {
    let bed = common::exclusive();
    let fault = "required /opt/tf-cluster/libtf_cluster_fault.so\n";
    bed.plugstack(fault);
    let node1 = ["-N1", "-w", "node1"];
    let sh = ["sh", "-c", CPU_PROBE];
    let cases: [(&[&str], &[&str]); 3] = [
        (&["-n2", "--gres=gpu:4", "--tf-cluster"], &["0", "1"]),
        (
            &["-n4", "--gpus-per-task=1", "--tf-cluster"],
            &["0", "0", "1", "1"],
        ),
        (
            &[
                "-n2",
                "--gres=gpu:4",
                "--gpu-bind=map_gpu:3,0",
                "--tf-cluster",
            ],
            &["1", "0"],
        ),
    ];
    for (args, want) in cases {
        let args: Vec<&str> = node1.iter().chain(args).copied().collect();
        let (ranks, text) = cpus_of(&args, &sh);
        let want: Vec<(String, String)> = want
            .iter()
            .map(|c| (c.to_string(), c.to_string()))
            .collect();
        assert_eq!(ranks, want, "{text}");
    }
    // PyTorch's LOCAL_RANK-th GPU, seen from a Python thread started before
    // any framework: its CPUs are the task's.
    let code = "import threading\n\
        seen = []\n\
        t = threading.Thread(target=lambda: seen.append(open('/proc/thread-self/status').read()))\n\
        t.start(); t.join()\n\
        import os\n\
        line = [l for l in seen[0].splitlines() if l.startswith('Cpus_allowed_list')][0]\n\
        print('CPU', os.environ['SLURM_PROCID'], line.split()[1], os.environ.get('TF_CLUSTER_CPUS'))\n";
    let torch = [
        "-N1",
        "-w",
        "node1",
        "-n4",
        "--gres=gpu:4",
        "--torch-cluster",
    ];
    let (ranks, text) = cpus_of(&torch, &["python3", "-c", code]);
    let want = ["0", "0", "1", "1"].map(|c| (c.to_string(), c.to_string()));
    assert_eq!(ranks, want, "{text}");
    // An explicit --cpu-bind wins, said once; --tf-bind=off: Slurm's.
    let tf = ["-N1", "-w", "node1", "-n2", "--gres=gpu:4", "--tf-cluster"];
    for extra in ["--cpu-bind=cores", "--tf-bind=off"] {
        let args: Vec<&str> = tf.iter().copied().chain([extra]).collect();
        let (ranks, text) = cpus_of(&args, &sh);
        let unbound = ("0-1".to_string(), "unset".to_string());
        assert_eq!(ranks, [unbound.clone(), unbound], "{text}");
        let said = text
            .matches("wins: each task keeps Slurm's binding")
            .count();
        assert_eq!(said, usize::from(extra != "--tf-bind=off"), "{text}");
    }
    // Behind the container stand-in, which moves the task in its task_init.
    bed.plugstack(&format!(
        "required {}\n{fault}",
        common::standin::STANDIN_SO
    ));
    let image = ["--container-image=/opt/tfc-images/busybox"];
    let args: Vec<&str> = tf.iter().chain(&image).copied().collect();
    let (ranks, text) = cpus_of(&args, &sh);
    let want = [("0", "0"), ("1", "1")].map(|(c, v)| (c.to_string(), v.to_string()));
    assert_eq!(ranks, want, "{text}");
}

/// The IMEX channels of each node's /dev, as Slurm's switch/nvidia_imex
/// would make them (`names`: channel files, each a character device).
fn imex_channels(node: &str, names: &[&str]) {
    let mut script = String::from(
        "rm -rf /dev/nvidia-caps-imex-channels && mkdir -p /dev/nvidia-caps-imex-channels",
    );
    for (minor, name) in names.iter().enumerate() {
        script += &format!(" && mknod -m 666 /dev/nvidia-caps-imex-channels/{name} c 236 {minor}");
    }
    let out = common::on(node, &["sh", "-c", &script]);
    assert!(out.status.success(), "{node}: {out:?}");
}

/// On nodes whose /proc/devices (the test build's fixture root) names the
/// IMEX channels' device, a step over two nodes runs only where each task
/// sees exactly one channel: none, or two on one node, refuses that node's
/// task before exec, naming the node, and fails the step (the other node's
/// task, which saw its one channel, may start before the refusal ends the
/// step); an exported NCCL_CUMEM_ENABLE=0 is said once and the step runs; a
/// one-node step needs no channel.
#[test]
fn a_multi_node_step_needs_one_imex_channel_in_each_task() {
    let bed = common::exclusive();
    bed.plugstack("required /opt/tf-cluster/libtf_cluster_fault.so\n");
    let root = common::run_dir().join("home/alice/tfc-imex/proc");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(
        root.join("devices"),
        "Character devices:\n  1 mem\n195 nvidia\n236 nvidia-caps-imex-channels\n\nBlock devices:\n  8 sd\n",
    )
    .unwrap();
    let fixture = "TF_CLUSTER_TEST_KERNEL_ROOT=/home/alice/tfc-imex";
    let step = |nodes: &str, extra: &[&str]| {
        let n = if nodes.contains(',') { "-n2" } else { "-n1" };
        let mut args = vec!["--time=2", "-w", nodes, n, "--tf-cluster"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["sh", "-c", "echo RAN-$SLURM_PROCID"]);
        let out = common::srun_tasks_env(&[fixture], &args);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    };
    let two = "node1,node2";
    imex_channels("node1", &[]);
    imex_channels("node2", &["channel0"]);
    let (ok, text) = step(two, &[]);
    assert!(!ok && !text.contains("RAN-0"), "{text}");
    assert!(
        text.contains("node1: this multi-node step's task sees no IMEX channel in /dev/nvidia-caps-imex-channels"),
        "{text}"
    );
    // One node alone needs none; --tf-imex=off: no check.
    let (ok, text) = step("node1", &[]);
    assert!(ok && text.contains("RAN-0"), "{text}");
    let (ok, text) = step(two, &["--tf-imex=off"]);
    assert!(
        ok && text.contains("RAN-0") && text.contains("RAN-1"),
        "{text}"
    );
    imex_channels("node1", &["channel3"]);
    let (ok, text) = step(two, &[]);
    assert!(
        ok && text.contains("RAN-0") && text.contains("RAN-1"),
        "{text}"
    );
    assert!(!text.contains("NVLink"), "{text}");
    imex_channels("node2", &["channel0", "channel1"]);
    let (ok, text) = step(two, &[]);
    assert!(!ok && !text.contains("RAN-1"), "{text}");
    assert!(
        text.contains(
            "node2: this multi-node step's task sees 2 IMEX channels (channel0, channel1)"
        ),
        "{text}"
    );
    imex_channels("node2", &["channel0"]);
    let (ok, text) = step(two, &["--export=ALL,NCCL_CUMEM_ENABLE=0"]);
    assert!(ok && text.contains("RAN-1"), "{text}");
    assert_eq!(
        text.matches("NCCL_CUMEM_ENABLE=0 is exported: NCCL uses the network")
            .count(),
        1,
        "{text}"
    );
    for node in ["node1", "node2"] {
        common::on(node, &["rm", "-rf", "/dev/nvidia-caps-imex-channels"]);
    }
    // No channel directory: auto checks nothing; required (the site's or
    // the step's word) refuses the task that sees no channel.
    let (ok, text) = step(two, &[]);
    assert!(ok && text.contains("RAN-1"), "{text}");
    let (ok, text) = step(two, &["--tf-imex=required"]);
    assert!(!ok && !text.contains("RAN-"), "{text}");
    assert!(
        text.contains(
            "this multi-node step's task sees no IMEX channel in /dev/nvidia-caps-imex-channels"
        ),
        "{text}"
    );
}
