//! Each task's CPUs and memory from its GPUs (`--tf-bind=gpu`, the
//! default; the core decides: crate::core::gpus::cpu_plan). `user_init`
//! reads the node's files once, on the host before any container plugin
//! moves a task: gres.conf, where each of the step's GPUs sits (the kernel's
//! files), and the CPUs Slurm gave the step (slurmstepd's own cgroup cpuset
//! and affinity, which are the step's). `task_init`, in the task's
//! single-threaded child just before exec, only applies its part: the
//! affinity mask (sched_setaffinity, inherited by every thread the program
//! starts, NCCL's among them), the memory policy (set_mempolicy, preferred
//! nodes) and TF_CLUSTER_CPUS. Never a refusal: binding is an optimisation,
//! and a node without the files binds nothing and says nothing.

use std::collections::HashMap;
use std::ffi::CString;
use std::path::PathBuf;

use super::super::handle::{Spank, notice};
use crate::core::Node;
use crate::core::cpulist::Cpus;
use crate::core::gpus::DEVICE_VARS;
use crate::core::gpus::cpu_plan::{CpuPlan, TaskPlace, explicit_cpu_bind};
use crate::core::gpus::gres_conf::gpu_devices;
use crate::core::gpus::kernel_files::KernelFiles;
use crate::core::gpus::topology::Topology;
use crate::core::os::{Root, slurm_conf_file};
use crate::core::preflight::gpu_indices;
use crate::core::settings::Bind;

/// The node's plan, made in `user_init`.
pub struct NodeBind {
    plan: CpuPlan,
    /// Each task uses its LOCAL_RANK-th GPU of the list it is shown.
    picks: bool,
    /// The step's tasks on this node.
    tasks: u32,
    /// TF_CLUSTER_CPUS also as Apptainer's (`--tf-apptainer-env`).
    mirror: bool,
}

/// In `user_init`: the node's plan, or None (nothing is bound).
pub fn prepare(
    spank: &Spank,
    node: &Node,
    gres: &str,
    host_env: &HashMap<String, String>,
) -> Option<NodeBind> {
    if node.settings().bind == Bind::Off {
        return None;
    }
    let given = host_env.get("SLURM_CPU_BIND").map(String::as_str);
    if let Some(given) = explicit_cpu_bind(given) {
        // Said once per step: by the node of rank 0.
        if node.here().iter().any(|&(rank, _)| rank == 0) {
            notice(&format!(
                "--cpu-bind={given} wins: each task keeps Slurm's binding rather than the CPUs near its GPUs (--tf-bind=off says nothing)"
            ));
        }
        return None;
    }
    let step_gpus = gpu_indices(host_env.get("SLURM_STEP_GPUS")?);
    let mut host = Root(PathBuf::from("/"));
    let cgroup = slurm_conf_file("cgroup.conf");
    let nodename = node.step().nodename.clone().unwrap_or_default();
    let devices = gpu_devices(gres, &nodename, &step_gpus);
    let topology = Topology::read(&mut Root(kernel_root(spank)), &devices);
    let local_ids = cgroup.as_deref().is_some_and(constrains_devices);
    let plan = CpuPlan::new(topology, step_cpus(&mut host)?, step_gpus, local_ids)?;
    let far = plan.far_gpus();
    if !far.is_empty() {
        let far: Vec<String> = far.iter().map(u32::to_string).collect();
        notice(&format!(
            "{}: none of the step's CPUs here ({}) is near GPU {}: tasks using only those keep Slurm's binding",
            if nodename.is_empty() {
                "this node"
            } else {
                &nodename
            },
            plan.step_cpus().list(),
            far.join(",")
        ));
    }
    Some(NodeBind {
        plan,
        picks: node.picks_gpu_by_local_rank(),
        tasks: node.here().len() as u32,
        mirror: node.settings().apptainer_env,
    })
}

/// In `task_init`, after the task's variables are set: its part of the
/// plan, by the device list it now has (ours, else Slurm's), and
/// TF_CLUSTER_CPUS naming the CPUs it runs on.
pub fn apply(spank: &Spank, bind: &NodeBind, vars: &[(CString, CString)], local: u32) {
    let ours = vars.iter().find_map(|(name, value)| {
        let name = name.to_str().ok()?;
        DEVICE_VARS
            .contains(&name)
            .then(|| value.to_string_lossy().into_owned())
    });
    // The environment read afresh: setting ours may have moved it.
    let slurms = || {
        let env = spank.env().ok()?;
        let set = DEVICE_VARS.iter().find_map(|n| env.get(n).ok().flatten());
        set.map(str::to_string)
    };
    let Some(list) = ours.or_else(slurms) else {
        return;
    };
    let pick = bind.picks.then_some(local);
    let TaskPlace::Bound { cpus, mems } = bind.plan.task(&list, pick, local, bind.tasks) else {
        return;
    };
    if let Err(why) = set_affinity(&cpus) {
        log::debug!("CPUs {} not bound: {why}", cpus.list());
        return;
    }
    if let Err(why) = prefer_memory(&mems) {
        log::debug!("memory on nodes {mems:?} not preferred: {why}");
    }
    if let Ok(value) = CString::new(cpus.list()) {
        let _ = spank.setenv_c(c"TF_CLUSTER_CPUS", &value);
        if bind.mirror {
            let _ = spank.setenv_c(c"APPTAINERENV_TF_CLUSTER_CPUS", &value);
            let _ = spank.setenv_c(c"SINGULARITYENV_TF_CLUSTER_CPUS", &value);
        }
    }
}

impl NodeBind {
    /// For the step's record: local task `local`'s CPUs and memory nodes,
    /// where the plugin sets its device list (a task bound by Slurm learns
    /// its list only in the task).
    pub fn placed(&self, node: &Node, local: u32) -> Option<(String, String)> {
        let list = node.gpus_of(local)?;
        let pick = self.picks.then_some(local);
        match self.plan.task(&list, pick, local, self.tasks) {
            TaskPlace::Bound { cpus, mems } => {
                let mems: Vec<String> = mems.iter().map(u32::to_string).collect();
                Some((cpus.list(), mems.join(",")))
            }
            _ => None,
        }
    }
}

/// cgroup.conf's `ConstrainDevices=yes`: device lists count from 0 within
/// the step's GPUs.
fn constrains_devices(text: &str) -> bool {
    text.lines().any(|l| {
        let l = l.split('#').next().unwrap_or_default().trim();
        l.split_once('=').is_some_and(|(k, v)| {
            k.trim().eq_ignore_ascii_case("ConstrainDevices")
                && v.trim().eq_ignore_ascii_case("yes")
        })
    })
}

/// The CPUs Slurm gave the step on this node: slurmstepd's affinity,
/// within its cgroup's effective cpuset (cgroup v2) where readable.
fn step_cpus(host: &mut Root) -> Option<Cpus> {
    let status = host.read("/proc/self/status")?;
    let allowed = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .and_then(Cpus::parse)?;
    let group = host.read("/proc/self/cgroup").and_then(|text| {
        let path = text
            .lines()
            .find_map(|l| l.strip_prefix("0::"))?
            .to_string();
        let file = format!(
            "/sys/fs/cgroup{}/cpuset.cpus.effective",
            path.trim_end_matches('/')
        );
        Cpus::parse(&host.read(&file)?).filter(|c| !c.is_empty())
    });
    Some(match group {
        Some(group) => allowed.and(&group),
        None => allowed,
    })
}

/// The root the kernel's files are read under: `/`; a test build lets the
/// step name a fixture's (TF_CLUSTER_TEST_KERNEL_ROOT), which no release
/// build reads.
#[cfg(feature = "fault-injection")]
pub(super) fn kernel_root(spank: &Spank) -> PathBuf {
    let given = spank.getenv("TF_CLUSTER_TEST_KERNEL_ROOT").ok().flatten();
    given
        .filter(|p| p.starts_with('/'))
        .map_or_else(|| PathBuf::from("/"), PathBuf::from)
}

#[cfg(not(feature = "fault-injection"))]
pub(super) fn kernel_root(_: &Spank) -> PathBuf {
    PathBuf::from("/")
}

/// This process's CPUs (the task's, before exec; every thread it starts
/// inherits them).
fn set_affinity(cpus: &Cpus) -> std::io::Result<()> {
    let mask = cpus.mask();
    // SAFETY: a mask of mask.len() words, its size in bytes, for this process.
    let rc = unsafe {
        libc::sched_setaffinity(0, mask.len() * 8, mask.as_ptr().cast::<libc::cpu_set_t>())
    };
    match rc {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// linux/mempolicy.h.
const MPOL_PREFERRED: libc::c_long = 1;
const MPOL_PREFERRED_MANY: libc::c_long = 5;

/// The task's memory preferred on `nodes`: one node MPOL_PREFERRED, more
/// MPOL_PREFERRED_MANY (Linux 5.15), else the first of them.
fn prefer_memory(nodes: &[u32]) -> std::io::Result<()> {
    let Some(&first) = nodes.first() else {
        return Ok(());
    };
    let set = |mode: libc::c_long, nodes: &[u32]| {
        let mask = Cpus::of(nodes.iter().copied()).mask();
        let maxnode = (mask.len() * 64 + 1) as libc::c_ulong;
        // SAFETY: a node mask of mask.len() words and its size in bits + 1.
        let rc = unsafe { libc::syscall(libc::SYS_set_mempolicy, mode, mask.as_ptr(), maxnode) };
        match rc {
            0 => Ok(()),
            _ => Err(std::io::Error::last_os_error()),
        }
    };
    if nodes.len() > 1 && set(MPOL_PREFERRED_MANY, nodes).is_ok() {
        return Ok(());
    }
    set(MPOL_PREFERRED, &[first])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constrained_devices_are_read_from_cgroup_conf() {
        assert!(constrains_devices(
            "CgroupPlugin=autodetect\nConstrainDevices=yes\n"
        ));
        assert!(!constrains_devices(
            "ConstrainDevices=no\n# ConstrainDevices=yes"
        ));
        assert!(!constrains_devices(""));
    }

    /// In this test's own process: its CPUs are those it was given, and a
    /// memory preference on node 0 is taken.
    #[test]
    fn the_mask_and_memory_policy_are_set() {
        let mut host = Root(PathBuf::from("/"));
        let now = step_cpus(&mut host).unwrap();
        let first = Cpus::of(now.iter().take(1));
        std::thread::spawn(move || {
            set_affinity(&first).unwrap();
            let mut host = Root(PathBuf::from("/"));
            let status = host.read("/proc/thread-self/status").unwrap();
            let line = status.lines().find(|l| l.starts_with("Cpus_allowed_list:"));
            assert_eq!(
                line.unwrap().split_whitespace().nth(1),
                Some(first.list().as_str())
            );
            prefer_memory(&[0]).unwrap();
        })
        .join()
        .unwrap();
    }
}
