//! The README and the pages of docs/ link only to files, and headings, that
//! exist.

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
