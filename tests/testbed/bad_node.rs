//! A bad node costs seconds, not the run (`--tf-requeue-on` with
//! `--tf-exclude-max`), on the testbed's three nodes: a two-node job whose
//! node 1 exits with the code (or whose node 1 the preflight refuses) is
//! requeued by that node's slurmstepd with the node excluded; its next
//! incarnation runs on the two other nodes and completes; slurmctld's
//! record of the job names the node (`ExcNodeList`, and the plugin's count
//! in `AdminComment`). With `--tf-exclude-max=0` the job is requeued as
//! before, nothing excluded.
//!
//! node2 given the tests' stand-in of NVIDIA's management library: a GPU it
//! reports with uncorrectable ECC errors or a fabric not completed is refused
//! in the preflight, named by node, Slurm's index and PCI address.
//!
//! Cost: three two-node batch jobs, each requeued once (the testbed's
//! credential expiry: 30 s before the next incarnation starts).

use crate::common;

use std::time::{Duration, Instant};

use common::{exclusive, exec, on, testbed};

/// Node 1 of the step exits 43 at once in the first incarnation while node
/// 0 runs on; every task of the next incarnation says where it is and ends.
const EXIT_SCRIPT: &str = r#"#!/bin/bash
srun -N2 --ntasks-per-node=1 --tf-requeue-on=43 EXTRA bash -c 'echo "HOST ${SLURM_RESTART_COUNT:-0} $SLURM_NODEID $(hostname)"; if [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then [ "$SLURM_NODEID" = 1 ] && exit 43; sleep 60; fi; exit 0'
"#;

/// The first incarnation waits for the test to break its node 1 (the
/// `go` file), then runs a framework step on two GPUs of each node.
const REFUSED_SCRIPT: &str = r#"#!/bin/bash
for i in $(seq 600); do [ -e DIR/go ] && break; sleep 0.1; done
srun -N2 --ntasks-per-node=1 --gres=gpu:2 --torch-cluster --tf-requeue-on=43 bash -c 'echo "HOST ${SLURM_RESTART_COUNT:-0} $SLURM_NODEID $(hostname)"; exit 0'
"#;

/// `scontrol show job -o`'s fields.
fn fields(job: &str) -> std::collections::BTreeMap<String, String> {
    let out = exec(&["scontrol", "show", "job", "-o", job]);
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|f| f.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Waits until job `job` reaches a state `done` accepts (240 s at most).
fn wait(job: &str, done: &dyn Fn(&str) -> bool) -> std::collections::BTreeMap<String, String> {
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let f = fields(job);
        if done(f.get("JobState").map_or("", String::as_str)) {
            return f;
        }
        assert!(Instant::now() < deadline, "job {job}: {f:?}");
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// A job of `script` in folder `dir`, given `gres`: its id.
fn submit(dir: &str, script: &str, gres: &[&str]) -> String {
    common::install(dir, &[("job.sh", script)], "");
    let out_file = format!("{dir}/job.out");
    let job_sh = format!("{dir}/job.sh");
    let mut cmd = vec![
        "sbatch",
        "--parsable",
        "--requeue",
        "--open-mode=append",
        "-N2",
    ];
    cmd.extend_from_slice(gres);
    cmd.extend_from_slice(&["-D", dir, "-o", &out_file, &job_sh]);
    let out = exec(&cmd);
    let job = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        out.status.success() && !job.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    job
}

/// The `HOST INCARNATION NODEID HOSTNAME` lines of the job's output.
fn hosts(dir: &str) -> (String, Vec<(String, String, String)>) {
    let text =
        String::from_utf8_lossy(&exec(&["cat", &format!("{dir}/job.out")]).stdout).into_owned();
    let lines = text
        .lines()
        .filter_map(|l| l.strip_prefix("HOST "))
        .filter_map(|l| {
            let mut w = l.split_whitespace().map(str::to_string);
            Some((w.next()?, w.next()?, w.next()?))
        })
        .collect();
    (text, lines)
}

/// The hosts of incarnation `n`.
fn of(lines: &[(String, String, String)], n: &str) -> Vec<String> {
    let mut h: Vec<String> = lines
        .iter()
        .filter(|(i, _, _)| i == n)
        .map(|(_, _, h)| h.clone())
        .collect();
    h.sort();
    h
}

/// The exit-code job with `extra` options: (job, its record, its output's
/// lines, the node that exited with the code).
fn exit_job(
    tag: &str,
    extra: &str,
) -> (
    String,
    std::collections::BTreeMap<String, String>,
    String,
    String,
    Vec<String>,
) {
    let dir = format!("/home/alice/tfc-bad-node-{tag}-{}", std::process::id());
    let job = submit(&dir, &EXIT_SCRIPT.replace("EXTRA", extra), &[]);
    let record = wait(&job, &|s| matches!(s, "COMPLETED" | "FAILED" | "CANCELLED"));
    let (text, lines) = hosts(&dir);
    let ctx = format!("job {job} {record:?}\n{text}");
    let bad = lines
        .iter()
        .find(|(i, n, _)| i == "0" && n == "1")
        .map(|(_, _, h)| h.clone())
        .unwrap_or_else(|| panic!("no node 1 in the first incarnation: {ctx}"));
    let second = of(&lines, "1");
    exec(&["rm", "-rf", &dir]);
    (job, record, ctx, bad, second)
}

/// How many times the requeue tests run: `TFC_BAD_NODE_RUNS` (default 1;
/// docs/reliability.md gives the measurement of 20). The exit-code jobs run
/// side by side, the refused ones one after another (they break a node).
fn runs() -> usize {
    std::env::var("TFC_BAD_NODE_RUNS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1)
}

#[test]
fn a_node_exiting_with_the_code_is_excluded_and_the_job_completes_elsewhere() {
    let _t = testbed();
    let jobs: Vec<_> = (0..runs())
        .map(|i| std::thread::spawn(move || exit_excluded(&format!("exit{i}"))))
        .collect();
    let done = jobs.into_iter().map(|j| j.join().unwrap()).count();
    eprintln!(
        "BAD_NODE exit: {done} of {} jobs requeued elsewhere",
        runs()
    );
}

/// One job of [`EXIT_SCRIPT`]: requeued once, without the node that exited
/// with the code, and completed on two others.
fn exit_excluded(tag: &str) {
    let (_, record, ctx, bad, second) = exit_job(tag, "");
    assert_eq!(record["JobState"], "COMPLETED", "{ctx}");
    assert_eq!(record["Restarts"], "1", "{ctx}");
    assert_eq!(record["ExcNodeList"], bad, "{ctx}");
    assert!(
        record
            .get("AdminComment")
            .is_some_and(|c| c.contains(&format!("tf-cluster-excluded={bad}"))),
        "{ctx}"
    );
    assert_eq!(second.len(), 2, "{ctx}");
    assert!(!second.contains(&bad), "ran on {bad} again: {ctx}");
    eprintln!("BAD_NODE exit: {bad} excluded, next incarnation on {second:?}");
}

#[test]
fn with_exclude_max_0_the_job_is_requeued_as_before() {
    let _t = testbed();
    let (_, record, ctx, _, second) = exit_job("off", "--tf-exclude-max=0");
    assert_eq!(record["JobState"], "COMPLETED", "{ctx}");
    assert_eq!(record["Restarts"], "1", "{ctx}");
    assert_eq!(record["ExcNodeList"], "(null)", "{ctx}");
    assert!(
        !record
            .get("AdminComment")
            .is_some_and(|c| c.contains("tf-cluster-excluded")),
        "{ctx}"
    );
    assert_eq!(second.len(), 2, "{ctx}");
}

/// Node 1's /dev/nvidia1 removed once the job runs: the preflight refuses
/// the step there, its slurmstepd requeues the job without it, and the
/// next incarnation's step runs on the other two nodes.
#[test]
fn a_node_the_preflight_refuses_is_excluded_and_the_job_completes_elsewhere() {
    for i in 0..runs() {
        refused_job(&format!("refused{i}"), &[1]);
    }
}

/// Both nodes of the step refused at once (each lost /dev/nvidia1): one
/// requeue for the event, not one per node. Node 0 requeues and excludes
/// itself (`--tf-exclude-max` 1); node 1 leaves node 0 the first word, so
/// slurmctld logs no refused second requeue, and the job is not left with
/// both nodes excluded (three nodes: it could never run again).
#[test]
fn two_nodes_refusing_one_step_requeue_the_job_once() {
    refused_job("refused-both", &[0, 1]);
}

/// The job of REFUSED_SCRIPT, its step's nodes `broken` (by node id) made
/// to fail the preflight once it runs: requeued in seconds without the
/// lowest of them, once, and completed on nodes without it.
fn refused_job(tag: &str, broken: &[usize]) {
    let _alone = exclusive();
    let dir = format!("/home/alice/tfc-bad-node-{tag}-{}", std::process::id());
    let job = submit(
        &dir,
        &REFUSED_SCRIPT.replace("DIR", &dir),
        &["--gres=gpu:2"],
    );
    let running = wait(&job, &|s| s == "RUNNING");
    let nodes = running["NodeList"].clone();
    let out = exec(&["scontrol", "show", "hostnames", &nodes]);
    let names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(names.len(), 2, "{running:?}");
    let bad: Vec<&String> = broken.iter().map(|&i| &names[i]).collect();
    for node in &bad {
        let rm = on(node, &["rm", "-f", "/dev/nvidia1"]);
        assert!(rm.status.success(), "{rm:?}");
    }
    let started = Instant::now();
    exec(&["touch", &format!("{dir}/go")]);
    let requeued = wait(&job, &|s| s != "RUNNING");
    let took = started.elapsed();
    for node in &bad {
        on(
            node,
            &["mknod", "-m", "666", "/dev/nvidia1", "c", "195", "1"],
        );
    }
    let record = wait(&job, &|s| matches!(s, "COMPLETED" | "FAILED" | "CANCELLED"));
    let (text, lines) = hosts(&dir);
    let ctx = format!("job {job} {requeued:?} {record:?}\n{text}");
    assert_eq!(record["JobState"], "COMPLETED", "{ctx}");
    assert_eq!(record["Restarts"], "1", "{ctx}");
    let excluded = bad[0];
    assert_eq!(&record["ExcNodeList"], excluded, "{ctx}");
    for node in &bad {
        let want = format!(
            "tf-cluster: {node}: GPU 1's device node /dev/nvidia1 is missing: the job is requeued"
        );
        assert!(
            text.lines().any(|l| l.contains(&want)),
            "want {want}\n{ctx}"
        );
    }
    let want = format!(
        "tf-cluster: {excluded}: GPU 1's device node /dev/nvidia1 is missing: the job is requeued without this node (--tf-requeue-on)"
    );
    assert!(
        text.lines().any(|l| l.ends_with(&want)),
        "want {want}\n{ctx}"
    );
    // No refused requeue, no plugin line about one.
    let errors = super::requeue_on::requeue_errors(&job);
    assert!(errors.is_empty(), "{errors:#?}\n{ctx}");
    let second = of(&lines, "1");
    assert_eq!(second.len(), 2, "{ctx}");
    assert!(!second.contains(excluded), "ran on {excluded} again: {ctx}");
    assert!(
        took < Duration::from_secs(10),
        "requeued after {took:?}: {ctx}"
    );
    eprintln!(
        "BAD_NODE {tag}: {bad:?} refused and the job requeued in {:.1} s, next incarnation on {second:?}",
        took.as_secs_f64()
    );
    exec(&["rm", "-rf", &dir]);
}

/// The tests' stand-in of NVIDIA's management library
/// (tests/nvml_standin/nvml_standin.c), built on the host, as hex.
fn nvml_standin_hex() -> String {
    let dir = std::env::temp_dir().join(format!("tfc-nvml-tb-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let so = dir.join("libnvidia-ml.so.1");
    let src = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/nvml_standin/nvml_standin.c"
    );
    let out = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&so)
        .arg(src)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let bytes = std::fs::read(&so).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Where the node's dynamic linker finds the library, as NVIDIA's driver
/// installs it.
const NVML: &str = "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1";

/// node2 has the stand-in library, its GPUs as `gpus` says
/// (`MINOR BUSID STATE` lines); removed when dropped.
struct StandinNvml;

impl StandinNvml {
    fn on_node2(hex_file: &str, gpus: &str) -> StandinNvml {
        let script = format!(
            "python3 -c 'import sys; open(sys.argv[2], \"wb\").write(bytes.fromhex(open(sys.argv[1]).read().strip()))' {hex_file} {NVML} && printf '{gpus}' > /etc/tfc-nvml-standin"
        );
        let out = on("node2", &["bash", "-c", &script]);
        assert!(out.status.success(), "{out:?}");
        StandinNvml
    }
}

impl Drop for StandinNvml {
    fn drop(&mut self) {
        on("node2", &["rm", "-f", NVML, "/etc/tfc-nvml-standin"]);
    }
}

/// node2's GPU 1 with volatile uncorrectable ECC errors, then with a fabric
/// not completed, as the stand-in library reports them: each step on its
/// two GPUs is refused within 10 s naming the node, Slurm's GPU index and
/// its PCI address; with every GPU healthy the same step runs.
#[test]
fn a_gpu_the_library_reports_unfit_is_refused_naming_node_and_gpu() {
    let _alone = exclusive();
    let dir = format!("/home/alice/tfc-nvml-{}", std::process::id());
    let hex = nvml_standin_hex();
    common::install(&dir, &[("nvml.hex", hex.as_str())], "");
    let hex_file = format!("{dir}/nvml.hex");
    let step = ["-N1", "-w", "node2", "--gres=gpu:2", "--torch-cluster"];
    let payload = "exec perl -e \"sleep 30; print qq(finished\\n)\"";
    for (state, why) in [
        ("retired", "pages are pending retirement (reset the GPU)"),
        ("remap", "a row remap failed"),
        ("ecc", "3 volatile uncorrectable ECC error(s)"),
        ("fabric", "its NVLink fabric is not completed (state 2)"),
    ] {
        let gpus = format!("0 00000000:3B:00.0 healthy\\n1 00000000:3C:00.0 {state}\\n");
        let _nvml = StandinNvml::on_node2(&hex_file, &gpus);
        let ended = common::srun_timed(&step, payload);
        let want = format!("node2: GPU 1 (00000000:3C:00.0): {why}");
        let ctx = format!("{state}: {:.1} s\n{}", ended.took.as_secs_f64(), ended.text);
        assert_ne!(ended.code, 0, "{ctx}");
        let lines = common::messages(&ended.text);
        assert!(
            !lines.is_empty() && lines.iter().all(|l| *l == want),
            "want {want}\n{ctx}"
        );
        assert!(ended.took < Duration::from_secs(10), "{ctx}");
        assert!(!ended.text.contains("finished"), "{ctx}");
        eprintln!("TIMING nvml {state}: {:.1} s", ended.took.as_secs_f64());
    }
    let _nvml = StandinNvml::on_node2(
        &hex_file,
        "0 00000000:3B:00.0 healthy\\n1 00000000:3C:00.0 healthy\\n",
    );
    for _ in 0..runs() {
        let ended = common::srun_timed(&step, "true");
        assert_eq!(ended.code, 0, "healthy: {}", ended.text);
        assert!(common::messages(&ended.text).is_empty(), "{}", ended.text);
    }
    eprintln!("BAD_NODE healthy: {} of {} steps passed", runs(), runs());
    exec(&["rm", "-rf", &dir]);
}
