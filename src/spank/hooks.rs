//! The SPANK entry points Slurm calls, and their guard. Each runs its body
//! inside [`guard`] (or, for `user_init`, its own catch), so no panic
//! crosses into Slurm, and hands it to the side of the process it runs in,
//! decided once at `slurm_spank_init`: srun's ([`super::srun`]) or
//! slurmstepd's ([`super::stepd`]: `user_init` once per node,
//! `task_init_privileged` and `task_init` per task, `task_exit` in
//! slurmstepd after each task). sbatch and salloc only
//! register and check the options.

use std::ffi::{c_char, c_int, c_uint};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::OnceLock;

use super::bindings as sys;
use super::handle::{self, Spank, callback};
use super::options::{self, Meaning};
use super::srun::Srun;
use super::stepd::Stepd;
use super::{fault, logger};
use crate::core::{Error, Kind, Result, Settings};

#[unsafe(no_mangle)]
pub static plugin_name: [u8; 11] = *b"tf_cluster\0";
#[unsafe(no_mangle)]
pub static plugin_type: [u8; 6] = *b"spank\0";
/// Slurm loads the plugin only when major.minor equal its own.
#[unsafe(no_mangle)]
pub static plugin_version: c_uint = sys::SLURM_VERSION_NUMBER;

/// The side of the process the plugin was loaded into, with its state.
enum Side {
    /// srun, sbatch or salloc.
    Srun(Srun),
    Stepd(Stepd),
}

static SIDE: OnceLock<Side> = OnceLock::new();

/// Runs `body`; an error is logged once and becomes -1 (one already reported is
/// not logged: srun already said why), a panic becomes -1 after the panic
/// hook logged it.
pub fn guard(hook: &str, spank: Option<&Spank>, body: impl FnOnce() -> Result<()>) -> c_int {
    let run = || {
        fault::inject(hook, spank);
        body()
    };
    match catch_unwind(AssertUnwindSafe(run)) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            if e.kind() != Kind::Reported {
                log::error!("{e}");
            }
            -1
        }
        Err(_) => -1,
    }
}

/// Every context: register the options (srun/sbatch/salloc show them in
/// `--help`, slurmstepd needs them to read their values), and learn which
/// side this process is.
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
        if spank.remote() {
            // A failure in slurmstepd's init drains the node: remember it,
            // fail the tasks that asked for the plugin instead.
            SIDE.get_or_init(|| Side::Stepd(Stepd::new(rc != 0)));
            0
        } else {
            SIDE.get_or_init(|| Side::Srun(Srun::new()));
            rc
        }
    })
}

/// An option's value, checked as soon as srun/sbatch/salloc parse it, so a
/// typo is refused before anything is submitted. In slurmstepd it always
/// succeeds: the task decides there.
pub extern "C" fn option_given(val: c_int, optarg: *const c_char, remote: c_int) -> c_int {
    let Some(Side::Srun(srun)) = SIDE.get().filter(|_| remote == 0) else {
        return 0;
    };
    guard("option", None, || {
        // SAFETY: Slurm passes NULL or a NUL-terminated option value.
        let value = unsafe { handle::option_value(optarg) }?;
        match options::given(val).map(|o| o.meaning) {
            Some(Meaning::Framework(f)) => {
                srun.option_given(f);
                crate::core::frameworks::check_value(f, &value)
            }
            Some(Meaning::Setting(setting)) => Settings::default()
                .set(setting.key, &value)
                .map_err(|e| Error::new(format!("--tf-{e}"))),
            Some(Meaning::AllOff) => {
                srun.off_given();
                Ok(())
            }
            None => Ok(()),
        }
    })
}

/// srun, after slurmctld created the step and before anything is launched:
/// srun decides for the step (see super::srun).
#[unsafe(no_mangle)]
pub extern "C" fn slurm_spank_local_user_init(
    sp: sys::spank_t,
    ac: c_int,
    av: *mut *mut c_char,
) -> c_int {
    callback(sp, ac, av, |spank| match SIDE.get() {
        Some(Side::Srun(srun)) => srun.local_user_init(spank),
        _ => 0,
    })
}

/// slurmstepd, once per node before the tasks are forked, as the user: the
/// node's share of the step, from the host's facts (see super::stepd). It
/// always succeeds: a failure here would drain the node.
#[unsafe(no_mangle)]
pub extern "C" fn slurm_spank_user_init(
    sp: sys::spank_t,
    ac: c_int,
    av: *mut *mut c_char,
) -> c_int {
    callback(sp, ac, av, |spank| match SIDE.get() {
        Some(Side::Stepd(stepd)) => stepd.user_init(spank),
        _ => 0,
    })
}

/// slurmstepd, in each task before any plugin's `task_init`, as root: the
/// task notes the mount namespace Slurm put it in (see super::stepd). It
/// always succeeds.
#[unsafe(no_mangle)]
pub extern "C" fn slurm_spank_task_init_privileged(
    sp: sys::spank_t,
    ac: c_int,
    av: *mut *mut c_char,
) -> c_int {
    callback(sp, ac, av, |_| match SIDE.get() {
        Some(Side::Stepd(stepd)) => stepd.task_init_privileged(),
        _ => 0,
    })
}

/// slurmstepd, in each task just before exec, as the user: the task takes
/// its own part of the node's share (see super::stepd).
#[unsafe(no_mangle)]
pub extern "C" fn slurm_spank_task_init(
    sp: sys::spank_t,
    ac: c_int,
    av: *mut *mut c_char,
) -> c_int {
    callback(sp, ac, av, |spank| match SIDE.get() {
        Some(Side::Stepd(stepd)) => stepd.task_init(spank),
        _ => 0,
    })
}

/// slurmstepd itself, as root on the host, after each task of the node
/// exited: ends the step on every node when a task refused from inside a
/// container (see super::stepd). It always succeeds and returns at once for
/// a step that did not ask for the plugin.
#[unsafe(no_mangle)]
pub extern "C" fn slurm_spank_task_exit(
    sp: sys::spank_t,
    ac: c_int,
    av: *mut *mut c_char,
) -> c_int {
    callback(sp, ac, av, |spank| match SIDE.get() {
        Some(Side::Stepd(stepd)) => stepd.task_exit(spank),
        _ => 0,
    })
}
