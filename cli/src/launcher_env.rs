//! `tf-cluster launcher-env`: the plugin's options for a launcher that writes
//! its own sbatch script (TorchX, submitit, NeMo-Run; docs/launchers.md).
//!
//! sbatch, salloc and srun read `SLURM_SPANK__SLURM_SPANK_OPTION_<plugin>_<option>`
//! from their environment as if the option were given (Slurm's
//! src/common/spank.c, `spank_process_env_options`). `<plugin>` is the
//! `plugin_name` of the .so that plugstack.conf loads (`plugin_get_name`), not
//! its file name, and every character of both names that is not a letter or
//! a digit becomes `_` (`_opt_env_name`). The .so is found as the doctor finds
//! it: the same plugstack.conf walk (crate::site).

use std::fmt::Write as _;

use tf_cluster_core::Result;
use tf_cluster_core::frameworks::{self, FRAMEWORKS};
use tf_cluster_core::settings::SETTINGS;

use crate::options::Options;
use crate::site::plugin::{SitePlugin, site_plugin, variable};
use crate::site::{Host, PLUGIN_NAME};

/// A value as a shell word that `sh` and `eval` read back unchanged.
fn shell_word(value: &str) -> String {
    let plain = value
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_-.,:/=+@%".contains(c));
    if plain {
        value.to_string()
    } else {
        format!("'{}'", value.replace('\'', r"'\''"))
    }
}

/// Each option given, as (its name, its value: None for a flag or a bare
/// `--tf-cluster`), in the order of the plugin's options.
fn given(options: &Options) -> Vec<(String, Option<String>)> {
    let frameworks = FRAMEWORKS.iter().filter_map(|&f| {
        let (_, value) = options
            .frameworks
            .iter()
            .find(|(g, _)| g.option == f.option)?;
        let value = value.clone().filter(|v| !v.is_empty());
        Some((f.option.to_string(), value))
    });
    let settings = SETTINGS.iter().filter_map(|s| {
        let (_, value) = options.given.iter().find(|(k, _)| *k == s.key)?;
        Some((format!("tf-{}", s.key), Some(value.clone())))
    });
    let all_off = options
        .all_off
        .then(|| (frameworks::ALL_OFF.to_string(), None));
    frameworks.chain(settings).chain(all_off).collect()
}

/// The output for `options` and the plugin's name. Lines other than
/// `export …` are `#` comments, so `eval "$(tf-cluster launcher-env …)"`
/// works; without options, every option's variable.
pub fn render(options: &Options, plugin: &str, found: Option<&SitePlugin>) -> Result<String> {
    let loaded = match found {
        Some(p) => format!("{plugin} in {}, loaded by {}", p.path, p.at),
        None => format!("{plugin}, not loaded here"),
    };
    let given = given(options);
    let mut out = String::new();
    if given.is_empty() {
        let _ = writeln!(
            out,
            "# sbatch, salloc and srun read each option from the environment ({loaded}):"
        );
        let options = FRAMEWORKS
            .iter()
            .map(|f| f.option)
            .map(str::to_string)
            .chain(SETTINGS.iter().map(|s| format!("tf-{}", s.key)))
            .chain([frameworks::ALL_OFF.to_string()]);
        for option in options {
            let _ = writeln!(out, "# --{option:<18} {}", variable(plugin, &option));
        }
        return Ok(out);
    }
    // The values are checked as srun would check them.
    options.settings()?;
    let flags: Vec<String> = given
        .iter()
        .map(|(o, v)| match v {
            Some(v) => format!("--{o}={v}"),
            None => format!("--{o}"),
        })
        .collect();
    let python: Vec<String> = given
        .iter()
        .map(|(o, v)| {
            let value = v.as_ref().map_or("True".to_string(), |v| {
                serde_json::Value::from(v.as_str()).to_string()
            });
            format!("\"{}\": {value}", o.replace('-', "_"))
        })
        .collect();
    let python = python.join(", ");
    let _ = writeln!(
        out,
        "# sbatch, salloc and srun read these as {} ({loaded}).",
        flags.join(" ")
    );
    let _ = writeln!(
        out,
        "# Export them before `torchx run -s slurm` (an empty value turns a flag on, `off` turns it off)."
    );
    let _ = writeln!(out, "# submitit: slurm_additional_parameters={{{python}}}");
    let _ = writeln!(
        out,
        "# NeMo-Run: SlurmExecutor(additional_parameters={{{python}}}) (its env_vars upper-cases names)"
    );
    for (option, value) in &given {
        let value = value.as_deref().map(shell_word).unwrap_or_default();
        let _ = writeln!(out, "export {}={value}", variable(plugin, option));
    }
    Ok(out)
}

/// `tf-cluster launcher-env`: exit 0, 1 on a bad option value, 2 when no
/// plugstack.conf line here loads the plugin (the names are still printed).
pub fn main(options: &Options, host: &mut dyn Host) -> (String, Vec<String>, u8) {
    let found = site_plugin(host);
    let plugin = found.as_ref().map_or(PLUGIN_NAME, |p| p.name.as_str());
    match render(options, plugin, found.as_ref().ok()) {
        Ok(out) => match found {
            Ok(_) => (out, vec![], 0),
            Err(why) => (out, vec![why], 2),
        },
        Err(e) => (String::new(), vec![e.to_string()], 1),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use clap::{Args, FromArgMatches};

    use super::*;
    use crate::elf::PluginInfo;
    use crate::site::PluginFile;

    /// A machine with files and plugin .so files, nothing else.
    #[derive(Default)]
    struct Fake {
        env: HashMap<String, String>,
        files: HashMap<String, String>,
        plugins: HashMap<String, PluginFile>,
    }

    impl Fake {
        /// Debian's layout: plugstack.conf includes plugstack.conf.d, where
        /// the package's line loads the plugin; pyxis is loaded before it.
        fn debian() -> Fake {
            let mut f = Fake::default();
            f.file("/etc/slurm/slurm.conf", "ClusterName=c\n");
            f.file(
                "/etc/slurm/plugstack.conf",
                "include /etc/slurm/plugstack.conf.d/*.conf\n",
            );
            f.file(
                "/etc/slurm/plugstack.conf.d/pyxis.conf",
                "required /usr/lib/x86_64-linux-gnu/slurm-wlm/spank_pyxis.so\n",
            );
            f.so(
                "/usr/lib/x86_64-linux-gnu/slurm-wlm/spank_pyxis.so",
                "pyxis",
                false,
            );
            f.file(
                "/etc/slurm/plugstack.conf.d/tf-cluster.conf",
                "# the package's\nrequired /usr/lib/x86_64-linux-gnu/slurm-wlm/tf_cluster.so port-base=9000\n",
            );
            f.so(
                "/usr/lib/x86_64-linux-gnu/slurm-wlm/tf_cluster.so",
                "tf_cluster",
                true,
            );
            f
        }

        fn file(&mut self, path: &str, text: &str) {
            self.files.insert(path.into(), text.into());
        }

        fn so(&mut self, path: &str, name: &str, ours: bool) {
            self.plugins.insert(
                path.into(),
                PluginFile {
                    world_readable: true,
                    info: Ok(PluginInfo {
                        name: Some(name.into()),
                        version: Some(0x180b05),
                        build_id: ours.then(|| "0.1.0 slurm 24.11.5 src 0123".into()),
                    }),
                },
            );
        }
    }

    impl Host for Fake {
        fn env(&mut self, name: &str) -> Option<String> {
            self.env.get(name).cloned()
        }
        fn read(&mut self, path: &str) -> std::io::Result<String> {
            self.files
                .get(path)
                .cloned()
                .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))
        }
        fn glob(&mut self, pattern: &str) -> Vec<String> {
            // Enough for `DIR/*.conf`.
            let (dir, tail) = pattern.rsplit_once('/').unwrap();
            let suffix = tail.strip_prefix('*').unwrap();
            let mut out: Vec<String> = self
                .files
                .keys()
                .filter(|p| p.rsplit_once('/').is_some_and(|(d, _)| d == dir))
                .filter(|p| p.ends_with(suffix))
                .cloned()
                .collect();
            out.sort();
            out
        }
        fn plugin(&mut self, path: &str) -> Option<PluginFile> {
            self.plugins.get(path).cloned()
        }
        fn slurm_version(&mut self, _run_srun: bool) -> (Option<(u32, String)>, Option<String>) {
            (None, None)
        }
        fn show_config(&mut self) -> std::result::Result<String, String> {
            Err("no Slurm here".into())
        }
    }

    /// `tf-cluster launcher-env ARGS`, as the subcommand parses them.
    fn options(args: &[&str]) -> Options {
        let argv = ["launcher-env"].iter().chain(args);
        let command = Options::augment_args(clap::Command::new("launcher-env"));
        Options::from_arg_matches(&command.try_get_matches_from(argv).unwrap()).unwrap()
    }

    /// The names Slurm reads (spank.c `_opt_env_name`: `_` for anything but
    /// letters and digits); the first was measured on Slurm 22.05.
    #[test]
    fn names_are_slurms() {
        assert_eq!(
            variable("tf_cluster", "torch-cluster"),
            "SLURM_SPANK__SLURM_SPANK_OPTION_tf_cluster_torch_cluster"
        );
        assert_eq!(
            variable("tf-cluster.v2", "tf-host-template"),
            "SLURM_SPANK__SLURM_SPANK_OPTION_tf_cluster_v2_tf_host_template"
        );
    }

    #[test]
    fn the_plugin_is_found_through_includes() {
        let found = site_plugin(&mut Fake::debian()).unwrap();
        assert_eq!(
            found,
            SitePlugin {
                name: "tf_cluster".into(),
                at: "/etc/slurm/plugstack.conf.d/tf-cluster.conf:2".into(),
                path: "/usr/lib/x86_64-linux-gnu/slurm-wlm/tf_cluster.so".into(),
                args: vec!["port-base=9000".into()],
            }
        );
    }

    /// The name is the .so's `plugin_name`, not its file name: a site's own
    /// build named otherwise, at a relative path under PluginDir.
    #[test]
    fn a_build_of_another_name_gives_its_names() {
        let mut f = Fake::debian();
        f.env
            .insert("SLURM_CONF".into(), "/opt/slurm/etc/slurm.conf".into());
        f.file(
            "/opt/slurm/etc/slurm.conf",
            "PluginDir=/opt/slurm/lib/slurm\nPlugStackConfig=/opt/slurm/etc/spank.conf\n",
        );
        f.file("/opt/slurm/etc/spank.conf", "optional tf.so\n");
        f.so("/opt/slurm/lib/slurm/tf.so", "site_tf", true);
        let found = site_plugin(&mut f).unwrap();
        assert_eq!(found.name, "site_tf");
        assert_eq!(found.at, "/opt/slurm/etc/spank.conf:1");
        let (out, errors, code) = main(&options(&["--torch-cluster"]), &mut f);
        assert_eq!((errors.len(), code), (0, 0));
        assert!(
            out.contains("export SLURM_SPANK__SLURM_SPANK_OPTION_site_tf_torch_cluster=\n"),
            "{out}"
        );
    }

    #[test]
    fn not_loaded_here_still_names_them_and_says_so() {
        let mut f = Fake::debian();
        f.files
            .remove("/etc/slurm/plugstack.conf.d/tf-cluster.conf");
        let (out, errors, code) = main(&options(&["--jax-cluster"]), &mut f);
        assert_eq!(code, 2);
        assert!(
            errors[0].starts_with(
                "no line of /etc/slurm/plugstack.conf (includes followed) loads tf-cluster here"
            ),
            "{errors:?}"
        );
        assert!(
            out.contains("export SLURM_SPANK__SLURM_SPANK_OPTION_tf_cluster_jax_cluster=\n"),
            "{out}"
        );
    }

    #[test]
    fn options_become_exports_and_submitit_parameters() {
        let (out, errors, code) = main(
            &options(&[
                "--tf-host-template={}-ib",
                "--torch-cluster",
                "--tf-cluster=ps:1,worker:3",
            ]),
            &mut Fake::debian(),
        );
        assert_eq!((errors.len(), code), (0, 0), "{errors:?}");
        let exports: Vec<&str> = out.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            exports,
            [
                "export SLURM_SPANK__SLURM_SPANK_OPTION_tf_cluster_tf_cluster=ps:1,worker:3",
                "export SLURM_SPANK__SLURM_SPANK_OPTION_tf_cluster_torch_cluster=",
                "export SLURM_SPANK__SLURM_SPANK_OPTION_tf_cluster_tf_host_template='{}-ib'",
            ]
        );
        assert!(
            out.contains(r#"# submitit: slurm_additional_parameters={"tf_cluster": "ps:1,worker:3", "torch_cluster": True, "tf_host_template": "{}-ib"}"#),
            "{out}"
        );
        assert!(
            out.contains("loaded by /etc/slurm/plugstack.conf.d/tf-cluster.conf:2"),
            "{out}"
        );
    }

    #[test]
    fn a_bare_tf_cluster_is_an_empty_value_and_true() {
        let (out, _, code) = main(&options(&["--tf-cluster"]), &mut Fake::debian());
        assert_eq!(code, 0);
        assert!(
            out.contains("export SLURM_SPANK__SLURM_SPANK_OPTION_tf_cluster_tf_cluster=\n"),
            "{out}"
        );
        assert!(out.contains(r#"{"tf_cluster": True}"#), "{out}");
    }

    /// A value srun would refuse is refused here, before any job is written.
    #[test]
    fn a_bad_value_is_refused() {
        let (out, errors, code) = main(&options(&["--tf-port-base=70000"]), &mut Fake::debian());
        assert_eq!((out.as_str(), code), ("", 1));
        assert!(errors[0].contains("port-base"), "{errors:?}");
    }

    #[test]
    fn no_option_lists_every_variable() {
        let (out, _, code) = main(&options(&[]), &mut Fake::debian());
        assert_eq!(code, 0);
        for name in [
            "tf_cluster_tf_cluster",
            "tf_cluster_torch_cluster",
            "tf_cluster_jax_cluster",
            "tf_cluster_tf_port_base",
            "tf_cluster_tf_gpus_per_node",
            "tf_cluster_tf_gpus_per_task",
            "tf_cluster_tf_auto_set_gpu",
            "tf_cluster_tf_rpc_layer",
            "tf_cluster_tf_host_template",
        ] {
            assert!(
                out.contains(&format!("SLURM_SPANK__SLURM_SPANK_OPTION_{name}\n")),
                "{name}: {out}"
            );
        }
        assert!(out.lines().all(|l| l.starts_with('#')), "{out}");
    }
}
