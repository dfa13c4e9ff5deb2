//! The checks of one plugstack line that loads tf-cluster: the file, the
//! Slurm it was built for, `required`, the site arguments, the build id.

use tf_cluster_core::Settings;

use crate::elf::PluginInfo;
use crate::report::{Level, Report};
use crate::site::host::said;
use crate::site::plugstack::Loaded;
use crate::site::{Host, PluginFile};

/// `24.11.5` from 0x180b05.
pub fn version_text(v: u32) -> String {
    format!("{}.{:02}.{}", v >> 16, (v >> 8) & 0xff, v & 0xff)
}

pub(super) fn check_plugin(
    report: &mut Report,
    host: &mut dyn Host,
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
        report.add_about(
            Level::Fail,
            &[at, path],
            format!("{at}: {kind} {path} does not exist: {effect}"),
        );
        return;
    };
    let info = match &file.info {
        Ok(info) => info,
        Err(e) => {
            report.add_about(
                Level::Fail,
                &[at, path],
                format!("{at}: {path} is not a readable plugin: {e}"),
            );
            return;
        }
    };
    report.add_about(Level::Ok, &[at, path], format!("{at}: {kind} {path}"));
    if !file.world_readable {
        report.add_about(
            Level::Fail,
            &[path],
            format!("{path} is not readable by every user: srun, run by the user, cannot load it"),
        );
    }
    check_version(report, path, info, installed);
    if !line.required {
        report.add(
            Level::Warn,
            format!("{at}: optional: Slurm ignores the plugin's errors, so a step it refuses runs without TF_CONFIG; write `required`"),
        );
    }
    check_site_args(report, host, line);
    check_build(report, path, info, own_build_id);
}

/// The Slurm the plugin was built for against the one installed (0xMMmmuu
/// and where it was read): Slurm loads only its own major.minor.
fn check_version(
    report: &mut Report,
    path: &str,
    info: &PluginInfo,
    installed: Option<&(u32, String)>,
) {
    match (info.version, installed) {
        (None, _) => report.add_about(Level::Fail, &[path], format!("{path} exports no plugin_version: Slurm refuses it")),
        (Some(v), Some((slurm, from))) if v >> 8 == slurm >> 8 => report.add(
            Level::Ok,
            format!("built for Slurm {}, this node runs {} ({from})", version_text(v), version_text(*slurm)),
        ),
        (Some(v), Some((slurm, from))) => report.add_about(
            Level::Fail,
            &[path],
            format!(
                "{path} is built for Slurm {}, this node runs {} ({from}): Slurm refuses a plugin of another major.minor (\"Incompatible plugin version\"); install the tf-cluster package built for Slurm {}.{:02}",
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
}

/// The line's site arguments, as the plugin reads them.
fn check_site_args(report: &mut Report, host: &mut dyn Host, line: &Loaded) {
    let at = &line.at;
    match Settings::from_admin_args(line.args.iter().map(String::as_str)) {
        Ok(_) if line.args.is_empty() => {
            report.add(Level::Ok, "site arguments: none (built-in defaults)")
        }
        Ok(settings) => {
            report.add(
                Level::Ok,
                format!("site arguments: {}", line.args.join(" ")),
            );
            if let Some(dir) = &settings.record {
                check_record_dir(report, host, dir);
            }
        }
        Err(e) => report.add_about(
            Level::Fail,
            &[at],
            format!("{at}: {e}: srun refuses every --tf-cluster step"),
        ),
    }
}

/// The plugin's build id against this CLI's.
fn check_build(report: &mut Report, path: &str, info: &PluginInfo, own_build_id: &str) {
    match info.build_id.as_deref() {
        Some(id) if id == own_build_id => report.add(Level::Ok, format!("same build as this CLI ({id})")),
        Some(id) => report.add(
            Level::Warn,
            format!("the plugin is build \"{id}\", this CLI \"{own_build_id}\": `tf-cluster env|preview` may differ from the plugin"),
        ),
        None => report.add(Level::Warn, format!("{path} carries no build id (an older build): cannot tell it from this CLI's")),
    }
}

/// The site's `record=DIR`: each user's runs go in `DIR/<uid>`, made by the
/// user in a sticky directory others may write (1777), or by the plugin as
/// root in one of root's (0755) on a path of root's own directories with no
/// link; one others may write without the sticky bit gets no record (crate
/// tf_cluster_core::record::runs_under, admins_own, roots_way).
fn check_record_dir(report: &mut Report, host: &mut dyn Host, dir: &str) {
    let shown = tf_cluster_core::record::printable(dir);
    match host.directory(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => report.add_about(
            Level::Warn,
            &[dir],
            format!(
                "record={shown} does not exist: a user's first step would make it theirs, and others could not write in it; make it root's with mode 0755 (`install -d -m 0755 {shown}`)"
            ),
        ),
        Err(e) => report.add_about(
            Level::Warn,
            &[dir],
            format!("record={shown}{}: cannot check it", said(&e)),
        ),
        Ok((_, mode)) if mode & 0o022 != 0 && mode & 0o1000 == 0 => report.add_about(
            Level::Fail,
            &[dir],
            format!(
                "record={shown} has mode {mode:04o}: others may write it without the sticky bit, so no step writes a record there (anyone could rename a user's directory); `chmod 0755 {shown}`"
            ),
        ),
        Ok((owner, mode)) if owner != 0 => report.add_about(
            Level::Warn,
            &[dir],
            format!(
                "record={shown} is uid {owner}'s (mode {mode:04o}), not root's: that user may remove or rename other users' directories in it; make it root's"
            ),
        ),
        Ok((_, mode)) if mode & 0o002 != 0 => report.add(
            Level::Ok,
            format!(
                "record={shown}: mode {mode:04o}, each user's runs in {shown}/<uid> (0700), made on their first step (another user can make it first and deny them a record: mode 0755 leaves nothing to make first)"
            ),
        ),
        Ok((_, mode)) => match off_roots_way(host, dir) {
            None => report.add(
                Level::Ok,
                format!(
                    "record={shown}: mode {mode:04o}, each user's runs in {shown}/<uid> (0700), made by the plugin as root on their first step"
                ),
            ),
            Some(why) => report.add_about(
                Level::Warn,
                &[dir],
                format!(
                    "record={shown}: mode {mode:04o}, but {why}: the plugin makes a user's directory there only on a path of root's own directories with no link, so a user without {shown}/<uid> gets no record; give it such a path, or make each user's (`install -d -m 0700 -o USER -g GROUP {shown}/UID`)"
                ),
            ),
        },
    }
}

/// Why the plugin would not make users' directories as root in `dir`: the
/// first directory from `dir` up to `/` that is a link, missing, or not
/// root's as the plugin requires; `None` where it would.
fn off_roots_way(host: &mut dyn Host, dir: &str) -> Option<String> {
    use tf_cluster_core::record::{admins_own, printable, roots_way};
    for (i, p) in std::path::Path::new(dir)
        .ancestors()
        .filter(|p| !p.as_os_str().is_empty())
        .enumerate()
    {
        let path = p.to_string_lossy();
        let shown = printable(&path);
        match host.directory_here(&path) {
            Err(e) => return Some(format!("{shown}{}", said(&e))),
            Ok((owner, mode))
                if !(if i == 0 {
                    admins_own(owner, mode)
                } else {
                    roots_way(owner, mode)
                }) =>
            {
                return Some(format!("{shown} is uid {owner}'s (mode {mode:04o})"));
            }
            Ok(_) => {}
        }
    }
    None
}
