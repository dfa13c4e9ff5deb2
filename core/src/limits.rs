//! The plugin's limits, which every layer checks against: nothing here
//! depends on any other module, so every module may.

use super::error::{Result, bail};

/// Most tasks a step may have: every task's work is linear in it (parsing
/// srun's map, one pass over the placements), bounded in time and memory.
/// Frameworks have lower limits of their own (TensorFlow's TF_CONFIG).
pub const MAX_TASKS: u32 = 1 << 18;

/// Most nodes a step may have: bounds every host list a task expands.
pub const MAX_NODES: u32 = 1 << 16;

/// Most GPUs a node, a task or Slurm's list may name: far above any real
/// node, low enough that no count a user gives makes the task build a huge
/// list before its limits apply.
pub const MAX_GPUS: u32 = 1024;

/// Slurm's setenv and execve refuse a variable of this many bytes or more,
/// counting `NAME=`, the value and the NUL.
pub const ENV_LIMIT: usize = 131_072;

/// The step's size against what any task lays out (each framework has its
/// own, lower limits besides).
pub fn check_size(tasks: u64, nodes: usize) -> Result<()> {
    if tasks > u64::from(MAX_TASKS) {
        bail!("the step has {tasks} tasks; tf-cluster lays out at most {MAX_TASKS}");
    }
    if nodes > MAX_NODES as usize {
        bail!("the step has {nodes} nodes; tf-cluster lays out at most {MAX_NODES}");
    }
    Ok(())
}
