//! The SPANK entry points Slurm calls, imported by no file. Each hands the
//! call to the side of the process it runs in, decided once at
//! `slurm_spank_init`: srun's ([`super::srun`]) or slurmstepd's
//! ([`super::stepd`]: `user_init` once per node, `task_init_privileged` and
//! `task_init` per task, `task_exit` in slurmstepd after each task, `exit`
//! once the node's tasks ended). sbatch and salloc only register and check
//! the options. Each whole call runs in super::guard::whole, so no panic
//! reaches Slurm, and each body's parts in super::guard's `guard` or
//! `caught`, which turn an outcome into the hook's return code.

use std::ffi::{c_char, c_int, c_uint};
use std::sync::OnceLock;

use super::bindings as sys;
use super::guard::{Answer, guard, whole};
use super::handle;
use super::options;
use super::srun::Srun;
use super::stepd::Stepd;
use super::{fault, logger};
use crate::core::Error;

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

/// Every context: register the options (srun/sbatch/salloc show them in
/// `--help`, slurmstepd needs them to read their values), and learn which
/// side this process is.
#[unsafe(no_mangle)]
pub extern "C" fn slurm_spank_init(sp: sys::spank_t, ac: c_int, av: *mut *mut c_char) -> c_int {
    logger::install();
    // SAFETY: the handle Slurm passed to this callback.
    let answer = match unsafe { sys::spank_remote(sp) } {
        1 => Answer::Succeeds,
        _ => Answer::Fails,
    };
    whole("init", answer, (sp, ac, av), |spank| {
        let rc = guard("init", Some(spank), Answer::Fails, || {
            if fault::active("register", Some(spank)) {
                return Err(Error::new("spank_option_register: fault injected"));
            }
            options::all()
                .iter()
                .try_for_each(|o| spank.register(&o.raw))
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

/// srun, after slurmctld created the step and before anything is launched:
/// srun decides for the step (see super::srun).
#[unsafe(no_mangle)]
pub extern "C" fn slurm_spank_local_user_init(
    sp: sys::spank_t,
    ac: c_int,
    av: *mut *mut c_char,
) -> c_int {
    whole(
        "local_user_init",
        Answer::Fails,
        (sp, ac, av),
        |spank| match SIDE.get() {
            Some(Side::Srun(srun)) => srun.local_user_init(spank),
            _ => 0,
        },
    )
}

/// srun, sbatch, salloc and slurmstepd, after the options are parsed (srun:
/// once per component of a heterogeneous step, before slurmctld creates the
/// step): srun's early word (see super::srun). It always succeeds.
#[unsafe(no_mangle)]
pub extern "C" fn slurm_spank_init_post_opt(
    sp: sys::spank_t,
    ac: c_int,
    av: *mut *mut c_char,
) -> c_int {
    whole(
        "init_post_opt",
        Answer::Succeeds,
        (sp, ac, av),
        |spank| match SIDE.get() {
            Some(Side::Srun(srun)) if handle::in_srun() => srun.init_post_opt(spank),
            _ => 0,
        },
    )
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
    whole(
        "user_init",
        Answer::Succeeds,
        (sp, ac, av),
        |spank| match SIDE.get() {
            Some(Side::Stepd(stepd)) => stepd.user_init(spank),
            _ => 0,
        },
    )
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
    whole(
        "task_init_privileged",
        Answer::Succeeds,
        (sp, ac, av),
        |_| match SIDE.get() {
            Some(Side::Stepd(stepd)) => stepd.task_init_privileged(),
            _ => 0,
        },
    )
}

/// slurmstepd, in each task just before exec, as the user: the task takes
/// its own part of the node's share (see super::stepd).
#[unsafe(no_mangle)]
pub extern "C" fn slurm_spank_task_init(
    sp: sys::spank_t,
    ac: c_int,
    av: *mut *mut c_char,
) -> c_int {
    whole(
        "task_init",
        Answer::Fails,
        (sp, ac, av),
        |spank| match SIDE.get() {
            Some(Side::Stepd(stepd)) => stepd.task_init(spank),
            _ => 0,
        },
    )
}

/// slurmstepd, as root on the host, once every task of the node ended
/// (`scancel` included): removes the step's private directory (see
/// super::stepd). It always succeeds and returns at once for a step that
/// has none.
#[unsafe(no_mangle)]
pub extern "C" fn slurm_spank_exit(sp: sys::spank_t, ac: c_int, av: *mut *mut c_char) -> c_int {
    whole("exit", Answer::Succeeds, (sp, ac, av), |_| {
        match SIDE.get() {
            Some(Side::Stepd(stepd)) => stepd.exit(),
            _ => 0,
        }
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
    whole(
        "task_exit",
        Answer::Succeeds,
        (sp, ac, av),
        |spank| match SIDE.get() {
            Some(Side::Stepd(stepd)) => stepd.task_exit(spank),
            _ => 0,
        },
    )
}
