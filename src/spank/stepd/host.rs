//! What slurmstepd reads on the host and in the task: the step's
//! environment, the host's GPUs, files and interfaces (for the core's
//! gather in `user_init`), the task's own environment, the mount
//! namespace that tells a task a container plugin moved, and the network
//! namespace that tells it a container plugin gave it a network of its own.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::super::bindings as sys;
use super::super::bounded_io;
use super::super::handle::{Env, RawOption, Spank, notice};
use crate::core::os::Root;
use crate::core::os::{node_gpu_count, node_interfaces};
use crate::core::{Error, Probe, Result, Source};
use crate::core::{Interface, Node, imex};

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

/// The network namespace of the calling process (`net:[4026531840]`), as
/// [`mount_namespace`]: the node's in `user_init`, the task's in `task_init`.
pub fn net_namespace() -> Option<PathBuf> {
    std::fs::read_link("/proc/self/ns/net").ok()
}

/// The refusal of a framework step whose tasks get a network namespace of
/// their own: every address, interface and port the plugin sets names the
/// node's network, which the task cannot reach.
pub const PRIVATE_NETWORK: &str = "this step's tasks get a network namespace of their own (a container plugin's --container-unshare=net), without the node's interfaces: the addresses and ports set for them name a network they cannot reach; run without unsharing the network";

/// In the task (`task_init`): refused when a plugin listed before this one
/// moved it into a network namespace other than the node's (`node`, read
/// in `user_init` on the host). Refused only when both are known and differ:
/// an unreadable `/proc/self/ns/net` proves nothing either way.
pub fn refuse_private_network(node: Option<&Path>, task: Option<&Path>) -> Result<()> {
    match (node, task) {
        (Some(node), Some(task)) if node != task => Err(Error::new(PRIVATE_NETWORK)),
        _ => Ok(()),
    }
}

/// A container plugin's option that gives each task namespaces of its own
/// (pyxis 0.24: `--container-unshare=net,ipc,uts`).
const UNSHARE_OPTION: &std::ffi::CStr = c"container-unshare";

/// The same asked through the environment (pyxis 0.24 reads it when the
/// option is not given).
const UNSHARE_VAR: &str = "PYXIS_CONTAINER_UNSHARE";

/// [`UNSHARE_OPTION`] as `spank_option_getopt` looks it up: Slurm keeps
/// every plugin's options in one list by name (names are unique in a
/// plugstack; spank.c `_opt_by_name`), with the value srun forwarded, so
/// this finds the container plugin's whatever their order in plugstack.conf.
/// Never registered (no callback): without such a plugin Slurm finds no
/// value.
static UNSHARE: RawOption = RawOption(sys::spank_option {
    name: UNSHARE_OPTION.as_ptr().cast_mut(),
    arginfo: c"net".as_ptr().cast_mut(),
    usage: c"".as_ptr().cast_mut(),
    has_arg: 1,
    val: 0,
    cb: None,
});

/// Whether a comma list of namespaces (`net,ipc`) holds the network's.
pub fn unshares_network(list: &str) -> bool {
    list.split(',').any(|ns| ns.trim() == "net")
}

/// In `user_init`, on the host: refused when the step asks a container
/// plugin for a network namespace of its own, by its option (whatever the
/// plugins' order: one listed after this plugin enters it only after this
/// plugin's `task_init`, where no task can see it yet) or, without the
/// option, by its variable in the step's environment.
pub fn refuse_unshared_network(spank: &Spank, host_env: &HashMap<String, String>) -> Result<()> {
    let asked = match spank.getopt(&UNSHARE)? {
        Some(list) => unshares_network(&list),
        None => host_env
            .get(UNSHARE_VAR)
            .is_some_and(|v| unshares_network(v)),
    };
    match asked {
        true => Err(Error::new(PRIVATE_NETWORK)),
        false => Ok(()),
    }
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

    /// Read once per node, here on the host (a local file, size-capped).
    fn topology_conf(&mut self) -> Option<String> {
        crate::core::os::slurm_conf_file("topology.conf")
    }
}

/// The task's environment read in place, for the core's parsers.
pub struct TaskEnv<'e, 'a>(pub &'e Env<'a>);

impl Source for TaskEnv<'_, '_> {
    fn var(&mut self, name: &str) -> Result<Option<String>> {
        Ok(self.0.get(name)?.map(str::to_string))
    }
}

/// The step's environment as the host gave it (before any container plugin).
pub fn host_env(spank: &Spank) -> Result<HashMap<String, String>> {
    Ok(spank
        .env()?
        .entries()
        .filter_map(|entry| {
            let text = std::str::from_utf8(entry).ok()?;
            let (name, value) = text.split_once('=')?;
            Some((name.to_string(), value.to_string()))
        })
        .collect())
}

/// In `user_init`, once per node: whether this node's tasks must each see
/// one IMEX channel (the node has them: its /proc/devices, under `root`,
/// and its channel directory; and the step spans several nodes); the node
/// of rank 0 says once for the step when an exported variable turns
/// multi-node NVLink off.
pub fn imex_needed(root: &Path, node: &Node, host_env: &HashMap<String, String>) -> bool {
    use crate::core::gpus::kernel_files::KernelFiles;
    let devices = Root(root.to_path_buf())
        .read("proc/devices")
        .unwrap_or_default();
    let listed = imex::node_has_channels(&devices);
    let dir = Path::new(imex::CHANNELS_DIR).is_dir();
    let needed = imex::needed(node.settings().imex, listed, dir, node.num_nodes());
    if needed && node.here().iter().any(|&(rank, _)| rank == 0) {
        let value = |name: &str| host_env.get(name).map(String::as_str);
        if let Some(line) = imex::nvlink_off_line(value) {
            notice(&line);
        }
    }
    needed
}

/// In `task_init`: the IMEX channels the task sees (the character devices
/// of its channel directory, in its own mount namespace).
pub fn imex_channels() -> Vec<String> {
    use std::os::unix::fs::FileTypeExt;
    let Ok(dir) = std::fs::read_dir(imex::CHANNELS_DIR) else {
        return Vec::new();
    };
    dir.take(64)
        .filter_map(|entry| {
            let entry = entry.ok()?;
            entry.file_type().ok()?.is_char_device().then_some(())?;
            entry.file_name().into_string().ok()
        })
        .collect()
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

    /// A task refused where its network namespace is known to differ from
    /// the node's; the same, or either unknown, is not refused.
    #[test]
    fn a_private_network_namespace_is_told_apart() {
        let node = Path::new("net:[4026531840]");
        let own = Path::new("net:[4026532777]");
        let refused = refuse_private_network(Some(node), Some(own)).unwrap_err();
        assert_eq!(refused.message(), PRIVATE_NETWORK);
        assert!(refuse_private_network(Some(node), Some(node)).is_ok());
        assert!(refuse_private_network(None, Some(own)).is_ok());
        assert!(refuse_private_network(Some(node), None).is_ok());
        let here = net_namespace().expect("/proc/self/ns/net");
        assert!(here.to_string_lossy().starts_with("net:["));
        assert!(refuse_private_network(Some(&here), net_namespace().as_deref()).is_ok());
    }

    /// pyxis's list: `net` among others asks for the network's namespace.
    #[test]
    fn an_unshare_list_naming_the_network_is_told_apart() {
        for list in ["net", "ipc,net", "net,ipc,uts", " net "] {
            assert!(unshares_network(list), "{list}");
        }
        for list in ["", "ipc", "ipc,uts", "network", "netns", "(null)"] {
            assert!(!unshares_network(list), "{list}");
        }
    }

    /// Whole, on one line: Error keeps at most 300 characters.
    #[test]
    fn the_private_network_refusal_is_one_short_line() {
        assert_eq!(Error::new(PRIVATE_NETWORK).message(), PRIVATE_NETWORK);
        assert!(!PRIVATE_NETWORK.contains('\n'));
        assert!(PRIVATE_NETWORK.len() <= 300);
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
