//! Settings, ports, GPUs and sbatch inheritance on the real testbed (the
//! refusals: testbed_hardening.rs's every_refusal_once).

mod common;

use std::collections::BTreeSet;

use common::{exclusive, sbatch, srun, testbed};

/// `#SBATCH --tf-cluster=…` reaches the job's srun steps.
#[test]
fn sbatch_options_reach_every_step() {
    let _t = testbed();
    let run = sbatch(
        &[
            "-N2",
            "-n4",
            "--ntasks-per-node=2",
            "--tf-cluster=ps:1,worker:3",
            "--tf-port-base=2000",
        ],
        "--resv-ports=0",
    );
    run.assert_ran(4)
        .assert_tf_config(&[("ps", 1), ("worker", 3)], 2000);
}

/// A bare `#SBATCH --tf-cluster` (every task a worker) reaches the steps too.
#[test]
fn bare_sbatch_option_reaches_every_step() {
    let _t = testbed();
    let run = sbatch(&["-N3", "-n3", "--tf-cluster"], "");
    run.assert_workers(3);
}

/// Two steps at once on the same nodes, each with reserved ports: disjoint
/// addresses.
#[test]
fn concurrent_steps_with_reserved_ports_do_not_clash() {
    let _t = testbed();
    let step = || {
        std::thread::spawn(|| {
            srun(&[
                "-N2",
                "-n4",
                "-w",
                "node1,node2",
                "--ntasks-per-node=2",
                "--resv-ports=2",
                "--tf-cluster",
                "--overlap",
                "-O",
            ])
        })
    };
    let (a, b) = (step(), step());
    let (a, b) = (a.join().unwrap(), b.join().unwrap());
    let mut addresses = Vec::new();
    for run in [&a, &b] {
        run.assert_workers(4);
        let cluster = &run.tasks[0].tf_config.as_ref().unwrap()["cluster"]["worker"];
        addresses.push(
            cluster
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().to_string())
                .collect::<BTreeSet<_>>(),
        );
    }
    assert!(addresses[0].is_disjoint(&addresses[1]), "{addresses:?}");
}

/// `--gres=gpu:2` with two tasks per node: one GPU each, Slurm's ids.
#[test]
fn gres_gpus_are_sliced() {
    let _t = testbed();
    let run = srun(&[
        "-N2",
        "-n4",
        "--ntasks-per-node=2",
        "--gres=gpu:2",
        "--tf-cluster",
    ]);
    run.assert_ran(4);
    let by_local: Vec<(u32, Option<&str>)> = run
        .tasks
        .iter()
        .map(|t| (t.local, t.cuda_visible_devices.as_deref()))
        .collect();
    for (local, gpus) in by_local {
        assert_eq!(gpus, Some(if local == 0 { "0" } else { "1" }));
    }
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

/// Site defaults from plugstack.conf arguments; a step's option wins (bad
/// arguments: testbed_hardening.rs's bad_plugstack_arguments).
#[test]
fn plugstack_arguments_are_site_defaults() {
    let bed = exclusive();
    bed.plugstack(&format!(
        "required {} port-base=2000 rpc-layer=grpc\n",
        common::PLUGIN
    ));
    let run = srun(&["-N1", "-n2", "--resv-ports=0", "--tf-cluster"]);
    run.assert_ran(2)
        .assert_tf_config_rpc(&[("worker", 2)], 2000, Some("grpc"));
    let run = srun(&[
        "-N1",
        "-n2",
        "--resv-ports=0",
        "--tf-cluster",
        "--tf-port-base=3000",
        "--tf-rpc-layer=grpc+verbs",
    ]);
    run.assert_ran(2)
        .assert_tf_config_rpc(&[("worker", 2)], 3000, Some("grpc+verbs"));
}
