//! `tf-cluster postmortem` on a record directory that holds what a hostile
//! hand put there: it reads only regular files (not a FIFO, not a link to
//! /dev/zero), bounded in bytes per file and in all, finds a run among more
//! entries than it lists, and prints no control character. Each case in a
//! directory of its own (the user's own private directory: the runs go in it
//! directly), no Slurm needed.

mod hermetic;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tfc-pm-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
    d
}

/// A run's record: one node, `ranks` ranks, rank 1 killed by signal 9.
fn record(dir: &Path, run: &str, host: &str, ranks: u32) {
    let run_dir = dir.join(run);
    std::fs::create_dir_all(&run_dir).unwrap();
    let mut text = format!(
        "{{\"record\":1,\"kind\":\"node\",\"job\":42,\"step\":0,\"restart_count\":0,\"run_id\":\"{run}\",\"host\":\"{host}\",\"address\":null,\"interface\":null,\"tasks\":{ranks}}}\n"
    );
    for r in 0..ranks {
        text.push_str(&format!(
            "{{\"record\":1,\"kind\":\"rank\",\"rank\":{r},\"local\":{r},\"host\":\"{host}\",\"address\":\"{host}\",\"ports\":[],\"gpus\":null,\"interface\":null,\"role\":null,\"run_id\":\"{run}\"}}\n"
        ));
        let end = if r == 1 {
            "\"code\":null,\"signal\":9"
        } else {
            "\"code\":0,\"signal\":null"
        };
        text.push_str(&format!(
            "{{\"record\":1,\"kind\":\"exit\",\"rank\":{r},\"local\":{r},\"host\":\"{host}\",{end},\"unix_ns\":{}}}\n",
            1_000_000_000 + u64::from(r)
        ));
    }
    std::fs::write(run_dir.join(format!("{host}.jsonl")), text).unwrap();
}

/// What the command did, how long it took and its peak memory (KiB); it
/// is killed after `limit`.
struct Ran {
    out: Output,
    took: Duration,
    max_rss_kib: i64,
    killed: bool,
}

fn postmortem(dir: &Path, wanted: &str, limit: Duration) -> Ran {
    // Reaped below by wait4, which also gives its peak memory.
    #[allow(clippy::zombie_processes)]
    let mut child = hermetic::tf_cluster()
        .args(["postmortem", wanted, "--tf-record"])
        .arg(dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    // The pipes read on threads of their own, so that a full pipe never
    // holds the child.
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut stdout, &mut v).unwrap();
        v
    });
    let err_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut stderr, &mut v).unwrap();
        v
    });
    let t0 = Instant::now();
    let mut killed = false;
    let mut status = 0;
    // SAFETY: rusage filled by wait4 for our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        let done = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if done == pid {
            break;
        }
        if t0.elapsed() > limit && !killed {
            unsafe { libc::kill(pid, libc::SIGKILL) };
            killed = true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let took = t0.elapsed();
    use std::os::unix::process::ExitStatusExt;
    Ran {
        out: Output {
            status: std::process::ExitStatus::from_raw(status),
            stdout: out_reader.join().unwrap(),
            stderr: err_reader.join().unwrap(),
        },
        took,
        max_rss_kib: usage.ru_maxrss,
        killed,
    }
}

fn text(ran: &Ran) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&ran.out.stdout),
        String::from_utf8_lossy(&ran.out.stderr)
    )
}

#[test]
fn a_fifo_and_a_link_to_dev_zero_are_skipped_and_said() {
    let dir = scratch("fifo");
    record(&dir, "42.0", "node1", 2);
    let run = dir.join("42.0");
    let fifo = std::ffi::CString::new(run.join("node2.jsonl").to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    std::os::unix::fs::symlink("/dev/zero", run.join("node3.jsonl")).unwrap();
    let ran = postmortem(&dir, "42.0", Duration::from_secs(20));
    let ctx = text(&ran);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(!ran.killed, "held {:?}:\n{ctx}", ran.took);
    assert!(ran.took < Duration::from_secs(5), "{:?}\n{ctx}", ran.took);
    assert!(ran.out.status.success(), "{ctx}");
    assert!(
        ctx.starts_with("run 42.0: 2 rank(s) recorded of 2 on 1 node(s)"),
        "{ctx}"
    );
    assert!(ctx.contains("first failure: rank 1, node1"), "{ctx}");
    assert!(
        ctx.contains(&format!(
            "{}/node2.jsonl is not a regular file: skipped",
            run.display()
        )),
        "{ctx}"
    );
    assert!(
        ctx.contains(&format!("{}/node3.jsonl is a link: skipped", run.display())),
        "{ctx}"
    );
    assert!(ran.max_rss_kib < 100 << 10, "{} KiB", ran.max_rss_kib);
}

/// Eight sparse files of 64 MiB each (the size a record file was allowed
/// before), one of 1 TiB: none is read whole, the memory stays small.
#[test]
fn huge_sparse_files_are_not_read() {
    let dir = scratch("sparse");
    record(&dir, "42.0", "node1", 2);
    let run = dir.join("42.0");
    for i in 0..8 {
        sparse(&run.join(format!("big{i}.jsonl")), 64 << 20);
    }
    sparse(&run.join("huge.jsonl"), 1 << 40);
    let ran = postmortem(&dir, "42.0", Duration::from_secs(60));
    let ctx = text(&ran);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(!ran.killed && ran.out.status.success(), "{ctx}");
    assert!(
        ctx.starts_with("run 42.0: 2 rank(s) recorded of 2 on 1 node(s)"),
        "{ctx}"
    );
    assert!(
        ctx.contains(&format!(
            "{}/huge.jsonl is larger than 8 MiB: skipped",
            run.display()
        )),
        "{ctx}"
    );
    assert_eq!(
        ctx.matches("is larger than 8 MiB: skipped").count(),
        9,
        "{ctx}"
    );
    assert!(
        ran.max_rss_kib < 100 << 10,
        "{} KiB in {:?}",
        ran.max_rss_kib,
        ran.took
    );
}

/// Files each under the cap that add up past the bound in all: the rest
/// are not read, and that is said.
#[test]
fn the_bytes_read_in_all_are_bounded() {
    let dir = scratch("total");
    record(&dir, "42.0", "node1", 2);
    let run = dir.join("42.0");
    for i in 0..12 {
        sparse(&run.join(format!("z{i:02}.jsonl")), (8 << 20) - 1);
    }
    let ran = postmortem(&dir, "42.0", Duration::from_secs(60));
    let ctx = text(&ran);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(!ran.killed && ran.out.status.success(), "{ctx}");
    // node1.jsonl sorts first: it is read.
    assert!(
        ctx.starts_with("run 42.0: 2 rank(s) recorded of 2 on 1 node(s)"),
        "{ctx}"
    );
    let cut: Vec<&str> = ctx
        .lines()
        .filter(|l| l.contains("not read: the record's files exceed 64 MiB in all"))
        .collect();
    assert_eq!(cut.len(), 1, "{ctx}");
    assert!(cut[0].starts_with("(5 file(s) not read"), "{ctx}");
    assert!(ran.max_rss_kib < 300 << 10, "{} KiB", ran.max_rss_kib);
}

/// 100,000 entries beside 20 runs of the job: each run is found by its
/// name, and the job's listing says it was cut.
#[test]
fn a_run_among_more_entries_than_are_listed_is_found() {
    let dir = scratch("many");
    for step in 0..20 {
        record(&dir, &format!("42.{step}"), "node1", 2);
    }
    for i in 0..100_000 {
        std::fs::File::create(dir.join(format!("junk{i}"))).unwrap();
    }
    let mut missed = Vec::new();
    for step in 0..20 {
        let run = format!("42.{step}");
        let ran = postmortem(&dir, &run, Duration::from_secs(30));
        let ctx = text(&ran);
        if !ctx.starts_with(&format!("run {run}: 2 rank(s) recorded of 2")) {
            missed.push(format!("{run}: {ctx}"));
        }
    }
    let all = postmortem(&dir, "42", Duration::from_secs(30));
    let all_ctx = text(&all);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(
        missed.is_empty(),
        "{} of 20 missed: {missed:?}",
        missed.len()
    );
    assert!(
        all_ctx.contains(&format!(
            "(the listing of {} stopped at 65536 entries: some runs may not be shown)",
            dir.display()
        )),
        "{all_ctx}"
    );
}

#[test]
fn escape_sequences_are_shown_escaped() {
    let dir = scratch("escapes");
    let host = "node1\\u001b]0;pwned\\u0007\\u001b[2J\\u009b31m";
    record(&dir, "42.0", "node1", 2);
    let run = dir.join("42.0");
    let text_ = std::fs::read_to_string(run.join("node1.jsonl")).unwrap();
    std::fs::write(
        run.join("node1.jsonl"),
        text_.replace("\"host\":\"node1\"", &format!("\"host\":\"{host}\"")),
    )
    .unwrap();
    // A file name with an escape too (a debug file of the failed rank).
    std::fs::write(run.join("rank1.nccl.\x1b[31mred.log"), "x").unwrap();
    let ran = postmortem(&dir, "42.0", Duration::from_secs(20));
    let ctx = text(&ran);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(ran.out.status.success(), "{ctx}");
    let controls: Vec<char> = ctx
        .chars()
        .filter(|&c| c != '\n' && (c.is_control() || ('\u{80}'..'\u{a0}').contains(&c)))
        .collect();
    assert!(controls.is_empty(), "{controls:?} in:\n{ctx}");
    assert!(
        ctx.contains(
            "first failure: rank 1, node1\\x1b]0;pwned\\x07\\x1b[2J\\u{009b}31m: signal 9"
        ),
        "{ctx}"
    );
    assert!(ctx.contains("rank1.nccl.\\x1b[31mred.log"), "{ctx}");
}

/// A sparse file of `len` bytes at `path`.
fn sparse(path: &std::path::Path, len: u64) {
    std::fs::File::create(path).unwrap().set_len(len).unwrap();
}

/// `postmortem` without `--tf-record`, as the run `tf-cluster` is given:
/// `--tf-record` alone.
fn postmortem_here(wanted: &str, env: &[(&str, String)]) -> Output {
    hermetic::tf_cluster()
        .args(["postmortem", wanted])
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .unwrap()
}

/// Without `--tf-record`, the record's directory is the option as the job
/// inherited it (sbatch hands `--tf-record` to the job's srun in
/// SLURM_SPANK__SLURM_SPANK_OPTION_tf_cluster_tf_record), else the site's
/// `record=` on the plugin's plugstack.conf line; with neither, the error
/// says what to give.
#[test]
fn the_record_directory_is_the_jobs_or_the_sites() {
    let dir = scratch("inherited");
    record(&dir, "42.0", "node1", 2);
    let inherited = [(
        "SLURM_SPANK__SLURM_SPANK_OPTION_tf_cluster_tf_record",
        dir.to_str().unwrap().to_string(),
    )];
    let out = postmortem_here("42.0", &inherited);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(text.contains("first failure: rank 1"), "{text}");

    let site = scratch("site");
    record(&site, "43.0", "node2", 2);
    let conf = scratch("site-conf");
    let so = conf.join("tf_cluster.so");
    std::fs::write(&so, b"").unwrap();
    std::fs::write(
        conf.join("plugstack.conf"),
        format!("optional {} record={}\n", so.display(), site.display()),
    )
    .unwrap();
    std::fs::write(
        conf.join("slurm.conf"),
        format!(
            "ClusterName=c\nPlugStackConfig={}\n",
            conf.join("plugstack.conf").display()
        ),
    )
    .unwrap();
    let at_site = [(
        "SLURM_CONF",
        conf.join("slurm.conf").to_str().unwrap().to_string(),
    )];
    let out = postmortem_here("43.0", &at_site);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(text.contains("first failure: rank 1, node2"), "{text}");

    let out = postmortem_here("43.0", &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("--tf-record=DIR"), "{err}");
    for d in [dir, site, conf] {
        std::fs::remove_dir_all(d).unwrap();
    }
}
