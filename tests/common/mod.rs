#![allow(dead_code)] // Shared by several test binaries, each using a part.

//! Runs real srun/sbatch steps on the dockerized Slurm testbed
//! (docker/testbed.sh) and reads back what every task saw.
//!
//! The expected TF_CONFIG is derived from Slurm's own placement as the tasks
//! report it (hostname, SLURM_PROCID, SLURM_LOCALID, reserved ports), never
//! from the plugin's code.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::Mutex;

use serde_json::Value;

pub mod outputs;

use outputs::Outputs;

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The plugin builds the testbed mounts at /opt/tf-cluster (the
/// fault-injection build): TFC_PLUGIN_DIR (docker/matrix.sh points it at the
/// build for each Slurm version), else target/release.
pub fn plugin_dir() -> PathBuf {
    std::env::var_os("TFC_PLUGIN_DIR")
        .map(|d| repo().join(d))
        .unwrap_or_else(|| repo().join("target/release"))
}

/// Where the tf-cluster package puts the plugin on Debian (every container
/// of the testbed installs the package at start).
pub const PLUGIN: &str = "/usr/lib/x86_64-linux-gnu/slurm-wlm/tf_cluster.so";

/// The Debian package the testbed installs: the one tf-cluster_*.deb in
/// TFC_DEB_DIR (docker/matrix.sh: the package for each Slurm version), else
/// target/deb (`bash packaging/deb.sh`).
pub fn deb() -> PathBuf {
    let dir = std::env::var_os("TFC_DEB_DIR")
        .map(|d| repo().join(d))
        .unwrap_or_else(|| repo().join("target/deb"));
    let debs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e} (bash packaging/deb.sh first)", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with("tf-cluster_") && name.ends_with(".deb")
        })
        .collect();
    assert_eq!(
        debs.len(),
        1,
        "want one tf-cluster_*.deb in {}",
        dir.display()
    );
    debs.into_iter().next().unwrap()
}

/// The testbed's run dir, as docker/testbed.sh picks it: TFC_RUN_DIR, else
/// docker/run for the prefix `tfc`, docker/run-PREFIX for any other.
fn run_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("TFC_RUN_DIR") {
        return repo().join(dir);
    }
    match std::env::var("TFC_PREFIX") {
        Ok(prefix) if prefix != "tfc" => repo().join(format!("docker/run-{prefix}")),
        _ => repo().join("docker/run"),
    }
}

/// Access to the testbed, shared or exclusive, held until dropped: an
/// flock(2) on a file of the run dir, so the test threads of one binary and
/// the test binaries that docker/matrix.sh runs side by side on one testbed
/// all take turns. Steps read plugstack.conf when they start: tests that swap
/// it (or reinstall the package, or bring the testbed up with another
/// topology) hold it exclusively, every other test shared.
pub struct Held(#[allow(dead_code)] File);

fn lock_file(name: &str) -> File {
    let dir = run_dir();
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let path = dir.join(name);
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn flock(file: &File, op: libc::c_int) {
    // SAFETY: flock on a descriptor this File owns.
    while unsafe { libc::flock(file.as_raw_fd(), op) } != 0 {
        let e = std::io::Error::last_os_error();
        assert_eq!(e.kind(), std::io::ErrorKind::Interrupted, "flock: {e}");
    }
}

/// Shared or exclusive access. A writer first takes the turnstile and holds
/// it until it has the lock, and every reader passes the turnstile first: a
/// waiting writer is not starved by readers that keep coming (flock alone
/// would let them in).
fn hold(exclusive: bool) -> Held {
    let turnstile = lock_file(".lock-turnstile");
    let lock = lock_file(".lock");
    flock(&turnstile, libc::LOCK_EX);
    if exclusive {
        flock(&lock, libc::LOCK_EX);
        drop(turnstile);
    } else {
        drop(turnstile);
        flock(&lock, libc::LOCK_SH);
    }
    Held(lock)
}

/// The network topology and gres.conf variant the testbed was last brought
/// up with, by any test binary: a file of the run dir, written under the
/// exclusive lock.
const UP_FILE: &str = ".up-config";

/// Whether this test binary brought the testbed up (or found it up) once:
/// the first test of each binary runs `docker/testbed.sh up`, which keeps
/// running containers whose configuration is unchanged.
static CHECKED: Mutex<bool> = Mutex::new(false);

/// Makes sure the testbed is up with the network topology `topology`
/// (docker/testbed.sh TFC_TOPOLOGY) or none and the gres.conf variant `gres`
/// (TFC_GRES) or the default, then takes the access `lock` gives. The first
/// call of a binary brings it up; a call asking another configuration than
/// the one up (brought up by this or another binary) waits until no test
/// uses the testbed (the exclusive lock) and brings it up again with it. The
/// lock is taken before the configuration is checked, so a test keeps the
/// one it asked for while it holds its guard (and must not ask for another
/// meanwhile). A testbed that cannot start fails the tests, it never skips
/// them.
fn ensure_up<G>(topology: Option<&str>, gres: Option<&str>, lock: impl Fn() -> G) -> G {
    let wanted = format!(
        "topology={} gres={}",
        topology.unwrap_or(""),
        gres.unwrap_or("")
    );
    let is_up = || {
        *CHECKED.lock().unwrap_or_else(|e| e.into_inner())
            && std::fs::read_to_string(run_dir().join(UP_FILE))
                .ok()
                .as_ref()
                == Some(&wanted)
    };
    loop {
        let held = lock();
        if is_up() {
            return held;
        }
        drop(held);
        let _alone = hold(true);
        if is_up() {
            continue;
        }
        // The testbed installs this package in every container: the tests
        // run the packaged plugin, never a bare .so.
        deb();
        let _ = std::fs::remove_file(run_dir().join(UP_FILE));
        let mut cmd = Command::new(repo().join("docker/testbed.sh"));
        cmd.arg("up");
        match topology {
            Some(t) => cmd.env("TFC_TOPOLOGY", t),
            None => cmd.env_remove("TFC_TOPOLOGY"),
        };
        match gres {
            Some(g) => cmd.env("TFC_GRES", g),
            None => cmd.env_remove("TFC_GRES"),
        };
        let out = cmd.output().expect("running docker/testbed.sh up");
        assert!(
            out.status.success(),
            "the Slurm testbed did not come up:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::write(run_dir().join(UP_FILE), &wanted).unwrap();
        *CHECKED.lock().unwrap_or_else(|e| e.into_inner()) = true;
    }
}

fn read_plugstack() -> Held {
    hold(false)
}

/// Shared access to the testbed (the plugstack.conf in force is the default).
pub fn testbed() -> Held {
    ensure_up(None, None, read_plugstack)
}

/// [`testbed`] under the network topology `topology` (the testbed is brought
/// up again when a test asks for another).
pub fn testbed_with_topology(topology: &str) -> Held {
    ensure_up(Some(topology), None, read_plugstack)
}

/// [`testbed`] with the gres.conf variant `gres` (docker/config/gres/).
pub fn testbed_with_gres(gres: &str) -> Held {
    ensure_up(None, Some(gres), read_plugstack)
}

/// Exclusive access, for tests that swap plugstack.conf. The default is back
/// in place when the guard drops.
pub struct Exclusive(#[allow(dead_code)] Held);

pub fn exclusive() -> Exclusive {
    ensure_up(None, None, || Exclusive(hold(true)))
}

impl Exclusive {
    /// Puts `text` in place as plugstack.conf (testbed.sh swaps it atomically).
    pub fn plugstack(&self, text: &str) {
        let file = std::env::temp_dir().join(format!("tfc-plugstack-{}.conf", std::process::id()));
        std::fs::write(&file, text).unwrap();
        let out = Command::new(repo().join("docker/testbed.sh"))
            .arg("plugstack")
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Exclusive {
    fn drop(&mut self) {
        let ok = Command::new(repo().join("docker/testbed.sh"))
            .args(["plugstack", "default"])
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok && !std::thread::panicking() {
            panic!("could not restore the default plugstack.conf");
        }
    }
}

/// `docker/testbed.sh PLACE… timeout SECONDS CMD…`: the one way the tests
/// run a command in the testbed.
fn run_in(place: &[&str], seconds: u32, cmd: &[&str]) -> Output {
    Command::new(repo().join("docker/testbed.sh"))
        .args(place)
        .args(["timeout", &seconds.to_string()])
        .args(cmd)
        .output()
        .unwrap_or_else(|e| panic!("running docker/testbed.sh {}: {e}", place.join(" ")))
}

/// Runs `cmd` as the user alice on the submit host.
pub fn exec(cmd: &[&str]) -> Output {
    run_in(&["exec"], 120, cmd)
}

/// Runs `cmd` as root in container `host` (`ctl`, `node1`…), with no time
/// limit of its own beyond 120 s.
pub fn on(host: &str, cmd: &[&str]) -> Output {
    if host == "ctl" {
        run_in(&["admin"], 120, cmd)
    } else {
        run_in(&["node-exec", host], 120, cmd)
    }
}

/// Every container of the testbed: the submit host first.
pub const HOSTS: [&str; 4] = ["ctl", "node1", "node2", "node3"];

/// [`exec`] with a longer limit than its 120 s (real trainers start slowly
/// on a busy machine).
pub fn exec_for(seconds: u32, cmd: &[&str]) -> Output {
    run_in(&["exec"], seconds, cmd)
}

/// Writes `files` (name, contents) into `dir` on the shared /home, then runs
/// `after` there (e.g. a chmod).
pub fn install(dir: &str, files: &[(&str, &str)], after: &str) {
    let mut script = format!("set -e; mkdir -p {dir}; cd {dir}\n");
    for (name, text) in files {
        assert!(!text.contains("\nTFC_EOF\n"));
        let text = text.strip_suffix('\n').unwrap_or(text);
        script.push_str(&format!("cat > {name} <<'TFC_EOF'\n{text}\nTFC_EOF\n"));
    }
    script.push_str(after);
    let out = exec(&["bash", "-c", &script]);
    assert!(
        out.status.success(),
        "installing into {dir}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// What each task of a step printed, from its own file
/// ([`outputs::Outputs::labelled`]): the probe's lines and every other line
/// by rank.
pub struct Labelled {
    /// The probe's `TASK` lines, for [`parse_run`].
    pub probe: String,
    /// The other lines, by rank.
    pub lines: BTreeMap<u32, Vec<String>>,
}

impl Labelled {
    /// Each rank's one `PREFIX` line, parsed as JSON.
    pub fn json(&self, prefix: &str) -> BTreeMap<u32, Value> {
        let mut found = BTreeMap::new();
        for (&rank, lines) in &self.lines {
            for text in lines {
                if let Some(j) = text.strip_prefix(prefix) {
                    let v = serde_json::from_str(j)
                        .unwrap_or_else(|e| panic!("rank {rank}: {j:?}: {e}"));
                    assert!(
                        found.insert(rank, v).is_none(),
                        "rank {rank}: {prefix} twice"
                    );
                }
            }
        }
        found
    }

    /// The probe's tasks, with `code` and `context` for failure messages.
    pub fn run(&self, code: Option<i32>, context: String) -> Run {
        let mut run = parse_run(Output {
            status: std::process::ExitStatus::default(),
            stdout: self.probe.clone().into_bytes(),
            stderr: Vec::new(),
        });
        run.code = code;
        run.stderr = context;
        run
    }
}

/// What each task prints: its Slurm facts and the variables under test.
pub const PROBE: &str = r#"printf 'TASK\t%s\t%s\t%s\t%s\t%s\t%s\n' "$SLURM_PROCID" "$(hostname)" "$SLURM_LOCALID" "${SLURM_STEP_RESV_PORTS-<unset>}" "${CUDA_VISIBLE_DEVICES-<unset>}" "${TF_CONFIG-<unset>}""#;

#[derive(Debug, Clone)]
pub struct Task {
    pub rank: u32,
    pub host: String,
    pub local: u32,
    pub resv_ports: Option<String>,
    pub cuda_visible_devices: Option<String>,
    pub tf_config: Option<Value>,
}

pub struct Run {
    pub code: Option<i32>,
    pub stderr: String,
    /// By rank.
    pub tasks: Vec<Task>,
}

/// `srun ARGS bash -c PROBE`.
pub fn srun(args: &[&str]) -> Run {
    srun_env(&[], args)
}

/// `env VARS srun ARGS bash -c PROBE`: srun with `VAR=value`s set. Each
/// task's lines are read from its own file, never from srun's merged stream.
pub fn srun_env(vars: &[&str], args: &[&str]) -> Run {
    let mut full = args.to_vec();
    full.extend_from_slice(&["bash", "-c", PROBE]);
    parse_run(srun_tasks_env(vars, &full))
}

/// `srun ARGS` as alice, each task's stdout and stderr in files of their own
/// (outputs::Outputs), returned as one output: stdout every task's, rank by
/// rank (a step started inside a task after the step's own); stderr srun's
/// own, then every task's.
pub fn srun_tasks(args: &[&str]) -> Output {
    srun_tasks_env(&[], args)
}

/// [`srun_tasks`] with `VAR=value`s in srun's environment.
pub fn srun_tasks_env(vars: &[&str], args: &[&str]) -> Output {
    srun_tasks_for(120, vars, args)
}

/// [`srun_tasks_env`] with a limit of `seconds` instead of [`exec`]'s 120.
pub fn srun_tasks_for(seconds: u32, vars: &[&str], args: &[&str]) -> Output {
    let outputs = Outputs::new("srun");
    let files = outputs.srun_args();
    let mut cmd = vec!["env"];
    cmd.extend_from_slice(vars);
    cmd.push("srun");
    cmd.extend(files.iter().map(String::as_str));
    cmd.extend_from_slice(args);
    let srun = exec_for(seconds, &cmd);
    let mut stdout = srun.stdout;
    stdout.extend(outputs.steps_stdout().concat().into_bytes());
    let mut stderr = srun.stderr;
    stderr.extend(outputs.all_stderr().into_bytes());
    Output {
        status: srun.status,
        stdout,
        stderr,
    }
}

pub fn parse_run(out: Output) -> Run {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let unset = |s: &str| (s != "<unset>").then(|| s.to_string());
    let mut tasks: Vec<Task> = stdout
        .lines()
        .filter_map(|line| line.strip_prefix("TASK\t"))
        .map(|line| {
            let f: Vec<&str> = line.split('\t').collect();
            assert_eq!(f.len(), 6, "bad probe line {line:?}");
            Task {
                rank: f[0].parse().unwrap(),
                host: f[1].to_string(),
                local: f[2].parse().unwrap(),
                resv_ports: unset(f[3]),
                cuda_visible_devices: unset(f[4]),
                tf_config: unset(f[5]).map(|t| {
                    serde_json::from_str(&t).unwrap_or_else(|e| panic!("TF_CONFIG {t:?}: {e}"))
                }),
            }
        })
        .collect();
    tasks.sort_by_key(|t| t.rank);
    Run {
        code: out.status.code(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        tasks,
    }
}

impl Run {
    /// The step succeeded and ran `n` tasks, ranks 0..n.
    pub fn assert_ran(&self, n: u32) -> &Self {
        assert_eq!(self.code, Some(0), "step failed: {}", self.stderr);
        let ranks: Vec<u32> = self.tasks.iter().map(|t| t.rank).collect();
        assert_eq!(ranks, (0..n).collect::<Vec<_>>(), "stderr: {}", self.stderr);
        self
    }

    /// The step was refused before any task ran, with one `tf-cluster:` line
    /// containing `why`.
    pub fn assert_refused(&self, why: &str) {
        assert_ne!(self.code, Some(0), "step should fail");
        assert!(self.tasks.is_empty(), "tasks ran: {:?}", self.tasks);
        let lines = self.messages();
        assert_eq!(lines.len(), 1, "want one tf-cluster line: {}", self.stderr);
        assert!(lines[0].contains(why), "want {why:?} in {:?}", lines[0]);
    }

    /// The `tf-cluster:` messages of the run's stderr: see [`messages`].
    pub fn messages(&self) -> Vec<&str> {
        messages(&self.stderr)
    }

    /// The step ran `n` tasks, all workers with the default port base.
    pub fn assert_workers(&self, n: u32) -> &Self {
        self.assert_ran(n).assert_tf_config(&[("worker", n)], 8888)
    }

    /// Every task's TF_CONFIG is the one Slurm's real placement implies for
    /// `roles` (ranks to roles in order) and ports from `port_base` or from
    /// the ports Slurm reserved.
    pub fn assert_tf_config(&self, roles: &[(&str, u32)], port_base: u16) -> &Self {
        self.assert_tf_config_rpc(roles, port_base, None)
    }

    /// [`Run::assert_tf_config`] with an `rpc_layer` in TF_CONFIG.
    pub fn assert_tf_config_rpc(
        &self,
        roles: &[(&str, u32)],
        port_base: u16,
        rpc_layer: Option<&str>,
    ) -> &Self {
        let address = |t: &Task| {
            let port = match &t.resv_ports {
                Some(list) => reserved_ports(list)[t.local as usize],
                None => port_base + t.local as u16,
            };
            format!("{}:{port}", t.host)
        };
        let mut cluster = BTreeMap::new();
        let mut own = Vec::new();
        let mut rank = 0usize;
        for &(role, count) in roles {
            let addrs: Vec<String> = self.tasks[rank..rank + count as usize]
                .iter()
                .map(address)
                .collect();
            for index in 0..count {
                own.push((role, index));
            }
            cluster.insert(role.to_string(), Value::from(addrs));
            rank += count as usize;
        }
        assert_eq!(rank, self.tasks.len(), "roles do not cover the step");
        for (task, (role, index)) in self.tasks.iter().zip(own) {
            let mut want =
                serde_json::json!({"cluster": cluster, "task": {"type": role, "index": index}});
            if let Some(layer) = rpc_layer {
                want["rpc_layer"] = layer.into();
            }
            assert_eq!(
                task.tf_config.as_ref(),
                Some(&want),
                "rank {} on {}",
                task.rank,
                task.host
            );
        }
        self
    }

    /// CUDA_VISIBLE_DEVICES of each task, by rank.
    pub fn gpus(&self) -> Vec<Option<&str>> {
        self.tasks
            .iter()
            .map(|t| t.cuda_visible_devices.as_deref())
            .collect()
    }

    pub fn hosts(&self) -> Vec<&str> {
        self.tasks.iter().map(|t| t.host.as_str()).collect()
    }
}

/// The plugin's messages in `text`, one a `tf-cluster:` line, in order, with
/// what stands before them (Slurm's `srun: error: ` and the like) stripped.
pub fn messages(text: &str) -> Vec<&str> {
    text.lines()
        .filter_map(|l| l.split_once("tf-cluster: ").map(|(_, m)| m))
        .collect()
}

/// `12001,12003-12005` → the ports, as Slurm lists them.
pub fn reserved_ports(list: &str) -> Vec<u16> {
    list.split(',')
        .flat_map(|r| {
            let (lo, hi) = r.split_once('-').unwrap_or((r, r));
            lo.parse::<u16>().unwrap()..=hi.parse::<u16>().unwrap()
        })
        .collect()
}

/// `sbatch --wait ARGS --wrap "srun SRUN_ARGS bash -c PROBE"`: what the
/// batch step's tasks saw, and sbatch's own result.
/// The step's tasks write their lines to files of their own; the job's
/// output file holds the batch script's and slurmstepd's messages.
pub fn sbatch(args: &[&str], srun_args: &str) -> Run {
    let outputs = Outputs::new("sbatch");
    let out_file = format!("{}/job.log", outputs.path());
    let [task_out, task_err] = outputs.srun_args();
    let wrap = format!(
        "srun {task_out} {task_err} {srun_args} bash -c '{}'",
        PROBE.replace('\'', r"'\''")
    );
    let mut cmd = vec!["sbatch", "--wait", "-o", out_file.as_str()];
    cmd.extend_from_slice(args);
    cmd.extend_from_slice(&["--wrap", wrap.as_str()]);
    let submitted = exec(&cmd);
    let file = String::from_utf8_lossy(&exec(&["cat", out_file.as_str()]).stdout).into_owned();
    let mut run = parse_run(Output {
        status: submitted.status,
        stdout: outputs.stdout().into_bytes(),
        stderr: Vec::new(),
    });
    run.stderr = format!(
        "{}{file}{}",
        String::from_utf8_lossy(&submitted.stderr),
        outputs.stderr()
    );
    run
}

/// The state of every node (`idle`, `mix`, `drain`, …).
pub fn node_states() -> Vec<String> {
    let out = exec(&["sinfo", "-h", "-N", "-o", "%N %t"]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// Waits (up to 30 s) until every node is idle: a node still completing
/// the last job (its epilog, the step's end) is passed over by Slurm's node
/// selection, so a test of where Slurm places a step starts from idle nodes.
pub fn wait_all_idle() {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let states = node_states();
        if states.len() == 3 && states.iter().all(|s| s.ends_with(" idle")) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "nodes not idle within 30 s: {states:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

pub fn assert_no_node_drained() {
    let states = node_states();
    assert_eq!(states.len(), 3, "{states:?}");
    assert!(
        states
            .iter()
            .all(|s| !s.contains("drain") && !s.contains("down")),
        "a node left service: {states:?}"
    );
}

/// CA certificates the host added to its trust store (a TLS-inspecting
/// proxy's), for pip in the testbed, as the node image's build does.
pub fn extra_ca() -> String {
    let mut pem = String::new();
    let mut dirs = vec![PathBuf::from("/usr/local/share/ca-certificates")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "crt") {
                pem.push_str(&std::fs::read_to_string(&path).unwrap_or_default());
                pem.push('\n');
            }
        }
    }
    pem
}

/// A venv at `venv` on the shared /home, made by `python` (a shell word:
/// `python3`, the image's, or another of its Pythons) with
/// `--system-site-packages` (for the image's torch), with `requirement` from
/// PyPI, as alice; then `check` (Python) must run. Kept when `check` already
/// runs.
pub fn pip_venv(venv: &str, python: &str, requirement: &str, check: &str) {
    install(
        venv,
        &[("extra-ca.pem", &extra_ca())],
        "cat /etc/ssl/certs/ca-certificates.crt extra-ca.pem > pip-ca.pem\n",
    );
    let setup = format!(
        "set -e; [ -x {venv}/bin/python ] || {python} -m venv --system-site-packages {venv}\n\
         {venv}/bin/python -c '{check}' 2>/dev/null && exit 0\n\
         {venv}/bin/pip install -q --disable-pip-version-check --cert {venv}/pip-ca.pem '{requirement}'\n\
         {venv}/bin/python -c '{check}'"
    );
    let out = exec_for(600, &["bash", "-c", &setup]);
    assert!(
        out.status.success(),
        "installing {requirement}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
