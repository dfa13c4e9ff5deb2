//! `tf-cluster doctor` on a login node, whatever its files and commands do:
//! SLURM_CONF naming /dev/zero, a FIFO or nothing, a
//! plugstack.conf including /dev/zero, and a `srun`/`scontrol` that never
//! end. The doctor ends within 10 s with one line per problem, and its
//! memory stays in megabytes.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// A scratch directory of this test, with `srun` and `scontrol` that hang
/// (as the real ones do reading /dev/zero, or retrying a configless fetch).
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tfc-doctor-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    for cmd in ["srun", "scontrol"] {
        let path = dir.join("bin").join(cmd);
        std::fs::write(&path, "#!/bin/sh\nexec sleep 600\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    dir
}

struct Doctor {
    lines: Vec<String>,
    took: Duration,
    /// The most memory any process the doctor left behind or waited for
    /// had, in KiB (getrusage of the test's waited children).
    max_rss_kib: i64,
}

fn doctor(dir: &Path, slurm_conf: &str) -> Doctor {
    use std::os::unix::process::CommandExt;
    let start = Instant::now();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tf-cluster"));
    // Its own process group, so the test can end whatever it started; and
    // at most 1 GiB of address space, so a doctor that reads without bound
    // fails here instead of taking the shared machine's memory.
    cmd.process_group(0);
    // SAFETY: setrlimit only, between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 1 << 30,
                rlim_max: 1 << 30,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd
        .arg("doctor")
        .env_clear()
        .env(
            "PATH",
            format!("{}:/usr/bin:/bin", dir.join("bin").display()),
        )
        .env("SLURM_CONF", slurm_conf)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The test's own limit: a doctor that hangs is killed and fails here.
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if start.elapsed() > Duration::from_secs(30) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // Whatever the doctor left running (a command it did not end).
    // SAFETY: a signal to the process group this test made.
    unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
    let out = child.wait_with_output().unwrap();
    let took = start.elapsed();
    // SAFETY: getrusage fills the zeroed struct.
    let max_rss_kib = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage);
        usage.ru_maxrss
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Doctor {
        lines: text.lines().map(str::to_string).collect(),
        took,
        max_rss_kib,
    }
}

impl Doctor {
    /// Within 10 s and 64 MiB, and exactly one line naming `what` that
    /// says `why`.
    fn assert_bounded(&self, case: &str, what: &str, why: &str) {
        assert!(
            self.took < Duration::from_secs(10),
            "{case}: took {:?}:\n{}",
            self.took,
            self.lines.join("\n")
        );
        assert!(
            self.max_rss_kib < 64 * 1024,
            "{case}: {} KiB:\n{}",
            self.max_rss_kib,
            self.lines.join("\n")
        );
        let named: Vec<&String> = self
            .lines
            .iter()
            .filter(|l| l.contains(what) && l.contains(why))
            .collect();
        assert_eq!(
            named.len(),
            1,
            "{case}: want one line with {what:?} and {why:?}:\n{}",
            self.lines.join("\n")
        );
    }
}

#[test]
fn slurm_conf_dev_zero() {
    let dir = scratch("zero");
    doctor(&dir, "/dev/zero").assert_bounded(
        "SLURM_CONF=/dev/zero",
        "/dev/zero",
        "not a regular file",
    );
}

#[test]
fn plugstack_including_dev_zero() {
    let dir = scratch("include");
    let conf = dir.join("slurm.conf");
    let stack = dir.join("plugstack.conf");
    std::fs::write(
        &conf,
        format!("ClusterName=c\nPlugStackConfig={}\n", stack.display()),
    )
    .unwrap();
    std::fs::write(&stack, "include /dev/zero\n").unwrap();
    doctor(&dir, conf.to_str().unwrap()).assert_bounded(
        "include /dev/zero",
        "/dev/zero",
        "not a regular file",
    );
}

#[test]
fn slurm_conf_fifo() {
    let dir = scratch("fifo");
    let fifo = dir.join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    doctor(&dir, fifo.to_str().unwrap()).assert_bounded(
        "SLURM_CONF=FIFO",
        fifo.to_str().unwrap(),
        "not a regular file",
    );
}

/// A missing slurm.conf is a configless node: `scontrol show config` is
/// asked, and cut short.
#[test]
fn slurm_conf_missing() {
    let dir = scratch("missing");
    let d = doctor(&dir, "/nonexistent/slurm.conf");
    d.assert_bounded("missing slurm.conf", "scontrol show config", "killed after");
    d.assert_bounded("missing slurm.conf", "srun --version", "killed after");
}

/// A file far larger than any slurm.conf is refused, not read whole.
#[test]
fn slurm_conf_huge() {
    let dir = scratch("huge");
    let big = dir.join("slurm.conf");
    let f = std::fs::File::create(&big).unwrap();
    f.set_len(4 << 30).unwrap();
    doctor(&dir, big.to_str().unwrap()).assert_bounded(
        "4 GiB sparse slurm.conf",
        big.to_str().unwrap(),
        "larger than",
    );
}
