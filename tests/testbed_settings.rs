//! Settings, ports, GPUs and sbatch inheritance on the real testbed (the
//! refusals: testbed_hardening.rs's every_refusal_once).

mod common;

use std::collections::BTreeSet;

use std::collections::BTreeMap;

use common::outputs::Outputs;
use common::{exclusive, exec, exec_for, reserved_ports, sbatch, srun, testbed};

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

/// `--torch-cluster --jax-cluster` with fast-network names: every task's
/// variables follow from where Slurm really ran each rank (SLURM_PROCID,
/// hostname, SLURM_LOCALID), on an uneven cyclic layout, and the `-ib`
/// names resolve on the nodes.
#[test]
fn torch_and_jax_variables_follow_the_real_layout() {
    let _t = testbed();
    let names = [
        "SLURM_PROCID",
        "SLURM_LOCALID",
        "SLURM_STEP_RESV_PORTS",
        "MASTER_ADDR",
        "MASTER_PORT",
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "GROUP_WORLD_SIZE",
        "JAX_COORDINATOR_ADDRESS",
        "TF_CONFIG",
        "TORCHELASTIC_RUN_ID",
    ];
    let probe = format!(
        "printf 'VARS\\thost=%s' \"$(hostname)\"; for v in {}; do printf '\\t%s=%s' $v \"${{!v-<unset>}}\"; done; \
         getent hosts \"$MASTER_ADDR\" >/dev/null && printf '\\tresolves=yes'; echo",
        names.join(" ")
    );
    let out = exec(&[
        "srun",
        "-N3",
        "-n5",
        "-m",
        "cyclic",
        "--resv-ports=2",
        "--torch-cluster",
        "--jax-cluster",
        "--tf-host-template={}-ib",
        "bash",
        "-c",
        &probe,
    ]);
    assert!(out.status.success(), "{out:?}");
    let tasks: Vec<BTreeMap<&str, &str>> = std::str::from_utf8(&out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("VARS\t"))
        .map(|l| l.split('\t').filter_map(|kv| kv.split_once('=')).collect())
        .collect();
    assert_eq!(tasks.len(), 5, "{out:?}");
    let by_rank = |r: usize| {
        tasks
            .iter()
            .find(|t| t["SLURM_PROCID"] == r.to_string())
            .unwrap()
    };
    let host0 = by_rank(0)["host"];
    // Nodes in the order of their first rank: PyTorch's group ranks.
    let mut order: Vec<&str> = Vec::new();
    for r in 0..5 {
        let h = by_rank(r)["host"];
        if !order.contains(&h) {
            order.push(h);
        }
    }
    for t in &tasks {
        let ports = reserved_ports(t["SLURM_STEP_RESV_PORTS"]);
        let on_host = tasks.iter().filter(|o| o["host"] == t["host"]).count();
        assert_eq!(t["MASTER_ADDR"], format!("{host0}-ib"), "{t:?}");
        assert_eq!(t["resolves"], "yes", "{t:?}");
        assert_eq!(t["MASTER_PORT"], ports[0].to_string(), "{t:?}");
        assert_eq!(
            t["JAX_COORDINATOR_ADDRESS"],
            format!("{host0}-ib:{}", ports[1]),
            "{t:?}"
        );
        assert_eq!(t["RANK"], t["SLURM_PROCID"]);
        assert_eq!(t["WORLD_SIZE"], "5");
        assert_eq!(t["LOCAL_RANK"], t["SLURM_LOCALID"]);
        assert_eq!(t["LOCAL_WORLD_SIZE"], on_host.to_string(), "{t:?}");
        let group = order.iter().position(|h| *h == t["host"]).unwrap();
        assert_eq!(t["GROUP_RANK"], group.to_string(), "{t:?}");
        assert_eq!(t["GROUP_WORLD_SIZE"], "3");
        assert_eq!(t["TF_CONFIG"], "<unset>", "only the frameworks asked for");
        assert_eq!(t["TORCHELASTIC_RUN_ID"], "<unset>");
    }
    let counts: Vec<usize> = order
        .iter()
        .map(|h| tasks.iter().filter(|t| t["host"] == *h).count())
        .collect();
    assert!(
        counts.iter().min() < counts.iter().max(),
        "an uneven layout: {counts:?}"
    );
}
