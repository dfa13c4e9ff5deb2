//! AMD's and Intel's GPUs: a DRM node (`/dev/dri/renderD128`,
//! `/dev/dri/card1`), whose `/sys/class/drm/<name>/device` link names the
//! GPU's PCI function. (AMD's `/dev/kfd` is every GPU's: no place.)

use super::kernel_files::{KernelFiles, Vendor, is_pci_address};

pub const VENDOR: Vendor = Vendor {
    name: "drm",
    claims: |device| name(device).is_some(),
    pci,
};

fn name(device: &str) -> Option<&str> {
    let n = device.strip_prefix("/dev/dri/")?;
    let ok = (n.starts_with("renderD") || n.starts_with("card"))
        && n.bytes().all(|b| b.is_ascii_alphanumeric());
    ok.then_some(n)
}

fn pci(files: &mut dyn KernelFiles, device: &str) -> Option<String> {
    let link = files.link(&format!("/sys/class/drm/{}/device", name(device)?))?;
    let last = link.trim_end_matches('/').rsplit('/').next()?;
    is_pci_address(last).then(|| last.to_string())
}
