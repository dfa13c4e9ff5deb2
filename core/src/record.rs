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
    node_lines_placed(node, run_id, &|_| None)
}

/// [`node_lines`] with each local task's CPUs and memory nodes where they
/// are chosen from its GPUs (`placed`: by local id, the CPU list and the
/// nodes' list).
pub fn node_lines_placed(
    node: &Node,
    run_id: &str,
    placed: &dyn Fn(u32) -> Option<(String, String)>,
) -> String {
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
            "{{\"record\":{VERSION},\"kind\":\"rank\",\"rank\":{rank},\"local\":{local},\"host\":{},\"address\":{},\"ports\":[{}],\"gpus\":{},\"interface\":{},\"role\":{},\"run_id\":{}{}}}\n",
            quoted(host),
            opt(address.as_deref()),
            ports.join(","),
            opt(node.gpus_of(local).as_deref()),
            opt(interface),
            opt(node.role_of(rank).as_deref()),
            quoted(run_id),
            placed(local).map_or(String::new(), |(cpus, mems)| format!(
                ",\"cpus\":{},\"mems\":{}",
                quoted(&cpus),
                quoted(&mems)
            )),
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

/// A node a requeue excluded from the job (`--tf-exclude-max`), and why.
pub fn excluded_line(node: &str, why: &str, unix_ns: u128) -> String {
    format!(
        "{{\"record\":{VERSION},\"kind\":\"excluded\",\"host\":{},\"why\":{},\"unix_ns\":{unix_ns}}}\n",
        quoted(node),
        quoted(why),
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
/// as srun sent it) is left to the user, never replaced. One entry of
/// [`DEBUG_DEFAULTS`] per default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DebugFiles {
    run_dir: String,
    /// The node's port for NCCL's RAS, where the step took one
    /// (crate::frameworks::ras_ports).
    ras_port: Option<u16>,
    /// The entries of [`DEBUG_DEFAULTS`] given, in table order.
    given: Vec<&'static DebugDefault>,
}

/// One default a rank gets with a record.
#[derive(Debug, PartialEq, Eq)]
pub struct DebugDefault {
    /// Any one of these in the step's environment (even empty) leaves the
    /// entry to the user: a program reads the first of them it knows.
    pub user: &'static [&'static str],
    /// Given only where this variable is set and not blank (None: always).
    pub only_with: Option<&'static str>,
    /// The variables given, each the same value.
    pub given: &'static [&'static str],
    /// The value for a rank.
    pub value: DebugValue,
}

/// What a [`DebugDefault`] gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DebugValue {
    /// `DIR/rank<N>.` followed by this.
    RankPath(&'static str),
    /// This text.
    Fixed(&'static str),
    /// `localhost:<the node's RAS port>` (not given without the port).
    RasAddress,
}

/// The flight recorder's dump prefix: the current name first, then the one
/// torch read before it (torch reads the first set, so both are given);
/// torch appends the process's global rank.
pub const TORCH_FR_VARS: [&str; 2] = ["TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"];

/// The flight recorder's trigger pipe's stem: ProcessGroupNCCL makes the
/// FIFO `<stem><global rank>.pipe` (only where the recorder's buffer size
/// is above 0) and dumps when anything is written to it.
pub const TORCH_FR_PIPE_VAR: &str = "TORCH_NCCL_DEBUG_INFO_PIPE_FILE";

/// What follows `rank<N>.` in the name of the flight recorder's dumps.
pub const TORCH_FR_DUMP: &str = "torch-fr.";
/// What follows `rank<N>.` in the stem of its trigger pipe.
pub const TORCH_FR_PIPE: &str = "torch-fr-pipe.";

/// Every default a rank gets with a record, in the order they are set.
pub static DEBUG_DEFAULTS: [DebugDefault; 7] = [
    // PyTorch's flight recorder: where it dumps.
    DebugDefault {
        user: &TORCH_FR_VARS,
        only_with: None,
        given: &TORCH_FR_VARS,
        value: DebugValue::RankPath(TORCH_FR_DUMP),
    },
    // Its ring buffer: on (torch's own default since 2.5 or so, 0 before);
    // the trigger pipe is made only where the older name is above 0.
    DebugDefault {
        user: &["TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"],
        only_with: None,
        given: &["TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"],
        value: DebugValue::Fixed("2000"),
    },
    // A dump when a collective times out.
    DebugDefault {
        user: &["TORCH_NCCL_DUMP_ON_TIMEOUT"],
        only_with: None,
        given: &["TORCH_NCCL_DUMP_ON_TIMEOUT"],
        value: DebugValue::Fixed("1"),
    },
    // A dump on demand: `tf-cluster hang` writes to the pipe.
    DebugDefault {
        user: &[TORCH_FR_PIPE_VAR],
        only_with: None,
        given: &[TORCH_FR_PIPE_VAR],
        value: DebugValue::RankPath(TORCH_FR_PIPE),
    },
    // NCCL's debug file: only where NCCL_DEBUG asks for output. NCCL
    // expands %h (host) and %p (pid): one file per process, as torchrun's
    // workers share their task's environment.
    DebugDefault {
        user: &["NCCL_DEBUG_FILE"],
        only_with: Some("NCCL_DEBUG"),
        given: &["NCCL_DEBUG_FILE"],
        value: DebugValue::RankPath("nccl.%h.%p.log"),
    },
    // torchrun's `--log-dir` (its workers' error files, and logs with
    // `--redirects`/`--tee`).
    DebugDefault {
        user: &["PET_LOG_DIR"],
        only_with: None,
        given: &["PET_LOG_DIR"],
        value: DebugValue::RankPath("torchrun"),
    },
    // NCCL's RAS: its processes listen for `ncclras` on one address per
    // node, by default localhost:28028 for every job; NCCL asks each job
    // sharing a node for an address of its own: the step's own port.
    DebugDefault {
        user: &["NCCL_RAS_ADDR"],
        only_with: None,
        given: &["NCCL_RAS_ADDR"],
        value: DebugValue::RasAddress,
    },
];

impl DebugFiles {
    /// The defaults for a run whose directory is `run_dir` (`ras_port`:
    /// the node's port for NCCL's RAS), given the step's environment as
    /// srun sent it (`step_env`): None when the user set every one of them.
    pub fn new<'a>(
        run_dir: &str,
        ras_port: Option<u16>,
        step_env: impl Fn(&str) -> Option<&'a str>,
    ) -> Option<Self> {
        let given: Vec<&'static DebugDefault> = DEBUG_DEFAULTS
            .iter()
            .filter(|d| !d.user.iter().any(|name| step_env(name).is_some()))
            .filter(|d| {
                d.only_with
                    .is_none_or(|name| step_env(name).is_some_and(|v| !v.trim().is_empty()))
            })
            .filter(|d| d.value != DebugValue::RasAddress || ras_port.is_some())
            .collect();
        (!given.is_empty()).then(|| DebugFiles {
            run_dir: run_dir.trim_end_matches('/').to_string(),
            ras_port,
            given,
        })
    }

    /// One rank's variables.
    pub fn vars(&self, rank: u32) -> Vec<(&'static str, String)> {
        let dir = &self.run_dir;
        let mut out = Vec::with_capacity(10);
        for d in &self.given {
            let value = match d.value {
                DebugValue::RankPath(tail) => format!("{dir}/rank{rank}.{tail}"),
                DebugValue::Fixed(text) => text.to_string(),
                DebugValue::RasAddress => match self.ras_port {
                    Some(port) => format!("localhost:{port}"),
                    None => continue,
                },
            };
            out.extend(d.given.iter().map(|name| (*name, value.clone())));
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

    fn names(files: &DebugFiles) -> Vec<&'static str> {
        files.vars(0).into_iter().map(|(n, _)| n).collect()
    }

    #[test]
    fn debug_files_go_under_the_run_by_rank() {
        let files = DebugFiles::new("/rec/42.0/", Some(20017), env(&[("NCCL_DEBUG", "INFO")]));
        let vars = files.unwrap().vars(5);
        let want: Vec<(&str, &str)> = vec![
            ("TORCH_FR_DUMP_TEMP_FILE", "/rec/42.0/rank5.torch-fr."),
            (
                "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
                "/rec/42.0/rank5.torch-fr.",
            ),
            ("TORCH_FR_BUFFER_SIZE", "2000"),
            ("TORCH_NCCL_TRACE_BUFFER_SIZE", "2000"),
            ("TORCH_NCCL_DUMP_ON_TIMEOUT", "1"),
            (
                "TORCH_NCCL_DEBUG_INFO_PIPE_FILE",
                "/rec/42.0/rank5.torch-fr-pipe.",
            ),
            ("NCCL_DEBUG_FILE", "/rec/42.0/rank5.nccl.%h.%p.log"),
            ("PET_LOG_DIR", "/rec/42.0/rank5.torchrun"),
            ("NCCL_RAS_ADDR", "localhost:20017"),
        ];
        let got: Vec<(&str, &str)> = vars.iter().map(|(n, v)| (*n, v.as_str())).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn nccl_debug_file_only_where_nccl_debug_is_set() {
        for nccl_debug in [None, Some(""), Some("  ")] {
            let vars: Vec<(&str, &str)> =
                nccl_debug.map(|v| ("NCCL_DEBUG", v)).into_iter().collect();
            let files = DebugFiles::new("/rec/1.0", None, env(&vars)).unwrap();
            let names = names(&files);
            assert!(
                !names.contains(&"NCCL_DEBUG_FILE"),
                "{nccl_debug:?}: {names:?}"
            );
            assert!(names.contains(&"PET_LOG_DIR"));
        }
    }

    #[test]
    fn the_ras_address_only_with_the_nodes_port() {
        let files = DebugFiles::new("/rec/1.0", None, env(&[])).unwrap();
        assert!(!names(&files).contains(&"NCCL_RAS_ADDR"));
        let files = DebugFiles::new("/rec/1.0", Some(29000), env(&[])).unwrap();
        assert_eq!(
            files.vars(3).last(),
            Some(&("NCCL_RAS_ADDR", "localhost:29000".to_string()))
        );
        // The user's own address wins.
        let mine = [("NCCL_RAS_ADDR", "localhost:31000")];
        let files = DebugFiles::new("/rec/1.0", Some(29000), env(&mine)).unwrap();
        assert!(!names(&files).contains(&"NCCL_RAS_ADDR"));
    }

    #[test]
    fn a_variable_the_user_set_is_left_to_the_user() {
        // Either flight-recorder name keeps both: torch reads the first set;
        // so with the buffer's two names.
        for name in TORCH_FR_VARS {
            let files = DebugFiles::new("/rec/1.0", None, env(&[(name, "/mine/fr")])).unwrap();
            assert!(
                !names(&files).iter().any(|n| TORCH_FR_VARS.contains(n)),
                "{name}"
            );
        }
        for name in ["TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"] {
            let files = DebugFiles::new("/rec/1.0", None, env(&[(name, "0")])).unwrap();
            assert!(
                !names(&files).iter().any(|n| n.contains("BUFFER_SIZE")),
                "{name}"
            );
        }
        let user = [
            ("NCCL_DEBUG", "WARN"),
            ("NCCL_DEBUG_FILE", "/mine/nccl.%h.%p"),
            ("PET_LOG_DIR", "/mine/torchrun"),
            ("TORCH_NCCL_DUMP_ON_TIMEOUT", "0"),
            (TORCH_FR_PIPE_VAR, "/mine/pipe"),
        ];
        let files = DebugFiles::new("/rec/1.0", None, env(&user)).unwrap();
        assert_eq!(
            names(&files),
            [
                "TORCH_FR_DUMP_TEMP_FILE",
                "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
                "TORCH_FR_BUFFER_SIZE",
                "TORCH_NCCL_TRACE_BUFFER_SIZE"
            ]
        );
        // An empty value is still the user's choice (torchrun: no log dir).
        let files = DebugFiles::new("/rec/1.0", None, env(&[("PET_LOG_DIR", "")])).unwrap();
        assert!(files.vars(0).iter().all(|(n, _)| *n != "PET_LOG_DIR"));
        // Everything set by the user: nothing to give.
        let all = [
            ("TORCH_FR_DUMP_TEMP_FILE", "/m"),
            ("TORCH_FR_BUFFER_SIZE", "1"),
            ("TORCH_NCCL_DUMP_ON_TIMEOUT", "1"),
            (TORCH_FR_PIPE_VAR, "/m"),
            ("NCCL_DEBUG", "INFO"),
            ("NCCL_DEBUG_FILE", "/m"),
            ("PET_LOG_DIR", "/m"),
            ("NCCL_RAS_ADDR", "localhost:1"),
        ];
        assert_eq!(DebugFiles::new("/rec/1.0", Some(2), env(&all)), None);
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
