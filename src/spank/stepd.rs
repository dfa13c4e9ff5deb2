//! slurmstepd's side: in each task, just before exec and as the user, apply
//! srun's decision: compute and set the task's variables. A failure here ends
//! this task with exit code 1 and leaves the node in service, so every
//! refusal slurmstepd makes is made here (fail closed), never in its init.

use super::handle::Spank;
use super::hooks::guard;
use super::options;
use crate::core::os::{node_gpu_count, read_user_file};
use crate::core::{self, Error, Gathered, Result, Source, Step, task_map};

/// slurm.h: step ids above this are special (batch script, extern, interactive).
const SLURM_MAX_NORMAL_STEP_ID: u32 = 0xffff_fff0;

/// slurmstepd's state.
pub struct Stepd {
    /// slurmstepd could not register the options, so it cannot tell whether
    /// a step asked for the plugin: the steps srun marked fail.
    registration_failed: bool,
}

impl Stepd {
    pub fn new(registration_failed: bool) -> Stepd {
        Stepd {
            registration_failed,
        }
    }

    pub fn task_init(&self, spank: &Spank) -> i32 {
        guard("task_init", Some(spank), || {
            if self.registration_failed {
                return fail_closed(spank);
            }
            let Some(settings) = options::step_settings(spank)? else {
                return Ok(());
            };
            // The batch script, salloc's interactive step and the extern step
            // inherit the job's options but are not the step's tasks.
            if spank.step_id()? > SLURM_MAX_NORMAL_STEP_ID {
                return Ok(());
            }
            let step = match Step::gather(&settings, &mut Task(spank))? {
                Gathered::Step(step) => *step,
                Gathered::Skip => return Ok(()),
                // srun printed why, once for the step.
                Gathered::Refused => return Err(Error::new("")),
            };
            let injection = core::resolve(&settings, &step)?;
            log::debug!("{}", core::explain(&step, &injection));
            // By value: in a freshly forked task every new page faults, and a
            // TF_CONFIG of thousands of tasks is tens of pages.
            for (name, value) in injection.into_vars() {
                spank.setenv(&name, value)?;
            }
            Ok(())
        })
    }
}

/// Without the options, whether a step asked for the plugin is unknown: the
/// steps srun marked did, and fail rather than run without their variables.
fn fail_closed(spank: &Spank) -> Result<()> {
    match spank.getenv(task_map::VAR)? {
        None => Ok(()),
        Some(_) => Err(Error::new(
            "slurmstepd could not register the plugin's options (see slurmd's log), so this step's --tf-cluster cannot be read: failing rather than running without TF_CONFIG",
        )),
    }
}

/// The task as slurmstepd shows it.
struct Task<'s, 'a>(&'s Spank<'a>);

impl Source for Task<'_, '_> {
    fn var(&mut self, name: &str) -> Result<Option<String>> {
        self.0.getenv(name)
    }

    fn gpu_count(&mut self) -> Result<u32> {
        node_gpu_count()
    }

    fn read_file(&mut self, path: &str) -> Result<String> {
        read_user_file(path)
    }

    /// From Slurm itself, not from variables the user could set.
    fn job_step(&mut self) -> Result<Option<(u32, u32)>> {
        Ok(Some((self.0.job_id()?, self.0.step_id()?)))
    }

    fn blocks_follow_topology(&self) -> bool {
        cfg!(slurm_blocks_follow_topology)
    }
}
