//! The CLI twin of the plugin: reads one task's Slurm variables from its own
//! environment, exactly as the plugin does in slurmstepd, and prints what the
//! plugin would set (`env`) or the whole cluster (`explain`); `doctor` checks
//! a node's installation for admins.

mod doctor;
mod elf;
mod launcher_env;

use std::process::ExitCode;

use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Args, FromArgMatches, Parser, Subcommand};
use tf_cluster_core::os::ProcessEnv;
use tf_cluster_core::settings::SETTINGS;
use tf_cluster_core::{
    self as core, Error, FRAMEWORKS, Framework, Frameworks, Result, Settings, Step,
};

#[derive(Parser)]
#[command(
    name = "tf-cluster",
    version = env!("TF_CLUSTER_BUILD_ID"),
    about = "TF_CONFIG and CUDA_VISIBLE_DEVICES for a Slurm task, as the tf-cluster plugin sets them"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print, as one JSON object, the variables the plugin would set for this task.
    Env(Options),
    /// Print a table of every rank: role, index, host:port and GPUs.
    Explain(Options),
    /// Check this node's installation (plugstack.conf, the .so, Slurm's
    /// version, site arguments, build, reserved ports). Exit 0: healthy,
    /// 1: a problem that breaks srun or the plugin, 2: warnings only.
    Doctor,
    /// Print the variables that give these options to sbatch and srun
    /// through the environment, for launchers that write their own sbatch
    /// script (TorchX, submitit, NeMo-Run), for this node's plugstack.conf.
    LauncherEnv(Options),
}

/// The plugin's options, from the core's tables: the frameworks'
/// (`--tf-cluster`, `--torch-cluster`, `--jax-cluster`) and `--tf-<key>`
/// (also `--<key>`) for each setting.
struct Options {
    /// Each framework given, with its argument.
    frameworks: Vec<(&'static Framework, Option<String>)>,
    given: Vec<(&'static str, String)>,
}

impl FromArgMatches for Options {
    fn from_arg_matches(m: &ArgMatches) -> std::result::Result<Self, clap::Error> {
        let frameworks = FRAMEWORKS
            .iter()
            .filter(|f| {
                m.contains_id(f.option)
                    && m.value_source(f.option) == Some(ValueSource::CommandLine)
            })
            .map(|&f| {
                let arg = f.arg.as_ref().and_then(|_| m.get_one::<String>(f.option));
                (f, arg.cloned())
            })
            .collect();
        Ok(Options {
            frameworks,
            given: SETTINGS
                .iter()
                .filter_map(|s| Some((s.key, m.get_one::<String>(s.key)?.clone())))
                .collect(),
        })
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> std::result::Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

impl Args for Options {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        let cmd = FRAMEWORKS.iter().fold(cmd, |cmd, f| {
            let arg = Arg::new(f.option).long(f.option).help(f.help);
            cmd.arg(match &f.arg {
                Some(a) => arg
                    .value_name(a.name)
                    .num_args(0..=1)
                    .default_missing_value(""),
                None => arg.action(ArgAction::SetTrue),
            })
        });
        SETTINGS.iter().fold(cmd, |cmd, s| {
            cmd.arg(
                Arg::new(s.key)
                    .long(format!("tf-{}", s.key))
                    .alias(s.key)
                    .value_name(s.arg)
                    .help(s.help),
            )
        })
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

impl Options {
    fn settings(&self) -> Result<Settings> {
        let mut settings = Settings::default();
        // No framework option: TensorFlow's, as with `--tf-cluster`.
        if !self.frameworks.is_empty() {
            settings.frameworks = Frameworks::default();
        }
        for (f, value) in &self.frameworks {
            settings.frameworks = settings.frameworks.with(f);
            if let Some(arg) = &f.arg {
                (arg.set)(&mut settings, value.as_deref().unwrap_or(""))?;
            }
        }
        for (key, value) in &self.given {
            settings
                .set(key, value)
                .map_err(|e| Error::new(format!("--tf-{e}")))?;
        }
        Ok(settings)
    }
}

fn run(cli: Cli) -> Result<String> {
    let (Command::Env(options) | Command::Explain(options)) = &cli.command else {
        unreachable!("doctor is run by main");
    };
    let settings = options.settings()?;
    let step = Step::gather(&settings, &mut ProcessEnv)?.step()?;
    match cli.command {
        Command::Env(_) => {
            let injection = core::resolve(&settings, &step)?;
            let vars: serde_json::Map<String, serde_json::Value> = injection
                .vars()
                .map(|(name, value)| (name.to_string(), value.into()))
                .collect();
            Ok(serde_json::Value::Object(vars).to_string())
        }
        Command::Explain(_) => {
            let explained = core::Node::prepare(settings.clone(), step)?.explain()?;
            let mut out = table(explained.rows);
            for line in explained.summaries {
                out.push('\n');
                out.push_str(&line);
            }
            Ok(out)
        }
        Command::Doctor | Command::LauncherEnv(_) => unreachable!("run by main"),
    }
}

/// Rows as columns padded to their widest cell; the first row is the header.
fn table(rows: Vec<Vec<String>>) -> String {
    let columns = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in &rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out.pop();
    out
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Doctor = cli.command {
        let report = doctor::diagnose(&mut doctor::System, env!("TF_CLUSTER_BUILD_ID"));
        print!("{}", report.render());
        return ExitCode::from(report.exit_code());
    }
    if let Command::LauncherEnv(options) = &cli.command {
        let (out, errors, code) = launcher_env::main(options, &mut doctor::System);
        errors.iter().for_each(|e| eprintln!("tf-cluster: {e}"));
        print!("{out}");
        return ExitCode::from(code);
    }
    match run(cli) {
        Ok(out) => {
            println!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tf-cluster: {e}");
            ExitCode::FAILURE
        }
    }
}
