//! Hostile values and hints never mislead the plugin, block a task or drain
//! a node: values Slurm sets over what a user exports, a FIFO as the host
//! file, forged het variables; without srun's map (withheld by a fault of the
//! test build) each hint is checked and the step fails closed.

use crate::common;

use std::time::Duration;

use common::{Run, exclusive, exec, exec_for, srun, srun_env, testbed};

use super::refused_input::{assert_healthy, assert_next_step_runs, refusal_fault};

/// A refused step: non-zero exit, no task ran, one message exactly `want`,
/// and the node takes the next good step.
fn assert_clean_failure(case: &str, run: &Run, want: &str) {
    if let Some(fault) = refusal_fault(run, want) {
        panic!("{case}: {fault}\n{}", run.stderr);
    }
    assert_next_step_runs(case, "node1");
}

/// Values Slurm sets itself override what a user exports before srun, and
/// the layout variables a user can export into the task (distribution, het
/// components, host file) are not read when srun's map is there: such
/// hostile values never mislead the plugin, and the step is right.
#[test]
fn hostile_values_are_harmless() {
    let _t = testbed();
    let long = format!("SLURM_STEP_NODELIST={}", "x[".repeat(5_000));
    let long_het = format!(
        "--export=ALL,SLURM_HET_SIZE=1,SLURM_JOB_NODELIST_HET_GROUP_0={}",
        ",".repeat(10_000)
    );
    for export in [
        "--export=ALL,SLURM_HET_SIZE=lots",
        "--export=ALL,SLURM_HET_SIZE=99999",
        "--export=ALL,SLURM_HET_SIZE=2",
        "--export=ALL,SLURM_HET_SIZE=1,SLURM_JOB_NODELIST_HET_GROUP_0=node[",
        "--export=ALL,SLURM_HET_SIZE=1,SLURM_JOB_NODELIST_HET_GROUP_0=node9",
        &long_het,
        "--export=ALL,SLURM_DISTRIBUTION=diagonal",
        "--export=ALL,SLURM_DISTRIBUTION=arbitrary,SLURM_HOSTFILE=/dev/zero",
        "--export=ALL,SLURM_TOPOLOGY_ADDR_PATTERN=switch.node",
    ] {
        let run = srun(&[
            "-N2",
            "-n4",
            "--resv-ports=0",
            "--tf-port-base=8888",
            export,
            "--tf-cluster",
        ]);
        run.assert_workers(4);
    }
    for var in [
        "SLURM_STEP_NODELIST=garbage[",
        &long,
        "SLURM_STEP_TASKS_PER_NODE=9(x",
        "SLURM_STEP_NUM_TASKS=77",
        "SLURM_PROCID=7",
        "SLURM_GTIDS=5",
        "CUDA_VISIBLE_DEVICES=0;rm -rf",
    ] {
        let run = srun_env(
            &[var],
            &[
                "-N2",
                "-n4",
                "--resv-ports=0",
                "--tf-port-base=8888",
                "--tf-cluster",
            ],
        );
        run.assert_workers(4);
        assert_eq!(run.gpus(), [None; 4], "{var}");
    }
}

/// A faked arbitrary distribution whose host file is the FIFO [`make_fifo`]
/// makes.
const FIFO_HOSTS: &str =
    "--export=ALL,SLURM_DISTRIBUTION=arbitrary,SLURM_HOSTFILE=/home/alice/fifo";

/// A FIFO at /home/alice/fifo, which no reader may block on.
fn make_fifo() {
    let made = exec(&[
        "bash",
        "-c",
        "rm -f /home/alice/fifo && mkfifo /home/alice/fifo",
    ]);
    assert!(made.status.success(), "{made:?}");
}

/// A hostile host file: a FIFO as SLURM_HOSTFILE, with a faked arbitrary distribution,
/// neither blocks nor drains: with srun's map it is never read; without it
/// (the map withheld by a fault) it is refused at once.
#[test]
fn a_fifo_host_file_never_blocks_a_task() {
    let _t = exclusive();
    make_fifo();
    let run = srun(&["-N1", "-n1", "-w", "node1", FIFO_HOSTS, "--tf-cluster"]);
    run.assert_workers(1);
    assert_healthy("fifo with map", "node1");
}

/// Forged het variables: exported het variables claiming node2 runs rank 0 cannot
/// mislead any task: srun's map is the truth.
#[test]
fn faked_het_variables_cannot_misplace_rank_0() {
    let _t = exclusive();
    let export = "--export=ALL,SLURM_HET_SIZE=2,SLURM_JOB_NODELIST_HET_GROUP_0=node2,SLURM_JOB_NODELIST_HET_GROUP_1=node1";
    let run = srun(&[
        "-N2",
        "-n2",
        "-w",
        "node[1-2]",
        "--resv-ports=0",
        "--tf-port-base=8888",
        export,
        "--tf-cluster=chief:1,worker:1",
    ]);
    run.assert_ran(2)
        .assert_tf_config(&[("chief", 1), ("worker", 1)], 8888);
    assert_healthy("faked het", "node1");
}

/// Without srun's map (withheld by a fault in the test build), the tasks
/// rebuild the layout and every hostile hint is checked, never trusted:
/// a FIFO host file is refused at once (a hostile host file), faked het
/// variables fail rank 0's node-name check (forged het variables);
/// registration failing in slurmstepd fails the step that asked (a failed
/// registration) and no other.
#[test]
fn without_the_map_hostile_hints_fail_closed() {
    let bed = exclusive();
    bed.plugstack("required /opt/tf-cluster/libtf_cluster_fault.so\n");
    let no_map = "TF_CLUSTER_FAULT=layout_rpc";
    let run = srun_env(&[no_map], &["-N2", "-n4", "--tf-cluster"]);
    run.assert_workers(4);
    make_fifo();
    let run = srun_env(
        &[no_map],
        &["-N1", "-n1", "-w", "node1", FIFO_HOSTS, "--tf-cluster"],
    );
    assert_clean_failure(
        "fifo without map",
        &run,
        "cannot read /home/alice/fifo: it is a FIFO, not a regular file",
    );
    let het = "--export=ALL,SLURM_HET_SIZE=2,SLURM_JOB_NODELIST_HET_GROUP_0=node2,SLURM_JOB_NODELIST_HET_GROUP_1=node1";
    let run = srun_env(
        &[no_map],
        &[
            "-N2",
            "-n2",
            "-w",
            "node[1-2]",
            "--resv-ports=0",
            het,
            "--tf-cluster=chief:1,worker:1",
        ],
    );
    assert!(
        run.tasks.iter().all(|t| t.tf_config.is_none()),
        "{:?}",
        run.tasks
    );
    assert!(
        run.stderr.contains("is not the one Slurm made"),
        "{}",
        run.stderr
    );
    let reg = "--export=ALL,TF_CLUSTER_FAULT=register";
    let run = srun(&["-N1", "-n1", "-w", "node2", reg, "--tf-cluster"]);
    assert_clean_failure(
        "registration failed",
        &run,
        "slurmstepd could not register the plugin's options (see slurmd's log), so this step's --tf-cluster cannot be read: failing rather than running without TF_CONFIG",
    );
    srun(&["-N1", "-n1", "-w", "node2", reg]).assert_ran(1);
    let garbage = srun_env(
        &["TF_CLUSTER_FAULT=map_garbage"],
        &["-N1", "-n1", "--tf-cluster"],
    );
    assert_clean_failure(
        "garbage map",
        &garbage,
        "bad SLURM_TF_CLUSTER runs \"garbage\": \"garbage\" is not a number",
    );
    assert_healthy("no map", "node2");
}

/// What the hostile user's srun forges, aimed at bob's job `victim`:
/// every variable that names a job or a heterogeneous job's parts.
fn forged(victim: u32) -> [String; 2] {
    [
        "LD_PRELOAD=/opt/tf-cluster/forged_srun.so".into(),
        format!(
            "TFC_FORGE=SLURM_JOB_ID={victim},SLURM_JOBID={victim},SLURM_HET_SIZE=2,SLURM_JOB_ID_HET_GROUP_0={victim},SLURM_JOB_ID_HET_GROUP_1={victim},SLURM_HET_JOB_ID={victim},SLURM_ARRAY_JOB_ID={victim}"
        ),
    ]
}

/// `srun ARGS` as alice, with the srun forging what names bob's `victim`.
fn forged_srun(victim: u32, args: &[&str]) -> std::process::Output {
    let [preload, forge] = forged(victim);
    let mut cmd = vec!["env", &preload, &forge, "srun", "-N1", "-w", "node2"];
    cmd.extend_from_slice(args);
    exec_for(120, &cmd)
}

/// bob's job: still running its step, never requeued.
fn assert_untouched(victim: u32, ctx: &str) {
    let show = common::on(
        "ctl",
        &["scontrol", "-o", "show", "job", &victim.to_string()],
    );
    let record = String::from_utf8_lossy(&show.stdout);
    assert!(
        record.contains("JobState=RUNNING") && record.contains("Restarts=0"),
        "bob's job {victim} was touched:\n{record}\n{ctx}"
    );
    assert!(
        common::step_running(victim),
        "bob's step {victim}.0 was ended:\n{ctx}"
    );
}

/// alice's srun, preloaded with a library that sets SLURM_JOB_ID (and the
/// heterogeneous job's variables) to bob's job just as the plugin hands its
/// word over, so that slurmstepd receives them; its step exits with its
/// `--tf-requeue-on` code. slurmstepd requeues as root the job slurmctld
/// records for alice's step: bob's job, named as a heterogeneous leader by
/// that SLURM_JOB_ID, is not requeued.
#[test]
fn a_forged_srun_cannot_aim_the_requeue_at_another_users_job() {
    let _t = testbed();
    let victim = common::bobs_job("node2");
    let requeue = forged_srun(victim, &["--tf-requeue-on=43", "sh", "-c", "exit 43"]);
    let text = String::from_utf8_lossy(&requeue.stderr).into_owned();
    assert_eq!(requeue.status.code(), Some(43), "{text}");
    std::thread::sleep(Duration::from_secs(2));
    assert_untouched(victim, &text);
    let _ = common::on("ctl", &["scancel", &victim.to_string()]);
}

/// The same forged srun runs a step that the preflight refuses on its node
/// (a port a task would listen on is held): slurmstepd ends the refused
/// step as root, and only alice's: bob's step, the forged "leader", still
/// runs.
#[test]
fn a_forged_srun_cannot_aim_the_kill_at_another_users_job() {
    let _t = testbed();
    let victim = common::bobs_job("node2");
    const PORT: u16 = 27_779;
    let hold = format!(
        "setsid python3 -c 'import socket, time; s = socket.socket(); s.bind((\"0.0.0.0\", {PORT})); s.listen(); time.sleep(60)' </dev/null >/dev/null 2>&1 & echo $! > /tmp/tfc-forged-hold.pid; for i in $(seq 50); do ss -Hltn 'sport = :{PORT}' | grep -q . && exit 0; sleep 0.1; done; exit 1"
    );
    assert!(common::on("node2", &["bash", "-c", &hold]).status.success());
    let base = format!("--tf-port-base={PORT}");
    let refused = forged_srun(
        victim,
        &[
            "--resv-ports=0",
            "--tf-cluster",
            &base,
            "sh",
            "-c",
            "sleep 20; echo finished",
        ],
    );
    let _ = common::on(
        "node2",
        &["bash", "-c", "kill $(cat /tmp/tfc-forged-hold.pid)"],
    );
    let text = String::from_utf8_lossy(&refused.stderr).into_owned();
    assert_ne!(refused.status.code(), Some(0), "{text}");
    assert!(
        text.contains(&format!("port {PORT}")),
        "not the preflight's refusal:\n{text}"
    );
    std::thread::sleep(Duration::from_secs(3));
    assert_untouched(victim, &text);
    let _ = common::on("ctl", &["scancel", &victim.to_string()]);
    common::assert_no_node_drained();
}
