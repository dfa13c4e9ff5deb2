//! Where each of the node's GPUs sits, from the kernel's own files (no NVML,
//! no tool in the image): Slurm's GPU index → gres.conf's device file → the
//! GPU's PCI function (each vendor's way: [`VENDORS`]) → the CPUs local to it
//! (`local_cpulist`) and its NUMA node; and the node's NUMA nodes that hold
//! CPUs. Read through [`KernelFiles`], which the shell answers from the
//! host's files once per node (crate::os::Root) and the tests from fixtures.

use super::kernel_files::{KernelFiles, MAX_ENTRIES, Vendor, is_pci_address};
use super::{drm, nvidia};
use crate::cpulist::Cpus;

/// Every vendor: one file each, one line here.
pub const VENDORS: [Vendor; 2] = [nvidia::VENDOR, drm::VENDOR];

/// One GPU of the node: where it sits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuPlace {
    /// Slurm's index of the GPU on the node.
    pub index: u32,
    /// gres.conf's device file.
    pub device: String,
    /// Its PCI function.
    pub pci: String,
    /// The CPUs local to it (the kernel's `local_cpulist`).
    pub cpus: Cpus,
    /// Its NUMA node as the kernel says (None: -1 or unreadable). On GB200
    /// and GH200 this may be no node with CPUs: never where memory goes.
    pub numa: Option<u32>,
}

/// The node's GPUs and its NUMA nodes that hold CPUs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Topology {
    pub gpus: Vec<GpuPlace>,
    /// (node, its CPUs), CPU-less nodes (GPU memory) left out.
    pub nodes: Vec<(u32, Cpus)>,
}

impl Topology {
    /// From the device file of each of Slurm's GPU indices (gres.conf's
    /// order: crate::gpus::gres_conf). A GPU whose place cannot be read is
    /// left out: tasks using it are not bound.
    pub fn read(files: &mut dyn KernelFiles, devices: &[(u32, String)]) -> Topology {
        let mut gpus = Vec::new();
        for (index, device) in devices.iter().take(MAX_ENTRIES) {
            if let Some(place) = place(files, *index, device) {
                gpus.push(place);
            }
        }
        let nodes = if gpus.is_empty() {
            Vec::new()
        } else {
            cpu_nodes(files)
        };
        Topology { gpus, nodes }
    }

    pub fn gpu(&self, index: u32) -> Option<&GpuPlace> {
        self.gpus.iter().find(|g| g.index == index)
    }

    /// The NUMA nodes holding any of `cpus`, in order.
    pub fn nodes_of(&self, cpus: &Cpus) -> Vec<u32> {
        self.nodes
            .iter()
            .filter(|(_, c)| c.meets(cpus))
            .map(|(n, _)| *n)
            .collect()
    }
}

const PCI_DEVICES: &str = "/sys/bus/pci/devices";
const NUMA_NODES: &str = "/sys/devices/system/node";

fn place(files: &mut dyn KernelFiles, index: u32, device: &str) -> Option<GpuPlace> {
    let vendor = VENDORS.iter().find(|v| (v.claims)(device))?;
    let pci = (vendor.pci)(files, device)?.to_ascii_lowercase();
    if !is_pci_address(&pci) {
        return None;
    }
    let cpus = Cpus::parse(&files.read(&format!("{PCI_DEVICES}/{pci}/local_cpulist"))?)?;
    let numa = files
        .read(&format!("{PCI_DEVICES}/{pci}/numa_node"))
        .and_then(|n| n.trim().parse::<u32>().ok());
    Some(GpuPlace {
        index,
        device: device.to_string(),
        pci,
        cpus,
        numa,
    })
}

fn cpu_nodes(files: &mut dyn KernelFiles) -> Vec<(u32, Cpus)> {
    let mut nodes: Vec<(u32, Cpus)> = files
        .list(NUMA_NODES)
        .into_iter()
        .take(MAX_ENTRIES)
        .filter_map(|name| {
            let n: u32 = name.strip_prefix("node")?.parse().ok()?;
            let cpus = Cpus::parse(&files.read(&format!("{NUMA_NODES}/{name}/cpulist"))?)?;
            Some((n, cpus)).filter(|(_, c)| !c.is_empty())
        })
        .collect();
    nodes.sort();
    nodes
}
