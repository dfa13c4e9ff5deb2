//! A small safe wrapper over the SPANK handle Slurm passes to every callback.
//! A [`Spank`] exists only inside [`callback`]: the handle and the plugstack
//! arguments it lends out cannot outlive the call Slurm made.

use std::ffi::{CStr, CString, c_char, c_int};
use std::marker::PhantomData;
use std::ptr;

use super::bindings as sys;
use crate::core::{Error, Result};

/// Longest variable value read (a real one is far smaller; TF_CONFIG itself
/// must stay under 128 KiB): a hostile one fails instead of growing without end.
const MAX_VALUE: usize = 1 << 20;

/// Longest option value accepted: a role spec of any sensible size is far
/// shorter, and every message quoting one stays one line.
const MAX_OPTION: usize = 4096;

/// A registered option as Slurm sees it: Slurm keeps its pointer, so it
/// lives for the whole process.
pub struct RawOption(pub sys::spank_option);

// SAFETY: the option's strings are leaked, immutable C strings; neither Slurm
// nor this plugin ever writes to the struct.
unsafe impl Sync for RawOption {}
unsafe impl Send for RawOption {}

impl RawOption {
    fn as_ptr(&'static self) -> *mut sys::spank_option {
        (&self.0 as *const sys::spank_option).cast_mut()
    }
}

pub struct Spank<'a> {
    sp: sys::spank_t,
    ac: c_int,
    av: *mut *mut c_char,
    _callback: PhantomData<&'a ()>,
}

/// Runs `body` with the handle of the callback Slurm is making; the handle
/// cannot escape `body` (its lifetime is chosen here, not by the caller).
pub fn callback<R>(
    sp: sys::spank_t,
    ac: c_int,
    av: *mut *mut c_char,
    body: impl for<'a> FnOnce(&Spank<'a>) -> R,
) -> R {
    body(&Spank {
        sp,
        ac,
        av,
        _callback: PhantomData,
    })
}

/// Whether this process is srun (not sbatch or salloc, not slurmstepd).
pub fn in_srun() -> bool {
    // SAFETY: no arguments; Slurm answers from its own state.
    unsafe { sys::spank_context() == sys::spank_context_S_CTX_LOCAL }
}

impl<'a> Spank<'a> {
    /// True in slurmstepd, false in srun/sbatch/salloc.
    pub fn remote(&self) -> bool {
        // SAFETY: `self.sp` is the handle Slurm passed to the running callback.
        unsafe { sys::spank_remote(self.sp) == 1 }
    }

    /// Registers an option; Slurm keeps the pointer, hence `'static`.
    pub fn register(&self, option: &'static RawOption) -> Result<()> {
        // SAFETY: the option lives for the whole process and Slurm only reads it.
        let rc = unsafe { sys::spank_option_register(self.sp, option.as_ptr()) };
        check(rc, "spank_option_register")
    }

    /// The value of `option` when the step was given it: `Some("")` for a bare
    /// option, None when absent.
    pub fn getopt(&self, option: &'static RawOption) -> Result<Option<String>> {
        let mut arg: *mut c_char = ptr::null_mut();
        // SAFETY: valid handle and option; Slurm sets `arg` to a string it owns or NULL.
        let rc = unsafe { sys::spank_option_getopt(self.sp, option.as_ptr(), &mut arg) };
        match rc {
            // SAFETY: `arg` is NULL or a NUL-terminated string owned by Slurm.
            sys::ESPANK_SUCCESS => unsafe { option_value(arg) }.map(Some),
            sys::slurm_err_t_ESPANK_ERROR => Ok(None),
            rc => Err(spank_error(rc, "spank_option_getopt")),
        }
    }

    /// A variable of the task's environment (slurmstepd only).
    pub fn getenv(&self, name: &str) -> Result<Option<String>> {
        let cname = CString::new(name).map_err(|_| Error::new("variable name with NUL"))?;
        let mut buf = vec![0u8; 512];
        loop {
            // SAFETY: `buf` is writable for `buf.len()` bytes; Slurm NUL-terminates within it.
            let rc = unsafe {
                sys::spank_getenv(
                    self.sp,
                    cname.as_ptr(),
                    buf.as_mut_ptr().cast(),
                    buf.len() as c_int,
                )
            };
            match rc {
                sys::ESPANK_SUCCESS => {
                    let value = CStr::from_bytes_until_nul(&buf)
                        .map_err(|_| Error::new(format!("{name}: value without NUL")))?;
                    return utf8(value, name).map(Some);
                }
                sys::slurm_err_t_ESPANK_ENV_NOEXIST => return Ok(None),
                sys::slurm_err_t_ESPANK_NOSPACE if buf.len() < MAX_VALUE => {
                    buf.resize(buf.len() * 4, 0)
                }
                sys::slurm_err_t_ESPANK_NOSPACE => {
                    return Err(Error::new(format!(
                        "{name} is longer than {MAX_VALUE} bytes"
                    )));
                }
                rc => return Err(spank_error(rc, &format!("spank_getenv({name})"))),
            }
        }
    }

    /// Sets a variable from C strings made ahead (slurmstepd only): nothing
    /// is copied but by Slurm.
    pub fn setenv_c(&self, name: &CStr, value: &CStr) -> Result<()> {
        // SAFETY: valid handle and NUL-terminated strings; Slurm copies them.
        let rc = unsafe { sys::spank_setenv(self.sp, name.as_ptr(), value.as_ptr(), 1) };
        check(rc, "spank_setenv")
    }

    /// The step's total task count (in a heterogeneous step, the
    /// component's).
    pub fn total_task_count(&self) -> Result<u32> {
        self.item_u32(
            sys::spank_item_S_JOB_TOTAL_TASK_COUNT,
            "S_JOB_TOTAL_TASK_COUNT",
        )
    }

    /// The step's task count on this node (slurmstepd only).
    pub fn local_task_count(&self) -> Result<u32> {
        self.item_u32(
            sys::spank_item_S_JOB_LOCAL_TASK_COUNT,
            "S_JOB_LOCAL_TASK_COUNT",
        )
    }

    /// The job id (srun: in a heterogeneous step, the component's srun
    /// runs `local_user_init` for, the first to launch).
    pub fn job_id(&self) -> Result<u32> {
        self.item_u32(sys::spank_item_S_JOB_ID, "S_JOB_ID")
    }

    /// This node's index among the step's nodes (slurmstepd only): Slurm's
    /// own, which no environment variable can change.
    pub fn node_id(&self) -> Result<u32> {
        self.item_u32(sys::spank_item_S_JOB_NODEID, "S_JOB_NODEID")
    }

    /// The step id, special ids included.
    pub fn step_id(&self) -> Result<u32> {
        self.item_u32(sys::spank_item_S_JOB_STEPID, "S_JOB_STEPID")
    }

    /// The step's command (srun: the command srun launches), lossily as
    /// UTF-8.
    pub fn job_argv(&self) -> Result<Vec<String>> {
        let mut argc: c_int = 0;
        let mut argv: *mut *mut c_char = ptr::null_mut();
        // SAFETY: S_JOB_ARGV takes an `int *` and a `char ***`; Slurm keeps
        // the array, read here without copying it first.
        let rc = unsafe {
            sys::spank_get_item(self.sp, sys::spank_item_S_JOB_ARGV, &mut argc, &mut argv)
        };
        check(rc, "spank_get_item(S_JOB_ARGV)")?;
        if argv.is_null() {
            return Ok(Vec::new());
        }
        let argc = usize::try_from(argc).unwrap_or(0);
        Ok((0..argc)
            // SAFETY: argv holds argc pointers to NUL-terminated strings
            // (or NULL).
            .map(|i| unsafe { *argv.add(i) })
            .take_while(|p| !p.is_null())
            // SAFETY: each non-NULL entry is a NUL-terminated string.
            .map(|p| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
            .collect())
    }

    /// The task's global rank in the step (task_init only): slurmstepd's
    /// own, which no environment variable can change.
    pub fn task_global_id(&self) -> Result<u32> {
        self.item_u32(sys::spank_item_S_TASK_GLOBAL_ID, "S_TASK_GLOBAL_ID")
    }

    /// The task's local id on this node (task_init only).
    pub fn task_id(&self) -> Result<u32> {
        let mut value: c_int = -1;
        // SAFETY: S_TASK_ID takes one `int *` argument.
        let rc = unsafe { sys::spank_get_item(self.sp, sys::spank_item_S_TASK_ID, &mut value) };
        check(rc, "spank_get_item(S_TASK_ID)")?;
        u32::try_from(value).map_err(|_| Error::new("S_TASK_ID is negative"))
    }

    /// How the task ended, as wait(2) gives it (task_exit only).
    pub fn task_exit_status(&self) -> Result<i32> {
        let mut value: c_int = 0;
        // SAFETY: S_TASK_EXIT_STATUS takes one `int *` argument.
        let rc =
            unsafe { sys::spank_get_item(self.sp, sys::spank_item_S_TASK_EXIT_STATUS, &mut value) };
        check(rc, "spank_get_item(S_TASK_EXIT_STATUS)")?;
        Ok(value)
    }

    /// The job's group id.
    pub fn job_gid(&self) -> Result<u32> {
        let mut value: libc::gid_t = 0;
        // SAFETY: S_JOB_GID takes one `gid_t *` argument.
        let rc = unsafe { sys::spank_get_item(self.sp, sys::spank_item_S_JOB_GID, &mut value) };
        check(rc, "spank_get_item(S_JOB_GID)")?;
        Ok(value)
    }

    /// The job's user id.
    pub fn job_uid(&self) -> Result<u32> {
        let mut value: libc::uid_t = 0;
        // SAFETY: S_JOB_UID takes one `uid_t *` argument.
        let rc = unsafe { sys::spank_get_item(self.sp, sys::spank_item_S_JOB_UID, &mut value) };
        check(rc, "spank_get_item(S_JOB_UID)")?;
        Ok(value)
    }

    /// The step's environment as slurmstepd holds it (in task_init: the
    /// task's), read in place: nothing copied. A [`Spank::setenv`] may move
    /// it, so the caller reads what it needs before setting anything.
    pub fn env(&self) -> Result<Env<'a>> {
        let mut envp: *mut *mut c_char = ptr::null_mut();
        // SAFETY: S_JOB_ENV takes one `char ***` argument.
        let rc = unsafe { sys::spank_get_item(self.sp, sys::spank_item_S_JOB_ENV, &mut envp) };
        check(rc, "spank_get_item(S_JOB_ENV)")?;
        Ok(Env {
            envp,
            _callback: PhantomData,
        })
    }

    /// An item whose argument is a `uint32_t *` (spank.h says which).
    fn item_u32(&self, item: sys::spank_item_t, name: &str) -> Result<u32> {
        let mut value: u32 = 0;
        // SAFETY: `item` takes one `uint32_t *` argument.
        let rc = unsafe { sys::spank_get_item(self.sp, item, &mut value as *mut u32) };
        check(rc, &format!("spank_get_item({name})"))?;
        Ok(value)
    }

    /// The plugin's arguments from plugstack.conf, alive for the callback.
    pub fn args(&self) -> Result<Vec<&'a str>> {
        if self.av.is_null() || self.ac <= 0 {
            return Ok(Vec::new());
        }
        // SAFETY: Slurm passes `ac` valid NUL-terminated strings in `av`, alive
        // for the callback, which 'a cannot outlive (see `callback`).
        let raw = unsafe { std::slice::from_raw_parts(self.av, self.ac as usize) };
        raw.iter()
            .map(|&p| {
                // SAFETY: see above.
                unsafe { CStr::from_ptr(p) }
                    .to_str()
                    .map_err(|_| Error::new("plugstack.conf argument is not valid UTF-8"))
            })
            .collect()
    }
}

/// The step's environment, read in place ([`Spank::env`]).
pub struct Env<'a> {
    envp: *mut *mut c_char,
    _callback: PhantomData<&'a ()>,
}

impl Env<'_> {
    /// Every `NAME=value` entry, as bytes.
    pub fn entries(&self) -> impl Iterator<Item = &[u8]> {
        let mut p = self.envp;
        std::iter::from_fn(move || {
            if p.is_null() {
                return None;
            }
            // SAFETY: Slurm's env array is NULL-terminated and each entry a
            // NUL-terminated string, alive while the callback runs and
            // nothing sets a variable.
            let entry = unsafe { *p };
            if entry.is_null() {
                return None;
            }
            p = unsafe { p.add(1) };
            Some(unsafe { CStr::from_ptr(entry) }.to_bytes())
        })
    }

    /// The value of `name`, the first entry's as getenv(3) finds it.
    pub fn get(&self, name: &str) -> Result<Option<&str>> {
        for entry in self.entries() {
            if let Some(value) = entry
                .strip_prefix(name.as_bytes())
                .and_then(|rest| rest.strip_prefix(b"="))
            {
                return std::str::from_utf8(value)
                    .map(Some)
                    .map_err(|_| Error::new(format!("{name} is not valid UTF-8")));
            }
        }
        Ok(None)
    }
}

/// An option's argument as Slurm hands it over, copied. A bare option given
/// to sbatch/salloc reaches the job's steps as the text "(null)" (Slurm
/// prints the NULL argument into SLURM_SPANK_OPTION_…): that means no
/// argument.
///
/// # Safety
/// `arg` is NULL or points to a NUL-terminated string alive for the call.
pub unsafe fn option_value(arg: *const c_char) -> Result<String> {
    if arg.is_null() {
        return Ok(String::new());
    }
    // SAFETY: see the function's contract.
    let value = unsafe { CStr::from_ptr(arg) };
    if value.count_bytes() > MAX_OPTION {
        return Err(Error::new(format!(
            "an option value of {} bytes is longer than the {MAX_OPTION} accepted",
            value.count_bytes()
        )));
    }
    let value = value
        .to_str()
        .map_err(|_| Error::new("option value is not valid UTF-8"))?;
    Ok(if value == "(null)" { "" } else { value }.to_string())
}

fn utf8(value: &CStr, what: &str) -> Result<String> {
    value
        .to_str()
        .map(str::to_owned)
        .map_err(|_| Error::new(format!("{what} is not valid UTF-8")))
}

fn check(rc: sys::spank_err_t, what: &str) -> Result<()> {
    if rc == sys::ESPANK_SUCCESS {
        Ok(())
    } else {
        Err(spank_error(rc, what))
    }
}

/// `what: <Slurm's text for rc>`.
fn spank_error(rc: sys::spank_err_t, what: &str) -> Error {
    // SAFETY: spank_strerror returns a static string (or NULL) for any code.
    let text = unsafe { sys::spank_strerror(rc) };
    let text = if text.is_null() {
        format!("SPANK error {rc}")
    } else {
        // SAFETY: a NUL-terminated static string.
        unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned()
    };
    Error::new(format!("{what}: {text}"))
}

/// One line on the user's terminal, as `tf-cluster: <text>` without an
/// `error:` label: from slurmstepd `slurm_info` reaches only slurmd's log,
/// `slurm_spank_log` also the step's stderr (as pyxis's notices do).
pub fn notice(text: &str) {
    let line = format!("tf-cluster: {text}").replace(['\0', '\n'], " ");
    let Ok(message) = CString::new(line) else {
        return;
    };
    // SAFETY: a "%s" format with one NUL-terminated string argument.
    unsafe { sys::slurm_spank_log(c"%s".as_ptr(), message.as_ptr()) };
}
