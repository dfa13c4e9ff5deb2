//! The CLI twin of the plugin: reads one task's Slurm variables from its own
//! environment, exactly as the plugin does in slurmstepd, and prints what the
//! plugin would set (`env`) or the whole cluster (`preview`); `doctor` checks
//! a node's installation for admins. This file parses the arguments and
//! hands each command to its module.

mod doctor;
mod elf;
mod env_explain;
mod hang;
mod hang_probe;
mod hang_report;
mod launcher_env;
mod options;
mod postmortem;
mod preview;
mod probe_gpus;
mod ray;
mod ray_node;
mod ray_ports;
mod render;
mod report;
mod site;
mod slurm_cmd;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use env_explain::StepArgs;
use options::Options;

#[derive(Parser)]
#[command(
    name = "tf-cluster",
    version = env!("TF_CLUSTER_BUILD_ID"),
    about = format!(
        "What the tf-cluster plugin gives a Slurm task for {}: the framework's variables, its GPUs (every vendor's) and its network interface",
        tf_cluster_core::frameworks::option_list(tf_cluster_core::FRAMEWORKS.iter().copied(), "and")
    ),
    after_help = "\
Examples:
  tf-cluster preview -N2 -n4 --tf-cluster=ps:1,worker:3   # on a login node
  tf-cluster preview --torch-cluster                       # in an salloc shell or batch script
  srun -N2 -n4 tf-cluster env --tf-cluster                 # what each task of a step gets
  tf-cluster doctor                                        # for admins: this node's installation

`tf-cluster env --help` and `tf-cluster preview --help` list the variables read
(`explain` is another name of `preview`);
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
    #[command(
        visible_alias = "explain",
        after_help = PREVIEW_HELP,
        after_long_help = PREVIEW_HELP
    )]
    Preview(StepArgs),
    /// Check this node's installation (plugstack.conf, the .so, Slurm's
    /// version, site arguments, build, reserved ports). Exit 0: healthy,
    /// 1: a problem that breaks srun or the plugin, 2: warnings only
    /// (a usage error of any command exits 64).
    Doctor,
    /// (For the plugin's preflight.) Each GPU of these minors' health from
    /// NVIDIA's management library, one line each; nothing without it.
    #[command(hide = true)]
    ProbeGpus {
        /// The GPUs' device minors (`/dev/nvidiaN`), comma-separated.
        minors: String,
    },
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
        /// incarnation) or a run id JOB.STEP.rN (r0: the first).
        step: String,
        /// The record's directory, as given to --tf-record (default: the
        /// job's --tf-record, handed down by sbatch or salloc, else the
        /// site's record= in plugstack.conf).
        #[arg(long = "tf-record", visible_alias = "dir", value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// While a step hangs: every rank's node, GPU, pid, state, CPU used in
    /// a few seconds, what it waits in and its Python stack (py-spy where
    /// installed), read through one `srun --overlap` step into the job as
    /// its user, and a verdict naming the odd ranks first.
    Hang {
        /// The job (its latest step) or JOB.STEP.
        step: String,
        /// Seconds over which each rank's CPU time is sampled.
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=30))]
        window: u64,
        /// The node side, run by the overlap step itself.
        #[arg(long, hide = true)]
        probe: bool,
    },
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
      SLURM_GPUS_ON_NODE, SLURM_JOB_GPUS (none set: the job's GPUs per node
      from `scontrol show job`, as after salloc --gres=gpu:N); shape options
      override them as they override them for srun;
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

const PREVIEW_HELP: &str = concat!(
    "\
Examples:
  tf-cluster preview -N2 -n4 --tf-cluster=ps:1,worker:3   # on a login node
  tf-cluster preview -w node[1-3] --ntasks-per-node=2 -m cyclic --tf-cluster
  tf-cluster preview -N2 --ntasks-per-node=2 --gres=gpu:4 --torch-cluster
  tf-cluster preview --tf-cluster          # in an salloc shell or a batch script
  tf-cluster preview -n4 -m arbitrary -w node2,node1,node2,node1 --tf-cluster

",
    where_help!()
);

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
    match cli.command {
        Command::Hang {
            step,
            window,
            probe,
        } => hang_main(&step, window, probe),
        Command::Env(args) => print_step(env_explain::run(&args, false)),
        Command::Preview(args) => print_step(env_explain::run(&args, true)),
        Command::Doctor => {
            let report = doctor::diagnose(&mut site::System, env!("TF_CLUSTER_BUILD_ID"));
            write_out(&report.render(), report.exit_code())
        }
        Command::ProbeGpus { minors } => {
            write_out(&probe_gpus::probe(&probe_gpus::minors(&minors)), 0)
        }
        Command::LauncherEnv(options) => {
            let (out, errors, code) = launcher_env::main(&options, &mut site::System);
            errors.iter().for_each(|e| eprintln!("tf-cluster: {e}"));
            write_out(&out, code)
        }
        Command::Ray { ray_args, cmd } => ExitCode::from(ray::main(&ray_args, &cmd)),
        Command::Postmortem { step, dir } => match postmortem::record_dir(dir, &mut site::System)
            .and_then(|dir| postmortem::postmortem(&dir, &step))
        {
            Ok(text) => write_out(&text, 0),
            Err(e) => {
                eprintln!("tf-cluster: {e}");
                ExitCode::from(1)
            }
        },
    }
}

/// `hang`: the report, or on a node (`--probe`) the node's lines.
fn hang_main(step: &str, window: u64, probe: bool) -> ExitCode {
    let window = std::time::Duration::from_secs(window);
    if probe {
        let ids = step
            .split_once('.')
            .and_then(|(j, s)| Some((j.parse().ok()?, s.parse().ok()?)));
        let Some((job, step)) = ids else {
            eprintln!("tf-cluster: --probe needs JOB.STEP");
            return ExitCode::from(USAGE_ERROR);
        };
        return write_out(&hang_probe::probe(job, step, window), 0);
    }
    match hang::hang(step, window) {
        Ok(text) => write_out(&text, 0),
        Err(e) => {
            eprintln!("tf-cluster: {e}");
            ExitCode::from(1)
        }
    }
}

/// `env` or `preview`: the output on stdout, its notes on stderr.
fn print_step(output: tf_cluster_core::Result<render::Output>) -> ExitCode {
    match output {
        Ok(output) => {
            let code = write_out(&format!("{}\n", output.out), 0);
            for note in output.notes {
                eprintln!("tf-cluster: note: {note}");
            }
            code
        }
        Err(e) => {
            eprintln!("tf-cluster: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Writes a command's output and gives its exit code. A reader that closed
/// the pipe early (`| head`) wanted no more: the command ends quietly with
/// its own code, as tools do on EPIPE; any other failure to write is one
/// line and exit 1.
fn write_out(text: &str, code: u8) -> ExitCode {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::from(code),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::from(code),
        Err(e) => {
            eprintln!("tf-cluster: writing the output: {e}");
            ExitCode::FAILURE
        }
    }
}
