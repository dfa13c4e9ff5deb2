//! Training through a requeue, with the templates users copy (examples/tensorflow/preemptible.*,
//! examples/pytorch/requeue.*), submitted as they are with a smaller shape on sbatch's command
//! line and `TF_CLUSTER_EXAMPLE_CPU=1` (examples/README.md), on the testbed whose slurm.conf has
//! `RequeueExit=42` and `AuthInfo=cred_expire=30` (a requeued job starts again about 30 s later).
//!
//! - TensorFlow: a MultiWorkerMirroredStrategy job with `PreemptionCheckpointHandler` gets
//!   SIGTERM (`scancel --signal=TERM`, as a preemption or `--signal=TERM@…` sends it), every
//!   worker saves at the same step and exits 42, the job is requeued (the template's
//!   `--tf-requeue-on=42`; the testbed's `RequeueExit=42` would requeue it too), the requeued
//!   job is kept off one of its first nodes, and its second incarnation starts from the saved
//!   step with a TF_CONFIG naming its new nodes and finishes.
//! - PyTorch: elastic torchrun; once the first incarnation saved a checkpoint, USR1 to the batch
//!   script (`scancel --batch --signal=USR1`, what the template's `--signal=B:USR1@120` sends):
//!   its ranks stop at one step, rank 0 saves it, each node's task exits 43 and the template's
//!   `--tf-requeue-on=43` requeues the job (43 is no `RequeueExit=` code of the testbed, and
//!   nothing else requeues it); the second incarnation's run id and rendezvous id carry `.r1`,
//!   and every worker starts from the step the first stopped at.
//!
//! What is expected comes from the job's own record (`scontrol show job`: restarts, nodes, exit
//! code), from what each incarnation printed about itself (its hosts, its steps), from the
//! templates' documented lines and from the rules the docs state (`JOB.STEP.rK`), never from the
//! plugin's output. Every suite: bookworm's torch 1.13 on Python 3.11 needs torchrun's
//! `--redirects=1 --tee=1` (its default cannot be parsed there): the PyTorch job is given
//! `PET_REDIRECTS=1 PET_TEE=1` in its environment on that torch only.

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::outputs::Outputs;
use common::{exec, on, testbed};

const DIR: &str = "/home/alice/requeue-tests";

const TENSORFLOW: [(&str, &str); 2] = [
    (
        "preemptible.sbatch",
        include_str!("../../examples/tensorflow/preemptible.sbatch"),
    ),
    (
        "preemptible.py",
        include_str!("../../examples/tensorflow/preemptible.py"),
    ),
];
const PYTORCH: [(&str, &str); 2] = [
    (
        "requeue.sbatch",
        include_str!("../../examples/pytorch/requeue.sbatch"),
    ),
    (
        "requeue_train.py",
        include_str!("../../examples/pytorch/requeue_train.py"),
    ),
];

/// How long one incarnation may take to reach a point (TensorFlow and torch start slowly on a
/// loaded 2-core machine), and the whole job.
const PATIENCE: Duration = Duration::from_secs(240);

/// One requeued job of this file at a time (each waits on its own timing; side by side on a
/// 2-core machine they would slow each other past it).
fn one_job() -> std::sync::MutexGuard<'static, ()> {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TURN.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn install() {
    static DONE: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    DONE.get_or_init(|| {
        common::install(&format!("{DIR}/tensorflow"), &TENSORFLOW, "");
        common::install(&format!("{DIR}/pytorch"), &PYTORCH, "");
    });
}

/// A submitted job: its id and output files; cancelled when dropped before it ended.
struct Job {
    id: String,
    /// The batch script's log and, in files of their own, each task's (srun's tasks write
    /// them in append mode, so a requeued job's second incarnation adds to the first's) and
    /// each torchrun worker's (PET_LOG_DIR: one folder per rendezvous id, so per incarnation).
    files: Outputs,
    /// Which of those files hold the ranks' lines.
    ranks_in: RanksIn,
    checkpoints: String,
    ended: bool,
}

/// Where a job's ranks print.
#[derive(Clone, Copy, PartialEq)]
enum RanksIn {
    /// One process per srun task: the tasks' files.
    Tasks,
    /// torchrun's workers: their own files (PET_LOG_DIR), never the task's copy (torch 1.13
    /// needs `--tee 1` beside `--redirects 1`, which copies them to the task's stdout too).
    Workers,
}

impl Drop for Job {
    fn drop(&mut self) {
        if !self.ended {
            exec(&["scancel", &self.id]);
        }
        exec(&["rm", "-rf", &self.checkpoints]);
    }
}

/// `env VARS sbatch --parsable -o OUT -D DIR/FOLDER --time=5 SHAPE SCRIPT`, every task's and
/// torchrun worker's output in a file of its own (the template as users copy it).
fn submit(folder: &str, script: &str, vars: &[&str], shape: &[&str], ranks_in: RanksIn) -> Job {
    install();
    let dir = format!("{DIR}/{folder}");
    let files = Outputs::new(&format!("requeue-{folder}"));
    let out = format!("{}/job.log", files.path());
    let script = format!("{dir}/{script}");
    let mut cmd = vec!["env", "TF_CLUSTER_EXAMPLE_CPU=1", "TF_CPP_MIN_LOG_LEVEL=2"];
    let env = files.env();
    cmd.extend(env.iter().map(String::as_str));
    let workers = format!("PET_LOG_DIR={}/workers", files.path());
    cmd.extend_from_slice(&["SLURM_OPEN_MODE=append", &workers]);
    // Fresh for each job: job ids start again from 1 when the testbed is brought up anew, and
    // /home may outlive it.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let checkpoints = format!("{DIR}/checkpoints-{nanos}");
    let var = format!("CHECKPOINTS={checkpoints}");
    cmd.push(&var);
    cmd.extend_from_slice(vars);
    // The templates ask for `--signal=TERM@120` (TensorFlow's) or `USR1@…` (PyTorch's)
    // before the time limit: under a loaded machine an incarnation ran past 3 minutes and got
    // that signal once more after its training, which the tests do not mean to test; their own
    // signal or requeue is sent explicitly.
    cmd.extend_from_slice(&["sbatch", "--parsable", "-o", &out, "-D", &dir, "--time=15"]);
    cmd.extend_from_slice(shape);
    cmd.push(&script);
    let submitted = exec(&cmd);
    let id = String::from_utf8_lossy(&submitted.stdout)
        .trim()
        .to_string();
    assert!(
        submitted.status.success() && id.chars().all(|c| c.is_ascii_digit()),
        "sbatch: {id} {}",
        String::from_utf8_lossy(&submitted.stderr)
    );
    Job {
        id,
        files,
        ranks_in,
        checkpoints,
        ended: false,
    }
}

impl Job {
    /// The batch script's log, then each other file after a `==> FILE NAME` line.
    fn output(&self) -> String {
        let mut text = String::new();
        let mut files = self.files.tree();
        if let Some(log) = files.remove("job.log") {
            text.push_str(&log);
        }
        for (name, contents) in files {
            let worker = name.starts_with("workers/");
            if worker != (self.ranks_in == RanksIn::Workers) && !name.ends_with(".err") {
                continue;
            }
            text.push_str(&format!("{FILE}{name}\n{contents}"));
            if !contents.ends_with('\n') {
                text.push('\n');
            }
        }
        text
    }

    /// `scontrol show job -o`'s fields (JobState, Restarts, NodeList, ExitCode…).
    fn record(&self) -> BTreeMap<String, String> {
        let out = exec(&["scontrol", "show", "job", "-o", &self.id]);
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .filter_map(|f| f.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn field(&self, name: &str) -> String {
        self.record().get(name).cloned().unwrap_or_default()
    }

    /// Waits until `ready` holds for the job's record and output; panics with both after
    /// PATIENCE or when the job ended otherwise.
    fn wait(&self, what: &str, ready: impl Fn(&BTreeMap<String, String>, &str) -> bool) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let record = self.record();
            let output = self.output();
            if ready(&record, &output) {
                return;
            }
            let state = record.get("JobState").map(String::as_str).unwrap_or("");
            assert!(
                Instant::now() < deadline
                    && !matches!(state, "FAILED" | "CANCELLED" | "TIMEOUT" | "NODE_FAIL"),
                "job {}: {what}: not within {PATIENCE:?} ({record:?}):\n{output}",
                self.id
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Waits until the job is COMPLETED; its record then.
    fn wait_completed(&mut self) -> BTreeMap<String, String> {
        self.wait("COMPLETED", |r, _| {
            r.get("JobState").is_some_and(|s| s == "COMPLETED")
        });
        self.ended = true;
        self.record()
    }
}

/// What stands before each file's name in [`Job::output`].
const FILE: &str = "==> FILE ";

/// [`Job::output`] by incarnation: per K, the node list the batch script printed (`incarnation
/// K of job J on NODES`) and the lines of K: the batch script's after that line, and each
/// task's or worker's from its `rank R/W on HOST: starting at step S of N, run ID` line on,
/// K being ID's (`J.0` the first incarnation, `J.0.rK` the K-th requeue); srun's `R: ` label
/// and torchrun's `[default0]:` prefix stripped.
fn incarnations(output: &str) -> BTreeMap<u32, (String, Vec<String>)> {
    let mut found: BTreeMap<u32, (String, Vec<String>)> = BTreeMap::new();
    let (log, files) = output.split_once(FILE).unwrap_or((output, ""));
    let mut current = None;
    for line in log.lines() {
        if let Some(rest) = line.strip_prefix("incarnation ") {
            if let Some((k, rest)) = rest.split_once(" of job ") {
                if let Some((_, nodes)) = rest.split_once(" on ") {
                    let k: u32 = k.parse().unwrap();
                    found.entry(k).or_default().0 = nodes.to_string();
                    current = Some(k);
                    continue;
                }
            }
        }
        if let Some(k) = current {
            found.entry(k).or_default().1.push(line.to_string());
        }
    }
    for file in files.split(FILE) {
        let mut current = None;
        for line in file.lines().skip(1) {
            let text = match line.split_once(": ") {
                Some((label, text)) if label.trim().parse::<u32>().is_ok() => text,
                _ => line,
            };
            // torchrun's --tee prefix: `[default0]:`.
            let text = match text.split_once("]:") {
                Some((prefix, rest)) if prefix.starts_with("[default") => rest,
                _ => text,
            };
            if let Some((_, rest)) = text.split_once(": starting at step ") {
                let (_, run, _) = starting(rest);
                let k = match run.rsplit_once(".r") {
                    Some((_, k)) => k.parse().unwrap_or_else(|_| panic!("run id {run}")),
                    None => 0,
                };
                current = Some(k);
            }
            if let Some(k) = current {
                found.entry(k).or_default().1.push(text.to_string());
            }
        }
    }
    found
}

/// Each rank's `rank R/W on HOST: WHAT` line whose WHAT starts with `what`: (W, HOST, rest of
/// WHAT) by R; a rank twice fails.
fn rank_lines(lines: &[String], what: &str) -> BTreeMap<u32, (u32, String, String)> {
    let mut found = BTreeMap::new();
    for line in lines {
        for (at, _) in line.match_indices("rank ") {
            let rest = &line[at + "rank ".len()..];
            let Some((head, tail)) = rest.split_once(": ") else {
                continue;
            };
            let Some(tail) = tail.strip_prefix(what) else {
                continue;
            };
            let Some((ranks, host)) = head.split_once(" on ") else {
                continue;
            };
            let Some((r, w)) = ranks.split_once('/') else {
                continue;
            };
            let (Ok(r), Ok(w)) = (r.parse::<u32>(), w.parse::<u32>()) else {
                continue;
            };
            let tail = tail.split("rank ").next().unwrap().trim().to_string();
            assert!(
                found.insert(r, (w, host.to_string(), tail)).is_none(),
                "rank {r} twice ({what}): {lines:#?}"
            );
        }
    }
    found
}

/// `starting at step S of N, run ID[, rendezvous RID]` → (S, ID, RID).
fn starting(rest: &str) -> (u32, String, Option<String>) {
    let (step, rest) = rest.split_once(" of ").expect("starting line");
    let (_, rest) = rest.split_once(", run ").expect("run id");
    let (run, rdzv) = match rest.split_once(", rendezvous ") {
        Some((run, rdzv)) => (run, Some(rdzv.to_string())),
        None => (rest, None),
    };
    (step.trim().parse().unwrap(), run.to_string(), rdzv)
}

/// The node names of a Slurm node list (`node[1-2]`, `node1,node3`).
fn hostnames(list: &str) -> Vec<String> {
    let out = exec(&["scontrol", "show", "hostnames", list]);
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// TensorFlow's path through a preemption: SIGTERM → every worker saves at one step and exits
/// 42 → requeued (`--tf-requeue-on=42`, or the testbed's `RequeueExit=42`) → the job, kept
/// off rank 0's first node, starts on other nodes
/// from the saved step with their TF_CONFIG, and finishes.
#[test]
fn a_preempted_tensorflow_job_resumes_from_its_checkpoint() {
    let _t = testbed();
    let _one = one_job();
    let started = Instant::now();
    let mut job = submit(
        "tensorflow",
        "preemptible.sbatch",
        &["VENV=/opt/tf"],
        &["--nodes=2", "--ntasks-per-node=1", "--gpus-per-node=1"],
        RanksIn::Tasks,
    );
    job.wait("step 10 of the first incarnation", |_, out| {
        incarnations(out)
            .get(&0)
            .is_some_and(|(_, l)| l.iter().any(|l| l.starts_with("step 10: loss")))
    });
    let first_nodes = hostnames(&job.field("NodeList"));
    let signalled = exec(&["scancel", "--signal=TERM", &job.id]);
    assert!(signalled.status.success(), "{signalled:?}");
    // Requeued: pending again with one restart. Keep it off the first incarnation's rank 0
    // node, so that its TF_CONFIG must name another allocation.
    job.wait("requeued", |r, _| {
        r.get("Restarts").is_some_and(|n| n == "1")
            && r.get("JobState").is_some_and(|s| s == "PENDING")
    });
    let excluded = first_nodes[0].clone();
    let updated = on(
        "ctl",
        &[
            "scontrol",
            "update",
            &format!("jobid={}", job.id),
            &format!("ExcNodeList={excluded}"),
        ],
    );
    assert!(updated.status.success(), "{updated:?}");
    let record = job.wait_completed();
    let took = started.elapsed();
    let output = job.output();
    let ctx = format!("job {} {record:?}:\n{output}", job.id);
    assert_eq!(record["Restarts"], "1", "{ctx}");
    assert_eq!(record["ExitCode"], "0:0", "{ctx}");

    let runs = incarnations(&output);
    assert_eq!(runs.keys().copied().collect::<Vec<_>>(), [0, 1], "{ctx}");
    let (nodes0, lines0) = &runs[&0];
    let (nodes1, lines1) = &runs[&1];
    assert_eq!(hostnames(nodes0), first_nodes, "{ctx}");
    let second_nodes = hostnames(nodes1);
    assert!(!second_nodes.contains(&excluded), "{ctx}");

    // The first incarnation: both workers from step 0, both saved at one step past 10, exit 42.
    let start0 = rank_lines(lines0, "starting at step ");
    assert_eq!(start0.keys().copied().collect::<Vec<_>>(), [0, 1], "{ctx}");
    for (w, _, rest) in start0.values() {
        assert_eq!(*w, 2, "{ctx}");
        let (step, run, _) = starting(rest);
        assert_eq!(step, 0, "{ctx}");
        assert_eq!(run, format!("{}.0", job.id), "{ctx}");
    }
    let saved = rank_lines(lines0, "preempted, saved at step ");
    assert_eq!(saved.keys().copied().collect::<Vec<_>>(), [0, 1], "{ctx}");
    let steps: Vec<u32> = saved.values().map(|s| s.2.parse().unwrap()).collect();
    assert_eq!(steps[0], steps[1], "both saved at one step: {ctx}");
    let saved_at = steps[0];
    assert!((10..60).contains(&saved_at), "{ctx}");
    // The plugin (`--tf-requeue-on=42`) requeued the running job as rank 0 exited 42, which
    // cancels the batch script; the testbed's RequeueExit=42 acts only once the script ended.
    assert!(
        output.contains(&format!("*** JOB {} ON ", job.id))
            && output.contains("DUE TO JOB REQUEUE"),
        "the plugin did not requeue the running job: {ctx}"
    );
    assert!(rank_lines(lines0, "done, loss ").is_empty(), "{ctx}");

    // The second: from the saved step, on its own nodes, with their TF_CONFIG, to the end.
    let start1 = rank_lines(lines1, "starting at step ");
    assert_eq!(start1.keys().copied().collect::<Vec<_>>(), [0, 1], "{ctx}");
    let mut hosts = Vec::new();
    for (w, host, rest) in start1.values() {
        assert_eq!(*w, 2, "{ctx}");
        let (step, run, _) = starting(rest);
        assert_eq!(step, saved_at, "resumed from the checkpoint: {ctx}");
        assert_eq!(run, format!("{}.0.r1", job.id), "{ctx}");
        hosts.push(host.clone());
    }
    let mut sorted = hosts.clone();
    sorted.sort();
    assert_eq!(sorted, second_nodes, "{ctx}");
    let clusters = rank_lines(lines1, "cluster ");
    for (rank, (_, _, json)) in &clusters {
        let cluster: serde_json::Value = serde_json::from_str(json).unwrap();
        let workers: Vec<&str> = cluster["worker"]
            .as_array()
            .unwrap_or_else(|| panic!("rank {rank}: {json}: {ctx}"))
            .iter()
            .map(|w| w.as_str().unwrap())
            .collect();
        assert_eq!(workers.len(), 2, "{ctx}");
        for (i, address) in workers.iter().enumerate() {
            let (host, port) = address.rsplit_once(':').unwrap();
            assert_eq!(
                host, hosts[i],
                "worker {i} in rank {rank}'s TF_CONFIG: {ctx}"
            );
            // A port Slurm reserved: slurm.conf's MpiParams=ports=12000-12999.
            let port: u16 = port.parse().unwrap();
            assert!((12000..13000).contains(&port), "{address}: {ctx}");
        }
    }
    assert_eq!(clusters.len(), 2, "{ctx}");
    let done = rank_lines(lines1, "done, loss ");
    assert_eq!(done.keys().copied().collect::<Vec<_>>(), [0, 1], "{ctx}");
    assert!(
        lines1.iter().any(|l| l == "incarnation 1 ended with 0"),
        "{ctx}"
    );
    eprintln!(
        "tensorflow: job {} preempted at step {saved_at} on {first_nodes:?}, resumed on \
         {second_nodes:?}, done in {:.0} s",
        job.id,
        took.as_secs_f64()
    );
}

/// `sacct --duplicates` of a job that ended: each incarnation's state, then each incarnation's
/// step 0 as (state, exit code), in order (slurmdbd may lag: up to 60 s for the last).
fn accounting(job: &str) -> (Vec<String>, Vec<(String, String)>) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = exec(&[
            "sacct",
            "-j",
            job,
            "--duplicates",
            "-n",
            "-P",
            "-o",
            "JobID,State,ExitCode",
        ]);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let mut jobs = Vec::new();
        let mut steps = Vec::new();
        for line in text.lines() {
            let fields: Vec<&str> = line.split('|').collect();
            let [id, state, code] = fields[..] else {
                continue;
            };
            if id == job {
                jobs.push(state.to_string());
            } else if id == format!("{job}.0") {
                steps.push((state.to_string(), code.to_string()));
            }
        }
        if jobs.last().is_some_and(|s| s == "COMPLETED") && steps.len() == jobs.len()
            || Instant::now() > deadline
        {
            return (jobs, steps);
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// Whether the image's torch is 1.x (bookworm): torchrun's output arguments then need `1`.
fn old_torch() -> bool {
    let out = exec(&["python3", "-c", "import torch; print(torch.__version__)"]);
    String::from_utf8_lossy(&out.stdout).starts_with("1.")
}

/// Elastic torchrun asked to stop in the middle (USR1 to the batch script, as before the time
/// limit): the plugin requeues the job on the tasks' code 43, the second incarnation's ids
/// carry `.r1` and every worker starts from the step the first one stopped at.
#[test]
fn a_requeued_torchrun_job_resumes_with_a_new_id() {
    let _t = testbed();
    let _one = one_job();
    let started = Instant::now();
    // Each worker's stdout in a file of its own. torch 1.13 on Python 3.11 parses only `1` for
    // both, and fails without --tee.
    let vars: &[&str] = if old_torch() {
        &["PET_REDIRECTS=1", "PET_TEE=1"]
    } else {
        &["PET_REDIRECTS=1"]
    };
    let mut job = submit(
        "pytorch",
        "requeue.sbatch",
        vars,
        &["--nodes=3", "--ntasks-per-node=1", "--gpus-per-node=1"],
        RanksIn::Workers,
    );
    // The checkpoint file itself, not the workers' lines (torch 1.13's `--tee` copies them
    // late, sometimes after the training ended).
    let saved_file = format!("{}/{}/checkpoint.pt", job.checkpoints, job.id);
    job.wait("the first checkpoint", |_, _| {
        exec(&["test", "-e", &saved_file]).status.success()
    });
    let signalled = exec(&["scancel", "--batch", "--signal=USR1", &job.id]);
    assert!(signalled.status.success(), "{signalled:?}");
    let record = job.wait_completed();
    let took = started.elapsed();
    let output = job.output();
    let ctx = format!("job {} {record:?}:\n{output}", job.id);
    assert_eq!(record["Restarts"], "1", "{ctx}");
    assert_eq!(record["ExitCode"], "0:0", "{ctx}");
    let runs = incarnations(&output);
    assert_eq!(runs.keys().copied().collect::<Vec<_>>(), [0, 1], "{ctx}");
    let (_, lines0) = &runs[&0];
    let (_, lines1) = &runs[&1];

    let start0 = rank_lines(lines0, "starting at step ");
    assert_eq!(
        start0.keys().copied().collect::<Vec<_>>(),
        [0, 1, 2],
        "{ctx}"
    );
    let first_id = format!("{}.0", job.id);
    for (w, _, rest) in start0.values() {
        assert_eq!(*w, 3, "{ctx}");
        let (step, run, rdzv) = starting(rest);
        assert_eq!(step, 0, "{ctx}");
        assert_eq!(run, first_id, "{ctx}");
        assert_eq!(rdzv.as_deref(), Some(first_id.as_str()), "{ctx}");
    }
    // Every rank stopped at one step before the end, the newest checkpoint rank 0 wrote.
    let stopped = rank_lines(lines0, "stopped at step ");
    assert_eq!(
        stopped.keys().copied().collect::<Vec<_>>(),
        [0, 1, 2],
        "{ctx}"
    );
    let steps: Vec<u32> = stopped.values().map(|s| s.2.parse().unwrap()).collect();
    let at = steps[0];
    assert!(steps.iter().all(|s| *s == at), "one step: {ctx}");
    assert!((5..60).contains(&at), "{ctx}");
    let saved: Vec<u32> = lines0
        .iter()
        .filter_map(|l| l.strip_prefix("step "))
        .filter(|l| l.ends_with(", saved"))
        .map(|l| l.split(':').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(saved.iter().max(), Some(&at), "{ctx}");
    assert!(rank_lines(lines0, "done, loss ").is_empty(), "{ctx}");
    // The plugin (`--tf-requeue-on=43`) requeued the running job as a task exited 43, which
    // cancels the batch script. Nothing else could: the test sent USR1 only, the template runs
    // no `scontrol`, and 43 is no `RequeueExit=` code of the testbed.
    assert!(
        !PYTORCH.iter().any(|(_, text)| text
            .lines()
            .any(|l| !l.trim_start().starts_with('#') && l.contains("scontrol"))),
        "the template must not requeue itself"
    );
    assert!(
        output.contains(&format!("*** JOB {} ON ", job.id))
            && output.contains("DUE TO JOB REQUEUE"),
        "the plugin did not requeue the running job: {ctx}"
    );
    // Slurm's accounting: the first incarnation REQUEUED, its step ended with the tasks' 43.
    let (jobs, steps) = accounting(&job.id);
    assert_eq!(jobs, ["REQUEUED", "COMPLETED"], "sacct {steps:?}: {ctx}");
    assert_eq!(
        steps.first().map(|(_, code)| code.as_str()),
        Some("43:0"),
        "sacct {steps:?}: {ctx}"
    );

    let start1 = rank_lines(lines1, "starting at step ");
    assert_eq!(
        start1.keys().copied().collect::<Vec<_>>(),
        [0, 1, 2],
        "{ctx}"
    );
    let second_id = format!("{}.0.r1", job.id);
    let mut resumed = Vec::new();
    for (w, _, rest) in start1.values() {
        assert_eq!(*w, 3, "{ctx}");
        let (step, run, rdzv) = starting(rest);
        resumed.push(step);
        assert_eq!(run, second_id, "{ctx}");
        assert_eq!(rdzv.as_deref(), Some(second_id.as_str()), "{ctx}");
    }
    assert!(
        resumed.iter().all(|s| *s == at),
        "resumed at {resumed:?}, stopped at {at}: {ctx}"
    );
    let done = rank_lines(lines1, "done, loss ");
    assert_eq!(done.keys().copied().collect::<Vec<_>>(), [0, 1, 2], "{ctx}");
    eprintln!(
        "pytorch: job {} stopped at step {at}, requeued, resumed as {second_id}, done in {:.0} s",
        job.id,
        took.as_secs_f64()
    );
}

#[test]
fn incarnations_and_rank_lines_are_read() {
    // The batch script's log, then two tasks' files (srun's `--label` on each line), each
    // holding both incarnations (the second appended to the first).
    let out = "incarnation 0 of job 7 on node[1-2]\nincarnation 0 ended with 42\n\
               incarnation 1 of job 7 on node[2-3]\n\
               ==> FILE 7.0.0.out\n\
               0: rank 0/2 on node1: starting at step 0 of 60, run 7.0\n\
               0: rank 0/2 on node1: done, loss 0.5\n\
               0: rank 0/2 on node2: starting at step 10 of 60, run 7.0.r1\n\
               0: step 10: loss 1\n\
               ==> FILE 7.0.1.out\n\
               1: rank 1/2 on node2: starting at step 0 of 60, run 7.0\n\
               1: [default0]:rank 1/2 on node3: starting at step 10 of 60, run 7.0.r1\n\
               1: [default0]:rank 1/2 on node3: done, loss 0.1\n";
    let runs = incarnations(out);
    assert_eq!(runs[&0].0, "node[1-2]");
    let start = rank_lines(&runs[&0].1, "starting at step ");
    assert_eq!(start[&1].1, "node2");
    assert_eq!(starting(&start[&1].2), (0, "7.0".to_string(), None));
    assert_eq!(rank_lines(&runs[&0].1, "done, loss ")[&0].2, "0.5");
    assert_eq!(runs[&0].1[0], "incarnation 0 ended with 42");
    assert_eq!(runs[&1].0, "node[2-3]");
    assert_eq!(
        runs[&1].1,
        [
            "rank 0/2 on node2: starting at step 10 of 60, run 7.0.r1",
            "step 10: loss 1",
            "rank 1/2 on node3: starting at step 10 of 60, run 7.0.r1",
            "rank 1/2 on node3: done, loss 0.1"
        ]
    );
}
