//! plugstack.conf: its lines as Slurm parses them, the walk through its
//! includes, and the .so each plugin line names.

use super::host::{Host, said};
use super::slurm_conf::dirname;
use crate::report::{Level, Report};

/// The plugin's `plugin_name`.
pub const PLUGIN_NAME: &str = "tf_cluster";

/// Includes nested deeper than this are reported as a loop.
const MAX_INCLUDE_DEPTH: usize = 8;

/// One meaningful plugstack.conf line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StackLine {
    Plugin {
        required: bool,
        path: String,
        args: Vec<String>,
    },
    Include(String),
    /// A first word Slurm does not know: it refuses the whole file.
    Invalid(String),
}

/// Parses plugstack.conf as Slurm does: `#` starts a comment, words are
/// separated by white space, the first is `required`, `optional` or `include`.
pub fn parse_plugstack(text: &str) -> Vec<(usize, StackLine)> {
    text.lines()
        .enumerate()
        .filter_map(|(i, line)| {
            let line = line.split('#').next().unwrap_or_default();
            let mut words = line.split_whitespace();
            let first = words.next()?;
            let parsed = match (first, words.next()) {
                ("include", Some(pattern)) => StackLine::Include(pattern.to_string()),
                ("required" | "optional", Some(path)) => StackLine::Plugin {
                    required: first == "required",
                    path: path.to_string(),
                    args: words.map(str::to_string).collect(),
                },
                _ => StackLine::Invalid(line.trim().to_string()),
            };
            Some((i + 1, parsed))
        })
        .collect()
}

/// A plugin line with where it was found.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// `FILE:LINE`.
    pub at: String,
    pub required: bool,
    /// As written: absolute, or relative to the plugin directories.
    pub path: String,
    pub args: Vec<String>,
}

/// The .so a plugin line names: its absolute path, else the first of
/// `plugin_dirs` (slurm.conf's PluginDir) that holds it; None when none does.
pub fn plugin_file(host: &mut dyn Host, plugin_dirs: &[String], path: &str) -> Option<String> {
    if path.starts_with('/') {
        return Some(path.to_string());
    }
    plugin_dirs
        .iter()
        .map(|d| format!("{d}/{path}"))
        .find(|p| host.plugin(p).is_some())
}

/// Most files of a plugstack tree read (Slurm's own trees hold a handful).
pub const MAX_FILES: usize = 256;

/// Most bytes of a plugstack tree read, all files together.
pub const MAX_TOTAL_BYTES: usize = 16 << 20;

/// What a walk has read so far: each file once (by canonical path), within
/// the caps, and the repeats seen, told in one line each at the end.
#[derive(Default)]
struct Walk {
    visited: std::collections::HashSet<String>,
    /// The files being read, outermost first (an include of one is a loop).
    stack: Vec<String>,
    bytes: usize,
    /// Includes of a file being read: (count, first `FILE:LINE -> FILE`).
    loops: (usize, String),
    /// Includes of a file read before, not a loop: (count, first).
    repeats: (usize, String),
    /// The cap that stopped the walk, once.
    capped: Option<String>,
}

/// Walks plugstack.conf `file` and what it includes; false when a file is
/// one Slurm's commands would block or grow on (no regular file, too large).
/// Each file is read once, at most [`MAX_FILES`] files and
/// [`MAX_TOTAL_BYTES`] bytes, includes at most [`MAX_INCLUDE_DEPTH`] deep.
pub fn walk(
    host: &mut dyn Host,
    file: &str,
    depth: usize,
    report: &mut Report,
    out: &mut Vec<Loaded>,
) -> bool {
    let mut state = Walk::default();
    let safe = walk_one(host, file, depth, report, out, &mut state);
    if state.loops.0 > 0 {
        report.add(
            Level::Fail,
            format!(
                "{} includes itself ({} include(s) of a file being read, a loop: Slurm would recurse without end); each file was read once",
                state.loops.1, state.loops.0
            ),
        );
    }
    if state.repeats.0 > 0 {
        report.add(
            Level::Warn,
            format!(
                "{} includes a file already read ({} such include(s): its plugins would load twice); each file was read once",
                state.repeats.1, state.repeats.0
            ),
        );
    }
    if let Some(line) = state.capped {
        report.add(Level::Fail, line);
    }
    safe
}

fn walk_one(
    host: &mut dyn Host,
    file: &str,
    depth: usize,
    report: &mut Report,
    out: &mut Vec<Loaded>,
    state: &mut Walk,
) -> bool {
    if state.visited.len() >= MAX_FILES {
        state.capped.get_or_insert_with(|| {
            format!("the plugstack tree has more than {MAX_FILES} files: the doctor reads at most {MAX_FILES} files (first left out: {file})")
        });
        return true;
    }
    state.visited.insert(host.canonical(file));
    let text = match host.read(file) {
        Ok(text) => text,
        Err(e) => {
            let safe = matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied
            );
            let line = if depth == 0 {
                format!(
                    "plugstack.conf {file}{}: no SPANK plugin is loaded",
                    said(&e)
                )
            } else {
                format!("{file}{} (included, so srun fails)", said(&e))
            };
            report.add_about(Level::Fail, &[file], line);
            return safe;
        }
    };
    state.bytes += text.len();
    if state.bytes > MAX_TOTAL_BYTES {
        state.capped.get_or_insert_with(|| {
            format!("the plugstack tree is over {MAX_TOTAL_BYTES} bytes: the doctor reads at most {MAX_TOTAL_BYTES} bytes (stopped at {file})")
        });
        return true;
    }
    state.stack.push(host.canonical(file));
    let safe = read_lines(host, file, &text, depth, report, out, state);
    state.stack.pop();
    safe
}

fn read_lines(
    host: &mut dyn Host,
    file: &str,
    text: &str,
    depth: usize,
    report: &mut Report,
    out: &mut Vec<Loaded>,
    state: &mut Walk,
) -> bool {
    let mut safe = true;
    for (line, parsed) in parse_plugstack(text) {
        let at = format!("{file}:{line}");
        match parsed {
            StackLine::Invalid(text) => report.add(
                Level::Fail,
                format!("{at}: {text:?} is not `required|optional PATH …` or `include GLOB`: srun refuses the file"),
            ),
            StackLine::Include(pattern) => {
                if depth >= MAX_INCLUDE_DEPTH {
                    report.add(Level::Fail, format!("{at}: includes nested over {MAX_INCLUDE_DEPTH} deep (a loop?)"));
                    continue;
                }
                // Slurm reads a relative pattern from the including file's directory.
                let pattern = if pattern.starts_with('/') {
                    pattern
                } else {
                    format!("{}/{pattern}", dirname(file))
                };
                let files = host.glob(&pattern);
                if files.is_empty() {
                    report.add(Level::Ok, format!("{at}: include {pattern} (no file matches)"));
                }
                for included in files {
                    if state.capped.is_some() {
                        break;
                    }
                    let canonical = host.canonical(&included);
                    if state.stack.contains(&canonical) {
                        state.loops.0 += 1;
                        if state.loops.1.is_empty() {
                            state.loops.1 = format!("{at}: include {included}");
                        }
                        continue;
                    }
                    if state.visited.contains(&canonical) {
                        state.repeats.0 += 1;
                        if state.repeats.1.is_empty() {
                            state.repeats.1 = format!("{at}: include {included}");
                        }
                        continue;
                    }
                    safe &= walk_one(host, &included, depth + 1, report, out, state);
                }
            }
            StackLine::Plugin { required, path, args } => out.push(Loaded { at, required, path, args }),
        }
    }
    safe
}
