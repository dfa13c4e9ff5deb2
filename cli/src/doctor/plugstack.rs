//! The plugstack.conf walk: its lines as Slurm parses them, includes followed.

use super::{Host, Level, Report};

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
pub(crate) struct Loaded {
    pub(crate) at: String,
    pub(super) required: bool,
    pub(crate) path: String,
    pub(super) args: Vec<String>,
}

pub(crate) fn dirname(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) => "/",
        Some(i) => &path[..i],
        None => ".",
    }
}

/// Walks plugstack.conf `file` and what it includes; false when a file is
/// one Slurm's commands would block or grow on (no regular file, too large).
pub(crate) fn walk(
    host: &mut dyn Host,
    file: &str,
    depth: usize,
    report: &mut Report,
    out: &mut Vec<Loaded>,
) -> bool {
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
                    super::said(&e)
                )
            } else {
                format!("{file}{} (included, so srun fails)", super::said(&e))
            };
            report.add(Level::Fail, line);
            return safe;
        }
    };
    let mut safe = true;
    for (line, parsed) in parse_plugstack(&text) {
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
                    safe &= walk(host, &included, depth + 1, report, out);
                }
            }
            StackLine::Plugin { required, path, args } => out.push(Loaded { at, required, path, args }),
        }
    }
    safe
}
