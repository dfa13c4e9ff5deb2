//! The real machine the doctor and launcher-env read: files, glob(3), the plugin's ELF
//! symbols, `srun --version`, `scontrol show config`.

use super::host::{Host, PluginFile};
use crate::elf;
use tf_cluster_core::number::parse_u32;

/// The version `srun --version` prints: `slurm 24.11.5`, `slurm-wlm 22.05.8`.
pub fn parse_srun_version(text: &str) -> Option<u32> {
    let word = text.split_whitespace().nth(1)?;
    let mut parts = word.split(['.', '-']);
    let mut next = || parse_u32(parts.next()?).filter(|&n| n < 256);
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

    fn directory(&mut self, path: &str) -> std::io::Result<(u32, u32)> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(path)?;
        if !meta.is_dir() {
            return Err(invalid("is not a directory"));
        }
        Ok((meta.uid(), meta.mode() & 0o7777))
    }

    fn directory_here(&mut self, path: &str) -> std::io::Result<(u32, u32)> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::symlink_metadata(path)?;
        if meta.file_type().is_symlink() {
            return Err(invalid("is a link"));
        }
        if !meta.is_dir() {
            return Err(invalid("is not a directory"));
        }
        Ok((meta.uid(), meta.mode() & 0o7777))
    }

    fn canonical(&mut self, path: &str) -> String {
        std::fs::canonicalize(path)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_else(|_| path.to_string())
    }

    fn read(&mut self, path: &str) -> std::io::Result<String> {
        let data = read_bounded(path, MAX_CONF)?;
        String::from_utf8(data).map_err(|_| invalid("is not text (UTF-8)"))
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
        let info = read_bounded(path, MAX_PLUGIN)
            .map_err(|e| e.to_string())
            .and_then(|data| elf::plugin_info(&data).map_err(|e| e.to_string()));
        Some(PluginFile {
            world_readable: meta.permissions().mode() & 0o004 != 0,
            info,
        })
    }

    fn slurm_version(&mut self, run_srun: bool) -> (Option<(u32, String)>, Option<String>) {
        let mut problem = None;
        if run_srun {
            match run(&["srun", "--version"]) {
                Ok(text) => {
                    if let Some(v) = parse_srun_version(&text) {
                        return (Some((v, "srun --version".into())), None);
                    }
                }
                Err(e) => problem = Some(e),
            }
        }
        for header in [
            "/usr/include/slurm/slurm_version.h",
            "/usr/local/include/slurm/slurm_version.h",
        ] {
            if let Some(v) = self
                .read(header)
                .ok()
                .and_then(|t| parse_version_header(&t))
            {
                return (Some((v, header.into())), problem);
            }
        }
        (None, problem)
    }

    fn show_config(&mut self) -> Result<String, String> {
        run(&["scontrol", "show", "config"])
    }
}

/// Largest slurm.conf, plugstack.conf or header the doctor reads.
const MAX_CONF: u64 = 1 << 20;
/// Largest plugin file whose symbols it reads.
const MAX_PLUGIN: u64 = 64 << 20;
fn invalid(why: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, why.to_string())
}

/// The contents of the regular file `path`, at most `max` bytes: opened
/// without blocking (a FIFO), refused when not a regular file or larger.
fn read_bounded(path: &str, max: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(invalid("is not a regular file"));
    }
    if meta.len() > max {
        return Err(invalid(&format!(
            "is larger than the {} MiB read",
            max >> 20
        )));
    }
    let mut data = Vec::with_capacity(meta.len() as usize);
    file.take(max + 1).read_to_end(&mut data)?;
    if data.len() as u64 > max {
        return Err(invalid(&format!(
            "is larger than the {} MiB read",
            max >> 20
        )));
    }
    Ok(data)
}

/// `argv` as the CLI runs every Slurm command (crate::slurm_cmd).
fn run(argv: &[&str]) -> Result<String, String> {
    crate::slurm_cmd::run(argv)
}
