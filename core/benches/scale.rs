//! `cargo bench -p tf-cluster-core --bench scale`: one task's resolution in
//! the largest steps, PyTorch-only and JAX-only, at 1,024 to 262,144 ranks
//! (8 per node, srun's task map as slurmstepd hands it over), beside a
//! 4,096-task TensorFlow resolution in the same run. Prints instructions
//! (callgrind) and peak heap per resolution, then criterion's times. See
//! BENCHMARKS.md.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput};
use tf_cluster_core::frameworks::{Frameworks, jax, pytorch};
use tf_cluster_core::handoff::{Handoff, Verdict};
use tf_cluster_core::hostlist::HostList;
use tf_cluster_core::runs::Runs;
use tf_cluster_core::task_map::TaskMap;
use tf_cluster_core::{Framework, Injection, Settings, Step, resolve};

#[path = "common/callgrind.rs"]
mod callgrind;
mod common;

const SIZES: [u32; 4] = [1024, 16_384, 131_072, 262_144];
const PER_NODE: u32 = 8;
const REPEAT: u64 = 10;

/// The system allocator, tracking the bytes in use and their peak.
struct Peak;

static IN_USE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator unchanged.
unsafe impl GlobalAlloc for Peak {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let now = IN_USE.fetch_add(layout.size(), Relaxed) + layout.size();
        PEAK.fetch_max(now, Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        IN_USE.fetch_sub(layout.size(), Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Peak = Peak;

/// The task of rank `rank` in a block step of `tasks` ranks, 8 per node, as
/// slurmstepd hands it to the plugin, srun's map included.
fn task_env(tasks: u32, rank: u32) -> Vec<(String, String)> {
    let nodes = tasks / PER_NODE;
    let node = rank / PER_NODE;
    let nodelist = format!("node[000001-{nodes:06}]");
    let gtids: Vec<String> = (0..PER_NODE)
        .map(|k| (node * PER_NODE + k).to_string())
        .collect();
    let mut env: Vec<(String, String)> = [
        ("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7".to_string()),
        ("HOME", "/home/alice".into()),
        ("PATH", "/usr/local/bin:/usr/bin:/bin".into()),
        ("SLURMD_NODENAME", format!("node{:06}", node + 1)),
        ("SLURM_GTIDS", gtids.join(",")),
        ("SLURM_JOB_ID", "4242".into()),
        ("SLURM_STEP_ID", "0".into()),
        ("SLURM_LOCALID", (rank % PER_NODE).to_string()),
        ("SLURM_NODEID", node.to_string()),
        ("SLURM_NTASKS", tasks.to_string()),
        ("SLURM_PROCID", rank.to_string()),
        ("SLURM_STEP_NODELIST", nodelist.clone()),
        ("SLURM_STEP_NUM_TASKS", tasks.to_string()),
        ("SLURM_STEP_RESV_PORTS", "12000-12008".into()),
        ("SLURM_STEP_TASKS_PER_NODE", format!("{PER_NODE}(x{nodes})")),
        ("SLURM_TF_CLUSTER", srun_word(&nodelist, nodes)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    env.sort();
    env
}

/// srun's word on step 4242.0: its map of [`PER_NODE`] ranks on each of
/// `nodes` nodes `nodelist`, in block order.
fn srun_word(nodelist: &str, nodes: u32) -> String {
    let n = nodes as usize;
    let hosts = HostList::parse(nodelist, n).unwrap();
    let runs = Runs::parse(&format!("0-{}*{PER_NODE}", nodes - 1), n).unwrap();
    let map = TaskMap::from_runs(4242, 0, hosts, runs).unwrap();
    let verdict = Verdict::Map {
        map,
        hosts: nodelist.to_string(),
    };
    Handoff::new(4242, 0, verdict).encode()
}

/// One framework's whole task path, as slurmstepd runs it.
fn task_path(framework: &'static Framework, env: &[(String, String)]) -> Injection {
    let settings = Settings {
        frameworks: Frameworks::only(framework),
        ..Settings::default()
    };
    let step = Step::gather(&settings, &mut common::Env(env))
        .and_then(|g| g.step())
        .expect("gather");
    resolve(&settings, &step).expect("resolve")
}

fn framework(name: &str) -> &'static Framework {
    match name {
        "pytorch" => &pytorch::FRAMEWORK,
        "jax" => &jax::FRAMEWORK,
        _ => panic!("pytorch or jax, not {name}"),
    }
}

/// The middle rank's resolution, checked against where the block layout puts it.
fn checked(name: &str, tasks: u32) -> (Vec<(String, String)>, Injection) {
    let rank = tasks / 2 + 3;
    let env = task_env(tasks, rank);
    let injection = task_path(framework(name), &env);
    let want: &[(&str, String)] = match name {
        "pytorch" => &[
            ("RANK", rank.to_string()),
            ("WORLD_SIZE", tasks.to_string()),
            ("LOCAL_RANK", "3".into()),
            ("LOCAL_WORLD_SIZE", "8".into()),
            ("GROUP_RANK", (rank / 8).to_string()),
            ("GROUP_WORLD_SIZE", (tasks / 8).to_string()),
            ("MASTER_ADDR", "node000001".into()),
            ("MASTER_PORT", "12000".into()),
            ("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7".into()),
        ],
        _ => &[
            ("JAX_COORDINATOR_ADDRESS", "node000001:12000".into()),
            ("JAX_LOCAL_DEVICE_IDS", "0".into()),
            ("CUDA_VISIBLE_DEVICES", "3".into()),
        ],
    };
    for (var, value) in want {
        assert_eq!(
            injection.get(var),
            Some(value.as_str()),
            "{name} {tasks}: {var}"
        );
    }
    (env, injection)
}

fn criterion_runs() {
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    let mut group = c.benchmark_group("scale");
    // TensorFlow at 4,096 tasks (its common bench step), in the same run.
    let tf_env = common::task_env(4096, 2048);
    let spec = common::spec(4096);
    group.bench_function("tensorflow/4096", |b| {
        b.iter(|| common::task_path(black_box(&spec), black_box(&tf_env)))
    });
    for name in ["pytorch", "jax"] {
        for tasks in SIZES {
            let (env, _) = checked(name, tasks);
            group.throughput(Throughput::Elements(u64::from(tasks)));
            group.bench_with_input(BenchmarkId::new(name, tasks), &env, |b, env| {
                b.iter(|| task_path(framework(name), black_box(env)))
            });
        }
    }
    group.finish();
    c.final_summary();
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("loop") {
        let (name, tasks, n) = (&args[2], args[3].parse().unwrap(), args[4].parse().unwrap());
        let env = task_env(tasks, tasks / 2 + 3);
        for _ in 0..n {
            black_box(task_path(framework(name), black_box(&env)));
        }
        return;
    }
    // `cargo test --all-targets` runs bench targets without `--bench`: check
    // every size once, time nothing.
    if !args.iter().any(|a| a == "--bench") {
        for name in ["pytorch", "jax"] {
            for tasks in SIZES {
                checked(name, tasks);
            }
        }
        return;
    }
    let me = std::env::current_exe().expect("own path");
    let valgrind = std::process::Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok();
    println!(
        "{:>8}  {:>8}  {:>14}  {:>10}  {:>12}",
        "framework", "ranks", "instructions", "instr/rank", "peak heap"
    );
    for name in ["pytorch", "jax"] {
        for tasks in SIZES {
            let (env, injection) = checked(name, tasks);
            drop(injection);
            let base = IN_USE.load(Relaxed);
            PEAK.store(base, Relaxed);
            black_box(task_path(framework(name), &env));
            let peak = PEAK.load(Relaxed) - base;
            let instructions = if valgrind {
                let loop_of = |n: u64| {
                    callgrind::callgrind(&me, &["loop", name, &tasks.to_string(), &n.to_string()])
                };
                let per = (loop_of(1 + REPEAT) - loop_of(1)) / REPEAT;
                format!("{per:>14}  {:>10.1}", per as f64 / f64::from(tasks))
            } else {
                format!("{:>14}  {:>10}", "-", "-")
            };
            println!(
                "{name:>8}  {tasks:>8}  {instructions}  {:>9} KiB",
                peak / 1024
            );
        }
    }
    criterion_runs();
}
