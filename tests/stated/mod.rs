//! What a page states of a setting, held to the core's table of settings:
//! the range and the default the table declares, and no other. Used by
//! tests/docs.rs (the admin and user guides) and cli/tests/man.rs (the
//! manual).

use tf_cluster_core::settings::Setting;

/// `text` as a reader sees it: roff's `\-` as `-`, `÷` as `/`, no Markdown
/// backquotes, every run of white space one space.
pub fn plain(text: &str) -> String {
    text.replace("\\-", "-")
        .replace('`', "")
        .replace('÷', "/")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// The number ranges `N-M` of `text` (a word of its own: `node1-3` is none).
fn number_ranges(text: &str) -> Vec<String> {
    let bytes = text.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let word_start = i == 0 || !bytes[i - 1].is_ascii_alphanumeric();
        if !(word_start && bytes[i].is_ascii_digit()) {
            i += 1;
            continue;
        }
        let digits = |from: usize| {
            from + bytes[from..]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .count()
        };
        let lo_end = digits(i);
        let hi_end = if bytes.get(lo_end) == Some(&b'-') {
            digits(lo_end + 1)
        } else {
            lo_end
        };
        let ends_word = bytes.get(hi_end).is_none_or(|b| !b.is_ascii_alphanumeric());
        if hi_end > lo_end + 1 && ends_word {
            found.push(text[i..hi_end].to_string());
        }
        i = hi_end.max(i + 1);
    }
    found
}

/// Where `entry`, what a page says of `setting` (made [`plain`]), disagrees
/// with the table: a "default" not followed by the declared words (and
/// none at all), a number range other than the declared range or default,
/// the declared range missing where `range_required`.
pub fn disagreements(setting: &Setting, entry: &str, range_required: bool) -> Vec<String> {
    let mut wrong = Vec::new();
    let words = setting.default.words();
    let lower = entry.to_lowercase();
    let stated: Vec<&str> = lower
        .split("default")
        .skip(1)
        .filter(|after| !after.starts_with(|c: char| c.is_alphabetic()))
        .collect();
    if stated.is_empty() {
        wrong.push(format!("states no default; the code's is {words:?}"));
    }
    for after in stated {
        let after = after.strip_prefix(':').unwrap_or(after);
        if !after
            .strip_prefix(' ')
            .is_some_and(|a| a.starts_with(&words.to_lowercase()))
        {
            let said: String = after.chars().take(words.len() + 8).collect();
            wrong.push(format!("says \"default{said}\"; the code's is {words:?}"));
        }
    }
    let declared = setting.range.map(|(lo, hi)| format!("{lo}-{hi}"));
    let ranges = number_ranges(entry);
    for range in &ranges {
        if Some(range) != declared.as_ref() && range != words {
            let code = declared.as_deref().unwrap_or("no range");
            wrong.push(format!("says {range}; the code takes {code}"));
        }
    }
    if let Some(declared) = declared.filter(|d| range_required && !ranges.contains(d)) {
        wrong.push(format!("states no range; the code takes {declared}"));
    }
    wrong
}
