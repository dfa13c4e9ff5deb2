//! NVIDIA's GPUs: `/dev/nvidiaN`, whose minor the driver lists with the
//! GPU's PCI address in `/proc/driver/nvidia/gpus/<pci>/information`
//! ("Device Minor: N", "Bus Location: 0000:41:00.0").

use super::kernel_files::{KernelFiles, MAX_ENTRIES, Vendor, trailing_number};

pub const VENDOR: Vendor = Vendor {
    name: "nvidia",
    claims: |device| trailing_number(device, "/dev/nvidia").is_some(),
    pci,
};

const GPUS: &str = "/proc/driver/nvidia/gpus";

fn pci(files: &mut dyn KernelFiles, device: &str) -> Option<String> {
    // The device's own minor; a fixture's plain file: its name's number.
    let minor = files
        .minor(device)
        .or_else(|| trailing_number(device, "/dev/nvidia"))?;
    for entry in files.list(GPUS).into_iter().take(MAX_ENTRIES) {
        let Some(info) = files.read(&format!("{GPUS}/{entry}/information")) else {
            continue;
        };
        if field(&info, "Device Minor").and_then(|m| m.parse().ok()) == Some(minor) {
            return Some(field(&info, "Bus Location").unwrap_or(&entry).to_string());
        }
    }
    None
}

/// `Name:   value` in the driver's information file.
fn field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.trim_start().strip_prefix(':'))
        .map(str::trim)
}
