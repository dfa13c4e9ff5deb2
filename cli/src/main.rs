//! The CLI twin of the plugin: reads one task's Slurm variables from its own
//! environment, exactly as the plugin does in slurmstepd, and prints what the
//! plugin would set (`env`) or the whole cluster (`explain`).

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use tf_cluster_core::roles::RoleSpec;
use tf_cluster_core::{self as core, Cluster, Error, Result, Settings, Source, Step};

#[derive(Parser)]
#[command(
    name = "tf-cluster",
    version,
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
}

#[derive(Args)]
struct Options {
    /// Roles as role:count[,role:count…] (default: every task a worker).
    #[arg(long = "tf-cluster", value_name = "SPEC", num_args = 0..=1, default_missing_value = "")]
    tf_cluster: Option<String>,
    /// First port of each node's tasks (default 8888; Slurm's reserved ports win).
    #[arg(long, value_name = "N")]
    port_base: Option<String>,
    /// GPUs to share on each node (default: from CUDA_VISIBLE_DEVICES or the driver).
    #[arg(long, value_name = "N")]
    gpus_per_node: Option<String>,
    /// GPUs per task (default: GPUs per node / most tasks on a node).
    #[arg(long, value_name = "N")]
    gpus_per_task: Option<String>,
    /// Whether to set CUDA_VISIBLE_DEVICES.
    #[arg(long, value_name = "true|false")]
    auto_set_gpu: Option<String>,
    /// rpc_layer to put in TF_CONFIG, e.g. grpc.
    #[arg(long, value_name = "NAME")]
    rpc_layer: Option<String>,
}

impl Options {
    fn settings(&self) -> Result<Settings> {
        let mut settings = Settings {
            roles: RoleSpec::parse(self.tf_cluster.as_deref().unwrap_or(""))?,
            ..Settings::default()
        };
        let given = [
            ("port-base", &self.port_base),
            ("gpus-per-node", &self.gpus_per_node),
            ("gpus-per-task", &self.gpus_per_task),
            ("auto-set-gpu", &self.auto_set_gpu),
            ("rpc-layer", &self.rpc_layer),
        ];
        for (key, value) in given {
            if let Some(value) = value {
                settings
                    .set(key, value)
                    .map_err(|e| Error::new(format!("--{e}")))?;
            }
        }
        Ok(settings)
    }
}

/// This process's environment, read as the plugin reads the task's.
struct Environment;

impl Source for Environment {
    fn var(&mut self, name: &str) -> Result<Option<String>> {
        match std::env::var(name) {
            Ok(v) => Ok(Some(v)),
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => {
                Err(Error::new(format!("{name} is not valid UTF-8")))
            }
        }
    }

    fn gpu_count(&mut self) -> Result<u32> {
        core::node::node_gpu_count()
    }

    fn read_file(&mut self, path: &str) -> Result<String> {
        core::node::read_user_file(path)
    }
}

fn run(cli: Cli) -> Result<String> {
    let (Command::Env(options) | Command::Explain(options)) = &cli.command;
    let settings = options.settings()?;
    let step = Step::gather(&settings, &mut Environment)?;
    match cli.command {
        Command::Env(_) => {
            let injection = core::resolve(&settings, &step)?;
            let vars: serde_json::Map<String, serde_json::Value> = injection
                .vars()
                .map(|(name, value)| (name.to_string(), value.into()))
                .collect();
            Ok(serde_json::Value::Object(vars).to_string())
        }
        Command::Explain(_) => Ok(explain(&Cluster::new(&settings, &step)?)),
    }
}

fn explain(cluster: &Cluster) -> String {
    let rows: Vec<[String; 5]> = cluster
        .ranks()
        .map(|r| {
            [
                r.rank.to_string(),
                r.role.to_string(),
                r.index.to_string(),
                format!("{}:{}", r.host, r.port),
                r.gpus.unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    let header = ["RANK", "ROLE", "INDEX", "ADDRESS", "GPUS"].map(String::from);
    let widths: Vec<usize> = (0..5)
        .map(|c| {
            rows.iter()
                .chain([&header])
                .map(|r| r[c].len())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in std::iter::once(&header).chain(&rows) {
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
    match run(Cli::parse()) {
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
