//! `cargo bench --bench instructions`: the work of one task's resolution in
//! numbers that do not depend on the machine's load: instructions (counted
//! by valgrind's callgrind), heap allocations, and the environment lookups,
//! for the step sizes of `--bench resolve`. Also checks, with strace, that
//! the task path starts no process. See BENCHMARKS.md.
//!
//! The binary runs itself under valgrind (and strace) with `loop TASKS N`,
//! once with N = 1 and once with N = 1 + REPEAT: the difference divided by
//! REPEAT is one resolution, without the program's start-up and set-up.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

#[path = "common/callgrind.rs"]
mod callgrind;
mod common;
use callgrind::callgrind;

const SIZES: [u32; 5] = [1, 64, 1024, 4096, 6000];
const REPEAT: u64 = 20;

/// The system allocator, counting calls.
struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Relaxed);
        BYTES.fetch_add(layout.size() as u64, Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Relaxed);
        BYTES.fetch_add(new_size as u64, Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Counts the environment lookups of one resolution.
struct Counted<'a> {
    env: common::Env<'a>,
    names: Vec<String>,
}

impl tf_cluster_core::Source for Counted<'_> {
    fn var(&mut self, name: &str) -> tf_cluster_core::Result<Option<String>> {
        self.names.push(name.to_string());
        self.env.var(name)
    }
}

impl tf_cluster_core::Probe for Counted<'_> {
    fn gpu_count(&mut self) -> tf_cluster_core::Result<u32> {
        self.env.gpu_count()
    }

    fn read_file(&mut self, path: &str) -> tf_cluster_core::Result<String> {
        self.env.read_file(path)
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("loop") {
        let tasks: u32 = args[2].parse().expect("TASKS");
        let n: u64 = args[3].parse().expect("N");
        run_loop(tasks, n);
        return;
    }
    if args.get(1).map(String::as_str) == Some("loop-task") {
        let tasks: u32 = args[2].parse().expect("TASKS");
        let n: u64 = args[3].parse().expect("N");
        run_task_loop(tasks, n);
        return;
    }
    // `cargo test --all-targets` runs bench targets without `--bench`: a
    // smoke run, no valgrind.
    if !args.iter().any(|a| a == "--bench") {
        run_loop(64, 1);
        run_task_loop(64, 1);
        return;
    }
    let me = std::env::current_exe().expect("own path");
    let valgrind = Command::new("valgrind").arg("--version").output().is_ok();
    if !valgrind {
        println!("valgrind is not installed (apt-get install valgrind): no instruction counts");
    }
    println!(
        "{:>6}  {:>14}  {:>12}  {:>8}  {:>11}  {:>14}  {:>8}",
        "tasks", "instructions", "instr/task", "allocs", "alloc bytes", "env lookups", "TF_CONFIG"
    );
    for tasks in SIZES {
        let (allocs, bytes, names, len) = count_one(tasks);
        let instructions = if valgrind {
            let loop_of = |n: u64| callgrind(&me, &["loop", &tasks.to_string(), &n.to_string()]);
            let (one, many) = (loop_of(1), loop_of(1 + REPEAT));
            let per = (many - one) / REPEAT;
            format!("{per:>14}  {:>12.1}", per as f64 / f64::from(tasks))
        } else {
            format!("{:>14}  {:>12}", "-", "-")
        };
        let mut distinct = names.clone();
        distinct.sort();
        distinct.dedup();
        println!(
            "{tasks:>6}  {instructions}  {allocs:>8}  {bytes:>11}  {:>14}  {len:>8}",
            format!("{} ({} names)", names.len(), distinct.len())
        );
    }
    // The plugin's split: the node's share once per node (user_init), then
    // each task's own part (task_init).
    println!(
        "\nthe task's own part, its node's share made once:\n{:>6}  {:>14}  {:>8}  {:>11}",
        "tasks", "instructions", "allocs", "alloc bytes"
    );
    for tasks in SIZES {
        let (allocs, bytes) = count_task_part(tasks);
        let instructions = if valgrind {
            let loop_of =
                |n: u64| callgrind(&me, &["loop-task", &tasks.to_string(), &n.to_string()]);
            let (one, many) = (loop_of(1), loop_of(1 + REPEAT));
            format!("{:>14}", (many - one) / REPEAT)
        } else {
            format!("{:>14}", "-")
        };
        println!("{tasks:>6}  {instructions}  {allocs:>8}  {bytes:>11}");
    }
    process_calls(&me);
}

/// The middle rank's own part, `n` times, from its node's share made once.
fn run_task_loop(tasks: u32, n: u64) {
    let rank = tasks / 2;
    let share = common::node_share(&common::spec(tasks), &common::task_env(tasks, rank));
    for _ in 0..n {
        black_box(share.task(black_box(rank), None, None).unwrap());
    }
}

/// Allocations and bytes of the middle rank's own part.
fn count_task_part(tasks: u32) -> (u64, u64) {
    let rank = tasks / 2;
    let share = common::node_share(&common::spec(tasks), &common::task_env(tasks, rank));
    let (a0, b0) = (ALLOCS.load(Relaxed), BYTES.load(Relaxed));
    black_box(share.task(rank, None, None).unwrap());
    (ALLOCS.load(Relaxed) - a0, BYTES.load(Relaxed) - b0)
}

/// The resolution of the middle rank, `n` times.
fn run_loop(tasks: u32, n: u64) {
    let env = common::task_env(tasks, tasks / 2);
    let spec = common::spec(tasks);
    for _ in 0..n {
        black_box(common::task_path(black_box(&spec), black_box(&env)));
    }
}

/// Allocations, bytes allocated, variables looked up and TF_CONFIG's length
/// for one resolution.
fn count_one(tasks: u32) -> (u64, u64, Vec<String>, usize) {
    use tf_cluster_core::{Settings, Step, resolve, roles::RoleSpec};
    let env = common::task_env(tasks, tasks / 2);
    let spec = common::spec(tasks);
    let mut source = Counted {
        env: common::Env(&env),
        names: Vec::with_capacity(64),
    };
    let (a0, b0) = (ALLOCS.load(Relaxed), BYTES.load(Relaxed));
    let mut settings = Settings::from_admin_args(["port-base=8888"]).unwrap();
    settings.roles = RoleSpec::parse(&spec).unwrap();
    let step = Step::gather(&settings, &mut source)
        .unwrap()
        .step()
        .unwrap();
    let injection = resolve(&settings, &step).unwrap();
    let (a1, b1) = (ALLOCS.load(Relaxed), BYTES.load(Relaxed));
    // The counting source's own copies of the names are not the core's.
    let own = source.names.len() as u64;
    let own_bytes: u64 = source.names.iter().map(|n| n.len() as u64).sum();
    (
        a1 - a0 - own,
        b1 - b0 - own_bytes,
        source.names,
        injection.get("TF_CONFIG").unwrap().len(),
    )
}

/// Process-creating system calls made while resolving (fork, clone, exec…):
/// a run of 1 resolution and one of 1 + REPEAT must make the same ones (the
/// program's own start), so the task path makes none.
fn process_calls(me: &std::path::Path) {
    let count = |n: u64| -> Option<usize> {
        let out = Command::new("strace")
            .args(["-f", "-qq", "-e", "trace=process"])
            .arg(me)
            .args(["loop", "4096", &n.to_string()])
            .output()
            .ok()?;
        let log = String::from_utf8_lossy(&out.stderr);
        Some(
            log.lines()
                .filter(|l| {
                    [
                        "fork(",
                        "vfork(",
                        "clone(",
                        "clone3(",
                        "execve(",
                        "execveat(",
                    ]
                    .iter()
                    .any(|c| l.contains(c))
                })
                .count(),
        )
    };
    match (count(1), count(1 + REPEAT)) {
        (Some(one), Some(many)) => println!(
            "process calls (strace, 4096 tasks): {one} for 1 resolution, {many} for {}: {} per resolution",
            1 + REPEAT,
            many.saturating_sub(one)
        ),
        _ => println!("strace is not installed: process calls not checked"),
    }
}
