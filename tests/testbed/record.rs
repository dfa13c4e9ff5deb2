//! The step's record on the testbed: 3 nodes × 2 tasks, rank 3 killed with
//! SIGKILL, 20 steps in one allocation: each record lists all 6 ranks and
//! `tf-cluster postmortem` names rank 3 on node2 as the first failure, in
//! 20 of 20 runs; the record outlives the job and every file of it is the
//! user's (root wrote nothing there).
//!
//! With a record, each task's debugging output defaults to the run's
//! directory: a torchrun worker that fails leaves its error file there, and
//! `postmortem` lists it; a variable the user exported is left alone.
//!
//! A FIFO the user put where the node's file goes neither holds the step's
//! launch nor is written: the step runs, without a record, and says why.
//!
//! Cost: one allocation of 20 short steps, then one postmortem per step;
//! one torchrun step over 2 nodes; one one-task step.

use crate::common;

use common::{exec, exec_for, install, messages, srun_tasks_for, testbed};

const RUNS: u32 = 20;

#[test]
fn the_record_names_the_first_rank_to_die_in_every_run() {
    let _t = testbed();
    let dir = format!("/home/alice/tfc-record-{}", std::process::id());
    // Rank 3 kills itself at once; the others would sleep a minute: srun's
    // --kill-on-bad-exit ends them after rank 3.
    let task = r#"if [ "$SLURM_PROCID" = 3 ]; then kill -9 $$; fi; exec sleep 60"#;
    let script = format!(
        "echo TFC_JOB $SLURM_JOB_ID; for i in $(seq {RUNS}); do srun -N3 -n6 --ntasks-per-node=2 --gres=gpu:2 --kill-on-bad-exit=1 --tf-cluster --tf-record={dir} sh -c '{task}'; done; true"
    );
    let out = exec_for(
        600,
        &[
            "salloc",
            "-N3",
            "--ntasks-per-node=2",
            "--gres=gpu:2",
            "bash",
            "-c",
            &script,
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let job = stdout
        .lines()
        .find_map(|l| l.strip_prefix("TFC_JOB "))
        .unwrap_or_else(|| panic!("no job id:\n{stdout}{stderr}"))
        .trim()
        .to_string();
    assert!(
        messages(&stderr).is_empty(),
        "the plugin said something:\n{stderr}"
    );
    // The job is over: what follows reads what outlived it.
    let owners = exec(&[
        "bash",
        "-c",
        &format!("find {dir} -printf '%u\\n' | sort -u"),
    ]);
    assert_eq!(
        String::from_utf8_lossy(&owners.stdout).trim(),
        "alice",
        "every file of the record is the user's"
    );
    let mut first_is_rank3 = 0;
    for step in 0..RUNS {
        let run = format!("{job}.{step}");
        let pm = exec(&["tf-cluster", "postmortem", &run, "--tf-record", &dir]);
        let text = String::from_utf8_lossy(&pm.stdout).into_owned();
        let ctx = format!("{run}:\n{text}{}", String::from_utf8_lossy(&pm.stderr));
        assert!(pm.status.success(), "{ctx}");
        assert!(
            text.starts_with(&format!("run {run}: 6 rank(s) recorded of 6 on 3 node(s)")),
            "{ctx}"
        );
        for (rank, host) in [
            (0, "node1"),
            (1, "node1"),
            (2, "node2"),
            (3, "node2"),
            (4, "node3"),
            (5, "node3"),
        ] {
            let row = text
                .lines()
                .find(|l| l.starts_with(&format!("{rank} ")))
                .unwrap_or_else(|| panic!("no rank {rank}\n{ctx}"));
            assert!(
                row.contains(host) && row.contains(&format!("worker {rank}")),
                "{row}\n{ctx}"
            );
            assert!(
                !row.contains("running or lost"),
                "rank {rank} has no end\n{ctx}"
            );
        }
        let rank3 = text.lines().find(|l| l.starts_with("3 ")).unwrap();
        assert!(rank3.contains("signal 9"), "{ctx}");
        if text.contains("first failure: rank 3, node2, GPU ") {
            first_is_rank3 += 1;
        } else {
            eprintln!("not rank 3 first:\n{ctx}");
        }
    }
    exec(&["rm", "-rf", &dir]);
    assert_eq!(first_is_rank3, RUNS, "rank 3 first in every run");
}

#[test]
fn a_fifo_where_the_nodes_file_goes_neither_holds_the_step_nor_is_written() {
    let _t = testbed();
    let dir = format!("/home/alice/tfc-record-fifo-{}", std::process::id());
    // The run's directories of the allocation's first two steps (JOB.0 and
    // JOB.1), each with a FIFO named as the node's file. Step 0: nothing
    // reads it, and an open for writing that blocks would hold slurmstepd's
    // user_init, and the step, for ever (the FIFO is read afterwards, so
    // that a slurmstepd stuck on it ends). Step 1: a reader waits on it, and
    // must get nothing.
    let fifo = |step: u32| format!("{dir}/$SLURM_JOB_ID.{step}/$SLURM_JOB_NODELIST.jsonl");
    let (fifo0, fifo1) = (fifo(0), fifo(1));
    let step = "srun -N1 -n1 --tf-cluster --tf-record={dir} sh -c 'echo TFC_RAN $SLURM_PROCID'";
    let step = step.replace("{dir}", &dir);
    let script = format!(
        "mkdir -p {dir}/$SLURM_JOB_ID.0 {dir}/$SLURM_JOB_ID.1 && mkfifo {fifo0} {fifo1} || exit 1
         t0=$(date +%s)
         timeout 60 {step}
         echo TFC_RC $? $(( $(date +%s) - t0 ))
         [ -p {fifo0} ] && echo TFC_STILL_FIFO
         timeout 5 cat {fifo0} >/dev/null
         timeout 60 cat {fifo1} >{dir}/read & reader=$!
         timeout 60 {step}
         echo TFC_RC1 $?
         sleep 1; kill $reader 2>/dev/null; wait $reader
         echo TFC_READ $(wc -c <{dir}/read)"
    );
    let out = exec_for(240, &["salloc", "-N1", "bash", "-c", &script]);
    exec(&["rm", "-rf", &dir]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let ctx = format!("{stdout}{stderr}");
    let rc = stdout
        .lines()
        .find_map(|l| l.strip_prefix("TFC_RC "))
        .unwrap_or_else(|| panic!("no step:\n{ctx}"));
    let (code, secs) = rc.split_once(' ').unwrap();
    assert_eq!(
        code, "0",
        "the step did not end well (124: held past 60 s):\n{ctx}"
    );
    assert!(
        secs.parse::<u32>().unwrap() < 30,
        "the step took {secs} s:\n{ctx}"
    );
    assert!(stdout.contains("TFC_STILL_FIFO"), "{ctx}");
    assert!(stdout.contains("TFC_RC1 0"), "{ctx}");
    assert_eq!(stdout.matches("TFC_RAN 0").count(), 2, "{ctx}");
    assert!(
        stdout.contains("TFC_READ 0\n"),
        "the record was written into the FIFO:\n{ctx}"
    );
    let told = messages(&stderr)
        .iter()
        .filter(|m| m.contains("no record of step") && m.contains("not a regular file"))
        .count();
    assert_eq!(
        told, 2,
        "the user is not told why there is no record:\n{ctx}"
    );
}

/// A worker under torchrun's `@record` that writes down where its debugging
/// output goes, then fails on the Slurm task of rank 1.
const WORKER: &str = r#"
import json, os
from torch.distributed.elastic.multiprocessing.errors import record

NAMES = ["TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
         "NCCL_DEBUG_FILE", "PET_LOG_DIR", "TORCHELASTIC_ERROR_FILE",
         "TORCH_NCCL_DEBUG_INFO_PIPE_FILE", "TORCH_NCCL_TRACE_BUFFER_SIZE",
         "TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_DUMP_ON_TIMEOUT", "NCCL_RAS_ADDR",
         "MASTER_PORT", "SLURM_STEP_RESV_PORTS"]

@record
def main():
    seen = {n: os.environ.get(n) for n in NAMES}
    seen["procid"] = int(os.environ["SLURM_PROCID"])
    # Beside this file: the step's output of a task killed after another's
    # failure may be cut short.
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "seen.%d.json" % seen["procid"]), "w") as f:
        json.dump(seen, f)
    if seen["procid"] == 1:
        raise RuntimeError("tfc worker failed on purpose")

main()
"#;

#[test]
fn a_failed_torchrun_worker_leaves_its_error_file_in_the_record() {
    let _t = testbed();
    let pid = std::process::id();
    let home = format!("/home/alice/tfc-debug-{pid}");
    let dir = format!("{home}/record");
    install(&home, &[("worker.py", WORKER)], "true");
    let mine = format!("{home}/mine-fr.");
    let fr = format!("TORCH_FR_DUMP_TEMP_FILE={mine}");
    // --redirects/--tee: torch 1.13 on Python 3.11 needs its streams
    // redirected, and takes only 1 (stdout) there; the workers' stdout
    // lands under the log dir too.
    let out = srun_tasks_for(
        240,
        &["NCCL_DEBUG=INFO", &fr, "TORCH_NCCL_DUMP_ON_TIMEOUT=0"],
        &[
            "-N2",
            "-n2",
            "--kill-on-bad-exit=1",
            "--torch-cluster",
            &format!("--tf-record={dir}"),
            "torchrun",
            "--nproc_per_node=1",
            "--redirects=1",
            "--tee=1",
            &format!("{home}/worker.py"),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let ctx = format!("{stdout}\n{stderr}");
    assert!(!out.status.success(), "rank 1 failed: {ctx}");
    let runs = exec(&["ls", &dir]);
    let runs = String::from_utf8_lossy(&runs.stdout).into_owned();
    let run_ids: Vec<&str> = runs.split_whitespace().collect();
    assert_eq!(run_ids.len(), 1, "one run: {runs}\n{ctx}");
    let run_id = run_ids[0];
    let run = format!("{dir}/{run_id}");
    let mut seen = std::collections::BTreeMap::new();
    for rank in 0..2u64 {
        let json = exec(&["cat", &format!("{home}/seen.{rank}.json")]);
        let json = String::from_utf8_lossy(&json.stdout).into_owned();
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&json) {
            assert_eq!(v["procid"].as_u64(), Some(rank), "{json}");
            seen.insert(rank, v);
        }
    }
    assert_eq!(seen.len(), 2, "both workers: {ctx}");
    for (rank, v) in &seen {
        let c = format!("rank {rank}: {v}\n{ctx}");
        // The user's own value wins, and its older name is not added.
        assert_eq!(v["TORCH_FR_DUMP_TEMP_FILE"], mine.as_str(), "{c}");
        assert!(v["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"].is_null(), "{c}");
        assert_eq!(
            v["NCCL_DEBUG_FILE"],
            format!("{run}/rank{rank}.nccl.%h.%p.log").as_str(),
            "{c}"
        );
        let log_dir = format!("{run}/rank{rank}.torchrun");
        assert_eq!(v["PET_LOG_DIR"], log_dir.as_str(), "{c}");
        let error_file = v["TORCHELASTIC_ERROR_FILE"].as_str().unwrap_or("");
        assert!(error_file.starts_with(&format!("{log_dir}/")), "{c}");
        // The flight recorder's pipe and buffer, not the user's own choice
        // of a dump on timeout.
        let pipe = format!("{run}/rank{rank}.torch-fr-pipe.");
        assert_eq!(v["TORCH_NCCL_DEBUG_INFO_PIPE_FILE"], pipe.as_str(), "{c}");
        assert_eq!(v["TORCH_NCCL_TRACE_BUFFER_SIZE"], "2000", "{c}");
        assert_eq!(v["TORCH_FR_BUFFER_SIZE"], "2000", "{c}");
        assert_eq!(v["TORCH_NCCL_DUMP_ON_TIMEOUT"], "0", "{c}");
    }
    // NCCL's RAS on a port of the step's own (Slurm's reservation where
    // slurm.conf has MpiParams=ports, else the default range's block), the
    // same on both nodes, not PyTorch's MASTER_PORT.
    let ras: Vec<u16> = seen
        .values()
        .map(|v| {
            let addr = v["NCCL_RAS_ADDR"].as_str().unwrap_or("");
            let port = addr.strip_prefix("localhost:").and_then(|p| p.parse().ok());
            port.unwrap_or_else(|| panic!("NCCL_RAS_ADDR {addr:?}: {ctx}"))
        })
        .collect();
    let master: u16 = seen[&0]["MASTER_PORT"].as_str().unwrap().parse().unwrap();
    assert_eq!(ras[0], ras[1], "{ctx}");
    assert_ne!(ras[0], master, "{ctx}");
    let (lo, hi) = match seen[&0]["SLURM_STEP_RESV_PORTS"].as_str() {
        Some(resv) => {
            let (lo, hi) = resv.split_once('-').unwrap_or((resv, resv));
            (lo.parse().unwrap(), hi.parse().unwrap())
        }
        None => (20000, 29499),
    };
    assert!(
        (lo..=hi).contains(&ras[0]),
        "{ras:?} not in {lo}-{hi}: {ctx}"
    );
    // After the job: the failed worker's error file outlived it, says why,
    // and postmortem points at it.
    let failed = seen[&1]["TORCHELASTIC_ERROR_FILE"]
        .as_str()
        .unwrap()
        .to_string();
    let error = exec(&["cat", &failed]);
    assert!(
        String::from_utf8_lossy(&error.stdout).contains("tfc worker failed on purpose"),
        "{failed}: {}\n{ctx}",
        String::from_utf8_lossy(&error.stderr)
    );
    let pm = exec(&["tf-cluster", "postmortem", run_id, "--tf-record", &dir]);
    let text = String::from_utf8_lossy(&pm.stdout).into_owned();
    let pm_ctx = format!("{text}{}", String::from_utf8_lossy(&pm.stderr));
    assert!(text.contains("first failure: rank 1, "), "{pm_ctx}");
    let logs: Vec<&str> = text
        .lines()
        .skip_while(|l| *l != "its logs:")
        .skip(1)
        .map(str::trim)
        .collect();
    assert!(logs.contains(&failed.as_str()), "{pm_ctx}");
    assert!(
        logs.iter().all(|l| l.starts_with(&format!("{run}/rank1."))),
        "{pm_ctx}"
    );
    exec(&["rm", "-rf", &home]);
}

fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A record in a shared directory (root's, mode 1777, as admin.md has it)
/// that another user, bob, prepared for alice's job while it waited: the
/// run's directory of step 0 made first (0777) with a link to bob's own
/// directory where torchrun's log directory goes and bob's file where the
/// node's file goes; alice's per-user directory in a second shared
/// directory made first by bob; a file of bob's put (by root) where step
/// 1's node file goes in the admin's own layout (root's directory, 0755,
/// with a directory per user made by the admin). Alice's steps all run (rc 0), write nothing into
/// anything of bob's, say in one line each why a record is not written,
/// and `postmortem` shows alice's own run, not bob's later sibling
/// `JOB.0.r1` with its escape sequences, nor bob's forged node file.
///
/// Cost: one one-node allocation of three `true`-like steps.
#[test]
fn another_user_cannot_redirect_or_forge_a_record_in_a_shared_directory() {
    let _t = testbed();
    let pid = std::process::id();
    let shared = format!("/home/tfc-shared-{pid}");
    let shared2 = format!("/home/tfc-shared2-{pid}");
    let admins = format!("/home/tfc-admins-{pid}");
    let trap = format!("/home/tfc-bobs-{pid}");
    let home = format!("/home/alice/tfc-shared-{pid}");
    for d in [&shared, &shared2] {
        let made = common::on(
            "ctl",
            &["sh", "-c", &format!("mkdir -p {d} && chmod 1777 {d}")],
        );
        assert!(made.status.success(), "{}", text(&made));
    }
    // Bob's own directory (bob has no home: root makes it for him).
    let made = common::on(
        "ctl",
        &[
            "sh",
            "-c",
            &format!("mkdir -p {trap} && chown bob {trap} && chmod 777 {trap}"),
        ],
    );
    assert!(made.status.success(), "{}", text(&made));
    exec(&["mkdir", "-p", &home]);
    // The job waits for bob's preparations before its steps run.
    let script = format!(
        "echo $SLURM_JOB_ID > {home}/job; for i in $(seq 600); do [ -e {home}/go ] && break; sleep 0.1; done
         srun -N1 -n1 --torch-cluster --tf-record={shared} sh -c 'echo TFC_PET=$PET_LOG_DIR'; echo TFC_RC0 $?
         srun -N1 -n1 --tf-cluster --tf-record={admins} true; echo TFC_RC1 $?
         srun -N1 -n1 --tf-cluster --tf-record={shared2} true; echo TFC_RC2 $?"
    );
    let job_thread = std::thread::spawn(move || {
        exec_for(
            240,
            &["salloc", "-N1", "-w", "node1", "bash", "-c", &script],
        )
    });
    let mut job = String::new();
    for _ in 0..600 {
        let read = exec(&["cat", &format!("{home}/job")]);
        job = String::from_utf8_lossy(&read.stdout).trim().to_string();
        if !job.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert!(!job.is_empty(), "the job never started");
    // Bob's preparations, where the old layout put alice's runs.
    let bob = common::as_bob(&format!(
        "mkdir -m 777 {shared}/{job}.0 && : > {shared}/{job}.0/node1.jsonl && chmod 666 {shared}/{job}.0/node1.jsonl \
         && ln -s {trap} {shared}/{job}.0/rank0.torchrun \
         && mkdir -m 777 {shared2}/1000 \
         && mkdir -m 777 {shared}/{job}.0.r1 && printf '%s\\n' \
         '{{\"record\":1,\"kind\":\"rank\",\"rank\":0,\"host\":\"evil\\u001b]0;pwned\\u0007\\u001b[2J\",\"run_id\":\"{job}.0.r1\"}}' \
         '{{\"record\":1,\"kind\":\"exit\",\"rank\":0,\"host\":\"evil\",\"code\":1,\"signal\":null,\"unix_ns\":1}}' \
         > {shared}/{job}.0.r1/node1.jsonl"
    ));
    assert!(bob.status.success(), "{}", text(&bob));
    // The admin's own layout (root's, 0755, alice's directory made by the
    // admin) with a file of bob's where step 1's node file goes, in the old
    // layout and the new (root puts it: bob cannot enter either).
    let planted = common::on(
        "ctl",
        &[
            "sh",
            "-c",
            &format!(
                "set -e; mkdir -p {admins}/{job}.1 {admins}/1000/{job}.1; chmod 755 {admins}; chmod 700 {admins}/1000
                 for d in {admins}/{job}.1 {admins}/1000/{job}.1; do : > $d/node1.jsonl; chown 1001:1001 $d/node1.jsonl; chmod 666 $d/node1.jsonl; done
                 chown 1000:1000 {admins}/1000 {admins}/1000/{job}.1 {admins}/{job}.1"
            ),
        ],
    );
    assert!(planted.status.success(), "{}", text(&planted));
    exec(&["touch", &format!("{home}/go")]);
    let out = job_thread.join().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let ctx = format!("{stdout}{stderr}");
    for step in 0..3 {
        assert!(
            stdout.contains(&format!("TFC_RC{step} 0")),
            "step {step} did not run well:\n{ctx}"
        );
    }
    // Nothing of bob's holds anything of alice's.
    let bobs = ctl_stdout(&format!(
        "find {shared} {shared2} {trap} -user bob -type f -size +0 | grep -v '{job}.0.r1/'; ls -A {trap} {shared2}/1000"
    ));
    assert_eq!(
        bobs.lines()
            .filter(|l| !l.is_empty() && !l.ends_with(':'))
            .count(),
        0,
        "alice wrote into bob's files or directories:\n{bobs}\n{ctx}"
    );
    // Step 0's record and its torchrun default in alice's own directory.
    let run0 = format!("{shared}/1000/{job}.0");
    assert!(
        stdout.contains(&format!("TFC_PET={run0}/rank0.torchrun\n")),
        "torchrun's log directory is not in alice's own directory:\n{ctx}"
    );
    let owners = ctl_stdout(&format!(
        "stat -c '%U %a %F' {shared}/1000 {run0} {run0}/node1.jsonl"
    ));
    let lines: Vec<&str> = owners.lines().collect();
    assert_eq!(lines.len(), 3, "{owners}\n{ctx}");
    assert!(
        lines[0].starts_with("alice ") && lines[0].ends_with(" directory"),
        "{owners}"
    );
    let mode = u32::from_str_radix(lines[0].split(' ').nth(1).unwrap(), 8).unwrap();
    assert_eq!(
        mode & 0o022,
        0,
        "others may write alice's directory: {owners}"
    );
    assert!(
        lines[2].starts_with("alice ") && lines[2].ends_with("regular file"),
        "{owners}"
    );
    // Steps 1 and 2: one line each says why there is no record.
    let told: Vec<&str> = messages(&stderr)
        .into_iter()
        .filter(|m| m.contains("no record of step") && m.contains("not yours"))
        .collect();
    assert_eq!(told.len(), 2, "{told:?}\n{ctx}");
    assert!(
        told.iter().any(|m| m.contains(&format!("{job}.1"))),
        "{told:?}"
    );
    assert!(
        told.iter().any(|m| m.contains(&format!("{shared2}/1000"))),
        "{told:?}"
    );
    // postmortem of alice's run: its stdout, and stdout and stderr; it
    // succeeds and shows neither bob's sibling nor an escape sequence.
    let postmortem = || {
        let pm = postmortem_of(&format!("{job}.0"), &shared);
        let pm_text = String::from_utf8_lossy(&pm.stdout).into_owned();
        let pm_ctx = format!("{pm_text}{}", String::from_utf8_lossy(&pm.stderr));
        assert!(pm.status.success(), "{pm_ctx}");
        assert!(
            !pm_text.contains("evil") && !pm_ctx.contains('\x1b'),
            "{pm_ctx}"
        );
        (pm_text, pm_ctx)
    };
    let (pm_text, pm_ctx) = postmortem();
    assert!(
        pm_text.starts_with(&format!(
            "run {job}.0: 1 rank(s) recorded of 1 on 1 node(s); record {run0}\n"
        )),
        "{pm_ctx}"
    );
    assert!(
        pm_text.contains("no failure: every rank exited 0"),
        "{pm_ctx}"
    );
    // Bob's forged node file beside alice's in her own run (root puts it):
    // said and skipped.
    common::on(
        "ctl",
        &[
            "sh",
            "-c",
            &format!(
                "cp {shared}/{job}.0.r1/node1.jsonl {run0}/node2.jsonl && chown 1001:1001 {run0}/node2.jsonl"
            ),
        ],
    );
    let (pm_text, pm_ctx) = postmortem();
    assert!(
        pm_text.contains(&format!("{run0}/node2.jsonl is not yours: skipped")),
        "{pm_ctx}"
    );
    common::on(
        "ctl",
        &["rm", "-rf", &shared, &shared2, &admins, &trap, &home],
    );
}

/// The site's record directory (`record=DIR` in plugstack.conf, root's,
/// 0755, as admin.md has it) with no directory made for anyone: the plugin
/// makes alice's (`DIR/1000`, 0700, alice's and her group's) as root,
/// without following a link, and writes her run in it as alice. A link
/// root's own hand put where alice's directory goes (to another directory
/// of root's), and then a directory of bob's there, are refused: one line,
/// the step runs, the link's target stays root's and empty. A `--tf-record`
/// of alice's naming another directory of root's (not the site's) gets
/// nothing made there.
///
/// Cost: four one-task steps, each its own allocation on node1.
#[test]
fn the_plugin_makes_each_users_directory_in_the_sites_record_directory() {
    let bed = common::exclusive();
    let pid = std::process::id();
    let site = format!("/home/tfc-site-{pid}");
    let target = format!("/home/tfc-roots-{pid}");
    let other = format!("/home/tfc-other-{pid}");
    let root = |script: &str| {
        let out = common::on("ctl", &["sh", "-c", &format!("set -e; {script}")]);
        assert!(out.status.success(), "{}", text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    root(&format!(
        "mkdir -m 755 {site} {target} {other}; ln -s {target} {site}/1000"
    ));
    bed.plugstack(&format!("required {} record={site}\n", common::PLUGIN));
    let step = |extra: &[&str]| {
        let mut args = vec!["srun", "-N1", "-n1", "-w", "node1", "--tf-cluster"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["sh", "-c", "echo TFC_JOB $SLURM_JOB_ID"]);
        let out = exec(&args);
        let all = text(&out);
        assert!(out.status.success(), "the step did not run:\n{all}");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let job = stdout
            .lines()
            .find_map(|l| l.strip_prefix("TFC_JOB "))
            .unwrap_or_else(|| panic!("no job id:\n{all}"))
            .trim()
            .to_string();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let told: Vec<String> = messages(&stderr).into_iter().map(String::from).collect();
        (job, told, all)
    };
    // A link where alice's directory goes: not followed, nothing chowned.
    let (_, told, all) = step(&[]);
    assert!(
        told.len() == 1
            && told[0].contains("no record of step")
            && told[0].contains(&format!("{site}/1000 is not yours")),
        "{told:?}\n{all}"
    );
    assert_eq!(
        root(&format!("stat -c '%U %a' {target}; ls -A {target}")).trim(),
        "root 755",
        "the link's target was touched:\n{all}"
    );
    // A directory of bob's there: refused, left as it is.
    root(&format!(
        "rm {site}/1000; mkdir -m 700 {site}/1000; chown 1001:1001 {site}/1000"
    ));
    let (_, told, all) = step(&[]);
    assert!(
        told.len() == 1 && told[0].contains(&format!("{site}/1000 is not yours")),
        "{told:?}\n{all}"
    );
    assert_eq!(
        root(&format!("stat -c '%U %a' {site}/1000; ls -A {site}/1000")).trim(),
        "bob 700",
        "{all}"
    );
    // Nothing there: the plugin makes alice's directory.
    root(&format!("rmdir {site}/1000"));
    let (job, told, all) = step(&[]);
    assert!(told.is_empty(), "{told:?}\n{all}");
    let made = root(&format!(
        "stat -c '%U %G %a %F' {site}/1000; stat -c '%U %F' {site}/1000/{job}.0/node1.jsonl"
    ));
    assert_eq!(
        made.lines().collect::<Vec<_>>(),
        ["alice alice 700 directory", "alice regular file"],
        "{all}"
    );
    let pm = postmortem_of(&format!("{job}.0"), &site);
    assert!(
        String::from_utf8_lossy(&pm.stdout).starts_with(&format!(
            "run {job}.0: 1 rank(s) recorded of 1 on 1 node(s); record {site}/1000/{job}.0\n"
        )),
        "{}",
        text(&pm)
    );
    // Another directory of root's, named by alice: nothing made there.
    let (_, told, all) = step(&["--tf-record", &other]);
    assert!(
        told.len() == 1 && told[0].contains("no record of step"),
        "{told:?}\n{all}"
    );
    assert_eq!(root(&format!("ls -A {other}")).trim(), "", "{all}");
    drop(bed);
    root(&format!("rm -rf {site} {target} {other}"));
}

/// What `sh -c SCRIPT` prints, run as root on the submit host.
fn ctl_stdout(script: &str) -> String {
    let out = common::on("ctl", &["sh", "-c", script]);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `tf-cluster postmortem RUN --tf-record DIR` as alice, within 20 s.
fn postmortem_of(run: &str, dir: &str) -> std::process::Output {
    exec(&[
        "timeout",
        "20",
        "tf-cluster",
        "postmortem",
        run,
        "--tf-record",
        dir,
    ])
}
