//! A step that does not ask for the plugin is not touched: the same
//! environment, in every task, as with the plugin removed from plugstack.conf.

use crate::common;

use std::collections::BTreeMap;

use common::outputs::Outputs;
use common::{exclusive, exec, srun, testbed};

/// A step without --tf-cluster is not touched.
#[test]
fn step_without_the_option_is_untouched() {
    let _t = testbed();
    let run = srun(&["-N3", "-n3", "--gres=gpu:2"]);
    run.assert_ran(3);
    assert!(run.tasks.iter().all(|t| t.tf_config.is_none()));
    assert_eq!(
        run.gpus(),
        [Some("0,1"); 3],
        "Slurm's own CUDA_VISIBLE_DEVICES"
    );
}

/// A step without any --tf- option gets exactly the environment it gets with
/// the plugin removed from plugstack.conf, in every task.
#[test]
fn steps_without_the_option_are_byte_identical() {
    let bed = exclusive();
    let env_of = || -> BTreeMap<String, BTreeMap<String, String>> {
        // Each task's environment from its own file.
        let outputs = Outputs::new("env");
        let files = outputs.srun_args();
        let mut cmd = vec!["srun", "-N3", "-n6", "--gres=gpu:2"];
        cmd.extend(files.iter().map(String::as_str));
        cmd.push("env");
        let out = exec(&cmd);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut tasks: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        for (task, output) in outputs.tasks() {
            let vars = tasks.entry(task.to_string()).or_default();
            for var in output.stdout.lines() {
                let (k, v) = var.split_once('=').unwrap_or((var, ""));
                vars.insert(k.to_string(), v.to_string());
            }
        }
        tasks
    };
    let with = env_of();
    let again = env_of();
    bed.plugstack("# no plugin\n");
    let without = env_of();
    assert_eq!(with.len(), 6);
    for (task, env) in &with {
        let (again, without) = (&again[task], &without[task]);
        assert_eq!(
            env.keys().collect::<Vec<_>>(),
            without.keys().collect::<Vec<_>>(),
            "task {task}: variables differ"
        );
        for (k, v) in env {
            // Values that differ between two runs with the same plugstack
            // (job ids, ports) are noise, and so are the job's start and end
            // times (in seconds, set by 24.11 and 26.05, not by 22.05): every
            // other one must be equal.
            let clock = k == "SLURM_JOB_START_TIME" || k == "SLURM_JOB_END_TIME";
            if again.get(k) == Some(v) && !clock {
                assert_eq!(Some(v), without.get(k), "task {task}: {k}");
            }
        }
        assert!(env.contains_key("CUDA_VISIBLE_DEVICES") && !env.contains_key("TF_CONFIG"));
    }
}
