//! Nothing a user types or a node holds may crash slurmstepd, drain a node,
//! or leak into a step that did not ask for the plugin: proven on the real
//! testbed.

mod common;

use std::collections::BTreeMap;

use common::outputs::Outputs;
use common::{
    Run, assert_no_node_drained, exclusive, exec, messages, sbatch, srun, srun_env, testbed,
};

/// What is wrong with `run` as a step refused with the one message `want`
/// (each task of a failing step prints the same one), if anything.
fn refusal_fault(run: &Run, want: &str) -> Option<String> {
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
fn assert_next_step_runs(case: &str, node: &str) {
    let next = srun(&["-N1", "-n1", "-w", node, "--tf-cluster"]);
    next.assert_ran(1);
    assert!(next.tasks[0].tf_config.is_some(), "{case}: the next step");
}

/// A refused step: non-zero exit, no task ran, one message exactly `want`,
/// and the node takes the next good step.
fn assert_clean_failure(case: &str, run: &Run, want: &str) {
    if let Some(fault) = refusal_fault(run, want) {
        panic!("{case}: {fault}\n{}", run.stderr);
    }
    assert_next_step_runs(case, "node1");
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
    ("huge count", "ps:99999999999", "role ps has count \"99999999999\" (not a whole number ≥ 1)"),
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
        // on the port base (testbed_inherited.rs,
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

/// 50 steps at once, each with its own spec: every task agrees on its step's
/// TF_CONFIG, none fails, the nodes stay up.
#[test]
fn fifty_concurrent_steps() {
    let _t = testbed();
    let steps: Vec<_> = (0..50u32)
        .map(|i| {
            std::thread::spawn(move || {
                let n = 1 + i % 6;
                let spec = if n == 1 {
                    "--tf-cluster=chief:1".to_string()
                } else {
                    format!("--tf-cluster=chief:1,worker:{}", n - 1)
                };
                let tasks = format!("-n{n}");
                let run = srun(&[
                    "-N1-3",
                    &tasks,
                    "-m",
                    if i % 2 == 0 { "block" } else { "cyclic" },
                    &spec,
                ]);
                (n, run)
            })
        })
        .collect();
    for step in steps {
        let (n, run) = step.join().unwrap();
        let roles: Vec<(&str, u32)> = if n == 1 {
            vec![("chief", 1)]
        } else {
            vec![("chief", 1), ("worker", n - 1)]
        };
        run.assert_ran(n).assert_tf_config(&roles, 8888);
    }
    assert_no_node_drained();
}

/// After a hostile case: no node left service, no step still listed (the
/// callers hold the testbed alone), and the next good step on `node` runs.
fn assert_healthy(case: &str, node: &str) {
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

/// Fewer GPUs than asked: no GPUs to share while Slurm gave four: left as Slurm set it.
#[test]
fn no_gpus_to_share_leaves_slurms_list() {
    let _t = testbed();
    let run = srun(&[
        "-N1",
        "-n2",
        "-w",
        "node2",
        "--gres=gpu:4",
        "--tf-cluster",
        "--tf-gpus-per-node=0",
    ]);
    run.assert_ran(2);
    assert_eq!(run.gpus(), [Some("0,1,2,3"); 2]);
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
