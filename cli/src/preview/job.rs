//! What the job says, inside an allocation or a step (empty on a login node):
//! its nodes, their CPUs, its task counts and GPUs, one parser per variable
//! (the core's).

use tf_cluster_core::hostlist::HostList;
use tf_cluster_core::number::{parse_u32, parse_u64};
use tf_cluster_core::{Error, MAX_GPUS, MAX_NODES, MAX_TASKS, Result, Source, tasks_per_node};

#[derive(Debug, Default)]
pub struct Job {
    pub id: Option<String>,
    pub hosts: Option<HostList>,
    pub nnodes: Option<u32>,
    pub ntasks: Option<u32>,
    pub ntasks_per_node: Option<u32>,
    /// The CPUs of each node, divided by SLURM_CPUS_PER_TASK: the tasks
    /// each node holds before Slurm over-subscribes it.
    pub cpus: Option<Vec<u32>>,
    pub distribution: Option<String>,
    pub plane_size: Option<String>,
    pub gpus: Option<u32>,
}

/// A count above 0, as srun takes its options and variables; one too large
/// for any step says the most it may be (`max`), not that it is no count.
pub fn count(text: &str, what: &str, max: u32) -> Result<u32> {
    match parse_u64(text) {
        Some(n) if n > u64::from(max) => Err(Error::new(format!(
            "{what} {text:?}: too large, at most {max}"
        ))),
        Some(n) if n > 0 => Ok(n as u32),
        _ => Err(Error::new(format!("{what} {text:?}: not a count"))),
    }
}

/// `[TYPE:]N` (--gpus-per-node, SLURM_GPUS_PER_NODE): N.
pub fn gpus_per_node(text: &str, what: &str) -> Result<u32> {
    let n = text.rsplit(':').next().unwrap_or_default();
    match parse_u32(n) {
        Some(n) => Ok(n),
        _ => Err(Error::new(format!(
            "{what} {text:?}: not a GPU count ([TYPE:]N)"
        ))),
    }
}

fn env_count(env: &mut impl Source, name: &str, max: u32) -> Result<Option<u32>> {
    env.var(name)?.map(|v| count(&v, name, max)).transpose()
}

impl Job {
    pub fn read(env: &mut impl Source) -> Result<Job> {
        let hosts = match env.var("SLURM_JOB_NODELIST")? {
            Some(list) => Some(
                HostList::parse(&list, MAX_NODES as usize)
                    .map_err(|e| Error::new(format!("SLURM_JOB_NODELIST: {e}")))?,
            ),
            None => None,
        };
        let mut cpus = env
            .var("SLURM_JOB_CPUS_PER_NODE")?
            .map(|t| {
                tasks_per_node::parse(&t, MAX_NODES as usize)
                    .map_err(|e| Error::new(format!("SLURM_JOB_CPUS_PER_NODE: {e}")))
            })
            .transpose()?;
        if let (Some(cpus), Some(per_task)) =
            (&mut cpus, env_count(env, "SLURM_CPUS_PER_TASK", u32::MAX)?)
        {
            cpus.iter_mut().for_each(|c| *c = (*c / per_task).max(1));
        }
        Ok(Job {
            id: env.var("SLURM_JOB_ID")?,
            hosts,
            nnodes: env_count(env, "SLURM_NNODES", MAX_NODES)?,
            ntasks: env_count(env, "SLURM_NTASKS", MAX_TASKS)?,
            ntasks_per_node: env_count(env, "SLURM_NTASKS_PER_NODE", MAX_TASKS)?,
            cpus,
            distribution: env.var("SLURM_DISTRIBUTION")?,
            plane_size: env.var("SLURM_DIST_PLANESIZE")?,
            gpus: job_gpus(env)?,
        })
    }
}

/// The job's GPUs per node: SLURM_GPUS_PER_NODE, else SLURM_GPUS_ON_NODE,
/// else the ids of SLURM_JOB_GPUS.
fn job_gpus(env: &mut impl Source) -> Result<Option<u32>> {
    if let Some(g) = env.var("SLURM_GPUS_PER_NODE")? {
        return gpus_per_node(&g, "SLURM_GPUS_PER_NODE").map(Some);
    }
    if let Ok(Some(n)) = env_count(env, "SLURM_GPUS_ON_NODE", MAX_GPUS) {
        return Ok(Some(n));
    }
    Ok(env
        .var("SLURM_JOB_GPUS")?
        .filter(|ids| !ids.is_empty())
        .map(|ids| ids.split(',').count() as u32))
}
