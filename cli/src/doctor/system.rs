//! The real machine the doctor reads: files, glob(3), the plugin's ELF
//! symbols, `srun --version`, `scontrol show config`.

use super::{Host, PluginFile};
use crate::elf;

/// The version `srun --version` prints: `slurm 24.11.5`, `slurm-wlm 22.05.8`.
pub fn parse_srun_version(text: &str) -> Option<u32> {
    let word = text.split_whitespace().nth(1)?;
    let mut parts = word.split(['.', '-']);
    let mut next = || parts.next()?.parse::<u32>().ok().filter(|&n| n < 256);
    let (major, minor, micro) = (next()?, next()?, next().unwrap_or(0));
    Some(major << 16 | minor << 8 | micro)
}

// SLURM_VERSION_NUMBER from slurm_version.h: the parser build.rs uses.
#[path = "../../../slurm_version.rs"]
mod slurm_version_h;
pub use slurm_version_h::parse_version_header;

/// The real machine.
pub struct System;

impl Host for System {
    fn env(&mut self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }

    fn read(&mut self, path: &str) -> std::io::Result<String> {
        std::fs::read_to_string(path)
    }

    fn glob(&mut self, pattern: &str) -> Vec<String> {
        let Ok(c_pattern) = std::ffi::CString::new(pattern) else {
            return Vec::new();
        };
        // SAFETY: glob(3) with a NUL-terminated pattern and a zeroed glob_t,
        // freed by globfree on every path once the results are copied out.
        unsafe {
            let mut g: libc::glob_t = std::mem::zeroed();
            let mut out = Vec::new();
            if libc::glob(c_pattern.as_ptr(), 0, None, &mut g) == 0 {
                for i in 0..g.gl_pathc {
                    let p = *g.gl_pathv.add(i);
                    if !p.is_null() {
                        out.push(std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned());
                    }
                }
            }
            libc::globfree(&mut g);
            out
        }
    }

    fn plugin(&mut self, path: &str) -> Option<PluginFile> {
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(path).ok()?;
        let info = std::fs::read(path)
            .map_err(|e| e.to_string())
            .and_then(|data| elf::plugin_info(&data).map_err(|e| e.to_string()));
        Some(PluginFile {
            world_readable: meta.permissions().mode() & 0o004 != 0,
            info,
        })
    }

    fn slurm_version(&mut self) -> Option<(u32, String)> {
        let srun = std::process::Command::new("srun")
            .arg("--version")
            .stdin(std::process::Stdio::null())
            .output();
        if let Ok(out) = srun {
            if out.status.success() {
                if let Some(v) = parse_srun_version(&String::from_utf8_lossy(&out.stdout)) {
                    return Some((v, "srun --version".into()));
                }
            }
        }
        for header in [
            "/usr/include/slurm/slurm_version.h",
            "/usr/local/include/slurm/slurm_version.h",
        ] {
            if let Some(v) = std::fs::read_to_string(header)
                .ok()
                .and_then(|t| parse_version_header(&t))
            {
                return Some((v, header.into()));
            }
        }
        None
    }

    fn show_config(&mut self) -> Option<String> {
        let out = std::process::Command::new("scontrol")
            .args(["show", "config"])
            .stdin(std::process::Stdio::null())
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }
}
