//! `tf-cluster doctor`: checks, on a node or a login node, what decides
//! whether srun works with the plugin: the plugstack.conf line(s) that load it
//! (includes followed), the .so they name and the Slurm it was built for, the
//! `required` flag, the site arguments, that the plugin is the same build as
//! this CLI, and whether Slurm reserves ports for steps.
//!
//! [`diagnose`] is pure: it sees the machine through [`Host`], which
//! [`System`] implements with real files and commands.

mod checks;
mod host;
pub(crate) mod plugstack;
mod report;
pub(crate) mod slurm_conf;
mod system;
#[cfg(test)]
mod tests;

use std::path::Path;
use tf_cluster_core::Settings;

use checks::check_plugin;
use host::said;
pub use host::{Host, PluginFile};
use plugstack::{dirname, walk};
pub use report::{Level, Report};
use slurm_conf::{DEFAULT_SLURM_CONF, parse_show_config, parse_slurm_conf};
pub use system::System;

/// Where a relative plugstack path is searched when slurm.conf has no
/// PluginDir: Debian's and the RHEL family's plugin directories.
pub const DEFAULT_PLUGIN_DIRS: [&str; 3] = [
    "/usr/lib/x86_64-linux-gnu/slurm-wlm",
    "/usr/lib64/slurm",
    "/usr/lib/slurm",
];

/// The plugin's `plugin_name`.
pub const PLUGIN_NAME: &str = "tf_cluster";

/// Checks the installation; `own_build_id` is this CLI's.
pub fn diagnose(host: &mut dyn Host, own_build_id: &str) -> Report {
    let mut report = Report::default();

    // slurm.conf: where plugstack.conf is, the plugin directory, MpiParams.
    let conf_path = host
        .env("SLURM_CONF")
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| DEFAULT_SLURM_CONF.to_string());
    // srun and scontrol read the same files: on a file that is no regular
    // file of a sane size they would block or grow without end, so they are
    // not run then (and every command the doctor runs is time-limited).
    let mut commands_safe = true;
    let conf = match host.read(&conf_path) {
        Ok(text) => Some((parse_slurm_conf(&text), conf_path.clone())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => match host.show_config() {
            Ok(text) => {
                report.add(
                    Level::Ok,
                    format!("slurm.conf {conf_path}: {e}; settings from `scontrol show config`"),
                );
                Some((parse_show_config(&text), "scontrol show config".to_string()))
            }
            Err(why) => {
                report.add(
                    Level::Warn,
                    format!("slurm.conf {conf_path}: {e}, and {why}"),
                );
                None
            }
        },
        Err(e) => {
            commands_safe = false;
            report.add(
                Level::Fail,
                format!(
                    "slurm.conf {conf_path}{}: Slurm's commands would hang or fail on it",
                    said(&e)
                ),
            );
            None
        }
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
    report.add_about(
        Level::Ok,
        &[&plugstack],
        format!("plugstack.conf: {plugstack} ({why})"),
    );
    let plugin_dirs: Vec<String> = match setting("plugindir") {
        Some(dirs) if !dirs.is_empty() && dirs != "(null)" => {
            dirs.split(':').map(str::to_string).collect()
        }
        _ => DEFAULT_PLUGIN_DIRS.map(str::to_string).to_vec(),
    };

    // The plugstack lines, includes followed.
    let mut loaded = Vec::new();
    commands_safe &= walk(host, &plugstack, 0, &mut report, &mut loaded);

    // Which lines load tf-cluster: by plugin_name, or by file name when unreadable.
    let (installed, srun_problem) = host.slurm_version(commands_safe);
    if let Some(why) = srun_problem {
        report.add(Level::Warn, format!("Slurm's version: {why}"));
    }
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
        0 => report.add_about(
            Level::Fail,
            &[&plugstack],
            format!("no line of {plugstack} (includes followed) loads {PLUGIN_NAME}: --tf-cluster is unknown to srun"),
        ),
        1 => {}
        n => report.add_about(
            Level::Fail,
            &ours.iter().map(|(l, _, _)| l.at.as_str()).collect::<Vec<_>>(),
            format!(
                "{PLUGIN_NAME} is loaded {n} times ({}): the second cannot register --tf-cluster and srun fails",
                ours.iter().map(|(l, _, _)| l.at.as_str()).collect::<Vec<_>>().join(", ")
            ),
        ),
    }
    for (line, path, file) in &ours {
        check_plugin(
            &mut report,
            host,
            line,
            path,
            file.as_ref(),
            installed.as_ref(),
            own_build_id,
        );
    }

    // Ports: with MpiParams=ports every step gets its own; without, the
    // step's block of the port range, unless the site fixed a port base.
    let site = ours
        .first()
        .and_then(|(line, _, _)| {
            Settings::from_admin_args(line.args.iter().map(String::as_str)).ok()
        })
        .unwrap_or_default();
    match &conf {
        Some((_, from)) => match setting("mpiparams").filter(|m| m.contains("ports=")) {
            Some(m) => report.add(
                Level::Ok,
                format!("Slurm reserves ports for every step (MpiParams={m} in {from}): concurrent steps on a node never clash"),
            ),
            None => match site.port_base {
                Some(base) => report.add(
                    Level::Warn,
                    format!("no MpiParams=ports=… in {from}, and the site argument port-base={base}: concurrent steps on one node take the same ports ({base}…); remove port-base= so that each step takes its own ports from the port range, or set MpiParams=ports=12000-12999"),
                ),
                None => report.add(
                    Level::Ok,
                    format!(
                        "no MpiParams=ports=… in {from}: Slurm reserves no ports (and refuses srun --resv-ports); each step takes its own ports from the range {}-{}, placed by its job and step ids: two steps on one node share a port with a chance of about 1 in {} (never when their job ids are less than {} apart); MpiParams=ports=12000-12999 makes Slurm reserve them",
                        site.port_range.first,
                        site.port_range.last,
                        site.port_range.slots(),
                        site.port_range.slots() / tf_cluster_core::ports::STEPS,
                    ),
                ),
            },
        },
        None => report.add(Level::Warn, "cannot tell whether Slurm reserves ports (no slurm.conf)"),
    }
    report
}
