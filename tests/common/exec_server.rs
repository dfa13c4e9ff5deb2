//! The tests' commands in the testbed's containers through one long-lived
//! `docker exec -i` per container and user (exec_server.py inside): the
//! tests run thousands of commands, polls among them, and a `docker exec`
//! each cost the host's dockerd, containerd and runc far more CPU than the
//! command (docs/testing.md). Many commands run at once on one connection,
//! each answered by its id. A connection that ends (its container removed,
//! the testbed restarted in another configuration) is started again for the
//! next command; a command in flight then fails as its `docker exec` would
//! have (status 125).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ChildStdin, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

const SERVER: &str = include_str!("exec_server.py");

type Pending = Arc<Mutex<HashMap<u64, Sender<Output>>>>;

struct Conn {
    child: Child,
    stdin: ChildStdin,
    pending: Pending,
    ended: Arc<AtomicBool>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The connections of this test process, by container.
fn conns() -> &'static Mutex<HashMap<String, Conn>> {
    static CONNS: OnceLock<Mutex<HashMap<String, Conn>>> = OnceLock::new();
    CONNS.get_or_init(|| Mutex::new(HashMap::new()))
}

/// `cmd` in `container`, as alice (in /home/alice, her USER, LOGNAME and
/// HOME) or as root; None where no server could be started (the caller
/// runs its own `docker exec`).
pub fn run(container: &str, alice: bool, cmd: &[&str]) -> Option<Output> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let id = NEXT.fetch_add(1, Ordering::SeqCst);
    let mut request = serde_json::json!({ "id": id, "argv": cmd });
    if alice {
        request["user"] = "alice".into();
    }
    let (tx, rx) = channel();
    {
        let mut all = conns().lock().unwrap_or_else(PoisonError::into_inner);
        let key = container.to_string();
        if all
            .get(&key)
            .is_some_and(|c| c.ended.load(Ordering::SeqCst))
        {
            all.remove(&key);
        }
        if !all.contains_key(&key) {
            all.insert(key.clone(), start(container)?);
        }
        let conn = all.get_mut(&key).unwrap();
        {
            // Under the lock the reader takes to fail the pending ones at
            // its end: registered before that end, or not at all.
            let mut pending = conn.pending.lock().unwrap_or_else(PoisonError::into_inner);
            if conn.ended.load(Ordering::SeqCst) {
                drop(pending);
                all.remove(&key);
                return None;
            }
            pending.insert(id, tx);
        }
        let sent = writeln!(conn.stdin, "{request}").and_then(|()| conn.stdin.flush());
        if sent.is_err() {
            all.remove(&key);
            return None;
        }
    }
    Some(rx.recv().unwrap_or_else(|_| Output {
        status: ExitStatus::from_raw(125 << 8),
        stdout: Vec::new(),
        stderr: format!("exec server in {container}: the connection ended\n").into_bytes(),
    }))
}

/// The server in `container` (as root: it runs alice's commands as her),
/// and the thread that hands its answers out.
fn start(container: &str) -> Option<Conn> {
    let mut child = Command::new("docker")
        .args([
            "exec", "-i", "-w", "/", container, "python3", "-u", "-c", SERVER,
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let stdin = child.stdin.take()?;
    let stdout = child.stdout.take()?;
    let pending: Pending = Arc::default();
    let ended = Arc::new(AtomicBool::new(false));
    let (answers, gone) = (Arc::clone(&pending), Arc::clone(&ended));
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let Ok(answer) = serde_json::from_str::<serde_json::Value>(&line) else {
                continue;
            };
            let Some(id) = answer["id"].as_u64() else {
                continue;
            };
            let output = Output {
                status: ExitStatus::from_raw(answer["status"].as_i64().unwrap_or(125 << 8) as i32),
                stdout: unhex(answer["out"].as_str().unwrap_or_default()),
                stderr: unhex(answer["err"].as_str().unwrap_or_default()),
            };
            let waiter = answers
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&id);
            if let Some(waiter) = waiter {
                let _ = waiter.send(output);
            }
        }
        gone.store(true, Ordering::SeqCst);
        // The waiters still pending get the connection's end.
        answers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    });
    Some(Conn {
        child,
        stdin,
        pending,
        ended,
    })
}

fn unhex(text: &str) -> Vec<u8> {
    text.as_bytes()
        .chunks(2)
        .filter_map(|pair| u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok())
        .collect()
}
