//! Each task's CPUs and memory, chosen from its GPUs: the CPUs local to
//! them ([`Topology`]) within the CPUs Slurm gave the step on the node,
//! split so that tasks whose GPUs share a domain share no CPU; its memory
//! preferred on the NUMA nodes of those CPUs (never a CPU-less node: GPU
//! memory on GB200 and GH200). Made once per node; each task then asks for
//! its part ([`CpuPlan::task`]) with the device list it is given.

use super::topology::Topology;
use crate::cpulist::Cpus;
use crate::number::parse_u32;

/// The user's own CPU binding, where the step has one other than none:
/// srun's SLURM_CPU_BIND (`quiet,cores`, `verbose,map_cpu:0,1`, `none`),
/// which the user's own srun sets; forging it affects only their own tasks.
pub fn explicit_cpu_bind(value: Option<&str>) -> Option<&str> {
    let value = value?;
    let words = ["quiet", "verbose", "none", ""];
    value
        .split(',')
        .any(|t| !words.contains(&t.trim()))
        .then_some(value)
}

/// One node's plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuPlan {
    topology: Topology,
    /// The CPUs Slurm gave the step on this node.
    step: Cpus,
    /// Slurm's indices of the step's GPUs on this node.
    step_gpus: Vec<u32>,
    /// Each placed GPU of the step: its share of the CPUs near it (empty:
    /// none of the step's CPUs is near it).
    shares: Vec<(u32, Cpus)>,
    /// The device lists count from 0 within the step's GPUs (cgroup's
    /// `ConstrainDevices=yes`), not by Slurm's index.
    local_ids: bool,
}

/// What a task gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskPlace {
    /// These CPUs; its memory preferred on these NUMA nodes.
    Bound { cpus: Cpus, mems: Vec<u32> },
    /// None of the step's CPUs is near its GPUs: Slurm's binding stays.
    Far,
    /// No GPU, or one whose place is unknown: nothing is bound.
    Unknown,
}

impl CpuPlan {
    /// The plan; None where no GPU of the step has a known place (a node
    /// without the kernel's files: nothing is bound, nothing said).
    pub fn new(
        topology: Topology,
        step: Cpus,
        step_gpus: Vec<u32>,
        local_ids: bool,
    ) -> Option<CpuPlan> {
        let placed: Vec<u32> = step_gpus
            .iter()
            .copied()
            .filter(|&g| topology.gpu(g).is_some())
            .collect();
        if placed.is_empty() || step.is_empty() {
            return None;
        }
        // GPUs whose near CPUs in the step are the same set share them.
        let domain = |g: u32| {
            topology
                .gpu(g)
                .map(|p| p.cpus.and(&step))
                .unwrap_or_default()
        };
        let mut shares = Vec::new();
        for &g in &placed {
            let d = domain(g);
            let peers: Vec<u32> = placed.iter().copied().filter(|&p| domain(p) == d).collect();
            let i = peers.iter().position(|&p| p == g).unwrap_or(0);
            shares.push((g, d.part(i, peers.len())));
        }
        Some(CpuPlan {
            topology,
            step,
            step_gpus,
            shares,
            local_ids,
        })
    }

    /// The step's GPUs near none of its CPUs on this node.
    pub fn far_gpus(&self) -> Vec<u32> {
        let far = self.shares.iter().filter(|(_, c)| c.is_empty());
        far.map(|(g, _)| *g).collect()
    }

    /// The step's CPUs on this node.
    pub fn step_cpus(&self) -> &Cpus {
        &self.step
    }

    /// The part of local task `local` (of `tasks` on the node) given the
    /// device list `list` (Slurm's tokens). `pick`: the task uses the
    /// `pick`-th GPU of its list only (PyTorch's LOCAL_RANK).
    pub fn task(&self, list: &str, pick: Option<u32>, local: u32, tasks: u32) -> TaskPlace {
        let Some(mut own) = self.indices(list) else {
            return TaskPlace::Unknown;
        };
        if let Some(k) = pick {
            match own.get(k as usize) {
                Some(&g) => own = vec![g],
                None => return TaskPlace::Unknown,
            }
        }
        let mut cpus = Cpus::default();
        for g in &own {
            match self.shares.iter().find(|(s, _)| s == g) {
                Some((_, share)) => cpus = cpus.or(share),
                None => return TaskPlace::Unknown,
            }
        }
        if cpus.is_empty() {
            return TaskPlace::Far;
        }
        // Every task shown every GPU and picking none: the tasks split them.
        let all = self.shares.iter().all(|(g, _)| own.contains(g));
        if pick.is_none() && all && tasks > 1 {
            cpus = cpus.part(local as usize, tasks as usize);
        }
        let mems = self.topology.nodes_of(&cpus);
        TaskPlace::Bound { cpus, mems }
    }

    /// Slurm's indices of a device list's GPUs (None: empty, or a token
    /// that is no index, such as a UUID).
    fn indices(&self, list: &str) -> Option<Vec<u32>> {
        if list.is_empty() {
            return None;
        }
        list.split(',')
            .map(|t| {
                let n = parse_u32(t)?;
                match self.local_ids {
                    true => self.step_gpus.get(n as usize).copied(),
                    false => Some(n),
                }
            })
            .collect()
    }
}
