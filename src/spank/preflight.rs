//! slurmstepd's side of the preflight (crate::core::preflight decides what
//! to check): in `user_init`, once per node, as the job's user, on the host
//! before any container plugin runs. Each answer is a few system calls: the
//! interface's flags and carrier from getifaddrs (the node's own network
//! namespace), one socket bound and closed per
//! port, one stat per GPU device node; nothing waits on the network, so the
//! whole check takes well under a millisecond per node. A failure becomes
//! the step's refusal, carried to each task (never a failure of
//! `user_init`, which would drain the node of a batch job).

use std::collections::HashMap;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use super::handle::Spank;
use crate::core::gpu_health;
use crate::core::gpus::gres_conf::gpu_devices;
use crate::core::preflight::{Checks, Device, Host, Link, check};
use crate::core::{Error, Node, Result};

/// Runs the node's preflight unless the step or the site turned it off;
/// `gres`: the node's gres.conf (read once per node, for the binding too).
pub fn run(spank: &Spank, node: &Node, gres: &str) -> Result<()> {
    if !node.settings().preflight {
        return Ok(());
    }
    let gpus = spank.getenv("SLURM_STEP_GPUS")?;
    let checks = Checks::of(node, gpus.as_deref());
    let nodename = node.step().nodename.clone().unwrap_or_default();
    let mut host = OnHost {
        dev: PathBuf::from("/dev"),
        driver: PathBuf::from(NVIDIA_DRIVER),
        // Only the files gres.conf names (no step GPUs: no default naming).
        named: gpu_devices(gres, &nodename, &[]).into_iter().collect(),
    };
    check(&checks, &mut host)?;
    // The GPUs' own health (NVIDIA's library, in an exec'd probe), each of
    // Slurm's indices asked about by the device minor gres.conf gives it.
    let devices = gpu_devices(gres, &nodename, &checks.gpus);
    let pairs = gpu_health::probe_pairs(&devices, &checks.gpus);
    let minors: Vec<u32> = pairs.iter().map(|&(_, minor)| minor).collect();
    let answer = super::gpu_probe::probe(&minors);
    match gpu_health::refusal(&checks.node, &pairs, &answer) {
        Some(why) => Err(Error::new(why)),
        None => Ok(()),
    }
}

struct OnHost {
    /// Where NVIDIA's default device nodes are (`/dev`).
    dev: PathBuf,
    /// The NVIDIA driver's directory.
    driver: PathBuf,
    /// The device file gres.conf names for each of Slurm's GPU indices.
    named: HashMap<u32, String>,
}

impl Host for OnHost {
    /// From getifaddrs, in the namespace slurmstepd runs in: /sys/class/net
    /// shows whichever namespace mounted it, which for a slurmd in a network
    /// namespace of its own (a container, some test and cloud setups) is not
    /// the step's.
    fn link(&mut self, interface: &str) -> Link {
        match crate::core::os::interface_flags(interface) {
            Ok(flags) => Link::of_flags(flags),
            // The kernel does not say: the step's own connections will.
            Err(_) => Link::Up,
        }
    }

    fn bind(&mut self, port: u16) -> std::result::Result<(), String> {
        bind_any(port)
    }

    /// The file gres.conf names for the index (it must be there), else
    /// NVIDIA's `/dev/nvidia<index>` where the node names devices so.
    fn gpu_device(&mut self, index: u32) -> Option<Device> {
        match self.named.get(&index) {
            Some(file) => {
                Some(device_at(Path::new(file)).unwrap_or_else(|| Device::Missing(file.clone())))
            }
            None => nvidia_device(&self.dev, &self.driver, index),
        }
    }
}

/// Binds TCP `port` on every IPv4 address, as a listening rank does
/// (SO_REUSEADDR, as PyTorch's store and gRPC set it: a previous step's
/// connections in TIME_WAIT do not count, a process listening there does),
/// then closes it.
fn bind_any(port: u16) -> std::result::Result<(), String> {
    // SAFETY: plain socket calls on a descriptor this function owns and closes.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            // No socket at all says nothing about the port.
            return Ok(());
        }
        let one: libc::c_int = 1;
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_REUSEADDR,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
        let addr = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr {
                s_addr: libc::INADDR_ANY,
            },
            sin_zero: [0; 8],
        };
        let rc = libc::bind(
            fd,
            (&addr as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        match rc {
            0 => Ok(()),
            _ if err.raw_os_error() == Some(libc::EADDRINUSE) => {
                Err("another process holds it".into())
            }
            _ => Err(err.to_string()),
        }
    }
}

/// The NVIDIA driver's directory: on a node with it, every GPU Slurm gives
/// has its /dev/nvidiaN.
const NVIDIA_DRIVER: &str = "/proc/driver/nvidia";

/// Slurm's GPU `index` as NVIDIA names its device node (`/dev/nvidia<index>`,
/// gres.conf's `File=/dev/nvidia[0-N]`), checked on a node that has the
/// NVIDIA driver or any such node; None on a node that names its devices
/// otherwise.
fn nvidia_device(dev: &Path, driver: &Path, index: u32) -> Option<Device> {
    let path = dev.join(format!("nvidia{index}"));
    match device_at(&path) {
        Some(found) => Some(found),
        None if driver.exists() || any_nvidia_device(dev) => {
            Some(Device::Missing(path.display().to_string()))
        }
        None => None,
    }
}

/// What is at `path`: a character device or something else; None: nothing.
fn device_at(path: &Path) -> Option<Device> {
    match std::fs::metadata(path) {
        Ok(m) if m.file_type().is_char_device() => Some(Device::Char),
        Ok(_) => Some(Device::NotChar(path.display().to_string())),
        Err(_) => None,
    }
}

/// Most /dev entries looked at for an NVIDIA device node.
const MAX_DEV_ENTRIES: usize = 4096;

fn any_nvidia_device(dev: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dev) else {
        return false;
    };
    entries.take(MAX_DEV_ENTRIES).flatten().any(|e| {
        let name = e.file_name();
        let name = name.to_string_lossy();
        name.strip_prefix("nvidia")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A port another socket listens on cannot be bound; a free one can,
    /// and is free again afterwards.
    #[test]
    fn a_held_port_is_told_from_a_free_one() {
        let held = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
        let port = held.local_addr().unwrap().port();
        assert_eq!(bind_any(port), Err("another process holds it".into()));
        drop(held);
        bind_any(port).unwrap();
        bind_any(port).unwrap();
    }

    /// A missing device node counts only where the node names its devices
    /// NVIDIA's way; a regular file in its place is no device.
    #[test]
    fn gpu_device_nodes_are_checked_where_nvidia_names_them() {
        let dir = std::env::temp_dir().join(format!("tfc-preflight-{}", std::process::id()));
        let dev = dir.join("dev");
        std::fs::create_dir_all(&dev).unwrap();
        let no_driver = dir.join("no-driver");
        assert_eq!(nvidia_device(&dev, &no_driver, 1), None, "no NVIDIA naming");
        std::fs::write(dev.join("nvidia0"), "").unwrap();
        assert_eq!(
            nvidia_device(&dev, &no_driver, 0),
            Some(Device::NotChar(dev.join("nvidia0").display().to_string()))
        );
        assert_eq!(
            nvidia_device(&dev, &no_driver, 1),
            Some(Device::Missing(dev.join("nvidia1").display().to_string()))
        );
        assert_eq!(
            nvidia_device(Path::new("/dev"), &no_driver, 0).is_none(),
            !Path::new("/dev/nvidia0").exists()
        );
        // /dev/null is a character device.
        let null_dir = dir.join("null");
        std::fs::create_dir_all(&null_dir).unwrap();
        std::os::unix::fs::symlink("/dev/null", null_dir.join("nvidia2")).unwrap();
        assert_eq!(nvidia_device(&null_dir, &no_driver, 2), Some(Device::Char));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The device file gres.conf names is the one checked, wherever it is
    /// (a site's `File=/dev/gpus/0`): present, it passes though no
    /// `/dev/nvidia<index>` exists on a node with NVIDIA's driver; missing,
    /// it is named in the refusal.
    #[test]
    fn gres_confs_device_file_is_the_one_checked() {
        let dir = std::env::temp_dir().join(format!("tfc-preflight-gres-{}", std::process::id()));
        let (dev, site) = (dir.join("dev"), dir.join("site"));
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::create_dir_all(&site).unwrap();
        std::os::unix::fs::symlink("/dev/null", site.join("gpu0")).unwrap();
        let file = |n: u32| site.join(format!("gpu{n}")).display().to_string();
        let mut host = OnHost {
            dev: dev.clone(),
            // The driver is there: a missing /dev/nvidia<index> would count.
            driver: dir.clone(),
            named: [(0, file(0)), (1, file(1))].into_iter().collect(),
        };
        assert_eq!(host.gpu_device(0), Some(Device::Char));
        assert_eq!(host.gpu_device(1), Some(Device::Missing(file(1))));
        // An index gres.conf does not name: NVIDIA's naming.
        assert_eq!(
            host.gpu_device(2),
            Some(Device::Missing(dev.join("nvidia2").display().to_string()))
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_loopback_is_up() {
        let mut host = OnHost {
            dev: PathBuf::from("/dev"),
            driver: PathBuf::from(NVIDIA_DRIVER),
            named: HashMap::new(),
        };
        assert_eq!(host.link("lo"), Link::Up);
        assert_eq!(host.link("tfc-no-such-if"), Link::Absent);
    }
}
