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

/// Linux's limit on what one exec takes, arguments and environment together
/// (ARG_MAX, `getconf ARG_MAX`): a quarter of the stack's limit, 2 MiB at
/// the default 8 MiB stack, each string counted with its NUL and its
/// pointer ([`exec_size`]).
pub const ARG_MAX: usize = 2 << 20;

/// What the plugin's variables may take of [`ARG_MAX`] in one task: 512 KiB
/// is left to the environment srun and Slurm pass and the command's
/// arguments (a few KiB on most sites).
pub const ENV_TOTAL_LIMIT: usize = ARG_MAX - (512 << 10);

/// What exec counts of one string of `bytes` bytes (a variable's `NAME=value`):
/// its bytes, its NUL and its pointer.
pub const fn exec_size(bytes: usize) -> usize {
    bytes + 1 + size_of::<usize>()
}

/// Refuses variables that take `total` bytes of exec's limit in a task
/// (`what`: which, and whether `total` is their least).
pub fn check_env_total(what: &str, total: usize) -> Result<()> {
    if total > ENV_TOTAL_LIMIT {
        bail!(
            "{what} {total} bytes in each task, over tf-cluster's {ENV_TOTAL_LIMIT} of Linux's {ARG_MAX}-byte exec limit (ARG_MAX): use fewer roles or fewer tasks"
        );
    }
    Ok(())
}

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

#[cfg(test)]
mod tests {
    use super::*;

    /// Variables of exactly the plugin's share pass; a byte more is refused.
    #[test]
    fn the_total_is_refused_past_the_plugins_share_of_arg_max() {
        assert_eq!(ENV_TOTAL_LIMIT, 1_572_864);
        // `A=`, 1 byte, its NUL and pointer: 12 bytes on 64-bit Linux.
        assert_eq!(exec_size("A=x".len()), 12);
        check_env_total("these would take", ENV_TOTAL_LIMIT).unwrap();
        let e = check_env_total("these would take", ENV_TOTAL_LIMIT + 1).unwrap_err();
        assert_eq!(
            e.to_string(),
            "these would take 1572865 bytes in each task, over tf-cluster's 1572864 of Linux's 2097152-byte exec limit (ARG_MAX): use fewer roles or fewer tasks"
        );
    }
}
