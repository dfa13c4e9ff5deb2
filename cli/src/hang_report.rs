//! What `tf-cluster hang` prints of a step's probe: a table of its ranks
//! (where each is, its stack's frame in the user's code), the stacks' and
//! the flight recorder's notes, and a verdict that names the odd ranks
//! first.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::render::table;

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
pub(crate) fn user_frame(stack: &str) -> Option<String> {
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
pub(crate) fn report(job: u32, step: u32, tasks: u64, lines: &[Value]) -> String {
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
pub(crate) fn flight_recorder_lines(ranks: &BTreeMap<u64, &Value>) -> String {
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
pub(crate) fn verdict(tasks: u64, ranks: &BTreeMap<u64, &Value>) -> String {
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
