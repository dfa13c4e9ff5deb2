//! The node side of `tf-cluster hang`: run as the job's user in one
//! overlap step, one task per node, it finds the step's ranks among the
//! user's own processes (/proc/PID/environ), samples each one's CPU time
//! over a window, reads its wait channel and syscall, and its Python stack
//! with py-spy where installed. One JSON line per rank, bounded in time.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The prefix of the probe's lines, so that nothing else srun prints is
/// taken for one.
pub const LINE: &str = "TFC_HANG ";

/// The longest a py-spy dump of one process may take.
const PY_SPY_TIME: Duration = Duration::from_secs(8);

/// One process of the step, as /proc shows it.
struct Proc {
    pid: u32,
    ppid: u32,
    rank: u64,
    comm: String,
    gpus: String,
}

/// The node's report: one line per rank of `job`.`step` found here.
pub fn probe(job: u32, step: u32, window: Duration) -> String {
    let node = hostname();
    let procs = step_procs(job, step);
    let chosen = chosen_by_rank(&procs);
    let before: Vec<Option<u64>> = chosen.iter().map(|p| cpu_ticks(p.pid)).collect();
    let started = Instant::now();
    std::thread::sleep(window);
    let spent = started.elapsed().as_secs_f64();
    let py_spy = which("py-spy");
    let mut out = String::new();
    for (p, t0) in chosen.iter().zip(before) {
        let cpu = match (t0, cpu_ticks(p.pid)) {
            (Some(a), Some(b)) => json!((b.saturating_sub(a)) as f64 / ticks_per_sec() / spent),
            _ => Value::Null,
        };
        let stack = match &py_spy {
            Some(bin) => py_spy_dump(bin, p.pid),
            None => Err(format!("py-spy is not installed on {node}")),
        };
        let line = json!({
            "rank": p.rank, "node": node, "pid": p.pid, "comm": p.comm,
            "gpus": p.gpus, "state": state(p.pid), "cpu": cpu,
            "wchan": read_trim(&format!("/proc/{}/wchan", p.pid)),
            "syscall": syscall(p.pid),
            "stack": stack.as_ref().ok(), "stack_note": stack.as_ref().err(),
            "procs": procs.iter().filter(|q| q.rank == p.rank).count(),
        });
        out.push_str(&format!("{LINE}{line}\n"));
    }
    if chosen.is_empty() {
        out.push_str(&format!(
            "{LINE}{}\n",
            json!({ "node": node, "none": true })
        ));
    }
    out
}

/// The user's own processes whose environment says they belong to the
/// step (their Slurm task's SLURM_JOB_ID, SLURM_STEP_ID, SLURM_PROCID,
/// which slurmstepd sets and the tool only reads, as the same user).
fn step_procs(job: u32, step: u32) -> Vec<Proc> {
    let uid = unsafe { libc::getuid() };
    let me = std::process::id();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut procs = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me || !owned_by(&entry.path(), uid) {
            continue;
        }
        let Ok(raw) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        let env = environ(&raw);
        let is_step = env.get("SLURM_JOB_ID").map(String::as_str) == Some(&job.to_string())
            && env.get("SLURM_STEP_ID").map(String::as_str) == Some(&step.to_string());
        let Some(rank) = env.get("SLURM_PROCID").and_then(|r| r.parse().ok()) else {
            continue;
        };
        if !is_step {
            continue;
        }
        let Some((comm, ppid)) = stat_fields(pid).map(|f| (f.comm, f.ppid)) else {
            continue;
        };
        let gpus = env.get("CUDA_VISIBLE_DEVICES").cloned().unwrap_or_default();
        procs.push(Proc {
            pid,
            ppid,
            rank,
            comm,
            gpus,
        });
    }
    procs.sort_by_key(|p| (p.rank, p.pid));
    procs
}

/// The process that stands for each rank: its topmost Python process (the
/// trainer, not its data loader's workers, which are its children), else
/// the task's deepest process (`sh -c` → the command it runs).
fn chosen_by_rank(procs: &[Proc]) -> Vec<&Proc> {
    let mut by_rank: BTreeMap<u64, Vec<&Proc>> = BTreeMap::new();
    procs
        .iter()
        .for_each(|p| by_rank.entry(p.rank).or_default().push(p));
    let mut chosen = Vec::new();
    for group in by_rank.values() {
        let depth = |p: &Proc| {
            let mut d = 0;
            let mut at = p.ppid;
            while let Some(parent) = group.iter().find(|q| q.pid == at) {
                d += 1;
                at = parent.ppid;
            }
            d
        };
        let python = group
            .iter()
            .filter(|p| p.comm.starts_with("python"))
            .min_by_key(|p| depth(p));
        let pick = python.or_else(|| group.iter().max_by_key(|p| depth(p)));
        chosen.extend(pick.copied());
    }
    chosen
}

fn owned_by(path: &Path, uid: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).is_ok_and(|m| m.uid() == uid)
}

fn environ(raw: &[u8]) -> BTreeMap<String, String> {
    raw.split(|b| *b == 0)
        .filter_map(|kv| {
            let kv = String::from_utf8_lossy(kv);
            let (k, v) = kv.split_once('=')?;
            Some((k.to_string(), v.to_string()))
        })
        .collect()
}

/// The fields of /proc/PID/stat the probe uses.
struct Stat {
    comm: String,
    state: String,
    ppid: u32,
    ticks: u64,
}

fn stat_fields(pid: u32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // comm is in parentheses and may hold spaces or ')': split at the last.
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text[open + 1..close].to_string();
    let rest: Vec<&str> = text[close + 1..].split_whitespace().collect();
    // rest[0] is field 3 (state); utime and stime are fields 14 and 15.
    let num = |i: usize| rest.get(i).and_then(|s| s.parse::<u64>().ok());
    Some(Stat {
        comm,
        state: rest.first()?.to_string(),
        ppid: num(1)? as u32,
        ticks: num(11)? + num(12)?,
    })
}

fn cpu_ticks(pid: u32) -> Option<u64> {
    stat_fields(pid).map(|s| s.ticks)
}

fn state(pid: u32) -> Option<String> {
    stat_fields(pid).map(|s| s.state)
}

fn ticks_per_sec() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

fn read_trim(path: &str) -> Option<String> {
    let s = std::fs::read_to_string(path).ok()?;
    let s = s.trim();
    (!s.is_empty() && s != "0").then(|| s.to_string())
}

/// The syscall the main thread is in, by name where the probe knows it
/// (x86-64 numbers), "running" when in none.
fn syscall(pid: u32) -> Option<String> {
    let text = read_trim(&format!("/proc/{pid}/syscall"))?;
    let first = text.split_whitespace().next()?;
    let name = match first.parse::<i64>().ok()? {
        0 => "read",
        1 => "write",
        7 => "poll",
        23 => "select",
        35 => "nanosleep",
        45 => "recvfrom",
        47 => "recvmsg",
        61 => "wait4",
        202 => "futex",
        230 => "clock_nanosleep",
        232 => "epoll_wait",
        270 => "pselect6",
        271 => "ppoll",
        281 => "epoll_pwait",
        n if n < 0 => return Some("running".into()),
        _ => return Some(format!("syscall {first}")),
    };
    Some(name.into())
}

fn which(name: &str) -> Option<String> {
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .map(|d| format!("{d}/{name}"))
        .find(|p| Path::new(p).is_file())
}

/// `py-spy dump --pid PID`, within PY_SPY_TIME: its text, or one line why not.
fn py_spy_dump(bin: &str, pid: u32) -> Result<String, String> {
    let mut child = Command::new(bin)
        .args(["dump", "--pid", &pid.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("py-spy: {e}"))?;
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if started.elapsed() < PY_SPY_TIME => {
                std::thread::sleep(Duration::from_millis(50))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("py-spy took over {}s", PY_SPY_TIME.as_secs()));
            }
        }
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("py-spy: {e}"))?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let first = err
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("failed");
    Err(format!("py-spy: {}", first.trim()))
}

fn hostname() -> String {
    std::env::var("SLURMD_NODENAME")
        .ok()
        .or_else(|| read_trim("/proc/sys/kernel/hostname"))
        .unwrap_or_else(|| "?".into())
}
