//! What production code may hold. No production function is longer than 70
//! lines: every `fn` with a body in the core (core/src), the SPANK shell (src/)
//! and the CLI (cli/src), from the line of its `fn` to the line of its closing
//! brace. No production file holds more than 450 non-blank lines outside its
//! test items: past that a file holds more than one job. And every process, thread and request to slurmctld the plugin makes
//! (a fork, a posix_spawn, a Command, a thread, a Slurm request in the core or
//! the shell) is listed in SECURITY.md with its file, so that what an admin
//! reads before enabling a `required` plugin is what the code does.
//!
//! Test code is not production code: `#[cfg(test)]` items (a `mod tests { … }`,
//! a helper), the files such a `#[cfg(test)] mod x;` declares, and files named
//! tests.rs or *_tests.rs are skipped; build scripts are outside these folders.
//! The files are read by a small scanner: comments, strings and char literals
//! blanked (their lines kept), then braces counted from each `fn`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The longest a production function may be, in lines.
const MAX_LINES: usize = 70;

/// The most non-blank lines of production code a file may hold.
const MAX_FILE_LINES: usize = 450;

/// A function longer than allowed: its name, the line of its `fn`, its lines.
#[derive(Debug, PartialEq)]
struct Long {
    name: String,
    line: usize,
    lines: usize,
}

/// The text with comments, string and char literals blanked (newlines kept),
/// so a brace in a message or a comment counts for nothing.
fn strip(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |out: &mut String, s: &[char]| {
        out.extend(s.iter().map(|&ch| if ch == '\n' { '\n' } else { ' ' }));
    };
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let mut i = 0;
    while i < c.len() {
        let at = |k: usize| c.get(i + k).copied();
        let end = if at(0) == Some('/') && at(1) == Some('/') {
            Some(
                c[i..]
                    .iter()
                    .position(|&ch| ch == '\n')
                    .unwrap_or(c.len() - i),
            )
        } else if at(0) == Some('/') && at(1) == Some('*') {
            Some(block_comment(&c[i..]))
        } else if let Some(len) = raw_string(&c[i..], i == 0 || !ident(c[i - 1]) || c[i - 1] == 'b')
        {
            Some(len)
        } else if at(0) == Some('"') {
            let mut j = 1;
            while i + j < c.len() && c[i + j] != '"' {
                j += if c[i + j] == '\\' { 2 } else { 1 };
            }
            Some((j + 1).min(c.len() - i))
        } else if at(0) == Some('\'') {
            char_literal(&c[i..])
        } else {
            None
        };
        match end {
            Some(len) => {
                blank(&mut out, &c[i..i + len]);
                i += len;
            }
            None => {
                out.push(c[i]);
                i += 1;
            }
        }
    }
    out
}

/// The length of the (nested) block comment at the start of `c`.
fn block_comment(c: &[char]) -> usize {
    let (mut depth, mut j) = (0, 0);
    while j < c.len() {
        if c[j] == '/' && c.get(j + 1) == Some(&'*') {
            depth += 1;
            j += 2;
        } else if c[j] == '*' && c.get(j + 1) == Some(&'/') {
            depth -= 1;
            j += 2;
            if depth == 0 {
                return j;
            }
        } else {
            j += 1;
        }
    }
    c.len()
}

/// The length of the raw string (`r"…"`, `r#"…"#`) at the start of `c`, if
/// one starts there (`starts`: not in the middle of an identifier).
fn raw_string(c: &[char], starts: bool) -> Option<usize> {
    if !starts || c.first() != Some(&'r') {
        return None;
    }
    let hashes = c[1..].iter().take_while(|&&ch| ch == '#').count();
    if c.get(1 + hashes) != Some(&'"') {
        return None;
    }
    let body = 2 + hashes;
    let closes = |j: usize| c[j] == '"' && (1..=hashes).all(|k| c.get(j + k) == Some(&'#'));
    Some(
        (body..c.len())
            .find(|&j| closes(j))
            .map_or(c.len(), |j| j + 1 + hashes),
    )
}

/// The length of the char literal (`'x'`, `'\n'`, `'\u{7f}'`) at the start of
/// `c`; None for a lifetime or a label (`'a`).
fn char_literal(c: &[char]) -> Option<usize> {
    if c.get(1) == Some(&'\\') {
        // Past the escaped character, which may itself be a quote ('\'').
        c.get(3..)?.iter().position(|&ch| ch == '\'').map(|p| p + 4)
    } else if c.get(2) == Some(&'\'') {
        Some(3)
    } else {
        None
    }
}

#[derive(Debug, PartialEq)]
enum Token {
    Ident(String),
    Punct(char),
}

/// The stripped text's identifiers and punctuation, each with its line.
fn tokens(stripped: &str) -> Vec<(Token, usize)> {
    let c: Vec<char> = stripped.chars().collect();
    let (mut out, mut line, mut i) = (Vec::new(), 1, 0);
    while i < c.len() {
        if c[i] == '\n' {
            line += 1;
            i += 1;
        } else if c[i].is_whitespace() {
            i += 1;
        } else if c[i].is_alphanumeric() || c[i] == '_' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            out.push((Token::Ident(c[start..i].iter().collect()), line));
        } else {
            out.push((Token::Punct(c[i]), line));
            i += 1;
        }
    }
    out
}

fn is(t: Option<&(Token, usize)>, want: &str) -> bool {
    match t {
        Some((Token::Ident(s), _)) => s == want,
        Some((Token::Punct(p), _)) => want.len() == 1 && want.starts_with(*p),
        None => false,
    }
}

/// The index just past the item starting at `i`: at its `;` or its closing
/// brace, whichever comes first outside parentheses and brackets.
fn item_end(toks: &[(Token, usize)], i: usize) -> usize {
    let mut depth = 0i64;
    let mut j = i;
    while j < toks.len() {
        match toks[j].0 {
            Token::Punct('(' | '[') => depth += 1,
            Token::Punct(')' | ']') => depth -= 1,
            Token::Punct(';') if depth == 0 => return j + 1,
            Token::Punct('{') if depth == 0 => return matching(toks, j) + 1,
            _ => {}
        }
        j += 1;
    }
    toks.len()
}

/// The index of the brace that closes the one at `open`.
fn matching(toks: &[(Token, usize)], open: usize) -> usize {
    let mut depth = 0i64;
    for (j, (t, _)) in toks.iter().enumerate().skip(open) {
        match t {
            Token::Punct('{') => depth += 1,
            Token::Punct('}') => {
                depth -= 1;
                if depth == 0 {
                    return j;
                }
            }
            _ => {}
        }
    }
    toks.len() - 1
}

/// `#[cfg(test)]` starting at `i`: its length in tokens.
fn cfg_test(toks: &[(Token, usize)], i: usize) -> Option<usize> {
    let want = ["#", "[", "cfg", "(", "test", ")", "]"];
    want.iter()
        .enumerate()
        .all(|(k, w)| is(toks.get(i + k), w))
        .then_some(want.len())
}

/// The `#[cfg(test)]` item at `i`: where the item starts past its
/// attributes, and the index just past it.
fn test_item(toks: &[(Token, usize)], i: usize) -> Option<(usize, usize)> {
    let mut j = i + cfg_test(toks, i)?;
    while is(toks.get(j), "#") {
        j = item_end_of_attribute(toks, j);
    }
    Some((j, item_end(toks, j)))
}

/// What one file holds: the functions longer than `max` lines outside test
/// code, and the modules it declares `#[cfg(test)] mod x;` (their files are
/// test code too).
fn scan(text: &str, max: usize) -> (Vec<Long>, Vec<String>) {
    let (long, test_mods, _) = scan_all(text, max);
    (long, test_mods)
}

/// [`scan`], and the kinds of [`effect`] the production code holds.
fn scan_all(text: &str, max: usize) -> (Vec<Long>, Vec<String>, BTreeSet<String>) {
    let toks = tokens(&strip(text));
    let (mut long, mut test_mods) = (Vec::new(), Vec::new());
    let mut effects = BTreeSet::new();
    let mut i = 0;
    while i < toks.len() {
        if let Some((j, end)) = test_item(&toks, i) {
            if let Some(name) = declared_mod(&toks[j..end]) {
                test_mods.push(name);
            }
            i = end;
            continue;
        }
        effects.extend(effect(&toks, i));
        if is(toks.get(i), "fn")
            && let Some((Token::Ident(name), _)) = toks.get(i + 1)
        {
            let end = item_end(&toks, i);
            let (first, last) = (toks[i].1, toks[end - 1].1);
            let lines = last - first + 1;
            if is(toks.get(end - 1), "}") && lines > max {
                long.push(Long {
                    name: name.clone(),
                    line: first,
                    lines,
                });
            }
        }
        i += 1;
    }
    (long, test_mods, effects)
}

/// Slurm's functions that are no request to slurmctld: logging, messages,
/// freeing what a request returned (and `slurm_spank_*`, asked of the
/// process that loaded the plugin).
const NOT_REQUESTS: [&str; 5] = ["error", "info", "verbose", "debug", "strerror"];

/// The call starting at token `i`, if it starts a process or a thread or
/// sends slurmctld a request: `fork`, `posix_spawn`, `Command`, `thread`, or
/// the Slurm function's name (`slurm_load_job`).
fn effect(toks: &[(Token, usize)], i: usize) -> Option<String> {
    let path = |a: &str, b: &str| {
        is(toks.get(i), a)
            && is(toks.get(i + 1), ":")
            && is(toks.get(i + 2), ":")
            && is(toks.get(i + 3), b)
    };
    if path("libc", "fork") || path("libc", "vfork") {
        return Some("fork".into());
    }
    if path("libc", "posix_spawn") || path("libc", "posix_spawnp") {
        return Some("posix_spawn".into());
    }
    if path("Command", "new") {
        return Some("Command".into());
    }
    if path("thread", "spawn") || path("thread", "Builder") || path("thread", "scope") {
        return Some("thread".into());
    }
    if is(toks.get(i), "sys")
        && is(toks.get(i + 1), ":")
        && let Some((Token::Ident(name), _)) = toks.get(i + 3)
        && let Some(what) = name.strip_prefix("slurm_")
        && is(toks.get(i + 4), "(")
        && !NOT_REQUESTS.contains(&what)
        && !what.starts_with("free")
        && !what.starts_with("spank_")
        && !what.ends_with("_free")
    {
        return Some(name.clone());
    }
    None
}

/// The index just past the attribute (`#[…]`) at `i`.
fn item_end_of_attribute(toks: &[(Token, usize)], i: usize) -> usize {
    let mut depth = 0i64;
    for (j, (t, _)) in toks.iter().enumerate().skip(i + 1) {
        match t {
            Token::Punct('[') => depth += 1,
            Token::Punct(']') => {
                depth -= 1;
                if depth == 0 {
                    return j + 1;
                }
            }
            _ => {}
        }
    }
    toks.len()
}

/// `mod x;` (with any visibility): x.
fn declared_mod(item: &[(Token, usize)]) -> Option<String> {
    let at = item.iter().position(|t| is(Some(t), "mod"))?;
    match (item.get(at + 1), item.get(at + 2)) {
        (Some((Token::Ident(name), _)), Some((Token::Punct(';'), _))) => Some(name.clone()),
        _ => None,
    }
}

fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

/// The file of module `name` that `parent` declares.
fn child_files(parent: &Path, name: &str) -> [PathBuf; 2] {
    let dir = parent.parent().unwrap();
    let stem = parent.file_stem().unwrap().to_string_lossy();
    let base = if ["mod", "lib", "main"].contains(&stem.as_ref()) {
        dir.to_path_buf()
    } else {
        dir.join(stem.as_ref())
    };
    [
        base.join(format!("{name}.rs")),
        base.join(name).join("mod.rs"),
    ]
}

/// What each production file under `dirs` holds: its long functions and its
/// effects, by its path from `root`.
type Scanned = (String, Vec<Long>, BTreeSet<String>);

fn production(root: &Path, dirs: &[&str]) -> Vec<Scanned> {
    let mut files = Vec::new();
    for dir in dirs {
        rust_files(&root.join(dir), &mut files);
    }
    files.sort();
    let mut scanned = Vec::new();
    let mut test_files = BTreeSet::new();
    for file in &files {
        let name = file.file_name().unwrap().to_string_lossy();
        if name == "tests.rs" || name.ends_with("_tests.rs") || name == "build.rs" {
            continue;
        }
        let (long, test_mods, effects) =
            scan_all(&std::fs::read_to_string(file).unwrap(), MAX_LINES);
        for m in test_mods {
            test_files.extend(child_files(file, &m));
        }
        scanned.push((file, long, effects));
    }
    scanned
        .into_iter()
        .filter(|(file, _, _)| !test_files.contains(*file))
        .map(|(file, long, effects)| {
            let shown = file.strip_prefix(root).unwrap().display().to_string();
            (shown, long, effects)
        })
        .collect()
}

/// Every production function over `MAX_LINES` under the three source trees,
/// as `path:line name (N lines)`.
fn long_functions(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for (shown, long, _) in production(root, &["core/src", "src", "cli/src"]) {
        for l in long {
            out.push(format!("{shown}:{} {} ({} lines)", l.line, l.name, l.lines));
        }
    }
    out
}

/// The plugin's effects (the core's and the shell's: the CLI is a command
/// the user runs), as `(path, kind)`.
fn plugin_effects(root: &Path) -> BTreeSet<(String, String)> {
    production(root, &["core/src", "src"])
        .into_iter()
        .flat_map(|(shown, _, effects)| effects.into_iter().map(move |e| (shown.clone(), e)))
        .collect()
}

/// What SECURITY.md's list names: `(path, kind)` of each item, the kind
/// being each backticked word of its bold lead that [`effect`] gives.
fn listed_effects(security: &str) -> BTreeSet<(String, String)> {
    let section = security
        .split("## Every process, thread and request to slurmctld")
        .nth(1)
        .expect("SECURITY.md has no list of processes, threads and requests");
    let section = section.split("\n## ").next().unwrap();
    let mut out = BTreeSet::new();
    for item in section.split("\n- **").skip(1) {
        let (lead, rest) = item.split_once("**").unwrap();
        let path = rest.split('`').nth(1).expect("an item names its file");
        for kind in lead.split('`').skip(1).step_by(2) {
            out.insert((path.to_string(), kind.to_string()));
        }
    }
    out
}

#[test]
fn every_process_thread_and_request_is_listed_in_security_md() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let found = plugin_effects(root);
    let listed = listed_effects(&std::fs::read_to_string(root.join("SECURITY.md")).unwrap());
    let missing: Vec<_> = found.difference(&listed).collect();
    let stale: Vec<_> = listed.difference(&found).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "SECURITY.md's list and the code disagree:\n  in the code, not listed: {missing:?}\n  listed, not in the code: {stale:?}"
    );
    // The scanner sees each kind: a list that named nothing would pass.
    let kinds: BTreeSet<_> = found.iter().map(|(_, k)| k.as_str()).collect();
    for kind in [
        "fork",
        "posix_spawn",
        "thread",
        "slurm_kill_job_step",
        "slurm_requeue",
    ] {
        assert!(
            kinds.contains(kind),
            "{kind} not found in the code: {kinds:?}"
        );
    }
}

#[test]
fn the_scanner_finds_each_kind_of_effect_outside_test_code() {
    let text = "fn a() {\n    let pid = unsafe { libc::fork() };\n    std::thread::Builder::new();\n    Command::new(\"cat\");\n    let rc = unsafe { sys::slurm_load_job(&mut r, 1, 0) };\n    unsafe { sys::slurm_error(m) };\n    unsafe { sys::slurm_free_job_info_msg(r) };\n    let s = \"libc::posix_spawn(\";\n}\n#[cfg(test)]\nmod tests {\n    fn t() { std::thread::spawn(|| ()); unsafe { libc::posix_spawn() }; }\n}\n";
    let (_, _, effects) = scan_all(text, MAX_LINES);
    let want: BTreeSet<String> = ["fork", "thread", "Command", "slurm_load_job"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(effects, want);
}

#[test]
fn no_production_function_is_longer_than_70_lines() {
    let long = long_functions(Path::new(env!("CARGO_MANIFEST_DIR")));
    assert!(
        long.is_empty(),
        "{} production function(s) longer than {MAX_LINES} lines:\n  {}",
        long.len(),
        long.join("\n  ")
    );
}

/// The non-blank lines of `text` outside its `#[cfg(test)]` items.
fn production_lines(text: &str) -> usize {
    let toks = tokens(&strip(text));
    let mut test_lines = BTreeSet::new();
    let mut i = 0;
    while i < toks.len() {
        if let Some((_, end)) = test_item(&toks, i) {
            test_lines.extend(toks[i].1..=toks[end - 1].1);
            i = end;
            continue;
        }
        i += 1;
    }
    text.lines()
        .enumerate()
        .filter(|(n, line)| !line.trim().is_empty() && !test_lines.contains(&(n + 1)))
        .count()
}

#[test]
fn no_production_file_is_longer_than_450_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut long = Vec::new();
    for (shown, _, _) in production(root, &["core/src", "src", "cli/src"]) {
        let lines = production_lines(&std::fs::read_to_string(root.join(&shown)).unwrap());
        if lines > MAX_FILE_LINES {
            long.push(format!("{shown} ({lines} lines)"));
        }
    }
    assert!(
        long.is_empty(),
        "{} production file(s) over {MAX_FILE_LINES} non-blank lines:\n  {}",
        long.len(),
        long.join("\n  ")
    );
}

#[test]
fn a_files_lines_are_its_non_blank_lines_outside_test_items() {
    let text = "//! Doc.\n\nfn a() {\n    let s = \"}\";\n}\n\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn t() {}\n}\n#[cfg(test)]\nmod plan_tests;\nfn b() {}\n";
    assert_eq!(production_lines(text), 5);
    assert_eq!(production_lines(""), 0);
}

/// A function of `lines` lines (its `fn` line, `lines - 2` statements, its
/// closing brace), its body's lines given by `line(k)`.
fn function(name: &str, lines: usize, line: impl Fn(usize) -> String) -> String {
    let mut text = format!("pub fn {name}() -> u32 {{\n");
    for k in 0..lines - 2 {
        text.push_str(&line(k));
        text.push('\n');
    }
    text.push_str("}\n");
    text
}

fn names(text: &str) -> Vec<(String, usize)> {
    scan(text, MAX_LINES)
        .0
        .into_iter()
        .map(|l| (l.name, l.lines))
        .collect()
}

#[test]
fn a_71_line_function_is_reported_a_70_line_one_is_not() {
    let plain = |k| format!("    let x{k} = {k};");
    let text = function("seventy", 70, plain) + &function("seventy_one", 71, plain);
    assert_eq!(names(&text), [("seventy_one".to_string(), 71)]);
    // Its line is the `fn`'s, past the 70-line one and a doc comment.
    let text = function("seventy", 70, plain) + "/// Doc.\n" + &function("long", 72, plain);
    assert_eq!(scan(&text, MAX_LINES).0[0].line, 72);
}

#[test]
fn test_code_is_not_counted() {
    let plain = |k| format!("    let x{k} = {k};");
    let long = function("helper", 80, plain);
    let indented: String = long.lines().map(|l| format!("    {l}\n")).collect();
    let text = format!(
        "#[cfg(test)]\nmod tests {{\n    use super::*;\n{indented}}}\n\n#[cfg(test)]\n#[allow(dead_code)]\n{long}"
    );
    assert!(names(&text).is_empty(), "{:?}", names(&text));
    // After a test module, code is production again.
    let text = format!(
        "#[cfg(test)]\nmod tests {{\n{indented}}}\n{}",
        function("after", 71, plain)
    );
    assert_eq!(names(&text), [("after".to_string(), 71)]);
    // Declared test modules are named, for their files to be skipped.
    let (_, mods) = scan("#[cfg(test)]\nmod plan_tests;\npub mod plan;\n", MAX_LINES);
    assert_eq!(mods, ["plan_tests"]);
    // A file of test code: skipped by name or by its declaration.
    let root = std::env::temp_dir().join(format!("tfc-function-length-{}", std::process::id()));
    let src = root.join("core/src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::create_dir_all(root.join("cli/src")).unwrap();
    std::fs::write(
        src.join("lib.rs"),
        "#[cfg(test)]\nmod support;\npub mod a;\n",
    )
    .unwrap();
    for file in ["support.rs", "a_tests.rs", "tests.rs", "a.rs"] {
        std::fs::write(src.join(file), function("f", 71, plain)).unwrap();
    }
    let found = long_functions(&root);
    std::fs::remove_dir_all(&root).unwrap();
    assert_eq!(found, ["core/src/a.rs:1 f (71 lines)"]);
}

#[test]
fn nested_functions_closures_strings_and_chars_do_not_confuse_it() {
    let tricky = [
        "    let s = \"}}} { \\\" }\";",
        "    let r = r#\"}\" }\"#;",
        "    let c = '}';",
        "    let o = '{';",
        "    let e = '\\'';",
        "    let b = b'}';",
        "    // }",
        "    /* } /* nested } */ } */",
        "    let f = |x: u32| { x + 1 };",
        "    fn inner<'a>(x: &'a str) -> &'a str { x }",
        "    let t: [u8; 2] = [1, 2];",
        "    'outer: loop { break 'outer; }",
    ];
    let line = |k: usize| tricky[k % tricky.len()].to_string();
    // 70 lines with every trick in it, then a 71-line one.
    let text = function("seventy", 70, line) + &function("seventy_one", 71, line);
    assert_eq!(names(&text), [("seventy_one".to_string(), 71)]);
    // A nested function long on its own is reported as itself, and its
    // outer function with all its lines.
    let inner = function("inner", 71, |k| format!("        let y{k} = {k};"));
    let text = format!("fn outer() {{\n{inner}    let z = 1;\n}}\n");
    assert_eq!(
        names(&text),
        [("outer".to_string(), 74), ("inner".to_string(), 71)]
    );
    // A signature with `;` in its types, a declaration without a body, a
    // function pointer type: none ends or starts a function early.
    let text = String::from("trait T {\n    fn declared(&self) -> [u8; 3];\n}\n")
        + "type P = fn(u32) -> u32;\n"
        + &function("after", 71, |_| "    let a: [u8; 1] = [0];".into());
    assert_eq!(names(&text), [("after".to_string(), 71)]);
}

/// The files that send a root action's request (a requeue, a step's kill,
/// a node's exclusion) and the one that makes its targets from slurmctld's
/// record.
const ROOT_ACTIONS: [&str; 3] = [
    "src/spank/slurmctld/exclude.rs",
    "src/spank/slurmctld/requeue.rs",
    "src/spank/slurmctld/step_kill.rs",
];
const TARGETS_FROM: &str = "src/spank/slurmctld/job_record.rs";

/// `text`'s tokens, and where its first `#[cfg(test)]` item starts (the
/// tokens before it are production code).
fn production_tokens(text: &str) -> (Vec<(Token, usize)>, usize) {
    let toks = tokens(&strip(text));
    let end = (0..toks.len())
        .find_map(|i| cfg_test(&toks, i).map(|_| i))
        .unwrap_or(toks.len());
    (toks, end)
}

/// The lines of production code in `text` that read an environment: a
/// variable by name (`getenv`, `env::var`, `var_os`, `environ`, a core
/// `Source` or `ProcessEnv`).
fn reads_environment(text: &str) -> Vec<usize> {
    let (toks, end) = production_tokens(text);
    let words = [
        "getenv",
        "var_os",
        "vars",
        "environ",
        "Source",
        "ProcessEnv",
        "host_env",
    ];
    (0..end)
        .filter(|&i| {
            words.iter().any(|w| is(toks.get(i), w))
                || (is(toks.get(i), "env")
                    && is(toks.get(i + 1), ":")
                    && is(toks.get(i + 3), "var"))
        })
        .map(|i| toks[i].1)
        .collect()
}

/// What a root request targets comes from slurmctld, never from srun's
/// environment (the user's program) or a task's: the requeue and the kill
/// are sent only from [`ROOT_ACTIONS`]; they, and the record's file, read no
/// environment; and their targets (`Targets`) are made only from
/// slurmctld's record, in [`TARGETS_FROM`] (its fields private there).
#[test]
fn a_root_requests_target_comes_from_slurmctld_never_from_an_environment() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let senders: BTreeSet<String> = plugin_effects(root)
        .into_iter()
        .filter(|(_, kind)| {
            ["slurm_requeue", "slurm_kill_job_step", "slurm_update_job"].contains(&kind.as_str())
        })
        .map(|(path, _)| path)
        .collect();
    assert_eq!(
        senders,
        ROOT_ACTIONS.iter().map(|p| p.to_string()).collect()
    );
    for file in ROOT_ACTIONS.iter().chain([&TARGETS_FROM]) {
        let read = reads_environment(&std::fs::read_to_string(root.join(file)).unwrap());
        assert!(
            read.is_empty(),
            "{file} reads an environment at lines {read:?}"
        );
    }
    for (shown, _, _) in production(root, &["src"]) {
        let text = strip(&std::fs::read_to_string(root.join(&shown)).unwrap());
        let toks = tokens(&text);
        let made = (0..toks.len()).any(|i| {
            is(toks.get(i), "Targets")
                && is(toks.get(i + 1), "{")
                && !is(toks.get(i.wrapping_sub(1)), "impl")
                && !is(toks.get(i.wrapping_sub(1)), "struct")
        });
        assert!(
            !made || shown == TARGETS_FROM,
            "{shown} makes a root action's Targets itself"
        );
    }
}

/// The check sees each way of reading an environment, and not test code.
#[test]
fn the_environment_check_sees_each_way_and_not_tests() {
    for text in [
        "fn a() { let j = std::env::var(\"SLURM_JOB_ID\"); }",
        "fn a() { let j = spank.getenv(\"SLURM_JOB_ID\"); }",
        "fn a() { let j = env::var_os(\"X\"); }",
        "fn a() { let e = host_env(spank)?; }",
        "fn a(s: &mut impl Source) { }",
    ] {
        assert_eq!(reads_environment(text), [1], "{text}");
    }
    let clean = "fn a() { let j = spank.job_id(); } // getenv\n#[cfg(test)]\nmod tests { fn t() { std::env::var(\"X\"); } }\n";
    assert!(reads_environment(clean).is_empty());
}

/// The parameters of each `pub fn` in `text` that carry an integer (`u32`)
/// other than a step id: a job id a caller could have read anywhere.
fn job_parameters(text: &str) -> Vec<String> {
    let (toks, end) = production_tokens(text);
    let mut found = Vec::new();
    for i in 0..end {
        if !(is(toks.get(i), "pub") && is(toks.get(i + 1), "fn")) {
            continue;
        }
        let Some(open) = (i..end).find(|&j| is(toks.get(j), "(")) else {
            continue;
        };
        let close = matching(&toks, open);
        let mut name = String::new();
        let mut depth = 0;
        for (t, _) in &toks[open + 1..close] {
            match t {
                Token::Punct('<' | '(' | '[') => depth += 1,
                Token::Punct('>' | ')' | ']') => depth -= 1,
                Token::Punct(',') if depth == 0 => name.clear(),
                Token::Ident(w) if name.is_empty() => name = w.clone(),
                Token::Ident(w) if w == "u32" && name != "step" => {
                    found.push(name.clone());
                }
                _ => {}
            }
        }
    }
    found
}

/// No caller hands a root action a job: what it names comes from
/// `Targets` alone, never a leader read from srun's environment.
#[test]
fn a_root_action_takes_no_job_from_its_caller() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for file in ROOT_ACTIONS {
        let found = job_parameters(&std::fs::read_to_string(root.join(file)).unwrap());
        assert!(found.is_empty(), "{file}: a pub fn takes a job: {found:?}");
    }
    let old = "pub fn task_exit(spank: &Spank, settings: &Settings, leader: Option<u32>) {}\npub fn end(job: u32, step: u32) {}\npub fn kill(step: u32, t: Targets) {}\n";
    assert_eq!(job_parameters(old), ["leader", "job"]);
}
