//! tf-cluster as this machine's Slurm loads it: the plugstack.conf line
//! (includes followed) that loads the .so, the name Slurm knows it by, and
//! the variables sbatch, salloc and srun read as its options. Found as the
//! doctor finds it: the same plugstack.conf walk; read by `launcher-env`
//! and `postmortem`.

use std::path::Path;

use super::plugstack::{plugin_file, walk};
use super::{Conf, Host, PLUGIN_NAME, PluginFile, conf_path};
use crate::report::Report;

/// Slurm's prefix of an option handed to sbatch, salloc or srun in the
/// environment: `SLURM_SPANK_` + SPANK_OPTION_ENV_PREFIX (`_SLURM_SPANK_OPTION_`).
const PREFIX: &str = "SLURM_SPANK__SLURM_SPANK_OPTION_";

/// The variable that sbatch, salloc and srun read as `--<option>` of the
/// plugin named `plugin` (Slurm's `_opt_env_name`: `_` for anything but
/// ASCII letters and digits).
pub fn variable(plugin: &str, option: &str) -> String {
    let canonical = |s: &str| -> String {
        s.chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect()
    };
    format!("{PREFIX}{}_{}", canonical(plugin), canonical(option))
}

/// The plugin as this machine's Slurm loads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SitePlugin {
    /// Its `plugin_name`: the `<plugin>` of the variables.
    pub name: String,
    /// The plugstack.conf line that loads it (`FILE:LINE`) and the .so.
    pub at: String,
    pub path: String,
    /// The site's arguments on that line (`record=DIR` …).
    pub args: Vec<String>,
}

/// The line of the site's plugstack.conf (includes followed) that loads
/// tf-cluster, and the name Slurm knows it by; Err says why none does.
pub fn site_plugin(host: &mut dyn Host) -> std::result::Result<SitePlugin, String> {
    let conf_path = conf_path(host);
    let conf = Conf::read(host, &conf_path)
        .or_else(|_| Conf::show_config(host))
        .unwrap_or_default();
    let (plugstack, _) = conf.plugstack(&conf_path);
    let plugin_dirs = conf.plugin_dirs();
    let mut report = Report::default();
    let mut lines = Vec::new();
    walk(host, &plugstack, 0, &mut report, &mut lines);
    for line in lines {
        let path = plugin_file(host, &plugin_dirs, &line.path);
        let Some((path, file)) = path.and_then(|p| Some((p.clone(), host.plugin(&p)?))) else {
            continue;
        };
        // tf-cluster's own build id marks it whatever name it was built with.
        let name = match file {
            PluginFile { info: Ok(info), .. } if info.build_id.is_some() => info.name,
            PluginFile { info: Ok(info), .. } => info.name.filter(|n| n == PLUGIN_NAME),
            PluginFile { info: Err(_), .. } => Path::new(&path)
                .file_name()
                .is_some_and(|n| n.to_string_lossy().contains(PLUGIN_NAME))
                .then(|| PLUGIN_NAME.to_string()),
        };
        if let Some(name) = name {
            return Ok(SitePlugin {
                name,
                at: line.at,
                path,
                args: line.args,
            });
        }
    }
    Err(format!(
        "no line of {plugstack} (includes followed) loads tf-cluster here, so sbatch, salloc and srun on this machine ignore these variables; the names below are for the plugin's own name, {PLUGIN_NAME}"
    ))
}
