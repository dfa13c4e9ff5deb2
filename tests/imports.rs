//! The code reads one way: no file of the core (core/src) or of the SPANK
//! shell (src/) sits in a circle of imports, and the two roots that only
//! assemble (the core's lib.rs, the shell's hooks.rs) are imported by no file.
//!
//! A file's imports are every path it names that starts at `crate`, `super`
//! or `self`, or at a child module of the file (`use gpus::plan`,
//! `jax::FRAMEWORK`), tests and re-exports included; `mod x;` declares and is no import. A
//! folder's mod.rs counts as a file of its own, so a child that takes an item
//! from it (`use super::Rules`) imports it. Paths into the other crate
//! (`crate::core::…` in the shell) are not edges of this graph.
//!
//! `cargo test --test imports -- --nocapture` prints each tree's files in an
//! order where every file imports only files before it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path from the crate root: `[]` is lib.rs, `["gpus", "plan"]`
/// is gpus/plan.rs.
type ModPath = Vec<String>;

struct Tree {
    /// The file of each module.
    files: BTreeMap<ModPath, PathBuf>,
    /// Module paths that lead into another crate (the shell's `core`).
    external: Vec<String>,
}

impl Tree {
    fn new(src: &Path, external: &[&str]) -> Tree {
        let mut files = BTreeMap::new();
        walk(src, &mut Vec::new(), &mut files);
        Tree {
            files,
            external: external.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn name(&self, module: &ModPath) -> String {
        let path = &self.files[module];
        let base = path.ancestors().find(|p| p.ends_with("src")).unwrap();
        path.strip_prefix(base).unwrap().display().to_string()
    }

    /// The file module that holds the item a resolved path names: the
    /// longest prefix of `path` that is a file module.
    fn owner(&self, path: &[String]) -> Option<ModPath> {
        if path
            .first()
            .is_some_and(|first| self.external.contains(first))
        {
            return None;
        }
        (0..=path.len())
            .rev()
            .map(|n| path[..n].to_vec())
            .find(|prefix| self.files.contains_key(prefix))
    }

    /// Every file module each file imports (itself excluded).
    fn edges(&self) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
        let mut edges = BTreeMap::new();
        for (module, file) in &self.files {
            let text = std::fs::read_to_string(file).unwrap();
            let mut targets = BTreeSet::new();
            for path in imports(&strip(&text), module, self) {
                if let Some(owner) = self.owner(&path)
                    && owner != *module
                {
                    targets.insert(owner);
                }
            }
            edges.insert(module.clone(), targets);
        }
        edges
    }
}

fn walk(dir: &Path, module: &mut ModPath, files: &mut BTreeMap<ModPath, PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        let stem = path.file_stem().unwrap().to_string_lossy().to_string();
        if path.is_dir() {
            module.push(stem);
            walk(&path, module, files);
            module.pop();
        } else if path.extension().is_some_and(|e| e == "rs") {
            let mut m = module.clone();
            if !(stem == "mod" || (module.is_empty() && (stem == "lib" || stem == "main"))) {
                m.push(stem);
            }
            files.insert(m, path);
        }
    }
}

/// The text with comments, string and char literals blanked (their lines
/// kept), so a path in a doc comment or a message is no import.
fn strip(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let blank = |out: &mut String, s: &[u8]| {
        for &c in s {
            out.push(if c == b'\n' { '\n' } else { ' ' });
        }
    };
    while i < b.len() {
        let rest = &b[i..];
        if rest.starts_with(b"//") {
            let end = rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len());
            blank(&mut out, &rest[..end]);
            i += end;
        } else if rest.starts_with(b"/*") {
            let (mut depth, mut j) = (0, 0);
            while j < rest.len() {
                if rest[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if rest[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, &rest[..j]);
            i += j;
        } else if (rest.starts_with(b"r\"") || rest.starts_with(b"r#"))
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'))
        {
            let hashes = rest[1..].iter().take_while(|&&c| c == b'#').count();
            if rest.get(1 + hashes) != Some(&b'"') {
                out.push(b[i] as char);
                i += 1;
                continue;
            }
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            let body = 2 + hashes;
            let end = rest[body..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map_or(rest.len(), |p| body + p + close.len());
            blank(&mut out, &rest[..end]);
            i += end;
        } else if rest[0] == b'"' {
            let mut j = 1;
            while j < rest.len() && rest[j] != b'"' {
                j += if rest[j] == b'\\' { 2 } else { 1 };
            }
            let end = (j + 1).min(rest.len());
            blank(&mut out, &rest[..end]);
            i += end;
        } else if rest[0] == b'\'' {
            // A char literal ('x', '\n', '\''), not a lifetime ('a).
            let end = if rest.get(1) == Some(&b'\\') {
                rest[2..].iter().position(|&c| c == b'\'').map(|p| p + 3)
            } else if rest.get(2) == Some(&b'\'') {
                Some(3)
            } else {
                None
            };
            match end {
                Some(end) => {
                    blank(&mut out, &rest[..end]);
                    i += end;
                }
                None => {
                    out.push('\'');
                    i += 1;
                }
            }
        } else {
            let len = text[i..].chars().next().unwrap().len_utf8();
            out.push_str(&text[i..i + len]);
            i += len;
        }
    }
    out
}

#[derive(Debug, PartialEq, Clone)]
enum Token {
    Ident(String),
    Punct(char),
    PathSep,
}

fn tokens(text: &str) -> Vec<Token> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(Token::Ident(chars[start..i].iter().collect()));
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            out.push(Token::PathSep);
            i += 2;
        } else if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() {
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
        } else {
            out.push(Token::Punct(c));
            i += 1;
        }
    }
    out
}

fn ident(t: Option<&Token>) -> Option<&str> {
    match t {
        Some(Token::Ident(s)) => Some(s),
        _ => None,
    }
}

/// Every path the file names, resolved to a path from the crate root.
fn imports(text: &str, module: &ModPath, tree: &Tree) -> Vec<Vec<String>> {
    let toks = tokens(text);
    let mut paths = Vec::new();
    // Inline modules (`mod tests { … }`): the scope `super` climbs from.
    let mut scope: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < toks.len() {
        let here: ModPath = module
            .iter()
            .cloned()
            .chain(scope.iter().map(|(n, _)| n.clone()))
            .collect();
        match &toks[i] {
            Token::Punct('{') => depth += 1,
            Token::Punct('}') => {
                depth -= 1;
                if scope.last().is_some_and(|&(_, d)| d == depth) {
                    scope.pop();
                }
            }
            Token::Ident(kw) if kw == "mod" => {
                if let (Some(name), Some(Token::Punct('{'))) =
                    (ident(toks.get(i + 1)), toks.get(i + 2))
                {
                    scope.push((name.to_string(), depth));
                    depth += 1;
                    i += 3;
                    continue;
                }
            }
            Token::Ident(kw) if kw == "use" => {
                let end = toks[i..]
                    .iter()
                    .position(|t| *t == Token::Punct(';'))
                    .map_or(toks.len(), |p| i + p);
                for path in expand(&toks[i + 1..end]) {
                    if let Some(p) = resolve(&path, &here, module, tree, true) {
                        paths.push(p);
                    }
                }
                i = end + 1;
                continue;
            }
            Token::Ident(first)
                if (first == "crate" || first == "super" || first == "self")
                    && toks.get(i + 1) == Some(&Token::PathSep)
                    && !(i > 0 && toks[i - 1] == Token::PathSep) =>
            {
                let mut path = vec![first.clone()];
                let mut j = i + 1;
                while toks.get(j) == Some(&Token::PathSep) {
                    match ident(toks.get(j + 1)) {
                        Some(s) => path.push(s.to_string()),
                        None => break,
                    }
                    j += 2;
                }
                if let Some(p) = resolve(&path, &here, module, tree, false) {
                    paths.push(p);
                }
                i = j;
                continue;
            }
            // A child module of this file named at the start of a path
            // outside a `use` (`[&jax::FRAMEWORK]` in frameworks/mod.rs).
            Token::Ident(first)
                if toks.get(i + 1) == Some(&Token::PathSep)
                    && !(i > 0 && toks[i - 1] == Token::PathSep)
                    && tree.files.contains_key(&child(module, first)) =>
            {
                paths.push(child(module, first));
            }
            _ => {}
        }
        i += 1;
    }
    paths
}

/// The module path of `file`'s child `name`.
fn child(file: &ModPath, name: &str) -> ModPath {
    file.iter().cloned().chain([name.to_string()]).collect()
}

/// The paths of a `use` tree (`a::{b, c::{d, *}}` → a::b, a::c::d, a::c).
fn expand(toks: &[Token]) -> Vec<Vec<String>> {
    fn tree(toks: &[Token], i: &mut usize, prefix: &[String], out: &mut Vec<Vec<String>>) {
        let mut path = prefix.to_vec();
        loop {
            match toks.get(*i) {
                Some(Token::Ident(s)) if s == "as" => {
                    *i += 2;
                }
                Some(Token::Ident(s)) => {
                    path.push(s.clone());
                    *i += 1;
                }
                Some(Token::PathSep) => *i += 1,
                Some(Token::Punct('*')) => *i += 1,
                Some(Token::Punct('{')) => {
                    *i += 1;
                    loop {
                        match toks.get(*i) {
                            Some(Token::Punct('}')) => {
                                *i += 1;
                                break;
                            }
                            Some(Token::Punct(',')) => *i += 1,
                            None => break,
                            _ => tree(toks, i, &path, out),
                        }
                    }
                    return;
                }
                _ => break,
            }
        }
        out.push(path);
    }
    let mut out = Vec::new();
    let mut i = 0;
    // `pub use`, `pub(crate) use` reach here after `use`.
    tree(toks, &mut i, &[], &mut out);
    out
}

/// A path from the crate root, or None for a path into another crate or
/// a name that is no module of this tree's.
fn resolve(
    path: &[String],
    here: &ModPath,
    file: &ModPath,
    tree: &Tree,
    in_use: bool,
) -> Option<Vec<String>> {
    let (first, rest) = path.split_first()?;
    let mut base = match first.as_str() {
        "crate" => Vec::new(),
        "self" => here.clone(),
        "super" => {
            let mut base = here.clone();
            base.pop();
            let mut rest = rest;
            while rest.first().is_some_and(|s| s == "super") {
                base.pop();
                rest = &rest[1..];
            }
            return Some(base.into_iter().chain(rest.iter().cloned()).collect());
        }
        // `use plan::GpuPlan` in gpus/mod.rs: a child module of this file.
        name if in_use => {
            let mut child = file.clone();
            child.push(name.to_string());
            if !tree.files.contains_key(&child) {
                return None;
            }
            file.clone()
        }
        _ => return None,
    };
    if !matches!(first.as_str(), "crate" | "self" | "super") {
        base.extend(path.iter().cloned());
    } else {
        base.extend(rest.iter().cloned());
    }
    Some(base)
}

/// The circles of a graph (strongly connected components of two files or
/// more), by Tarjan's algorithm.
fn circles(edges: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<Vec<ModPath>> {
    struct T<'a> {
        edges: &'a BTreeMap<ModPath, BTreeSet<ModPath>>,
        index: BTreeMap<&'a ModPath, usize>,
        low: BTreeMap<&'a ModPath, usize>,
        stack: Vec<&'a ModPath>,
        on: BTreeSet<&'a ModPath>,
        out: Vec<Vec<ModPath>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a ModPath) {
        let n = t.index.len();
        t.index.insert(v, n);
        t.low.insert(v, n);
        t.stack.push(v);
        t.on.insert(v);
        for w in &t.edges[v] {
            if !t.index.contains_key(w) {
                visit(t, w);
                let l = t.low[w].min(t.low[v]);
                t.low.insert(v, l);
            } else if t.on.contains(w) {
                let l = t.index[w].min(t.low[v]);
                t.low.insert(v, l);
            }
        }
        if t.low[v] == t.index[v] {
            let mut scc = Vec::new();
            loop {
                let w = t.stack.pop().unwrap();
                t.on.remove(w);
                scc.push(w.clone());
                if w == v {
                    break;
                }
            }
            if scc.len() > 1 {
                scc.sort();
                t.out.push(scc);
            }
        }
    }
    let mut t = T {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !t.index.contains_key(v) {
            visit(&mut t, v);
        }
    }
    t.out
}

/// The files in an order where each imports only files before it (for a
/// graph with no circle).
fn order(edges: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<ModPath> {
    let mut done: Vec<ModPath> = Vec::new();
    while done.len() < edges.len() {
        let next = edges
            .iter()
            .find(|(m, deps)| !done.contains(m) && deps.iter().all(|d| done.contains(d)))
            .map(|(m, _)| m.clone());
        match next {
            Some(m) => done.push(m),
            None => break,
        }
    }
    done
}

/// What is wrong with a tree: its circles, and each file that imports one
/// of `roots`.
fn check(tree: &Tree, roots: &[ModPath]) -> Vec<String> {
    let edges = tree.edges();
    let mut problems = Vec::new();
    for scc in circles(&edges) {
        let names: Vec<String> = scc.iter().map(|m| tree.name(m)).collect();
        let inner: Vec<String> = scc
            .iter()
            .flat_map(|from| {
                edges[from]
                    .iter()
                    .filter(|to| scc.contains(to))
                    .map(move |to| (from, to))
            })
            .map(|(from, to)| format!("{} -> {}", tree.name(from), tree.name(to)))
            .collect();
        problems.push(format!(
            "a circle of {} files: {}\n    its imports: {}",
            scc.len(),
            names.join(", "),
            inner.join("; ")
        ));
    }
    for root in roots {
        let by: Vec<String> = edges
            .iter()
            .filter(|(_, deps)| deps.contains(root))
            .map(|(m, _)| tree.name(m))
            .collect();
        if !by.is_empty() {
            problems.push(format!(
                "{} is imported by {}",
                tree.name(root),
                by.join(", ")
            ));
        }
    }
    if problems.is_empty() {
        let names: Vec<String> = order(&edges).iter().map(|m| tree.name(m)).collect();
        println!("{}", names.join(" → "));
    }
    problems
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_core_reads_one_way() {
    let tree = Tree::new(&root().join("core/src"), &[]);
    let problems = check(&tree, &[vec![]]);
    assert!(
        problems.is_empty(),
        "core/src:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn the_shell_reads_one_way() {
    let tree = Tree::new(&root().join("src"), &["core"]);
    let hooks = vec!["spank".to_string(), "hooks".to_string()];
    let problems = check(&tree, &[hooks]);
    assert!(problems.is_empty(), "src:\n  {}", problems.join("\n  "));
}

#[test]
fn the_cli_reads_one_way() {
    let tree = Tree::new(&root().join("cli/src"), &[]);
    let problems = check(&tree, &[]);
    assert!(problems.is_empty(), "cli/src:\n  {}", problems.join("\n  "));
}

/// The checker finds what it is for: a circle through a mod.rs, a path in
/// a function body, a child named in a `use` or in a path, and nothing in
/// comments or strings.
#[test]
fn the_checker_sees_circles_and_ignores_text() {
    let dir = std::env::temp_dir().join(format!("tfc-imports-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("src/gpus")).unwrap();
    let write = |p: &str, s: &str| std::fs::write(dir.join(p), s).unwrap();
    write(
        "src/lib.rs",
        "pub mod a;\npub mod b;\npub mod gpus;\npub use a::A;\n",
    );
    write(
        "src/a.rs",
        "// crate::b::B\nconst S: &str = \"crate::b\";\npub struct A;\n",
    );
    write(
        "src/b.rs",
        "pub fn f() { let _ = crate::a::A; let c = '\"'; }\nmod tests { use super::*; }\n",
    );
    write("src/gpus/mod.rs", "pub mod plan;\npub use plan::Plan;\n");
    write(
        "src/gpus/plan.rs",
        "use super::super::b;\npub struct Plan;\n",
    );
    let tree = Tree::new(&dir.join("src"), &[]);
    let edges = tree.edges();
    let m = |s: &[&str]| -> ModPath { s.iter().map(|x| x.to_string()).collect() };
    assert_eq!(edges[&m(&["a"])], BTreeSet::new(), "comments and strings");
    assert_eq!(edges[&m(&["b"])], BTreeSet::from([m(&["a"])]));
    assert_eq!(edges[&m(&["gpus"])], BTreeSet::from([m(&["gpus", "plan"])]));
    assert_eq!(edges[&m(&["gpus", "plan"])], BTreeSet::from([m(&["b"])]));
    assert!(check(&tree, &[vec![]]).is_empty());

    write("src/gpus/plan.rs", "use super::Plan2;\npub struct Plan;\n");
    write("src/a.rs", "pub struct A; fn g() { crate::f(); }\n");
    let tree = Tree::new(&dir.join("src"), &[]);
    let problems = check(&tree, &[vec![]]);
    let has = |text: &str| problems.iter().filter(|p| p.contains(text)).count();
    assert_eq!(problems.len(), 3, "{problems:?}");
    assert_eq!(
        has("a circle of 2 files: gpus/mod.rs, gpus/plan.rs"),
        1,
        "{problems:?}"
    );
    assert_eq!(has("a circle of 2 files: lib.rs, a.rs"), 1, "{problems:?}");
    assert_eq!(has("lib.rs is imported by a.rs"), 1, "{problems:?}");

    // A crate root calling `child::f()` while the child takes an item
    // from the root.
    std::fs::create_dir_all(dir.join("cli/src")).unwrap();
    write(
        "cli/src/main.rs",
        "mod env;\npub struct Options;\nfn main() { env::run(); let x = y::env::z; }\n",
    );
    write(
        "cli/src/env.rs",
        "pub fn run() { let _ = crate::Options; }\n",
    );
    let tree = Tree::new(&dir.join("cli/src"), &[]);
    assert_eq!(tree.edges()[&m(&[])], BTreeSet::from([m(&["env"])]));
    let problems = check(&tree, &[]);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].contains("a circle of 2 files: main.rs, env.rs"),
        "{problems:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The framework modules core/src/frameworks/mod.rs declares (`pub mod
/// ray;`).
fn framework_modules() -> Vec<String> {
    let text = std::fs::read_to_string(root().join("core/src/frameworks/mod.rs")).unwrap();
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod ")?.strip_suffix(';'))
        .map(String::from)
        .collect()
}

/// The framework modules of `modules` that `text` names in a path
/// (`frameworks::ray::FRAMEWORK`) or a `use` (`use …::{self, ray}`), its
/// comments and strings aside.
fn named_frameworks(text: &str, modules: &[String]) -> Vec<String> {
    let toks = tokens(&strip(text));
    let mut named = BTreeSet::new();
    let mut in_use = false;
    for (i, t) in toks.iter().enumerate() {
        match t {
            Token::Ident(s) if s == "use" => in_use = true,
            Token::Punct(';') => in_use = false,
            Token::Ident(s) if modules.contains(s) => {
                let after_sep = i > 0 && toks[i - 1] == Token::PathSep;
                if after_sep || in_use {
                    named.insert(s.clone());
                }
            }
            _ => {}
        }
    }
    named.into_iter().collect()
}

/// A framework is its file and its line in the table: the node
/// (core/src/node.rs) and the plugin (src/) reach the frameworks through
/// the table and name no framework's module.
#[test]
fn the_node_and_the_plugin_name_no_framework() {
    let modules = framework_modules();
    assert!(modules.contains(&"ray".to_string()), "{modules:?}");
    let mut files = vec![root().join("core/src/node.rs")];
    files.extend(Tree::new(&root().join("src"), &[]).files.into_values());
    let mut problems = Vec::new();
    for file in &files {
        let named = named_frameworks(&std::fs::read_to_string(file).unwrap(), &modules);
        if !named.is_empty() {
            let name = file.strip_prefix(root()).unwrap().display();
            problems.push(format!("{name} names {}", named.join(", ")));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The scan finds a framework's module in a path and in a `use`, and not
/// in comments, strings or the table's name.
#[test]
fn the_framework_scan_sees_paths_and_uses() {
    let modules = vec!["ray".to_string(), "jax".to_string()];
    let named = |text: &str| named_frameworks(text, &modules);
    assert_eq!(named("use crate::core::frameworks::ray;"), ["ray"]);
    assert_eq!(named("use super::frameworks::{self, jax};"), ["jax"]);
    assert_eq!(named("let x = frameworks::ray::FIXED;"), ["ray"]);
    let none: [&str; 0] = [];
    assert_eq!(
        named("// frameworks::ray\nlet s = \"frameworks::jax\"; let ray = FRAMEWORKS;"),
        none
    );
}
