//! Heterogeneous steps on the real testbed: srun makes one decision for the
//! whole step, and every component follows it, whichever components srun's
//! word on the step reaches; a step that asks for nothing (the batch step
//! included) is never touched by what its environment holds.
//!
//! Every step here runs inside a heterogeneous allocation of node1 (component
//! 0) and node2 (component 1), made by salloc (or sbatch) for that step.

use crate::common;

use std::time::Instant;

use common::outputs::Outputs;
use common::{assert_healthy, assert_no_node_drained, exec_for, on};

/// What each task printed after `HET `: `C=<component job> R=<RANK> …`.
fn het_lines(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text
        .lines()
        .filter_map(|l| l.split_once("HET ").map(|(_, r)| r.trim().to_string()))
        .collect();
    lines.sort();
    lines
}

/// One line per task: its host, rank, world size, TF_CONFIG's presence, the
/// run id torchrun would use, and srun's word as the task holds it.
const REPORT: &str = r#"echo "HET $(hostname) R=${RANK-unset} WS=${WORLD_SIZE-unset} TF=${TF_CONFIG+set} RDZV=${PET_RDZV_ID-unset} WORD=${SLURM_TF_CLUSTER-unset}""#;

/// `salloc ALLOC : … sh -c SCRIPT` as alice on ctl: a heterogeneous
/// allocation of node1 and node2, then SCRIPT inside it, every srun's tasks
/// writing to files of their own (SLURM_STDOUTMODE). salloc's output, then
/// every task's file; and the time.
fn in_het_allocation(options: &[&str], script: &str) -> (String, f64) {
    let outputs = Outputs::new("het");
    let [out_mode, err_mode, _] = outputs.env();
    let mut cmd = vec!["env", &out_mode, &err_mode, "salloc"];
    cmd.extend_from_slice(options);
    cmd.extend_from_slice(&[
        "-N1", "-n2", "-w", "node1", ":", "-N1", "-n2", "-w", "node2",
    ]);
    cmd.extend_from_slice(&["sh", "-c", script]);
    let start = Instant::now();
    let out = exec_for(240, &cmd);
    let took = start.elapsed().as_secs_f64();
    let text = format!(
        "{}{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        outputs.dump()
    );
    (text, took)
}

/// The distinct run ids (`RDZV=`) of `lines`.
fn run_ids<'l>(lines: impl Iterator<Item = &'l String>) -> std::collections::BTreeSet<&'l str> {
    lines
        .map(|l| {
            l.split("RDZV=")
                .nth(1)
                .unwrap()
                .split_whitespace()
                .next()
                .unwrap()
        })
        .collect()
}

/// The word each host's tasks hold: `full` (srun's hand-off on the step),
/// `early` (only srun's early word) or what else.
fn words(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .map(|l| {
            let host = l.split_whitespace().next().unwrap_or("?");
            let word = l.split("WORD=").nth(1).unwrap_or("?");
            let kind = if word.starts_with("1;srun") {
                "early"
            } else if word.starts_with("1;") {
                "full"
            } else {
                word
            };
            format!("{host}:{kind}")
        })
        .collect()
}

/// Which components' tasks hold srun's hand-off on the step, for
/// `--het-group=0,1`, `--het-group=1` and a step of a heterogeneous batch
/// job; whichever they hold, every task gets the same, right variables: the
/// ranks of the whole step (component 1's from 2 with `--het-group=0,1`),
/// one world size, one run id. (Component 1 once discarded srun's hand-off
/// for a `--het-group=1` step, and ran without variables.)
#[test]
fn every_component_follows_one_decision() {
    let _bed = common::testbed();
    let script = format!(
        "srun --het-group=0,1 --torch-cluster sh -c '{REPORT}'; echo rc=$?; \
         srun --het-group=1 --torch-cluster sh -c '{REPORT}'; echo rc=$?"
    );
    let (text, _) = in_het_allocation(&[], &script);
    assert_eq!(text.matches("rc=0").count(), 2, "{text}");
    let lines = het_lines(&text);
    eprintln!("MEASURED words: {:?}", words(&lines));
    assert_eq!(lines.len(), 6, "{text}");
    // --het-group=0,1: ranks 0-3 in one world of 4, one run id.
    let both: Vec<&String> = lines.iter().filter(|l| l.contains("WS=4")).collect();
    let mut ranks: Vec<&str> = both
        .iter()
        .map(|l| l.split_whitespace().nth(1).unwrap())
        .collect();
    ranks.sort();
    assert_eq!(ranks, ["R=0", "R=1", "R=2", "R=3"], "{text}");
    for l in &both {
        let host = l.split_whitespace().next().unwrap();
        let rank: u32 = l.split("R=").nth(1).unwrap()[..1].parse().unwrap();
        assert_eq!(host, if rank < 2 { "node1" } else { "node2" }, "{text}");
    }
    let ids = run_ids(both.iter().copied());
    assert_eq!(ids.len(), 1, "one run id for the step: {text}");
    // --het-group=1: node2's two tasks, ranks 0-1 of a world of 2.
    let one: Vec<&String> = lines.iter().filter(|l| l.contains("WS=2")).collect();
    assert_eq!(one.len(), 2, "{text}");
    for l in &one {
        assert!(l.starts_with("node2 "), "{text}");
    }
    assert_no_node_drained();
}

/// Every component of one step gets the same run id, from srun: with
/// `--export=ALL,SLURM_RESTART_COUNT=5` (only the tasks' environment holds
/// it) component 0 once had `JOB.STEP` and component 1 `JOB.STEP.r5`, an
/// elastic rendezvous that never meets.
#[test]
fn every_component_gets_one_run_id() {
    let _bed = common::testbed();
    let script = format!(
        "srun --het-group=0,1 --export=ALL,SLURM_RESTART_COUNT=5 --torch-cluster sh -c '{REPORT}'; echo rc=$?"
    );
    let (text, _) = in_het_allocation(&[], &script);
    assert!(text.contains("rc=0"), "{text}");
    let lines = het_lines(&text);
    assert_eq!(lines.len(), 4, "{text}");
    let ids = run_ids(lines.iter());
    eprintln!("MEASURED run ids: {ids:?}");
    assert_eq!(ids.len(), 1, "{text}");
}

/// A heterogeneous step srun refuses runs nowhere and ends on every
/// component within seconds: srun cannot resolve the host template's
/// `node2-zz`, which node2's /etc/hosts can. Component 1, which srun's
/// hand-off does not reach, learns the refusal from srun's early word: it
/// neither resolves the name itself nor starts the user's command
/// (`RAN-node2`) before srun's kill.
#[test]
fn a_het_step_srun_refused_ends_on_every_component() {
    let _bed = common::testbed();
    let add = "grep -q node2-zz /etc/hosts || echo '127.0.0.1 node2-zz node1-zz' >> /etc/hosts";
    let out = on("node2", &["sh", "-c", add]);
    assert!(out.status.success(), "{out:?}");
    // `&&`: a shell that proctrack/linuxproc passes over while killing its
    // `sleep` (the testbed's; see docs/reliability.md) does not print DONE
    // unless the sleep ran its 20 s.
    let script = "srun --label --het-group=0,1 --torch-cluster '--tf-host-template={}-zz' \
                  sh -c 'echo RAN-$(hostname); sleep 20 && echo DONE'; echo rc=$?; \
                  srun --het-group=0,1 -n1 hostname; echo next=$?";
    let (text, took) = in_het_allocation(&[], script);
    let remove = "grep -v node2-zz /etc/hosts > /tmp/hosts.tfc; cat /tmp/hosts.tfc > /etc/hosts";
    on("node2", &["sh", "-c", remove]);
    eprintln!("MEASURED refused het step: {took:.1} s\n{text}");
    assert!(text.contains("cannot resolve"), "{text}");
    assert!(
        !text.contains("RAN-"),
        "a component started the command: {text}"
    );
    assert!(!text.contains("DONE"), "a component ran on: {text}");
    assert!(!text.contains("rc=0"), "{text}");
    assert!(text.contains("next=0"), "the next step must run: {text}");
    assert!(took < 15.0, "the refused step took {took:.1} s: {text}");
    assert_no_node_drained();
}

/// One line per task for the host-template steps: its host, rank, world
/// size, the address the plugin injected (MASTER_ADDR) and the interface it
/// named for gloo, beside the task's own fast interface: the one holding the
/// address its `$(hostname)-ib` resolves to (through the resolver: the names
/// are in Docker's DNS only).
const TEMPLATE_REPORT: &str = r#"a=$(getent hosts $(hostname)-ib | cut -d" " -f1); f=$(ip -o addr show to ${a:-none} | cut -d" " -f2); echo "HET $(hostname) R=${RANK-unset} WS=${WORLD_SIZE-unset} MA=${MASTER_ADDR-unset} G=${GLOO_SOCKET_IFNAME-unset} FAST=${f:-none}""#;

/// A heterogeneous batch job (node1: component 0, node2: component 1) with
/// a host template whose names only DNS knows (the testbed's `nodeN-ib`,
/// Docker's aliases on the fast network, in no /etc/hosts): each
/// component's nodes are found on their own names. `--het-group=0,1` runs
/// 4 tasks with MASTER_ADDR node1-ib, `--het-group=1` node2's 2 tasks with
/// MASTER_ADDR node2-ib, each task's gloo on its node's own fast interface.
/// (Component 1 of the first once looked its name up in /etc/hosts only and
/// refused; the second once resolved component 0's node list, the batch
/// script's SLURM_JOB_NODELIST, and refused every task: "node2 is not on
/// <node1-ib's address>/32".)
#[test]
fn a_het_step_with_a_host_template_in_dns_runs_on_every_component() {
    let _bed = common::testbed();
    for host in ["node1", "node2"] {
        let name = format!("{host}-ib");
        let hosts = on(host, &["grep", "-c", &name, "/etc/hosts"]);
        assert_eq!(
            String::from_utf8_lossy(&hosts.stdout).trim(),
            "0",
            "{name} must not be in {host}'s /etc/hosts"
        );
        let dns = on(host, &["getent", "hosts", &name]);
        assert!(
            dns.status.success(),
            "{name} must resolve on {host}: {dns:?}"
        );
    }
    let script = format!(
        "srun --het-group=0,1 --torch-cluster '--tf-host-template={{}}-ib' sh -c '{TEMPLATE_REPORT}'; echo rc=$?; \
         srun --het-group=1 --torch-cluster '--tf-host-template={{}}-ib' sh -c '{TEMPLATE_REPORT}'; echo rc=$?"
    );
    let file = format!("/home/alice/het-template-{}.out", std::process::id());
    let start = Instant::now();
    let out = exec_for(
        180,
        &[
            "sbatch", "--wait", "-o", &file, "-N1", "-n2", "-w", "node1", ":", "-N1", "-n2", "-w",
            "node2", "--wrap", &script,
        ],
    );
    let took = start.elapsed().as_secs_f64();
    let written = exec_for(30, &["cat", &file]);
    exec_for(30, &["rm", "-f", &file]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&written.stdout)
    );
    eprintln!("MEASURED het steps with a template in DNS: {took:.1} s\n{text}");
    let rcs: Vec<&str> = text.lines().filter(|l| l.starts_with("rc=")).collect();
    let lines = het_lines(&text);
    let fast = |l: &str| {
        let f = l.split("FAST=").nth(1).unwrap().trim().to_string();
        assert_ne!(f, "none", "the task found no fast interface: {l}");
        f
    };
    // --het-group=0,1: ranks 0-3 of 4 on node1 and node2, all meeting on
    // node1-ib, each on its own node's fast interface.
    let both: Vec<&String> = lines.iter().filter(|l| l.contains(" WS=4 ")).collect();
    let hosts: Vec<&str> = both
        .iter()
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(hosts, ["node1", "node1", "node2", "node2"], "{text}");
    for l in &both {
        assert!(l.contains(" MA=node1-ib "), "{text}");
        assert!(l.contains(&format!(" G={} ", fast(l))), "{text}");
    }
    // --het-group=1: node2's two tasks, ranks 0-1 of 2, meeting on node2-ib.
    let one: Vec<&String> = lines.iter().filter(|l| l.contains(" WS=2 ")).collect();
    assert_eq!(one.len(), 2, "{text}");
    for l in &one {
        assert!(l.starts_with("node2 "), "{text}");
        assert!(l.contains(" MA=node2-ib "), "{text}");
        assert!(l.contains(&format!(" G={} ", fast(l))), "{text}");
    }
    assert_eq!(rcs, ["rc=0", "rc=0"], "{text}");
    assert!(took < 60.0, "{took:.1} s: {text}");
    assert_no_node_drained();
}

/// An explicit srun option beats an inherited `--tf-off` in a
/// heterogeneous job as in a plain one: `salloc --tf-off`, then `srun
/// --het-group=0,1 --tf-cluster` and `srun --het-group=1 -n2 --tf-cluster`
/// give every task TF_CONFIG. (srun parses its options once per component,
/// so the inherited `--tf-off` was counted as given to srun itself.)
#[test]
fn an_explicit_option_beats_an_inherited_tf_off_in_every_component() {
    let _bed = common::testbed();
    let script = format!(
        "srun --het-group=0,1 --tf-cluster sh -c '{REPORT}'; echo rc=$?; \
         srun --het-group=1 -n2 --tf-cluster sh -c '{REPORT}'; echo rc=$?; \
         srun --het-group=0,1 sh -c '{REPORT}'; echo rc=$?"
    );
    let (text, _) = in_het_allocation(&["--tf-off"], &script);
    assert_eq!(text.matches("rc=0").count(), 3, "{text}");
    let lines = het_lines(&text);
    assert_eq!(lines.len(), 10, "{text}");
    let with_tf = lines.iter().filter(|l| l.contains("TF=set")).count();
    eprintln!("MEASURED with TF_CONFIG: {with_tf} of 6");
    assert_eq!(with_tf, 6, "the two explicit steps' tasks: {text}");
    // The plain step, which the inherited --tf-off leaves alone, holds no
    // word of srun's at all, as without the plugin.
    let untouched = lines.iter().filter(|l| l.ends_with("WORD=unset")).count();
    assert_eq!(untouched, 4, "{text}");
}

/// A helper step that srun says it leaves alone is left alone on every
/// component: `salloc --tf-cluster=ps:1,worker:2` (3 tasks) then
/// `srun --het-group=1 -n2 --overcommit` and `srun --het-group=0,1` (4
/// tasks) run without TF_CONFIG, with srun's one warning. (node2 once
/// refused the first, and srun refused the second itself.)
#[test]
fn an_inherited_spec_that_does_not_fit_is_left_out_on_every_component() {
    let _bed = common::testbed();
    let script = format!(
        "srun --het-group=1 -n2 --overcommit sh -c '{REPORT}'; echo rc=$?; \
         srun --het-group=0,1 sh -c '{REPORT}'; echo rc=$?"
    );
    let (text, _) = in_het_allocation(&["--tf-cluster=ps:1,worker:2"], &script);
    assert_eq!(text.matches("rc=0").count(), 2, "{text}");
    assert_eq!(
        text.matches("is not applied to this step").count(),
        2,
        "{text}"
    );
    let lines = het_lines(&text);
    assert_eq!(lines.len(), 6, "{text}");
    assert!(lines.iter().all(|l| !l.contains("TF=set")), "{text}");
}

/// A batch job that asks for nothing runs as without the plugin, whatever
/// its environment holds: a hand-off that is garbage, of another version or
/// over 64 KiB, and a malformed restart count beside `--torch-cluster` on
/// the job (the batch script is no step's tasks). Each once failed the
/// batch script (the job FAILED). A step that asks for nothing, given such a
/// value by `--export`, runs too.
#[test]
fn a_job_that_asks_for_nothing_runs_whatever_its_environment_holds() {
    let _bed = common::testbed();
    // Hostile values, spelt by hand: no encoder of srun's makes them.
    let long = format!("1;1.0;hosts=n1;runs={}", "0,".repeat(40_000));
    let cases: [(&str, &str, &str); 4] = [
        ("SLURM_TF_CLUSTER", "garbage", ""),
        ("SLURM_TF_CLUSTER", "2;1.0;verdict=none", ""),
        ("SLURM_TF_CLUSTER", &long, ""),
        ("SLURM_RESTART_COUNT", "junk", "--torch-cluster"),
    ];
    for (name, value, option) in cases {
        let file = format!("/home/alice/het-batch-{}.out", std::process::id());
        let mut cmd = vec!["env", &*format!("{name}={value}")]
            .into_iter()
            .map(str::to_string)
            .collect::<Vec<_>>();
        cmd.extend(
            ["sbatch", "--wait", "-N1", "-o", file.as_str()]
                .iter()
                .map(|s| s.to_string()),
        );
        if !option.is_empty() {
            cmd.push(option.to_string());
        }
        cmd.extend(["--wrap".to_string(), "echo ran".to_string()]);
        let args: Vec<&str> = cmd.iter().map(String::as_str).collect();
        let out = exec_for(120, &args);
        let written = exec_for(30, &["cat", file.as_str()]);
        exec_for(30, &["rm", "-f", file.as_str()]);
        let shown = &value[..value.len().min(40)];
        assert!(
            out.status.success(),
            "{name}={shown} {option}: sbatch --wait failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&written.stdout).trim(),
            "ran",
            "{name}={shown} {option}"
        );
    }
    let out = exec_for(
        60,
        &[
            "srun",
            "-n1",
            "--export=ALL,SLURM_TF_CLUSTER=garbage",
            "sh",
            "-c",
            "echo ran",
        ],
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ran");
    assert_no_node_drained();
}

/// A heterogeneous step started from outside its job (`srun --jobid=J
/// --het-group=0,1`, srun's environment without the job's het variables)
/// is refused in one line that says what srun cannot know, and ends on
/// every component; without the option it runs. (Both components once
/// refused it blaming the layout: "srun's task map does not match
/// SLURM_STEP_NODELIST", "rank 0 on node1".)
#[test]
fn a_het_step_from_outside_its_job_says_what_it_cannot_know() {
    let _bed = common::testbed();
    let out = exec_for(
        60,
        &[
            "sbatch",
            "--parsable",
            "-N1",
            "-w",
            "node1",
            ":",
            "-N1",
            "-w",
            "node2",
            "--wrap",
            "sleep 60",
        ],
    );
    let job = String::from_utf8_lossy(&out.stdout)
        .trim()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    assert!(job.parse::<u32>().is_ok(), "{out:?}");
    let jobid = format!("--jobid={job}");
    // Wait until it runs.
    for _ in 0..60 {
        let state = exec_for(30, &["squeue", "-h", "-j", &job, "-o", "%T"]);
        if String::from_utf8_lossy(&state.stdout).contains("RUNNING") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    // Each task's output from its own file.
    let plain = common::srun_tasks_for(
        60,
        &[],
        &[
            &jobid,
            "--het-group=0,1",
            "--overlap",
            "sh",
            "-c",
            "echo PLAIN",
        ],
    );
    let start = Instant::now();
    let asked = common::srun_tasks_for(
        60,
        &[],
        &[
            &jobid,
            "--het-group=0,1",
            "--overlap",
            "--torch-cluster",
            "sh",
            "-c",
            "echo RAN; sleep 20 && echo DONE",
        ],
    );
    let took = start.elapsed().as_secs_f64();
    exec_for(30, &["scancel", &job]);
    let plain_text = String::from_utf8_lossy(&plain.stdout);
    assert_eq!(plain_text.matches("PLAIN").count(), 2, "{plain:?}");
    let stderr = String::from_utf8_lossy(&asked.stderr);
    eprintln!("MEASURED het step from outside its job: {took:.1} s\n{stderr}");
    assert!(!asked.status.success(), "{stderr}");
    assert!(
        !String::from_utf8_lossy(&asked.stdout).contains("DONE"),
        "{asked:?}"
    );
    assert!(stderr.contains("heterogeneous"), "{stderr}");
    assert!(!stderr.contains("does not match"), "{stderr}");
    // A component's own refusal names its case, never an async step's.
    assert!(!stderr.contains("--async"), "{stderr}");
    assert!(took < 15.0, "{took:.1} s: {stderr}");
    assert_no_node_drained();
}

const DIR: &str = "/home/alice/het-torchrun";

/// ddp.py (tests/fixtures/pytorch), for the torchrun step.
fn install_ddp() {
    common::install(
        DIR,
        &[
            ("ddp.py", include_str!("../fixtures/pytorch/ddp.py")),
            ("tfc_report.py", include_str!("../fixtures/tfc_report.py")),
        ],
        "",
    );
}

/// `salloc -N1 -n1 : -N1 -n1`, `srun -n1 : -n1 --torch-cluster torchrun …`:
/// every component gets one PET_RDZV_ID, the heterogeneous job's (torch's
/// static rendezvous prefixes its keys with it, so an id per component, its
/// own job id, would hang the step): the step ends and trains (both ranks,
/// the same weights).
#[test]
fn torchrun_in_a_het_step_trains() {
    let _t = common::exclusive();
    install_ddp();
    let script = format!(
        "cd {DIR}; timeout 150 srun -n1 -w node1 : -n1 -w node2 --torch-cluster \
         torchrun --nproc_per_node=1 --redirects=1 --tee=1 ddp.py; echo rc=$?"
    );
    let reports = Outputs::new("het-torchrun");
    let report_dir = format!("TFC_REPORT_DIR={}", reports.path());
    let out = exec_for(
        240,
        &[
            "env",
            &report_dir,
            "salloc",
            "-N1",
            "-n1",
            "-w",
            "node1",
            ":",
            "-N1",
            "-n1",
            "-w",
            "node2",
            "bash",
            "-c",
            &script,
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("rc=0"),
        "the step failed or hung:\n{text}\n{stderr}"
    );
    let results = reports.reports("RESULT");
    assert_eq!(results.len(), 2, "{text}");
    let mut ranks: Vec<i64> = results
        .iter()
        .map(|r| r["rank"].as_i64().unwrap())
        .collect();
    ranks.sort();
    assert_eq!(ranks, [0, 1], "{text}");
    for r in &results {
        assert_eq!(r["world_size"], 2, "{r}");
        assert_eq!(r["weights_sha256"], results[0]["weights_sha256"], "{text}");
    }
    assert_healthy("torchrun in a het step");
}
