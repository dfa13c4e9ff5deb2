//! The manual page cli/tf-cluster.1 (installed by the .deb and the .rpm as
//! /usr/share/man/man1/tf-cluster.1) says what `--help` says: the same
//! commands, options and variables read; and of each setting what the
//! core's table declares: its argument, range, default and help.

mod hermetic;
#[path = "../../tests/stated/mod.rs"]
mod stated;

use tf_cluster_core::settings::{SETTINGS, Setting};

use std::collections::BTreeSet;

const MAN: &str = include_str!("../tf-cluster.1");

fn help(args: &[&str]) -> String {
    let out = hermetic::tf_cluster()
        .args(args)
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// Words of `text` that begin with `prefix` and go on with characters `ok`
/// takes.
fn words(text: &str, prefix: &str, ok: impl Fn(char) -> bool) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find(prefix) {
        let before = rest[..at].chars().last();
        let tail = &rest[at + prefix.len()..];
        let len = tail.find(|c: char| !ok(c)).unwrap_or(tail.len());
        if len > 0 && !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            found.insert(format!("{prefix}{}", tail[..len].trim_end_matches('-')));
        }
        rest = &tail[len..];
    }
    found
}

const COMMANDS: [&str; 5] = ["env", "preview", "launcher-env", "doctor", "hang"];

fn options_in_help() -> BTreeSet<String> {
    let mut all = BTreeSet::new();
    for command in COMMANDS {
        // Option lines only: the examples name options of srun too.
        let text = help(&[command]);
        for line in text.lines().map(str::trim_start) {
            // `-n, --ntasks <N>`, before the help text beside it, if any.
            if line.starts_with('-') {
                let names = line.split("  ").next().unwrap_or_default();
                all.extend(words(names, "--", |c| c.is_ascii_lowercase() || c == '-'));
            }
        }
    }
    all.remove("--help");
    all
}

#[test]
fn every_option_is_in_the_manual_and_back() {
    let help = options_in_help();
    let mut man: BTreeSet<String> = words(&MAN.replace("\\-", "-"), "--", |c| {
        c.is_ascii_lowercase() || c == '-'
    });
    man.remove("--help");
    // Options of other programs the manual names: Apptainer's, sbatch's
    // and srun's (hang's overlap step; --cpu-bind, which wins over --tf-bind).
    for other in [
        "--cleanenv",
        "--no-requeue",
        "--overlap",
        "--jobid",
        "--cpu-bind",
    ] {
        assert!(!help.contains(other), "{other} is an option of tf-cluster");
        man.remove(other);
    }
    let missing: Vec<&String> = help.difference(&man).collect();
    assert!(
        missing.is_empty(),
        "in --help, not in tf-cluster.1: {missing:?}"
    );
    let stale: Vec<&String> = man.difference(&help).collect();
    assert!(
        stale.is_empty(),
        "in tf-cluster.1, not in --help: {stale:?}"
    );
    for command in COMMANDS {
        assert!(
            MAN.contains(&format!(".B tf-cluster {command}")),
            "{command}"
        );
        assert!(MAN.contains(&format!(".B {command}\n")), "{command}");
    }
}

#[test]
fn every_variable_read_is_in_the_manual_and_back() {
    let var = |c: char| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_';
    let mut help_vars = BTreeSet::new();
    for command in ["env", "preview"] {
        let text = help(&[command]);
        let (_, read) = text.split_once("Where the facts come from:").unwrap();
        help_vars.extend(words(read, "SLURM", var));
        help_vars.extend(words(read, "CUDA_", var));
    }
    let (_, environment) = MAN.split_once(".SH ENVIRONMENT").unwrap();
    let (environment, _) = environment.split_once(".SH ").unwrap();
    let mut man_vars = words(environment, "SLURM", var);
    man_vars.extend(words(environment, "CUDA_", var));
    assert_eq!(help_vars, man_vars);
    assert!(help_vars.contains("SLURM_JOB_NODELIST"), "{help_vars:?}");
    assert!(help_vars.contains("SLURM_TASKS_PER_NODE"), "{help_vars:?}");
}

/// `--help` gives examples and the variables read.
#[test]
fn help_gives_examples() {
    for command in ["env", "preview"] {
        let text = help(&[command]);
        assert!(
            text.contains("Examples:\n  tf-cluster "),
            "{command}: {text}"
        );
        assert!(text.contains("SLURM_JOB_NODELIST"), "{command}");
    }
    assert!(help(&[]).contains("Examples:"));
}

/// The manual's entry for `--tf-<key>` in PLUGIN OPTIONS: its tag line
/// (`.BI \-\-tf-KEY " ARG"`) and its text, as a reader sees them.
fn man_entry(setting: &Setting) -> Option<(String, String)> {
    let (_, section) = MAN.split_once(".SH PLUGIN OPTIONS\n").unwrap();
    let (section, _) = section.split_once("\n.SH ").unwrap();
    let tag = format!("\\-\\-tf-{} \"", setting.key);
    section.split("\n.TP\n").find_map(|entry| {
        let (head, text) = entry.split_once('\n')?;
        head.contains(&tag)
            .then(|| (stated::plain(head), stated::plain(text)))
    })
}

/// Each setting's entry in the manual states the range and the default
/// the core's table declares, and no other (a `--tf-requeue-on` of 1-255
/// where the code takes 3-125 fails here).
#[test]
fn every_setting_in_the_manual_has_the_tables_range_and_default() {
    let mut wrong = Vec::new();
    for s in &SETTINGS {
        let Some((head, text)) = man_entry(s) else {
            wrong.push(format!("--tf-{}: no entry in PLUGIN OPTIONS", s.key));
            continue;
        };
        if !head.ends_with(&format!("--tf-{} \" {}\"", s.key, s.arg)) {
            wrong.push(format!(
                "--tf-{}: {head:?} names not the argument {}",
                s.key, s.arg
            ));
        }
        for why in stated::disagreements(s, &text, true) {
            wrong.push(format!("--tf-{}: the manual {why}", s.key));
        }
    }
    assert!(wrong.is_empty(), "tf-cluster.1:\n{}", wrong.join("\n"));
}

/// Each setting's entry begins with its help, the text srun's and the
/// CLI's `--help` show, as one sentence: what the option means is said
/// once, in the table.
#[test]
fn every_setting_in_the_manual_begins_with_its_help() {
    let mut wrong = Vec::new();
    for s in &SETTINGS {
        let Some((_, text)) = man_entry(s) else {
            continue;
        };
        // As a sentence: a capital letter where the help has none.
        let sentence = format!("{}.", s.help_text());
        let begins = text.get(..sentence.len()).is_some_and(|b| {
            b[..1].eq_ignore_ascii_case(&sentence[..1]) && b[1..] == sentence[1..]
        });
        if !begins {
            wrong.push(format!(
                "--tf-{}: begins {text:?}\n  not with its help {sentence:?}",
                s.key
            ));
        }
    }
    assert!(wrong.is_empty(), "tf-cluster.1:\n{}", wrong.join("\n"));
}
