//! Findings about the installation (the doctor's, and the plugstack walk's), how
//! they print and the exit code they give.

use std::fmt::Write as _;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Ok,
    Warn,
    Fail,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub level: Level,
    pub text: String,
    /// What the finding is about (a file, a plugstack line): one thing is
    /// never both ok and FAIL in a report.
    about: Vec<String>,
}

#[derive(Debug, Default)]
pub struct Report {
    pub findings: Vec<Finding>,
}

impl Report {
    pub fn add(&mut self, level: Level, text: impl Into<String>) {
        self.add_about(level, &[], text);
    }

    /// A finding about `about` (files, plugstack lines): a failure of one of
    /// them takes back what was found ok about it, and once one has failed
    /// nothing more is ok about it; the failure names it.
    pub fn add_about(&mut self, level: Level, about: &[&str], text: impl Into<String>) {
        let shares = |f: &Finding| f.about.iter().any(|a| about.contains(&a.as_str()));
        match level {
            Level::Fail => self.findings.retain(|f| f.level != Level::Ok || !shares(f)),
            Level::Ok
                if self
                    .findings
                    .iter()
                    .any(|f| f.level == Level::Fail && shares(f)) =>
            {
                return;
            }
            _ => {}
        }
        self.findings.push(Finding {
            level,
            text: text.into(),
            about: about.iter().map(|a| a.to_string()).collect(),
        });
    }

    pub fn worst(&self) -> Level {
        self.findings
            .iter()
            .map(|f| f.level)
            .max()
            .unwrap_or(Level::Ok)
    }

    /// 0: healthy; 1: a problem that breaks srun or the plugin; 2: warnings only.
    pub fn exit_code(&self) -> u8 {
        match self.worst() {
            Level::Ok => 0,
            Level::Fail => 1,
            Level::Warn => 2,
        }
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        for f in &self.findings {
            let tag = match f.level {
                Level::Ok => "ok  ",
                Level::Warn => "WARN",
                Level::Fail => "FAIL",
            };
            let _ = writeln!(out, "{tag} {}", f.text);
        }
        let count = |l| self.findings.iter().filter(|f| f.level == l).count();
        let _ = match self.worst() {
            Level::Ok => writeln!(out, "healthy"),
            Level::Warn => writeln!(out, "works, with {} warning(s)", count(Level::Warn)),
            Level::Fail => writeln!(
                out,
                "BROKEN: {} problem(s), {} warning(s)",
                count(Level::Fail),
                count(Level::Warn)
            ),
        };
        out
    }
}
