//! docker/prerequisites.sh and the Docker daemon: a machine may start dockerd
//! just before the tests (or not at all), so the script waits for a daemon
//! that is coming up, fails with one clear line when none answers in its
//! time, and changes nothing of the machine's Docker unasked: it starts a
//! daemon only with `TFC_DOCKER_START=1` and switches the storage driver
//! only with `TFC_DOCKER_DRIVER=overlay2`. Run against stand-ins of `docker`,
//! `dockerd`, `systemctl`, `pgrep`, `mount` and `dpkg-query` first on PATH, so the
//! real daemon is never touched.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// A folder of stand-ins. `docker info` answers once `up` exists in the
/// folder, or from its `after`-th call on; `dockerd` and `systemctl` create
/// `up` (a daemon started); `pgrep` finds a dockerd only when `running` exists.
struct Stubs {
    dir: PathBuf,
}

impl Stubs {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("tfc-prereq-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let d = dir.display();
        let write = |name: &str, body: String| {
            let path = dir.join(name);
            std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        };
        write("dpkg-query", "echo 'install ok installed'".into());
        write(
            "docker",
            format!(
                "echo x >>{d}/calls
[ \"$1\" = info ] || exit 0
n=$(wc -l <{d}/calls)
if [ -e {d}/up ] || {{ [ -e {d}/after ] && [ \"$n\" -ge \"$(cat {d}/after)\" ]; }}; then
    case \"$*\" in *Driver*) cat {d}/driver 2>/dev/null || echo overlay2 ;; *) echo ok ;; esac
    exit 0
fi
echo 'Cannot connect to the Docker daemon at unix:///var/run/docker.sock.' >&2
exit 1"
            ),
        );
        write("dockerd", format!("touch {d}/up {d}/started"));
        write("systemctl", format!("touch {d}/up {d}/started"));
        write("pgrep", format!("[ -e {d}/running ]"));
        // A script that would switch the storage driver stops at its probe
        // mount, before it could touch the machine's /etc/docker.
        write("mount", "exit 1".into());
        Stubs { dir }
    }

    fn touch(&self, name: &str, text: &str) {
        std::fs::write(self.dir.join(name), text).unwrap();
    }

    /// Runs the script (one package to check, answered as installed) with a
    /// wait of `wait` seconds; its exit status, stderr and wall time.
    fn run(&self, wait: u32) -> (bool, String, Duration) {
        self.run_with(wait, &[])
    }

    /// [`Stubs::run`] with more variables.
    fn run_with(&self, wait: u32, vars: &[(&str, &str)]) -> (bool, String, Duration) {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("docker/prerequisites.sh");
        let path = format!("{}:{}", self.dir.display(), std::env::var("PATH").unwrap());
        let t0 = Instant::now();
        let out = Command::new("bash")
            .arg(script)
            .arg("hostname")
            .env("PATH", path)
            .env("TFC_DOCKER_WAIT", wait.to_string())
            .env_remove("TFC_DOCKER_DRIVER")
            .env_remove("TFC_DOCKER_START")
            .envs(vars.iter().copied())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.success(), err, t0.elapsed())
    }
}

impl Drop for Stubs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn a_daemon_still_starting_is_waited_for() {
    let stubs = Stubs::new("starting");
    stubs.touch("running", "");
    // The daemon's process is there; its socket answers from the 4th call on.
    stubs.touch("after", "4");
    let (ok, err, _) = stubs.run(60);
    assert!(ok, "the script gave up on a daemon coming up: {err}");
    assert!(
        !stubs.dir.join("started").exists(),
        "started a second daemon beside a running one"
    );
}

/// No dockerd process at all: unasked, the script says how to start one and
/// stops at once, starting nothing.
#[test]
fn a_daemon_not_running_is_not_started_unasked() {
    let stubs = Stubs::new("absent");
    let (ok, err, took) = stubs.run(60);
    assert!(!ok, "passed without a daemon: {err}");
    assert!(
        !stubs.dir.join("started").exists(),
        "started a daemon unasked: {err}"
    );
    assert!(
        took < Duration::from_secs(30),
        "waited {took:?} for a daemon no one starts"
    );
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains("TFC_DOCKER_START=1"), "{err}");
}

/// With `TFC_DOCKER_START=1`, as root (the testbed's hosts and CI), the
/// script starts one; elsewhere it cannot.
#[test]
fn a_daemon_not_running_is_started_when_asked() {
    let stubs = Stubs::new("asked");
    let root = unsafe { libc::geteuid() } == 0;
    let (ok, err, _) = stubs.run_with(if root { 60 } else { 2 }, &[("TFC_DOCKER_START", "1")]);
    if root {
        assert!(ok, "no daemon was started: {err}");
        assert!(
            stubs.dir.join("started").exists(),
            "dockerd was not started: {err}"
        );
    } else {
        assert!(!ok && !stubs.dir.join("started").exists(), "{err}");
    }
}

/// A Docker on fuse-overlayfs, holding nothing: unasked, the script leaves
/// it (no restart) and says in one line how to switch.
#[test]
fn the_storage_driver_is_not_switched_unasked() {
    let stubs = Stubs::new("fuse");
    stubs.touch("running", "");
    stubs.touch("up", "");
    stubs.touch("driver", "fuse-overlayfs\n");
    let (ok, err, _) = stubs.run(10);
    assert!(ok, "{err}");
    assert!(
        !stubs.dir.join("started").exists(),
        "Docker was restarted unasked: {err}"
    );
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].contains("fuse-overlayfs") && lines[0].contains("TFC_DOCKER_DRIVER=overlay2"),
        "{err}"
    );
}

#[test]
fn a_daemon_that_never_answers_fails_in_its_time_with_one_line() {
    let stubs = Stubs::new("never");
    stubs.touch("running", "");
    let (ok, err, took) = stubs.run(3);
    assert!(!ok, "passed without a daemon: {err}");
    assert!(
        took < Duration::from_secs(30),
        "waited {took:?} for a 3 s limit"
    );
    let line: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("not reachable"))
        .collect();
    assert_eq!(line.len(), 1, "{err}");
    assert!(
        line[0].contains("3 s") && line[0].contains("Cannot connect"),
        "the line says neither the wait nor Docker's own reason: {err}"
    );
}

/// `.ci/run` opts in on CI's own machine (Docker started, overlay2) unless a
/// variable says otherwise: set empty, it keeps the machine's Docker as it
/// is. Its export line, run as bash runs it.
#[test]
fn ci_opts_in_unless_told_not_to() {
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/run")).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("export TFC_DOCKER_START="))
        .expect(".ci/run exports TFC_DOCKER_START and TFC_DOCKER_DRIVER");
    let run = |vars: &[(&str, &str)]| {
        let mut cmd = Command::new("bash");
        cmd.args([
            "-c",
            &format!("{line}; echo \"[$TFC_DOCKER_START][$TFC_DOCKER_DRIVER]\""),
        ])
        .env_remove("TFC_DOCKER_START")
        .env_remove("TFC_DOCKER_DRIVER");
        cmd.envs(vars.iter().copied());
        String::from_utf8(cmd.output().unwrap().stdout).unwrap()
    };
    assert_eq!(run(&[]), "[1][overlay2]\n");
    assert_eq!(
        run(&[("TFC_DOCKER_START", ""), ("TFC_DOCKER_DRIVER", "")]),
        "[][]\n"
    );
    assert_eq!(run(&[("TFC_DOCKER_DRIVER", "")]), "[1][]\n");
}
