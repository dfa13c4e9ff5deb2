//! The facts about one task that the plugin reads from Slurm, exactly as
//! slurmstepd hands them to the task (the CLI twin reads the same names from
//! its own environment).

use super::error::Result;
use super::gpus;
use super::settings::Settings;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Step {
    /// SLURM_PROCID: the global rank (het-aware, unlike S_TASK_GLOBAL_ID).
    pub procid: Option<String>,
    /// SLURM_STEP_NUM_TASKS.
    pub num_tasks: Option<String>,
    /// SLURM_STEP_NODELIST: sorted by Slurm, not in rank order.
    pub nodelist: Option<String>,
    /// SLURM_STEP_TASKS_PER_NODE, in node-list order.
    pub tasks_per_node: Option<String>,
    /// SLURM_DISTRIBUTION, set only with `srun -m`.
    pub distribution: Option<String>,
    /// SLURM_DIST_PLANESIZE, for `-m plane=N`.
    pub plane_size: Option<String>,
    /// SLURM_NODEID: this node's index in the node list.
    pub node_id: Option<String>,
    /// SLURM_GTIDS: the global ids of the tasks on this node, the ground truth.
    pub gtids: Option<String>,
    /// SLURM_STEP_RESV_PORTS.
    pub resv_ports: Option<String>,
    /// CUDA_VISIBLE_DEVICES as Slurm's gres set it.
    pub cuda_visible_devices: Option<String>,
    /// SLURMD_TRES_BIND is set: Slurm already bound GPUs per task.
    pub gpus_bound_by_slurm: bool,
    /// GPUs found on the node, when nothing else says how many there are.
    pub node_gpus: Option<u32>,
}

impl Step {
    /// Reads the step from `get` (variable name → value). `probe_gpus` counts
    /// the node's GPUs and is only called when nothing else gives them.
    pub fn gather(
        settings: &Settings,
        mut get: impl FnMut(&str) -> Result<Option<String>>,
        probe_gpus: impl FnOnce() -> Result<u32>,
    ) -> Result<Step> {
        let mut step = Step {
            procid: get("SLURM_PROCID")?,
            num_tasks: get("SLURM_STEP_NUM_TASKS")?,
            nodelist: get("SLURM_STEP_NODELIST")?,
            tasks_per_node: get("SLURM_STEP_TASKS_PER_NODE")?,
            distribution: get("SLURM_DISTRIBUTION")?,
            plane_size: get("SLURM_DIST_PLANESIZE")?,
            node_id: get("SLURM_NODEID")?,
            gtids: get("SLURM_GTIDS")?,
            resv_ports: get("SLURM_STEP_RESV_PORTS")?,
            cuda_visible_devices: get("CUDA_VISIBLE_DEVICES")?,
            gpus_bound_by_slurm: get("SLURMD_TRES_BIND")?.is_some(),
            node_gpus: None,
        };
        if gpus::needs_probe(
            settings,
            step.cuda_visible_devices.as_deref(),
            step.gpus_bound_by_slurm,
        ) {
            step.node_gpus = Some(probe_gpus()?);
        }
        Ok(step)
    }
}
