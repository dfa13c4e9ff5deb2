//! The testbed with the job step manager (docker/testbed.sh TFC_STEPMGR=1:
//! `SlurmctldParameters=enable_stepmgr`, `PrologFlags=Contain`), where Slurm
//! 26.05's `srun --async` hands a step to the job's step manager and returns
//! after "Submitted step J.S". That srun runs `init_post_opt` but never
//! `local_user_init`, so the tasks get srun's early word only, never its
//! task map. Each case runs in a batch job: the async step, then the
//! script waits until slurmctld no longer lists it, then reads sacct's state
//! of the step (real accounting). Forky only: `--async` is 26.05's.

mod common;

use common::outputs::Outputs;
use common::{PROBE, exec, messages, testbed_with_stepmgr};

/// What an async step left: its id, each task's output (by Slurm's task
/// id), sacct's state of the step, and the job's log (the script's lines).
struct Async {
    step: String,
    outputs: Outputs,
    state: String,
    log: String,
}

/// The batch job's script: `srun --async SRUN_ARGS bash -c PROBE` with each
/// task's output in a file of its own, then a wait (up to 60 s) until the
/// step has ended, then sacct's state of the step (until accounting has it).
fn script(outputs: &Outputs, srun_args: &str) -> String {
    let [out, err] = outputs.srun_args();
    let probe = PROBE.replace('\'', r"'\''");
    format!(
        r#"submitted=$(srun --async {out} {err} {srun_args} bash -c '{probe}' 2>&1)
echo "srun: $? $submitted"
step=$(printf '%s\n' "$submitted" | sed -n 's/.*Submitted step \([0-9]*\.[0-9]*\).*/\1/p')
echo "step=$step"
[ -n "$step" ] || exit 3
for _ in $(seq 600); do scontrol show step "$step" >/dev/null 2>&1 || break; sleep 0.1; done
for _ in $(seq 100); do
  state=$(sacct -n -P -j "$step" -o JobID,State 2>/dev/null | sed -n "s/^$step|//p" | head -n1)
  case "$state" in ''|RUNNING|PENDING) sleep 0.2 ;; *) break ;; esac
done
echo "state=$state"
"#
    )
}

/// Runs one async step (`srun --async SRUN_ARGS`) in a 3-node batch job
/// submitted with `sbatch SBATCH_ARGS`.
fn async_step(tag: &str, sbatch_args: &[&str], srun_args: &str) -> Async {
    let outputs = Outputs::new(tag);
    let file = format!("{}/job.sh", outputs.path());
    let text = format!("#!/bin/bash\n{}", script(&outputs, srun_args));
    let wrote = exec(&[
        "bash",
        "-c",
        &format!("cat > {file} <<'TFC_EOF'\n{text}TFC_EOF\nchmod 755 {file}"),
    ]);
    assert!(wrote.status.success(), "{wrote:?}");
    let mut args = vec!["-N3", "-n6"];
    args.extend_from_slice(sbatch_args);
    args.push(&file);
    let (code, said) = outputs.sbatch(120, &[], &args);
    let log = exec(&["cat", &format!("{}/job.log", outputs.path())]);
    let log = format!("{said}{}", String::from_utf8_lossy(&log.stdout));
    assert_eq!(code, Some(0), "{log}");
    let field = |key: &str| {
        log.lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("no {key} in the job's log:\n{log}"))
            .to_string()
    };
    Async {
        step: field("step="),
        state: field("state="),
        outputs,
        log,
    }
}

impl Async {
    /// Every task's stderr, in task order.
    fn stderr(&self) -> String {
        self.outputs.all_stderr()
    }

    /// The step was refused in every one of its 6 tasks, each saying why
    /// in one line of the plugin that names `wanted`, none with a word of a
    /// heterogeneous step; no task ran the command; sacct does not show it
    /// as a success.
    fn assert_refused(&self, wanted: &str) {
        let tasks = self.outputs.steps();
        let all = format!("{}\n{}", self.log, self.outputs.dump());
        assert_eq!(tasks.len(), 6, "{all}");
        for ((_, step, task), output) in &tasks {
            assert!(self.step.ends_with(&format!(".{step}")), "{all}");
            assert!(!output.stdout.contains("TASK\t"), "task {task} ran\n{all}");
            let said = messages(&output.stderr);
            assert!(
                said.iter().any(|m| m.contains(wanted)),
                "task {task}: no line naming {wanted:?}\n{all}"
            );
            assert!(
                said.iter().all(|m| !m.contains("heterogeneous")),
                "task {task}: a heterogeneous step's message\n{all}"
            );
        }
        assert!(
            self.state.starts_with("FAILED"),
            "sacct: {}\n{all}",
            self.state
        );
    }
}

/// What a task of an async step says when it has no task map: that the step
/// is an async one, whose srun ran no `local_user_init`; for each framework
/// option given to srun.
#[test]
fn every_framework_option_on_an_async_step_says_it_is_async() {
    let _t = testbed_with_stepmgr();
    for option in ["--tf-cluster", "--torch-cluster", "--jax-cluster"] {
        let run = async_step(&format!("async{option}"), &[], option);
        run.assert_refused("--async");
    }
}

/// A refused async step with `--tf-record`: no task ran, so `tf-cluster
/// postmortem` finds no record of it or one where no rank ended well.
#[test]
fn a_refused_async_steps_record_shows_no_success() {
    let _t = testbed_with_stepmgr();
    let dir = format!("/home/alice/tfc-record-async-{}", std::process::id());
    let run = async_step(
        "async-record",
        &[],
        &format!("--tf-cluster --tf-record={dir}"),
    );
    run.assert_refused("--async");
    let pm = exec(&[
        "timeout",
        "20",
        "tf-cluster",
        "postmortem",
        &run.step,
        "--tf-record",
        &dir,
    ]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&pm.stdout),
        String::from_utf8_lossy(&pm.stderr)
    );
    eprintln!("postmortem {}: {:?}\n{text}", run.step, pm.status.code());
    exec(&["rm", "-rf", &dir]);
    let ended_well = text
        .lines()
        .filter(|l| {
            l.split_whitespace()
                .next()
                .is_some_and(|w| w.parse::<u32>().is_ok())
        })
        .filter(|l| l.contains("exit 0"))
        .count();
    assert_eq!(ended_well, 0, "{text}");
}

/// The same for a framework option inherited from sbatch: srun --async is
/// given none.
#[test]
fn an_async_step_inheriting_tf_cluster_from_sbatch_says_it_is_async() {
    let _t = testbed_with_stepmgr();
    let run = async_step("async-inherited", &["--tf-cluster"], "");
    run.assert_refused("--async");
}

/// The control: an async step without any option of the plugin runs every
/// task, and sacct shows it COMPLETED, so the refusals above are the
/// plugin's and not the testbed's.
#[test]
fn an_async_step_without_the_plugins_options_runs() {
    let _t = testbed_with_stepmgr();
    let run = async_step("async-plain", &[], "");
    let tasks = run.outputs.steps();
    let all = format!("{}\n{}", run.log, run.outputs.dump());
    assert_eq!(tasks.len(), 6, "{all}");
    let ranks: Vec<String> = tasks
        .values()
        .filter_map(|t| t.stdout.strip_prefix("TASK\t"))
        .map(|l| l.split('\t').next().unwrap().to_string())
        .collect();
    assert_eq!(ranks, ["0", "1", "2", "3", "4", "5"], "{all}");
    assert!(run.state.starts_with("COMPLETED"), "{}\n{all}", run.state);
    assert!(run.stderr().trim().is_empty(), "{all}");
}
