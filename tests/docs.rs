//! The README and the pages of docs/ link only to files, and headings, that
//! exist; no line of the Markdown docs is longer than 100 characters; the
//! pages show the batch scripts the testbed runs as they are and link them.

mod stated;

use std::path::{Path, PathBuf};

/// Link targets `[text](target)` of a Markdown text, but web addresses.
fn links(text: &str) -> Vec<&str> {
    text.split("](")
        .skip(1)
        .filter_map(|rest| rest.split_once(')').map(|(target, _)| target))
        .filter(|t| !t.contains("://") && !t.starts_with("mailto:"))
        .collect()
}

/// The anchors GitHub gives a page's headings: lower case, spaces as `-`,
/// punctuation but `-` and `_` dropped.
fn anchors(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| {
            l.trim_start_matches('#')
                .strip_prefix(' ')
                .filter(|_| l.starts_with('#'))
        })
        .map(|heading| {
            heading
                .to_lowercase()
                .chars()
                .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
                .map(|c| if c == ' ' { '-' } else { c })
                .collect()
        })
        .collect()
}

#[test]
fn links_resolve() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo.join("docs"))
        .expect("docs/")
        .map(|e| e.expect("docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.push(repo.join("README.md"));
    let mut broken = Vec::new();
    for doc in &docs {
        let text = std::fs::read_to_string(doc).unwrap();
        for link in links(&text) {
            let (file, anchor) = link.split_once('#').unwrap_or((link, ""));
            let target = if file.is_empty() {
                doc.clone()
            } else {
                doc.parent().unwrap().join(file)
            };
            let found = target.exists()
                && (anchor.is_empty()
                    || anchors(&std::fs::read_to_string(&target).unwrap_or_default())
                        .iter()
                        .any(|a| a == anchor));
            if !found {
                broken.push(format!("{}: {link}", doc.display()));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "links to nothing:\n{}",
        broken.join("\n")
    );
    assert!(docs.len() > 1, "no pages in docs/");
}

/// The Markdown files under `dir` and its folders.
fn markdown_under(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            markdown_under(&path, found);
        } else if path.extension().is_some_and(|e| e == "md") {
            found.push(path);
        }
    }
}

/// Users', admins' and developers' Markdown: the README and the other
/// top-level pages, docs/ and examples/.
#[test]
fn lines_are_at_most_100_characters() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages: Vec<PathBuf> = ["README.md", "CHANGELOG.md", "SECURITY.md", "BENCHMARKS.md"]
        .iter()
        .map(|p| repo.join(p))
        .collect();
    markdown_under(&repo.join("docs"), &mut pages);
    markdown_under(&repo.join("examples"), &mut pages);
    let mut long = Vec::new();
    for page in &pages {
        let text =
            std::fs::read_to_string(page).unwrap_or_else(|e| panic!("{}: {e}", page.display()));
        for (n, line) in text.lines().enumerate() {
            let chars = line.chars().count();
            if chars > 100 {
                long.push(format!(
                    "{}:{}: {chars} characters",
                    page.strip_prefix(repo).unwrap_or(page).display(),
                    n + 1
                ));
            }
        }
    }
    assert!(
        long.is_empty(),
        "lines over 100 characters (rewrap them; in a table, shorten the cells):\n{}",
        long.join("\n")
    );
    assert!(pages.len() > 4, "no pages in docs/");
}

/// The dates (`YYYY-MM-DD`, years 2000-2099) in a Markdown text's prose: not in
/// fenced code (a command's output keeps its time stamps), not in a link's target
/// or a web address; each with its line number.
fn dates_in_prose(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let mut fenced = false;
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let prose: String = line
            .split_whitespace()
            .filter(|w| !w.contains("://") && !w.contains("]("))
            .collect::<Vec<_>>()
            .join(" ");
        let b = prose.as_bytes();
        for i in 0..b.len().saturating_sub(9) {
            let digits = |r: std::ops::Range<usize>| r.into_iter().all(|k| b[k].is_ascii_digit());
            let before = i == 0 || !b[i - 1].is_ascii_alphanumeric();
            let after = b.get(i + 10).is_none_or(|c| !c.is_ascii_digit());
            if before
                && after
                && &b[i..i + 2] == b"20"
                && digits(i + 2..i + 4)
                && b[i + 4] == b'-'
                && digits(i + 5..i + 7)
                && b[i + 7] == b'-'
                && digits(i + 8..i + 10)
            {
                found.push((n + 1, prose[i..i + 10].to_string()));
            }
        }
    }
    found
}

#[test]
fn dates_in_prose_are_found_outside_code_and_addresses() {
    let text = "Measured on 22.05, 2026-11-24, by hand.\n\
                ```console\nfailed at 2026-11-28T12:03:41\n```\n\
                [a post](https://example.org/2025-11-22/post) and 2026-1-2.\n\
                (as of 2025-09-22; not yet)\n";
    assert_eq!(
        dates_in_prose(text),
        [(1, "2026-11-24".to_string()), (6, "2025-09-22".to_string())]
    );
}

/// Reference pages (the README and docs/) say what holds, in the present
/// tense: a dated measurement belongs in BENCHMARKS.md, history in
/// CHANGELOG.md, and the page names the test that proves what holds.
#[test]
fn reference_pages_carry_no_dates() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages = vec![repo.join("README.md")];
    markdown_under(&repo.join("docs"), &mut pages);
    let mut dated = Vec::new();
    for page in &pages {
        let text =
            std::fs::read_to_string(page).unwrap_or_else(|e| panic!("{}: {e}", page.display()));
        for (n, date) in dates_in_prose(&text) {
            dated.push(format!(
                "{}:{n}: {date}",
                page.strip_prefix(repo).unwrap_or(page).display()
            ));
        }
    }
    assert!(
        dated.is_empty(),
        "dates on reference pages (a dated measurement goes to BENCHMARKS.md, history to \
         CHANGELOG.md; the page keeps what holds and the test that proves it):\n{}",
        dated.join("\n")
    );
    assert!(pages.len() > 4, "no pages in docs/");
}

/// The keys plugstack.conf takes: every setting of the core's table, and the
/// frameworks' options whose argument a site may default
/// (`torch-cluster=elastic`).
fn plugstack_keys() -> Vec<String> {
    let mut keys: Vec<String> = tf_cluster_core::settings::SETTINGS
        .iter()
        .map(|s| s.key.to_string())
        .collect();
    for f in tf_cluster_core::FRAMEWORKS.iter() {
        if f.arg.as_ref().is_some_and(|a| a.site_default) {
            keys.push(f.option.to_string());
        }
    }
    keys.sort();
    keys
}

/// The plugstack.conf argument lists of docs/admin.md and
/// plugstack.conf.example name every key the plugin takes, and no other.
#[test]
fn plugstack_argument_lists_are_the_settings() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let keys = plugstack_keys();
    assert!(keys.len() >= 9, "{keys:?}");

    // The text of `file` between `from` and `to`.
    let between = |file: &str, from: &str, to: &str| {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        let (_, rest) = text
            .split_once(from)
            .unwrap_or_else(|| panic!("{file}: no {from:?}"));
        let (part, _) = rest
            .split_once(to)
            .unwrap_or_else(|| panic!("{file}: no {to:?} after {from:?}"));
        part.to_string()
    };
    let mut in_admin: Vec<String> = between("docs/admin.md", "**Arguments.**", "A bad argument")
        .lines()
        .filter_map(|l| l.strip_prefix("- `"))
        .filter_map(|l| l.split_once('='))
        .map(|(k, _)| k.to_string())
        .collect();
    in_admin.sort();
    assert_eq!(in_admin, keys, "docs/admin.md's plugstack arguments");

    let mut in_example: Vec<String> = between("plugstack.conf.example", "# Site defaults", "\n#\n")
        .split_whitespace()
        .filter_map(|w| w.split_once('='))
        .map(|(k, _)| k.trim_start_matches(|c: char| !c.is_ascii_lowercase()))
        .filter(|k| !k.is_empty() && k.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
        .filter(|k| *k != "key")
        .map(str::to_string)
        .collect();
    in_example.sort();
    in_example.dedup();
    assert_eq!(in_example, keys, "plugstack.conf.example's site defaults");
}

/// The bullets of a Markdown list in `file` between `from` and `to`, each
/// with its continuation lines (indented ones and sub-lists), by the text
/// after `- \``.
fn bullets(file: &str, from: &str, to: &str) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join(file)).unwrap();
    let (_, rest) = text.split_once(from).expect(from);
    let (part, _) = rest.split_once(to).expect(to);
    let mut found: Vec<String> = Vec::new();
    for line in part.lines() {
        match (line.strip_prefix("- `"), found.last_mut()) {
            (Some(start), _) => found.push(start.to_string()),
            (None, Some(last)) if line.starts_with(' ') || line.is_empty() => {
                last.push('\n');
                last.push_str(line);
            }
            _ => {}
        }
    }
    found
}

/// What `file`'s bullets (see [`bullets`]) say of each setting, its bullet
/// beginning with `{prefix}{key}=`, held to the core's table: the declared
/// default, and the declared range where it has one (`range_required`) or
/// where the bullet states one. `all_required`: a bullet for every setting.
fn settings_stated(file: &str, bullets: &[String], prefix: &str, all_required: bool) {
    let range_required = all_required;
    let mut wrong = Vec::new();
    for s in &tf_cluster_core::settings::SETTINGS {
        let start = format!("{prefix}{}=", s.key);
        let mine: Vec<&String> = bullets.iter().filter(|b| b.starts_with(&start)).collect();
        match mine[..] {
            [bullet] => {
                let text = stated::plain(bullet);
                for why in stated::disagreements(s, &text, range_required) {
                    wrong.push(format!("{start}: {why}"));
                }
            }
            [] if !all_required => {}
            _ => wrong.push(format!("{start}: {} bullets, not one", mine.len())),
        }
    }
    assert!(wrong.is_empty(), "{file}:\n{}", wrong.join("\n"));
}

/// docs/admin.md's plugstack.conf arguments state, for every setting, the
/// range and the default the core's table declares, and no other.
#[test]
fn admin_arguments_state_the_tables_ranges_and_defaults() {
    let file = "docs/admin.md";
    let bullets = bullets(file, "**Arguments.**", "A bad argument");
    settings_stated(file, &bullets, "", true);
}

/// docs/user-guide.md's options state the defaults, and any range, the
/// core's table declares.
#[test]
fn user_guide_options_state_the_tables_ranges_and_defaults() {
    let file = "docs/user-guide.md";
    let bullets = bullets(file, "\n## Options\n", "\n## ");
    let options = bullets.iter().filter(|b| b.starts_with("--tf-")).count();
    assert!(options > 5, "{file}: {options} --tf- options in ## Options");
    settings_stated(file, &bullets, "--tf-", false);
}

/// docs/launchers.md quotes the refusals of a bad framework value as the
/// core words them today (srun prints them after `tf-cluster: `).
#[test]
fn launchers_page_quotes_the_current_refusals() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let page = std::fs::read_to_string(root.join("docs/launchers.md"))
        .unwrap()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    for (option, value) in [("torch-cluster", "0"), ("jax-cluster", "0")] {
        let f = tf_cluster_core::FRAMEWORKS
            .iter()
            .find(|f| f.option == option)
            .unwrap();
        let e = tf_cluster_core::frameworks::check_value(f, value)
            .expect_err("a bad value")
            .to_string();
        let quoted = format!("tf-cluster: {e}");
        assert!(
            page.contains(&quoted),
            "docs/launchers.md does not quote {quoted:?}"
        );
    }
}

/// The scripts the testbed's tests run (tests/fixtures/FRAMEWORK/), as
/// `page` shows and links them: `shown` appear in it as they are, `linked`
/// are linked from it (the page is in docs/, so the link is `../tests/…`).
fn shows_and_links(page: &str, framework: &str, shown: &[&str], linked: &[&str]) {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |path: &str| {
        std::fs::read_to_string(repo.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
    };
    let doc = read(page);
    for name in shown {
        let file = read(&format!("tests/fixtures/{framework}/{name}"));
        assert!(
            doc.contains(file.trim_end()),
            "{page} does not show tests/fixtures/{framework}/{name} as it is"
        );
    }
    for name in linked {
        assert!(
            doc.contains(&format!("](../tests/fixtures/{framework}/{name})")),
            "{page} does not link tests/fixtures/{framework}/{name}"
        );
    }
}

/// docs/frameworks.md shows the launcher batch scripts the testbed runs
/// (tests/testbed/launchers.rs) as they are, and links them and their
/// programs. (The README points users at the templates in examples/
/// instead; [`links_resolve`] checks its links.)
#[test]
fn docs_show_and_link_the_launcher_scripts() {
    shows_and_links(
        "docs/frameworks.md",
        "pytorch",
        &["torchrun.sbatch", "lightning.sbatch", "accelerate.sbatch"],
        &[
            "ddp.py",
            "torchrun.sbatch",
            "lightning.sbatch",
            "lightning_train.py",
            "accelerate.sbatch",
            "accelerate_train.py",
        ],
    );
}

/// The TensorFlow examples page shows both batch scripts the testbed runs
/// (tests/testbed/tensorflow.rs) as they are and links every file of them.
/// (The README points users at the templates in examples/ instead;
/// [`links_resolve`] checks its links.)
#[test]
fn docs_show_and_link_the_tensorflow_scripts() {
    shows_and_links(
        "docs/tensorflow-examples.md",
        "tensorflow",
        &["mwms.sbatch", "ps.sbatch"],
        &[
            "mwms.sbatch",
            "mwms.py",
            "ps.sbatch",
            "ps.py",
            "evaluator.sbatch",
            "evaluator.py",
            "show_resolver.py",
        ],
    );
}

/// The Rust files under `dir`, as paths from the repository's root.
fn rust_files_under(repo: &Path, dir: &str, found: &mut Vec<String>) {
    let full = repo.join(dir);
    for entry in std::fs::read_dir(&full).unwrap_or_else(|e| panic!("{dir}: {e}")) {
        let name = entry.expect("directory entry").file_name();
        let path = format!("{dir}/{}", name.to_string_lossy());
        if repo.join(&path).is_dir() {
            rust_files_under(repo, &path, found);
        } else if path.ends_with(".rs") {
            found.push(path);
        }
    }
}

/// docs/building.md's map of the files names every source file of the core
/// (its frameworks too), the plugin and the CLI, each at the start of its
/// own line with what it holds; and no path of those folders on the page
/// names a file that does not exist.
#[test]
fn building_map_names_every_source_file() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let page = std::fs::read_to_string(repo.join("docs/building.md")).unwrap();
    let mut files = Vec::new();
    for dir in ["core/src", "src", "cli/src"] {
        rust_files_under(repo, dir, &mut files);
    }
    files.sort();
    assert!(files.len() > 50, "{} source files", files.len());
    let mapped: Vec<&str> = page
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| w.ends_with(".rs"))
        .collect();
    let missing: Vec<&String> = files
        .iter()
        .filter(|f| !mapped.contains(&f.as_str()) || !page.contains(&format!("\n{f} ")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/building.md's map does not name these files (one line each, path first, then \
         what it holds):\n{}",
        missing
            .iter()
            .map(|f| f.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
    let named: Vec<&str> = page
        .split(|c: char| c.is_whitespace() || matches!(c, '`' | '(' | ')' | ',' | ';' | ':'))
        .filter(|w| w.ends_with(".rs"))
        .filter(|w| {
            ["core/src/", "src/", "cli/src/"]
                .iter()
                .any(|d| w.starts_with(d))
        })
        .collect();
    let absent: Vec<&str> = named
        .into_iter()
        .filter(|w| !repo.join(w).is_file())
        .collect();
    assert!(
        absent.is_empty(),
        "docs/building.md names files that do not exist:\n{}",
        absent.join("\n")
    );
}

/// The CLI's subcommands, as `tf-cluster --help` lists them: the variants
/// of `enum Command` in cli/src/main.rs, in kebab case (`LauncherEnv` is
/// `launcher-env`).
fn cli_subcommands() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let main = std::fs::read_to_string(root.join("cli/src/main.rs")).unwrap();
    let (_, body) = main
        .split_once("enum Command {")
        .expect("cli/src/main.rs: no enum Command");
    let (body, _) = body.split_once("\n}").expect("enum Command's end");
    // A hidden subcommand (`#[command(hide = true)]`, the preflight's
    // probe) is the plugin's, not the users'.
    let mut hidden = false;
    body.lines()
        .filter(|l| l.starts_with("    ") && !l.starts_with("     "))
        .map(str::trim)
        .filter(|l| {
            let name = l.starts_with(|c: char| c.is_ascii_uppercase());
            let keep = name && !hidden;
            if name {
                hidden = false;
            } else if l.contains("hide = true") {
                hidden = true;
            }
            keep
        })
        .map(|l| {
            let name: String = l.chars().take_while(|c| c.is_alphanumeric()).collect();
            let mut kebab = String::new();
            for (i, c) in name.chars().enumerate() {
                if c.is_ascii_uppercase() && i > 0 {
                    kebab.push('-');
                }
                kebab.push(c.to_ascii_lowercase());
            }
            kebab
        })
        .collect()
}

/// The README, the user guide, the CLI's page, the launchers' page and
/// troubleshooting name every option the plugin adds (each setting's
/// `--tf-<key>`, each framework's option) and every subcommand of
/// `tf-cluster`.
#[test]
fn user_pages_name_every_option_and_subcommand() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut wanted: Vec<String> = tf_cluster_core::settings::SETTINGS
        .iter()
        .map(|s| format!("`--tf-{}", s.key))
        .collect();
    wanted.extend(
        tf_cluster_core::FRAMEWORKS
            .iter()
            .map(|f| format!("`--{}", f.option)),
    );
    let commands = cli_subcommands();
    assert!(
        commands.len() >= 6 && commands.iter().any(|c| c == "launcher-env"),
        "cli/src/main.rs: subcommands read as {commands:?}"
    );
    wanted.extend(commands.iter().map(|c| format!("`tf-cluster {c}")));
    let mut missing = Vec::new();
    for page in [
        "README.md",
        "docs/user-guide.md",
        "docs/cli.md",
        "docs/launchers.md",
        "docs/troubleshooting.md",
    ] {
        let text = std::fs::read_to_string(root.join(page)).unwrap();
        for name in &wanted {
            // The name ends there: `--tf-record` is not `--tf-record-log`.
            let named = text.match_indices(name.as_str()).any(|(at, _)| {
                let next = text[at + name.len()..].chars().next();
                !next.is_some_and(|c| c.is_alphanumeric() || c == '-')
            });
            if !named {
                missing.push(format!("{page}: {}", name.trim_start_matches('`')));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "pages that do not name an option or subcommand (in backquotes):\n{}",
        missing.join("\n")
    );
}
