//! TorchX (docs/launchers.md): `torchx run -s slurm` from PyPI, turned on as
//! the docs say (`eval "$(tf-cluster launcher-env --torch-cluster)"` before
//! submitting), writing and submitting its own heterogeneous batch job, its
//! status read through sacct from the testbed's real accounting (slurmdbd and
//! MariaDB on ctl).
//!
//! Every job trains tests/fixtures/pytorch/ddp.py with gloo; the expected weights
//! come from the same program run by a plain two-process torchrun on the
//! submit host, outside Slurm and the plugin. Where each rendezvous met is
//! read from the workers (MASTER_ADDR/MASTER_PORT, which torchrun's agent
//! gives them), from the step's reserved ports, from sacct's node lists and
//! from the socket listening on the rendezvous port: never from the plugin.

use crate::common;

use std::collections::BTreeSet;
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use common::outputs::Outputs;
use common::{exec, exec_for, on, reserved_ports};
use serde_json::Value;

const DIR: &str = "/home/alice/launchers-torchx";
/// The venv with TorchX (see TORCHX_PYTHON).
const VENV: &str = "/home/alice/launchers-torchx/venv";
const TORCHX: &str = "torchx==0.7.0";
/// The Python TorchX runs on: TorchX 0.7.0 (the newest on PyPI) reads its
/// components with `ast.Str`, which Python 3.14 (forky's python3) removed,
/// so the newest of 3.13-3.10 the image has. TorchX needs no torch: the
/// jobs it writes run the image's own `torchrun`.
const TORCHX_PYTHON: &str =
    "$(for v in 3.13 3.12 3.11 3.10; do command -v python$v && break; done)";
/// How long a job may take to reach a state (a loaded 2-core machine starts
/// torch slowly).
const PATIENCE: Duration = Duration::from_secs(300);

/// ddp.py in DIR, TorchX in its venv, and the weights of the reference run.
fn setup() -> &'static Setup {
    static SETUP: OnceLock<Setup> = OnceLock::new();
    SETUP.get_or_init(|| {
        common::install(
            DIR,
            &[
                ("ddp.py", include_str!("../fixtures/pytorch/ddp.py")),
                ("tfc_report.py", include_str!("../fixtures/tfc_report.py")),
            ],
            "",
        );
        common::pip_venv(
            VENV,
            TORCHX_PYTHON,
            TORCHX,
            "import torchx; print(torchx.__version__)",
        );
        let torch = exec(&["python3", "-c", "import torch; print(torch.__version__)"]);
        let old_torch = String::from_utf8_lossy(&torch.stdout).starts_with("1.");
        let setup = Setup {
            old_torch,
            reference: String::new(),
        };
        let reference = Outputs::new("torchx-reference");
        let out = exec_for(
            300,
            &[
                "bash",
                "-c",
                &format!(
                    "cd {DIR} && TFC_REPORT_DIR={} torchrun --standalone --nnodes=1 --nproc_per_node=2 {} ddp.py",
                    reference.path(),
                    setup.torchrun_std()
                ),
            ],
        );
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "the reference run: {text}");
        let results = reference.reports("RESULT");
        assert_eq!(results.len(), 2, "the reference run: {text}");
        assert_eq!(
            results[0]["weights_sha256"], results[1]["weights_sha256"],
            "{text}"
        );
        Setup {
            reference: results[0]["weights_sha256"].as_str().unwrap().to_string(),
            ..setup
        }
    })
}

struct Setup {
    /// Debian bookworm's torch 1.13 on Python 3.11: torchrun's `--tee` and
    /// `--redirects` parse only `1` there (docs/frameworks.md).
    old_torch: bool,
    /// The weights (sha256) of ddp.py trained by two ranks.
    reference: String,
}

impl Setup {
    /// torchrun's output arguments for this torch.
    fn torchrun_std(&self) -> &'static str {
        if self.old_torch {
            "--redirects=1 --tee=1"
        } else {
            ""
        }
    }

    /// dist.ddp's arguments and the environment that make its torchrun start
    /// on this torch: TorchX writes `--tee 3`, and torchrun's default
    /// `--redirects 0`, which torch 1.13 on Python 3.11 cannot parse.
    fn dist_ddp_std(&self) -> (&'static str, &'static str) {
        if self.old_torch {
            ("--tee 1", "export PET_REDIRECTS=1;")
        } else {
            ("", "")
        }
    }
}

/// One dist.ddp job at a time among the tests that share the testbed: each wants TorchX's fixed
/// port 29500 on its first component's node, and a second one there becomes a client of the
/// first's store and fails when the first ends (the test below that shows it holds the testbed
/// alone).
fn port_29500() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A TorchX job: its id, the directory it was submitted from and the folder
/// of its workers' reports.
struct Job {
    id: String,
    dir: String,
    reports: Outputs,
}

/// Jobs still to cancel when a test ends (or fails), so that none holds
/// the testbed after it.
struct Jobs(Vec<String>);

impl Drop for Jobs {
    fn drop(&mut self) {
        if !self.0.is_empty() {
            let mut cmd = vec!["scancel"];
            cmd.extend(self.0.iter().map(String::as_str));
            exec(&cmd);
        }
    }
}

/// `torchx run -s slurm [--wait] COMPONENT…` as a user would, from
/// `DIR/sub` after `eval "$(tf-cluster launcher-env --torch-cluster)"` and
/// `before` (shell); the job's id (from the app handle TorchX prints) and
/// all TorchX printed. Panics unless TorchX exits 0.
fn torchx(sub: &str, before: &str, wait: bool, component: &str) -> (Job, String) {
    let dir = format!("{DIR}/{sub}");
    // The workers' reports (each a file of its own): the job inherits this
    // environment, as it does the launcher-env variables.
    let reports = Outputs::new(sub);
    let script = format!(
        "set -e; rm -rf {dir}; mkdir -p {dir}; cp {DIR}/ddp.py {DIR}/tfc_report.py {dir}/; cd {dir}\n\
         out=$(tf-cluster launcher-env --torch-cluster); echo \"$out\"; eval \"$out\"\n\
         export TFC_REPORT_DIR={}\n\
         {before}\n\
         {VENV}/bin/torchx run -s slurm {} {component}",
        reports.path(),
        if wait { "--wait" } else { "" }
    );
    let out = exec_for(PATIENCE.as_secs() as u32, &["bash", "-c", &script]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "torchx run {component}: {text}");
    assert!(
        text.contains("export SLURM_SPANK__SLURM_SPANK_OPTION_tf_cluster_torch_cluster=\n"),
        "{text}"
    );
    let id = text
        .split("slurm://torchx/")
        .nth(1)
        .map(|rest| rest.chars().take_while(char::is_ascii_digit).collect())
        .filter(|id: &String| !id.is_empty())
        .unwrap_or_else(|| panic!("no app handle: {text}"));
    (Job { id, dir, reports }, text)
}

impl Job {
    /// Everything the job's tasks wrote (TorchX's `slurm-ID-ROLE-N.out` and
    /// `.err` files).
    fn output(&self) -> String {
        let out = exec(&[
            "bash",
            "-c",
            &format!(
                "cd {} && for f in slurm-{}-*; do echo \"==> $f\"; cat \"$f\"; done",
                self.dir, self.id
            ),
        ]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits until `n` workers reported their RESULT; their JSON.
    fn wait_trained(&self, n: usize) -> Vec<Value> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let found = self.reports.reports("RESULT");
            let text = || format!("{}\n{}", self.output(), self.reports.dump());
            if found.len() >= n {
                assert_eq!(found.len(), n, "{}", text());
                return found;
            }
            let state = self.state();
            assert!(
                Instant::now() < deadline
                    && !state.iter().any(|s| s.1 != "RUNNING" && s.1 != "PENDING"),
                "job {}: {n} workers did not train ({state:?}):\n{}",
                self.id,
                text()
            );
            std::thread::sleep(Duration::from_secs(2));
        }
    }

    /// sacct's view: (component, state, node list) of each component
    /// (`ID+0`…), steps left out.
    fn state(&self) -> Vec<(String, String, String)> {
        let out = exec(&[
            "sacct",
            "-n",
            "-P",
            "-X",
            "-j",
            &self.id,
            "--format=JobID,State,NodeList",
        ]);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split('|').collect();
                (f.len() == 3).then(|| (f[0].to_string(), f[1].to_string(), f[2].to_string()))
            })
            .collect()
    }

    /// Waits until every component has ended; sacct's view then.
    fn wait_ended(&self, within: Duration) -> Vec<(String, String, String)> {
        let deadline = Instant::now() + within;
        loop {
            let state = self.state();
            if !state.is_empty()
                && state
                    .iter()
                    .all(|s| !matches!(s.1.as_str(), "RUNNING" | "PENDING" | "COMPLETING"))
            {
                return state;
            }
            assert!(
                Instant::now() < deadline,
                "job {} did not end within {within:?}: {state:?}\n{}",
                self.id,
                self.output()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// The node list of the first component (`ID+0`), where dist.ddp puts
    /// its rendezvous.
    fn first_node(&self) -> String {
        self.state()
            .into_iter()
            .find(|s| s.0 == format!("{}+0", self.id))
            .map(|s| s.2)
            .unwrap_or_else(|| panic!("job {}: no component 0 in sacct", self.id))
    }
}

/// The workers of one job trained together: ranks 0..n, world n, the
/// reference's weights, and every worker's MASTER_ADDR is rank 0's host.
fn assert_trained(job: &Job, found: &[Value], n: usize) {
    let setup = setup();
    let text = || job.output();
    let ranks: BTreeSet<u64> = found.iter().map(|r| r["rank"].as_u64().unwrap()).collect();
    assert_eq!(ranks, (0..n as u64).collect(), "{}", text());
    let host0 = found.iter().find(|r| r["rank"] == 0).unwrap()["host"].clone();
    for r in found {
        assert_eq!(r["world_size"], n, "{r}");
        assert_eq!(r["master_addr"], host0, "{r}\n{}", text());
        assert_eq!(
            r["weights_sha256"].as_str(),
            Some(setup.reference.as_str()),
            "job {}: not the reference's weights: {r}\n{}",
            job.id,
            text()
        );
    }
}

/// `dist.ddp -j 2x1`, as TorchX writes it (on torch 1.13 with the
/// two output arguments it can parse). torchrun's command line carries
/// TorchX's `--rdzv_*`, which beat the plugin's `PET_*`: the workers meet
/// through the c10d store on the first component's node, port 29500, not on
/// the plugin's reserved port; the plugin was on (its `PET_*` reached them).
/// `--wait` follows the job through sacct to SUCCEEDED.
#[test]
fn dist_ddp_trains_with_torchxs_own_rendezvous() {
    let _t = common::testbed();
    let _port = port_29500();
    let setup = setup();
    let (args, env) = setup.dist_ddp_std();
    let (job, text) = torchx(
        "dist-ddp",
        env,
        true,
        &format!("dist.ddp -j 2x1 {args} --script ddp.py"),
    );
    assert!(text.contains("SUCCEEDED"), "{text}");
    let state = job.wait_ended(PATIENCE);
    assert_eq!(state.len(), 2, "{state:?}");
    assert!(state.iter().all(|s| s.1 == "COMPLETED"), "{state:?}");
    let output = job.output();
    let found = job.reports.reports("RESULT");
    assert_eq!(found.len(), 2, "{output}");
    assert_trained(&job, &found, 2);
    for r in &found {
        // The plugin's variables were there and lost: its host and port
        // are not where the workers met.
        let pet_port = r["pet_master_port"].as_str().expect("PET_MASTER_PORT");
        let resv = reserved_ports(r["resv_ports"].as_str().expect("reserved ports"));
        assert!(resv.contains(&pet_port.parse().unwrap()), "{r}");
        assert_ne!(r["master_port"].as_str(), Some(pet_port), "{r}");
        assert_eq!(
            r["pet_rdzv_id"].as_str(),
            Some(format!("{}.0", job.id).as_str()),
            "{r}"
        );
    }
    eprintln!(
        "dist.ddp: job {} {state:?}, weights {}",
        job.id, setup.reference
    );
}

/// The form that uses the plugin, `utils.sh` + plain
/// `torchrun` (no `--rdzv_*`), twice at once on the same nodes. Each job's
/// workers meet at rank 0's host on a port Slurm reserved for its own step,
/// under its own rendezvous id; both train while the other's store is up
/// (each holds its process group until both have trained).
#[test]
fn two_plain_torchrun_jobs_at_once_train_on_their_own_ports() {
    let _t = common::exclusive();
    let setup = setup();
    let release = format!("{DIR}/plain.release");
    exec(&["rm", "-f", &release]);
    let component = format!(
        "utils.sh --num_replicas 2 torchrun --nproc_per_node=1 {} ddp.py --wait-for {release}",
        setup.torchrun_std()
    );
    let (a, _) = torchx("plain-a", "", false, &component);
    let mut jobs = Jobs(vec![a.id.clone()]);
    let (b, _) = torchx("plain-b", "", false, &component);
    jobs.0.push(b.id.clone());
    let (found_a, found_b) = (a.wait_trained(2), b.wait_trained(2));
    // Both have trained and both still hold their stores.
    assert!(
        a.state()
            .iter()
            .chain(b.state().iter())
            .all(|s| s.1 == "RUNNING")
    );
    exec(&["touch", &release]);
    let mut met = Vec::new();
    for (job, found) in [(&a, &found_a), (&b, &found_b)] {
        assert_trained(job, found, 2);
        let state = job.wait_ended(PATIENCE);
        assert!(state.iter().all(|s| s.1 == "COMPLETED"), "{state:?}");
        for r in found {
            let port: u16 = r["master_port"].as_str().unwrap().parse().unwrap();
            let resv = reserved_ports(r["resv_ports"].as_str().expect("reserved ports"));
            assert!(
                resv.contains(&port),
                "job {}: MASTER_PORT not reserved: {r}",
                job.id
            );
            assert_eq!(r["master_port"], r["pet_master_port"], "{r}");
            assert_eq!(
                r["pet_rdzv_id"].as_str(),
                Some(format!("{}.0", job.id).as_str()),
                "{r}"
            );
        }
        let r0 = &found[0];
        met.push(format!(
            "{}:{}",
            r0["master_addr"].as_str().unwrap(),
            r0["master_port"].as_str().unwrap()
        ));
    }
    drop(jobs);
    assert_ne!(met[0], met[1], "two jobs, one rendezvous");
    eprintln!(
        "plain torchrun: job {} met at {}, job {} at {}",
        a.id, met[0], b.id, met[1]
    );
}

/// Two dist.ddp jobs whose first components share a node both want
/// TorchX's fixed port 29500 there. The second's agent cannot bind it and
/// becomes a client of the first job's store: it trains, but when the
/// first job ends its store goes, and the second job fails.
#[test]
fn two_dist_ddp_jobs_share_29500_and_the_second_dies_with_the_first() {
    let _t = common::exclusive();
    let setup = setup();
    let (args, env) = setup.dist_ddp_std();
    let (release_a, release_b) = (
        format!("{DIR}/ddp-a.release"),
        format!("{DIR}/ddp-b.release"),
    );
    exec(&["rm", "-f", &release_a, &release_b]);
    let component =
        |release: &str| format!("dist.ddp -j 2x1 {args} --script ddp.py -- --wait-for {release}");
    let (a, _) = torchx("ddp-a", env, false, &component(&release_a));
    let mut jobs = Jobs(vec![a.id.clone()]);
    let found_a = a.wait_trained(2);
    let (b, _) = torchx("ddp-b", env, false, &component(&release_b));
    jobs.0.push(b.id.clone());
    let found_b = b.wait_trained(2);
    assert_trained(&a, &found_a, 2);
    assert_trained(&b, &found_b, 2);
    let node = a.first_node();
    assert_eq!(node, b.first_node(), "the first components on one node");
    // One socket listens on 29500 there: job A's agent's. As alice: the
    // unprivileged node's root may not look into her processes' fds.
    let as_alice = |cmd: &[&str]| on(&node, &[&["runuser", "-u", "alice", "--"], cmd].concat());
    let ss = as_alice(&["ss", "-Hltnp", "sport = :29500"]);
    let ss = String::from_utf8_lossy(&ss.stdout).into_owned();
    let pids: Vec<&str> = ss
        .split("pid=")
        .skip(1)
        .map(|r| r.split(',').next().unwrap())
        .collect();
    assert_eq!(pids.len(), 1, "{ss}");
    let environ = as_alice(&["cat", &format!("/proc/{}/environ", pids[0])]);
    let environ = String::from_utf8_lossy(&environ.stdout).into_owned();
    assert!(
        environ
            .split('\0')
            .any(|v| v == format!("SLURM_JOB_ID={}", a.id)),
        "29500 on {node} is not job {}'s: {ss}",
        a.id
    );
    // A ends; B, which never released its workers, fails with A's store.
    exec(&["touch", &release_a]);
    let ended_a = a.wait_ended(PATIENCE);
    let at = Instant::now();
    assert!(ended_a.iter().all(|s| s.1 == "COMPLETED"), "{ended_a:?}");
    let ended_b = b.wait_ended(Duration::from_secs(120));
    let after = at.elapsed();
    let output_b = b.output();
    assert!(
        ended_b.iter().any(|s| s.1 == "FAILED"),
        "{ended_b:?}\n{output_b}"
    );
    assert!(output_b.contains("RendezvousConnectionError"), "{output_b}");
    drop(jobs);
    eprintln!(
        "dist.ddp twice: both first components on {node}; A ({}) {ended_a:?}; B ({}) {ended_b:?} {:.1} s after A",
        a.id,
        b.id,
        after.as_secs_f64()
    );
}

/// TorchX's own retries with the plugin turned on: `dist.ddp --max_retries 1` writes
/// `#SBATCH --requeue` and a batch script that runs `scontrol requeue` when its srun fails and
/// SLURM_RESTART_COUNT is below TORCHX_MAX_RETRIES. The workers fail the first incarnation
/// (`--fail-first-incarnation`: exit 3 unless SLURM_RESTART_COUNT ≥ 1); the requeued job trains
/// to the reference's weights and completes with one restart, the plugin's ids carrying `.r1` in
/// both components. TorchX's own rendezvous (its `--rdzv_*`) is what the workers meet on, as
/// above.
#[test]
fn torchx_max_retries_requeues_with_the_plugins_new_ids() {
    let _t = common::testbed();
    let _port = port_29500();
    let setup = setup();
    let (args, env) = setup.dist_ddp_std();
    let started = Instant::now();
    let (job, text) = torchx(
        "retries",
        env,
        false,
        &format!(
            "dist.ddp -j 2x1 --max_retries 1 {args} --script ddp.py -- --fail-first-incarnation"
        ),
    );
    let jobs = Jobs(vec![job.id.clone()]);
    assert!(text.contains("slurm://torchx/"), "{text}");
    // Until every component has COMPLETED (a requeued job is PENDING or REQUEUED meanwhile).
    let deadline = Instant::now() + Duration::from_secs(400);
    let state = loop {
        let state = job.state();
        if !state.is_empty() && state.iter().all(|s| s.1 == "COMPLETED") {
            break state;
        }
        assert!(
            Instant::now() < deadline
                && !state
                    .iter()
                    .any(|s| matches!(s.1.as_str(), "FAILED" | "CANCELLED" | "TIMEOUT")),
            "job {} did not complete on its retry: {state:?}\n{}",
            job.id,
            job.output()
        );
        std::thread::sleep(Duration::from_secs(1));
    };
    drop(jobs);
    let took = started.elapsed();
    let show = exec(&["scontrol", "show", "job", "-o", &job.id]);
    let show = String::from_utf8_lossy(&show.stdout).into_owned();
    assert!(
        show.split_whitespace().any(|f| f == "Restarts=1"),
        "requeued once: {show}"
    );
    // sacct's duplicates: the first incarnation's record, requeued.
    let all = exec(&[
        "sacct",
        "-n",
        "-P",
        "-X",
        "-D",
        "-j",
        &job.id,
        "--format=JobID,State",
    ]);
    let all = String::from_utf8_lossy(&all.stdout).into_owned();
    assert!(all.contains("|REQUEUED"), "{all}");
    let output = job.output();
    let found = job.reports.reports("RESULT");
    assert_eq!(found.len(), 2, "{output}");
    assert_trained(&job, &found, 2);
    // Every worker of the retry, in both components of the heterogeneous
    // step, sees SLURM_RESTART_COUNT=1 and the plugin's ids with `.r1`: the
    // component srun's hand-off does not reach takes the count from srun's
    // early word, as srun read it.
    let new_id = format!("{}.0.r1", job.id);
    for r in &found {
        assert_eq!(r["restart_count"].as_str(), Some("1"), "{r}");
        assert_eq!(r["pet_rdzv_id"].as_str(), Some(new_id.as_str()), "{r}");
        assert_eq!(
            r["tf_cluster_run_id"].as_str(),
            Some(new_id.as_str()),
            "{r}"
        );
    }
    let ids: Vec<&str> = found
        .iter()
        .map(|r| r["pet_rdzv_id"].as_str().unwrap_or_default())
        .collect();
    eprintln!(
        "torchx --max_retries 1: job {} {state:?}, {all:?}, ids {ids:?}, {:.0} s",
        job.id,
        took.as_secs_f64()
    );
}
