//! srun's check of the step's GPU request before launch: the refusals of
//! the node's plan that srun can already see.

use super::bind::GpuBind;
use super::refusals::{jax_shared, oversubscribed, torch_bound};
use super::rules::Rules;
use crate::error::{Result, bail};
use crate::settings::Settings;

/// What srun's own environment says of the step's GPU request when
/// `local_user_init` runs. Slurm 24.11 and 26.05 write srun's final options
/// there before the callback (srun.c `_setup_one_job_env`:
/// `set_env_from_opts` then `env_array_set_environment`): SLURM_TRES_BIND
/// (with the implicit `per_task:N` of --gpus-per-task and `single:K` of
/// --ntasks-per-gpu), SLURM_TRES_PER_TASK, SLURM_GPUS_PER_NODE. Slurm 22.05
/// does not: there only what the allocation or the user exported is seen
/// (SLURM_GPUS_PER_TASK, SLURM_GPU_BIND, SLURM_NTASKS_PER_GPU,
/// SLURM_GPUS_PER_NODE), which srun also takes as its options.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SrunRequest {
    /// The binding the step will have, if any is known.
    pub bind: Option<GpuBind>,
    /// GPUs per node, if known.
    pub gpus_per_node: Option<u32>,
}

impl SrunRequest {
    /// From srun's environment (`var` looks a variable up).
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> SrunRequest {
        let bind = if let Some(text) = var("SLURM_TRES_BIND") {
            GpuBind::parse(&text)
        } else if let Some(text) = var("SLURM_GPU_BIND") {
            Some(GpuBind::parse_gpu_bind(&text))
        } else if let Some(n) = var("SLURM_GPUS_PER_TASK").and_then(|v| last_count(&v)) {
            Some(GpuBind::PerTask(n))
        } else if let Some(n) = var("SLURM_TRES_PER_TASK").and_then(|v| gpus_in_tres(&v)) {
            Some(GpuBind::PerTask(n))
        } else {
            var("SLURM_NTASKS_PER_GPU")
                .and_then(|v| crate::number::parse_u32(&v))
                .map(GpuBind::Single)
        };
        SrunRequest {
            bind,
            gpus_per_node: var("SLURM_GPUS_PER_NODE").and_then(|v| last_count(&v)),
        }
    }

    /// The request with the step's own binding as slurmctld recorded it
    /// (`tres_bind`, e.g. `gpu:map_gpu:0,1`; None: the step binds none): the
    /// variables srun inherits may be another step's (srun 22.05 does not
    /// rewrite a SLURM_GPU_BIND of `sbatch --gpu-bind` for its own option).
    pub fn for_step(self, tres_bind: Option<&str>) -> SrunRequest {
        SrunRequest {
            bind: tres_bind.and_then(GpuBind::parse),
            ..self
        }
    }
}

/// `2` or `a100:2` → 2.
fn last_count(text: &str) -> Option<u32> {
    crate::number::parse_u32(text.rsplit(':').next()?)
}

/// The GPUs of a tres list (`cpu=2,gres/gpu:1` or `gres/gpu:a100=2`).
fn gpus_in_tres(text: &str) -> Option<u32> {
    text.split(',').find_map(|t| {
        let t = t
            .strip_prefix("gres/")
            .or_else(|| t.strip_prefix("gres:"))?;
        if !t.starts_with("gpu") {
            return None;
        }
        crate::number::parse_u32(t.rsplit([':', '=']).next()?)
    })
}

/// srun's check before launch, for a step of at most `local_tasks` tasks
/// per node: the refusals of [`GpuPlan::new`] that srun can already see.
/// The task's own check stays the catch-all.
pub fn check_before_launch(
    settings: &Settings,
    rules: Rules,
    request: &SrunRequest,
    local_tasks: u32,
) -> Result<()> {
    if !settings.auto_set_gpu || !rules.one_each() {
        return Ok(());
    }
    if let Some(bind) = request.bind.as_ref().filter(|b| b.per_task()) {
        if let Some(option) = rules.whole {
            bail!("{}", torch_bound(option, bind));
        }
        if let Some(option) = rules
            .own_ids
            .filter(|_| !bind.exclusive(local_tasks.max(1)))
        {
            bail!("{}", jax_shared(option, bind, local_tasks));
        }
        return Ok(());
    }
    let gpus = settings.gpus_per_node.or(request.gpus_per_node);
    match gpus {
        Some(n) if n > 0 && local_tasks > n => {
            bail!("{}", oversubscribed(rules, local_tasks, n as usize))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpus::rules::examples::{JAX, TF, TORCH};

    fn srun(vars: &[(&str, &str)]) -> SrunRequest {
        SrunRequest::from_env(|name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        })
    }

    fn check(f: Rules, vars: &[(&str, &str)], tasks: u32) -> std::result::Result<(), String> {
        check_before_launch(&Settings::default(), f, &srun(vars), tasks).map_err(|e| e.to_string())
    }

    /// `sbatch --gpu-bind=single:2`, then `srun --gpu-bind=map_gpu:0,1`:
    /// the step's own binding wins over the variable srun inherited.
    #[test]
    fn the_steps_own_binding_wins() {
        let stale = srun(&[("SLURM_GPU_BIND", "single:2"), ("SLURM_GPUS_PER_NODE", "4")]);
        assert_eq!(stale.bind, Some(GpuBind::Single(2)));
        let step = stale.clone().for_step(Some("gpu:map_gpu:0,1"));
        assert_eq!(step.bind, Some(GpuBind::Map(vec![0, 1])));
        assert_eq!(step.gpus_per_node, Some(4));
        assert!(check_before_launch(&Settings::default(), JAX, &stale, 2).is_err());
        check_before_launch(&Settings::default(), JAX, &step, 2).unwrap();
        assert_eq!(stale.for_step(None).bind, None);
    }

    #[test]
    fn srun_reads_the_request() {
        // 24.11+: srun's final options.
        assert_eq!(
            srun(&[("SLURM_TRES_BIND", "gres/gpu:per_task:1")]).bind,
            Some(GpuBind::PerTask(1))
        );
        assert_eq!(
            srun(&[
                ("SLURM_TRES_BIND", "gres/gpu:none"),
                ("SLURM_TRES_PER_TASK", "gres/gpu:1")
            ])
            .bind,
            Some(GpuBind::None)
        );
        assert_eq!(
            srun(&[("SLURM_TRES_PER_TASK", "cpu=2,gres/gpu:a100:2")]).bind,
            Some(GpuBind::PerTask(2))
        );
        // 22.05: what srun inherited.
        assert_eq!(
            srun(&[("SLURM_GPUS_PER_TASK", "1")]).bind,
            Some(GpuBind::PerTask(1))
        );
        assert_eq!(
            srun(&[("SLURM_GPU_BIND", "single:2")]).bind,
            Some(GpuBind::Single(2))
        );
        assert_eq!(
            srun(&[("SLURM_NTASKS_PER_GPU", "2")]).bind,
            Some(GpuBind::Single(2))
        );
        assert_eq!(
            srun(&[("SLURM_GPUS_PER_NODE", "a100:2")]).gpus_per_node,
            Some(2)
        );
        assert_eq!(srun(&[]), SrunRequest::default());
    }

    #[test]
    fn srun_refuses_what_no_task_could_run() {
        let per_task = [("SLURM_TRES_BIND", "gres/gpu:per_task:1")];
        let e = check(TORCH, &per_task, 2).unwrap_err();
        assert!(e.starts_with("--torch-cluster: Slurm binds GPUs"), "{e}");
        check(JAX, &per_task, 2).unwrap();
        check(TF, &per_task, 2).unwrap();
        let e = check(JAX, &[("SLURM_TRES_BIND", "gres/gpu:single:2")], 2).unwrap_err();
        assert!(e.starts_with("--jax-cluster: Slurm's GPU binding"), "{e}");
        let per_node = [("SLURM_GPUS_PER_NODE", "2")];
        for f in [TORCH, JAX] {
            let e = check(f, &per_node, 3).unwrap_err();
            assert!(e.contains("3 tasks on a node but 2 GPU(s)"), "{e}");
            check(f, &per_node, 2).unwrap();
        }
        check(TF, &per_node, 3).unwrap();
        check(TORCH, &[], 8).unwrap();
        let off = Settings {
            auto_set_gpu: false,
            ..Settings::default()
        };
        check_before_launch(&off, TORCH, &srun(&per_task), 2).unwrap();
    }
}
