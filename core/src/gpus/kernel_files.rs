//! What the node's topology is read through: the kernel's files by path
//! ([`KernelFiles`], answered from the host by crate::os::Root and from
//! fixtures by the tests), and what a GPU vendor declares ([`Vendor`]).

/// The most GPUs, NUMA nodes or driver entries looked at on one node.
pub const MAX_ENTRIES: usize = 1024;

/// The kernel's files, by their absolute paths (`/sys/…`, `/proc/…`,
/// `/dev/…`). Every answer is None or empty where the file is missing.
pub trait KernelFiles {
    /// A small text file's content.
    fn read(&mut self, path: &str) -> Option<String>;
    /// Where a symbolic link points, as written in the link.
    fn link(&mut self, path: &str) -> Option<String>;
    /// The names in a directory.
    fn list(&mut self, dir: &str) -> Vec<String>;
    /// The minor number of a character device.
    fn minor(&mut self, path: &str) -> Option<u32>;
}

/// How one vendor's device files lead to their PCI functions.
pub struct Vendor {
    pub name: &'static str,
    /// Whether gres.conf's device file is one of this vendor's.
    pub claims: fn(device: &str) -> bool,
    /// The PCI address (`0000:41:00.0`) of the GPU behind a device file.
    pub pci: fn(files: &mut dyn KernelFiles, device: &str) -> Option<String>,
}

/// `0000:41:00.0`: domain, bus, device, function, in hex.
pub fn is_pci_address(s: &str) -> bool {
    let hex = |p: &str, n: usize| p.len() == n && p.bytes().all(|b| b.is_ascii_hexdigit());
    let parts: Vec<&str> = s.split([':', '.']).collect();
    matches!(parts.as_slice(), [d, b, dev, f] if hex(d, 4) && hex(b, 2) && hex(dev, 2) && hex(f, 1))
}

/// The number a device file's name ends with (`/dev/nvidia3` → 3).
pub fn trailing_number(device: &str, prefix: &str) -> Option<u32> {
    let n = device.strip_prefix(prefix)?;
    (!n.is_empty() && n.len() <= 6 && n.bytes().all(|b| b.is_ascii_digit()))
        .then(|| n.parse().ok())
        .flatten()
}
