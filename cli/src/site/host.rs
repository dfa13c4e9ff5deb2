//! The machine as the CLI reads the installation: [`Host`], which the
//! doctor's checks and launcher-env see it through and `System` (system.rs)
//! implements with real files and commands.

use crate::elf::PluginInfo;

/// A plugin file as found on disk.
#[derive(Debug, Clone)]
pub struct PluginFile {
    /// Readable by every user (srun runs as the user and opens it).
    pub world_readable: bool,
    /// What its ELF symbols say, or why they could not be read.
    pub info: Result<PluginInfo, String>,
}

/// The machine as the doctor and launcher-env see it.
pub trait Host {
    fn env(&mut self, name: &str) -> Option<String>;
    fn read(&mut self, path: &str) -> std::io::Result<String>;
    /// The paths matching a glob(3) pattern, sorted; none when nothing matches.
    fn glob(&mut self, pattern: &str) -> Vec<String>;
    /// None: no such file.
    fn plugin(&mut self, path: &str) -> Option<PluginFile>;
    /// The installed Slurm's version number (0xMMmmuu) and where it came
    /// from, asking `srun --version` first when `run_srun`; and why srun
    /// could not tell, if it could not.
    fn slurm_version(&mut self, run_srun: bool) -> (Option<(u32, String)>, Option<String>);
    /// `scontrol show config`, when there is no slurm.conf (configless), or
    /// one line saying why not.
    fn show_config(&mut self) -> Result<String, String>;
    /// A directory's owner uid and mode (permission bits, sticky bit
    /// included), links followed; an error where it is missing or is no
    /// directory.
    fn directory(&mut self, path: &str) -> std::io::Result<(u32, u32)> {
        let _ = path;
        Err(std::io::Error::other("not looked at"))
    }
    /// As [`Host::directory`], the last component not followed: an error
    /// where it is a link.
    fn directory_here(&mut self, path: &str) -> std::io::Result<(u32, u32)> {
        let _ = path;
        Err(std::io::Error::other("not looked at"))
    }
    /// The path a file is known by, for reading each file once (symbolic
    /// links and `..` resolved where the file exists; else the path).
    fn canonical(&mut self, path: &str) -> String {
        path.to_string()
    }
}

/// An error reading a file, after its path: ` is not a regular file` (the
/// doctor's own refusals say what the file is), else `: No such file…`.
pub fn said(e: &std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::InvalidData {
        format!(" {e}")
    } else {
        format!(": {e}")
    }
}
