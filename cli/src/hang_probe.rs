//! The node side of `tf-cluster hang`: run as the job's user in one
//! overlap step, one task per node, it finds the step's ranks among the
//! user's own processes (/proc/PID/environ), samples each one's CPU time
//! over a window, reads its wait channel and syscall, and its Python stack
//! with py-spy where installed, and asks PyTorch's flight recorder for a
//! dump where its trigger pipe exists (a step with a record gives every
//! rank one, tf_cluster_core::record::DEBUG_DEFAULTS). One JSON line per
//! rank, bounded in time.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tf_cluster_core::record;

/// The prefix of the probe's lines, so that nothing else srun prints is
/// taken for one.
pub const LINE: &str = "TFC_HANG ";

/// The longest a py-spy dump of one process may take.
const PY_SPY_TIME: Duration = Duration::from_secs(8);

/// The longest the probe waits past the window for the flight recorder's
/// dumps it asked for (torch's watchdog reads the pipe about once a second).
const FR_WAIT: Duration = Duration::from_secs(10);

/// One process of the step, as /proc shows it.
struct Proc {
    pid: u32,
    ppid: u32,
    rank: u64,
    comm: String,
    gpus: String,
    /// The flight recorder's trigger pipe stem and dump prefix, as the
    /// process's environment says.
    fr_pipe: Option<String>,
    fr_dump: Option<String>,
}

/// The node's report: one line per rank of `job`.`step` found here.
pub fn probe(job: u32, step: u32, window: Duration) -> String {
    let node = hostname();
    let procs = step_procs(job, step);
    let chosen = chosen_by_rank(&procs);
    let before: Vec<Option<u64>> = chosen.iter().map(|p| cpu_ticks(p.pid)).collect();
    let started = Instant::now();
    let uid = unsafe { libc::getuid() };
    // The dumps are asked first: torch writes them during the window.
    let asked: Vec<Option<Triggered>> = chosen
        .iter()
        .map(|p| {
            let stems = rank_values(&procs, p.rank, |q| q.fr_pipe.as_deref());
            (!stems.is_empty()).then(|| trigger_all(&stems, uid))
        })
        .collect();
    std::thread::sleep(window);
    let spent = started.elapsed().as_secs_f64();
    let py_spy = which("py-spy");
    let fr: Vec<Value> = chosen
        .iter()
        .zip(&asked)
        .map(|(p, asked)| {
            let prefixes = rank_values(&procs, p.rank, |q| q.fr_dump.as_deref());
            flight_recorder(asked.as_ref(), &prefixes, uid)
        })
        .collect();
    let mut out = String::new();
    for ((p, t0), fr) in chosen.iter().zip(before).zip(fr) {
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
            "fr": fr,
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
        let fr_pipe = env.get(record::TORCH_FR_PIPE_VAR).cloned();
        let fr_dump = record::TORCH_FR_VARS
            .iter()
            .find_map(|name| env.get(*name).cloned());
        procs.push(Proc {
            pid,
            ppid,
            rank,
            comm,
            gpus,
            fr_pipe,
            fr_dump,
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
    let denied = err.contains("Permission denied") || err.contains("Operation not permitted");
    let why = match denied {
        true => ptrace_why(read_trim("/proc/sys/kernel/yama/ptrace_scope").as_deref()),
        false => String::new(),
    };
    Err(format!("py-spy: {}{why}", first.trim()))
}

/// Why the kernel refused py-spy the rank's memory, from Yama's
/// ptrace_scope (None: no Yama).
fn ptrace_why(scope: Option<&str>) -> String {
    match scope {
        Some(s) if s != "0" => format!(
            " (Yama's ptrace_scope is {s}: only a process's ancestors may read it; \
             an admin sets kernel.yama.ptrace_scope=0 or gives py-spy CAP_SYS_PTRACE)"
        ),
        _ => " (the kernel refused ptrace of the user's own process: a seccomp filter, \
               or the process is not dumpable)"
            .into(),
    }
}

fn hostname() -> String {
    std::env::var("SLURMD_NODENAME")
        .ok()
        .or_else(|| read_trim("/proc/sys/kernel/hostname"))
        .unwrap_or_else(|| "?".into())
}

/// The distinct non-empty values of one rank's processes (a torchrun task's
/// workers each hold their own copy).
fn rank_values<'a>(
    procs: &'a [Proc],
    rank: u64,
    value: impl Fn(&'a Proc) -> Option<&'a str>,
) -> Vec<&'a str> {
    let mut out: Vec<&str> = procs
        .iter()
        .filter(|q| q.rank == rank)
        .filter_map(value)
        .filter(|v| !v.is_empty())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// What writing to a rank's trigger pipes did.
#[derive(Debug, Default, PartialEq)]
struct Triggered {
    /// The pipes written to.
    pipes: Vec<String>,
    /// Why another was not (one line each).
    notes: Vec<String>,
    at: Option<std::time::SystemTime>,
}

fn trigger_all(stems: &[&str], uid: u32) -> Triggered {
    let mut all = Triggered {
        at: Some(std::time::SystemTime::now()),
        ..Triggered::default()
    };
    for stem in stems {
        let one = trigger(stem, uid);
        all.pipes.extend(one.pipes);
        all.notes.extend(one.notes);
    }
    all
}

/// The entries of `prefix`'s directory whose names start with its last
/// part and end with `suffix`, the user's own, not links, at most 64.
fn entries_of(
    prefix: &str,
    suffix: &str,
    uid: u32,
) -> Vec<(std::path::PathBuf, std::fs::Metadata)> {
    use std::os::unix::fs::MetadataExt;
    let path = Path::new(prefix);
    let (dir, start) = match (path.parent(), path.file_name()) {
        (Some(d), Some(f)) if !prefix.ends_with('/') => (d, f.to_string_lossy().into_owned()),
        _ => (path, String::new()),
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<_> = entries
        .flatten()
        .take(4096)
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with(&start) && name.ends_with(suffix)
        })
        .filter_map(|e| {
            let meta = std::fs::symlink_metadata(e.path()).ok()?;
            (meta.uid() == uid).then(|| (e.path(), meta))
        })
        .take(64)
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Asks for a dump on every trigger pipe of stem `stem`
/// (ProcessGroupNCCL's `<stem><global rank>.pipe`, a FIFO it reads without
/// blocking): one line written to each, never blocking (no reader: said).
fn trigger(stem: &str, uid: u32) -> Triggered {
    use std::io::Write;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let mut done = Triggered::default();
    for (path, meta) in entries_of(stem, ".pipe", uid) {
        if !meta.file_type().is_fifo() {
            continue;
        }
        let shown = record::printable(&path.to_string_lossy());
        let opened = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
            .open(&path);
        match opened.and_then(|mut f| f.write_all(b"dump\n")) {
            Ok(()) => done.pipes.push(shown),
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) => done.notes.push(format!(
                "{shown}: no process reads it (its process group is gone)"
            )),
            Err(e) => done.notes.push(format!("{shown}: {e}")),
        }
    }
    if done.pipes.is_empty() && done.notes.is_empty() {
        done.notes.push(format!(
            "no pipe {}<rank>.pipe: PyTorch makes it only for the NCCL backend (not gloo's) with a trace buffer above 0",
            record::printable(stem)
        ));
    }
    done
}

/// The flight recorder's part of a rank's line: the pipes written to, the
/// dump files found (waiting up to [`FR_WAIT`] for a new one where a pipe
/// was written to), and why not.
fn flight_recorder(asked: Option<&Triggered>, prefixes: &[&str], uid: u32) -> Value {
    let Some(asked) = asked else {
        return Value::Null;
    };
    let files = |newer: bool| -> Vec<String> {
        let mut found = Vec::new();
        for prefix in prefixes {
            for (path, meta) in entries_of(prefix, "", uid) {
                let fresh = match (meta.modified(), asked.at) {
                    (Ok(m), Some(at)) => m >= at,
                    _ => true,
                };
                if meta.is_file() && (!newer || fresh) {
                    found.push(record::printable(&path.to_string_lossy()));
                }
            }
        }
        found
    };
    if !asked.pipes.is_empty() {
        let until = Instant::now() + FR_WAIT;
        while files(true).len() < asked.pipes.len() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    json!({ "pipes": asked.pipes, "notes": asked.notes, "dumps": files(false) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("tfc-hang-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn mkfifo(path: &Path) {
        let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }

    /// A stand-in for ProcessGroupNCCL's watchdog: it opens the rank's pipe
    /// for reading without blocking, polls it, and on a line writes the
    /// dump at the prefix + rank. The probe writes to the pipe, then finds
    /// the dump; a pipe nobody reads is said, never waited on.
    #[test]
    fn a_refused_ptrace_says_why() {
        assert!(
            ptrace_why(Some("1"))
                .starts_with(" (Yama's ptrace_scope is 1: only a process's ancestors")
        );
        assert!(ptrace_why(Some("0")).contains("seccomp"));
        assert!(ptrace_why(None).contains("seccomp"));
    }

    #[test]
    fn the_flight_recorders_pipe_is_written_and_its_dump_listed() {
        use std::io::Read;
        use std::os::unix::fs::OpenOptionsExt;
        let dir = temp_dir("fr");
        let stem = format!("{}/rank3.torch-fr-pipe.", dir.display());
        let prefix = format!("{}/rank3.torch-fr.", dir.display());
        let pipe = dir.join("rank3.torch-fr-pipe.3.pipe");
        mkfifo(&pipe);
        // A FIFO of another stem, and a plain file with the pipe's name
        // pattern: neither is written to.
        mkfifo(&dir.join("rank4.torch-fr-pipe.4.pipe"));
        std::fs::write(dir.join("rank3.torch-fr-pipe.9.pipe"), "").unwrap();
        let mut reader = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&pipe)
            .unwrap();
        let dump = format!("{prefix}3");
        let standin = std::thread::spawn(move || {
            let mut buf = [0u8; 128];
            for _ in 0..100 {
                if let Ok(n) = reader.read(&mut buf) {
                    if n > 0 {
                        std::fs::write(&dump, "entries").unwrap();
                        return n;
                    }
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            0
        });
        let uid = unsafe { libc::getuid() };
        let asked = trigger_all(&[&stem], uid);
        assert_eq!(asked.pipes, [pipe.to_string_lossy()]);
        assert!(asked.notes.is_empty(), "{:?}", asked.notes);
        assert!(standin.join().unwrap() > 0, "the stand-in read nothing");
        let fr = flight_recorder(Some(&asked), &[&prefix], uid);
        assert_eq!(fr["dumps"], json!([format!("{prefix}3")]));
        // Nobody reads rank 4's pipe: said at once.
        let stem4 = format!("{}/rank4.torch-fr-pipe.", dir.display());
        let started = Instant::now();
        let none = trigger(&stem4, uid);
        assert!(started.elapsed() < Duration::from_secs(1));
        assert!(none.pipes.is_empty());
        assert!(
            none.notes[0].ends_with("no process reads it (its process group is gone)"),
            "{:?}",
            none.notes
        );
        // No pipe at all (gloo): one line why.
        let gloo = trigger(&format!("{}/rank7.torch-fr-pipe.", dir.display()), uid);
        assert!(
            gloo.notes[0].contains("only for the NCCL backend"),
            "{:?}",
            gloo.notes
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
