//! Ports of steps Slurm reserved none for: two jobs sharing a node, each
//! step its own block of the port range, bound for real by every task.
//!
//! The testbed's slurm.conf has `MpiParams=ports=…`; `srun --resv-ports=0`
//! makes a step that Slurm reserves no ports for, as every step is on a
//! cluster without MpiParams.

mod common;

use common::outputs::Outputs;
use common::{exec, exec_for, testbed};

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
d = f"/tmp/tfc-ports-{pair}"
os.makedirs(d, exist_ok=True)
open(f"{d}/{os.environ['SLURM_JOB_ID']}.{os.environ['SLURM_LOCALID']}", "w").close()
end = time.time() + 30
while len(os.listdir(d)) < 4 and time.time() < end:
    time.sleep(0.1)
time.sleep(0.5)
"#;

/// One binding: job id, step id, and each port with whether it bound.
struct Bound {
    job: u32,
    step: u32,
    ports: Vec<(u16, bool)>,
}

/// `pairs` pairs of jobs, each pair two jobs started at once with rank 0 on
/// node1 (2 tasks there), `extra` srun options; the bindings of each pair.
fn pairs(tag: &str, pairs: u32, extra: &[&str]) -> Vec<Vec<Bound>> {
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
                    exec_for(120, &cmd)
                })
            };
            let (a, b) = (job(), job());
            let mut bound = Vec::new();
            for out in [a.join().unwrap(), b.join().unwrap()] {
                let text = String::from_utf8_lossy(&out.stdout);
                let err = String::from_utf8_lossy(&out.stderr);
                assert!(out.status.success(), "{text}\n{err}");
                for line in text.lines().filter_map(|l| l.strip_prefix("BIND ")) {
                    let mut words = line.split(' ');
                    let job = words.next().unwrap().parse().unwrap();
                    let step = words.next().unwrap().parse().unwrap();
                    let ports = words
                        .map(|w| {
                            let (p, how) = w.split_once(':').unwrap();
                            (p.parse().unwrap(), how == "ok")
                        })
                        .collect();
                    bound.push(Bound { job, step, ports });
                }
            }
            assert_eq!(bound.len(), 4, "two tasks of each job");
            bound
        })
        .collect()
}

/// A pair collides when any task of it could not bind a port.
fn collisions(runs: &[Vec<Bound>]) -> usize {
    runs.iter()
        .filter(|pair| pair.iter().any(|b| b.ports.iter().any(|&(_, ok)| !ok)))
        .count()
}

/// Without reserved ports, 20 pairs of jobs on one node: every task binds
/// its ports, which are its step's block of the range 20000-29499 as the
/// docs give it (slot (job × 16 + step mod 16) mod 2375, 4 ports a slot:
/// local task k at its k-th port, MASTER_PORT the third). With an explicit
/// `--tf-port-base=8888` (every step the same ports, as before), the
/// second job of each pair cannot bind.
#[test]
fn two_jobs_on_one_node_bind_their_own_ports() {
    let _t = testbed();
    let runs = pairs("block", 20, &[]);
    for pair in &runs {
        for b in pair {
            let slot = (u64::from(b.job) * 16 + u64::from(b.step % 16)) % 2375;
            let first = 20000 + 4 * slot as u16;
            for &(p, _) in &b.ports {
                assert!((first..first + 3).contains(&p), "job {} port {p}", b.job);
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
    common::install(
        DIR,
        &[
            ("ddp.py", include_str!("fixtures/pytorch/ddp.py")),
            ("tfc_report.py", include_str!("fixtures/tfc_report.py")),
            ("mwms.py", include_str!("fixtures/tensorflow/mwms.py")),
            (
                "show_resolver.py",
                include_str!("fixtures/tensorflow/show_resolver.py"),
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
