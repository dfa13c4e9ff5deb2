//! slurm.conf: where it is (`SLURM_CONF`, else Slurm's default), its
//! settings (or `scontrol show config`'s when there is none: configless),
//! and what they say of the plugstack, the plugin directories and the ports
//! Slurm reserves for steps.

use std::collections::HashMap;

use super::host::Host;

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

/// The slurm.conf Slurm's commands read here: `SLURM_CONF`, else the default.
pub fn conf_path(host: &mut dyn Host) -> String {
    host.env("SLURM_CONF")
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| DEFAULT_SLURM_CONF.to_string())
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

/// The settings of slurm.conf, or of `scontrol show config`.
#[derive(Debug, Clone, Default)]
pub struct Conf(HashMap<String, String>);

/// Slurm's reservation of ports for every step (`MpiParams=ports=FIRST-LAST`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReservedPorts {
    /// MpiParams as written.
    pub setting: String,
    /// The range's first port, where it reads as one.
    pub first: Option<u16>,
}

impl Conf {
    /// The file at `path`, read through `host`.
    pub fn read(host: &mut dyn Host, path: &str) -> std::io::Result<Conf> {
        Ok(Conf(parse_slurm_conf(&host.read(path)?)))
    }

    /// The file at `path` as a preview reads it: whole, with std::fs, None
    /// when unreadable.
    pub fn read_whole(path: &str) -> Option<Conf> {
        let text = std::fs::read_to_string(path).ok()?;
        Some(Conf(parse_slurm_conf(&text)))
    }

    /// `scontrol show config`, for a configless node; Err says why not.
    pub fn show_config(host: &mut dyn Host) -> Result<Conf, String> {
        Ok(Conf(parse_show_config(&host.show_config()?)))
    }

    /// A setting that is set: neither empty nor `(null)` (show config's none).
    fn setting(&self, key: &str) -> Option<&str> {
        self.0
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.is_empty() && *v != "(null)")
    }

    /// plugstack.conf's path and why there: PlugStackConfig, else beside
    /// slurm.conf (`conf_path`), as Slurm looks for it.
    pub fn plugstack(&self, conf_path: &str) -> (String, &'static str) {
        match self.setting("plugstackconfig") {
            Some(p) => (p.to_string(), "PlugStackConfig"),
            None => (
                format!("{}/plugstack.conf", dirname(conf_path)),
                "Slurm's default, beside slurm.conf",
            ),
        }
    }

    /// Where a relative plugstack path is searched: PluginDir, else the
    /// default directories.
    pub fn plugin_dirs(&self) -> Vec<String> {
        match self.setting("plugindir") {
            Some(dirs) => dirs.split(':').map(str::to_string).collect(),
            None => DEFAULT_PLUGIN_DIRS.map(str::to_string).to_vec(),
        }
    }

    /// The ports Slurm reserves for every step, where MpiParams has `ports=`.
    pub fn reserved_ports(&self) -> Option<ReservedPorts> {
        let setting = self.0.get("mpiparams").filter(|m| m.contains("ports="))?;
        let first = setting
            .split(',')
            .find_map(|p| p.strip_prefix("ports="))
            .and_then(|ports| ports.split('-').next()?.parse().ok());
        Some(ReservedPorts {
            setting: setting.clone(),
            first,
        })
    }
}

/// A path's directory, as Slurm takes it for files named beside another.
pub fn dirname(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) => "/",
        Some(i) => &path[..i],
        None => ".",
    }
}
