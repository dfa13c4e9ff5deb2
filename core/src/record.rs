//! The record of a step: what every rank was given and how each task ended,
//! so that after a failure `tf-cluster postmortem` can say which rank on
//! which node failed first and where its files are.
//!
//! One directory per step's run (`DIR/<run id>`: `JOB.STEP`, then
//! `JOB.STEP.rN` after the job's N-th requeue, as step ids start again from
//! 0), one file per node (`<host>.jsonl`), JSON Lines of format
//! [`VERSION`]: the node's line, one line per rank it runs, written before
//! its tasks start, then one line per task as it ends. A node writes only
//! its own file, so no two hosts ever append to one file (appends from
//! several NFS clients may interleave). Its size is bounded: a line per
//! rank and per task exit, each far under [`MAX_LINE`].

use std::fmt::Write;

use super::node::Node;

/// The record's format; a reader refuses lines of a later one.
pub const VERSION: u32 = 1;

/// Longest line written (a rank's GPU list of [`crate::MAX_GPUS`] ids fits).
pub const MAX_LINE: usize = 16 << 10;

/// One value as a JSON string.
pub fn quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn opt(text: Option<&str>) -> String {
    text.map_or_else(|| "null".into(), quoted)
}

/// A node's line: the step, its run, the node and its tasks.
pub struct NodeLine<'a> {
    pub job: u32,
    pub step: u32,
    pub restart_count: u32,
    pub run_id: &'a str,
    pub host: &'a str,
    pub address: Option<&'a str>,
    pub interface: Option<&'a str>,
    /// The step's tasks, every node's.
    pub tasks: u32,
}

impl NodeLine<'_> {
    pub fn text(&self) -> String {
        format!(
            "{{\"record\":{VERSION},\"kind\":\"node\",\"job\":{},\"step\":{},\"restart_count\":{},\"run_id\":{},\"host\":{},\"address\":{},\"interface\":{},\"tasks\":{}}}\n",
            self.job,
            self.step,
            self.restart_count,
            quoted(self.run_id),
            quoted(self.host),
            opt(self.address),
            opt(self.interface),
            self.tasks,
        )
    }
}

/// The node's line and its ranks' lines, before its tasks start. A step
/// without a framework option has its node's line alone ([`NodeLine`]):
/// its node learns each rank as its task ends, from its exit line.
pub fn node_lines(node: &Node, run_id: &str) -> String {
    let step = node.step();
    let host = step.nodename.as_deref().unwrap_or("?");
    let (job, id) = step.job_step.unwrap_or((0, 0));
    let interface = step.network.as_ref().map(|n| n.interface.as_str());
    let address = node.this_address();
    let mut out = NodeLine {
        job,
        step: id,
        restart_count: node.step().restart_count,
        run_id,
        host,
        address: address.as_deref(),
        interface,
        tasks: node.num_tasks(),
    }
    .text();
    for (rank, local) in node.here() {
        let ports: Vec<String> = node
            .ports_of(local, rank == 0)
            .iter()
            .map(u16::to_string)
            .collect();
        let line = format!(
            "{{\"record\":{VERSION},\"kind\":\"rank\",\"rank\":{rank},\"local\":{local},\"host\":{},\"address\":{},\"ports\":[{}],\"gpus\":{},\"interface\":{},\"role\":{},\"run_id\":{}}}\n",
            quoted(host),
            opt(address.as_deref()),
            ports.join(","),
            opt(node.gpus_of(local).as_deref()),
            opt(interface),
            opt(node.role_of(rank).as_deref()),
            quoted(run_id),
        );
        if line.len() <= MAX_LINE {
            out.push_str(&line);
        }
    }
    out
}

/// How a task ended: its wait status as slurmstepd reaped it.
pub fn exit_line(rank: u32, local: u32, host: &str, status: i32, unix_ns: u128) -> String {
    let (code, signal) = if libc_exited(status) {
        (Some((status >> 8) & 0xff), None)
    } else {
        (None, Some(status & 0x7f))
    };
    let num = |v: Option<i32>| v.map_or_else(|| "null".into(), |v| v.to_string());
    format!(
        "{{\"record\":{VERSION},\"kind\":\"exit\",\"rank\":{rank},\"local\":{local},\"host\":{},\"code\":{},\"signal\":{},\"unix_ns\":{unix_ns}}}\n",
        quoted(host),
        num(code),
        num(signal),
    )
}

/// WIFEXITED.
fn libc_exited(status: i32) -> bool {
    status & 0x7f == 0
}

/// The run's directory name: only the run id's own characters, so that no
/// id can name another place.
pub fn run_dir_name(run_id: &str) -> Option<&str> {
    let ok = !run_id.is_empty()
        && run_id.len() <= 64
        && !run_id.starts_with('.')
        && run_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.');
    ok.then_some(run_id)
}

/// Where a user's runs go under the record's directory `DIR`, from what
/// `DIR` is (its owner and mode, links followed: it is the admin's or the
/// user's own choice) and who the user is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runs {
    /// `DIR` is the user's and no one else may write in it: the runs go in
    /// `DIR` itself.
    InDir,
    /// `DIR` is shared (another's, or writable by others with the sticky
    /// bit, as `/tmp`): the runs go in `DIR/<uid>`, a directory that must be
    /// the user's and writable by no one else.
    PerUser,
    /// `DIR` is writable by others without the sticky bit: anyone may
    /// rename or replace a user's directory in it, so nothing is written.
    Unsafe,
}

/// The sticky bit and the group's and others' write bits of a mode.
const STICKY: u32 = 0o1000;
const OTHERS_WRITE: u32 = 0o022;

/// Where `uid`'s runs go under a directory of owner `dir_uid` and mode
/// `dir_mode` (no allocation: the plugin's writing child calls it after its
/// fork).
pub fn runs_under(dir_uid: u32, dir_mode: u32, uid: u32) -> Runs {
    let others_write = dir_mode & OTHERS_WRITE != 0;
    if others_write && dir_mode & STICKY == 0 {
        Runs::Unsafe
    } else if dir_uid == uid && !others_write {
        Runs::InDir
    } else {
        Runs::PerUser
    }
}

/// Whether a directory of owner `owner` and mode `mode` is `uid`'s own,
/// writable by no one else: the only kind a run is written into or read
/// from below `DIR`.
pub fn only_theirs(owner: u32, mode: u32, uid: u32) -> bool {
    owner == uid && mode & OTHERS_WRITE == 0
}

/// Whether a directory of owner `owner` and mode `mode` is the admin's
/// own: root's, writable by no one else. Only there, and only where it is
/// the site's configured record directory, does the plugin make a user's
/// directory as root (no one but root could have made what is in it).
pub fn admins_own(owner: u32, mode: u32) -> bool {
    owner == 0 && mode & OTHERS_WRITE == 0
}

/// Whether a directory on the way to the admin's own (opened without
/// following a link) lets no one but root rename or replace what is in
/// it: root's, and writable by no one else or sticky (as `/`, `/tmp`).
pub fn roots_way(owner: u32, mode: u32) -> bool {
    owner == 0 && (mode & OTHERS_WRITE == 0 || mode & STICKY != 0)
}

/// The per-user directory's name under a shared `DIR`: the user's id.
pub fn user_dir_name(uid: u32) -> String {
    uid.to_string()
}

/// Text read from a record, file names included, as it may be shown on a
/// terminal: every control character (C0, DEL, C1) escaped as `\xNN` or
/// `\u{NNNN}`, the backslash doubled, so that nothing a record holds can
/// move the cursor, set a title or start a line of its own.
pub fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if (0x80..0xa0).contains(&(c as u32))
                || matches!(c, '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}')
                || ('\u{202a}'..='\u{202e}').contains(&c)
                || ('\u{2066}'..='\u{2069}').contains(&c) =>
            {
                let _ = write!(out, "\\u{{{:04x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// A host's file name in the run's directory.
pub fn node_file_name(host: &str) -> Option<String> {
    let ok = !host.is_empty()
        && host.len() <= 255 - 6
        && !host.starts_with('.')
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'));
    ok.then(|| format!("{host}.jsonl"))
}

/// Where each task's debugging output goes with a record: under the run's
/// directory, named by rank (the directory is named by the run id), so that
/// it outlives the allocation and `tf-cluster postmortem` finds it. Each is
/// a default: a variable the step's environment already holds (the user's,
/// as srun sent it) is left to the user, never replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DebugFiles {
    run_dir: String,
    /// PyTorch's flight recorder's dump file prefix (torch appends its rank).
    torch_fr: bool,
    /// NCCL's debug file: only where NCCL_DEBUG asks for output.
    nccl: bool,
    /// torchrun's `--log-dir` (its workers' error files, and logs with
    /// `--redirects`/`--tee`).
    torchrun: bool,
}

/// The flight recorder's dump prefix: the current name first, then the one
/// torch read before it (torch reads the first set, so both are given).
pub const TORCH_FR_VARS: [&str; 2] = ["TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"];

impl DebugFiles {
    /// The defaults for a run whose directory is `run_dir`, given the
    /// step's environment as srun sent it (`step_env`): None when the user
    /// set every one of them.
    pub fn new<'a>(run_dir: &str, step_env: impl Fn(&str) -> Option<&'a str>) -> Option<Self> {
        let set = |name: &str| step_env(name).is_some();
        let files = DebugFiles {
            run_dir: run_dir.trim_end_matches('/').to_string(),
            torch_fr: !TORCH_FR_VARS.iter().any(|name| set(name)),
            nccl: step_env("NCCL_DEBUG").is_some_and(|v| !v.trim().is_empty())
                && !set("NCCL_DEBUG_FILE"),
            torchrun: !set("PET_LOG_DIR"),
        };
        (files.torch_fr || files.nccl || files.torchrun).then_some(files)
    }

    /// One rank's variables.
    pub fn vars(&self, rank: u32) -> Vec<(&'static str, String)> {
        let dir = &self.run_dir;
        let mut out = Vec::with_capacity(4);
        if self.torch_fr {
            for name in TORCH_FR_VARS {
                out.push((name, format!("{dir}/rank{rank}.torch-fr.")));
            }
        }
        if self.nccl {
            // NCCL expands %h (host) and %p (pid): one file per process,
            // as torchrun's workers share their task's environment.
            out.push((
                "NCCL_DEBUG_FILE",
                format!("{dir}/rank{rank}.nccl.%h.%p.log"),
            ));
        }
        if self.torchrun {
            out.push(("PET_LOG_DIR", format!("{dir}/rank{rank}.torchrun")));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<&'a str> {
        move |name| vars.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
    }

    #[test]
    fn debug_files_go_under_the_run_by_rank() {
        let files = DebugFiles::new("/rec/42.0/", env(&[("NCCL_DEBUG", "INFO")])).unwrap();
        assert_eq!(
            files.vars(5),
            vec![
                (
                    "TORCH_FR_DUMP_TEMP_FILE",
                    "/rec/42.0/rank5.torch-fr.".to_string()
                ),
                (
                    "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
                    "/rec/42.0/rank5.torch-fr.".to_string()
                ),
                (
                    "NCCL_DEBUG_FILE",
                    "/rec/42.0/rank5.nccl.%h.%p.log".to_string()
                ),
                ("PET_LOG_DIR", "/rec/42.0/rank5.torchrun".to_string()),
            ]
        );
    }

    #[test]
    fn nccl_debug_file_only_where_nccl_debug_is_set() {
        for nccl_debug in [None, Some(""), Some("  ")] {
            let vars: Vec<(&str, &str)> =
                nccl_debug.map(|v| ("NCCL_DEBUG", v)).into_iter().collect();
            let files = DebugFiles::new("/rec/1.0", env(&vars)).unwrap();
            let names: Vec<&str> = files.vars(0).into_iter().map(|(n, _)| n).collect();
            assert!(
                !names.contains(&"NCCL_DEBUG_FILE"),
                "{nccl_debug:?}: {names:?}"
            );
            assert!(names.contains(&"PET_LOG_DIR"));
        }
    }

    #[test]
    fn a_variable_the_user_set_is_left_to_the_user() {
        // Either flight-recorder name keeps both: torch reads the first set.
        for name in TORCH_FR_VARS {
            let files = DebugFiles::new("/rec/1.0", env(&[(name, "/mine/fr")])).unwrap();
            let names: Vec<&str> = files.vars(0).into_iter().map(|(n, _)| n).collect();
            assert_eq!(names, ["PET_LOG_DIR"], "{name}");
        }
        let user = [
            ("NCCL_DEBUG", "WARN"),
            ("NCCL_DEBUG_FILE", "/mine/nccl.%h.%p"),
            ("PET_LOG_DIR", "/mine/torchrun"),
        ];
        let files = DebugFiles::new("/rec/1.0", env(&user)).unwrap();
        let names: Vec<&str> = files.vars(0).into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, TORCH_FR_VARS);
        // An empty value is still the user's choice (torchrun: no log dir).
        let files = DebugFiles::new("/rec/1.0", env(&[("PET_LOG_DIR", "")])).unwrap();
        assert!(files.vars(0).iter().all(|(n, _)| *n != "PET_LOG_DIR"));
        // Everything set by the user: nothing to give.
        let all = [
            ("TORCH_FR_DUMP_TEMP_FILE", "/m"),
            ("NCCL_DEBUG", "INFO"),
            ("NCCL_DEBUG_FILE", "/m"),
            ("PET_LOG_DIR", "/m"),
        ];
        assert_eq!(DebugFiles::new("/rec/1.0", env(&all)), None);
    }

    #[test]
    fn exit_lines_tell_a_code_from_a_signal() {
        let killed = exit_line(3, 1, "node2", 9, 1_700_000_000_123_456_789);
        assert_eq!(
            killed,
            "{\"record\":1,\"kind\":\"exit\",\"rank\":3,\"local\":1,\"host\":\"node2\",\"code\":null,\"signal\":9,\"unix_ns\":1700000000123456789}\n"
        );
        let failed = exit_line(0, 0, "n", 42 << 8, 5);
        assert!(failed.contains("\"code\":42,\"signal\":null"), "{failed}");
        let core = exit_line(0, 0, "n", 11 | 0x80, 5);
        assert!(core.contains("\"code\":null,\"signal\":11"), "{core}");
    }

    #[test]
    fn strings_are_json() {
        assert_eq!(quoted("a\"b\\c\nd"), "\"a\\\"b\\\\c\\u000ad\"");
    }

    #[test]
    fn runs_go_under_a_directory_only_the_user_writes() {
        let alice = 1000;
        // The user's own private directory: the runs in it.
        assert_eq!(runs_under(alice, 0o755, alice), Runs::InDir);
        assert_eq!(runs_under(alice, 0o700, alice), Runs::InDir);
        // Shared as /tmp (root's or the user's own, 1777), or the admin's
        // (0755, users' directories made as root by the plugin): one per user.
        assert_eq!(runs_under(0, 0o1777, alice), Runs::PerUser);
        assert_eq!(runs_under(alice, 0o1777, alice), Runs::PerUser);
        assert_eq!(runs_under(0, 0o755, alice), Runs::PerUser);
        assert_eq!(runs_under(1001, 0o755, alice), Runs::PerUser);
        assert_eq!(runs_under(0, 0o3775, alice), Runs::PerUser);
        // Writable by others without the sticky bit: anyone may replace a
        // user's directory.
        assert_eq!(runs_under(0, 0o777, alice), Runs::Unsafe);
        assert_eq!(runs_under(alice, 0o775, alice), Runs::Unsafe);
        assert_eq!(runs_under(0, 0o2770, alice), Runs::Unsafe);
        assert!(only_theirs(alice, 0o700, alice));
        assert!(only_theirs(alice, 0o755, alice));
        assert!(!only_theirs(1001, 0o700, alice));
        assert!(!only_theirs(alice, 0o777, alice));
        assert!(!only_theirs(alice, 0o1777, alice));
        assert!(!only_theirs(alice, 0o770, alice));
        assert_eq!(user_dir_name(alice), "1000");
    }

    #[test]
    fn root_makes_a_users_directory_only_in_roots_own() {
        assert!(admins_own(0, 0o755));
        assert!(admins_own(0, 0o711));
        assert!(!admins_own(0, 0o1777), "anyone may make a name first");
        assert!(!admins_own(0, 0o775));
        assert!(!admins_own(1000, 0o755));
        // On the way: sticky directories of root's (/tmp) hold root's
        // entries safely; a group's or a user's directory does not.
        assert!(roots_way(0, 0o755));
        assert!(roots_way(0, 0o1777));
        assert!(!roots_way(0, 0o777));
        assert!(!roots_way(0, 0o775));
        assert!(!roots_way(1000, 0o755));
    }

    #[test]
    fn control_characters_are_shown_escaped() {
        assert_eq!(printable("node1"), "node1");
        assert_eq!(printable("a\x1b[2Jb"), "a\\x1b[2Jb");
        assert_eq!(printable("x\ny\rz\t"), "x\\x0ay\\x0dz\\x09");
        assert_eq!(printable("\u{7f}\u{9b}"), "\\x7f\\u{009b}");
        assert_eq!(printable("a\u{202e}b"), "a\\u{202e}b");
        // An escape already written out stays told apart from a real one.
        assert_eq!(printable("\\x1b"), "\\\\x1b");
        assert_eq!(printable("GPU 0,1 été"), "GPU 0,1 été");
    }

    #[test]
    fn names_never_leave_the_directory() {
        assert_eq!(run_dir_name("42.0"), Some("42.0"));
        assert_eq!(run_dir_name("42.0.r1"), Some("42.0.r1"));
        for bad in ["", "..", ".x", "a/b", "42 0"] {
            assert_eq!(run_dir_name(bad), None, "{bad}");
        }
        assert_eq!(node_file_name("node2").as_deref(), Some("node2.jsonl"));
        for bad in ["", "..", "a/b", ".hidden"] {
            assert_eq!(node_file_name(bad), None, "{bad}");
        }
    }
}
