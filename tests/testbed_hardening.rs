//! Nothing a user types or a node holds may crash slurmstepd, drain a node,
//! or leak into a step that did not ask for the plugin: proven on the real
//! testbed.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::{Run, assert_no_node_drained, exclusive, exec, sbatch, srun, srun_env, testbed};

/// The distinct `tf-cluster:` messages of a run (each task of a failing step
/// prints the same one; Slurm's prefixes are stripped).
fn messages(run: &Run) -> BTreeSet<String> {
    run.stderr
        .lines()
        .filter_map(|l| l.split_once("tf-cluster: ").map(|(_, m)| m.to_string()))
        .collect()
}

/// A refused step: non-zero exit, no task ran with TF_CONFIG, one clear
/// message naming `why`, and the node takes the next good step.
fn assert_clean_failure(case: &str, run: &Run, why: &str) {
    assert_ne!(run.code, Some(0), "{case}: the step should fail");
    assert!(
        run.tasks.iter().all(|t| t.tf_config.is_none()),
        "{case}: TF_CONFIG injected"
    );
    let msgs = messages(run);
    assert_eq!(
        msgs.len(),
        1,
        "{case}: want one tf-cluster message: {}",
        run.stderr
    );
    let msg = msgs.iter().next().unwrap();
    assert!(msg.contains(why), "{case}: want {why:?} in {msg:?}");
    assert!(msg.len() < 400, "{case}: message too long: {msg}");
    let next = srun(&["-N1", "-n1", "-w", "node1", "--tf-cluster"]);
    next.assert_ran(1);
    assert!(
        next.tasks[0].tf_config.is_some(),
        "{case}: the next good step"
    );
}

#[test]
fn bad_input_matrix() {
    let _t = testbed();
    let long_name = format!("--tf-cluster={}:1", "a".repeat(10_000));
    let commas = format!("--tf-cluster={}", ",".repeat(10_000));
    let few_commas = format!("--tf-cluster={}", ",".repeat(3_000));
    let long_rpc = format!("--tf-rpc-layer={}", "r".repeat(10_000));
    #[rustfmt::skip]
    let cases: Vec<(&str, Vec<&str>, Vec<&str>, &str)> = vec![
        // Malformed specs, refused by srun while it parses its options.
        ("empty role", vec![], vec!["-n1", "--tf-cluster=:1"], "entry 1 has an empty role name"),
        ("duplicate role", vec![], vec!["-n2", "--tf-cluster=ps:1,ps:1"], "role ps is given twice"),
        ("zero count", vec![], vec!["-n1", "--tf-cluster=ps:0,worker:1"], "role ps has count 0"),
        ("negative count", vec![], vec!["-n1", "--tf-cluster=ps:-1"], "role ps has count \"-1\""),
        ("huge count", vec![], vec!["-n1", "--tf-cluster=ps:99999999999"], "role ps has count \"99999999999\""),
        ("u32 max count", vec![], vec!["-n1", "--tf-cluster=ps:4294967295"], "asks for 4294967295 tasks"),
        ("sum overflow", vec![], vec!["-n1", "--tf-cluster=a:4294967295,b:4294967295"], "asks for 8589934590 tasks"),
        ("non-ASCII role", vec![], vec!["-n1", "--tf-cluster=pß:1"], "role name \"pß\" has 'ß'"),
        ("10 KB role", vec![], vec!["-n1", &long_name], "is longer than the 4096 accepted"),
        ("10 KB of commas", vec![], vec!["-n1", &commas], "is longer than the 4096 accepted"),
        ("3 KB of commas", vec![], vec!["-n1", &few_commas], "entry 1 is empty"),
        ("huge GPU count", vec![], vec!["-n1", "--tf-cluster", "--tf-gpus-per-node=4294967295"], "at most 1024 GPUs"),
        ("missing colon", vec![], vec!["-n1", "--tf-cluster=worker1"], "\"worker1\" has no ':count'"),
        ("trailing comma", vec![], vec!["-n1", "--tf-cluster=worker:1,"], "entry 2 is empty"),
        ("leading comma", vec![], vec!["-n1", "--tf-cluster=,worker:1"], "entry 1 is empty"),
        ("two colons", vec![], vec!["-n1", "--tf-cluster=worker:1:1"], "count \"1:1\""),
        ("text count", vec![], vec!["-n1", "--tf-cluster=worker:x"], "count \"x\""),
        ("space in role", vec![], vec!["-n1", "--tf-cluster=wor ker:1"], "has ' '"),
        ("shell in count", vec![], vec!["-n1", "--tf-cluster=worker:1;rm"], "count \"1;rm\""),
        ("quote in role", vec![], vec!["-n1", "--tf-cluster=wo\"rker:1"], "has '\"'"),
        // Sums that do not match the step.
        ("sum too small", vec![], vec!["-n2", "--tf-cluster=ps:1"], "asks for 1 tasks (ps:1) but the step has 2"),
        ("sum too large", vec![], vec!["-n1", "--tf-cluster=ps:1,worker:1"], "asks for 2 tasks (ps:1,worker:1) but the step has 1"),
        ("sum off by one", vec![], vec!["-n3", "-N1", "--tf-cluster=chief:1,worker:1"], "but the step has 3"),
        // Bad port bases.
        ("port base 0", vec![], vec!["-n1", "--tf-cluster", "--tf-port-base=0"], "port-base=0: a port must be 1-65535"),
        ("port base 65536", vec![], vec!["-n1", "--tf-cluster", "--tf-port-base=65536"], "port-base=65536: a port must be 1-65535"),
        ("port base text", vec![], vec!["-n1", "--tf-cluster", "--tf-port-base=http"], "port-base=\"http\": not a port number"),
        ("port base negative", vec![], vec!["-n1", "--tf-cluster", "--tf-port-base=-1"], "port-base=\"-1\": not a port number"),
        ("ports past 65535", vec![], vec!["-n2", "-N1", "--resv-ports=0", "--tf-cluster", "--tf-port-base=65535"], "needs port 65536, above 65535"),
        // GPU settings that do not fit.
        ("gpus per node text", vec![], vec!["-n1", "--tf-cluster", "--tf-gpus-per-node=x"], "gpus-per-node=\"x\": not a GPU count"),
        ("gpus per task negative", vec![], vec!["-n1", "--tf-cluster", "--tf-gpus-per-task=-2"], "gpus-per-task=\"-2\": not a GPU count"),
        ("gpus per task too many", vec![], vec!["-n1", "--gres=gpu:2", "--tf-cluster", "--tf-gpus-per-task=3"], "needs 3 GPUs, but the node has 2"),
        ("gpus per node too many", vec![], vec!["-n1", "--gres=gpu:2", "--tf-cluster", "--tf-gpus-per-node=4"], "gpus-per-node is 4 but Slurm gave this step 2"),
        ("gpus on a CPU step", vec![], vec!["-n1", "--tf-cluster", "--tf-gpus-per-task=1"], "needs 1 GPUs, but the node has 0"),
        ("auto-set-gpu text", vec![], vec!["-n1", "--tf-cluster", "--tf-auto-set-gpu=yesno"], "auto-set-gpu=\"yesno\": use true or false"),
        ("rpc layer quote", vec![], vec!["-n1", "--tf-cluster", "--tf-rpc-layer=a\"b"], "not an rpc layer name"),
        ("rpc layer 10 KB", vec![], vec!["-n1", "--tf-cluster", &long_rpc], "is longer than the 4096 accepted"),
        // Hostile values a user can set before srun (exported het variables
        // are harmless with srun's map: hostile_values_are_harmless).
        ("resv ports garbage", vec!["SLURM_STEP_RESV_PORTS=junk"], vec!["-n1", "--resv-ports=0", "--tf-cluster"], "bad SLURM_STEP_RESV_PORTS \"junk\""),
        ("resv ports huge", vec!["SLURM_STEP_RESV_PORTS=1-99999999999"], vec!["-n1", "--resv-ports=0", "--tf-cluster"], "bad SLURM_STEP_RESV_PORTS"),
        ("resv ports above 65535", vec!["SLURM_STEP_RESV_PORTS=70000"], vec!["-n1", "--resv-ports=0", "--tf-cluster"], "not a range of ports 1-65535"),
        ("resv ports backwards", vec!["SLURM_STEP_RESV_PORTS=9000-8000"], vec!["-n1", "--resv-ports=0", "--tf-cluster"], "not a range of ports 1-65535"),
    ];
    assert!(cases.len() >= 38);
    for (case, vars, args, why) in &cases {
        // Slurm 26.05's srun takes a SLURM_HET_SIZE in its own environment
        // for a het allocation and refuses the step itself ("--het-group
        // expected to be used within an HetJob allocation"): it reaches the
        // task only, through --export, on every version.
        let mut vars = vars.clone();
        let export = vars
            .iter()
            .position(|v| v.starts_with("SLURM_HET_SIZE="))
            .map(|i| format!("--export=ALL,{}", vars.remove(i)));
        let mut args = args.clone();
        args.extend(["-w", "node1"]);
        args.extend(export.as_deref());
        assert_clean_failure(case, &srun_env(&vars, &args), why);
    }
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
        let run = srun(&["-N2", "-n4", "--resv-ports=0", export, "--tf-cluster"]);
        run.assert_ran(4).assert_tf_config(&[("worker", 4)], 8888);
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
        let run = srun_env(&[var], &["-N2", "-n4", "--resv-ports=0", "--tf-cluster"]);
        run.assert_ran(4).assert_tf_config(&[("worker", 4)], 8888);
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
    assert!(
        err.contains("tf-cluster: bad --tf-cluster \"ps:x\": role ps has count \"x\""),
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
        bed.plugstack(&format!(
            "required /opt/tf-cluster/libtf_cluster.so {arg}\n"
        ));
        let run = srun(&["-N1", "-n1", "--tf-cluster"]);
        assert_ne!(run.code, Some(0), "{arg}");
        assert!(run.tasks.is_empty(), "{arg}");
        let msgs = messages(&run);
        assert!(
            msgs.len() == 1 && msgs.iter().all(|m| m.starts_with(why)),
            "{arg}: {msgs:?}"
        );
        srun(&["-N1", "-n1"]).assert_ran(1);
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
    for hook in ["init", "option", "local_user_init", "task_init"] {
        let var = format!("TF_CLUSTER_FAULT={hook}");
        let run = srun_env(&[&var], &["-N1", "-n1", "-w", "node3", "--tf-cluster"]);
        assert_ne!(run.code, Some(0), "{hook}");
        assert!(run.tasks.is_empty(), "{hook}: {:?}", run.tasks);
        let msgs = messages(&run);
        assert_eq!(msgs.len(), 1, "{hook}: {}", run.stderr);
        let msg = msgs.into_iter().next().unwrap();
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
        let out = exec(&["srun", "-N3", "-n6", "--gres=gpu:2", "-l", "env"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut tasks: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let (task, var) = line.split_once(": ").unwrap();
            let (k, v) = var.split_once('=').unwrap_or((var, ""));
            tasks
                .entry(task.trim().to_string())
                .or_default()
                .insert(k.to_string(), v.to_string());
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
    let steps = exec(&["squeue", "-h", "-s", "-o", "%i %j"]);
    let left: Vec<String> = String::from_utf8_lossy(&steps.stdout)
        .lines()
        .filter(|l| !l.contains(".extern") && !l.contains(".interactive") && !l.contains(".batch"))
        .map(str::to_string)
        .collect();
    assert!(left.is_empty(), "{case}: steps left behind: {left:?}");
    let next = srun(&["-N1", "-n1", "-w", node, "--tf-cluster"]);
    next.assert_ran(1);
    assert!(next.tasks[0].tf_config.is_some(), "{case}: the next step");
}

/// Finding 1: a step refused inside an allocation is not left behind, and
/// the allocation's next step runs at once.
#[test]
fn a_refused_step_inside_an_allocation_does_not_outlive_srun() {
    let _t = exclusive();
    let script = r#"srun -n2 --tf-cluster=ps:1 true; echo "rc=$?"; squeue -h -s -j "$SLURM_JOB_ID" -o 'STEP %i'; timeout 60 srun -n2 --tf-cluster hostname; echo "next=$?""#;
    let out = exec(&["salloc", "-N1", "-n2", "-w", "node3", "bash", "-c", script]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stdout.contains("rc=0"), "{stdout}");
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("tf-cluster:"))
        .collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].contains("asks for 1 tasks (ps:1) but the step has 2"),
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

/// Finding 1: a helper step of another size inside a job whose spec it
/// inherited is left alone with one warning; `--tf-cluster=off` opts out;
/// a spec given to that srun itself is still refused.
#[test]
fn an_inherited_spec_never_breaks_a_helper_step() {
    let _t = exclusive();
    let probe = common::PROBE.replace('\'', r"'\''");
    let wrap = format!(
        "srun -n1 hostname; echo helper=$?; srun -n1 --tf-cluster=off bash -c '{probe}'; srun -n1 --tf-cluster=ps:2 true; echo explicit=$?; srun bash -c '{probe}'"
    );
    let out_file = "/home/alice/inherit.out";
    let submitted = exec(&[
        "sbatch",
        "--wait",
        "-o",
        out_file,
        "-N2",
        "-n4",
        "--tf-cluster=ps:1,worker:3",
        "--wrap",
        &wrap,
    ]);
    let out = exec(&["cat", out_file]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
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
    let mut run = common::parse_run(out);
    run.code = submitted.status.code();
    // The off step (rank 0, no TF_CONFIG) and the full step's four tasks.
    let with: Vec<_> = run.tasks.iter().filter(|t| t.tf_config.is_some()).collect();
    assert_eq!(with.len(), 4, "{text}");
    assert_eq!(run.tasks.len(), 5, "{text}");
    assert_healthy("inherited spec", "node1");
}

/// Finding 2: a FIFO as SLURM_HOSTFILE, with a faked arbitrary distribution,
/// neither blocks nor drains: with srun's map it is never read; without it
/// (the map withheld by a fault) it is refused at once.
#[test]
fn a_fifo_host_file_never_blocks_a_task() {
    let _t = exclusive();
    exec(&[
        "bash",
        "-c",
        "rm -f /home/alice/fifo && mkfifo /home/alice/fifo",
    ]);
    let export = "--export=ALL,SLURM_DISTRIBUTION=arbitrary,SLURM_HOSTFILE=/home/alice/fifo";
    let run = srun(&["-N1", "-n1", "-w", "node1", export, "--tf-cluster"]);
    run.assert_ran(1).assert_tf_config(&[("worker", 1)], 8888);
    assert_healthy("fifo with map", "node1");
}

/// Findings 3 and 4: counts that would make a task build huge lists are
/// refused by srun's option parser, as plugstack arguments too.
#[test]
fn huge_counts_are_refused_before_anything_runs() {
    let _t = exclusive();
    for (arg, why) in [
        (
            "--tf-gpus-per-node=4294967295",
            "gpus-per-node=4294967295: at most 1024 GPUs",
        ),
        (
            "--tf-gpus-per-node=30000",
            "gpus-per-node=30000: at most 1024 GPUs",
        ),
        (
            "--tf-gpus-per-task=2000",
            "gpus-per-task=2000: at most 1024 GPUs",
        ),
    ] {
        srun(&["-N1", "-n1", "-w", "node2", "--tf-cluster", arg]).assert_refused(why);
        assert_healthy(arg, "node2");
    }
    // Finding 7: no GPUs to share while Slurm gave four: left as Slurm set it.
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

/// Finding 5: exported het variables claiming node2 runs rank 0 cannot
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
        export,
        "--tf-cluster=chief:1,worker:1",
    ]);
    run.assert_ran(2)
        .assert_tf_config(&[("chief", 1), ("worker", 1)], 8888);
    assert_healthy("faked het", "node1");
}

/// Finding 6: 500 roles for one task: one line of at most 300 characters
/// (a longer spec is refused as an option value over 4096 bytes).
#[test]
fn a_huge_spec_gives_one_short_line() {
    let _t = exclusive();
    let spec: Vec<String> = (0..500).map(|i| format!("r{i}:1")).collect();
    let arg = format!("--tf-cluster={}", spec.join(","));
    let run = srun(&["-N1", "-n1", "-w", "node1", &arg]);
    run.assert_refused("--tf-cluster asks for 500 tasks (r0:1,r1:1");
    let line = run
        .stderr
        .lines()
        .find(|l| l.contains("tf-cluster:"))
        .unwrap();
    let msg = line.split_once("tf-cluster: ").unwrap().1;
    assert!(msg.chars().count() <= 301, "{} chars", msg.chars().count());
    assert_healthy("3000 roles", "node1");
}

/// Without srun's map (withheld by a fault in the test build), the tasks
/// rebuild the layout and every hostile hint is checked, never trusted:
/// a FIFO host file is refused at once (finding 2), faked het variables
/// fail rank 0's node-name check (finding 5); registration failing in
/// slurmstepd fails the step that asked (finding 8) and no other.
#[test]
fn without_the_map_hostile_hints_fail_closed() {
    let bed = exclusive();
    bed.plugstack("required /opt/tf-cluster/libtf_cluster_fault.so\n");
    let no_map = "TF_CLUSTER_FAULT=layout_rpc";
    let run = srun_env(&[no_map], &["-N2", "-n4", "--tf-cluster"]);
    run.assert_ran(4).assert_tf_config(&[("worker", 4)], 8888);
    exec(&[
        "bash",
        "-c",
        "rm -f /home/alice/fifo && mkfifo /home/alice/fifo",
    ]);
    let fifo = "--export=ALL,SLURM_DISTRIBUTION=arbitrary,SLURM_HOSTFILE=/home/alice/fifo";
    let run = srun_env(
        &[no_map],
        &["-N1", "-n1", "-w", "node1", fifo, "--tf-cluster"],
    );
    assert_clean_failure("fifo without map", &run, "a FIFO, not a regular file");
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
        "could not register the plugin's options",
    );
    srun(&["-N1", "-n1", "-w", "node2", reg]).assert_ran(1);
    let garbage = srun_env(
        &["TF_CLUSTER_FAULT=map_garbage"],
        &["-N1", "-n1", "--tf-cluster"],
    );
    assert_clean_failure("garbage map", &garbage, "bad SLURM_TF_CLUSTER_MAP runs");
    assert_healthy("no map", "node2");
}
