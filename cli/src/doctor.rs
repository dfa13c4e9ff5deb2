//! `tf-cluster doctor`: checks, on a node or a login node, what decides
//! whether srun works with the plugin: the plugstack.conf line(s) that load it
//! (includes followed), the .so they name and the Slurm it was built for, the
//! `required` flag, the site arguments, that the plugin is the same build as
//! this CLI, and whether Slurm reserves ports for steps.
//!
//! [`diagnose`] is pure: it sees the machine through [`Host`], which
//! [`System`] implements with real files and commands.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;

use crate::elf::{self, PluginInfo};
use tf_cluster_core::Settings;

/// Where Slurm looks for slurm.conf when SLURM_CONF is not set (Debian's and
/// SchedMD's builds).
pub const DEFAULT_SLURM_CONF: &str = "/etc/slurm/slurm.conf";

/// Where a relative plugstack path is searched when slurm.conf has no
/// PluginDir: Debian's and the RHEL family's plugin directories.
pub const DEFAULT_PLUGIN_DIRS: [&str; 3] = [
    "/usr/lib/x86_64-linux-gnu/slurm-wlm",
    "/usr/lib64/slurm",
    "/usr/lib/slurm",
];

/// The plugin's `plugin_name`.
pub const PLUGIN_NAME: &str = "tf_cluster";

/// Includes nested deeper than this are reported as a loop.
const MAX_INCLUDE_DEPTH: usize = 8;

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
}

#[derive(Debug, Default)]
pub struct Report {
    pub findings: Vec<Finding>,
}

impl Report {
    fn add(&mut self, level: Level, text: impl Into<String>) {
        self.findings.push(Finding {
            level,
            text: text.into(),
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

/// A plugin file as found on disk.
#[derive(Debug, Clone)]
pub struct PluginFile {
    /// Readable by every user (srun runs as the user and opens it).
    pub world_readable: bool,
    /// What its ELF symbols say, or why they could not be read.
    pub info: Result<PluginInfo, String>,
}

/// The machine as the doctor sees it.
pub trait Host {
    fn env(&mut self, name: &str) -> Option<String>;
    fn read(&mut self, path: &str) -> std::io::Result<String>;
    /// The paths matching a glob(3) pattern, sorted; none when nothing matches.
    fn glob(&mut self, pattern: &str) -> Vec<String>;
    /// None: no such file.
    fn plugin(&mut self, path: &str) -> Option<PluginFile>;
    /// The installed Slurm's version number (0xMMmmuu) and where it came from.
    fn slurm_version(&mut self) -> Option<(u32, String)>;
    /// `scontrol show config`, when slurm.conf cannot be read (configless).
    fn show_config(&mut self) -> Option<String>;
}

/// `24.11.5` from 0x180b05.
pub fn version_text(v: u32) -> String {
    format!("{}.{:02}.{}", v >> 16, (v >> 8) & 0xff, v & 0xff)
}

/// The version `srun --version` prints: `slurm 24.11.5`, `slurm-wlm 22.05.8`.
pub fn parse_srun_version(text: &str) -> Option<u32> {
    let word = text.split_whitespace().nth(1)?;
    let mut parts = word.split(['.', '-']);
    let mut next = || parts.next()?.parse::<u32>().ok().filter(|&n| n < 256);
    let (major, minor, micro) = (next()?, next()?, next().unwrap_or(0));
    Some(major << 16 | minor << 8 | micro)
}

/// SLURM_VERSION_NUMBER from slurm_version.h.
pub fn parse_version_header(text: &str) -> Option<u32> {
    text.lines().find_map(|line| {
        let rest = line.trim().strip_prefix("#define")?.trim_start();
        let hex = rest.strip_prefix("SLURM_VERSION_NUMBER")?.trim();
        u32::from_str_radix(hex.strip_prefix("0x")?, 16).ok()
    })
}

/// The top-level `Key=Value` settings of slurm.conf (keys lower-cased, the
/// last one wins, comments dropped). Lines holding several pairs (NodeName=…)
/// give their first pair, which is all that is looked up here.
pub fn parse_slurm_conf(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|line| {
            let line = line.split('#').next().unwrap_or_default().trim();
            let (key, value) = line.split_once('=')?;
            let value = value.trim();
            // `Key=Value Other=…`: only the first pair.
            let value = value.split_whitespace().next().unwrap_or_default();
            Some((key.trim().to_ascii_lowercase(), value.to_string()))
        })
        .collect()
}

/// `scontrol show config` lines `Name   = value` as [`parse_slurm_conf`] gives.
pub fn parse_show_config(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|line| {
            let (key, value) = line.split_once(" = ")?;
            Some((key.trim().to_ascii_lowercase(), value.trim().to_string()))
        })
        .collect()
}

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
struct Loaded {
    at: String,
    required: bool,
    path: String,
    args: Vec<String>,
}

fn dirname(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) => "/",
        Some(i) => &path[..i],
        None => ".",
    }
}

fn walk(host: &mut dyn Host, file: &str, depth: usize, report: &mut Report, out: &mut Vec<Loaded>) {
    let text = match host.read(file) {
        Ok(text) => text,
        Err(e) if depth == 0 => {
            report.add(
                Level::Fail,
                format!("plugstack.conf {file}: {e}: no SPANK plugin is loaded"),
            );
            return;
        }
        Err(e) => {
            report.add(
                Level::Fail,
                format!("{file}: {e} (included, so srun fails)"),
            );
            return;
        }
    };
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
                    walk(host, &included, depth + 1, report, out);
                }
            }
            StackLine::Plugin { required, path, args } => out.push(Loaded { at, required, path, args }),
        }
    }
}

/// Checks the installation; `own_build_id` is this CLI's.
pub fn diagnose(host: &mut dyn Host, own_build_id: &str) -> Report {
    let mut report = Report::default();

    // slurm.conf: where plugstack.conf is, the plugin directory, MpiParams.
    let conf_path = host
        .env("SLURM_CONF")
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| DEFAULT_SLURM_CONF.to_string());
    let conf = match host.read(&conf_path) {
        Ok(text) => Some((parse_slurm_conf(&text), conf_path.clone())),
        Err(e) => match host.show_config() {
            Some(text) => {
                report.add(
                    Level::Ok,
                    format!("slurm.conf {conf_path}: {e}; settings from `scontrol show config`"),
                );
                Some((parse_show_config(&text), "scontrol show config".to_string()))
            }
            None => {
                report.add(
                    Level::Warn,
                    format!("slurm.conf {conf_path}: {e}, and `scontrol show config` failed"),
                );
                None
            }
        },
    };
    let setting = |key: &str| conf.as_ref().and_then(|(c, _)| c.get(key).cloned());
    let (plugstack, why) =
        match setting("plugstackconfig").filter(|p| !p.is_empty() && p != "(null)") {
            Some(p) => (p, "PlugStackConfig"),
            None => (
                format!("{}/plugstack.conf", dirname(&conf_path)),
                "Slurm's default, beside slurm.conf",
            ),
        };
    report.add(Level::Ok, format!("plugstack.conf: {plugstack} ({why})"));
    let plugin_dirs: Vec<String> = match setting("plugindir") {
        Some(dirs) if !dirs.is_empty() && dirs != "(null)" => {
            dirs.split(':').map(str::to_string).collect()
        }
        _ => DEFAULT_PLUGIN_DIRS.map(str::to_string).to_vec(),
    };

    // The plugstack lines, includes followed.
    let mut loaded = Vec::new();
    walk(host, &plugstack, 0, &mut report, &mut loaded);

    // Which lines load tf-cluster: by plugin_name, or by file name when unreadable.
    let installed = host.slurm_version();
    let mut ours = Vec::new();
    for line in loaded {
        let path = if line.path.starts_with('/') {
            line.path.clone()
        } else {
            plugin_dirs
                .iter()
                .map(|d| format!("{d}/{}", line.path))
                .find(|p| host.plugin(p).is_some())
                .unwrap_or_else(|| line.path.clone())
        };
        let file = host.plugin(&path);
        let named_ours = Path::new(&path)
            .file_name()
            .is_some_and(|n| n.to_string_lossy().contains(PLUGIN_NAME));
        let is_ours = match &file {
            Some(PluginFile { info: Ok(info), .. }) => info.name.as_deref() == Some(PLUGIN_NAME),
            _ => named_ours,
        };
        if is_ours {
            ours.push((line, path, file));
        } else if file.is_none() && line.required {
            // Another plugin, but srun fails all the same.
            report.add(
                Level::Fail,
                format!(
                    "{}: required {path} does not exist: every srun fails",
                    line.at
                ),
            );
        }
    }

    match ours.len() {
        0 => report.add(
            Level::Fail,
            format!("no line of {plugstack} (includes followed) loads {PLUGIN_NAME}: --tf-cluster is unknown to srun"),
        ),
        1 => {}
        n => report.add(
            Level::Fail,
            format!(
                "{PLUGIN_NAME} is loaded {n} times ({}): the second cannot register --tf-cluster and srun fails",
                ours.iter().map(|(l, _, _)| l.at.as_str()).collect::<Vec<_>>().join(", ")
            ),
        ),
    }
    for (line, path, file) in &ours {
        check_plugin(
            &mut report,
            line,
            path,
            file.as_ref(),
            installed.as_ref(),
            own_build_id,
        );
    }

    // Ports: with MpiParams=ports every step gets its own.
    match &conf {
        Some((_, from)) => match setting("mpiparams").filter(|m| m.contains("ports=")) {
            Some(m) => report.add(
                Level::Ok,
                format!("Slurm reserves ports for every step (MpiParams={m} in {from}): concurrent steps on a node never clash"),
            ),
            None => report.add(
                Level::Warn,
                format!("no MpiParams=ports=… in {from}: concurrent --tf-cluster steps on one node use the same ports (8888…) unless started with srun --resv-ports"),
            ),
        },
        None => report.add(Level::Warn, "cannot tell whether Slurm reserves ports (no slurm.conf)"),
    }
    report
}

fn check_plugin(
    report: &mut Report,
    line: &Loaded,
    path: &str,
    file: Option<&PluginFile>,
    installed: Option<&(u32, String)>,
    own_build_id: &str,
) {
    let at = &line.at;
    let kind = if line.required {
        "required"
    } else {
        "optional"
    };
    let Some(file) = file else {
        let effect = if line.required {
            "every srun fails (\"Failed to load plugin\")"
        } else {
            "Slurm skips it: --tf-cluster is unknown to srun"
        };
        report.add(
            Level::Fail,
            format!("{at}: {kind} {path} does not exist: {effect}"),
        );
        return;
    };
    let info = match &file.info {
        Ok(info) => info,
        Err(e) => {
            report.add(
                Level::Fail,
                format!("{at}: {path} is not a readable plugin: {e}"),
            );
            return;
        }
    };
    report.add(Level::Ok, format!("{at}: {kind} {path}"));
    if !file.world_readable {
        report.add(
            Level::Fail,
            format!("{path} is not readable by every user: srun, run by the user, cannot load it"),
        );
    }
    match (info.version, installed) {
        (None, _) => report.add(Level::Fail, format!("{path} exports no plugin_version: Slurm refuses it")),
        (Some(v), Some((slurm, from))) if v >> 8 == slurm >> 8 => report.add(
            Level::Ok,
            format!("built for Slurm {}, this node runs {} ({from})", version_text(v), version_text(*slurm)),
        ),
        (Some(v), Some((slurm, from))) => report.add(
            Level::Fail,
            format!(
                "built for Slurm {}, this node runs {} ({from}): Slurm refuses a plugin of another major.minor (\"Incompatible plugin version\"); install the tf-cluster package built for Slurm {}.{:02}",
                version_text(v),
                version_text(*slurm),
                slurm >> 16,
                (slurm >> 8) & 0xff
            ),
        ),
        (Some(v), None) => report.add(
            Level::Warn,
            format!("built for Slurm {}; cannot tell this node's Slurm (no working `srun --version`, no slurm_version.h)", version_text(v)),
        ),
    }
    if !line.required {
        report.add(
            Level::Warn,
            format!("{at}: optional: Slurm ignores the plugin's errors, so a step it refuses runs without TF_CONFIG; write `required`"),
        );
    }
    match Settings::from_admin_args(line.args.iter().map(String::as_str)) {
        Ok(_) if line.args.is_empty() => {
            report.add(Level::Ok, "site arguments: none (built-in defaults)")
        }
        Ok(_) => report.add(
            Level::Ok,
            format!("site arguments: {}", line.args.join(" ")),
        ),
        Err(e) => report.add(
            Level::Fail,
            format!("{at}: {e}: srun refuses every --tf-cluster step"),
        ),
    }
    match info.build_id.as_deref() {
        Some(id) if id == own_build_id => report.add(Level::Ok, format!("same build as this CLI ({id})")),
        Some(id) => report.add(
            Level::Warn,
            format!("the plugin is build \"{id}\", this CLI \"{own_build_id}\": `tf-cluster env|explain` may differ from the plugin"),
        ),
        None => report.add(Level::Warn, format!("{path} carries no build id (an older build): cannot tell it from this CLI's")),
    }
}

/// The real machine.
pub struct System;

impl Host for System {
    fn env(&mut self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }

    fn read(&mut self, path: &str) -> std::io::Result<String> {
        std::fs::read_to_string(path)
    }

    fn glob(&mut self, pattern: &str) -> Vec<String> {
        let Ok(c_pattern) = std::ffi::CString::new(pattern) else {
            return Vec::new();
        };
        // SAFETY: glob(3) with a NUL-terminated pattern and a zeroed glob_t,
        // freed by globfree on every path once the results are copied out.
        unsafe {
            let mut g: libc::glob_t = std::mem::zeroed();
            let mut out = Vec::new();
            if libc::glob(c_pattern.as_ptr(), 0, None, &mut g) == 0 {
                for i in 0..g.gl_pathc {
                    let p = *g.gl_pathv.add(i);
                    if !p.is_null() {
                        out.push(std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned());
                    }
                }
            }
            libc::globfree(&mut g);
            out
        }
    }

    fn plugin(&mut self, path: &str) -> Option<PluginFile> {
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(path).ok()?;
        let info = std::fs::read(path)
            .map_err(|e| e.to_string())
            .and_then(|data| elf::plugin_info(&data).map_err(|e| e.to_string()));
        Some(PluginFile {
            world_readable: meta.permissions().mode() & 0o004 != 0,
            info,
        })
    }

    fn slurm_version(&mut self) -> Option<(u32, String)> {
        let srun = std::process::Command::new("srun")
            .arg("--version")
            .stdin(std::process::Stdio::null())
            .output();
        if let Ok(out) = srun {
            if out.status.success() {
                if let Some(v) = parse_srun_version(&String::from_utf8_lossy(&out.stdout)) {
                    return Some((v, "srun --version".into()));
                }
            }
        }
        for header in [
            "/usr/include/slurm/slurm_version.h",
            "/usr/local/include/slurm/slurm_version.h",
        ] {
            if let Some(v) = std::fs::read_to_string(header)
                .ok()
                .and_then(|t| parse_version_header(&t))
            {
                return Some((v, header.into()));
            }
        }
        None
    }

    fn show_config(&mut self) -> Option<String> {
        let out = std::process::Command::new("scontrol")
            .args(["show", "config"])
            .stdin(std::process::Stdio::null())
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "0.1.0 slurm 24.11.5 src 0123456789abcdef";
    const SO: &str = "/usr/lib/x86_64-linux-gnu/slurm-wlm/tf_cluster.so";

    struct Fake {
        files: HashMap<String, String>,
        plugins: HashMap<String, PluginFile>,
        slurm: Option<u32>,
    }

    impl Fake {
        /// A healthy Debian node: slurm.conf with MpiParams, Debian's
        /// plugstack.conf including plugstack.conf.d, the packaged snippet.
        fn healthy() -> Fake {
            let mut f = Fake {
                files: HashMap::new(),
                plugins: HashMap::new(),
                slurm: Some(0x180b05),
            };
            f.file(
                "/etc/slurm/slurm.conf",
                "ClusterName=c\nMpiParams=ports=12000-12999\nPlugStackConfig=/etc/slurm/plugstack.conf\nNodeName=n[1-3] CPUs=4\n",
            );
            f.file(
                "/etc/slurm/plugstack.conf",
                "include /etc/slurm/plugstack.conf.d/*.conf\n",
            );
            f.file(
                "/etc/slurm/plugstack.conf.d/tf-cluster.conf",
                &format!("# comment\nrequired {SO} port-base=9000\n"),
            );
            f.so(SO, 0x180b02, Some(ID));
            f
        }

        fn file(&mut self, path: &str, text: &str) {
            self.files.insert(path.into(), text.into());
        }

        fn so(&mut self, path: &str, version: u32, id: Option<&str>) {
            self.plugins.insert(
                path.into(),
                PluginFile {
                    world_readable: true,
                    info: Ok(PluginInfo {
                        name: Some(PLUGIN_NAME.into()),
                        version: Some(version),
                        build_id: id.map(str::to_string),
                    }),
                },
            );
        }

        fn run(&mut self) -> Report {
            diagnose(self, ID)
        }
    }

    impl Host for Fake {
        fn env(&mut self, _: &str) -> Option<String> {
            None
        }
        fn read(&mut self, path: &str) -> std::io::Result<String> {
            self.files
                .get(path)
                .cloned()
                .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))
        }
        fn glob(&mut self, pattern: &str) -> Vec<String> {
            // Enough for `DIR/*.conf` and plain paths.
            let (dir, tail) = pattern.rsplit_once('/').unwrap();
            let mut out: Vec<String> = self
                .files
                .keys()
                .filter(|p| match tail.strip_prefix('*') {
                    Some(suffix) => {
                        p.rsplit_once('/').is_some_and(|(d, _)| d == dir) && p.ends_with(suffix)
                    }
                    None => *p == pattern,
                })
                .cloned()
                .collect();
            out.sort();
            out
        }
        fn plugin(&mut self, path: &str) -> Option<PluginFile> {
            self.plugins.get(path).cloned()
        }
        fn slurm_version(&mut self) -> Option<(u32, String)> {
            self.slurm.map(|v| (v, "srun --version".into()))
        }
        fn show_config(&mut self) -> Option<String> {
            None
        }
    }

    fn fails(r: &Report) -> Vec<&str> {
        r.findings
            .iter()
            .filter(|f| f.level == Level::Fail)
            .map(|f| f.text.as_str())
            .collect()
    }

    fn warns(r: &Report) -> Vec<&str> {
        r.findings
            .iter()
            .filter(|f| f.level == Level::Warn)
            .map(|f| f.text.as_str())
            .collect()
    }

    #[test]
    fn a_healthy_node_is_healthy() {
        let r = Fake::healthy().run();
        assert_eq!(r.worst(), Level::Ok, "{}", r.render());
        assert_eq!(r.exit_code(), 0);
        let text = r.render();
        assert!(
            text.contains("/etc/slurm/plugstack.conf.d/tf-cluster.conf:2: required"),
            "{text}"
        );
        assert!(
            text.contains("built for Slurm 24.11.2, this node runs 24.11.5"),
            "{text}"
        );
        assert!(text.contains("site arguments: port-base=9000"), "{text}");
        assert!(text.contains("MpiParams=ports=12000-12999"), "{text}");
        assert!(text.ends_with("healthy\n"), "{text}");
    }

    #[test]
    fn another_major_minor_breaks_srun() {
        let mut f = Fake::healthy();
        f.slurm = Some(0x160508);
        let r = f.run();
        assert_eq!(r.exit_code(), 1);
        let fails = fails(&r);
        assert_eq!(fails.len(), 1, "{fails:?}");
        assert!(
            fails[0].contains("built for Slurm 24.11.2, this node runs 22.05.8"),
            "{fails:?}"
        );
        assert!(fails[0].contains("Slurm 22.05"), "{fails:?}");
    }

    #[test]
    fn a_missing_so_breaks_srun() {
        let mut f = Fake::healthy();
        f.plugins.clear();
        let r = f.run();
        assert_eq!(r.exit_code(), 1);
        assert_eq!(fails(&r).len(), 1);
        assert!(fails(&r)[0].contains(&format!("required {SO} does not exist: every srun fails")));
    }

    #[test]
    fn optional_is_a_warning() {
        let mut f = Fake::healthy();
        f.file(
            "/etc/slurm/plugstack.conf.d/tf-cluster.conf",
            &format!("optional {SO}\n"),
        );
        let r = f.run();
        assert_eq!(r.exit_code(), 2, "{}", r.render());
        assert!(warns(&r)[0].contains("optional: Slurm ignores the plugin's errors"));
    }

    #[test]
    fn a_bad_site_argument_is_named() {
        let mut f = Fake::healthy();
        f.file(
            "/etc/slurm/plugstack.conf.d/tf-cluster.conf",
            &format!("required {SO} port-base=0 \n"),
        );
        let r = f.run();
        assert_eq!(r.exit_code(), 1);
        assert!(fails(&r)[0].contains("port-base=0"), "{:?}", fails(&r));
        f.file(
            "/etc/slurm/plugstack.conf.d/tf-cluster.conf",
            &format!("required {SO} colour=blue\n"),
        );
        let r = f.run();
        assert!(
            fails(&r)[0].contains("unknown key \"colour\""),
            "{:?}",
            fails(&r)
        );
    }

    #[test]
    fn loaded_twice_or_not_at_all_fails() {
        let mut f = Fake::healthy();
        f.file(
            "/etc/slurm/plugstack.conf",
            &format!("include plugstack.conf.d/*.conf\nrequired {SO}\n"),
        );
        let r = f.run();
        assert_eq!(fails(&r).len(), 1, "{}", r.render());
        assert!(fails(&r)[0].contains("loaded 2 times"));
        f.files
            .remove("/etc/slurm/plugstack.conf.d/tf-cluster.conf");
        f.file(
            "/etc/slurm/plugstack.conf",
            "include /etc/slurm/plugstack.conf.d/*.conf\n",
        );
        let r = f.run();
        assert!(fails(&r)[0].starts_with("no line of /etc/slurm/plugstack.conf"));
    }

    #[test]
    fn relative_plugin_paths_use_plugin_dir_and_slurm_conf_names_plugstack() {
        let mut f = Fake::healthy();
        f.files.clear();
        f.file(
            "/etc/slurm/slurm.conf",
            "PluginDir=/opt/a:/opt/slurm/lib\nPlugStackConfig=/opt/slurm/stack.conf\n",
        );
        f.file(
            "/opt/slurm/stack.conf",
            "required tf_cluster.so # comment\n",
        );
        f.plugins.clear();
        f.so("/opt/slurm/lib/tf_cluster.so", 0x180b00, Some(ID));
        let r = f.run();
        assert_eq!(fails(&r), Vec::<&str>::new());
        assert!(
            r.render()
                .contains("/opt/slurm/stack.conf:1: required /opt/slurm/lib/tf_cluster.so")
        );
        // No MpiParams=ports: a warning only.
        assert_eq!(r.exit_code(), 2);
        assert!(warns(&r)[0].contains("no MpiParams=ports"));
    }

    #[test]
    fn another_build_and_no_build_id_are_warnings() {
        let mut f = Fake::healthy();
        f.so(SO, 0x180b05, Some("0.0.9 slurm 24.11.5 src ffff"));
        let r = f.run();
        assert_eq!(r.exit_code(), 2);
        assert!(warns(&r)[0].contains("the plugin is build \"0.0.9"));
        f.so(SO, 0x180b05, None);
        assert!(warns(&f.run())[0].contains("carries no build id"));
    }

    #[test]
    fn broken_plugstack_lines_and_missing_files() {
        let mut f = Fake::healthy();
        f.file(
            "/etc/slurm/plugstack.conf",
            "include /etc/slurm/plugstack.conf.d/*.conf\nrequire /x.so\nrequired /other.so\n",
        );
        let r = f.run();
        let fails = fails(&r);
        assert_eq!(fails.len(), 2, "{fails:?}");
        assert!(fails[0].contains(":2: \"require /x.so\""));
        assert!(fails[1].contains("required /other.so does not exist"));
        let mut f = Fake::healthy();
        f.files.remove("/etc/slurm/plugstack.conf");
        assert!(
            super::tests::fails(&f.run())[0]
                .starts_with("plugstack.conf /etc/slurm/plugstack.conf:")
        );
    }

    #[test]
    fn versions_from_srun_and_the_header() {
        assert_eq!(parse_srun_version("slurm 24.11.5\n"), Some(0x180b05));
        assert_eq!(parse_srun_version("slurm-wlm 22.05.8\n"), Some(0x160508));
        assert_eq!(parse_srun_version("slurm 25.05.0-0rc1\n"), Some(0x190500));
        assert_eq!(parse_srun_version("srun: error: x"), None);
        assert_eq!(
            parse_version_header("#define SLURM_VERSION_NUMBER 0x1a0505\n"),
            Some(0x1a0505)
        );
        assert_eq!(version_text(0x160508), "22.05.8");
    }

    #[test]
    fn show_config_pairs() {
        let c = parse_show_config(
            "MpiParams               = ports=12000-12999\nPlugStackConfig         = /etc/slurm/plugstack.conf\n",
        );
        assert_eq!(c["mpiparams"], "ports=12000-12999");
        assert_eq!(c["plugstackconfig"], "/etc/slurm/plugstack.conf");
    }
}
