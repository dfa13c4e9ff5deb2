//! The options phase: srun's shape options as srun spells them, read into a
//! [`Request`] with the job's variables where no option says otherwise (srun
//! reads SLURM_NTASKS, SLURM_NTASKS_PER_NODE, SLURM_DISTRIBUTION … as its
//! options).

use clap::Args;
use tf_cluster_core::distribution::Distribution;
use tf_cluster_core::number::parse_u32;
use tf_cluster_core::{Error, MAX_NODES, MAX_TASKS, Result};

use super::job::{Job, count, gpus_per_node};

/// srun's options that shape a step, as srun spells them.
#[derive(Args, Debug, Default, Clone)]
#[command(next_help_heading = "Shape of the step (srun's options; outside a step)")]
pub struct Shape {
    /// Nodes of the step (default: -w's count, else the job's SLURM_NNODES, else as many as the tasks need).
    #[arg(short = 'N', long = "nodes", value_name = "N")]
    pub nodes: Option<String>,
    /// Tasks of the step (default: --ntasks-per-node per node, else the job's SLURM_NTASKS, else one per node).
    #[arg(short = 'n', long = "ntasks", value_name = "N")]
    pub ntasks: Option<String>,
    /// Most tasks on each node (srun ignores it, with a warning, in an allocation where -n does not fit it).
    #[arg(long = "ntasks-per-node", value_name = "N")]
    pub ntasks_per_node: Option<String>,
    /// Nodes the step must use, a Slurm hostlist such as node[1-3] (with -m arbitrary: one host per task, in rank order).
    #[arg(short = 'w', long = "nodelist", value_name = "HOSTLIST")]
    pub nodelist: Option<String>,
    /// block (default), cyclic, plane=N or arbitrary (what follows ':' is ignored).
    #[arg(short = 'm', long = "distribution", value_name = "DIST")]
    pub distribution: Option<String>,
    /// GPUs on each node of the step ([TYPE:]N).
    #[arg(long = "gpus-per-node", value_name = "[TYPE:]N")]
    pub gpus_per_node: Option<String>,
    /// Generic resources on each node; gpu[:TYPE][:N] entries count as GPUs.
    #[arg(long = "gres", value_name = "LIST")]
    pub gres: Option<String>,
    /// Ports Slurm reserves for the step on each node (default: one more than the fullest node's tasks), where slurm.conf has MpiParams=ports.
    #[arg(
        long = "resv-ports",
        value_name = "N",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = ""
    )]
    pub resv_ports: Option<String>,
    /// srun's --gpus-per-task: refused here (Slurm then binds GPUs per task).
    #[arg(long = "gpus-per-task", value_name = "N", hide = true)]
    pub gpus_per_task: Option<String>,
    /// `env` outside a step: the rank whose variables to print (default 0).
    #[arg(long = "rank", value_name = "R")]
    pub rank: Option<String>,
    /// The step's command, after `--` (srun refuses torchrun with several
    /// tasks on a node; so does the preview).
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

impl Shape {
    /// Whether any shape option was given (`--rank` and the command are not).
    pub fn given(&self) -> bool {
        self.nodes.is_some()
            || self.ntasks.is_some()
            || self.ntasks_per_node.is_some()
            || self.nodelist.is_some()
            || self.distribution.is_some()
            || self.gpus_per_node.is_some()
            || self.gres.is_some()
            || self.gpus_per_task.is_some()
            || self.resv_ports.is_some()
    }

    /// `--resv-ports=N`'s N; `None` for srun's default, bare or absent.
    pub fn resv_ports(&self) -> Result<Option<u32>> {
        match self.resv_ports.as_deref() {
            None | Some("") => Ok(None),
            Some(n) => count(n, "--resv-ports", u32::from(u16::MAX)).map(Some),
        }
    }
}

/// What the step asks for, options over the job's variables.
#[derive(Debug, Clone)]
pub struct Request {
    pub nodes: Option<u32>,
    pub ntasks: Option<u32>,
    pub per_node: Option<u32>,
    pub dist: Distribution,
    /// SLURM_DISTRIBUTION and SLURM_DIST_PLANESIZE as the step gets them.
    pub dist_name: String,
    pub plane_size: Option<String>,
    pub nodelist: Option<String>,
    pub gpus: Option<u32>,
    pub rank: u32,
}

impl Request {
    pub fn new(shape: &Shape, job: &Job) -> Result<Request> {
        if shape.gpus_per_task.is_some() {
            return Err(Error::new(
                "srun's --gpus-per-task makes Slurm bind GPUs to each task, which a preview cannot show: preview with --gpus-per-node=N, or run the preview in the step (the plugin's own setting is --tf-gpus-per-task)",
            ));
        }
        let opt = |v: &Option<String>, what: &str, max: u32| {
            v.as_deref().map(|t| count(t, what, max)).transpose()
        };
        if let Some(t) = shape.nodes.as_deref().filter(|t| t.contains('-')) {
            return Err(Error::new(format!(
                "-N/--nodes {t:?}: a range; the preview needs one node count"
            )));
        }
        let ntasks = opt(&shape.ntasks, "-n/--ntasks", MAX_TASKS)?;
        let per_node = opt(&shape.ntasks_per_node, "--ntasks-per-node", MAX_TASKS)?;
        // The job's task counts stand unless a task option is given.
        let task_option = ntasks.is_some() || per_node.is_some();
        let (dist, dist_name, plane_size) = match (&shape.distribution, &job.distribution) {
            (Some(m), _) => distribution(m)?,
            (None, Some(d)) => {
                let dist = Distribution::from_env(Some(d), job.plane_size.as_deref())?;
                (dist, d.clone(), job.plane_size.clone())
            }
            (None, None) => (Distribution::Block, "block".into(), None),
        };
        let rank = shape.rank.as_deref().map(|r| match parse_u32(r) {
            Some(n) => Ok(n),
            _ => Err(Error::new(format!("--rank {r:?}: not a rank"))),
        });
        Ok(Request {
            nodes: opt(&shape.nodes, "-N/--nodes", MAX_NODES)?,
            ntasks: ntasks.or(job.ntasks.filter(|_| !task_option)),
            per_node: per_node.or(job.ntasks_per_node.filter(|_| !task_option)),
            dist,
            dist_name,
            plane_size,
            nodelist: shape.nodelist.clone(),
            gpus: gpus(shape, job)?,
            rank: rank.transpose()?.unwrap_or(0),
        })
    }
}

/// GPUs per node: --gpus-per-node or --gres's gpu entries, else the job's.
fn gpus(shape: &Shape, job: &Job) -> Result<Option<u32>> {
    let gpus = match (&shape.gpus_per_node, &shape.gres) {
        (Some(_), Some(_)) => {
            return Err(Error::new(
                "--gpus-per-node and --gres=gpu both given: give one",
            ));
        }
        (Some(g), None) => Some(gpus_per_node(g, "--gpus-per-node")?),
        (None, Some(g)) => gres_gpus(g)?,
        (None, None) => job.gpus,
    };
    if let Some(g) = gpus.filter(|&g| g > tf_cluster_core::MAX_GPUS) {
        return Err(Error::new(format!(
            "{g} GPUs per node: at most {}",
            tf_cluster_core::MAX_GPUS
        )));
    }
    Ok(gpus)
}

/// The GPUs of `--gres=LIST`: gpu, gpu:N, gpu:TYPE:N entries, others skipped.
pub(super) fn gres_gpus(text: &str) -> Result<Option<u32>> {
    let mut total = None;
    for entry in text.split(',') {
        let entry = entry.strip_prefix("gres/").unwrap_or(entry);
        let mut parts = entry.split(':');
        if parts.next() != Some("gpu") {
            continue;
        }
        let rest: Vec<&str> = parts.collect();
        let n = match rest.as_slice() {
            [] => 1,
            [n] | [_, n] if parse_u32(n).is_some() => parse_u32(n).unwrap_or_default(),
            [_] => 1,
            _ => {
                return Err(Error::new(format!("--gres {text:?}: not gpu[:TYPE][:N]")));
            }
        };
        total = Some(total.unwrap_or(0) + n);
    }
    Ok(total)
}

/// `-m` as srun takes it: the node level before ':' (`plane=N` carries its
/// size), as SLURM_DISTRIBUTION and SLURM_DIST_PLANESIZE say it.
fn distribution(text: &str) -> Result<(Distribution, String, Option<String>)> {
    let node_level = text.split([':', ',']).next().unwrap_or_default();
    let (name, size) = match node_level.split_once('=') {
        Some(("plane", size)) => ("plane", Some(size.to_string())),
        _ => (node_level, None),
    };
    let dist = Distribution::from_env(Some(name), size.as_deref()).map_err(|_| {
        Error::new(format!(
            "-m/--distribution {text:?}: use block, cyclic, plane=N or arbitrary"
        ))
    })?;
    Ok((dist, name.to_string(), size))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gres_counts_gpus_only() {
        assert_eq!(gres_gpus("gpu:4").unwrap(), Some(4));
        assert_eq!(gres_gpus("gpu:a100:2").unwrap(), Some(2));
        assert_eq!(gres_gpus("gpu").unwrap(), Some(1));
        assert_eq!(gres_gpus("nic:1,gpu:2").unwrap(), Some(2));
        assert_eq!(gres_gpus("nic:1").unwrap(), None);
        assert!(gres_gpus("gpu:a:b:c").is_err());
        assert_eq!(gpus_per_node("a100:4", "x").unwrap(), 4);
        assert!(gpus_per_node("four", "x").is_err());
    }

    #[test]
    fn distributions_as_srun_spells_them() {
        assert_eq!(distribution("block").unwrap().0, Distribution::Block);
        assert_eq!(
            distribution("cyclic:block").unwrap().0,
            Distribution::Cyclic
        );
        assert_eq!(distribution("plane=3").unwrap().0, Distribution::Plane(3));
        assert_eq!(
            distribution("arbitrary").unwrap().0,
            Distribution::Arbitrary
        );
        assert!(distribution("plane").is_err());
        assert!(distribution("round").is_err());
    }
}
