//! A node's Ray as `tf-cluster ray` runs it: the step's private directory
//! and Ray's temp directory in it, the Python that runs `ray` and its
//! version, `ray start` through the guard that lets nothing call the
//! head's GCS port before the step's own GCS listens there, and the step's
//! Ray processes stopped.

use std::io::ErrorKind;
use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tf_cluster_core::frameworks::ray::FIRST_SAFE;

/// How long the head's GCS may take to accept connections, and all the
/// step's nodes to join, before the step fails.
pub const START_TIMEOUT: Duration = Duration::from_secs(180);

/// The step's private directory (the temp directory's parent, whose name
/// no other user knows), then Ray's temp directory inside it, both as the
/// user with mode 0700; Ray sets its own to 0777, which only the user can
/// reach through the private one. One that exists must be the user's own
/// directory (not a link), and is made private again.
pub fn make_temp(temp: &str) -> Result<(), String> {
    let private = private_dir(temp);
    for dir in [private, temp] {
        match std::fs::DirBuilder::new().mode(0o700).create(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                let meta = std::fs::symlink_metadata(dir).map_err(|e| format!("{dir}: {e}"))?;
                if !(meta.is_dir() && meta.uid() == unsafe { libc::getuid() }) {
                    return Err(format!(
                        "{dir}, this step's Ray directory, exists and is not a directory of yours"
                    ));
                }
                if dir == private {
                    use std::os::unix::fs::PermissionsExt;
                    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                        .map_err(|e| format!("{dir}: {e}"))?;
                }
            }
            Err(e) => return Err(format!("cannot make {dir}: {e}")),
        }
    }
    Ok(())
}

/// The step's private directory: the parent of Ray's temp directory.
pub fn private_dir(temp: &str) -> &str {
    Path::new(temp)
        .parent()
        .and_then(Path::to_str)
        .filter(|p| !p.is_empty() && *p != "/")
        .unwrap_or(temp)
}

/// Removes the step's private directory and all inside, never following a
/// link (std's remove_dir_all opens each directory without following one).
pub fn remove_private(temp: &str) {
    let private = private_dir(temp);
    if Path::new(private).exists() {
        // Ray's processes may still be closing files: try a few times.
        for _ in 0..10 {
            if std::fs::remove_dir_all(private).is_ok() || !Path::new(private).exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// The Python that runs Ray's `ray` script (its `#!` line).
pub fn ray_python() -> Result<String, String> {
    let script = which("ray").ok_or_else(|| "ray is not on PATH".to_string())?;
    let text = std::fs::read(&script).map_err(|e| format!("{script}: {e}"))?;
    let first = text.split(|&b| b == b'\n').next().unwrap_or_default();
    std::str::from_utf8(first)
        .ok()
        .and_then(|l| l.strip_prefix("#!"))
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .ok_or_else(|| format!("{script} names no Python"))
}

/// Refuses a Ray older than 2.54: before 2.52 it has no token
/// authentication, and 2.52-2.53's dashboard agent takes jobs without the
/// token; either cluster would run another user's code as this one.
pub fn check_version(python: &str) -> Result<(), String> {
    let out = Command::new(python)
        .args([
            "-c",
            "import importlib.metadata as m; print(m.version('ray'))",
        ])
        .stderr(Stdio::null())
        .output()
        .map_err(|e| format!("{python}: {e}"))?;
    let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let number = |part: Option<&str>| part.and_then(|p| p.parse::<u32>().ok());
    let mut parts = version.split('.');
    match (number(parts.next()), number(parts.next())) {
        (Some(major), Some(minor)) if (major, minor) >= FIRST_SAFE => Ok(()),
        (Some(_), Some(_)) => Err(format!(
            "Ray {version} is older than {0}.{1}, before which another user of the nodes can run code in the step's cluster (no token check, or none in the dashboard agent's job API): install Ray {0}.{1} or later",
            FIRST_SAFE.0, FIRST_SAFE.1
        )),
        _ => Err(format!(
            "cannot tell the version of Ray that {python} imports: is Ray installed there?"
        )),
    }
}

/// Ray's `ray start` as its `ray` script runs it, through the guard
/// (`ray_guard.py`): on the head, nothing calls the GCS port before the
/// step's own GCS process is the only one listening there; else it exits
/// [`PORT_TAKEN`] having said why in one line, before any call.
pub const GUARD: &str = include_str!("ray_guard.py");
/// The guard's exit code: the head's GCS port was another's.
pub const PORT_TAKEN: i32 = 97;
/// The variable naming the file the guard makes once the head's GCS is
/// found the step's own.
pub const CHECKED_VAR: &str = "TFC_RAY_GCS_CHECKED";
/// The variable listing the descriptors of the held GCS port (ray_ports).
pub const HOLD_VAR: &str = "TFC_RAY_GCS_HOLD";

/// The guard's file: in the step's private directory (mode 0700, its name
/// unknown to other users), removed with it before a new start.
pub fn checked_file(temp: &str) -> String {
    format!("{}/gcs-checked", private_dir(temp))
}

/// `ray start` in a process group of its own, with VLLM_HOST_IP (vLLM's
/// address of the node) for the workers Ray starts from it. Ray looks for the
/// head's node in the GCS 20 times, 2 s apart, unless told otherwise: it is
/// told to look as long as tf-cluster waits for the head (a user's own
/// RAY_NUM_REDIS_GET_RETRIES is kept).
pub fn ray_start(
    python: &str,
    ip: IpAddr,
    flags: &[String],
    temp: &str,
    held: Vec<(OwnedFd, u8)>,
) -> Result<Child, String> {
    const RETRIES: &str = "RAY_NUM_REDIS_GET_RETRIES";
    let retries = std::env::var(RETRIES).unwrap_or((START_TIMEOUT.as_secs() / 2).to_string());
    // Ray's banner to stderr: the task's stdout is the driver's.
    let stderr = std::io::stderr()
        .as_fd()
        .try_clone_to_owned()
        .map_err(|e| e.to_string())?;
    // A file of an earlier start would let the driver's wait go on unchecked.
    let _ = std::fs::remove_file(checked_file(temp));
    let fds: Vec<i32> = held.iter().map(|(fd, _)| fd.as_raw_fd()).collect();
    let listed: Vec<String> = held
        .iter()
        .map(|(fd, family)| format!("{}:{family}", fd.as_raw_fd()))
        .collect();
    let mut cmd = Command::new(python);
    // The held sockets go to the guard, which closes the IPv4 one just
    // before Ray starts its GCS (which listens on IPv4's every address) and
    // keeps the IPv6 one; this process's copies close once it is spawned.
    unsafe {
        cmd.pre_exec(move || {
            for &fd in &fds {
                if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let child = cmd
        .stdout(Stdio::from(stderr))
        .env(HOLD_VAR, listed.join(","))
        .args(["-c", GUARD, "start"])
        .args(flags)
        .arg(format!("--node-ip-address={ip}"))
        .arg("--disable-usage-stats")
        .arg("--block")
        .env("VLLM_HOST_IP", ip.to_string())
        .env(CHECKED_VAR, checked_file(temp))
        .env("RAY_USAGE_STATS_ENABLED", "0")
        .env(RETRIES, retries)
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot run ray start with {python}: {e}"));
    drop(held);
    child
}

/// The user's processes whose command line names the step's temp directory
/// (every Ray process of the step: raylet, GCS, agents, workers).
pub fn step_processes(temp: &str) -> Vec<i32> {
    let me = std::process::id() as i32;
    let uid = unsafe { libc::getuid() };
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != me)
        .filter(|pid| {
            let p = format!("/proc/{pid}");
            std::fs::metadata(&p).is_ok_and(|m| m.uid() == uid)
                && std::fs::read(format!("{p}/cmdline")).is_ok_and(|c| {
                    c.windows(temp.len() + 1).any(|w| {
                        &w[..temp.len()] == temp.as_bytes() && matches!(w[temp.len()], b'/' | 0)
                    })
                })
        })
        .collect()
}

/// Stops this step's Ray: SIGTERM to `ray start`'s group and to every
/// process naming the step's temp directory, SIGKILL to what is left after
/// a few seconds; then removes the temp directory.
pub fn stop(ray: &mut Child, temp: &str) {
    let group = ray.id() as i32;
    let signal_all = |sig| {
        unsafe { libc::kill(-group, sig) };
        for pid in step_processes(temp) {
            unsafe { libc::kill(pid, sig) };
        }
    };
    signal_all(libc::SIGTERM);
    let end = Instant::now() + Duration::from_secs(5);
    loop {
        let _ = ray.try_wait();
        let group_left = unsafe { libc::kill(-group, 0) } == 0;
        if (!group_left && step_processes(temp).is_empty()) || Instant::now() > end {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    signal_all(libc::SIGKILL);
    let _ = ray.wait();
    remove_private(temp);
}

pub fn which(name: &str) -> Option<String> {
    std::env::var("PATH").ok()?.split(':').find_map(|dir| {
        let p = format!("{dir}/{name}");
        Path::new(&p).is_file().then_some(p)
    })
}
