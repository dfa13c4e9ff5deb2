//! The SPANK entry points. Each one runs its body inside [`guard`], so no
//! panic crosses into Slurm, and each decides where a failure is allowed:
//! srun (`local_user_init`) runs after slurmctld created the step: inside an
//! existing allocation a failure there would leave the step running (Slurm
//! has no public call to complete it), so srun hands its verdict to the
//! tasks and `task_init` fails them; remote init must never fail, as that
//! drains the node of a batch job.

use std::ffi::{c_char, c_int, c_uint};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use super::bindings as sys;
use super::handle::{self, Spank, callback};
use super::{fault, logger, options, srun};
use crate::core::settings::Frameworks;
use crate::core::task_map::{self, Verdict};
use crate::core::{self, Error, Result, Settings, Source, Step};

#[unsafe(no_mangle)]
pub static plugin_name: [u8; 11] = *b"tf_cluster\0";
#[unsafe(no_mangle)]
pub static plugin_type: [u8; 6] = *b"spank\0";
/// Slurm loads the plugin only when major.minor equal its own.
#[unsafe(no_mangle)]
pub static plugin_version: c_uint = sys::SLURM_VERSION_NUMBER;

/// slurm.h: step ids above this are special (batch script, extern, interactive).
const SLURM_MAX_NORMAL_STEP_ID: u32 = 0xffff_fff0;

/// The `--tf-cluster` value that turns off a spec inherited from the job.
pub const OFF: &str = "off";

/// slurmstepd could not register the options, so it cannot tell whether a
/// step asked for the plugin: task_init then fails the steps srun marked.
static REGISTRATION_FAILED: AtomicBool = AtomicBool::new(false);

/// srun: how often `--tf-cluster`'s callback ran. srun reads the value
/// sbatch/salloc handed down first, then its own command line: one call with
/// the inherited variable set means the spec was only inherited.
static CLUSTER_CALLS: AtomicU32 = AtomicU32::new(0);

/// srun started outside any allocation (and without --jobid): it allocates
/// for itself, and its exit ends the job.
static OWN_ALLOCATION: AtomicBool = AtomicBool::new(false);

/// Runs `body`; an error is logged once and becomes -1 (an empty message is
/// not logged: srun already said why), a panic becomes -1 after the panic
/// hook logged it.
fn guard(hook: &str, spank: Option<&Spank>, body: impl FnOnce() -> Result<()>) -> c_int {
    let run = || {
        fault::inject(hook, spank);
        body()
    };
    match catch_unwind(AssertUnwindSafe(run)) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            if !e.message().is_empty() {
                log::error!("{e}");
            }
            -1
        }
        Err(_) => -1,
    }
}

/// Every context: register the options (srun/sbatch/salloc show them in
/// `--help`, slurmstepd needs them to read their values).
#[unsafe(no_mangle)]
pub extern "C" fn slurm_spank_init(sp: sys::spank_t, ac: c_int, av: *mut *mut c_char) -> c_int {
    logger::install();
    callback(sp, ac, av, |spank| {
        let rc = guard("init", Some(spank), || {
            if fault::active("register", Some(spank)) {
                return Err(Error::new("spank_option_register: fault injected"));
            }
            options::all().iter().try_for_each(|o| spank.register(o))
        });
        // A failure in slurmstepd's init drains the node: remember it, fail
        // the tasks that asked for the plugin instead.
        if spank.remote() {
            if rc != 0 {
                REGISTRATION_FAILED.store(true, Ordering::Relaxed);
            }
            0
        } else {
            OWN_ALLOCATION.store(outside_any_allocation(), Ordering::Relaxed);
            rc
        }
    })
}

/// An option's value, checked as soon as srun/sbatch/salloc parse it, so a
/// typo is refused before anything is submitted. In slurmstepd it always
/// succeeds: the task decides there.
pub extern "C" fn option_given(val: c_int, optarg: *const c_char, remote: c_int) -> c_int {
    if remote != 0 {
        return 0;
    }
    guard("option", None, || {
        // SAFETY: Slurm passes NULL or a NUL-terminated option value.
        let value = unsafe { handle::option_value(optarg) }?;
        match options::given(val) {
            Some(options::Given::Cluster) => {
                CLUSTER_CALLS.fetch_add(1, Ordering::Relaxed);
                if value != OFF {
                    core::roles::RoleSpec::parse(&value)?;
                }
                Ok(())
            }
            Some(options::Given::Framework) | None => Ok(()),
            Some(options::Given::Setting(setting)) => Settings::default()
                .set(setting.key, &value)
                .map_err(|e| Error::new(format!("--tf-{e}"))),
        }
    })
}

/// srun, after slurmctld created the step and before anything is launched:
/// check the spec against the step, fetch the step's task map, and hand the
/// tasks the map or a verdict. It fails only when srun made its own
/// allocation (see the module comment and srun::Context).
#[unsafe(no_mangle)]
pub extern "C" fn slurm_spank_local_user_init(
    sp: sys::spank_t,
    ac: c_int,
    av: *mut *mut c_char,
) -> c_int {
    callback(sp, ac, av, |spank| {
        let context = srun::Context {
            inherited: std::env::var_os(options::INHERITED_VAR).is_some()
                && CLUSTER_CALLS.load(Ordering::Relaxed) <= 1,
            own_allocation: OWN_ALLOCATION.load(Ordering::Relaxed),
        };
        let rc = guard("local_user_init", Some(spank), || {
            let settings = match step_settings(spank) {
                Ok(Some(settings)) => Ok(settings),
                Ok(None) => return Ok(()),
                Err(e) => Err(e),
            };
            srun::decide(spank, settings, context)
        });
        if context.own_allocation { rc } else { 0 }
    })
}

/// srun's environment names no job and its command line no --jobid. A
/// `--jobid` among the program's own arguments only makes this false, the
/// safe side.
fn outside_any_allocation() -> bool {
    let in_job = ["SLURM_JOB_ID", "SLURM_JOBID"]
        .iter()
        .any(|v| std::env::var_os(v).is_some());
    let jobid_arg = std::env::args_os().any(|a| a.as_encoded_bytes().starts_with(b"--jobid"));
    !in_job && !jobid_arg
}

/// slurmstepd, in each task just before exec, as the user: compute and set
/// the task's variables. A failure here ends this task with exit code 1 and
/// leaves the node in service.
#[unsafe(no_mangle)]
pub extern "C" fn slurm_spank_task_init(
    sp: sys::spank_t,
    ac: c_int,
    av: *mut *mut c_char,
) -> c_int {
    callback(sp, ac, av, |spank| {
        guard("task_init", Some(spank), || {
            if REGISTRATION_FAILED.load(Ordering::Relaxed) {
                return fail_closed(spank);
            }
            let Some(settings) = step_settings(spank)? else {
                return Ok(());
            };
            // The batch script, salloc's interactive step and the extern step
            // inherit the job's options but are not TensorFlow tasks.
            if spank.step_id()? > SLURM_MAX_NORMAL_STEP_ID {
                return Ok(());
            }
            let step = Step::gather(&settings, &mut Task(spank))?;
            match step.verdict {
                Some(Verdict::Skip) => return Ok(()),
                // srun printed why, once for the step.
                Some(Verdict::Refused) => return Err(Error::new("")),
                _ => {}
            }
            let injection = core::resolve(&settings, &step)?;
            for (name, value) in injection.vars() {
                spank.setenv(name, value)?;
            }
            log::debug!("{}", core::explain(&step, &injection));
            Ok(())
        })
    })
}

/// Without the options, whether a step asked for the plugin is unknown: the
/// steps srun marked did, and fail rather than run without TF_CONFIG.
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
        crate::core::node::node_gpu_count()
    }

    fn read_file(&mut self, path: &str) -> Result<String> {
        crate::core::node::read_user_file(path)
    }

    /// From Slurm itself, not from variables the user could set.
    fn job_step(&mut self) -> Result<Option<(u32, u32)>> {
        Ok(Some((self.0.job_id()?, self.0.step_id()?)))
    }

    fn blocks_follow_topology(&self) -> bool {
        cfg!(slurm_blocks_follow_topology)
    }
}

/// The step's settings (site defaults from plugstack.conf, then the step's
/// options), or None when the step did not ask for the plugin or said
/// `--tf-cluster=off`.
fn step_settings(spank: &Spank) -> Result<Option<Settings>> {
    let mut frameworks = Frameworks {
        tf: false,
        torch: false,
        jax: false,
    };
    let mut spec = None;
    for (framework, option) in options::frameworks() {
        match spank.getopt(option)? {
            // `--tf-cluster=off`: this step wants no TF_CONFIG.
            Some(value) if value == OFF => {}
            Some(value) => {
                (framework.set)(&mut frameworks);
                if framework.arg.is_some() {
                    spec = Some(value);
                }
            }
            None => {}
        }
    }
    if !(frameworks.tf || frameworks.torch || frameworks.jax) {
        return Ok(None);
    }
    let mut settings = Settings::from_admin_args(spank.args()?)?;
    settings.roles = core::roles::RoleSpec::parse(spec.as_deref().unwrap_or(""))?;
    settings.frameworks = frameworks;
    for (setting, option) in options::settings() {
        if let Some(value) = spank.getopt(option)? {
            settings
                .set(setting.key, &value)
                .map_err(|e| Error::new(format!("--tf-{e}")))?;
        }
    }
    Ok(Some(settings))
}
