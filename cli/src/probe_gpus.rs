//! `tf-cluster probe-gpus MINOR,...`: each named GPU's health as NVIDIA's
//! management library reports it, one line per GPU (core::gpu_health's
//! `MINOR PCI ok|REASON`). The library is loaded at run time
//! (`libnvidia-ml.so.1`, by the dynamic linker's own search), never linked:
//! on a node without it the probe prints nothing and exits 0. Meant to be
//! exec'd by the plugin's preflight, bounded in time by its caller; the
//! declarations below are written from NVIDIA's documented API (the few
//! calls used), not from its header.

use std::ffi::{CStr, c_char, c_int, c_uint, c_ulonglong, c_void};

use tf_cluster_core::gpu_health::{Fabric, GpuFacts, probe_line};
use tf_cluster_core::imex;

type Ret = c_int;
type Device = *mut c_void;

/// NVML_ERROR_NOT_SUPPORTED and NVML_ERROR_FUNCTION_NOT_FOUND: no fact.
const SUCCESS: Ret = 0;
/// NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC.
const UNCORRECTED: c_int = 1;
const VOLATILE: c_int = 0;

/// nvmlPciInfo_t as documented: the legacy bus id, domain, bus, device,
/// ids, then the bus id (32 bytes).
#[repr(C)]
struct PciInfo {
    bus_id_legacy: [c_char; 16],
    domain: c_uint,
    bus: c_uint,
    device: c_uint,
    pci_device_id: c_uint,
    pci_sub_system_id: c_uint,
    bus_id: [c_char; 32],
}

/// nvmlGpuFabricInfo_t as documented: cluster UUID, status, clique id,
/// state.
#[repr(C)]
struct FabricInfo {
    cluster_uuid: [u8; 16],
    status: Ret,
    clique_id: c_uint,
    state: u8,
}

/// The library, loaded.
struct Nvml(*mut c_void);

impl Nvml {
    fn open() -> Option<Nvml> {
        // SAFETY: a NUL-terminated name; dlopen returns NULL or a handle.
        let h = unsafe { libc::dlopen(c"libnvidia-ml.so.1".as_ptr(), libc::RTLD_NOW) };
        (!h.is_null()).then_some(Nvml(h))
    }

    /// The function `name`, as type `F` (a C function pointer).
    fn sym<F: Copy>(&self, name: &CStr) -> Option<F> {
        // SAFETY: dlsym on our handle.
        let p = unsafe { libc::dlsym(self.0, name.as_ptr()) };
        // SAFETY: F is the documented C signature of `name`, pointer-sized.
        (!p.is_null()).then(|| unsafe { std::mem::transmute_copy(&p) })
    }
}

/// The lines for the GPUs of `minors` the library knows; none without it.
pub fn probe(minors: &[u32]) -> String {
    let Some(nvml) = Nvml::open() else {
        return String::new();
    };
    let init: Option<unsafe extern "C" fn() -> Ret> = nvml.sym(c"nvmlInit_v2");
    // SAFETY: the documented signature.
    if init.is_none_or(|f| unsafe { f() } != SUCCESS) {
        return String::new();
    }
    let count: Option<unsafe extern "C" fn(*mut c_uint) -> Ret> =
        nvml.sym(c"nvmlDeviceGetCount_v2");
    let mut n: c_uint = 0;
    // SAFETY: the documented signature, into a local.
    if count.is_none_or(|f| unsafe { f(&mut n) } != SUCCESS) {
        return String::new();
    }
    let domain = nvl_domain();
    let mut out = String::new();
    for i in 0..n.min(1024) {
        if let Some(g) = facts(&nvml, i)
            && minors.contains(&g.minor)
        {
            out.push_str(&probe_line(&g, domain));
            out.push('\n');
        }
    }
    let shutdown: Option<unsafe extern "C" fn() -> Ret> = nvml.sym(c"nvmlShutdown");
    if let Some(f) = shutdown {
        // SAFETY: the documented signature.
        unsafe { f() };
    }
    out
}

/// Whether this node is in a multi-node NVLink domain (it has IMEX
/// channels): read on the host, where slurmstepd execs the probe.
fn nvl_domain() -> bool {
    use std::io::Read;
    let mut devices = String::new();
    let read = std::fs::File::open("/proc/devices")
        .and_then(|f| f.take(64 << 10).read_to_string(&mut devices));
    read.is_ok()
        && imex::in_domain(
            imex::node_has_channels(&devices),
            std::path::Path::new(imex::CHANNELS_DIR).is_dir(),
        )
}

/// GPU `index`'s facts (None: no handle or no minor).
fn facts(nvml: &Nvml, index: c_uint) -> Option<GpuFacts> {
    type ByIndex = unsafe extern "C" fn(c_uint, *mut Device) -> Ret;
    type U32Of = unsafe extern "C" fn(Device, *mut c_uint) -> Ret;
    type Pci = unsafe extern "C" fn(Device, *mut PciInfo) -> Ret;
    type Remapped =
        unsafe extern "C" fn(Device, *mut c_uint, *mut c_uint, *mut c_uint, *mut c_uint) -> Ret;
    type Ecc = unsafe extern "C" fn(Device, c_int, c_int, *mut c_ulonglong) -> Ret;
    type FabricOf = unsafe extern "C" fn(Device, *mut FabricInfo) -> Ret;
    let mut dev: Device = std::ptr::null_mut();
    let by_index: ByIndex = nvml.sym(c"nvmlDeviceGetHandleByIndex_v2")?;
    // SAFETY: the documented signatures, each into a local.
    unsafe {
        if by_index(index, &mut dev) != SUCCESS {
            return None;
        }
        let mut minor: c_uint = 0;
        let get_minor: U32Of = nvml.sym(c"nvmlDeviceGetMinorNumber")?;
        if get_minor(dev, &mut minor) != SUCCESS {
            return None;
        }
        let mut g = GpuFacts {
            minor,
            ..GpuFacts::default()
        };
        let mut pci: PciInfo = std::mem::zeroed();
        if let Some(f) = nvml.sym::<Pci>(c"nvmlDeviceGetPciInfo_v3")
            && f(dev, &mut pci) == SUCCESS
        {
            pci.bus_id[31] = 0;
            g.pci = CStr::from_ptr(pci.bus_id.as_ptr())
                .to_string_lossy()
                .into_owned();
        }
        let mut pending: c_uint = 0;
        if let Some(f) = nvml.sym::<U32Of>(c"nvmlDeviceGetRetiredPagesPendingStatus")
            && f(dev, &mut pending) == SUCCESS
        {
            g.retired_pages_pending = Some(pending != 0);
        }
        let (mut corr, mut unc, mut is_pending, mut failed) = (0, 0, 0, 0);
        if let Some(f) = nvml.sym::<Remapped>(c"nvmlDeviceGetRemappedRows")
            && f(dev, &mut corr, &mut unc, &mut is_pending, &mut failed) == SUCCESS
        {
            g.row_remap_failed = Some(failed != 0);
        }
        let mut errors: c_ulonglong = 0;
        if let Some(f) = nvml.sym::<Ecc>(c"nvmlDeviceGetTotalEccErrors")
            && f(dev, UNCORRECTED, VOLATILE, &mut errors) == SUCCESS
        {
            g.volatile_uncorrected = Some(errors);
        }
        let mut fabric: FabricInfo = std::mem::zeroed();
        if let Some(f) = nvml.sym::<FabricOf>(c"nvmlDeviceGetGpuFabricInfo")
            && f(dev, &mut fabric) == SUCCESS
            && fabric.state != 0
        {
            // State 0: NOT_SUPPORTED, no fabric attached.
            g.fabric = Some(Fabric {
                state: fabric.state,
                status: fabric.status as u32,
                clique_id: fabric.clique_id,
                cluster_uuid_zero: fabric.cluster_uuid.iter().all(|&b| b == 0),
            });
        }
        Some(g)
    }
}

/// `MINOR,...` as minors (at most 1024; anything else skipped).
pub fn minors(list: &str) -> Vec<u32> {
    list.split(',')
        .filter_map(tf_cluster_core::number::parse_u32)
        .take(1024)
        .collect()
}
