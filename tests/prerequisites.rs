//! docker/prerequisites.sh and the Docker daemon: a machine may start dockerd
//! just before the tests (or not at all), so the script waits for a daemon
//! that is coming up, starts one where none runs, and fails with one clear
//! line when none answers in its time. Run against stand-ins of `docker`,
//! `dockerd`, `systemctl`, `pgrep` and `dpkg-query` first on PATH, so the
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
    case \"$*\" in *Driver*) echo overlay2 ;; *) echo ok ;; esac
    exit 0
fi
echo 'Cannot connect to the Docker daemon at unix:///var/run/docker.sock.' >&2
exit 1"
            ),
        );
        write("dockerd", format!("touch {d}/up {d}/started"));
        write("systemctl", format!("touch {d}/up {d}/started"));
        write("pgrep", format!("[ -e {d}/running ]"));
        Stubs { dir }
    }

    fn touch(&self, name: &str, text: &str) {
        std::fs::write(self.dir.join(name), text).unwrap();
    }

    /// Runs the script (one package to check, answered as installed) with a
    /// wait of `wait` seconds; its exit status, stderr and wall time.
    fn run(&self, wait: u32) -> (bool, String, Duration) {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("docker/prerequisites.sh");
        let path = format!("{}:{}", self.dir.display(), std::env::var("PATH").unwrap());
        let t0 = Instant::now();
        let out = Command::new("bash")
            .arg(script)
            .arg("hostname")
            .env("PATH", path)
            .env("TFC_DOCKER_WAIT", wait.to_string())
            .env("TFC_DOCKER_DRIVER", "keep")
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

#[test]
fn a_daemon_not_running_is_started() {
    let stubs = Stubs::new("absent");
    // No dockerd process at all: the script starts one (this runs as root
    // on the testbed's hosts; elsewhere it can only wait).
    let root = unsafe { libc::geteuid() } == 0;
    let (ok, err, _) = stubs.run(if root { 60 } else { 2 });
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
