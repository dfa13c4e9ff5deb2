//! Faults forced inside the plugin (the `fault-injection` test build,
//! libtf_cluster_fault.so): a panic in any hook, or slurmstepd's `user_init`
//! not run, fails only the step that asked, with one line, and drains no node.

use crate::common;

use common::{assert_no_node_drained, exclusive, srun, srun_env};

use super::refused_input::{assert_healthy, refusal_fault};

/// A panic forced inside each hook (a test build with `fault-injection`):
/// one line, a failed step, the node in service, the next step fine.
#[test]
fn a_panic_in_any_hook_fails_only_the_step() {
    let so = common::plugin_dir().join("libtf_cluster_fault.so");
    assert!(
        so.exists(),
        "{} is missing: docker/matrix.sh builds it",
        so.display()
    );
    let bed = exclusive();
    bed.plugstack("required /opt/tf-cluster/libtf_cluster_fault.so\n");
    for hook in [
        "init",
        "option",
        "local_user_init",
        "user_init",
        "task_init",
    ] {
        let var = format!("TF_CLUSTER_FAULT={hook}");
        let run = srun_env(&[&var], &["-N1", "-n1", "-w", "node3", "--tf-cluster"]);
        assert_ne!(run.code, Some(0), "{hook}");
        assert!(run.tasks.is_empty(), "{hook}: {:?}", run.tasks);
        let mut msgs = run.messages();
        msgs.dedup();
        assert_eq!(msgs.len(), 1, "{hook}: {}", run.stderr);
        let msg = msgs[0];
        assert!(
            msg.starts_with("internal error at src/spank/fault.rs")
                && msg.contains(&format!("fault injected in {hook}")),
            "{hook}: {msg}"
        );
        let next = srun(&["-N1", "-n1", "-w", "node3", "--tf-cluster"]);
        next.assert_ran(1);
        assert_no_node_drained();
    }
}

/// slurmstepd did not run `user_init` (a fault of the test build: the hook
/// returns at once, the node's share unmade): a step that asked for the
/// plugin fails in every task with one line, rather than each task making
/// the share alone from inside a container; no TF_CONFIG reaches a program,
/// no node drains. A step that did not ask runs as usual under the same
/// fault, and the next step runs.
#[test]
fn without_user_init_a_step_that_asked_fails_closed() {
    let bed = exclusive();
    bed.plugstack("required /opt/tf-cluster/libtf_cluster_fault.so\n");
    let fault = "TF_CLUSTER_FAULT=no_user_init";
    let line = "slurmstepd did not run user_init for this step, so the node's share was not made: failing rather than guessing";
    for fw in ["--tf-cluster", "--torch-cluster"] {
        let run = srun_env(&[fault], &["-N2", "-n4", "-w", "node[1-2]", fw]);
        if let Some(fault) = refusal_fault(&run, line) {
            panic!("{fw}: {fault}\n{}", run.stderr);
        }
        assert_healthy(fw, "node1");
    }
    let plain = srun_env(&[fault], &["-N2", "-n4", "-w", "node[1-2]"]);
    plain.assert_ran(4);
    assert!(
        plain.tasks.iter().all(|t| t.tf_config.is_none()),
        "{:?}",
        plain.tasks
    );
    assert!(plain.messages().is_empty(), "{}", plain.stderr);
    assert_healthy("a step that did not ask", "node2");
}

/// Lines of node3's slurmd log (slurmstepd's own hooks log there) that
/// name fault `fault`.
fn fault_lines(fault: &str) -> usize {
    let log = common::on("node3", &["cat", "/var/log/slurm/slurmd.log"]);
    let want = match fault.strip_prefix("whole_") {
        Some(hook) => format!("fault injected in the whole {hook} hook"),
        None => format!("fault injected in {fault}"),
    };
    String::from_utf8_lossy(&log.stdout)
        .lines()
        .filter(|l| {
            l.contains("internal error at src/spank/")
                && l.ends_with(&format!("{want}; caught: the node stays in service"))
        })
        .count()
}

/// A panic forced in slurmstepd's own hooks (the test build): in each part
/// of `task_exit` (the record, the requeue, the kill), in `user_init`'s last
/// lines, and outside every part's guard in each whole hook. slurmstepd goes
/// on: the step ends with its own code (3), one line in slurmd's log says
/// what panicked, no node drains, and the next step runs (a panic
/// unwinding out of an `extern "C"` hook would abort slurmstepd). A
/// panic before `user_init` made the node's share fails the step closed,
/// as when slurmstepd runs no `user_init`.
#[test]
fn a_panic_in_slurmstepds_own_hooks_leaves_the_step_its_code() {
    let bed = exclusive();
    bed.plugstack("required /opt/tf-cluster/libtf_cluster_fault.so\n");
    let record = format!("--tf-record=/home/alice/tfc-faults-{}", std::process::id());
    for fault in [
        "user_init_end",
        "task_exit_record",
        "task_exit_requeue",
        "task_exit",
        "whole_user_init",
        "whole_task_init_privileged",
        "whole_task_exit",
        "whole_exit",
    ] {
        let before = fault_lines(fault);
        let var = format!("TF_CLUSTER_FAULT={fault}");
        let out = common::exec_for(
            120,
            &[
                "env",
                &var,
                "srun",
                "-N1",
                "-n1",
                "-w",
                "node3",
                "--tf-cluster",
                &record,
                "--tf-requeue-on=43",
                "sh",
                "-c",
                "exit 3",
            ],
        );
        let text = String::from_utf8_lossy(&out.stderr).into_owned();
        let (code, line) = match fault {
            "whole_user_init" => (1, Some("slurmstepd did not run user_init for this step")),
            _ => (3, None),
        };
        assert_eq!(out.status.code(), Some(code), "{fault}: {text}");
        assert!(line.is_none_or(|l| text.contains(l)), "{fault}: {text}");
        // slurmstepd writes its log as the step ends: a moment after srun.
        let mut lines = 0;
        for _ in 0..50 {
            lines = fault_lines(fault) - before;
            if lines > 0 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        assert_eq!(lines, 1, "{fault}: one line in slurmd's log\n{text}");
        assert_no_node_drained();
        srun(&["-N1", "-n1", "-w", "node3", "--tf-cluster"]).assert_ran(1);
    }
    let _ = common::exec(&["sh", "-c", "rm -rf /home/alice/tfc-faults-*"]);
}
