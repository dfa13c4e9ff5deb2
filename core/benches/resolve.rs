//! `cargo bench --bench resolve`: one task's whole resolution (settings, the
//! step's environment, layout, TF_CONFIG, GPU slice) for steps of 1 to 6,000
//! tasks, and the expansion of a 10,000-node host list. See BENCHMARKS.md.

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use tf_cluster_core::hostlist::HostList;

mod common;

/// Step sizes: one task, a small job, and the largest TF_CONFIG can hold.
const SIZES: [u32; 5] = [1, 64, 1024, 4096, 6000];

fn resolve(c: &mut Criterion) {
    let mut group = c.benchmark_group("resolve");
    for tasks in SIZES {
        // The middle rank: its node's SLURM_GTIDS are checked like any other's.
        let rank = tasks / 2;
        let env = common::task_env(tasks, rank);
        let spec = common::spec(tasks);
        let injection = common::task_path(&spec, &env);
        assert_eq!(
            injection.get("CUDA_VISIBLE_DEVICES"),
            Some(expected_gpus(tasks, rank).as_str())
        );
        group.throughput(Throughput::Elements(u64::from(tasks)));
        group.bench_with_input(BenchmarkId::from_parameter(tasks), &env, |b, env| {
            b.iter(|| common::task_path(black_box(&spec), black_box(env)))
        });
    }
    group.finish();
    // The plugin's split: the node's share once per node, then each task's
    // own part (what task_init does per task).
    let mut group = c.benchmark_group("node_share");
    for tasks in SIZES {
        let env = common::task_env(tasks, tasks / 2);
        let spec = common::spec(tasks);
        group.throughput(Throughput::Elements(u64::from(tasks)));
        group.bench_with_input(BenchmarkId::from_parameter(tasks), &env, |b, env| {
            b.iter(|| common::node_share(black_box(&spec), black_box(env)))
        });
    }
    group.finish();
    let mut group = c.benchmark_group("task_part");
    for tasks in SIZES {
        let rank = tasks / 2;
        let env = common::task_env(tasks, rank);
        let spec = common::spec(tasks);
        let share = common::node_share(&spec, &env);
        let local = rank % common::TASKS_PER_NODE.min(tasks);
        assert_eq!(
            share.task(rank, Some(local), None).unwrap(),
            common::task_path(&spec, &env)
        );
        group.throughput(Throughput::Elements(u64::from(tasks)));
        group.bench_with_input(BenchmarkId::from_parameter(tasks), &share, |b, share| {
            b.iter(|| share.task(black_box(rank), Some(local), None).unwrap())
        });
    }
    group.finish();
}

/// Local task k of 4 gets GPU k; a lone task gets all four.
fn expected_gpus(tasks: u32, rank: u32) -> String {
    if tasks < common::TASKS_PER_NODE {
        let per = 4 / tasks;
        let k = rank % tasks;
        (k * per..(k + 1) * per)
            .map(|g| g.to_string())
            .collect::<Vec<_>>()
            .join(",")
    } else {
        (rank % common::TASKS_PER_NODE).to_string()
    }
}

fn hostlist(c: &mut Criterion) {
    let list = "node[00001-10000]";
    assert_eq!(HostList::parse(list, 10_000).unwrap().len(), 10_000);
    let mut group = c.benchmark_group("hostlist");
    group.throughput(Throughput::Elements(10_000));
    group.bench_function("10000_nodes", |b| {
        b.iter(|| HostList::parse(black_box(list), 10_000).unwrap())
    });
    group.finish();
}

criterion_group! {
    name = benches;
    // Short runs: the machine is small and shared; criterion's statistics
    // still give stable medians at these sizes.
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = resolve, hostlist
}
criterion_main!(benches);
