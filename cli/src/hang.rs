//! `tf-cluster hang JOB[.STEP]`: where every rank of a running step is,
//! read on its node through one `srun --overlap` step into the job, as the
//! job's own user, and a verdict that names the odd ranks first.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::hang_probe::LINE;
use crate::render::table;
use tf_cluster_core::record::printable;

/// The longest the overlap step may take beyond the sampling window: a
/// py-spy dump per rank and srun's own start.
const STEP_SLACK: Duration = Duration::from_secs(40);

/// The report of `wanted` (`JOB` or `JOB.STEP`), sampling CPU over `window`.
pub fn hang(wanted: &str, window: Duration) -> Result<String, String> {
    let (job, step) = parse_wanted(wanted)?;
    let owner = squeue_owner(job)?;
    check_owner(&owner, job)?;
    if owner.state != "RUNNING" {
        return Err(format!(
            "job {job} is not running ({}): nothing to look at; after the step, `tf-cluster postmortem {job}`",
            owner.state
        ));
    }
    let step = match step {
        Some(s) => s,
        None => latest_step(job)?,
    };
    let step_info = scontrol(&["show", "step", &format!("{job}.{step}")])?;
    let nodes = field(&step_info, "NodeList").ok_or(format!("step {job}.{step} is not running"))?;
    let tasks: u64 = field(&step_info, "Tasks")
        .and_then(|t| t.parse().ok())
        .unwrap_or(0);
    let lines = run_probe(job, step, &nodes, window)?;
    Ok(report(job, step, tasks, &lines))
}

fn parse_wanted(wanted: &str) -> Result<(u32, Option<u32>), String> {
    let bad = || format!("not JOB or JOB.STEP: {}", printable(wanted));
    let mut parts = wanted.split('.');
    let job = parts.next().and_then(|j| j.parse().ok()).ok_or_else(bad)?;
    let step = match parts.next() {
        None => None,
        Some(s) => Some(s.parse().map_err(|_| bad())?),
    };
    match parts.next() {
        None => Ok((job, step)),
        Some(_) => Err(bad()),
    }
}

/// `scontrol ARGS`, its output or its own error line.
fn scontrol(args: &[&str]) -> Result<String, String> {
    output_of("scontrol", args)
}

/// `PROGRAM ARGS`' output, or its own error line.
fn output_of(program: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{program}: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let first = err.lines().next().map(str::to_string);
        return Err(first.unwrap_or(format!("{program} failed")));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `KEY=value` of scontrol's output (value up to the next space).
fn field(info: &str, key: &str) -> Option<String> {
    info.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .map(str::to_string)
}

/// A job's owner and state as squeue prints them: its fields alone, so
/// no text of the user's (a job's name, its comment) comes before them.
#[derive(Debug, PartialEq)]
struct Owner {
    uid: u32,
    name: String,
    state: String,
}

/// `squeue -h -j JOB -o '%U %u %T'`: the job's uid, user name and state.
fn squeue_owner(job: u32) -> Result<Owner, String> {
    let text = output_of("squeue", &["-h", "-j", &job.to_string(), "-o", "%U %u %T"])?;
    parse_owner(&text, job)
}

/// squeue's lines for `job` (one per component of a heterogeneous job):
/// each exactly a uid, a name and a state, every uid the same.
fn parse_owner(text: &str, job: u32) -> Result<Owner, String> {
    let mut owner: Option<Owner> = None;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let one = match fields[..] {
            [uid, name, state] => uid.parse().ok().map(|uid| Owner {
                uid,
                name: name.to_string(),
                state: state.to_string(),
            }),
            _ => None,
        };
        let bad = || format!("squeue shows no owner for job {job}: {}", printable(line));
        let one = one.ok_or_else(bad)?;
        match &owner {
            Some(first) if first.uid != one.uid => return Err(bad()),
            Some(_) => {}
            None => owner = Some(one),
        }
    }
    owner.ok_or(format!(
        "job {job} is not running: nothing to look at; after the step, `tf-cluster postmortem {job}`"
    ))
}

/// Refuses another user's job before anything runs: the overlap step would
/// fail for it anyway, later and less clearly.
fn check_owner(owner: &Owner, job: u32) -> Result<(), String> {
    // SAFETY: getuid cannot fail.
    if owner.uid == unsafe { libc::getuid() } {
        return Ok(());
    }
    Err(format!(
        "job {job} is {}'s, not yours: only the job's user can look into its processes",
        owner.name
    ))
}

/// The job's latest running step of its own (not batch, extern or interactive).
fn latest_step(job: u32) -> Result<u32, String> {
    let out = Command::new("squeue")
        .args(["-h", "-s", "-j", &job.to_string(), "-o", "%i"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("squeue: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .filter_map(|l| l.trim().split_once('.')?.1.parse::<u32>().ok())
        .max()
        .ok_or(format!("job {job} runs no step: name one as JOB.STEP"))
}

/// One overlap step, one task per node of the step, each printing its
/// ranks' lines; srun is killed past the window and STEP_SLACK.
fn run_probe(job: u32, step: u32, nodes: &str, window: Duration) -> Result<Vec<Value>, String> {
    let exe = std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?;
    let count = hostnames(nodes).len().max(1).to_string();
    let secs = window.as_secs().max(1).to_string();
    let mut child = Command::new("srun")
        .args([
            "--overlap",
            &format!("--jobid={job}"),
            "-w",
            nodes,
            "-N",
            &count,
        ])
        .args([
            "-n",
            &count,
            "--ntasks-per-node=1",
            "--kill-on-bad-exit=0",
            "--tf-off",
        ])
        .args(["-J", "tf-cluster-hang", "-t", "2"])
        .arg(&exe)
        .args([
            "hang",
            "--probe",
            &format!("{job}.{step}"),
            "--window",
            &secs,
        ])
        .env_remove("SLURM_CPU_BIND")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("srun: {e}"))?;
    let limit = window + STEP_SLACK;
    let started = Instant::now();
    let reader = std::thread::spawn({
        let mut stdout = child.stdout.take().expect("piped");
        move || {
            let mut s = String::new();
            let _ = std::io::Read::read_to_string(&mut stdout, &mut s);
            s
        }
    });
    while child.try_wait().map_err(|e| e.to_string())?.is_none() {
        if started.elapsed() > limit {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.wait();
    let text = reader.join().unwrap_or_default();
    let lines: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l.strip_prefix(LINE)?).ok())
        .collect();
    if lines.is_empty() {
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut err);
        }
        return Err(format!(
            "the overlap step into job {job} gave nothing: {}",
            err.trim()
        ));
    }
    Ok(lines)
}

fn hostnames(list: &str) -> Vec<String> {
    scontrol(&["show", "hostnames", list])
        .map(|t| t.lines().map(str::to_string).collect())
        .unwrap_or_default()
}

/// Where a rank is, for grouping: its stack's line in the user's code
/// where py-spy read one, else what its process does.
fn place(r: &Value) -> String {
    if let Some(stack) = r["stack"].as_str() {
        if let Some(frame) = user_frame(stack) {
            return format!("in {frame}");
        }
    }
    let state = r["state"].as_str().unwrap_or("?");
    // Running, or a fifth of a core in the window: on a busy node a
    // spinning rank gets less than a core, a waiting one none.
    if state == "R" || r["cpu"].as_f64().unwrap_or(0.0) >= 0.2 {
        return "on CPU, in no wait (its own loop)".into();
    }
    let wchan = r["wchan"].as_str();
    let syscall = r["syscall"].as_str();
    match (wchan, syscall) {
        (Some(w), Some(s)) => format!("waiting ({state}) in {s} ({w})"),
        (Some(w), None) => format!("waiting ({state}) in {w}"),
        (None, Some(s)) => format!("waiting ({state}) in {s}"),
        (None, None) => format!("in state {state}"),
    }
}

/// The main thread's innermost frame in the user's code (not a library's),
/// with the innermost frame's function where it is a library's:
/// `all_reduce ← train.py:40 main`.
fn user_frame(stack: &str) -> Option<String> {
    let mut frames = stack
        .split("\nThread ")
        .find(|t| t.contains("\"MainThread\""))
        .or_else(|| stack.split("\nThread ").nth(1))?
        .lines()
        .skip(1)
        .map(str::trim)
        .filter(|l| l.contains(" ("));
    let top = frames.clone().next()?;
    // The script's own file (the outermost frame's), else the innermost
    // frame outside the installed libraries.
    let file = |f: &str| {
        f.rsplit(" (")
            .next()
            .unwrap_or("")
            .rsplit(':')
            .nth(1)
            .map(str::to_string)
    };
    let script = frames.clone().last().and_then(file);
    let library = |f: &str| f.contains("-packages/") || f.contains("/lib/python");
    let user = match frames.clone().find(|f| file(f) == script) {
        Some(f) => f,
        None => frames.find(|f| !library(f))?,
    };
    let func = |f: &str| f.split(" (").next().unwrap_or("").to_string();
    // `compute (train.py:42)` → `train.py:42 compute()`
    let at = |f: &str| {
        let loc = f.split(" (").nth(1).unwrap_or("").trim_end_matches(')');
        let file = loc.rsplit('/').next().unwrap_or(loc);
        format!("{file} {}()", func(f))
    };
    Some(match top == user {
        true => at(user),
        false => format!("{}() ← {}", func(top), at(user)),
    })
}

/// The table of ranks, the stacks' notes and the verdict.
fn report(job: u32, step: u32, tasks: u64, lines: &[Value]) -> String {
    let ranks: BTreeMap<u64, &Value> = lines
        .iter()
        .filter_map(|l| Some((l["rank"].as_u64()?, l)))
        .collect();
    let mut rows = vec![
        [
            "RANK", "NODE", "GPU", "PID", "STATE", "CPU", "WAITS IN", "WHERE",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for (rank, r) in &ranks {
        let s = |k: &str| r[k].as_str().unwrap_or("-").to_string();
        let cpu = r["cpu"]
            .as_f64()
            .map_or("-".into(), |c| format!("{:.0}%", c * 100.0));
        let waits = format!("{} {}", s("syscall"), s("wchan"));
        let gpu = if s("gpus").is_empty() {
            "-".into()
        } else {
            s("gpus")
        };
        rows.push(vec![
            rank.to_string(),
            s("node"),
            gpu,
            r["pid"].to_string(),
            s("state"),
            cpu,
            waits,
            place(r),
        ]);
    }
    let mut out = format!(
        "step {job}.{step}: {} of {tasks} ranks found\n",
        ranks.len()
    );
    out.push_str(table(&rows).trim_end());
    out.push('\n');
    out.push_str(&stack_notes(&ranks));
    out.push_str(&flight_recorder_lines(&ranks));
    for r in ranks.values() {
        if let Some(stack) = r["stack"].as_str() {
            out.push_str(&format!(
                "\nrank {} (pid {}):\n{}",
                r["rank"], r["pid"], stack
            ));
        }
    }
    out.push_str(&format!("\n{}\n", verdict(tasks, &ranks)));
    out
}

/// Why stacks are missing, one line per reason (py-spy missing: one line
/// for every node).
fn stack_notes(ranks: &BTreeMap<u64, &Value>) -> String {
    let mut text = String::new();
    let mut notes: Vec<String> = ranks
        .values()
        .filter_map(|r| r["stack_note"].as_str().map(str::to_string))
        .collect();
    notes.sort();
    notes.dedup();
    // One line for the commonest note: py-spy missing on every node.
    let missing = "py-spy is not installed on ";
    let (absent, others): (Vec<String>, Vec<String>) =
        notes.into_iter().partition(|n| n.starts_with(missing));
    if !absent.is_empty() {
        let nodes: Vec<&str> = absent.iter().map(|n| &n[missing.len()..]).collect();
        text.push_str(&format!(
            "no Python stack: {missing}{} (pip install py-spy)\n",
            nodes.join(", ")
        ));
    }
    for note in others.iter().take(3) {
        text.push_str(&format!("no Python stack: {note}\n"));
    }
    text
}

/// What the flight recorder's pipes gave, per rank whose processes have
/// one (a step with a record): the dumps asked for and the files found, or
/// why none.
fn flight_recorder_lines(ranks: &BTreeMap<u64, &Value>) -> String {
    let mut text = String::new();
    // No rank with a pipe or a dump (gloo's, a CPU step): one line.
    let frs: Vec<&Value> = ranks
        .values()
        .map(|r| &r["fr"])
        .filter(|f| !f.is_null())
        .collect();
    let empty = |f: &Value, k: &str| f[k].as_array().is_none_or(|a| a.is_empty());
    if !frs.is_empty() && frs.iter().all(|f| empty(f, "pipes") && empty(f, "dumps")) {
        let notes = frs.iter().filter(|f| !empty(f, "notes")).count();
        if notes == frs.len() {
            return "flight recorder: no dump asked: no rank's pipe exists (PyTorch makes it only for the NCCL backend, with a trace buffer above 0)\n".into();
        }
    }
    for (rank, r) in ranks {
        let fr = &r["fr"];
        if fr.is_null() {
            continue;
        }
        let list = |k: &str| -> Vec<String> {
            fr[k]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default()
        };
        let (pipes, notes, dumps) = (list("pipes"), list("notes"), list("dumps"));
        let asked = match pipes.len() {
            0 => "no dump asked".to_string(),
            n => format!("dump asked through {n} pipe(s)"),
        };
        let files = match dumps.is_empty() {
            true => "no dump file".to_string(),
            false => format!("dump files {}", dumps.join(" ")),
        };
        text.push_str(&format!("flight recorder: rank {rank}: {asked}; {files}"));
        if let Some(note) = notes.first() {
            text.push_str(&format!(" ({note})"));
        }
        text.push('\n');
    }
    text
}

/// The ranks grouped by place, the smallest group first; ranks without a
/// process named; "moving" when every rank used CPU in the window.
fn verdict(tasks: u64, ranks: &BTreeMap<u64, &Value>) -> String {
    let mut groups: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for (rank, r) in ranks {
        groups.entry(place(r)).or_default().push(*rank);
    }
    let mut sorted: Vec<(String, Vec<u64>)> = groups.into_iter().collect();
    sorted.sort_by_key(|(_, rs)| rs.len());
    let mut parts = Vec::new();
    let gone: Vec<u64> = (0..tasks).filter(|r| !ranks.contains_key(r)).collect();
    if !gone.is_empty() {
        parts.push(format!(
            "{} has no process on any node of the step (gone)",
            ranks_text(&gone)
        ));
    }
    let moving = !ranks.is_empty()
        && ranks
            .values()
            .all(|r| r["cpu"].as_f64().unwrap_or(0.0) >= 0.1);
    if sorted.len() == 1 && gone.is_empty() {
        let (place, rs) = &sorted[0];
        parts.push(format!("all {} ranks are in one place: {place}", rs.len()));
    } else {
        for (i, (place, rs)) in sorted.iter().enumerate() {
            let who = match (rs.len(), i) {
                (1, _) => {
                    let r = ranks[&rs[0]];
                    let gpu = r["gpus"].as_str().filter(|g| !g.is_empty());
                    let gpu = gpu.map_or(String::new(), |g| format!(" (GPU {g})"));
                    format!(
                        "rank {} on {}{gpu} is",
                        rs[0],
                        r["node"].as_str().unwrap_or("?")
                    )
                }
                _ => format!("{} ranks are", rs.len()),
            };
            parts.push(format!("{who} {place}"));
        }
    }
    let head = if moving {
        "moving: every rank used CPU in the window; "
    } else {
        ""
    };
    format!("verdict: {head}{}", parts.join("; "))
}

fn ranks_text(ranks: &[u64]) -> String {
    match ranks {
        [one] => format!("rank {one}"),
        many => format!(
            "ranks {}",
            many.iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(",")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn job_and_step_are_parsed_and_anything_else_refused() {
        assert_eq!(parse_wanted("42"), Ok((42, None)));
        assert_eq!(parse_wanted("42.3"), Ok((42, Some(3))));
        assert!(parse_wanted("42.3.r0").is_err());
        assert!(parse_wanted("x").is_err());
    }

    #[test]
    fn another_users_job_is_refused() {
        let me = unsafe { libc::getuid() };
        let other = me + 1;
        let mine = parse_owner(&format!("{me} me RUNNING\n"), 1).unwrap();
        assert_eq!(check_owner(&mine, 1), Ok(()));
        let bobs = parse_owner(&format!("{other} bob RUNNING\n"), 1).unwrap();
        assert_eq!(
            check_owner(&bobs, 1).unwrap_err(),
            "job 1 is bob's, not yours: only the job's user can look into its processes"
        );
    }

    /// A job of alice's named `x UserId=<me>(<my uid>)`: in `scontrol show
    /// job` its name comes before its owner (and passed for mine); squeue's
    /// fields hold no name, and a line of anything but the three fields is
    /// no owner at all.
    #[test]
    fn a_job_named_after_me_is_still_anothers() {
        let me = unsafe { libc::getuid() };
        let other = me + 1;
        let named = format!("x UserId=me({me})");
        let scontrol = format!("JobId=1 JobName={named} UserId=alice({other}) GroupId=x");
        let err = parse_owner(&scontrol, 1).unwrap_err();
        assert!(
            err.starts_with("squeue shows no owner for job 1: "),
            "{err}"
        );
        let alices = parse_owner(&format!("{other} alice RUNNING\n"), 1).unwrap();
        assert!(
            check_owner(&alices, 1)
                .unwrap_err()
                .contains("alice's, not yours")
        );
        // A heterogeneous job's components: one owner, or none.
        let two = format!("{other} alice RUNNING\n{me} me RUNNING\n");
        assert!(parse_owner(&two, 1).is_err());
        let gone = parse_owner("", 1).unwrap_err();
        assert!(gone.starts_with("job 1 is not running"), "{gone}");
    }

    /// py-spy dump's layout: a thread line, then frames innermost first.
    const DUMP: &str = "Process 704: python3 train.py\nPython v3.11.2 (/usr/bin/python3.11)\n\nThread 704 (idle): \"MainThread\"\n    all_reduce (torch/distributed/distributed_c10d.py:1536)\n    wrapper (/usr/lib/python3/dist-packages/torch/distributed/c10d_logger.py:47)\n    main (/home/alice/train.py:40)\n    <module> (/home/alice/train.py:50)\n";

    #[test]
    fn the_place_is_the_library_call_from_the_users_line() {
        assert_eq!(
            user_frame(DUMP).as_deref(),
            Some("all_reduce() ← train.py:40 main()")
        );
        let own = DUMP.replace("    all_reduce (torch/distributed/distributed_c10d.py:1536)\n    wrapper (/usr/lib/python3/dist-packages/torch/distributed/c10d_logger.py:47)\n", "");
        assert_eq!(user_frame(&own).as_deref(), Some("train.py:40 main()"));
    }

    #[test]
    fn the_flight_recorders_dumps_are_listed_per_rank() {
        let lines = [
            json!({"rank": 0, "fr": {"pipes": ["/r/rank0.torch-fr-pipe.0.pipe"], "notes": [], "dumps": ["/r/rank0.torch-fr.0"]}}),
            json!({"rank": 1, "fr": {"pipes": [], "notes": ["no pipe /r/rank1.torch-fr-pipe.<rank>.pipe: PyTorch makes it only for the NCCL backend (not gloo's) with a trace buffer above 0"], "dumps": []}}),
            json!({"rank": 2}),
        ];
        let ranks: BTreeMap<u64, &Value> = lines
            .iter()
            .map(|l| (l["rank"].as_u64().unwrap(), l))
            .collect();
        // No rank with a pipe: one line for all.
        let gloo: BTreeMap<u64, &Value> = ranks
            .iter()
            .filter(|(r, _)| **r > 0)
            .map(|(r, v)| (*r, *v))
            .collect();
        assert_eq!(
            flight_recorder_lines(&gloo),
            "flight recorder: no dump asked: no rank's pipe exists (PyTorch makes it only for the NCCL backend, with a trace buffer above 0)\n"
        );
        assert_eq!(
            flight_recorder_lines(&ranks),
            "flight recorder: rank 0: dump asked through 1 pipe(s); dump files /r/rank0.torch-fr.0\n\
             flight recorder: rank 1: no dump asked; no dump file (no pipe /r/rank1.torch-fr-pipe.<rank>.pipe: PyTorch makes it only for the NCCL backend (not gloo's) with a trace buffer above 0)\n"
        );
    }

    #[test]
    fn the_odd_rank_comes_first_and_a_missing_rank_is_gone() {
        let wait = |rank: u64| json!({"rank": rank, "node": "node1", "gpus": "", "cpu": 0.0, "state": "S", "wchan": "futex_do_wait", "syscall": "futex"});
        let mut lines: Vec<Value> = (0..3).map(wait).collect();
        // A spinning rank on a busy node: state R, under half a core.
        lines.push(json!({"rank": 3, "node": "node2", "gpus": "1", "cpu": 0.38, "state": "R"}));
        let ranks: BTreeMap<u64, &Value> = lines
            .iter()
            .map(|l| (l["rank"].as_u64().unwrap(), l))
            .collect();
        assert_eq!(
            verdict(5, &ranks),
            "verdict: rank 4 has no process on any node of the step (gone); rank 3 on node2 (GPU 1) is on CPU, in no wait (its own loop); 3 ranks are waiting (S) in futex (futex_do_wait)"
        );
        let busy: Vec<Value> = (0..2).map(|r| json!({"rank": r, "cpu": 0.8})).collect();
        let ranks: BTreeMap<u64, &Value> = busy
            .iter()
            .map(|l| (l["rank"].as_u64().unwrap(), l))
            .collect();
        assert!(verdict(2, &ranks).starts_with(
            "verdict: moving: every rank used CPU in the window; all 2 ranks are in one place"
        ));
    }
}
