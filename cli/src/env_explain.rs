//! `env` and `explain`: where a step's facts come from (this task's own
//! variables inside a step, else the step srun would start here, previewed)
//! and the notes that say what a preview cannot know.

use tf_cluster_core::os::ProcessEnv;
use tf_cluster_core::secret::{self, Secret};
use tf_cluster_core::{self as core, Error, Gathered, Result, Settings, Step};

use crate::options::Options;
use crate::preview::{self, Place, Preview, Shape};
use crate::render::{Output, render};
use crate::site::{Conf, System, conf_path};

/// `env` and `explain`: the plugin's options and srun's shape options.
#[derive(clap::Args)]
pub struct StepArgs {
    #[command(flatten)]
    options: Options,
    #[command(flatten)]
    shape: Shape,
}

/// `explain` (every rank) when `explain`, else `env` (one task's variables).
pub fn run(args: &StepArgs, explain: bool) -> Result<Output> {
    let settings = args.options.settings()?;
    let place = preview::place(&mut ProcessEnv)?;
    if settings.frameworks.is_empty() {
        let why = args.options.why_off();
        return Ok(Output {
            out: match explain {
                true => format!("no framework for this step ({why}): the plugin sets nothing"),
                false => "{}".into(),
            },
            notes: vec![],
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
        return render(explain, gathered, None, bound_note().into_iter().collect());
    }
    preview_step(args, settings, place, explain)
}

/// The step srun would start here with these options, refused as srun
/// would refuse it, with notes on what a preview cannot know.
fn preview_step(
    args: &StepArgs,
    settings: Settings,
    place: Place,
    explain: bool,
) -> Result<Output> {
    let preview = preview::preview(&args.shape, &mut ProcessEnv, place)?;
    let conf_path = conf_path(&mut System);
    let conf = Conf::read_whole(&conf_path);
    let first_port = conf
        .as_ref()
        .and_then(Conf::reserved_ports)
        .and_then(|r| r.first);
    let resv_ports = args.shape.resv_ports()?;
    if args.shape.resv_ports.is_some() && first_port.is_none() {
        return Err(Error::new(format!(
            "--resv-ports: {} has no MpiParams=ports, so Slurm reserves no ports and srun refuses --resv-ports",
            conf_path
        )));
    }
    preview::check(
        &settings,
        &preview,
        &args.shape.command,
        first_port,
        resv_ports,
    )?;
    if !explain && preview.rank >= preview.tasks {
        return Err(Error::new(format!(
            "--rank {}: the step has {} task(s)",
            preview.rank, preview.tasks
        )));
    }
    let mut notes = vec![what_is_previewed(place, args.shape.given())];
    notes.extend(preview.notes.iter().cloned());
    notes.push(ports_note(&settings, &conf_path, conf.as_ref()));
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
    let gathered = previewed(settings, &gather, &preview, &mut notes)?;
    render(explain, gathered, Some(preview.rank), notes)
}

/// Inside a step: the CPUs the plugin bound this task to, near its GPUs
/// (TF_CLUSTER_CPUS, which slurmstepd set as it bound the task).
fn bound_note() -> Option<String> {
    let cpus = std::env::var("TF_CLUSTER_CPUS").ok()?;
    let cpus = tf_cluster_core::cpulist::Cpus::parse(&cpus)?;
    Some(format!(
        "this task runs on CPUs {} (TF_CLUSTER_CPUS): the CPUs near its GPUs (--tf-bind=gpu)",
        cpus.list()
    ))
}

/// The first note of a preview: which step it shows.
fn what_is_previewed(place: Place, shape_given: bool) -> String {
    match place {
        Place::Allocation => format!(
            "preview: the step srun would start in this allocation{}",
            if shape_given {
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
    }
}

/// srun's word for the previewed step, gathered with `gather` (the
/// settings without this machine's network) and carrying `settings`.
fn previewed(
    settings: Settings,
    gather: &Settings,
    preview: &Preview,
    notes: &mut Vec<String>,
) -> Result<Gathered> {
    let mut source = preview::Synthesised {
        preview,
        rank: Some(preview.rank),
    };
    let mut handed = Step::gather(gather, &mut source)?.handed()?;
    handed.settings = settings;
    // The NVLink domains of topology/block, from this machine's topology.conf
    // where slurm.conf names that plugin.
    let block = core::os::slurm_conf_file("slurm.conf").is_some_and(|conf| {
        conf.lines().any(|l| {
            l.split('#')
                .next()
                .unwrap_or_default()
                .contains("topology/block")
        })
    });
    if block {
        handed.step.nvl_blocks = core::os::slurm_conf_file("topology.conf")
            .and_then(|text| core::topology_blocks::Blocks::parse(&text));
    }
    // The job's restart count as srun reads it: the ids shown are those the
    // step's tasks get.
    handed.step.restart_count = core::restart_count(&mut ProcessEnv)?;
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
    Ok(Gathered::Step(Box::new(handed)))
}

/// What the ports shown are. A preview knows no step id: without an
/// explicit port base it shows the default base + each task's index, where
/// the step will take its block of the port range (or, where slurm.conf
/// (`conf_path`, `conf` its settings where readable) has
/// MpiParams=ports=…, as `doctor` reads it, the ports Slurm reserves).
fn ports_note(settings: &Settings, conf_path: &str, conf: Option<&Conf>) -> String {
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
    let Some(conf) = conf else {
        return format!(
            "ports: {unreserved}; where Slurm reserves the step's ports (MpiParams=ports), the task's index picks one of those at launch instead"
        );
    };
    match conf.reserved_ports() {
        Some(ports) => format!(
            "ports: Slurm reserves each step's ports at launch (MpiParams={} in {conf_path}): the task's index on its node (the port shown - {shown}) picks one of them instead of the port shown",
            ports.setting
        ),
        None => format!("ports: {unreserved} ({conf_path} reserves no ports: no MpiParams=ports)"),
    }
}
