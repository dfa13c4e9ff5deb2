//! How the options reach a step: srun, sbatch and salloc list them,
//! `#SBATCH --tf-cluster` reaches the job's steps, plugstack.conf arguments
//! are the site's defaults (the bad ones: refused_input.rs).

use crate::common;

use common::{exclusive, sbatch, srun, testbed};

/// srun, sbatch and salloc list every option with its description.
#[test]
fn help_lists_every_option() {
    let _t = testbed();
    for tool in ["srun", "sbatch", "salloc"] {
        let out = common::exec(&[tool, "--help"]);
        // Slurm wraps each description: its lines joined by one space.
        let help = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        for (option, words) in [
            (
                "--tf-cluster=ROLE:N,...",
                "set TF_CONFIG and CUDA_VISIBLE_DEVICES",
            ),
            ("--tf-port-base=N", "first port of each node's tasks"),
            ("--tf-gpus-per-node=N", "GPUs to share on each node"),
            ("--tf-gpus-per-task=N", "GPUs per task"),
            (
                "--tf-auto-set-gpu=true|false",
                "set each task's CUDA_VISIBLE_DEVICES",
            ),
            ("--tf-rpc-layer=NAME", "rpc_layer in TF_CONFIG"),
        ] {
            assert!(
                help.contains(option) && help.contains(words),
                "{tool} --help lacks {option}"
            );
        }
    }
}

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

/// Site defaults from plugstack.conf arguments; a step's option wins (bad
/// arguments: refused_input.rs's bad_plugstack_arguments).
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
