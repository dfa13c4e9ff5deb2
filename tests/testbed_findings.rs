//! Issue 27: valid or hostile steps that went wrong, one test each, named for
//! the case, on the real testbed (3 nodes, 4 fake GPUs each,
//! `MpiParams=ports=12000-12999`). Each ends with no node drained, no step
//! left, and the next step running.

mod common;

use common::outputs::Outputs;
use common::{Run, assert_no_node_drained, exec, exec_for, messages, srun, srun_env};

const DIR: &str = "/home/alice/findings";

/// ddp.py (tests/fixtures/pytorch), for the torchrun case.
fn install_ddp() {
    common::install(
        DIR,
        &[
            ("ddp.py", include_str!("fixtures/pytorch/ddp.py")),
            ("tfc_report.py", include_str!("fixtures/tfc_report.py")),
        ],
        "",
    );
}

/// No node left service, no step of ours still listed (the extern, batch
/// and interactive steps aside), and a good step runs at once.
fn assert_healthy(case: &str) {
    assert_no_node_drained();
    let steps = exec(&["squeue", "-h", "-s", "-o", "%i %j"]);
    let left: Vec<String> = String::from_utf8_lossy(&steps.stdout)
        .lines()
        .filter(|l| !l.contains(".extern") && !l.contains(".interactive") && !l.contains(".batch"))
        .map(str::to_string)
        .collect();
    assert!(left.is_empty(), "{case}: steps left behind: {left:?}");
    let next = srun(&["-N1", "-n1", "--tf-cluster"]);
    next.assert_ran(1);
    assert!(next.tasks[0].tf_config.is_some(), "{case}: the next step");
}

/// `sbatch --wait ARGS --wrap SCRIPT`: its exit code, and its text: sbatch's
/// and the job's own messages, then each task's output, a file per task.
fn batch(args: &[&str], script: &str) -> (Option<i32>, String) {
    let outputs = Outputs::new("findings");
    let mut sbatch_args = args.to_vec();
    sbatch_args.extend_from_slice(&["--wrap", script]);
    let (code, said) = outputs.sbatch(300, &[], &sbatch_args);
    (code, format!("{said}{}", outputs.dump()))
}

/// What each task of a step saw of the PyTorch variables, one line each.
const TORCH_PROBE: &str = r#"echo "TORCH $SLURM_PROCID ${MASTER_ADDR-unset} ${MASTER_PORT-unset} ${RANK-unset} ${PET_NNODES-unset} ${TF_CONFIG+tf} ${SLURM_STEP_RESV_PORTS-noports}""#;

/// `TORCH` lines: (procid, master_addr, master_port, rank, pet_nnodes, rest).
fn torch_lines(text: &str) -> Vec<Vec<String>> {
    let mut lines: Vec<Vec<String>> = text
        .lines()
        .filter_map(|l| l.split_once("TORCH ").map(|(_, r)| r))
        .map(|r| r.split_whitespace().map(str::to_string).collect())
        .collect();
    lines.sort();
    lines
}

/// Item 1: `salloc -N1 -n1 : -N1 -n1`, `srun -n1 : -n1 --torch-cluster
/// torchrun …`: each component had its own PET_RDZV_ID (its own job id),
/// torch's static rendezvous prefixes its keys with it, and the step hung.
/// Now one id: the step ends and trains (both ranks, the same weights).
#[test]
fn torchrun_in_a_het_step_trains() {
    let _t = common::exclusive();
    install_ddp();
    let script = format!(
        "cd {DIR}; timeout 150 srun -n1 -w node1 : -n1 -w node2 --torch-cluster \
         torchrun --nproc_per_node=1 --redirects=1 --tee=1 ddp.py; echo rc=$?"
    );
    let reports = Outputs::new("het-torchrun");
    let report_dir = format!("TFC_REPORT_DIR={}", reports.path());
    let out = exec_for(
        240,
        &[
            "env",
            &report_dir,
            "salloc",
            "-N1",
            "-n1",
            "-w",
            "node1",
            ":",
            "-N1",
            "-n1",
            "-w",
            "node2",
            "bash",
            "-c",
            &script,
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("rc=0"),
        "the step failed or hung:\n{text}\n{stderr}"
    );
    let results = reports.reports("RESULT");
    assert_eq!(results.len(), 2, "{text}");
    let mut ranks: Vec<i64> = results
        .iter()
        .map(|r| r["rank"].as_i64().unwrap())
        .collect();
    ranks.sort();
    assert_eq!(ranks, [0, 1], "{text}");
    for r in &results {
        assert_eq!(r["world_size"], 2, "{r}");
        assert_eq!(r["weights_sha256"], results[0]["weights_sha256"], "{text}");
    }
    assert_healthy("torchrun in a het step");
}

/// Item 2 (a): `#SBATCH -N2 -n4 --tf-cluster=chief:1,worker:3`, then
/// `srun -n2 --torch-cluster`: the inherited TensorFlow spec does not fit
/// and is left out, with a warning; PyTorch, given to srun itself, is not.
#[test]
fn an_explicit_torch_cluster_survives_an_unfitting_inherited_tf_cluster() {
    let _t = common::exclusive();
    let (code, text) = batch(
        &["-N2", "-n4", "--tf-cluster=chief:1,worker:3"],
        &format!("srun -n2 --torch-cluster bash -c '{TORCH_PROBE}'; echo rc=$?"),
    );
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("rc=0"), "{text}");
    let lines = torch_lines(&text);
    assert_eq!(lines.len(), 2, "{text}");
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(l[0], i.to_string(), "{text}");
        assert_ne!(l[1], "unset", "MASTER_ADDR: {text}");
        assert_eq!(l[3], i.to_string(), "RANK: {text}");
        assert_eq!(l[4], "2", "PET_NNODES: {text}");
        assert_eq!(l[1], lines[0][1], "one MASTER_ADDR: {text}");
        assert_eq!(l[2], lines[0][2], "one MASTER_PORT: {text}");
        assert!(!l.contains(&"tf".to_string()), "TF_CONFIG set: {text}");
    }
    let warnings: Vec<&str> = messages(&text)
        .into_iter()
        .filter(|m| m.contains("inherited from the job is not applied"))
        .collect();
    assert_eq!(warnings.len(), 1, "{text}");
    assert!(warnings[0].contains("--tf-cluster"), "{text}");
    assert_healthy("explicit torch, inherited tf");
}

/// Item 2 (b): `#SBATCH -N1 -n3 --gpus-per-node=2 --tf-cluster`, then
/// `srun -n3 --torch-cluster`: PyTorch's own refusal (3 tasks, 2 GPUs) was
/// turned into the inherited spec's warning and the step ran without
/// PyTorch's variables. Now it is refused.
#[test]
fn an_explicit_torch_cluster_that_does_not_fit_is_refused_beside_an_inherited_tf_cluster() {
    let _t = common::exclusive();
    let (_, text) = batch(
        &[
            "-N1",
            "-n3",
            "-w",
            "node2",
            "--gpus-per-node=2",
            "--tf-cluster",
        ],
        &format!("srun -n3 --torch-cluster bash -c '{TORCH_PROBE}'; echo rc=$?"),
    );
    assert!(!text.contains("rc=0"), "{text}");
    assert!(torch_lines(&text).is_empty(), "tasks ran: {text}");
    let msgs = messages(&text);
    assert!(
        msgs.iter().any(|m| m.contains("3") && m.contains("GPU")),
        "want PyTorch's refusal: {text}"
    );
    assert!(
        !msgs.iter().any(|m| m.contains("not applied")),
        "the refusal became a warning: {text}"
    );
    assert_healthy("explicit torch that does not fit");
}

/// Item 3: a job submitted with `--torch-cluster --gres=gpu:2
/// --ntasks-per-node=2`: a helper step of 4 tasks cannot take PyTorch's
/// variables; `--torch-cluster=off` turns off PyTorch alone, `--tf-off`
/// every framework; `--jax-cluster=off` likewise for JAX; any other value
/// of an option without a spec is refused while srun parses it.
#[test]
fn a_step_opts_out_of_inherited_frameworks() {
    let _t = common::exclusive();
    let helper = "srun -N1 -n4 --overcommit";
    let script = format!(
        "{helper} hostname >/dev/null; echo plain=$?; \
         {helper} --torch-cluster=off bash -c '{TORCH_PROBE}'; echo torch_off=$?; \
         {helper} --tf-off bash -c '{TORCH_PROBE}'; echo all_off=$?; \
         srun -n1 --torch-cluster=yes true; echo bad_value=$?"
    );
    let (code, text) = batch(
        &[
            "-N1",
            "-w",
            "node3",
            "--torch-cluster",
            "--gres=gpu:2",
            "--ntasks-per-node=2",
        ],
        &script,
    );
    assert_eq!(code, Some(0), "{text}");
    assert!(
        !text.contains("plain=0"),
        "the helper ran with PyTorch: {text}"
    );
    assert!(text.contains("torch_off=0"), "{text}");
    assert!(text.contains("all_off=0"), "{text}");
    assert!(!text.contains("bad_value=0"), "{text}");
    assert!(
        text.contains("--torch-cluster=\"yes\": use static, elastic, elastic:MIN or elastic:MIN:RESTARTS (or off)"),
        "{text}"
    );
    let lines = torch_lines(&text);
    assert_eq!(lines.len(), 8, "{text}");
    assert!(
        lines.iter().all(|l| l[1] == "unset"),
        "variables set: {text}"
    );

    let (code, text) = batch(
        &[
            "-N1",
            "-w",
            "node3",
            "--jax-cluster",
            "--gres=gpu:2",
            "--ntasks-per-node=2",
        ],
        &format!(
            "{helper} hostname >/dev/null; echo plain=$?; \
             {helper} --jax-cluster=off bash -c 'echo JAX ${{JAX_COORDINATOR_ADDRESS-unset}}'; echo jax_off=$?"
        ),
    );
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("jax_off=0"), "{text}");
    assert_eq!(text.matches("JAX unset").count(), 4, "{text}");

    let help = String::from_utf8_lossy(&exec(&["srun", "--help"]).stdout).into_owned();
    for want in [
        "--tf-off",
        "--torch-cluster=off",
        "--jax-cluster=off",
        "=off:",
    ] {
        assert!(help.contains(want), "srun --help lacks {want}:\n{help}");
    }
    assert_healthy("opt out");
}

/// The allocation `salloc -N2 -n4 --no-shell` made: its job id.
fn salloc_no_shell() -> String {
    let out = exec(&["salloc", "-N2", "-n4", "-w", "node[1-2]", "--no-shell"]);
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    text.split_whitespace()
        .filter_map(|w| w.parse::<u32>().ok())
        .next_back()
        .unwrap_or_else(|| panic!("no job id: {text}"))
        .to_string()
}

/// Item 4: `srun --jobi=22` (getopt's abbreviation of `--jobid`) from
/// outside an allocation made with `salloc --no-shell`: the refused step
/// stayed RUNNING and the allocation's next srun waited for ever. Every
/// spelling now behaves as `--jobid`: refused, nothing left, the next srun
/// runs.
#[test]
fn every_spelling_of_jobid_leaves_no_step_behind() {
    let _t = common::exclusive();
    let job = salloc_no_shell();
    for spelling in [
        vec![format!("--jobi={job}")],
        vec!["--jobi".to_string(), job.clone()],
        vec![format!("--jobid={job}")],
        vec!["--jobid".to_string(), job.clone()],
    ] {
        let case = spelling.join(" ");
        let mut args: Vec<&str> = spelling.iter().map(String::as_str).collect();
        args.extend(["-n4", "--tf-cluster=ps:1,worker:5"]);
        let run = srun(&args);
        assert_ne!(run.code, Some(0), "{case}: {}", run.stderr);
        assert!(run.tasks.is_empty(), "{case}: {:?}", run.tasks);
        assert_eq!(
            run.messages()
                .into_iter()
                .filter(|m| m.contains("asks for 6 tasks"))
                .count(),
            1,
            "{case}: {}",
            run.stderr
        );
        let steps = exec(&["squeue", "-h", "-s", "-j", &job, "-o", "%i"]);
        let steps = String::from_utf8_lossy(&steps.stdout).into_owned();
        assert!(
            steps.lines().all(|l| l.contains(".extern")),
            "{case}: steps left: {steps}"
        );
        let jobid = format!("--jobid={job}");
        let next = srun(&[&jobid, "-n4", "--tf-cluster"]);
        next.assert_workers(4);
    }
    exec(&["scancel", &job]);
    // An srun that allocates for itself still refuses before launch (its
    // exit ends the job): no task is started to be failed.
    let own = srun(&["-n2", "-w", "node1", "--tf-cluster=ps:1"]);
    assert_ne!(own.code, Some(0), "{}", own.stderr);
    assert!(
        !own.stderr.contains("task_init"),
        "launched: {}",
        own.stderr
    );
    assert!(own.stderr.contains("local_user_init"), "{}", own.stderr);
    assert_healthy("--jobi");
}

/// Item 5: a batch job submitted with `--gpu-bind=single:2 --jax-cluster`
/// leaves SLURM_GPU_BIND=single:2 in its steps' srun, which srun 22.05 does
/// not rewrite for its own `--gpu-bind=map_gpu:0,1` (an exclusive binding,
/// as the tasks' SLURMD_TRES_BIND shows). The step runs.
#[test]
fn srun_gpu_bind_wins_over_a_stale_slurm_gpu_bind() {
    let _t = common::exclusive();
    let (code, text) = batch(
        &[
            "-N1",
            "-w",
            "node1",
            "--ntasks-per-node=2",
            "--gres=gpu:4",
            "--gpu-bind=single:2",
            "--jax-cluster",
        ],
        "srun --gpu-bind=map_gpu:0,1 bash -c 'echo JAX $SLURM_PROCID ${SLURMD_TRES_BIND-none} ${JAX_LOCAL_DEVICE_IDS-unset} ${CUDA_VISIBLE_DEVICES-unset}'; echo rc=$?",
    );
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("rc=0"), "{text}");
    let mut lines: Vec<&str> = text.lines().filter(|l| l.starts_with("JAX ")).collect();
    lines.sort();
    assert_eq!(lines.len(), 2, "{text}");
    for l in &lines {
        assert!(l.contains("map_gpu:0,1"), "Slurm's binding: {l}");
        assert!(!l.ends_with("unset"), "{l}");
    }
    assert!(messages(&text).is_empty(), "{text}");
    assert_healthy("stale SLURM_GPU_BIND");
}

/// Item 6: a step without reserved ports gets no SLURM_STEP_RESV_PORTS from
/// Slurm, so the value in srun's environment passed through: a user's
/// (`SLURM_STEP_RESV_PORTS=1-3`, MASTER_PORT=1), or the outer step's in a
/// nested `srun --overlap --resv-ports=0` (both steps' MASTER_PORT equal).
/// Now the reservation is trusted only when Slurm gave this step one;
/// otherwise the explicit port base (8888).
#[test]
fn a_stale_slurm_step_resv_ports_is_not_the_steps_reservation() {
    let _t = common::exclusive();
    let args = [
        "-N1",
        "-n1",
        "-w",
        "node1",
        "--resv-ports=0",
        "--tf-port-base=8888",
        "--torch-cluster",
        "bash",
        "-c",
        TORCH_PROBE,
    ];
    // A user's range, and the hostile values once refused as this step's
    // (they are not: Slurm reserved it none).
    for value in ["1-3", "junk", "1-99999999999", "70000", "9000-8000"] {
        let var = format!("SLURM_STEP_RESV_PORTS={value}");
        let out = exec(&[&["env", var.as_str(), "srun"][..], &args[..]].concat());
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let lines = torch_lines(&text);
        assert_eq!(
            lines.len(),
            1,
            "{value}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(lines[0][2], "8888", "{value}: MASTER_PORT: {text}");
    }

    let inner = format!(
        "srun -N1 -n1 --overlap --resv-ports=0 --tf-port-base=8888 --torch-cluster bash -c '{}'",
        TORCH_PROBE.replace("TORCH", "TORCH inner")
    );
    let outer = format!("{}; {inner}", TORCH_PROBE.replace("TORCH", "TORCH outer"));
    let out = exec(&[
        "srun",
        "-N1",
        "-n1",
        "-w",
        "node2",
        "--torch-cluster",
        "bash",
        "-c",
        &outer,
    ]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let port = |which: &str| -> String {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("TORCH {which} ")))
            .unwrap_or_else(|| panic!("no {which} line: {text}{stderr}"))
            .split_whitespace()
            .nth(2)
            .unwrap()
            .to_string()
    };
    let (outer_port, inner_port) = (port("outer"), port("inner"));
    assert!(
        outer_port.starts_with("12"),
        "the outer step's reserved port: {text}"
    );
    assert_eq!(
        inner_port, "8888",
        "the inner step has no reservation: {text}"
    );
    assert_healthy("stale SLURM_STEP_RESV_PORTS");
}

/// Item 8: host templates that cannot make a host name are refused while
/// srun parses them, with the rule they break.
#[test]
fn a_host_template_that_makes_no_host_name_is_refused() {
    let _t = common::exclusive();
    for (template, rule) in [
        ("-{}", "a label neither begins nor ends with '-'"),
        (".{}", "no empty label"),
        ("{}.", "no empty label"),
        ("{}_ib", "a label has only letters, digits and '-'"),
    ] {
        let option = format!("--tf-host-template={template}");
        let run: Run = srun_env(&[], &["-N1", "-n1", "--torch-cluster", &option]);
        run.assert_refused(rule);
        assert!(
            run.messages()[0].contains("RFC 1123"),
            "{:?}",
            run.messages()
        );
    }
    assert_healthy("host template");
}
