//! Each task's CPUs and memory over fixture nodes written as the kernel
//! shows them. Every expected value is read off the fixture by hand.

use std::collections::BTreeMap;

use super::cpu_plan::{CpuPlan, TaskPlace};
use super::gres_conf::gpu_devices;
use super::kernel_files::KernelFiles;
use super::topology::Topology;
use crate::cpulist::Cpus;

/// A node's kernel files: text files and links by absolute path.
#[derive(Default)]
struct Fixture {
    files: BTreeMap<String, String>,
    links: BTreeMap<String, String>,
}

impl KernelFiles for Fixture {
    fn read(&mut self, path: &str) -> Option<String> {
        self.files.get(path).cloned()
    }
    fn link(&mut self, path: &str) -> Option<String> {
        self.links.get(path).cloned()
    }
    fn list(&mut self, dir: &str) -> Vec<String> {
        let prefix = format!("{dir}/");
        let mut names: Vec<String> = self
            .files
            .keys()
            .chain(self.links.keys())
            .filter_map(|p| p.strip_prefix(&prefix)?.split('/').next())
            .map(str::to_string)
            .collect();
        names.dedup();
        names
    }
    fn minor(&mut self, _: &str) -> Option<u32> {
        None
    }
}

impl Fixture {
    fn file(&mut self, path: &str, text: &str) {
        self.files.insert(path.into(), format!("{text}\n"));
    }
    fn numa(&mut self, node: u32, cpus: &str) {
        self.file(
            &format!("/sys/devices/system/node/node{node}/cpulist"),
            cpus,
        );
    }
    fn pci(&mut self, pci: &str, cpus: &str, numa: i32) {
        let dir = format!("/sys/bus/pci/devices/{pci}");
        self.file(&format!("{dir}/local_cpulist"), cpus);
        self.file(&format!("{dir}/numa_node"), &numa.to_string());
    }
    /// An NVIDIA GPU of minor `minor` at `pci`; the driver's directory is
    /// named by the address, listed in another order than the minors.
    fn nvidia(&mut self, minor: u32, pci: &str, cpus: &str, numa: i32) {
        let info = format!(
            "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 0\nDevice Minor: \t {minor}\nBus Location: \t {pci}\n"
        );
        self.file(
            &format!("/proc/driver/nvidia/gpus/{pci}/information"),
            &info,
        );
        self.pci(pci, cpus, numa);
    }
    fn topology(&mut self, gres: &str, step_gpus: &[u32]) -> Topology {
        let devices = gpu_devices(gres, "node1", step_gpus);
        Topology::read(self, &devices)
    }
}

const NVIDIA_GRES: &str = "Name=gpu File=/dev/nvidia[0-7]\n";

fn cpus(list: &str) -> Cpus {
    Cpus::parse(list).unwrap()
}

fn bound(list: &str, mems: &[u32]) -> TaskPlace {
    TaskPlace::Bound {
        cpus: cpus(list),
        mems: mems.to_vec(),
    }
}

/// Two sockets of 32 CPUs (node 0: 0-31, node 1: 32-63), eight GPUs whose
/// minors are not in NUMA order: 0, 1, 4, 5 on socket 1; 2, 3, 6, 7 on 0.
fn two_sockets() -> Fixture {
    let mut f = Fixture::default();
    f.numa(0, "0-31");
    f.numa(1, "32-63");
    let sockets = [1, 1, 0, 0, 1, 1, 0, 0];
    for (minor, socket) in sockets.into_iter().enumerate() {
        let pci = format!("0000:{:02x}:00.0", 0x18 + 0x20 * minor);
        let local = ["0-31", "32-63"][socket];
        f.nvidia(minor as u32, &pci, local, socket as i32);
    }
    f
}

#[test]
fn two_sockets_with_gpus_out_of_numa_order() {
    let mut f = two_sockets();
    let all: Vec<u32> = (0..8).collect();
    let topology = f.topology(NVIDIA_GRES, &all);
    assert_eq!(topology.gpu(1).unwrap().pci, "0000:38:00.0");
    assert_eq!(topology.nodes.len(), 2);
    let plan = CpuPlan::new(topology, cpus("0-63"), all, false).unwrap();
    // PyTorch: every task sees 0-7 and uses its LOCAL_RANK-th. Socket 1's
    // GPUs 0, 1, 4, 5 share 32-63 in index order, socket 0's 2, 3, 6, 7
    // share 0-31: 8 CPUs each.
    let want = [
        ("32-39", 1),
        ("40-47", 1),
        ("0-7", 0),
        ("8-15", 0),
        ("48-55", 1),
        ("56-63", 1),
        ("16-23", 0),
        ("24-31", 0),
    ];
    for (k, (list, node)) in want.into_iter().enumerate() {
        let k = k as u32;
        assert_eq!(
            plan.task("0,1,2,3,4,5,6,7", Some(k), k, 8),
            bound(list, &[node])
        );
        // Slurm's own binding (--gpus-per-task=1): the task's list is its GPU.
        assert_eq!(plan.task(&k.to_string(), None, k, 8), bound(list, &[node]));
    }
    // One task with every GPU (torchrun's agent): the whole step, both nodes.
    assert_eq!(
        plan.task("0,1,2,3,4,5,6,7", None, 0, 1),
        bound("0-63", &[0, 1])
    );
    assert!(plan.far_gpus().is_empty());
}

/// Tasks shown the same GPUs and picking none split their CPUs.
#[test]
fn tasks_sharing_their_gpus_share_no_cpu() {
    let mut f = two_sockets();
    let topology = f.topology(NVIDIA_GRES, &[2, 3]);
    let plan = CpuPlan::new(topology, cpus("0-63"), vec![2, 3], false).unwrap();
    // GPUs 2 and 3 share socket 0's 0-31: 0-15 and 16-31; four tasks shown
    // both take a quarter of 0-31 each.
    assert_eq!(plan.task("2,3", None, 1, 4), bound("8-15", &[0]));
    assert_eq!(plan.task("2,3", None, 3, 4), bound("24-31", &[0]));
    assert_eq!(plan.task("3", None, 1, 2), bound("16-31", &[0]));
}

/// Eight NUMA nodes of 8 CPUs, GPU i local to node 7 - i.
#[test]
fn eight_domains() {
    let mut f = Fixture::default();
    for n in 0..8u32 {
        f.numa(n, &format!("{}-{}", 8 * n, 8 * n + 7));
    }
    for i in 0..8u32 {
        let n = 7 - i;
        let pci = format!("0000:{:02x}:00.0", 0x10 + i);
        f.nvidia(i, &pci, &format!("{}-{}", 8 * n, 8 * n + 7), n as i32);
    }
    let all: Vec<u32> = (0..8).collect();
    let plan = CpuPlan::new(f.topology(NVIDIA_GRES, &all), cpus("0-63"), all, false).unwrap();
    // TensorFlow's slices of four GPUs: 0-3 are on nodes 7, 6, 5, 4.
    assert_eq!(
        plan.task("0,1,2,3", None, 0, 2),
        bound("32-63", &[4, 5, 6, 7])
    );
    assert_eq!(
        plan.task("4,5,6,7", None, 1, 2),
        bound("0-31", &[0, 1, 2, 3])
    );
    assert_eq!(plan.task("6", None, 6, 8), bound("8-15", &[1]));
}

/// GB200: two Grace CPUs (nodes 0 and 1, 72 CPUs each), four GPUs, and
/// each GPU's memory a NUMA node with no CPU (2-5). The GPUs' PCI numa_node
/// names those memory nodes: memory still goes to the CPUs' node.
#[test]
fn gb200_memory_goes_to_the_cpus_node_never_a_cpu_less_one() {
    let mut f = Fixture::default();
    f.numa(0, "0-71");
    f.numa(1, "72-143");
    for n in 2..6 {
        f.numa(n, "");
    }
    let gpus = [("0008:01:00.0", "0-71"), ("0009:01:00.0", "0-71")];
    let more = [("0018:01:00.0", "72-143"), ("0019:01:00.0", "72-143")];
    for (i, (pci, local)) in gpus.into_iter().chain(more).enumerate() {
        f.nvidia(i as u32, pci, local, 2 + i as i32);
    }
    let gres = "Name=gpu File=/dev/nvidia[0-3]";
    let topology = f.topology(gres, &[0, 1, 2, 3]);
    assert_eq!(topology.gpu(2).unwrap().numa, Some(4));
    assert_eq!(topology.nodes.len(), 2);
    let plan = CpuPlan::new(topology, cpus("0-143"), vec![0, 1, 2, 3], false).unwrap();
    assert_eq!(plan.task("0,1,2,3", Some(0), 0, 4), bound("0-35", &[0]));
    assert_eq!(plan.task("0,1,2,3", Some(3), 3, 4), bound("108-143", &[1]));
}

/// An AMD node: eight GPUs as render nodes, found through /sys/class/drm;
/// 0-3 near socket 0 (0-47), 4-7 near socket 1 (48-95).
fn amd() -> Fixture {
    let mut f = Fixture::default();
    f.numa(0, "0-47");
    f.numa(1, "48-95");
    for i in 0..8u32 {
        let pci = format!("0000:{:02x}:00.0", 0x05 + 0x10 * i);
        let link = format!("/sys/class/drm/renderD{}/device", 128 + i);
        f.links.insert(link, format!("../../../{pci}"));
        let socket = (i / 4) as usize;
        f.pci(&pci, ["0-47", "48-95"][socket], socket as i32);
    }
    f
}

#[test]
fn amd_eight_gpus_from_render_nodes() {
    let gres = "NodeName=node[1-4] Name=gpu File=/dev/dri/renderD[128-135]";
    let all: Vec<u32> = (0..8).collect();
    let topology = amd().topology(gres, &all);
    assert_eq!(topology.gpu(5).unwrap().pci, "0000:55:00.0");
    let plan = CpuPlan::new(topology, cpus("0-95"), all, false).unwrap();
    // 48 CPUs for four GPUs: 12 each.
    assert_eq!(plan.task("5", None, 5, 8), bound("60-71", &[1]));
    assert_eq!(plan.task("0", None, 0, 8), bound("0-11", &[0]));
    // ConstrainDevices=yes: a step of GPUs 4 and 5 counts them 0 and 1.
    let topology = amd().topology(gres, &[4, 5]);
    let plan = CpuPlan::new(topology, cpus("0-95"), vec![4, 5], true).unwrap();
    assert_eq!(plan.task("0", None, 0, 2), bound("48-71", &[1]));
    assert_eq!(plan.task("1", None, 1, 2), bound("72-95", &[1]));
}

/// A step holding 16 cores of socket 0 only: socket 0's GPUs split them;
/// a GPU of socket 1 has none of the step's CPUs near it.
#[test]
fn a_partial_node_of_one_socket() {
    let mut f = two_sockets();
    let step_gpus = vec![0, 2, 3];
    let topology = f.topology(NVIDIA_GRES, &step_gpus);
    let plan = CpuPlan::new(topology, cpus("0-15"), step_gpus, false).unwrap();
    assert_eq!(plan.task("2", None, 1, 3), bound("0-7", &[0]));
    assert_eq!(plan.task("3", None, 2, 3), bound("8-15", &[0]));
    assert_eq!(plan.task("0", None, 0, 3), TaskPlace::Far);
    assert_eq!(plan.far_gpus(), [0]);
    // A GPU with a far one: the near one's CPUs.
    assert_eq!(plan.task("0,2", None, 0, 2), bound("0-7", &[0]));
}

/// A node without the kernel's files, and lists that name no index: nothing.
#[test]
fn without_the_files_nothing_is_bound() {
    let mut f = Fixture::default();
    let topology = f.topology(NVIDIA_GRES, &[0, 1]);
    assert_eq!(topology, Topology::default());
    assert_eq!(CpuPlan::new(topology, cpus("0-7"), vec![0, 1], false), None);
    let mut f = two_sockets();
    let plan = CpuPlan::new(f.topology(NVIDIA_GRES, &[0]), cpus("0-63"), vec![0], false).unwrap();
    assert_eq!(plan.task("GPU-8e2c", None, 0, 1), TaskPlace::Unknown);
    assert_eq!(plan.task("", None, 0, 1), TaskPlace::Unknown);
    assert_eq!(plan.task("5", None, 0, 1), TaskPlace::Unknown);
    assert_eq!(plan.task("0", Some(3), 0, 1), TaskPlace::Unknown);
}

/// The user's --cpu-bind wins unless it is none.
#[test]
fn an_explicit_cpu_bind_is_told_from_none() {
    use super::cpu_plan::explicit_cpu_bind;
    for none in [
        None,
        Some("none"),
        Some("quiet,none"),
        Some("verbose"),
        Some(""),
    ] {
        assert_eq!(explicit_cpu_bind(none), None, "{none:?}");
    }
    for given in [
        "quiet,cores",
        "verbose,map_cpu:0,1",
        "mask_cpu:0x3",
        "ldoms",
    ] {
        assert_eq!(explicit_cpu_bind(Some(given)), Some(given));
    }
}
