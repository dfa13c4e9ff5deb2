//! The plugin's options as the CLI takes them (`env`, `preview` and
//! `launcher-env` share them), made from the core's tables.

use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Args, FromArgMatches};
use tf_cluster_core::frameworks::{self, ALL_OFF, OFF, all_off_help};
use tf_cluster_core::settings::SETTINGS;
use tf_cluster_core::{Error, FRAMEWORKS, Framework, Frameworks, Result, Settings};

/// The plugin's options, from the core's tables: the frameworks'
/// (`--tf-cluster`, `--torch-cluster`, `--jax-cluster`, each also `=off`),
/// `--tf-<key>` (also `--<key>`) for each setting, and `--tf-off`.
pub struct Options {
    /// Each framework given, with its value ("" for the bare option, `off`).
    pub frameworks: Vec<(&'static Framework, Option<String>)>,
    pub given: Vec<(&'static str, String)>,
    /// `--tf-off`: no framework for this step.
    pub all_off: bool,
}

/// Settings whose bare `--<key>` would be read as srun's option of that
/// name, which means something else: only `--tf-<key>`.
const NO_ALIAS: [&str; 2] = ["gpus-per-node", "gpus-per-task"];

impl FromArgMatches for Options {
    fn from_arg_matches(m: &ArgMatches) -> std::result::Result<Self, clap::Error> {
        let frameworks = FRAMEWORKS
            .iter()
            .filter(|f| {
                m.contains_id(f.option)
                    && m.value_source(f.option) == Some(ValueSource::CommandLine)
            })
            .map(|&f| (f, m.get_one::<String>(f.option).cloned()))
            .collect();
        Ok(Options {
            frameworks,
            given: SETTINGS
                .iter()
                .filter_map(|s| Some((s.key, m.get_one::<String>(s.key)?.clone())))
                .collect(),
            all_off: m.get_flag(ALL_OFF),
        })
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> std::result::Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

impl Args for Options {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        let cmd =
            cmd.next_help_heading("The plugin's options (as srun, sbatch and salloc take them)");
        let cmd = FRAMEWORKS.iter().fold(cmd, |cmd, f| {
            let value = f.arg.as_ref().map_or(OFF, |a| a.name);
            cmd.arg(
                Arg::new(f.option)
                    .long(f.option)
                    .help(format!(
                        "{}; ={OFF}: not for this step, though the job asked",
                        f.help
                    ))
                    .value_name(value)
                    .num_args(0..=1)
                    .require_equals(f.arg.is_none())
                    .default_missing_value(""),
            )
        });
        let cmd = SETTINGS.iter().fold(cmd, |cmd, s| {
            let arg = Arg::new(s.key)
                .long(format!("tf-{}", s.key))
                .value_name(s.arg)
                .help(s.help_text());
            cmd.arg(if NO_ALIAS.contains(&s.key) {
                arg
            } else {
                arg.alias(s.key)
            })
        });
        cmd.arg(
            Arg::new(ALL_OFF)
                .long(ALL_OFF)
                .action(ArgAction::SetTrue)
                .help(all_off_help()),
        )
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

impl Options {
    /// The step's settings, every value checked as srun checks it; no
    /// framework when the options turn every one off (`--tf-off`,
    /// `--tf-cluster=off` alone).
    pub fn settings(&self) -> Result<Settings> {
        let mut settings = Settings::default();
        // No framework option: TensorFlow's, as with `--tf-cluster`.
        if !self.frameworks.is_empty() {
            settings.frameworks = Frameworks::default();
        }
        for (f, value) in &self.frameworks {
            let value = value.as_deref().unwrap_or("");
            frameworks::check_value(f, value)?;
            if value == OFF {
                continue;
            }
            settings.frameworks = settings.frameworks.with(f);
            if let Some(arg) = &f.arg {
                (arg.set)(&mut settings, value)?;
            }
        }
        for (key, value) in &self.given {
            settings
                .set(key, value)
                .map_err(|e| Error::new(format!("--tf-{e}")))?;
        }
        if self.all_off {
            settings.frameworks = Frameworks::default();
        }
        Ok(settings)
    }

    /// Why no framework is asked for, in the words of the options.
    pub fn why_off(&self) -> String {
        if self.all_off {
            return format!("--{ALL_OFF}");
        }
        let off: Vec<String> = self
            .frameworks
            .iter()
            .filter(|(_, v)| v.as_deref() == Some(OFF))
            .map(|(f, _)| format!("--{}={OFF}", f.option))
            .collect();
        off.join(" ")
    }
}
