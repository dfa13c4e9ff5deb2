//! The SPANK entry points. Each one runs its body inside [`guard`], so no
//! panic crosses into Slurm, and each decides where a failure is allowed:
//! srun (`local_user_init`) and the task (`task_init`) may fail a step;
//! remote init must never fail, as that drains the node of a batch job.

use std::ffi::{c_char, c_int, c_uint};
use std::panic::{AssertUnwindSafe, catch_unwind};

use super::bindings as sys;
use super::handle::{self, Spank};
use super::{fault, logger, options};
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

/// Runs `body`; an error is logged once and becomes -1, a panic becomes -1
/// after the panic hook logged it.
fn guard(hook: &str, spank: Option<&Spank>, body: impl FnOnce() -> Result<()>) -> c_int {
    let run = || {
        fault::inject(hook, spank);
        body()
    };
    match catch_unwind(AssertUnwindSafe(run)) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            log::error!("{e}");
            -1
        }
        Err(_) => -1,
    }
}

/// Every context: register the options (srun/sbatch/salloc show them in
/// `--help`, slurmstepd needs them to read their values).
#[unsafe(no_mangle)]
pub extern "C" fn slurm_spank_init(sp: sys::spank_t, _ac: c_int, _av: *mut *mut c_char) -> c_int {
    logger::install();
    let spank = Spank::new(sp);
    let rc = guard("init", Some(&spank), || {
        spank.register(&options::CLUSTER)?;
        options::SETTINGS.iter().try_for_each(|o| spank.register(o))
    });
    // A failure in slurmstepd's init drains the node: report, never fail there.
    if spank.remote() { 0 } else { rc }
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
        match options::knob_of(val) {
            None => core::roles::RoleSpec::parse(value).map(drop),
            Some(knob) => Settings::default()
                .set(knob.key, value)
                .map_err(|e| Error::new(format!("--tf-{e}"))),
        }
    })
}

/// srun, after the step's layout exists and before anything is launched:
/// refuse a step whose spec cannot work, with one line, launching nothing.
#[unsafe(no_mangle)]
pub extern "C" fn slurm_spank_local_user_init(
    sp: sys::spank_t,
    ac: c_int,
    av: *mut *mut c_char,
) -> c_int {
    let spank = Spank::new(sp);
    guard("local_user_init", Some(&spank), || {
        let Some(settings) = step_settings(&spank, ac, av)? else {
            return Ok(());
        };
        // A heterogeneous step calls this once per component, whose task
        // count is the component's: the whole step's is srun's SLURM_NTASKS.
        let het =
            std::env::var_os("SLURM_HET_SIZE").or_else(|| std::env::var_os("SLURM_PACK_SIZE"));
        let tasks = match het {
            None => spank.total_task_count()?,
            Some(_) => match std::env::var("SLURM_NTASKS")
                .ok()
                .and_then(|n| n.parse().ok())
            {
                Some(n) => n,
                None => return Ok(()),
            },
        };
        // The allocation's nodes bound the step's host names (not so for a
        // het component's list, which leaves out the others).
        let nodelist = std::env::var("SLURM_NODELIST")
            .ok()
            .filter(|_| het.is_none());
        core::check_before_launch(&settings, tasks, nodelist.as_deref())?;
        Ok(())
    })
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
    let spank = Spank::new(sp);
    guard("task_init", Some(&spank), || {
        // The batch script, salloc's interactive step and the extern step
        // inherit the job's options but are not TensorFlow tasks.
        if spank.step_id()? > SLURM_MAX_NORMAL_STEP_ID {
            return Ok(());
        }
        let Some(settings) = step_settings(&spank, ac, av)? else {
            return Ok(());
        };
        let step = Step::gather(&settings, &mut Task(&spank))?;
        let injection = core::resolve(&settings, &step)?;
        for (name, value) in injection.vars() {
            spank.setenv(name, value)?;
        }
        Ok(())
    })
}

/// The task as slurmstepd shows it.
struct Task<'a>(&'a Spank);

impl Source for Task<'_> {
    fn var(&mut self, name: &str) -> Result<Option<String>> {
        self.0.getenv(name)
    }

    fn gpu_count(&mut self) -> Result<u32> {
        crate::probe::node_gpu_count()
    }

    fn read_file(&mut self, path: &str) -> Result<String> {
        crate::probe::read_user_file(path)
    }
}

/// The step's settings (site defaults from plugstack.conf, then the step's
/// options), or None when the step did not ask for the plugin.
fn step_settings(spank: &Spank, ac: c_int, av: *mut *mut c_char) -> Result<Option<Settings>> {
    let Some(spec) = spank.getopt(&options::CLUSTER)? else {
        return Ok(None);
    };
    let mut settings = Settings::from_admin_args(handle::args(ac, av)?)?;
    settings.roles = core::roles::RoleSpec::parse(&spec)?;
    for (option, knob) in options::SETTINGS.iter().zip(&core::settings::KNOBS) {
        if let Some(value) = spank.getopt(option)? {
            settings
                .set(knob.key, &value)
                .map_err(|e| Error::new(format!("--tf-{e}")))?;
        }
    }
    Ok(Some(settings))
}
