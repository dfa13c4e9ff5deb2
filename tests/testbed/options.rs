//! How the options reach a step: srun, sbatch and salloc list them,
//! `#SBATCH --tf-cluster` reaches the job's steps, plugstack.conf arguments
//! are the site's defaults (the bad ones: refused_input.rs).

use crate::common;

use common::{exclusive, sbatch, srun, testbed};
use tf_cluster_core::settings::{Alone, SETTINGS};

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

/// A valid value of every `--tf-<key>` of the settings table.
const SETTING_VALUES: &[(&str, &str)] = &[
    ("port-base", "9000"),
    ("port-range", "20000-29499"),
    ("gpus-per-node", "1"),
    ("gpus-per-task", "1"),
    ("auto-set-gpu", "false"),
    ("rpc-layer", "grpc"),
    ("host-template", "{}-ib"),
    ("network", "eth0"),
    ("apptainer-env", "true"),
    ("preflight", "false"),
    ("record", "/tmp"),
    ("record-log", "true"),
    ("requeue-on", "42"),
    ("requeue-max", "3"),
    ("exclude-max", "2"),
    ("roles", "a:1"),
    ("ports-per-task", "2"),
    ("bind", "off"),
    ("imex", "off"),
];

/// Every setting of the table given alone to srun (no framework option),
/// as the table says ([`Alone`]): one that would change nothing (as
/// TensorFlow's rpc_layer on a PyTorch step would) is refused by srun in
/// one line naming the option, and the command never runs, in srun's own
/// allocation and inside one; one that acts only beside another is refused
/// without it; `--tf-record` and `--tf-requeue-on` act (plain_steps_*).
/// Handed down by salloc alone, an option leaves a helper step as if the
/// plugin were absent; given to its srun, the step takes the job's too.
#[test]
fn a_setting_without_a_framework_is_refused() {
    let _t = testbed();
    let keys: Vec<&str> = SETTINGS.iter().map(|s| s.key).collect();
    let listed: Vec<&str> = SETTING_VALUES.iter().map(|(k, _)| *k).collect();
    assert_eq!(
        listed, keys,
        "SETTING_VALUES names every setting of the table"
    );
    // TensorFlow's rpc_layer given to a PyTorch step: refused too.
    let mut script = String::from(
        "srun -N1 -n1 --torch-cluster --tf-rpc-layer=grpc echo RAN-torch-rpc 2>&1; echo \"RC-torch-rpc $?\"\n",
    );
    // A step that says it wants no framework (`--tf-off`, `--X-cluster=off`)
    // runs: its other options are moot, in so many words.
    script.push_str(
        "srun -N1 -n1 --tf-record=/tmp --tf-off echo RAN-off; \
         srun -N1 -n1 --torch-cluster=off --tf-network=eth0 echo RAN-torch-off\n",
    );
    for (key, value) in SETTING_VALUES {
        script.push_str(&format!(
            "srun -N1 -n1 --tf-{key}='{value}' echo RAN-{key} 2>&1; echo \"RC-{key} $?\"\n"
        ));
    }
    let out = common::exec(&["bash", "-c", &script]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let frameworks = "(--tf-cluster, --torch-cluster, --jax-cluster or --ray-cluster)";
    for (key, _) in SETTING_VALUES {
        let alone = SETTINGS.iter().find(|s| s.key == *key).unwrap().alone;
        let line = match alone {
            Alone::Acts => {
                assert!(
                    text.contains(&format!("RAN-{key}")) && text.contains(&format!("RC-{key} 0")),
                    "--tf-{key} alone did not run:\n{text}"
                );
                assert!(!text.contains(&format!("--tf-{key} act")), "{text}");
                continue;
            }
            Alone::Beside(with) => format!(
                "--tf-{key} acts on a step without a framework option only beside --tf-{with}, which this srun is not given"
            ),
            Alone::Refused => format!(
                "--tf-{key} acts only on a step with a framework option {frameworks}; without one this step would run as if it were absent"
            ),
        };
        assert!(
            text.contains(&line),
            "--tf-{key}: no refusal {line:?}:\n{text}"
        );
        assert!(
            !text.contains(&format!("RAN-{key}")),
            "--tf-{key} ran:\n{text}"
        );
        assert!(
            !text.contains(&format!("RC-{key} 0")),
            "--tf-{key} succeeded:\n{text}"
        );
    }
    assert!(
        text.contains(
            "--tf-rpc-layer acts only with --tf-cluster, which this step does not ask for"
        ),
        "--tf-rpc-layer with --torch-cluster: no refusal:\n{text}"
    );
    assert!(
        !text.contains("RAN-torch-rpc") && !text.contains("RC-torch-rpc 0"),
        "{text}"
    );
    assert!(
        text.contains("RAN-off") && text.contains("RAN-torch-off"),
        "{text}"
    );
    // Inside an allocation (srun cannot fail there without leaving the
    // step behind: its task refuses it), and handed down by salloc: the
    // helper step (1) is left alone, with no record; the step given
    // --tf-requeue-on (2) is the plugin's, with the job's record.
    let dir = format!("/home/alice/tfc-options-inside-{}", std::process::id());
    let out = common::exec(&[
        "bash",
        "-c",
        &format!(
            "mkdir -m 700 {dir} && salloc -N1 --tf-record={dir} bash -c '\
             echo TFC_JOB $SLURM_JOB_ID; \
             srun -n1 --tf-port-base=9000 echo RAN-INSIDE 2>&1; echo \"RC-INSIDE $?\"; \
             srun -n1 echo HELPER-RAN; echo \"RC-HELPER $?\"; \
             srun -n1 --tf-requeue-on=42 echo PLAIN-RAN; echo \"RC-PLAIN $?\"'; \
             ls {dir}; rm -rf {dir}"
        ),
    ]);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("--tf-port-base acts only on a step with a framework option"),
        "inside salloc: no refusal:\n{text}"
    );
    assert!(
        !text.contains("RAN-INSIDE") && !text.contains("RC-INSIDE 0"),
        "{text}"
    );
    assert!(
        text.contains("HELPER-RAN") && text.contains("RC-HELPER 0"),
        "{text}"
    );
    assert!(
        text.contains("PLAIN-RAN") && text.contains("RC-PLAIN 0"),
        "{text}"
    );
    let job = text
        .lines()
        .find_map(|l| l.strip_prefix("TFC_JOB "))
        .unwrap_or_else(|| panic!("no job id:\n{text}"))
        .trim();
    let runs: Vec<&str> = text.lines().filter(|l| l.starts_with(job)).collect();
    assert_eq!(runs, [format!("{job}.2")], "{text}");
}

/// A step without a framework option given `--tf-record`: its tasks get
/// no variable of the plugin's, and its record has each rank's host and
/// end, which `tf-cluster postmortem` shows; `--tf-record-log` beside it
/// adds slurmd's line.
#[test]
fn plain_steps_record_each_ranks_host_and_end() {
    let _t = testbed();
    let dir = format!("/home/alice/tfc-options-plain-{}", std::process::id());
    let task = r#"echo "HOST $SLURM_PROCID $SLURMD_NODENAME"; env | grep -E "^(TF_|CUDA_VISIBLE|MASTER_|JAX_|RAY_|NCCL_|GLOO_|TP_)" | sed "s/^/VAR /"; exit $((SLURM_PROCID + 3))"#;
    let out = common::exec(&[
        "bash",
        "-c",
        &format!(
            "mkdir -m 700 {dir} && srun -N2 -n4 --ntasks-per-node=2 --tf-record={dir} --tf-record-log=true bash -c '{task}'; \
             echo \"RC $?\"; ls {dir} | sed 's/^/RUN /'"
        ),
    ]);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        text.lines().all(|l| !l.starts_with("VAR ")),
        "a variable was set:\n{text}"
    );
    assert!(!text.contains("RC 0"), "{text}");
    let run = text
        .lines()
        .find_map(|l| l.strip_prefix("RUN "))
        .unwrap_or_else(|| panic!("no record:\n{text}"))
        .to_string();
    let pm = common::exec(&["tf-cluster", "postmortem", &run, "--tf-record", &dir]);
    common::exec(&["rm", "-rf", &dir]);
    let report = String::from_utf8_lossy(&pm.stdout).into_owned();
    let ctx = format!("{text}\n{report}{}", String::from_utf8_lossy(&pm.stderr));
    assert!(pm.status.success(), "{ctx}");
    assert!(
        report.starts_with(&format!("run {run}: 4 rank(s) recorded of 4 on 2 node(s)")),
        "{ctx}"
    );
    for rank in 0..4 {
        let host = text
            .lines()
            .find_map(|l| l.strip_prefix(&format!("HOST {rank} ")))
            .unwrap_or_else(|| panic!("rank {rank} did not run:\n{ctx}"));
        let row = report
            .lines()
            .find(|l| l.starts_with(&format!("{rank} ")))
            .unwrap_or_else(|| panic!("no rank {rank}:\n{ctx}"));
        assert!(
            row.contains(host) && row.contains(&format!("exit {}", rank + 3)),
            "{row}\n{ctx}"
        );
    }
    assert!(report.contains("first failure: rank "), "{ctx}");
}
