//! `tf-cluster doctor`: checks, on a node or a login node, what decides
//! whether srun works with the plugin: the plugstack.conf line(s) that load it
//! (includes followed), the .so they name and the Slurm it was built for, the
//! `required` flag, the site arguments, that the plugin is the same build as
//! this CLI, and whether Slurm reserves ports for steps.
//!
//! [`diagnose`] is pure: it sees the machine through [`Host`], which
//! [`crate::site::System`] implements with real files and commands; what the
//! installation is (slurm.conf, plugstack.conf, the .so files) is read by
//! [`crate::site`], and judged here.

mod checks;
#[cfg(test)]
mod tests;

use std::path::Path;
use tf_cluster_core::Settings;

use crate::report::{Level, Report};
use crate::site::host::said;
use crate::site::plugstack::{Loaded, plugin_file, walk};
use crate::site::{Conf, Host, PLUGIN_NAME, PluginFile, conf_path};
use checks::check_plugin;

/// Checks the installation; `own_build_id` is this CLI's.
pub fn diagnose(host: &mut dyn Host, own_build_id: &str) -> Report {
    let mut report = Report::default();
    // slurm.conf: where plugstack.conf is, the plugin directory, MpiParams.
    let conf_path = conf_path(host);
    let (conf, mut commands_safe) = read_conf(host, &conf_path, &mut report);
    let none = Conf::default();
    let settings = conf.as_ref().map_or(&none, |(c, _)| c);
    let (plugstack, why) = settings.plugstack(&conf_path);
    report.add_about(
        Level::Ok,
        &[&plugstack],
        format!("plugstack.conf: {plugstack} ({why})"),
    );

    // The plugstack lines, includes followed.
    let mut loaded = Vec::new();
    commands_safe &= walk(host, &plugstack, 0, &mut report, &mut loaded);

    let (installed, srun_problem) = host.slurm_version(commands_safe);
    if let Some(why) = srun_problem {
        report.add(Level::Warn, format!("Slurm's version: {why}"));
    }
    let ours = our_lines(host, loaded, &settings.plugin_dirs(), &mut report);
    loaded_once(&mut report, &plugstack, &ours);
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
    let site = ours
        .first()
        .and_then(|(line, _, _)| {
            Settings::from_admin_args(line.args.iter().map(String::as_str)).ok()
        })
        .unwrap_or_default();
    check_ports(
        &mut report,
        conf.as_ref().map(|(c, from)| (c, from.as_str())),
        &site,
    );
    report
}

/// slurm.conf's settings and where they came from (the file, or `scontrol
/// show config` where there is none), and whether Slurm's commands are safe
/// to run: srun and scontrol read the same files, and on a file that is no
/// regular file of a sane size they would block or grow without end, so
/// they are not run then (and every command the doctor runs is time-limited).
fn read_conf(
    host: &mut dyn Host,
    conf_path: &str,
    report: &mut Report,
) -> (Option<(Conf, String)>, bool) {
    match Conf::read(host, conf_path) {
        Ok(conf) => (Some((conf, conf_path.to_string())), true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => match Conf::show_config(host) {
            Ok(conf) => {
                report.add(
                    Level::Ok,
                    format!("slurm.conf {conf_path}: {e}; settings from `scontrol show config`"),
                );
                (Some((conf, "scontrol show config".to_string())), true)
            }
            Err(why) => {
                report.add(
                    Level::Warn,
                    format!("slurm.conf {conf_path}: {e}, and {why}"),
                );
                (None, true)
            }
        },
        Err(e) => {
            report.add(
                Level::Fail,
                format!(
                    "slurm.conf {conf_path}{}: Slurm's commands would hang or fail on it",
                    said(&e)
                ),
            );
            (None, false)
        }
    }
}

/// A plugstack line that loads tf-cluster, the .so it names and that file.
type Ours = (Loaded, String, Option<PluginFile>);

/// The lines that load tf-cluster: by plugin_name, or by file name when
/// unreadable; a required line of another plugin whose file is missing
/// fails srun all the same.
fn our_lines(
    host: &mut dyn Host,
    loaded: Vec<Loaded>,
    plugin_dirs: &[String],
    report: &mut Report,
) -> Vec<Ours> {
    let mut ours = Vec::new();
    for line in loaded {
        let path = plugin_file(host, plugin_dirs, &line.path).unwrap_or_else(|| line.path.clone());
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
            report.add(
                Level::Fail,
                format!(
                    "{}: required {path} does not exist: every srun fails",
                    line.at
                ),
            );
        }
    }
    ours
}

/// tf-cluster must be loaded exactly once.
fn loaded_once(report: &mut Report, plugstack: &str, ours: &[Ours]) {
    match ours.len() {
        0 => report.add_about(
            Level::Fail,
            &[plugstack],
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
}

/// Ports: with MpiParams=ports every step gets its own; without, the
/// step's block of the port range, unless the site fixed a port base.
/// `conf`: slurm.conf's settings and where they came from.
fn check_ports(report: &mut Report, conf: Option<(&Conf, &str)>, site: &Settings) {
    let Some((conf, from)) = conf else {
        report.add(
            Level::Warn,
            "cannot tell whether Slurm reserves ports (no slurm.conf)",
        );
        return;
    };
    match conf.reserved_ports() {
        Some(ports) => report.add(
            Level::Ok,
            format!("Slurm reserves ports for every step (MpiParams={} in {from}): concurrent steps on a node never clash", ports.setting),
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
    }
}
