//! Ports of steps Slurm reserved none for: two jobs sharing a node, each
//! step its own block of the port range, bound for real by every task.
//!
//! The testbed's slurm.conf has `MpiParams=ports=…`; `srun --resv-ports=0`
//! makes a step that Slurm reserves no ports for, as every step is on a
//! cluster without MpiParams.

use crate::common;

use common::outputs::Outputs;
use common::{exec, exec_for, srun, testbed};

/// Each task binds (listen) its TensorFlow port and, on rank 0, PyTorch's
/// MASTER_PORT; then waits until both jobs' tasks bound theirs, so that the
/// second job binds while the first holds its ports.
const BIND: &str = r#"
import json, os, socket, sys, time
pair = sys.argv[1]
tf = json.loads(os.environ["TF_CONFIG"])
ports = [int(tf["cluster"]["worker"][tf["task"]["index"]].rsplit(":", 1)[1])]
if os.environ["RANK"] == "0":
    ports.append(int(os.environ["MASTER_PORT"]))
held, said = [], []
for p in ports:
    s = socket.socket()
    try:
        s.bind(("", p)); s.listen(); held.append(s); said.append(f"{p}:ok")
    except OSError as e:
        said.append(f"{p}:errno{e.errno}")
print("BIND", os.environ["SLURM_JOB_ID"], os.environ["SLURM_STEP_ID"], " ".join(said), flush=True)
d = f"/home/alice/tfc-ports/{pair}"
os.makedirs(d, exist_ok=True)
open(f"{d}/{os.environ['SLURM_JOB_ID']}.{os.environ['SLURM_LOCALID']}", "w").close()
end = time.time() + 90
while len(os.listdir(d)) < 4 and time.time() < end:
    time.sleep(0.1)
print("MET", len(os.listdir(d)) >= 4, flush=True)
time.sleep(0.5)
"#;

/// Where each pair's tasks say they started (shared by the nodes).
const PAIRS: &str = "/home/alice/tfc-ports";

/// The two tests of this file both hold ports on node1 for a while: one at
/// a time, so that a pair's second job never waits behind the training.
static NODE1: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// One binding: job id, step id, and each port with whether it bound.
struct Bound {
    job: u32,
    step: u32,
    ports: Vec<(u16, bool)>,
}

/// One job of a pair: its tasks' bindings, or the plugin's refusal (its
/// preflight found a port of the step held, the collision said before any
/// task ran).
enum Job {
    /// Its tasks' bindings, and whether both saw the other job's tasks
    /// start (or end refused) while they held their ports.
    Ran(Vec<Bound>, bool),
    Refused,
}

/// `pairs` pairs of jobs, each pair two jobs started at once with rank 0 on
/// node1 (2 tasks there), `extra` srun options; each pair's two jobs.
fn pairs(tag: &str, pairs: u32, extra: &[&str]) -> Vec<[Job; 2]> {
    (0..pairs)
        .map(|i| {
            let pair = format!("{tag}-{i}-{}", std::process::id());
            let job = || {
                let pair = pair.clone();
                let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
                std::thread::spawn(move || {
                    let mut cmd = vec![
                        "srun",
                        "-N1",
                        "-n2",
                        "-w",
                        "node1",
                        "--resv-ports=0",
                        "--tf-cluster",
                        "--torch-cluster",
                    ];
                    cmd.extend(extra.iter().map(String::as_str));
                    cmd.extend(["python3", "-c", BIND, &pair]);
                    let out = exec_for(200, &cmd);
                    if !out.status.success() {
                        // The other job's tasks wait for this one's: done.
                        let d = format!("{PAIRS}/{pair}");
                        exec(&[
                            "bash",
                            "-c",
                            &format!("mkdir -p {d}; touch {d}/gone.0 {d}/gone.1"),
                        ]);
                    }
                    out
                })
            };
            let (a, b) = (job(), job());
            [a.join().unwrap(), b.join().unwrap()].map(|out| {
                let text = String::from_utf8_lossy(&out.stdout);
                let err = String::from_utf8_lossy(&out.stderr).into_owned();
                if !out.status.success() {
                    assert!(
                        err.contains("which a task listens on, cannot be bound"),
                        "failed, not for a held port:\n{text}\n{err}"
                    );
                    return Job::Refused;
                }
                let bound: Vec<Bound> = text
                    .lines()
                    .filter_map(|l| l.strip_prefix("BIND "))
                    .map(|line| {
                        let mut words = line.split(' ');
                        let job = words.next().unwrap().parse().unwrap();
                        let step = words.next().unwrap().parse().unwrap();
                        let ports = words
                            .map(|w| {
                                let (p, how) = w.split_once(':').unwrap();
                                (p.parse().unwrap(), how == "ok")
                            })
                            .collect();
                        Bound { job, step, ports }
                    })
                    .collect();
                assert_eq!(bound.len(), 2, "two tasks:\n{text}\n{err}");
                let met = text.lines().filter(|l| *l == "MET True").count() == 2;
                Job::Ran(bound, met)
            })
        })
        .collect()
}

/// A pair collides when a job of it was refused for a held port or any
/// task of it could not bind one.
fn collisions(runs: &[[Job; 2]]) -> usize {
    runs.iter()
        .filter(|pair| {
            pair.iter().any(|job| match job {
                Job::Refused => true,
                Job::Ran(bound, _) => bound.iter().any(|b| b.ports.iter().any(|&(_, ok)| !ok)),
            })
        })
        .count()
}

/// Without reserved ports, 20 pairs of jobs on one node: every task binds
/// its ports, which are its step's block of the range 20000-29499 as the
/// docs give it (slot (job × 16 + step mod 16) mod 2375, 4 ports a slot:
/// local task k at its k-th port, MASTER_PORT the third). With an explicit
/// `--tf-port-base=8888` (every step the same ports, as before), the
/// second job of each pair cannot have them: the preflight refuses it
/// naming the held port, or (when it ran before the first job's tasks
/// bound) its task cannot bind.
#[test]
fn two_jobs_on_one_node_bind_their_own_ports() {
    let _t = testbed();
    let _node1 = NODE1.lock().unwrap_or_else(|e| e.into_inner());
    let runs = pairs("block", 20, &[]);
    for pair in &runs {
        for job in pair {
            let Job::Ran(bound, met) = job else {
                panic!("a job of its own block was refused");
            };
            // Both jobs held their ports at once, or the pair tells nothing.
            assert!(met, "a pair's two jobs did not run at the same time");
            for b in bound {
                let slot = (u64::from(b.job) * 16 + u64::from(b.step % 16)) % 2375;
                let first = 20000 + 4 * slot as u16;
                for &(p, _) in &b.ports {
                    assert!((first..first + 3).contains(&p), "job {} port {p}", b.job);
                }
            }
        }
    }
    let block = collisions(&runs);
    eprintln!("own blocks: {block} of {} pairs collided", runs.len());
    assert_eq!(block, 0);

    let based = pairs("base", 3, &["--tf-port-base=8888"]);
    let same = collisions(&based);
    eprintln!(
        "--tf-port-base=8888: {same} of {} pairs collided",
        based.len()
    );
    assert_eq!(same, based.len());
}

const DIR: &str = "/home/alice/ports-tests";

/// One real training pair without reserved ports, rank 0 of both on node1:
/// a PyTorch DDP job (gloo, 2 ranks) that keeps its store on MASTER_PORT
/// after training, and meanwhile a TensorFlow MultiWorkerMirroredStrategy
/// job (2 workers). Both train; the TensorFlow workers' ports and
/// MASTER_PORT differ (with 8888 + index for every step, worker 0 would
/// have taken the port the PyTorch job holds).
#[test]
fn a_pytorch_and_a_tensorflow_job_on_one_node_both_train() {
    let _t = testbed();
    let _node1 = NODE1.lock().unwrap_or_else(|e| e.into_inner());
    common::install(
        DIR,
        &[
            ("ddp.py", include_str!("../fixtures/pytorch/ddp.py")),
            ("tfc_report.py", include_str!("../fixtures/tfc_report.py")),
            ("mwms.py", include_str!("../fixtures/tensorflow/mwms.py")),
            (
                "show_resolver.py",
                include_str!("../fixtures/tensorflow/show_resolver.py"),
            ),
        ],
        "rm -f done\n",
    );
    // Each task's output and each rank's report in files of their own.
    let (torch_files, tf_files) = (Outputs::new("ports-torch"), Outputs::new("ports-tf"));
    let [out, err] = torch_files.srun_args();
    let reports = format!("TFC_REPORT_DIR={}", torch_files.path());
    let torch = std::thread::spawn(move || {
        let script = format!(
            "cd {DIR}; {reports} srun -N1 -n2 -w node1 --resv-ports=0 {out} {err} --torch-cluster \
             bash -c 'echo PORT $MASTER_PORT; exec python3 ddp.py --wait-for {DIR}/done'"
        );
        exec_for(600, &["bash", "-c", &script])
    });
    // Wait until both ranks trained: rank 0's store is then held until `done`.
    let start = std::time::Instant::now();
    while torch_files.reports("RESULT").len() < 2 {
        assert!(start.elapsed().as_secs() < 480, "{}", torch_files.dump());
        std::thread::sleep(std::time::Duration::from_secs(2));
    }
    let [tf_out, tf_err] = tf_files.srun_args();
    let tf = exec_for(
        480,
        &[
            "bash",
            "-c",
            &format!(
                "cd {DIR}; source /opt/tf/bin/activate; srun -N1 -n2 -w node1 --resv-ports=0 \
                 {tf_out} {tf_err} --tf-cluster bash -c 'echo TF_CONFIG $TF_CONFIG; exec python mwms.py'"
            ),
        ],
    );
    exec(&["touch", &format!("{DIR}/done")]);
    let torch = torch.join().unwrap();
    let (tf_text, torch_text) = (tf_files.stdout(), torch_files.stdout());
    assert!(
        tf.status.success(),
        "{}\n{}",
        tf_files.dump(),
        String::from_utf8_lossy(&tf.stderr)
    );
    assert!(torch.status.success(), "{}", torch_files.dump());
    assert_eq!(tf_text.matches("RESULT").count(), 2, "{}", tf_files.dump());
    assert_eq!(
        torch_files.reports("RESULT").len(),
        2,
        "{}",
        torch_files.dump()
    );
    let master: Vec<&str> = torch_text
        .lines()
        .filter_map(|l| l.strip_prefix("PORT "))
        .collect();
    let config = tf_text
        .lines()
        .find_map(|l| l.strip_prefix("TF_CONFIG "))
        .unwrap();
    let config: serde_json::Value = serde_json::from_str(config).unwrap();
    let workers = config["cluster"]["worker"].as_array().unwrap();
    eprintln!("MASTER_PORT {master:?}, TensorFlow workers {workers:?}");
    for w in workers {
        let port = w.as_str().unwrap().rsplit(':').next().unwrap();
        assert!(!master.contains(&port), "{port} in {master:?}");
    }
}

/// srun refuses before launch, in one line, a step whose reservation is
/// too small (3 TensorFlow tasks on a node and MASTER_PORT need 4 ports,
/// `--resv-ports=2` reserves 2) and a torchrun command with several tasks
/// on a node; one task per node runs.
#[test]
fn srun_refuses_too_few_ports_and_torchrun_per_task() {
    let _t = testbed();
    common::srun(&[
        "-N1",
        "-n3",
        "--resv-ports=2",
        "--tf-cluster",
        "--torch-cluster",
    ])
    .assert_refused("Slurm reserved 2 port(s) (");
    common::srun(&[
        "-N1",
        "-n3",
        "--resv-ports=4",
        "--tf-cluster",
        "--torch-cluster",
    ])
    .assert_ran(3);
    let torchrun = |tasks: &str| {
        common::parse_run(exec(&[
            "srun",
            "-N1",
            "-n",
            tasks,
            "--torch-cluster",
            "bash",
            "-c",
            "echo torchrun would start here",
        ]))
    };
    torchrun("2").assert_refused(
        "torchrun starts its node's workers itself, but this step runs 2 tasks (each a torchrun) on a node, whose workers would share GPUs: use --ntasks-per-node=1 with torchrun --nproc_per_node=2",
    );
    let one = torchrun("1");
    assert_eq!(one.code, Some(0), "{}", one.stderr);
}

/// With MpiParams=ports=… Slurm reserves ports for every step; local task k
/// listens on the k-th.
#[test]
fn reserved_ports_are_used() {
    let _t = testbed();
    let run = srun(&["-N3", "-n6", "--ntasks-per-node=2", "--tf-cluster"]);
    run.assert_workers(6);
    assert!(
        run.tasks.iter().all(|t| t.resv_ports.is_some()),
        "MpiParams reserves ports"
    );
}
