//! `tf-cluster preview` outside a step, on the real testbed: from an
//! `salloc -N2 -n4` shell and from a batch script, the preview of the next
//! srun step, then that very step with `--tf-cluster`, whose tasks print what
//! they got. The preview must place every rank where Slurm really ran it:
//! the same host, role and index, the same local task (the port base + k the
//! preview shows is the k-th port Slurm reserved for the step, or the port
//! base + k without reserved ports), and as many GPUs.
//!
//! The CLI is the one the .deb installs in every container (docker/node's
//! entrypoint installs the package; packaging/deb.sh puts the CLI in
//! /usr/bin): the salloc shell runs on the submit host (ctl), the batch
//! script on the job's first node.

use crate::common;

use std::process::{ExitStatus, Output};

use common::outputs::Outputs;
use common::{PROBE, Run, exec, exec_for, install, parse_run, reserved_ports, testbed};

/// Where the package installs the CLI.
const CLI: &str = "/usr/bin/tf-cluster";

/// The tests of this file one at a time: each needs the testbed's CPUs
/// idle (an allocation of 4,2,1 CPUs, a new job's choice of nodes).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The probe every task runs, on the shared /home.
const DIR: &str = "/home/alice/preview";

const PORT_BASE: u16 = 8888;

fn install_probe() {
    install(DIR, &[("probe.sh", PROBE)], "");
}

/// One rank of the preview's table.
#[derive(Debug)]
struct Row {
    rank: u32,
    role: String,
    index: u32,
    host: String,
    port: u16,
    gpus: Option<String>,
}

/// The output's sections, each after a `=== NAME` line: (name, text).
fn sections(text: &str) -> Vec<(String, String)> {
    let mut found: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        if let Some(name) = line.strip_prefix("=== ") {
            found.push((name.trim().to_string(), String::new()));
        } else if let Some((_, body)) = found.last_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    found
}

fn section<'a>(all: &'a [(String, String)], name: &str, context: &str) -> &'a str {
    all.iter()
        .find(|(n, _)| n == name)
        .map(|(_, t)| t.as_str())
        .unwrap_or_else(|| panic!("no section {name} in the output:\n{context}"))
}

/// the preview's table (RANK ROLE INDEX ADDRESS GPUS) and the lines after it.
fn table(text: &str) -> (Vec<Row>, Vec<String>) {
    let mut lines = text.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        ["RANK", "ROLE", "INDEX", "ADDRESS", "GPUS"],
        "the preview's table:\n{text}"
    );
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    for line in lines {
        let cells: Vec<&str> = line.split_whitespace().collect();
        let row = cells.len() == 5 && cells[0].parse::<u32>().is_ok() && notes.is_empty();
        if !row {
            notes.push(line.to_string());
            continue;
        }
        let (host, port) = cells[3]
            .rsplit_once(':')
            .unwrap_or_else(|| panic!("address {:?}", cells[3]));
        rows.push(Row {
            rank: cells[0].parse().unwrap(),
            role: cells[1].to_string(),
            index: cells[2].parse().unwrap(),
            host: host.to_string(),
            port: port.parse().unwrap(),
            gpus: (cells[4] != "-").then(|| cells[4].to_string()),
        });
    }
    (rows, notes)
}

/// The step's tasks, from its section.
fn step_run(text: &str) -> Run {
    parse_run(Output {
        status: ExitStatus::default(),
        stdout: text.as_bytes().to_vec(),
        stderr: Vec::new(),
    })
}

/// The preview placed every rank where the real step ran it.
fn assert_preview_is_the_step(preview: &str, step: &Run, context: &str) {
    let (rows, notes) = table(preview);
    assert!(
        notes.iter().any(|l| l.contains("in this allocation")),
        "a preview of the allocation's step: {notes:?}\n{context}"
    );
    assert!(
        !notes.iter().any(|l| l.contains("invented")),
        "the allocation's own nodes, none invented: {notes:?}\n{context}"
    );
    assert_eq!(
        rows.len(),
        step.tasks.len(),
        "as many ranks as the step ran:\n{context}"
    );
    // The note on ports (from slurm.conf's MpiParams) says whether the step
    // got reserved ports.
    let reserved = step.tasks.iter().any(|t| t.resv_ports.is_some());
    assert_eq!(
        notes
            .iter()
            .any(|l| l.contains("Slurm reserves each step's ports")),
        reserved,
        "the ports note: {notes:?}\n{context}"
    );
    for (row, task) in rows.iter().zip(&step.tasks) {
        let at = format!(
            "rank {} (preview {row:?}, task {task:?})\n{context}",
            row.rank
        );
        assert_eq!(row.rank, task.rank, "{at}");
        assert_eq!(row.host, task.host, "the host: {at}");
        // The preview's port is the port base + the local task it computed.
        assert_eq!(
            u32::from(row.port - PORT_BASE),
            task.local,
            "the local task: {at}"
        );
        let tf = task
            .tf_config
            .as_ref()
            .unwrap_or_else(|| panic!("no TF_CONFIG: {at}"));
        assert_eq!(tf["task"]["type"], row.role.as_str(), "the role: {at}");
        assert_eq!(tf["task"]["index"], row.index, "the index: {at}");
        // The rank's address in the real TF_CONFIG: the same host, and the
        // port the preview implies.
        let address = tf["cluster"][row.role.as_str()][row.index as usize]
            .as_str()
            .unwrap_or_else(|| panic!("no address: {at}"));
        let port = match &task.resv_ports {
            Some(list) => reserved_ports(list)[(row.port - PORT_BASE) as usize],
            None => row.port,
        };
        assert_eq!(address, format!("{}:{port}", row.host), "the address: {at}");
        // GPUs: the ids are Slurm's on each node, the count is knowable.
        let count = |list: Option<&str>| list.map_or(0, |l| l.split(',').count());
        assert_eq!(
            count(row.gpus.as_deref()),
            count(task.cuda_visible_devices.as_deref()),
            "the GPUs: {at}"
        );
    }
    // Every rank's TF_CONFIG lists the same cluster: its hosts in the
    // preview's rank order.
    let mut roles: Vec<&str> = rows.iter().map(|r| r.role.as_str()).collect();
    roles.dedup();
    for task in &step.tasks {
        let tf = task.tf_config.as_ref().unwrap();
        for role in &roles {
            let hosts: Vec<&str> = tf["cluster"][*role]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap().rsplit_once(':').unwrap().0)
                .collect();
            let want: Vec<&str> = rows
                .iter()
                .filter(|r| r.role == *role)
                .map(|r| r.host.as_str())
                .collect();
            assert_eq!(hosts, want, "rank {}'s {role} list\n{context}", task.rank);
        }
    }
}

/// The script both tests run: for each case, the preview, then the step,
/// each of whose tasks writes to a file of its own in `outputs` (printed
/// after the step, rank by rank). The job's variables go to stderr, for
/// failure messages.
fn script(cases: &[(&str, &str)], outputs: &Outputs) -> String {
    let dir = outputs.path();
    let mut s = String::from("env | grep '^SLURM_' | sort >&2\n");
    for (name, args) in cases {
        s.push_str(&format!(
            "echo '=== preview {name}'\n{CLI} preview {args}\n\
             echo '=== step {name}'\nsrun --output={dir}/{name}.%t {args} bash {DIR}/probe.sh\n\
             for t in $(seq 0 $((SLURM_NTASKS - 1))); do cat {dir}/{name}.$t; done\n"
        ));
    }
    s
}

/// The cases: Slurm's defaults in the allocation (rank order over the
/// job's nodes, as many tasks as the job's), then `-m cyclic`, which
/// overrides them for the preview as for srun.
const CASES: [(&str, &str); 2] = [
    ("default", "--tf-cluster=ps:1,worker:3"),
    ("cyclic", "-m cyclic --tf-cluster"),
];

fn check(text: &str, context: &str) {
    let all = sections(text);
    for (name, _) in CASES {
        let preview = section(&all, &format!("preview {name}"), context);
        let step = step_run(section(&all, &format!("step {name}"), context));
        step.assert_ran(4);
        assert_preview_is_the_step(preview, &step, &format!("case {name}\n{context}"));
    }
}

/// From the shell `salloc -N2 -n4` starts (on the submit host).
#[test]
fn preview_in_an_salloc_shell_is_the_step() {
    let _s = serial();
    let _t = testbed();
    install_probe();
    let outputs = Outputs::new("preview-salloc");
    let out = exec(&[
        "salloc",
        "-N2",
        "-n4",
        "sh",
        "-c",
        &script(&CASES, &outputs),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let context = format!(
        "salloc exit {:?}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{context}");
    check(&stdout, &context);
}

/// From a batch script (`sbatch -N2 --ntasks-per-node=2 --gpus-per-node=2`: one GPU of its
/// own per task, which the plugin sets and the preview must show; run on the
/// job's first node): the job's GPUs too.
#[test]
fn preview_in_a_batch_script_is_the_step() {
    let _s = serial();
    let _t = testbed();
    install_probe();
    let outputs = Outputs::new("preview-batch");
    let out_file = format!("{DIR}/batch-{}.out", std::process::id());
    let submitted = exec_for(
        300,
        &[
            "sbatch",
            "--wait",
            "-N2",
            "--ntasks-per-node=2",
            "--gpus-per-node=2",
            "-o",
            &out_file,
            "--wrap",
            &script(&CASES, &outputs),
        ],
    );
    let text = String::from_utf8_lossy(&exec(&["cat", &out_file]).stdout).into_owned();
    exec(&["rm", "-f", &out_file]);
    let context = format!(
        "sbatch exit {:?}: {}\njob output:\n{text}",
        submitted.status.code(),
        String::from_utf8_lossy(&submitted.stderr)
    );
    assert!(submitted.status.success(), "{context}");
    check(&text, &context);
    // Two GPUs per node, two tasks per node: one GPU each.
    let all = sections(&text);
    let (rows, _) = table(section(&all, "preview default", &context));
    assert!(
        rows.iter()
            .all(|r| r.gpus.as_deref().is_some_and(|g| !g.contains(','))),
        "{context}"
    );
}

/// The comparison itself, without the testbed: a preview and a step as
/// Slurm runs them (`salloc -N2 -n4` on node[2-3], ports 12000-12001
/// reserved), then a step that ran a rank elsewhere, which must fail.
#[test]
fn the_comparison_catches_a_rank_out_of_place() {
    let tf = |role: &str, index: u32| {
        format!(
            r#"{{"cluster":{{"ps":["node2:12000"],"worker":["node2:12001","node3:12000","node3:12001"]}},"task":{{"type":"{role}","index":{index}}}}}"#
        )
    };
    let preview = "RANK  ROLE    INDEX  ADDRESS     GPUS\n\
                   0     ps      0      node2:8888  -\n\
                   1     worker  0      node2:8889  -\n\
                   2     worker  1      node3:8888  -\n\
                   3     worker  2      node3:8889  -\n\
                   preview: the step srun would start in this allocation\n\
                   ports: Slurm reserves each step's ports at launch (MpiParams=ports=12000-12999 in /etc/slurm/slurm.conf): …\n";
    let mut step = String::new();
    for (rank, host, local, role, index) in [
        (0, "node2", 0, "ps", 0),
        (1, "node2", 1, "worker", 0),
        (2, "node3", 0, "worker", 1),
        (3, "node3", 1, "worker", 2),
    ] {
        step.push_str(&format!(
            "TASK\t{rank}\t{host}\t{local}\t12000-12001\t<unset>\t{}\n",
            tf(role, index)
        ));
    }
    assert_preview_is_the_step(preview, &step_run(&step), "good");
    let swapped = preview
        .replace(
            "1     worker  0      node2:8889",
            "1     worker  0      node3:8889",
        )
        .replace(
            "2     worker  1      node3:8888",
            "2     worker  1      node2:8888",
        );
    let caught = std::panic::catch_unwind(|| {
        assert_preview_is_the_step(&swapped, &step_run(&step), "swapped")
    });
    assert!(
        caught.is_err(),
        "a preview with ranks swapped must not pass"
    );
}

/// Shapes from a login node (ctl, outside any job), on nodes of 4 CPUs and
/// 4 GPUs: each one the preview, then srun's own allocation and step.
/// (`-N3 -n5 --ntasks-per-node=2` is not among them: Slurm 22.05 runs it
/// 3,1,1, 24.11 and 26.05 2,2,1; the preview says so.)
const LOGIN_SHAPES: &[(&str, &str)] = &[
    ("n3n5", "-N3 -n5"),
    ("w3n7", "-w node[1-3] -n7"),
    ("w3n7cyclic", "-w node[1-3] -n7 -m cyclic"),
    ("w3n7plane2", "-w node[1-3] -n7 -m plane=2"),
    ("n2n4gres4", "-N2 -n4 --gres=gpu:4"),
    ("n7", "-n7"),
    ("n5", "-n5"),
    ("n2tpn3", "-N2 --ntasks-per-node=3"),
    ("w3n2", "-w node[1-3] -n2"),
    ("arbitrary", "-m arbitrary -w node2,node1,node2"),
    ("n2n3gpn2", "-N2 -n3 --gpus-per-node=2"),
    ("w23n3n4", "-w node[2-3] -N3 -n4"),
    ("w31n3", "-w node3,node1 -n3"),
    ("n5tpn2", "-n5 --ntasks-per-node=2"),
    ("n3n10cyclic", "-N3 -n10 -m cyclic"),
    ("n2n6plane4gpn4", "-N2 -n6 -m plane=4 --gpus-per-node=4"),
];

/// Shapes inside `salloc -w node[1-3] -n7`, whose CPUs per node are 4,2,1.
/// (`-n2` alone is not among them: Slurm 26.05 runs it on node2 and node3,
/// 22.05 and 24.11 on node1 and node2; the preview says it cannot know.)
const ALLOCATION_SHAPES: &[(&str, &str)] = &[
    ("default", ""),
    ("n7plane2", "-n7 -m plane=2"),
    ("w3n2", "-w node3 -n2"),
    ("w3n1", "-w node3 -n1"),
    ("n3cyclic", "-n3 -m cyclic"),
    ("n3n4", "-N3 -n4"),
    ("w2n2", "-w node2 -n2"),
    ("n2n5", "-N2 -n5"),
    ("n3n5tpn2", "-N3 -n5 --ntasks-per-node=2"),
    ("w23n3", "-w node[2-3] -n3"),
    ("w13n4cyclic", "-w node[1,3] -n4 -m cyclic"),
    ("n4tpn1", "-n4 --ntasks-per-node=1"),
    ("n3n3plane2", "-N3 -n3 -m plane=2"),
    ("arbitrary", "-m arbitrary -w node3,node1,node1,node2 -n4"),
    ("n2n6plane4", "-N2 -n6 -m plane=4"),
    ("n7cyclic", "-m cyclic"),
];

/// Steps srun refuses, outside a job and inside `salloc -w node[1-3] -n7`:
/// (name, options, the step's command). The preview must refuse them with
/// the text srun prints.
/// (A new job of more tasks than its nodes' CPUs is refused by Slurm 24.11
/// but left pending by 22.05 and 26.05: cli/tests/preview.rs checks that
/// preview, not this one, which would wait.)
const LOGIN_REFUSALS: &[(&str, &str, &str)] = &[
    (
        "torchrun",
        "-N1 --ntasks-per-node=2 --torch-cluster",
        "torchrun --version",
    ),
    ("elastic", "-N2 -n4 --torch-cluster=elastic", "true"),
    (
        "ports",
        "-N1 -n1 --tf-cluster --torch-cluster --jax-cluster",
        "true",
    ),
];
const ALLOCATION_REFUSALS: &[(&str, &str, &str)] = &[
    ("toomany", "-n9 --tf-cluster", "true"),
    ("n2refused", "-N2 --tf-cluster", "true"),
];

/// Outside an allocation, before each step: every node idle (up to 30 s).
/// The preview says that Slurm picks the nodes at launch, idle ones first,
/// and a node still completing the previous shape's job is passed over.
const WAIT_IDLE: &str = "for i in $(seq 300); do \
    [ \"$(sinfo -h -N -o %t | sort -u)\" = idle ] && break; sleep 0.1; done\n";

/// The script of a comparison: per shape the preview, then the step (each
/// task's probe line in a file of its own, printed after it); `wait_idle`
/// outside an allocation.
fn shapes_script(
    shapes: &[(&str, &str)],
    refusals: &[(&str, &str, &str)],
    dir: &str,
    wait_idle: bool,
) -> String {
    let mut s = String::new();
    let wait = if wait_idle { WAIT_IDLE } else { "" };
    for (name, args) in shapes {
        s.push_str(&format!(
            "{wait}echo '=== preview {name}'\n{CLI} preview --tf-cluster {args} 2>&1\n\
             echo '=== step {name}'\nsrun --output={dir}/{name}.%t {args} --tf-cluster bash {DIR}/probe.sh\n\
             cat {dir}/{name}.*\n"
        ));
    }
    for (name, args, command) in refusals {
        s.push_str(&format!(
            "echo '=== preview {name}'\n{CLI} preview {args} -- {command} 2>&1\n\
             echo '=== step {name}'\nsrun {args} {command} 2>&1\n"
        ));
    }
    // The script's status is not the last refused step's.
    s.push_str("true\n");
    s
}

/// Every shape's preview equals its step task by task: rank, host, local
/// rank, GPUs.
fn compare_shapes(text: &str, shapes: &[(&str, &str)], context: &str) {
    let all = sections(text);
    for (name, args) in shapes {
        let preview = section(&all, &format!("preview {name}"), context);
        let step = step_run(section(&all, &format!("step {name}"), context));
        let (rows, _) = table(preview);
        let real: Vec<(u32, &str, u32, Option<&str>)> = step
            .tasks
            .iter()
            .map(|t| {
                let gpus = t.cuda_visible_devices.as_deref().filter(|g| !g.is_empty());
                (t.rank, t.host.as_str(), t.local, gpus)
            })
            .collect();
        let shown: Vec<(u32, &str, u32, Option<&str>)> = rows
            .iter()
            .map(|r| {
                let local = u32::from(r.port - PORT_BASE);
                (r.rank, r.host.as_str(), local, r.gpus.as_deref())
            })
            .collect();
        assert!(!real.is_empty(), "{name} ({args}): no task ran\n{context}");
        assert_eq!(
            shown, real,
            "{name} ({args}): the preview (left) against the step (rank, host, local rank, GPUs)\npreview:\n{preview}\n{context}"
        );
    }
}

/// Every refusal's text, as the preview gives it, is srun's.
fn compare_refusals(text: &str, refusals: &[(&str, &str, &str)], context: &str) {
    let all = sections(text);
    for (name, args, command) in refusals {
        let preview = section(&all, &format!("preview {name}"), context);
        let step = section(&all, &format!("step {name}"), context);
        let refusal = preview
            .lines()
            .find_map(|l| l.strip_prefix("tf-cluster: "))
            .unwrap_or_else(|| {
                panic!(
                    "{name} ({args} {command}): the preview did not refuse:\n{preview}\n{context}"
                )
            });
        // Slurm's own refusals are quoted in parentheses; the plugin's are
        // its whole line.
        let said = match refusal.rsplit_once("srun would be refused (") {
            Some((_, slurm)) => slurm.trim_end_matches(')'),
            None => refusal,
        };
        // The ports Slurm reserves are known only at launch: port numbers
        // aside, the text is the same.
        assert!(
            without_ports(step).contains(&without_ports(said)),
            "{name} ({args} {command}): srun did not say {said:?}:\n{step}\n{context}"
        );
    }
}

/// `text` with every number of four digits or more (a port) as `#`.
fn without_ports(text: &str) -> String {
    let mut out = String::new();
    let mut digits = String::new();
    for c in text.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        out.push_str(if digits.len() >= 4 { "#" } else { &digits });
        digits.clear();
        out.push(c);
    }
    out.pop();
    out
}

/// From a login node: the preview of each shape is the step srun then runs
/// (srun's own allocation, the nodes' CPUs from slurmctld), and each step
/// srun refuses, the preview refuses with srun's text.
#[test]
fn previews_from_a_login_node_are_the_steps() {
    let _s = serial();
    let _t = testbed();
    install_probe();
    let outputs = Outputs::new("preview-login");
    let script = shapes_script(LOGIN_SHAPES, LOGIN_REFUSALS, outputs.path(), true);
    let start = std::time::Instant::now();
    let out = exec_for(300, &["bash", "-c", &script]);
    eprintln!("login shapes: {:.1} s", start.elapsed().as_secs_f64());
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let context = format!(
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    compare_shapes(&stdout, LOGIN_SHAPES, &context);
    compare_refusals(&stdout, LOGIN_REFUSALS, &context);
}

/// Inside one allocation of uneven CPUs (4,2,1): every shape's preview is
/// the step srun then starts there, and every refusal srun's.
#[test]
fn previews_in_an_uneven_allocation_are_the_steps() {
    let _s = serial();
    let _t = testbed();
    install_probe();
    let outputs = Outputs::new("preview-uneven");
    let mut script = String::from(
        "test \"$SLURM_JOB_CPUS_PER_NODE\" = 4,2,1 || { echo \"CPUs per node: $SLURM_JOB_CPUS_PER_NODE\"; exit 3; }\n",
    );
    script.push_str(&shapes_script(
        ALLOCATION_SHAPES,
        ALLOCATION_REFUSALS,
        outputs.path(),
        false,
    ));
    let start = std::time::Instant::now();
    let out = exec_for(
        300,
        &["salloc", "-w", "node[1-3]", "-n7", "bash", "-c", &script],
    );
    eprintln!("allocation shapes: {:.1} s", start.elapsed().as_secs_f64());
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let context = format!(
        "salloc exit {:?}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{context}");
    compare_shapes(&stdout, ALLOCATION_SHAPES, &context);
    compare_refusals(&stdout, ALLOCATION_REFUSALS, &context);
}

/// Shapes inside `salloc -N2 --ntasks-per-node=2 --gres=gpu:4`: every task
/// of a step there gets the GPUs Slurm gives it on its node, and so must
/// every rank of the preview.
const GPU_ALLOCATION_SHAPES: &[(&str, &str)] = &[
    ("default", ""),
    ("cyclic", "-m cyclic"),
    ("n2", "-n2"),
    ("n3", "-n3"),
];

/// Inside an allocation of GPUs (`--gres=gpu:4`), with no GPU option on
/// the step: every shape's preview shows the GPUs each task gets.
#[test]
fn previews_in_a_gpu_allocation_are_the_steps() {
    let _s = serial();
    let _t = testbed();
    install_probe();
    let outputs = Outputs::new("preview-gpus");
    let mut script = String::from("env | grep -E '^SLURM_|GPU|GRES|TRES' | sort >&2\n");
    script.push_str(&shapes_script(
        GPU_ALLOCATION_SHAPES,
        &[],
        outputs.path(),
        false,
    ));
    let out = exec_for(
        300,
        &[
            "salloc",
            "-N2",
            "--ntasks-per-node=2",
            "--gres=gpu:4",
            "bash",
            "-c",
            &script,
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let context = format!(
        "salloc exit {:?}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{context}");
    compare_shapes(&stdout, GPU_ALLOCATION_SHAPES, &context);
}
