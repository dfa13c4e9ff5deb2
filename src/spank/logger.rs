//! The `log` crate's messages, forwarded to Slurm's own log functions with a
//! `tf-cluster: ` prefix. From slurmstepd `error` reaches the user's terminal
//! and slurmd's log; `info` shows on srun's terminal; the rest goes to the
//! daemons' logs at their verbose and debug levels.

use std::ffi::CString;

use log::{Level, LevelFilter, Log, Metadata, Record};

use super::bindings as sys;

struct SlurmLogger;

static LOGGER: SlurmLogger = SlurmLogger;

impl Log for SlurmLogger {
    fn enabled(&self, _: &Metadata) -> bool {
        true
    }

    fn log(&self, record: &Record) {
        // One line per message, whatever the message holds.
        let text = format!("tf-cluster: {}", record.args()).replace(['\0', '\n'], " ");
        let Ok(message) = CString::new(text) else {
            return;
        };
        let log_fn = match record.level() {
            Level::Error => sys::slurm_error,
            Level::Warn => sys::slurm_info,
            Level::Info => sys::slurm_verbose,
            Level::Debug | Level::Trace => sys::slurm_debug,
        };
        // SAFETY: a "%s" format with one NUL-terminated string argument.
        unsafe { log_fn(c"%s".as_ptr(), message.as_ptr()) };
    }

    fn flush(&self) {}
}

/// Routes `log` to Slurm and reports panics in one line (the default hook
/// would print a backtrace on the user's terminal). Idempotent.
pub fn install() {
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(LevelFilter::Debug);
        std::panic::set_hook(Box::new(|info| {
            let payload = info.payload();
            let what = payload
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
                .unwrap_or("panic");
            let at = info
                .location()
                .map(|l| format!(" at {}:{}", l.file(), l.line()));
            log::error!(
                "internal error{}: {what}; caught: the node stays in service",
                at.unwrap_or_default()
            );
        }));
    }
}
