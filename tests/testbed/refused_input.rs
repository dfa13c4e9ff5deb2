//! What a user types or a site configures wrong is refused cleanly: every
//! refused option, spec and plugstack.conf argument once with its whole
//! message, none starting a task, taking a node out of service, or
//! disturbing the next step; a refused step inside an allocation leaves
//! nothing behind; an inherited spec never breaks a helper step.

use crate::common;

use common::outputs::Outputs;
use common::{
    Run, assert_no_node_drained, exclusive, exec, messages, sbatch, srun, srun_env, testbed,
};

/// What is wrong with `run` as a step refused with the one message `want`
/// (each task of a failing step prints the same one), if anything.
pub(crate) fn refusal_fault(run: &Run, want: &str) -> Option<String> {
    let mut msgs = run.messages();
    msgs.dedup();
    if run.code == Some(0) {
        Some("the step should fail".into())
    } else if !run.tasks.is_empty() {
        Some(format!("tasks ran: {:?}", run.tasks))
    } else if msgs != [want] {
        Some(format!("want [{want:?}], got {msgs:?}"))
    } else {
        None
    }
}

/// The next good step on `node` runs and gets its TF_CONFIG.
pub(crate) fn assert_next_step_runs(case: &str, node: &str) {
    let next = srun(&["-N1", "-n1", "-w", node, "--tf-cluster"]);
    next.assert_ran(1);
    assert!(next.tasks[0].tf_config.is_some(), "{case}: the next step");
}

/// How srun ends a message about a malformed spec.
const EXPECTED: &str = " (expected role:count[,role:count…], e.g. ps:1,worker:3)";

/// Malformed specs, refused by srun while it parses its options: each case,
/// the spec and what is wrong with it (srun's message: `bad --tf-cluster
/// "SPEC": WHY` and [`EXPECTED`]).
#[rustfmt::skip]
const BAD_SPECS: &[(&str, &str, &str)] = &[
    ("empty role", ":1", "entry 1 has an empty role name"),
    ("duplicate role", "ps:1,ps:1", "role ps is given twice"),
    ("zero count", "ps:0,worker:1", "role ps has count 0 (every count must be at least 1)"),
    ("negative count", "ps:-1", "role ps has count \"-1\" (not a whole number ≥ 1)"),
    ("huge count", "ps:99999999999", "role ps has count 99999999999 (too large, at most 262144)"),
    ("two colons", "worker:1:1", "role worker has count \"1:1\" (not a whole number ≥ 1)"),
    ("text count", "worker:x", "role worker has count \"x\" (not a whole number ≥ 1)"),
    ("shell in count", "worker:1;rm", "role worker has count \"1;rm\" (not a whole number ≥ 1)"),
    ("non-ASCII role", "pß:1", "role name \"pß\" has 'ß' (use a-z, 0-9 and '_', a letter first)"),
    ("space in role", "wor ker:1", "role name \"wor ker\" has ' ' (use a-z, 0-9 and '_', a letter first)"),
    ("quote in role", "wo\"rker:1", "role name \"wo\\\"rker\" has '\"' (use a-z, 0-9 and '_', a letter first)"),
    ("upper-case role", "Worker:3", "role name \"Worker\" is not lower-case, as TensorFlow job names are (write worker)"),
    ("dash in role", "my-ps:1", "role name \"my-ps\" has '-' (use a-z, 0-9 and '_', a letter first)"),
    ("two chiefs", "chief:2,worker:2", "role chief has count 2 (TensorFlow allows at most one chief)"),
    ("two evaluators", "worker:2,evaluator:2", "role evaluator has count 2 (TensorFlow allows at most one evaluator)"),
    ("master role", "master:1,worker:2", "role master is refused: TensorFlow's strategies take only chief, worker, evaluator and ps (\"Disallowed task type\"), and master is the old name of the one chief (write chief:1)"),
    ("missing colon", "worker1", "\"worker1\" has no ':count'"),
    ("leading comma", ",worker:1", "entry 1 is empty"),
    ("double comma", "ps:1,,worker:3", "entry 2 is empty"),
    ("trailing comma", "worker:1,", "entry 2 is empty"),
];

/// Every step the plugin refuses for what a user typed or exported, each
/// case once with its whole message: srun refuses while it parses its
/// options or before launch, a task before its program starts. None may
/// start a task, take a node out of service, or disturb the next step.
#[test]
fn every_refusal_once() {
    let _t = testbed();
    let long_name = format!("--tf-cluster={}:1", "a".repeat(10_000));
    let commas = format!("--tf-cluster={}", ",".repeat(10_000));
    let few_commas = format!("--tf-cluster={}", ",".repeat(3_000));
    let few_commas_why = format!(
        "bad --tf-cluster \"{}\"… (3000 bytes): entry 1 is empty{EXPECTED}",
        ",".repeat(40)
    );
    let long_rpc = format!("--tf-rpc-layer={}", "r".repeat(10_000));
    let roles: Vec<String> = (0..500).map(|i| format!("r{i}:1")).collect();
    let many_roles = format!("--tf-cluster={}", roles.join(","));
    // One line, cut at 300 characters.
    let many_roles_why = format!(
        "--tf-cluster asks for 500 tasks ({},r…",
        roles[..46].join(",")
    );
    let het_why = "rank 2 of this heterogeneous step runs on node2, not on node1 as the components that srun's task map cannot reach would take it: Slurm hands srun's variables to one component only, so lay out every component in blocks (-m block) or run the components as separate steps";
    #[rustfmt::skip]
    let cases: &[(&str, &[&str], &[&str], &str)] = &[
        // Options srun refuses while it parses them.
        ("10 KB role", &[], &["-n1", &long_name], "an option value of 10002 bytes is longer than the 4096 accepted"),
        ("10 KB of commas", &[], &["-n1", &commas], "an option value of 10000 bytes is longer than the 4096 accepted"),
        ("3 KB of commas", &[], &["-n1", &few_commas], &few_commas_why),
        ("port base 0", &[], &["-n1", "--tf-cluster", "--tf-port-base=0"], "--tf-port-base=0: a port must be 1-65535"),
        ("port base 65536", &[], &["-n1", "--tf-cluster", "--tf-port-base=65536"], "--tf-port-base=65536: a port must be 1-65535"),
        ("port base text", &[], &["-n1", "--tf-cluster", "--tf-port-base=http"], "--tf-port-base=\"http\": not a port number"),
        ("port base negative", &[], &["-n1", "--tf-cluster", "--tf-port-base=-1"], "--tf-port-base=\"-1\": not a port number"),
        ("u32 max GPUs per node", &[], &["-n1", "--tf-cluster", "--tf-gpus-per-node=4294967295"], "--tf-gpus-per-node=4294967295: at most 1024 GPUs"),
        ("GPUs per node over 1024", &[], &["-n1", "--tf-cluster", "--tf-gpus-per-node=30000"], "--tf-gpus-per-node=30000: at most 1024 GPUs"),
        ("GPUs per task over 1024", &[], &["-n1", "--tf-cluster", "--tf-gpus-per-task=2000"], "--tf-gpus-per-task=2000: at most 1024 GPUs"),
        ("gpus per node text", &[], &["-n1", "--tf-cluster", "--tf-gpus-per-node=x"], "--tf-gpus-per-node=\"x\": not a GPU count"),
        ("gpus per task negative", &[], &["-n1", "--tf-cluster", "--tf-gpus-per-task=-2"], "--tf-gpus-per-task=\"-2\": not a GPU count"),
        ("auto-set-gpu text", &[], &["-n1", "--tf-cluster", "--tf-auto-set-gpu=yesno"], "--tf-auto-set-gpu=\"yesno\": use true or false"),
        ("rpc layer quote", &[], &["-n1", "--tf-cluster", "--tf-rpc-layer=a\"b"], "--tf-rpc-layer=\"a\\\"b\": not an rpc layer name such as grpc"),
        ("rpc layer 10 KB", &[], &["-n1", "--tf-cluster", &long_rpc], "an option value of 10000 bytes is longer than the 4096 accepted"),
        // Steps srun refuses before launch.
        ("u32 max count", &[], &["-n1", "--tf-cluster=ps:4294967295"], "--tf-cluster asks for 4294967295 tasks (ps:4294967295) but the step has 1"),
        ("sum overflow", &[], &["-n1", "--tf-cluster=a:4294967295,b:4294967295"], "--tf-cluster asks for 8589934590 tasks (a:4294967295,b:4294967295) but the step has 1"),
        ("sum too small", &[], &["-n2", "--tf-cluster=ps:1"], "--tf-cluster asks for 1 tasks (ps:1) but the step has 2"),
        ("sum too large", &[], &["-n1", "--tf-cluster=ps:1,worker:1"], "--tf-cluster asks for 2 tasks (ps:1,worker:1) but the step has 1"),
        ("sum off by one", &[], &["-n3", "-N1", "--tf-cluster=chief:1,worker:1"], "--tf-cluster asks for 2 tasks (chief:1,worker:1) but the step has 3"),
        ("sum on three nodes", &[], &["-N3", "-n5", "--tf-cluster=ps:1,worker:3"], "--tf-cluster asks for 4 tasks (ps:1,worker:3) but the step has 5"),
        ("500 roles", &[], &["-n1", &many_roles], &many_roles_why),
        ("TF_CONFIG over 128 KiB", &[], &["-N3", "-n12000", "-O", "--resv-ports=0", "--tf-cluster"], "TF_CONFIG for 12000 tasks would be at least 156070 bytes, over the 131072-byte limit of one environment variable; use fewer tasks or shorter host names"),
        ("heterogeneous cyclic component", &[], &["-n1", "-w", "node3", ":", "-N2", "-n4", "-w", "node1,node2", "-m", "cyclic", "--tf-cluster"], het_why),
        // Steps whose tasks fail before their program starts.
        ("ports past 65535", &[], &["-n2", "-N1", "--resv-ports=0", "--tf-cluster", "--tf-port-base=65535"], "port base 65535 + 2 tasks on a node needs port 65536, above 65535"),
        ("gpus per task too many", &[], &["-n1", "--gres=gpu:2", "--tf-cluster", "--tf-gpus-per-task=3"], "3 GPU(s) per task × 1 task(s) on a node needs 3 GPUs, but the node has 2"),
        ("gpus per task × tasks too many", &[], &["-N1", "-n2", "--gres=gpu:2", "--tf-cluster", "--tf-gpus-per-task=2"], "2 GPU(s) per task × 2 task(s) on a node needs 4 GPUs, but the node has 2"),
        ("gpus per node too many", &[], &["-n1", "--gres=gpu:2", "--tf-cluster", "--tf-gpus-per-node=4"], "gpus-per-node is 4 but Slurm gave this step 2 GPU(s) on this node (CUDA_VISIBLE_DEVICES=0,1)"),
        ("gpus on a CPU step", &[], &["-n1", "--tf-cluster", "--tf-gpus-per-task=1"], "1 GPU(s) per task × 1 task(s) on a node needs 1 GPUs, but the node has 0"),
        // A SLURM_STEP_RESV_PORTS exported before srun is not the step's
        // reservation (srun's word says Slurm reserved none): the step runs
        // on the port base (inherited.rs,
        // a_stale_slurm_step_resv_ports_is_not_the_steps_reservation).
    ];
    let mut faults = Vec::new();
    let mut check = |case: &str, vars: &[&str], args: &[&str], want: &str| {
        let mut args = args.to_vec();
        if !args.contains(&"-w") {
            args.extend(["-w", "node1"]);
        }
        let run = srun_env(vars, &args);
        if let Some(fault) = refusal_fault(&run, want) {
            faults.push(format!("{case}: {fault}"));
        }
        assert_next_step_runs(case, "node1");
    };
    for (case, spec, why) in BAD_SPECS {
        let arg = format!("--tf-cluster={spec}");
        check(
            case,
            &[],
            &["-n1", &arg],
            &format!("bad --tf-cluster {spec:?}: {why}{EXPECTED}"),
        );
    }
    for &(case, vars, args, want) in cases {
        check(case, vars, args, want);
    }
    assert!(faults.is_empty(), "{}", faults.join("\n"));
    assert_no_node_drained();
}

/// sbatch refuses a bad option at submission; a batch job whose steps fail
/// leaves its nodes in service.
#[test]
fn bad_batch_jobs_drain_nothing() {
    let _t = testbed();
    let out = exec(&["sbatch", "-n1", "--tf-cluster=ps:x", "--wrap", "true"]);
    assert_ne!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        messages(&err),
        [format!(
            "bad --tf-cluster \"ps:x\": role ps has count \"x\" (not a whole number ≥ 1){EXPECTED}"
        )],
        "{err}"
    );
    let run = sbatch(
        &[
            "-N1",
            "-n1",
            "-w",
            "node2",
            "--tf-cluster",
            "--tf-gpus-per-task=1",
        ],
        "",
    );
    assert!(
        run.tasks.is_empty() && run.code != Some(0),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("needs 1 GPUs, but the node has 0"),
        "{}",
        run.stderr
    );
    assert_no_node_drained();
}

/// Bad plugstack.conf arguments: srun names them for steps that use the
/// plugin; other steps and the nodes are unaffected, batch jobs included.
#[test]
fn bad_plugstack_arguments() {
    let bed = exclusive();
    for (arg, why) in [
        (
            "port-base=0",
            "plugstack.conf argument port-base=0: a port must be 1-65535",
        ),
        (
            "colour=blue",
            "plugstack.conf argument unknown key \"colour\"",
        ),
        (
            "port-base",
            "plugstack.conf argument \"port-base\" is not key=value",
        ),
        (
            "gpus-per-node=many",
            "plugstack.conf argument gpus-per-node=\"many\"",
        ),
    ] {
        bed.plugstack(&format!("required {} {arg}\n", common::PLUGIN));
        let run = srun(&["-N1", "-n1", "--tf-cluster"]);
        assert_ne!(run.code, Some(0), "{arg}");
        assert!(run.tasks.is_empty(), "{arg}");
        let mut msgs = run.messages();
        msgs.dedup();
        assert!(
            msgs.len() == 1 && msgs[0].starts_with(why),
            "{arg}: {msgs:?}"
        );
        let untouched = srun(&["-N1", "-n1"]);
        untouched.assert_ran(1);
        assert!(untouched.tasks[0].tf_config.is_none(), "{arg}");
        let batch = sbatch(&["-N1", "-n1", "--tf-cluster"], "");
        assert!(
            batch.tasks.is_empty() && batch.code != Some(0),
            "{arg}: {}",
            batch.stderr
        );
        assert_no_node_drained();
    }
}

/// After a hostile case: no node left service, no step still listed (the
/// callers hold the testbed alone), and the next good step on `node` runs.
pub(crate) fn assert_healthy(case: &str, node: &str) {
    assert_no_node_drained();
    common::assert_no_step_left(case);
    assert_next_step_runs(case, node);
}

/// A refused step must not linger: a step refused inside an allocation is not left behind, and
/// the allocation's next step runs at once.
#[test]
fn a_refused_step_inside_an_allocation_does_not_outlive_srun() {
    let _t = exclusive();
    // slurmctld may list the step for a moment while it completes (seen
    // once under a load of 100 on 2 cores): wait up to 10 s for it to go.
    let script = r#"srun -n2 --tf-cluster=ps:1 true; echo "rc=$?"; for i in $(seq 20); do squeue -h -s -j "$SLURM_JOB_ID" -o '%i' | grep -q '\.0$' || break; sleep 0.5; done; squeue -h -s -j "$SLURM_JOB_ID" -o 'STEP %i'; timeout 60 srun -n2 --tf-cluster hostname; echo "next=$?""#;
    let out = exec(&["salloc", "-N1", "-n2", "-w", "node3", "bash", "-c", script]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stdout.contains("rc=0"), "{stdout}");
    assert_eq!(
        messages(&stderr),
        ["--tf-cluster asks for 1 tasks (ps:1) but the step has 2"],
        "{stderr}"
    );
    let steps: Vec<&str> = stdout.lines().filter(|l| l.starts_with("STEP ")).collect();
    assert!(
        steps.iter().all(|s| !s.ends_with(".0")),
        "step 0 left behind: {stdout}"
    );
    assert!(
        stdout.contains("next=0") && stdout.matches("node3").count() == 2,
        "{stdout}\n{stderr}"
    );
    assert_healthy("refused in salloc", "node3");
}

/// An inherited spec meets a helper step: a helper step of another size inside a job whose spec it
/// inherited is left alone with one warning; `--tf-cluster=off` opts out;
/// a spec given to that srun itself is still refused.
#[test]
fn an_inherited_spec_never_breaks_a_helper_step() {
    let _t = exclusive();
    let probe = common::PROBE.replace('\'', r"'\''");
    let wrap = format!(
        "srun -n1 hostname; echo helper=$?; srun -n1 --tf-cluster=off bash -c '{probe}'; srun -n1 --tf-cluster=ps:2 true; echo explicit=$?; srun bash -c '{probe}'"
    );
    // Each task's lines in a file of its own; the job's log and the tasks'
    // stderr hold the messages.
    let outputs = Outputs::new("inherit");
    let (code, said) = outputs.sbatch(
        120,
        &[],
        &["-N2", "-n4", "--tf-cluster=ps:1,worker:3", "--wrap", &wrap],
    );
    let text = format!("{said}{}", outputs.dump());
    assert!(text.contains("helper=0"), "{text}");
    assert!(!text.contains("explicit=0"), "{text}");
    let warnings: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("inherited from the job is not applied"))
        .collect();
    assert_eq!(warnings.len(), 1, "{text}");
    assert!(
        text.contains("asks for 2 tasks (ps:2) but the step has 1"),
        "{text}"
    );
    let run = common::parse_run(std::process::Output {
        status: std::process::ExitStatus::default(),
        stdout: outputs.steps_stdout().concat().into_bytes(),
        stderr: Vec::new(),
    });
    assert_eq!(code, Some(0), "{text}");
    // The off step (rank 0, no TF_CONFIG) and the full step's four tasks.
    let with: Vec<_> = run.tasks.iter().filter(|t| t.tf_config.is_some()).collect();
    assert_eq!(with.len(), 4, "{text}");
    assert_eq!(run.tasks.len(), 5, "{text}");
    assert_healthy("inherited spec", "node1");
}
