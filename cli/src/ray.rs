//! `tf-cluster ray [RAY_START_ARGS…] -- CMD…`: run by every task of a
//! `--ray-cluster` step (one per node). On rank 0's node it starts Ray's head
//! and runs CMD as the driver; elsewhere it starts a worker node that ends
//! when the head ends. Every `ray start` flag comes from the variables the
//! plugin set (ports, temp directory, this node's address); the step ends
//! with CMD's exit code. It stops only the Ray processes this step started
//! (its own process group, and any process of the user naming the step's
//! temp directory), never a node-wide `ray stop`, and removes the step's
//! private directory (slurmstepd removes it too, when the step ends however
//! it ends). Ray runs with the step's token (RAY_AUTH_MODE, RAY_AUTH_TOKEN
//! from the plugin): a Ray older than 2.54 is refused. On the head, the GCS
//! port is held from the start (ray_ports) and `ray start` runs through a
//! guard (ray_guard.py) that lets nothing call the port, whose first call
//! carries the token, before the step's own GCS is the one listening there.

use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

use tf_cluster_core::frameworks::ray::{
    ARGS_VAR, AUTH_MODE_VAR, HEAD_ARGS_VAR, NODE_VAR, TEMP_VAR, TOKEN_VAR,
};

use crate::ray_node::{
    PORT_TAKEN, START_TIMEOUT, check_version, checked_file, make_temp, ray_python, ray_start,
    remove_private, stop,
};
use crate::ray_ports;

/// A signal that asked this task to end (SIGTERM, SIGINT), 0 if none.
static SIGNALLED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    SIGNALLED.store(sig, Ordering::SeqCst);
}

/// What the plugin gave this task.
struct Given {
    address: String,
    args: Vec<String>,
    head_args: Option<Vec<String>>,
    node: String,
    temp: String,
}

fn var(name: &str) -> Result<String, String> {
    std::env::var(name).map_err(|_| {
        format!("{name} is not set: run tf-cluster ray in a step started with srun --ray-cluster")
    })
}

fn given() -> Result<Given, String> {
    let words = |s: String| s.split_whitespace().map(String::from).collect();
    // The plugin's token, on every node alike: never a cluster without one.
    if var(AUTH_MODE_VAR)? != "token" || var(TOKEN_VAR)?.is_empty() {
        return Err(format!(
            "{AUTH_MODE_VAR} is not token or {TOKEN_VAR} is empty: run tf-cluster ray in a step started with srun --ray-cluster"
        ));
    }
    Ok(Given {
        address: var("RAY_ADDRESS")?,
        args: words(var(ARGS_VAR)?),
        head_args: std::env::var(HEAD_ARGS_VAR).ok().map(words),
        node: var(NODE_VAR)?,
        temp: var(TEMP_VAR)?,
    })
}

/// `name`'s address (an IPv4 one first, as Ray's own default is), resolved
/// here in the task: Ray's `--node-ip-address` and vLLM's VLLM_HOST_IP take
/// an address, not a name.
fn resolve(name: &str) -> Result<IpAddr, String> {
    let addrs: Vec<SocketAddr> = (name, 0)
        .to_socket_addrs()
        .map_err(|e| format!("{NODE_VAR}={name} does not resolve: {e}"))?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .map(|a| a.ip())
        .ok_or_else(|| format!("{NODE_VAR}={name} has no address"))
}

fn head_addr(address: &str) -> Result<SocketAddr, String> {
    address
        .to_socket_addrs()
        .map_err(|e| format!("RAY_ADDRESS={address}: {e}"))?
        .next()
        .ok_or_else(|| format!("RAY_ADDRESS={address} has no address"))
}

fn reachable(addr: &SocketAddr) -> bool {
    TcpStream::connect_timeout(addr, Duration::from_secs(2)).is_ok()
}

/// Waits until the guard found the head's GCS the step's own (its file
/// `checked`, in the step's private directory, which no other user can
/// make) and `addr` accepts connections, while `ray` runs. Nothing of
/// tf-cluster's calls the GCS before: a port that merely answers may be
/// another user's.
fn wait_for(addr: &SocketAddr, checked: &Path, ray: &mut Child) -> Result<(), Ended> {
    let end = Instant::now() + START_TIMEOUT;
    while !(checked.exists() && reachable(addr)) {
        if let Some(status) = ray.try_wait().map_err(|e| e.to_string())? {
            return Err(Ended::Start(status));
        }
        if Instant::now() > end || SIGNALLED.load(Ordering::SeqCst) != 0 {
            return Err(format!("the Ray head at {addr} did not come up").into());
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    Ok(())
}

fn show(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit code {c}"),
        (_, Some(s)) => format!("signal {s}"),
        _ => "ended".into(),
    }
}

/// Waits until the step's Ray nodes (one per node of the step) are alive,
/// with the Python that runs `ray` (its script's `#!` line): one driver
/// connection, on the head only.
fn wait_for_nodes(nodes: u32, ray: &mut Child) -> Result<(), Ended> {
    let python = ray_python()?;
    let python = python.as_str();
    // ray.init gives up while the head's raylet is still registering (a
    // loaded node): it tries again until the deadline.
    let code = "import sys, time, ray
n, end = int(sys.argv[1]), time.time() + float(sys.argv[2])
while True:
    try:
        ray.init(log_to_driver=False, logging_level='error')
        break
    except ConnectionError:
        ray.shutdown()
        if time.time() > end:
            raise
        time.sleep(2)
while sum(1 for x in ray.nodes() if x['Alive']) < n:
    if time.time() > end:
        sys.exit('tf-cluster: not every node of the step joined the Ray cluster')
    time.sleep(0.5)
";
    let mut waiter = Command::new(python)
        .args([
            "-c",
            code,
            &nodes.to_string(),
            &START_TIMEOUT.as_secs().to_string(),
        ])
        .spawn()
        .map_err(|e| format!("{python}: {e}"))?;
    // The head's own `ray start` may end meanwhile (its raylet missed
    // Ray's registration limit): then the wait is over too.
    let status = loop {
        if let Some(status) = waiter.try_wait().map_err(|e| e.to_string())? {
            break status;
        }
        if let Some(status) = ray.try_wait().map_err(|e| e.to_string())? {
            let _ = waiter.kill();
            let _ = waiter.wait();
            return Err(Ended::Start(status));
        }
        if SIGNALLED.load(Ordering::SeqCst) != 0 {
            let _ = waiter.kill();
            let _ = waiter.wait();
            return Err("signalled while waiting for the step's Ray nodes"
                .to_string()
                .into());
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "waiting for the step's {nodes} Ray nodes failed ({})",
            show(status)
        )
        .into())
    }
}

/// `ray start` flags of the head alone, which a worker node's refuses.
const HEAD_ONLY: [&str; 2] = ["--include-dashboard", "--dashboard-host"];

/// The user's `ray start` flags for this node: the head's own left out on
/// a worker node (`--include-dashboard=false` or `--include-dashboard false`).
fn for_node(extra: &[String], head: bool) -> Vec<String> {
    let mut out = Vec::new();
    let mut skip_value = false;
    for arg in extra {
        if std::mem::take(&mut skip_value) {
            continue;
        }
        let name = arg.split('=').next().unwrap_or(arg);
        if !head && HEAD_ONLY.contains(&name) {
            skip_value = !arg.contains('=');
            continue;
        }
        out.push(arg.clone());
    }
    out
}

/// Runs the verb; the exit code of the task.
pub fn main(extra: &[String], cmd: &[String]) -> u8 {
    match run(extra, cmd) {
        Ok(code) => code,
        Err(e) => {
            // Empty when Ray's guard already said why.
            if !e.is_empty() {
                eprintln!("tf-cluster ray: {e}");
            }
            1
        }
    }
}

/// `ray start`'s first flags: the head's, or, on a worker node once the
/// head's GCS port answers (ray start gives up early), its address.
fn node_flags(g: &Given, head: &SocketAddr) -> Result<Vec<String>, String> {
    if let Some(head_args) = &g.head_args {
        return Ok([vec!["--head".to_string()], head_args.clone()].concat());
    }
    let end = Instant::now() + START_TIMEOUT;
    while !reachable(head) {
        if Instant::now() > end || SIGNALLED.load(Ordering::SeqCst) != 0 {
            remove_private(&g.temp);
            return Err(format!("the Ray head at {} did not come up", g.address));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    Ok(vec![format!("--address={}", g.address)])
}

fn run(extra: &[String], cmd: &[String]) -> Result<u8, String> {
    let g = given()?;
    if g.head_args.is_some() && cmd.is_empty() {
        return Err("no command: tf-cluster ray [RAY_START_ARGS…] -- CMD…".into());
    }
    let ip = resolve(&g.node)?;
    let head = head_addr(&g.address)?;
    // The head's GCS port held first: from here no one else listens there.
    let hold = || match g.head_args {
        Some(_) => ray_ports::hold(head.port()),
        None => Ok(Vec::new()),
    };
    let mut held = hold()?;
    let python = ray_python()?;
    check_version(&python)?;
    unsafe {
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
    }
    make_temp(&g.temp)?;
    let mut flags = node_flags(&g, &head)?;
    flags.extend(g.args.iter().cloned());
    flags.extend(for_node(extra, g.head_args.is_some()));
    let mut attempt = 1;
    loop {
        let mut ray = ray_start(&python, ip, &flags, &g.temp, std::mem::take(&mut held))?;
        let result = if g.head_args.is_some() {
            drive(&mut ray, &head, &checked_file(&g.temp), cmd)
        } else {
            follow(&mut ray, &head)
        };
        stop(&mut ray, &g.temp);
        // A node's `ray start` that ended before the step's Ray was up (on
        // the head, before the driver started; elsewhere, while the head
        // answers) is started again, up to START_ATTEMPTS times: Ray gives a
        // raylet 30 s to register, fixed, which a loaded node can miss.
        match result {
            // The guard said why in one line: never again with this token.
            Err(Ended::Start(status)) if status.code() == Some(PORT_TAKEN) => {
                return Err(String::new());
            }
            Err(Ended::Start(status))
                if attempt < START_ATTEMPTS && SIGNALLED.load(Ordering::SeqCst) == 0 =>
            {
                eprintln!(
                    "tf-cluster ray: this node's Ray ended ({}) before the step's Ray was up: \
                     starting it again",
                    show(status)
                );
                attempt += 1;
                make_temp(&g.temp)?;
                held = hold()?;
            }
            Err(Ended::Start(status)) => {
                return Err(format!(
                    "this node's Ray ended ({}) before the step's Ray was up, {attempt} times",
                    show(status)
                ));
            }
            Err(Ended::Error(e)) => return Err(e),
            Ok(code) => return Ok(code),
        }
    }
}

/// How many times a node's `ray start` is started before the step fails.
const START_ATTEMPTS: u32 = 3;

/// Why a node's part of the step ended without an exit code of its own.
enum Ended {
    /// This node's `ray start` ended before the step's Ray was up: on the
    /// head before the driver started, elsewhere while the head answers.
    Start(ExitStatus),
    Error(String),
}

impl From<String> for Ended {
    fn from(e: String) -> Self {
        Ended::Error(e)
    }
}

/// The head: once the step's nodes joined, CMD as the driver; its exit code.
fn drive(ray: &mut Child, head: &SocketAddr, checked: &str, cmd: &[String]) -> Result<u8, Ended> {
    wait_for(head, Path::new(checked), ray)?;
    let nodes = std::env::var("SLURM_STEP_NUM_NODES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    wait_for_nodes(nodes, ray)?;
    let mut driver = Command::new(&cmd[0])
        .args(&cmd[1..])
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", cmd[0]))?;
    loop {
        if let Some(status) = driver.try_wait().map_err(|e| e.to_string())? {
            return Ok(match (status.code(), status.signal()) {
                (Some(c), _) => c as u8,
                (_, Some(s)) => 128 + s as u8,
                _ => 1,
            });
        }
        let sig = SIGNALLED.load(Ordering::SeqCst);
        if sig != 0 {
            unsafe { libc::kill(driver.id() as i32, sig) };
            let _ = driver.wait();
            return Ok(128 + sig as u8);
        }
        if let Some(status) = ray.try_wait().map_err(|e| e.to_string())? {
            unsafe { libc::kill(driver.id() as i32, libc::SIGTERM) };
            let _ = driver.wait();
            return Err(format!("the Ray head ended ({}) before the driver", show(status)).into());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A worker node: runs until the head's GCS stops answering (the driver
/// ended and the head with it): exit 0; or until its own Ray ends.
fn follow(ray: &mut Child, head: &SocketAddr) -> Result<u8, Ended> {
    let mut misses = 0;
    loop {
        if SIGNALLED.load(Ordering::SeqCst) != 0 {
            return Ok(0);
        }
        if let Some(status) = ray.try_wait().map_err(|e| e.to_string())? {
            if !reachable(head) {
                return Ok(0);
            }
            return Err(Ended::Start(status));
        }
        misses = if reachable(head) { 0 } else { misses + 1 };
        if misses >= 2 {
            return Ok(0);
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

#[cfg(test)]
mod tests {
    use super::for_node;

    #[test]
    fn head_only_flags_stay_on_the_head() {
        let args: Vec<String> = [
            "--num-cpus=1",
            "--include-dashboard",
            "false",
            "--dashboard-host=0.0.0.0",
            "--num-gpus=0",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(for_node(&args, true), args);
        assert_eq!(for_node(&args, false), ["--num-cpus=1", "--num-gpus=0"]);
    }
}
