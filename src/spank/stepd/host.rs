//! What slurmstepd reads on the host and in the task: the step's
//! environment, the host's GPUs, files and interfaces (for the core's
//! gather in `user_init`), the task's own environment, and the mount
//! namespace that tells a task a container plugin moved.

use std::path::{Path, PathBuf};

use super::super::bounded_io;
use super::super::handle::{Env, Spank};
use crate::core::network::addresses::Interface;
use crate::core::os::{node_gpu_count, node_interfaces};
use crate::core::{Error, Probe, Result, Source};

/// The mount namespace of the calling process (`mnt:[4026531841]`): always
/// readable by the process itself, as the user too; None when /proc cannot
/// say (a container's /proc).
pub fn mount_namespace() -> Option<PathBuf> {
    std::fs::read_link("/proc/self/ns/mnt").ok()
}

/// Whether a plugin before this one moved the task into other namespaces
/// between `task_init_privileged` (`placed`: where Slurm put it) and its
/// `task_init` (`now`). Either unknown counts as moved: the task's GPU list
/// is then not read (fail closed).
pub fn entered_namespaces(placed: Option<&Path>, now: Option<&Path>) -> bool {
    !matches!((placed, now), (Some(a), Some(b)) if a == b)
}

/// The node as slurmstepd shows it in `user_init`, on the host: the step's
/// environment, the host's GPUs and files.
pub struct OnHost<'s, 'a>(pub &'s Spank<'a>);

impl Source for OnHost<'_, '_> {
    fn var(&mut self, name: &str) -> Result<Option<String>> {
        match name {
            // Set per task by slurmstepd after the fork (task.c `exec_task`);
            // here only a value the user exported could be seen. The task
            // checks its own rank and local id against the layout instead.
            "SLURM_PROCID" | "SLURM_LOCALID" | "SLURM_GTIDS" | "SLURM_NODEID"
            | "SLURMD_TRES_BIND" => Ok(None),
            // slurmstepd's own (slurmstepd.c sets it in its environment).
            "SLURMD_NODENAME" => Ok(std::env::var(name).ok()),
            _ => self.0.getenv(name),
        }
    }

    /// From Slurm itself, not from variables the user could set.
    fn job_step(&mut self) -> Result<Option<(u32, u32)>> {
        Ok(Some((self.0.job_id()?, self.0.step_id()?)))
    }

    fn blocks_follow_topology(&self) -> bool {
        cfg!(slurm_blocks_follow_topology)
    }

    fn component_tasks(&mut self) -> Result<Option<u32>> {
        self.0.total_task_count().map(Some)
    }
}

/// Longest a file the user named (`SLURM_HOSTFILE`) may take to be read.
const READ_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The host's GPUs, files (as the user) and interfaces; names from
/// /etc/hosts only (the default: DNS could hang slurmstepd).
impl Probe for OnHost<'_, '_> {
    fn gpu_count(&mut self) -> Result<u32> {
        node_gpu_count()
    }

    /// As the user: slurmstepd runs `user_init` with the user's effective
    /// ids and groups (mgr.c drops privileges before it), so the file system
    /// checks the user's rights. Refused should it ever run as root for
    /// another user. Read by a child within [`READ_LIMIT`]: a file on a
    /// hung file system fails the step instead of holding it.
    fn read_file(&mut self, path: &str) -> Result<String> {
        // SAFETY: geteuid cannot fail.
        let euid = unsafe { libc::geteuid() };
        if euid == 0 && self.0.job_uid()? != 0 {
            return Err(Error::new(format!(
                "not reading {path}: slurmstepd runs as root here, not as the job's user"
            )));
        }
        bounded_io::read_user_file(path, READ_LIMIT)
    }

    fn interfaces(&mut self) -> Result<Vec<Interface>> {
        node_interfaces()
    }
}

/// The task's environment read in place, for the core's parsers.
pub struct TaskEnv<'e, 'a>(pub &'e Env<'a>);

impl Source for TaskEnv<'_, '_> {
    fn var(&mut self, name: &str) -> Result<Option<String>> {
        Ok(self.0.get(name)?.map(str::to_string))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A task bound per task reads its own GPU list only when it is still in
    /// the mount namespace Slurm put it in; unknown either side is refused.
    #[test]
    fn a_task_moved_into_other_namespaces_is_told_apart() {
        let host = Path::new("mnt:[4026531841]");
        let container = Path::new("mnt:[4026532999]");
        assert!(!entered_namespaces(Some(host), Some(host)));
        assert!(entered_namespaces(Some(host), Some(container)));
        assert!(entered_namespaces(None, Some(host)));
        assert!(entered_namespaces(Some(host), None));
        assert!(entered_namespaces(None, None));
    }

    /// This process's own namespace is readable and stable.
    #[test]
    fn the_mount_namespace_is_readable() {
        let ns = mount_namespace().expect("/proc/self/ns/mnt");
        assert!(
            ns.to_string_lossy().starts_with("mnt:["),
            "{}",
            ns.display()
        );
        assert!(!entered_namespaces(Some(&ns), mount_namespace().as_deref()));
    }
}
