//! A small safe wrapper over the SPANK handle Slurm passes to every callback.

use std::ffi::{CStr, CString, c_char, c_int};
use std::ptr;

use super::bindings as sys;
use crate::core::{Error, Result};

/// Longest variable value read (a real one is far smaller; TF_CONFIG itself
/// must stay under 128 KiB): a hostile one fails instead of growing without end.
const MAX_VALUE: usize = 1 << 20;

pub struct Spank(sys::spank_t);

impl Spank {
    pub fn new(sp: sys::spank_t) -> Spank {
        Spank(sp)
    }

    /// True in slurmstepd, false in srun/sbatch/salloc.
    pub fn remote(&self) -> bool {
        // SAFETY: `self.0` is the handle Slurm passed to the running callback.
        unsafe { sys::spank_remote(self.0) == 1 }
    }

    /// Registers an option; Slurm keeps the pointer, hence `'static`.
    pub fn register(&self, option: &'static super::options::SpankOption) -> Result<()> {
        // SAFETY: the option lives for the whole process and Slurm only reads it.
        let rc = unsafe { sys::spank_option_register(self.0, option.as_ptr()) };
        check(rc, "spank_option_register")
    }

    /// The value of `option` when the step was given it: `Some("")` for a bare
    /// option, None when absent.
    pub fn getopt(&self, option: &'static super::options::SpankOption) -> Result<Option<String>> {
        let mut arg: *mut c_char = ptr::null_mut();
        // SAFETY: valid handle and option; Slurm sets `arg` to a string it owns or NULL.
        let rc = unsafe { sys::spank_option_getopt(self.0, option.as_ptr(), &mut arg) };
        match rc {
            // SAFETY: `arg` is NULL or a NUL-terminated string owned by Slurm.
            sys::ESPANK_SUCCESS => unsafe { option_value(arg) }.map(|v| Some(v.to_string())),
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
                    self.0,
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

    /// Sets a variable of the task's environment (slurmstepd only).
    pub fn setenv(&self, name: &str, value: &str) -> Result<()> {
        let cname = CString::new(name).map_err(|_| Error::new("variable name with NUL"))?;
        let cvalue =
            CString::new(value).map_err(|_| Error::new(format!("{name}: value with NUL")))?;
        // SAFETY: valid handle and NUL-terminated strings; Slurm copies them.
        let rc = unsafe { sys::spank_setenv(self.0, cname.as_ptr(), cvalue.as_ptr(), 1) };
        check(rc, &format!("spank_setenv({name})"))
    }

    /// The step's total task count as srun knows it (srun only).
    pub fn total_task_count(&self) -> Result<u32> {
        self.item_u32(
            sys::spank_item_S_JOB_TOTAL_TASK_COUNT,
            "S_JOB_TOTAL_TASK_COUNT",
        )
    }

    /// The step id (slurmstepd), special ids included.
    pub fn step_id(&self) -> Result<u32> {
        self.item_u32(sys::spank_item_S_JOB_STEPID, "S_JOB_STEPID")
    }

    /// An item whose argument is a `uint32_t *` (spank.h says which).
    fn item_u32(&self, item: sys::spank_item_t, name: &str) -> Result<u32> {
        let mut value: u32 = 0;
        // SAFETY: `item` takes one `uint32_t *` argument.
        let rc = unsafe { sys::spank_get_item(self.0, item, &mut value as *mut u32) };
        check(rc, &format!("spank_get_item({name})"))?;
        Ok(value)
    }
}

/// An option's argument as Slurm hands it over. A bare option given to
/// sbatch/salloc reaches the job's steps as the text "(null)" (Slurm prints
/// the NULL argument into SLURM_SPANK_OPTION_…): that means no argument.
///
/// # Safety
/// `arg` is NULL or points to a NUL-terminated string alive for the call.
pub unsafe fn option_value<'a>(arg: *const c_char) -> Result<&'a str> {
    if arg.is_null() {
        return Ok("");
    }
    // SAFETY: see the function's contract.
    let value = unsafe { CStr::from_ptr(arg) }
        .to_str()
        .map_err(|_| Error::new("option value is not valid UTF-8"))?;
    Ok(if value == "(null)" { "" } else { value })
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

fn spank_error(rc: sys::spank_err_t, what: &str) -> Error {
    Error::new(format!("{what} failed with SPANK error {rc}"))
}

/// The plugin's arguments from plugstack.conf.
pub fn args<'a>(argc: c_int, argv: *mut *mut c_char) -> Result<Vec<&'a str>> {
    if argv.is_null() || argc <= 0 {
        return Ok(Vec::new());
    }
    // SAFETY: Slurm passes `argc` valid NUL-terminated strings in `argv`, alive
    // for the callback.
    let raw = unsafe { std::slice::from_raw_parts(argv, argc as usize) };
    raw.iter()
        .map(|&p| {
            // SAFETY: see above.
            unsafe { CStr::from_ptr(p) }
                .to_str()
                .map_err(|_| Error::new("plugstack.conf argument is not valid UTF-8"))
        })
        .collect()
}
