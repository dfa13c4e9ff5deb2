//! The one place the core touches the operating system, shared by the
//! plugin and the CLI: the process's own environment (srun's, the CLI's),
//! the node's GPU count and network interfaces, and a file a user names.
//! Everything else in the core is computation on values.

use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};

use std::net::IpAddr;

use crate::addresses::Interface;
use crate::error::{Error, Result};
use crate::limits::MAX_GPUS;

/// This process's environment (srun's, the CLI's): its readers are in
/// crate::source.
pub struct ProcessEnv;

/// The addresses of `host` from the system's resolver (getaddrinfo(3): DNS
/// too). Called directly, not through std's `ToSocketAddrs`, which holds
/// std's environment lock for the whole lookup: a lookup left running past
/// srun's deadline would then block srun's own `set_var` until it ends.
pub fn resolve_host(host: &str) -> Result<Vec<IpAddr>> {
    let fail = |why: String| Error::new(format!("cannot resolve {host}: {why}"));
    let c_host = std::ffi::CString::new(host).map_err(|_| fail("a NUL in the name".into()))?;
    // SAFETY: all-zero is a valid addrinfo hints value (no flags, AF_UNSPEC).
    let mut hints: libc::addrinfo = unsafe { std::mem::zeroed() };
    hints.ai_socktype = libc::SOCK_STREAM;
    let mut list: *mut libc::addrinfo = std::ptr::null_mut();
    // SAFETY: a NUL-terminated name, hints, and an out pointer freed below.
    let rc = unsafe { libc::getaddrinfo(c_host.as_ptr(), std::ptr::null(), &hints, &mut list) };
    if rc != 0 {
        let why = if rc == libc::EAI_SYSTEM {
            std::io::Error::last_os_error().to_string()
        } else {
            // SAFETY: gai_strerror returns a static NUL-terminated string.
            unsafe { std::ffi::CStr::from_ptr(libc::gai_strerror(rc)) }
                .to_string_lossy()
                .into_owned()
        };
        return Err(fail(why));
    }
    let mut out = Vec::new();
    let mut entry = list;
    while !entry.is_null() {
        // SAFETY: a non-null entry of getaddrinfo's list, alive until freed.
        let e = unsafe { &*entry };
        entry = e.ai_next;
        // SAFETY: ai_addr, when set, points at a sockaddr of its family's size.
        let addr = unsafe {
            match e.ai_addr.as_ref().map(|a| i32::from(a.sa_family)) {
                Some(libc::AF_INET) => {
                    let sin = &*(e.ai_addr as *const libc::sockaddr_in);
                    Some(IpAddr::V4(u32::from_be(sin.sin_addr.s_addr).into()))
                }
                Some(libc::AF_INET6) => {
                    let sin6 = &*(e.ai_addr as *const libc::sockaddr_in6);
                    Some(IpAddr::V6(sin6.sin6_addr.s6_addr.into()))
                }
                _ => None,
            }
        };
        if let Some(a) = addr.filter(|a| !out.contains(a)) {
            out.push(a);
        }
    }
    // SAFETY: the list getaddrinfo returned, freed once.
    unsafe { libc::freeaddrinfo(list) };
    Ok(out)
}

/// The NVIDIA driver lists one directory per GPU here; reading it costs no
/// fork (TensorFlow's resolver runs `nvidia-smi`, which slurmstepd must not).
const NVIDIA_GPUS: &str = "/proc/driver/nvidia/gpus";

/// The AMD kernel driver (amdkfd) lists one topology node per CPU and per
/// GPU here; a GPU's `properties` has a non-zero `simd_count`.
const KFD_NODES: &str = "/sys/class/kfd/kfd/topology/nodes";

/// Largest host file read: one line per task of the largest step whose
/// TF_CONFIG can fit is far less.
pub const MAX_USER_FILE: u64 = 1 << 20;

/// The node's GPU count, without a fork: NVIDIA's from the driver's
/// directory, else AMD's from amdkfd's topology; 0 without either driver.
pub fn node_gpu_count() -> Result<u32> {
    let nvidia = match std::fs::read_dir(NVIDIA_GPUS) {
        Ok(entries) => entries.take(MAX_GPUS as usize + 1).count() as u32,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
        Err(e) => {
            return Err(Error::new(format!(
                "cannot count GPUs in {NVIDIA_GPUS}: {e}"
            )));
        }
    };
    if nvidia > 0 {
        return Ok(nvidia);
    }
    Ok(kfd_gpu_count(std::path::Path::new(KFD_NODES)))
}

/// GPUs among amdkfd's topology nodes under `dir` (0 when it is absent or
/// unreadable: the count is only a default).
fn kfd_gpu_count(dir: &std::path::Path) -> u32 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut gpus = 0;
    for entry in entries.take(4 * MAX_GPUS as usize).flatten() {
        let Ok(text) = std::fs::read_to_string(entry.path().join("properties")) else {
            continue;
        };
        let simds = text.lines().find_map(|l| l.strip_prefix("simd_count "));
        if simds.is_some_and(|n| n.trim().parse::<u64>().is_ok_and(|n| n > 0)) {
            gpus += 1;
        }
    }
    gpus.min(MAX_GPUS + 1)
}

/// Most interface entries read: far above any node's, a bound on a hostile
/// namespace's. A node listing more refuses, naming the bound: a cut list
/// would make nodes disagree on a network (one refusing, one choosing).
const MAX_INTERFACE_ENTRIES: usize = 4096;

/// The node's network interfaces and their IP addresses, from getifaddrs(3):
/// one netlink dump of the kernel's own tables, no DNS, no fork. An
/// interface without an address is listed with none.
pub fn node_interfaces() -> Result<Vec<Interface>> {
    let entries = ifaddrs_entries()?;
    interfaces_from(entries.into_iter().map(|e| e.map(|e| (e.name, e.addr))))
}

/// The flags (IFF_*, as `SIOCGIFFLAGS` gives them, IFF_LOWER_UP included) of
/// interface `name` in this process's network namespace, from getifaddrs(3);
/// `None` where the namespace has no such interface. Unlike /sys/class/net,
/// which shows the namespace of whoever mounted it, this is always the
/// caller's own namespace.
pub fn interface_flags(name: &str) -> Result<Option<u32>> {
    let entries = ifaddrs_entries()?;
    if entries.len() > MAX_INTERFACE_ENTRIES {
        return Err(too_many_interface_entries());
    }
    Ok(entries
        .into_iter()
        .flatten()
        .find(|e| e.name == name)
        .map(|e| e.flags))
}

/// One entry of getifaddrs's list.
struct IfEntry {
    name: String,
    addr: Option<IpAddr>,
    flags: u32,
}

/// getifaddrs's entries (`None`: an entry without a name), at most one past
/// [`MAX_INTERFACE_ENTRIES`], so that a caller can tell the bound was passed.
fn ifaddrs_entries() -> Result<Vec<Option<IfEntry>>> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list` with a linked list freed below.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(Error::new(format!(
            "cannot list the network interfaces: {e}"
        )));
    }
    let mut out = Vec::new();
    let mut entry = list;
    while !entry.is_null() && out.len() <= MAX_INTERFACE_ENTRIES {
        // SAFETY: a non-null entry of getifaddrs's list, alive until freeifaddrs.
        let e = unsafe { &*entry };
        entry = e.ifa_next;
        out.push(if_entry(e));
    }
    // SAFETY: the list getifaddrs returned, freed once.
    unsafe { libc::freeifaddrs(list) };
    Ok(out)
}

/// A getifaddrs entry as values (`None` without a name).
fn if_entry(e: &libc::ifaddrs) -> Option<IfEntry> {
    if e.ifa_name.is_null() {
        return None;
    }
    // SAFETY: ifa_name is a NUL-terminated interface name.
    let name = unsafe { std::ffi::CStr::from_ptr(e.ifa_name) }
        .to_string_lossy()
        .into_owned();
    // SAFETY: ifa_addr, when set, points at a sockaddr of its family's size.
    let addr: Option<IpAddr> = unsafe {
        match e.ifa_addr.as_ref().map(|a| i32::from(a.sa_family)) {
            Some(libc::AF_INET) => {
                let sin = &*(e.ifa_addr as *const libc::sockaddr_in);
                Some(IpAddr::V4(u32::from_be(sin.sin_addr.s_addr).into()))
            }
            Some(libc::AF_INET6) => {
                let sin6 = &*(e.ifa_addr as *const libc::sockaddr_in6);
                Some(IpAddr::V6(sin6.sin6_addr.s6_addr.into()))
            }
            _ => None,
        }
    };
    Some(IfEntry {
        name,
        addr,
        flags: e.ifa_flags,
    })
}

fn too_many_interface_entries() -> Error {
    Error::new(format!(
        "this node lists more than {MAX_INTERFACE_ENTRIES} interface addresses; tf-cluster reads at most {MAX_INTERFACE_ENTRIES}: name the network with --tf-network on a node with fewer, or leave --tf-network out"
    ))
}

/// The interfaces of getifaddrs's entries (`None`: an entry without a
/// name), each with its addresses.
fn interfaces_from(
    entries: impl IntoIterator<Item = Option<(String, Option<IpAddr>)>>,
) -> Result<Vec<Interface>> {
    let mut entries = entries.into_iter();
    let listed: Vec<_> = entries.by_ref().take(MAX_INTERFACE_ENTRIES).collect();
    if entries.next().is_some() {
        return Err(too_many_interface_entries());
    }
    let mut out: Vec<Interface> = Vec::new();
    for (name, addr) in listed.into_iter().flatten() {
        let i = match out.iter().position(|i| i.name == name) {
            Some(i) => i,
            None => {
                out.push(Interface {
                    name,
                    addrs: Vec::new(),
                });
                out.len() - 1
            }
        };
        out[i].addrs.extend(addr);
    }
    Ok(out)
}

/// A file the user named, as the calling process can read it: a regular
/// file of at most [`MAX_USER_FILE`] bytes. It is opened without blocking (a
/// FIFO or a device would otherwise hold the task, unkillable, before exec),
/// and never read beyond the cap.
pub fn read_user_file(path: &str) -> Result<String> {
    let fail = |why: String| user_file_refused(path, &why);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| fail(e.to_string()))?;
    let meta = file.metadata().map_err(|e| fail(e.to_string()))?;
    if !meta.file_type().is_file() {
        return Err(not_a_regular_file(path, meta.mode()));
    }
    if meta.len() > MAX_USER_FILE {
        return Err(fail(format!("larger than {MAX_USER_FILE} bytes")));
    }
    let mut bytes = Vec::new();
    file.take(MAX_USER_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| fail(e.to_string()))?;
    user_file_text(path, bytes)
}

/// Why a user's file was not read, in one line.
pub fn user_file_refused(path: &str, why: &str) -> Error {
    Error::new(format!("cannot read {path}: {why}"))
}

/// The refusal of a file that is not a regular one (`mode`: st_mode).
pub fn not_a_regular_file(path: &str, mode: u32) -> Error {
    let what = match mode & libc::S_IFMT {
        libc::S_IFIFO => "a FIFO",
        libc::S_IFDIR => "a directory",
        _ => "a device or socket",
    };
    user_file_refused(path, &format!("it is {what}, not a regular file"))
}

/// The text of a user's file read to at most one byte past the cap.
pub fn user_file_text(path: &str, bytes: Vec<u8>) -> Result<String> {
    if bytes.len() as u64 > MAX_USER_FILE {
        return Err(user_file_refused(
            path,
            &format!("larger than {MAX_USER_FILE} bytes"),
        ));
    }
    String::from_utf8(bytes).map_err(|_| user_file_refused(path, "not UTF-8 text"))
}

/// The kernel's files under a root directory (`/` on a node; a fixture's
/// directory in the tests and a test build), as
/// crate::gpus::kernel_files::KernelFiles: each read bounded, opened without
/// blocking, a directory listing capped.
pub struct Root(pub std::path::PathBuf);

/// A file of Slurm's configuration (`gres.conf`, `topology.conf`): beside
/// SLURM_CONF in this process's environment, else in /etc/slurm. None where
/// it cannot be read.
pub fn slurm_conf_file(name: &str) -> Option<String> {
    use crate::gpus::kernel_files::KernelFiles;
    let conf = std::env::var_os("SLURM_CONF").map(std::path::PathBuf::from);
    let dir = conf
        .as_deref()
        .and_then(std::path::Path::parent)
        .map_or_else(|| "/etc/slurm".into(), std::path::Path::to_path_buf);
    Root("/".into()).read(&dir.join(name).to_string_lossy())
}

/// Largest kernel file read (a `local_cpulist` of 8,192 CPUs is far less).
const MAX_KERNEL_FILE: u64 = 64 << 10;

impl Root {
    fn path(&self, path: &str) -> std::path::PathBuf {
        self.0.join(path.trim_start_matches('/'))
    }
}

impl crate::gpus::kernel_files::KernelFiles for Root {
    fn read(&mut self, path: &str) -> Option<String> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(self.path(path))
            .ok()?;
        if !file.metadata().ok()?.file_type().is_file() {
            return None;
        }
        let mut bytes = Vec::new();
        file.take(MAX_KERNEL_FILE).read_to_end(&mut bytes).ok()?;
        String::from_utf8(bytes).ok()
    }

    fn link(&mut self, path: &str) -> Option<String> {
        let target = std::fs::read_link(self.path(path)).ok()?;
        target.to_str().map(str::to_string)
    }

    fn list(&mut self, dir: &str) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(self.path(dir)) else {
            return Vec::new();
        };
        let names = entries
            .take(crate::gpus::kernel_files::MAX_ENTRIES)
            .flatten();
        names
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .collect()
    }

    fn minor(&mut self, path: &str) -> Option<u32> {
        use std::os::unix::fs::FileTypeExt;
        let meta = std::fs::metadata(self.path(path)).ok()?;
        let rdev = meta.rdev();
        // Linux's dev_t: minor in bits 0-7 and 20-39.
        let minor = (rdev & 0xff) | ((rdev >> 12) & !0xff);
        (meta.file_type().is_char_device()).then_some(minor as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fixture root: files, a link and a directory, read as on a node.
    #[test]
    fn kernel_files_are_read_under_their_root() {
        use crate::gpus::kernel_files::KernelFiles;
        let dir = std::env::temp_dir().join(format!("tfc-root-{}", std::process::id()));
        let pci = dir.join("sys/bus/pci/devices/0000:41:00.0");
        std::fs::create_dir_all(&pci).unwrap();
        std::fs::write(pci.join("local_cpulist"), "0-3\n").unwrap();
        std::fs::create_dir_all(dir.join("sys/class/drm/renderD128")).unwrap();
        std::os::unix::fs::symlink(
            "../../../0000:41:00.0",
            dir.join("sys/class/drm/renderD128/device"),
        )
        .unwrap();
        let mut root = Root(dir.clone());
        let read = root.read("/sys/bus/pci/devices/0000:41:00.0/local_cpulist");
        assert_eq!(read.as_deref(), Some("0-3\n"));
        let link = root.link("/sys/class/drm/renderD128/device");
        assert_eq!(link.as_deref(), Some("../../../0000:41:00.0"));
        assert_eq!(root.list("/sys/bus/pci/devices"), ["0000:41:00.0"]);
        assert_eq!(root.read("/sys/bus/pci/devices"), None);
        assert_eq!(
            root.minor("/sys/bus/pci/devices/0000:41:00.0/local_cpulist"),
            None
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn amd_gpus_are_counted_from_kfd_topology() {
        let dir = std::env::temp_dir().join(format!("tfc-kfd-{}", std::process::id()));
        for (node, simds) in [("0", 0), ("1", 104), ("2", 104)] {
            let d = dir.join(node);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(
                d.join("properties"),
                format!("cpu_cores_count 0\nsimd_count {simds}\nmax_waves_per_simd 8\n"),
            )
            .unwrap();
        }
        assert_eq!(kfd_gpu_count(&dir), 2);
        assert_eq!(kfd_gpu_count(&dir.join("absent")), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A node with more entries than are read is refused, naming the
    /// bound, whatever order the kernel lists them in: never cut silently.
    #[test]
    fn past_the_bound_of_interface_entries_a_node_refuses() {
        let entry = |k: usize| {
            Some((
                format!("dummy{}", k % 300),
                Some(IpAddr::from([10, 0, (k / 250) as u8, (k % 250) as u8])),
            ))
        };
        let at = interfaces_from((0..MAX_INTERFACE_ENTRIES).map(entry)).unwrap();
        let addrs: usize = at.iter().map(|i| i.addrs.len()).sum();
        assert_eq!(addrs, 4096);
        let e = interfaces_from((0..=MAX_INTERFACE_ENTRIES).map(entry))
            .unwrap_err()
            .to_string();
        assert!(e.contains("more than 4096"), "{e}");
        assert!(e.contains("reads at most 4096"), "{e}");
        // Nameless entries count too: the bound is on what getifaddrs lists.
        let nameless = (0..=MAX_INTERFACE_ENTRIES).map(|_| None);
        assert!(interfaces_from(nameless).is_err());
    }

    #[test]
    fn the_nodes_interfaces_include_loopback() {
        let list = node_interfaces().unwrap();
        let lo = list.iter().find(|i| i.name == "lo").expect("lo");
        assert!(lo.addrs.contains(&IpAddr::from([127, 0, 0, 1])), "{lo:?}");
    }

    /// Loopback is up with a carrier in every namespace; a name the
    /// namespace lacks has no flags.
    #[test]
    fn an_interfaces_flags_come_from_this_namespace() {
        let lo = interface_flags("lo").unwrap().expect("lo");
        assert_eq!(lo & 0x1, 0x1, "IFF_UP: {lo:#x}");
        assert_eq!(lo & 0x1_0000, 0x1_0000, "IFF_LOWER_UP: {lo:#x}");
        assert_eq!(interface_flags("tfc-absent0").unwrap(), None);
    }

    #[test]
    fn only_small_regular_files_are_read() {
        let dir = std::env::temp_dir().join(format!("tfc-probe-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("hosts");
        std::fs::write(&file, "node1\nnode2\n").unwrap();
        assert_eq!(
            read_user_file(file.to_str().unwrap()).unwrap(),
            "node1\nnode2\n"
        );
        // A FIFO with no writer: opening it must not block.
        let fifo = dir.join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = read_user_file(fifo.to_str().unwrap()).unwrap_err();
        assert!(e.to_string().contains("a FIFO, not a regular file"), "{e}");
        let e = read_user_file("/dev/zero").unwrap_err();
        assert!(e.to_string().contains("a device"), "{e}");
        let big = dir.join("big");
        let f = std::fs::File::create(&big).unwrap();
        f.set_len(MAX_USER_FILE + 1).unwrap();
        let e = read_user_file(big.to_str().unwrap()).unwrap_err();
        assert!(e.to_string().contains("larger than"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
