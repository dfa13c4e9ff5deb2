//! The texts that refuse a GPU request, one line each within the message
//! limit: the node's plan, srun's check before launch and slurmstepd (a
//! task bound behind a container) say them alike.

use super::bind::{GpuBind, describe};
use super::rules::Rules;

/// PyTorch under a per-task binding.
pub(super) fn torch_bound(option: &str, bind: &GpuBind) -> String {
    format!(
        "--{option}: Slurm binds GPUs to each task here ({}), so set_device(LOCAL_RANK) would name a GPU the task cannot see; use --gpus-per-node=N (or --gres=gpu:N) with --ntasks-per-node=N, or --tf-auto-set-gpu=false to keep Slurm's binding",
        describe(bind)
    )
}

/// A task Slurm binds to GPUs of its own, behind a container plugin: Slurm
/// writes the task's list (and SLURMD_TRES_BIND) only in the task, just
/// before the SPANK `task_init` hooks, and a plugin listed earlier (pyxis)
/// entered its namespaces and imported the image's environment first, so
/// the list the task shows may be the image's.
pub fn bound_behind_container(bind: &GpuBind) -> String {
    // One line within the message limit: a binding this plugin does not know
    // is not quoted.
    let binding = match bind {
        GpuBind::Other(_) => "--gpu-bind".to_string(),
        known => describe(known),
    };
    format!(
        "Slurm's GPU binding ({binding}) sets each task's GPU list only in the task, and a container plugin listed earlier (pyxis) entered its namespaces first, so the list may be the image's: use --gpus-per-node=N (or --gres=gpu:N) without --gpu-bind, or --tf-auto-set-gpu=false"
    )
}

/// JAX under a binding that lets tasks share GPUs.
pub(super) fn jax_shared(option: &str, bind: &GpuBind, tasks: u32) -> String {
    format!(
        "--{option}: Slurm's GPU binding ({}) lets the {tasks} tasks of a node share GPUs, and jax.distributed.initialize() would put two processes on one GPU; use --gpus-per-task=N, or --gpus-per-node=N without --gpu-bind",
        describe(bind)
    )
}

/// More tasks on a node than GPUs.
pub(super) fn oversubscribed(rules: Rules, tasks: u32, gpus: usize) -> String {
    let who = rules.who();
    format!(
        "{who}: {tasks} tasks on a node but {gpus} GPU(s) for them: every rank takes a GPU of its own; run at most {gpus} task(s) per node (--ntasks-per-node={gpus}), ask for more GPUs, or use --tf-auto-set-gpu=false"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The refusal behind a container: one line within the message limit
    /// whatever the binding, naming it and what to use instead.
    #[test]
    fn bound_behind_a_container_is_one_short_line() {
        let cases = [
            GpuBind::PerTask(1),
            GpuBind::None,
            GpuBind::parse_gpu_bind("map_gpu:0,1,2,3"),
            GpuBind::PerTask(u32::MAX),
            GpuBind::Other("x".repeat(10_000)),
        ];
        for bind in cases {
            let text = bound_behind_container(&bind);
            assert!(text.chars().count() <= crate::error::MAX_MESSAGE, "{text}");
            assert!(!text.contains('\n'), "{text}");
            assert!(text.contains("--tf-auto-set-gpu=false"), "{text}");
            if !matches!(bind, GpuBind::Other(_)) {
                assert!(text.contains(&describe(&bind)), "{text}");
            }
        }
        assert_eq!(
            bound_behind_container(&GpuBind::PerTask(1)),
            "Slurm's GPU binding (--gpus-per-task=1) sets each task's GPU list only in the task, and a container plugin listed earlier (pyxis) entered its namespaces first, so the list may be the image's: use --gpus-per-node=N (or --gres=gpu:N) without --gpu-bind, or --tf-auto-set-gpu=false"
        );
    }
}
