//! The testbed's life and its lock: where its run dir and the plugin's
//! builds are, bringing it up in the configuration a test asks for, and the
//! shared or exclusive access every test holds while it runs steps.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

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
pub fn run_dir() -> PathBuf {
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
    ensure_up_as(
        Config {
            topology,
            gres,
            stepmgr: false,
        },
        lock,
    )
}

/// What the testbed is brought up with: docker/testbed.sh's TFC_TOPOLOGY,
/// TFC_GRES and TFC_STEPMGR.
struct Config<'a> {
    topology: Option<&'a str>,
    gres: Option<&'a str>,
    stepmgr: bool,
}

fn ensure_up_as<G>(config: Config, lock: impl Fn() -> G) -> G {
    let Config {
        topology,
        gres,
        stepmgr,
    } = config;
    let wanted = format!(
        "topology={} gres={}{}",
        topology.unwrap_or(""),
        gres.unwrap_or(""),
        if stepmgr { " stepmgr" } else { "" }
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
        match stepmgr {
            true => cmd.env("TFC_STEPMGR", "1"),
            false => cmd.env_remove("TFC_STEPMGR"),
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

/// [`testbed`] with the job step manager (docker/testbed.sh TFC_STEPMGR=1:
/// `SlurmctldParameters=enable_stepmgr`, `PrologFlags=Contain`), which
/// `srun --async` needs.
pub fn testbed_with_stepmgr() -> Held {
    ensure_up_as(
        Config {
            topology: None,
            gres: None,
            stepmgr: true,
        },
        read_plugstack,
    )
}

/// [`testbed`] under the network topology `tree` with the gres.conf variant
/// `vendors`: one configuration for the tests of both (one binary,
/// tests/testbed_topology_tree/), so the testbed comes up once for both (each
/// start recreates every container). The topology's tests ask for no GPU, and
/// the vendors' (gpu_vendors.rs) run each step on one named node, which no
/// topology reorders.
pub fn testbed_with_tree_and_vendors() -> Held {
    ensure_up(Some("tree"), Some("vendors"), read_plugstack)
}

/// Exclusive access, for tests that swap plugstack.conf. The default is back
/// in place when the guard drops.
pub struct Exclusive(#[allow(dead_code)] Held);

pub fn exclusive() -> Exclusive {
    ensure_up(None, None, || Exclusive(hold(true)))
}

/// [`exclusive`] on the testbed with the job step manager
/// ([`testbed_with_stepmgr`]).
pub fn exclusive_with_stepmgr() -> Exclusive {
    let config = Config {
        topology: None,
        gres: None,
        stepmgr: true,
    };
    ensure_up_as(config, || Exclusive(hold(true)))
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

/// The testbed's prefix (docker/testbed.sh's TFC_PREFIX).
pub fn prefix() -> String {
    std::env::var("TFC_PREFIX").unwrap_or_else(|_| "tfc".into())
}

/// The fast network's subnet, as Docker gave it.
pub fn fast_subnet() -> String {
    let out = Command::new("docker")
        .args([
            "network",
            "inspect",
            "-f",
            "{{(index .IPAM.Config 0).Subnet}}",
        ])
        .arg(format!("{}-ib", prefix()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}
