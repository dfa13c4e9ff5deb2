//! `tf-cluster hang JOB[.STEP]`: where every rank of a running step is,
//! read on its node through one `srun --overlap` step into the job, as the
//! job's own user, and a verdict that names the odd ranks first
//! (crate::hang_report).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::hang_probe::LINE;
use crate::hang_report::report;
use crate::slurm_cmd::field;
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
    let nodes = field(&step_info, "NodeList")
        .map(str::to_string)
        .ok_or(format!("step {job}.{step} is not running"))?;
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

/// `scontrol ARGS`, its output or its own error line (crate::slurm_cmd).
fn scontrol(args: &[&str]) -> Result<String, String> {
    output_of("scontrol", args)
}

/// `PROGRAM ARGS` as the CLI runs every Slurm command (crate::slurm_cmd).
fn output_of(program: &str, args: &[&str]) -> Result<String, String> {
    let argv: Vec<&str> = std::iter::once(program)
        .chain(args.iter().copied())
        .collect();
    crate::slurm_cmd::run(&argv)
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
    let text = output_of("squeue", &["-h", "-s", "-j", &job.to_string(), "-o", "%i"])?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hang_report::{flight_recorder_lines, user_frame, verdict};
    use serde_json::json;
    use std::collections::BTreeMap;

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
