//! What a step takes from its job and from srun's environment, on the real
//! testbed (3 nodes, 4 fake GPUs each, `MpiParams=ports=12000-12999`): an
//! explicit srun option beats every inherited or exported one, an inherited
//! spec that does not fit is left out with a warning while one given to srun
//! itself is refused, a stale Slurm variable is not this step's, and a
//! hand-off the user exported is never obeyed. Each ends with no node
//! drained and no step left. (An image's reach is tested behind the
//! container stand-in: tests/testbed/containers.rs.)

use crate::common;

use common::outputs::Outputs;
use common::{assert_healthy, assert_no_node_drained, exec, exec_for, messages};

/// `sbatch --wait ARGS --wrap SCRIPT`: its exit code, and its text: sbatch's
/// and the job's own messages, then each task's output, a file per task.
fn batch(args: &[&str], script: &str) -> (Option<i32>, String) {
    let outputs = Outputs::new("inherited");
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

/// `#SBATCH -N2 -n4 --tf-cluster=chief:1,worker:3`, then
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

/// `#SBATCH -N1 -n3 --gpus-per-node=2 --tf-cluster`, then
/// `srun -n3 --torch-cluster`: PyTorch's own refusal (3 tasks, 2 GPUs) is
/// the step's, never taken for the inherited spec's warning (which would run
/// the step without PyTorch's variables): the step is refused.
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

/// A job submitted with `--torch-cluster --gres=gpu:2
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

/// A batch job submitted with `--gpu-bind=single:2 --jax-cluster`
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

/// A step without reserved ports gets no SLURM_STEP_RESV_PORTS from Slurm,
/// so the value in srun's environment is another's: a user's
/// (`SLURM_STEP_RESV_PORTS=1-3`, which would give MASTER_PORT=1), or the
/// outer step's in a nested `srun --overlap --resv-ports=0` (which would
/// give both steps one MASTER_PORT). The reservation is trusted only when
/// Slurm gave this step one; otherwise the explicit port base (8888).
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
    // A user's range, and hostile values: none is this step's (Slurm
    // reserved it none), so none is refused as if it were.
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

/// `tf-cluster env` run inside a task prints what the plugin set in that
/// task, on every field of srun's hand-off: here a step Slurm reserved no
/// ports for (`--resv-ports=0`, a stale SLURM_STEP_RESV_PORTS in srun's
/// environment) that inherited `--tf-cluster=ps:1,worker:2 --torch-cluster`
/// from its job but has 2 tasks (srun leaves TensorFlow out).
#[test]
fn env_in_a_task_prints_what_the_plugin_set_there() {
    let _t = common::testbed();
    let check = r#"tf-cluster env --tf-cluster=ps:1,worker:2 --torch-cluster --tf-port-base=8888 >"$TMPDIR/twin.$SLURM_PROCID" 2>&1; echo "TWIN $SLURM_PROCID rc=$? ${TF_CONFIG-notf} ${MASTER_PORT-unset} $(python3 -c 'import json, os, sys; t = json.load(open(sys.argv[1])); print(sorted(t), [k for k, v in t.items() if os.environ.get(k) != v])' "$TMPDIR/twin.$SLURM_PROCID" 2>&1)""#;
    let out = common::srun_tasks_env(
        &[
            "SLURM_STEP_RESV_PORTS=20000-20001",
            "SLURM_SPANK__SLURM_SPANK_OPTION_tf_cluster_tf_cluster=ps:1,worker:2",
            "SLURM_SPANK__SLURM_SPANK_OPTION_tf_cluster_torch_cluster=",
            "TMPDIR=/tmp",
        ],
        &[
            "-N2",
            "-n2",
            "--resv-ports=0",
            "--tf-port-base=8888",
            "bash",
            "-c",
            check,
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("TWIN ")).collect();
    assert_eq!(lines.len(), 2, "{text}{stderr}");
    for (rank, line) in lines.iter().enumerate() {
        // PyTorch's variables alone, on the port base, and the twin's
        // every variable equal to the task's.
        let want = format!("TWIN {rank} rc=0 notf 8888 [");
        assert!(line.starts_with(&want), "{line}\n{text}{stderr}");
        assert!(line.contains("'MASTER_PORT'"), "{line}");
        assert!(!line.contains("'TF_CONFIG'"), "{line}");
        assert!(line.ends_with("] []"), "the twin differs: {line}");
    }
}

/// What each task saw: `VARS TF=… MA=…`.
const VARS: &str = r#"echo "VARS TF=${TF_CONFIG+set} MA=${MASTER_ADDR-unset} MP=${MASTER_PORT-unset} STEP=$SLURM_STEP_ID PORTS=${SLURM_STEP_RESV_PORTS-none}""#;

/// `VARS` lines of a run's output.
fn vars(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.split_once("VARS ").map(|(_, r)| r.to_string()))
        .collect()
}

/// A batch job's output (`sbatch --wait ARGS --wrap SCRIPT`).
fn batch_output(args: &[&str], script: &str) -> String {
    let file = format!("/home/alice/inherited-{}.out", std::process::id());
    let mut cmd = vec!["sbatch", "--wait", "-o", file.as_str()];
    cmd.extend_from_slice(args);
    cmd.extend_from_slice(&["--wrap", script]);
    let submitted = exec_for(300, &cmd);
    let text = String::from_utf8_lossy(&exec_for(60, &["cat", file.as_str()]).stdout).into_owned();
    exec_for(60, &["rm", "-f", file.as_str()]);
    format!("{}{text}", String::from_utf8_lossy(&submitted.stderr))
}

/// An explicit srun option beats an inherited `--tf-off`: `sbatch --tf-off`
/// then `srun --tf-cluster` / `srun --torch-cluster` inside sets their
/// variables; the same with the option's variable exported; a plain `srun`
/// in the `--tf-off` job and an explicit `srun --tf-off` get nothing.
#[test]
fn an_explicit_srun_option_beats_an_inherited_tf_off() {
    let _bed = common::testbed();
    let script = format!(
        "srun -N1 -n1 --tf-cluster sh -c '{VARS}'; srun -N1 -n1 --torch-cluster sh -c '{VARS}'; srun -N1 -n1 sh -c '{VARS}'"
    );
    let text = batch_output(&["-N1", "--tf-off", "--tf-cluster"], &script);
    let seen = vars(&text);
    assert_eq!(seen.len(), 3, "{text}");
    assert!(
        seen[0].starts_with("TF=set "),
        "explicit --tf-cluster: {text}"
    );
    assert!(
        !seen[1].contains("MA=unset"),
        "explicit --torch-cluster: {text}"
    );
    assert!(
        seen[2].starts_with("TF= MA=unset"),
        "nothing explicit: {text}"
    );

    let exported = exec_for(
        120,
        &[
            "env",
            "SLURM_SPANK__SLURM_SPANK_OPTION_tf_cluster_tf_off=(null)",
            "srun",
            "-N1",
            "-n1",
            "--tf-cluster",
            "sh",
            "-c",
            VARS,
        ],
    );
    let text = String::from_utf8_lossy(&exported.stdout);
    assert_eq!(vars(&text).len(), 1, "{text}");
    assert!(
        vars(&text)[0].starts_with("TF=set "),
        "exported --tf-off: {text}"
    );

    let off = exec_for(
        120,
        &[
            "srun",
            "-N1",
            "-n1",
            "--tf-cluster",
            "--tf-off",
            "sh",
            "-c",
            VARS,
        ],
    );
    let text = String::from_utf8_lossy(&off.stdout);
    assert!(
        vars(&text)[0].starts_with("TF= MA=unset"),
        "explicit --tf-off: {text}"
    );
    assert_no_node_drained();
}

/// A hand-off the user exported for the next step is not obeyed: in an
/// allocation, `SLURM_TF_CLUSTER="1;$SLURM_JOB_ID.0;verdict=none;no-resv-ports"` then
/// `srun --torch-cluster` (step 0) still takes MASTER_PORT from the ports
/// Slurm reserved for the step, and `…;leave-out=2` (PyTorch's bit) does not drop
/// an explicit --torch-cluster.
#[test]
fn a_hand_off_the_user_exported_is_not_obeyed() {
    let _bed = common::testbed();
    // Forged words, spelt by hand in the job's shell as a user would.
    for forged in ["no-resv-ports", "leave-out=2"] {
        let script = format!(
            "export SLURM_TF_CLUSTER=\"1;$SLURM_JOB_ID.0;verdict=none;{forged}\"; srun -N1 -n1 --torch-cluster sh -c '{VARS}'"
        );
        let out = exec_for(180, &["salloc", "-N1", "sh", "-c", &script]);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let seen = vars(&text);
        assert_eq!(seen.len(), 1, "{forged}: {text}");
        let field = |name: &str| -> String {
            seen[0]
                .split_whitespace()
                .find_map(|f| f.strip_prefix(name))
                .unwrap_or_else(|| panic!("{name} in {}", seen[0]))
                .to_string()
        };
        assert_eq!(
            field("STEP="),
            "0",
            "the forged word named this step: {text}"
        );
        let ports = field("PORTS=");
        assert_ne!(ports, "none", "MpiParams reserves ports: {text}");
        let reserved = common::reserved_ports(&ports);
        let port: u16 = field("MP=")
            .parse()
            .unwrap_or_else(|_| panic!("{forged}: {text}"));
        assert!(
            reserved.contains(&port),
            "{forged}: MASTER_PORT {port} not in {ports}\n{text}"
        );
        assert_ne!(field("MA="), "unset", "{forged}: {text}");
    }
    assert_no_node_drained();
}

/// What each task of a heterogeneous step saw: `HET RANK=… NCCL=…`.
const HET: &str = r#"echo "HET RANK=${RANK-unset} NCCL=${NCCL_SOCKET_IFNAME-unset}""#;

/// srun's word on a heterogeneous step reaches one component only, and
/// srun sets its early word for every component before Slurm copies its
/// environment for them: a hand-off exported for component 1's job id
/// (`verdict=skip`, or `net=lo`) never reaches component 1, so it neither
/// drops that component's variables nor names its interface.
#[test]
fn a_later_het_component_reads_no_hand_off_the_user_exported() {
    let _bed = common::testbed();
    // Forged words, spelt by hand in the job's shell as a user would.
    for forged in ["verdict=skip", "verdict=none;net=lo"] {
        let script = format!(
            "export SLURM_TF_CLUSTER=\"1;$((SLURM_JOB_ID+1)).0;{forged}\"; srun -n1 -w node1 : -n1 -w node2 --torch-cluster --tf-network=eth0 sh -c '{HET}'"
        );
        // Each task's line from its own file (SLURM_STDOUTMODE).
        let outputs = common::outputs::Outputs::new("het-forged");
        let [out_mode, err_mode, _] = outputs.env();
        let out = exec_for(
            180,
            &[
                "env", &out_mode, &err_mode, "salloc", "-N1", "-n1", "-w", "node1", ":", "-N1",
                "-n1", "-w", "node2", "sh", "-c", &script,
            ],
        );
        let text = format!(
            "{}{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            outputs.dump()
        );
        let mut seen: Vec<&str> = text
            .lines()
            .filter_map(|l| l.split_once("HET ").map(|(_, r)| r))
            .collect();
        seen.sort();
        assert_eq!(
            seen,
            ["RANK=0 NCCL==eth0", "RANK=1 NCCL==eth0"],
            "{forged}: {text}"
        );
    }
    assert_no_node_drained();
}
