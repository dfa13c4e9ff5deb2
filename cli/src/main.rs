//! The CLI twin of the plugin: reads one task's Slurm variables from its own
//! environment, exactly as the plugin does in slurmstepd, and prints what the
//! plugin would set (`env`) or the whole cluster (`explain`); `doctor` checks
//! a node's installation for admins.

mod doctor;
mod elf;
mod launcher_env;
mod options;
mod postmortem;
mod preview;
mod ray;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tf_cluster_core::os::ProcessEnv;
use tf_cluster_core::secret::{self, Secret};
use tf_cluster_core::{self as core, Error, Gathered, Node, Result, Settings, Step};

use options::Options;
use preview::{Place, Shape};

#[derive(Parser)]
#[command(
    name = "tf-cluster",
    version = env!("TF_CLUSTER_BUILD_ID"),
    about = "What the tf-cluster plugin gives a Slurm task for --tf-cluster, --torch-cluster, --jax-cluster and --ray-cluster: the framework's variables, its GPUs (every vendor's) and its network interface",
    after_help = "\
Examples:
  tf-cluster explain -N2 -n4 --tf-cluster=ps:1,worker:3   # preview on a login node
  tf-cluster explain --torch-cluster                       # in an salloc shell or batch script
  srun -N2 -n4 tf-cluster env --tf-cluster                 # what each task of a step gets
  tf-cluster doctor                                        # for admins: this node's installation

`tf-cluster env --help` and `tf-cluster explain --help` list the variables read;
the manual: man tf-cluster."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print, as one JSON object, the variables the plugin would set for a
    /// task: this task inside a step, else rank --rank (0) of the step srun
    /// would start here.
    #[command(after_help = ENV_HELP, after_long_help = ENV_HELP)]
    Env(StepArgs),
    /// Print a table of every rank: role, index, host:port and GPUs, for
    /// this step, or for the step srun would start here with these options.
    #[command(after_help = EXPLAIN_HELP, after_long_help = EXPLAIN_HELP)]
    Explain(StepArgs),
    /// Check this node's installation (plugstack.conf, the .so, Slurm's
    /// version, site arguments, build, reserved ports). Exit 0: healthy,
    /// 1: a problem that breaks srun or the plugin, 2: warnings only
    /// (a usage error of any command exits 64).
    Doctor,
    /// Print the variables that give these options to sbatch and srun
    /// through the environment, for launchers that write their own sbatch
    /// script (TorchX, submitit, NeMo-Run), for this node's plugstack.conf.
    LauncherEnv(Options),
    /// In a step started with srun --ray-cluster, one task per node: start
    /// Ray's head on rank 0's node and run CMD there as the driver, a Ray
    /// worker node elsewhere, every port, the node's address, the temp
    /// directory and the step's token from the plugin's variables; the step
    /// ends with CMD's exit code, and only this step's Ray processes are
    /// stopped.
    #[command(after_help = RAY_HELP, after_long_help = RAY_HELP)]
    Ray {
        /// More `ray start` flags for every node (--num-gpus=0,
        /// --object-store-memory=BYTES …).
        #[arg(allow_hyphen_values = true, value_name = "RAY_START_ARGS")]
        ray_args: Vec<String>,
        /// The driver, run on the head's node.
        #[arg(last = true, value_name = "CMD")]
        cmd: Vec<String>,
    },
    /// After a step ran with --tf-record=DIR: print every rank (host,
    /// address, ports, GPUs, interface, role), how each task ended, and
    /// which rank failed first.
    Postmortem {
        /// The job (every recorded step), JOB.STEP (its latest
        /// incarnation) or a run id JOB.STEP.rN.
        step: String,
        /// The record's directory, as given to --tf-record.
        #[arg(long = "tf-record", visible_alias = "dir", value_name = "DIR")]
        dir: PathBuf,
    },
}

/// `env` and `explain`: the plugin's options and srun's shape options.
#[derive(clap::Args)]
struct StepArgs {
    #[command(flatten)]
    options: Options,
    #[command(flatten)]
    shape: Shape,
}

/// Where the facts come from, in `--help` (a macro: `concat!` takes
/// literals only).
macro_rules! where_help {
    () => {
        "\
Where the facts come from:
  inside a step (SLURM_STEP_TASKS_PER_NODE set), without shape options:
      this task's own variables, as the plugin reads them in slurmstepd:
      SLURM_PROCID, SLURM_STEP_NUM_TASKS, SLURM_STEP_NODELIST,
      SLURM_STEP_TASKS_PER_NODE, SLURM_NODEID, SLURM_GTIDS, SLURMD_NODENAME,
      SLURM_DISTRIBUTION, SLURM_DIST_PLANESIZE, SLURM_HOSTFILE,
      SLURM_STEP_RESV_PORTS, CUDA_VISIBLE_DEVICES and the other device lists,
      SLURM_GPUS_ON_NODE, SLURMD_TRES_BIND, SLURM_JOB_ID, SLURM_STEP_ID,
      SLURM_RESTART_COUNT (as srun reads it: the run's ids);
  inside an allocation (an salloc shell, a batch script: SLURM_JOB_ID set):
      the step a plain srun would start there, from the job's SLURM_JOB_ID,
      SLURM_JOB_NODELIST, SLURM_NNODES, SLURM_NTASKS, SLURM_NTASKS_PER_NODE,
      SLURM_TASKS_PER_NODE, SLURM_JOB_CPUS_PER_NODE, SLURM_CPUS_PER_TASK,
      SLURM_DISTRIBUTION, SLURM_DIST_PLANESIZE, SLURM_GPUS_PER_NODE,
      SLURM_GPUS_ON_NODE, SLURM_JOB_GPUS; shape options override them as
      they override them for srun;
  elsewhere (a login node): the shape options (default -N1 -n1) and the
      default partition's nodes and CPUs from slurmctld (scontrol show
      partition|node), else -w's nodes or invented names, and the output
      says so;
  with -m arbitrary and no -w, in either: the hosts of SLURM_HOSTFILE.
A preview reads nothing else of this machine but slurm.conf's MpiParams (the
ports; SLURM_CONF, else /etc/slurm/slurm.conf) and what scontrol answers:
not its GPUs, nor its network
interfaces (--tf-network is judged on each node at launch)."
    };
}

const ENV_HELP: &str = concat!(
    "\
Examples:
  tf-cluster env                           # inside a step: this task's variables
  tf-cluster env -N2 -n4 --tf-cluster=ps:1,worker:3 --rank 1
  tf-cluster env -N2 --ntasks-per-node=2 --gpus-per-node=4 --torch-cluster --rank 3
  tf-cluster env --tf-off                  # {} (the plugin sets nothing)

",
    where_help!()
);

const EXPLAIN_HELP: &str = concat!(
    "\
Examples:
  tf-cluster explain -N2 -n4 --tf-cluster=ps:1,worker:3   # on a login node
  tf-cluster explain -w node[1-3] --ntasks-per-node=2 -m cyclic --tf-cluster
  tf-cluster explain -N2 --ntasks-per-node=2 --gres=gpu:4 --torch-cluster
  tf-cluster explain --tf-cluster          # in an salloc shell or a batch script
  tf-cluster explain -n4 -m arbitrary -w node2,node1,node2,node1 --tf-cluster

",
    where_help!()
);

/// What `env` or `explain` prints: stdout, then notes for stderr (`env`).
struct Output {
    out: String,
    notes: Vec<String>,
}

fn run(command: &Command) -> Result<Output> {
    let (Command::Env(args) | Command::Explain(args)) = command else {
        unreachable!("doctor, launcher-env and postmortem are run by main");
    };
    let settings = args.options.settings()?;
    let explain = matches!(command, Command::Explain(_));
    let place = preview::place(&mut ProcessEnv)?;
    if settings.frameworks.is_empty() {
        let why = args.options.why_off();
        return Ok(match explain {
            true => Output {
                out: format!("no framework for this step ({why}): the plugin sets nothing"),
                notes: vec![],
            },
            false => Output {
                out: "{}".into(),
                notes: vec![],
            },
        });
    }
    if place == Place::Step && !args.shape.given() {
        if args.shape.rank.is_some() {
            return Err(Error::new(
                "--rank is for a preview: inside a step, env prints this task's variables (SLURM_PROCID)",
            ));
        }
        // srun's word applied as slurmstepd applies it: the options are the
        // ones given here.
        let gathered = Step::gather(&settings, &mut ProcessEnv)?;
        return render(explain, gathered, None, Vec::new());
    }
    let preview = preview::preview(&args.shape, &mut ProcessEnv, place)?;
    let first_port = preview::reserved_range_start();
    preview::check(&settings, &preview, &args.shape.command, first_port)?;
    if !explain && preview.rank >= preview.tasks {
        return Err(Error::new(format!(
            "--rank {}: the step has {} task(s)",
            preview.rank, preview.tasks
        )));
    }
    let mut notes = vec![match place {
        Place::Allocation => format!(
            "preview: the step srun would start in this allocation{}",
            if args.shape.given() {
                " with these options"
            } else {
                ""
            }
        ),
        Place::Step => {
            "preview: another step srun would start in this job with these options".into()
        }
        Place::Login => {
            "preview: the step srun would start with these options (not inside a job)".into()
        }
    }];
    notes.extend(preview.notes.iter().cloned());
    notes.push(ports_note(&settings));
    // This machine's network is not the nodes': the network is judged on
    // each node at launch, and only the addresses keep the host template.
    let mut gather = settings.clone();
    if let Some(network) = gather.network.take() {
        notes.push(format!(
            "--tf-network={network}: judged on each node at launch (each node's interface on it goes to the frameworks), not on this machine"
        ));
    } else if let Some(template) = &settings.host_template {
        notes.push(format!(
            "--tf-host-template={template}: the network of these names is found on each node at launch"
        ));
    }
    gather.host_template = None;
    let mut source = preview::Synthesised {
        preview: &preview,
        rank: Some(preview.rank),
    };
    let mut handed = Step::gather(&gather, &mut source)?.handed()?;
    handed.settings = settings;
    // The job's restart count as srun reads it: the ids shown are those the
    // step's tasks get.
    handed.step.restart_count = core::step::restart_count(&mut ProcessEnv)?;
    // srun draws the step's secret at launch: a preview shows zeros.
    if handed
        .settings
        .frameworks
        .contains(&core::frameworks::ray::FRAMEWORK)
    {
        handed.step.secret = Some(Secret::from_bytes([0; secret::LEN]));
        notes.push(
            "--ray-cluster: RAY_AUTH_TOKEN and the name of the step's private directory come from a secret srun draws for each step at launch (zeros here)".into(),
        );
    }
    render(
        explain,
        Gathered::Step(Box::new(handed)),
        Some(preview.rank),
        notes,
    )
}

/// What the ports shown are. A preview knows no step id: without an
/// explicit port base it shows the default base + each task's index, where
/// the step will take its block of the port range (or, where slurm.conf
/// (SLURM_CONF, else its default place) has MpiParams=ports=…, as `doctor`
/// reads it, the ports Slurm reserves).
fn ports_note(settings: &Settings) -> String {
    use doctor::slurm_conf::{DEFAULT_SLURM_CONF, parse_slurm_conf};
    let shown = settings
        .port_base
        .unwrap_or(tf_cluster_core::settings::DEFAULT_PORT_BASE);
    let unreserved = match settings.port_base {
        Some(base) => format!("the port base ({base}) + each task's index on its node"),
        None => format!(
            "each step's own block of the port range {}-{}, placed by its job and step ids at launch (a preview knows no step id: the port base ({shown}) + each task's index is shown)",
            settings.port_range.first, settings.port_range.last
        ),
    };
    let path = std::env::var("SLURM_CONF")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| DEFAULT_SLURM_CONF.to_string());
    let Ok(text) = std::fs::read_to_string(&path) else {
        return format!(
            "ports: {unreserved}; where Slurm reserves the step's ports (MpiParams=ports), the task's index picks one of those at launch instead"
        );
    };
    match parse_slurm_conf(&text)
        .get("mpiparams")
        .filter(|m| m.contains("ports="))
    {
        Some(m) => format!(
            "ports: Slurm reserves each step's ports at launch (MpiParams={m} in {path}): the task's index on its node (the port shown - {shown}) picks one of them instead of the port shown"
        ),
        None => format!("ports: {unreserved} ({path} reserves no ports: no MpiParams=ports)"),
    }
}

/// `env` (the variables of `step.procid`) or `explain` (every rank) of a
/// step, real or previewed; `notes` after the table, or on stderr for env.
fn render(
    explain: bool,
    gathered: Gathered,
    preview_rank: Option<u32>,
    notes: Vec<String>,
) -> Result<Output> {
    let node = match gathered {
        Gathered::Step(handed) => Node::prepare_handed(*handed)?,
        Gathered::Refused => return Err(Error::new("srun refused this step")),
        Gathered::Skip => None,
    };
    // srun left the step alone or left out each framework it asks for.
    let Some(node) = node else {
        return Ok(Output {
            out: match explain {
                true => "srun leaves this step alone: the plugin sets nothing".into(),
                false => "{}".into(),
            },
            notes,
        });
    };
    if !explain {
        let Some(rank) = node.step().procid else {
            return Err(Error::new(
                "SLURM_PROCID is not set: not inside a Slurm step?",
            ));
        };
        let injection = node.task(rank, None, None)?;
        let vars: serde_json::Map<String, serde_json::Value> = injection
            .vars()
            .map(|(name, value)| (name.to_string(), value.into()))
            .collect();
        let mut notes = notes;
        if let Some(rank) = preview_rank {
            notes.insert(0, format!("the variables of rank {rank}"));
        }
        return Ok(Output {
            out: serde_json::Value::Object(vars).to_string(),
            notes,
        });
    }
    let explained = node.rank_table()?;
    let mut out = table(explained.rows);
    for line in explained.summaries.iter().chain(&notes) {
        out.push('\n');
        out.push_str(line);
    }
    Ok(Output { out, notes: vec![] })
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

/// The exit code of a command-line usage error, for every command: 64
/// (sysexits' EX_USAGE), not clap's 2, which `doctor` and `launcher-env`
/// use for "works, with warnings".
const USAGE_ERROR: u8 = 64;

const RAY_HELP: &str = "\
Example:
  srun -N3 --ntasks-per-node=1 --ray-cluster tf-cluster ray -- python driver.py

Reads RAY_ADDRESS, TF_CLUSTER_RAY_ARGS, TF_CLUSTER_RAY_HEAD_ARGS (rank 0's
node), TF_CLUSTER_RAY_NODE and TF_CLUSTER_RAY_TEMP_DIR, which the plugin sets;
runs `ray` from PATH (activate Ray's venv first).";

fn main() -> ExitCode {
    // `ray … -- CMD…`: split at the first `--` here; clap would take the
    // `--` of a hyphen-valued positional for one of its values.
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).is_some_and(|a| a == "ray") {
        if let Some(at) = argv.iter().position(|a| a == "--") {
            return ExitCode::from(ray::main(&argv[2..at], &argv[at + 1..]));
        }
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // --help and --version print to stdout and exit 0, as clap does.
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(USAGE_ERROR);
        }
    };
    if let Command::Doctor = cli.command {
        let report = doctor::diagnose(&mut doctor::System, env!("TF_CLUSTER_BUILD_ID"));
        print!("{}", report.render());
        return ExitCode::from(report.exit_code());
    }
    if let Command::Postmortem { step, dir } = &cli.command {
        return match postmortem::postmortem(dir, step) {
            Ok(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("tf-cluster: {e}");
                ExitCode::from(1)
            }
        };
    }
    if let Command::Ray { ray_args, cmd } = &cli.command {
        return ExitCode::from(ray::main(ray_args, cmd));
    }
    if let Command::LauncherEnv(options) = &cli.command {
        let (out, errors, code) = launcher_env::main(options, &mut doctor::System);
        errors.iter().for_each(|e| eprintln!("tf-cluster: {e}"));
        print!("{out}");
        return ExitCode::from(code);
    }
    match run(&cli.command) {
        Ok(output) => {
            println!("{}", output.out);
            for note in output.notes {
                eprintln!("tf-cluster: note: {note}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tf-cluster: {e}");
            ExitCode::FAILURE
        }
    }
}
