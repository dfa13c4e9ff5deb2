//! The GPUs of each task: one device rule per framework, under every way of
//! asking Slurm for GPUs (docs/layouts-and-gpus.md has the table).
//!
//! Slurm's gres plugin writes one device list per task into every vendor
//! variable its gres.conf flags name (CUDA_VISIBLE_DEVICES,
//! ROCR_VISIBLE_DEVICES, ZE_AFFINITY_MASK, GPU_DEVICE_ORDINAL; all four by
//! default), the same tokens in each. With `--gpus-per-task`, `--gpu-bind`
//! or `--ntasks-per-gpu` it binds GPUs per task itself and slurmstepd says
//! how in SLURMD_TRES_BIND ([`GpuBind`]). The rules:
//!
//! - TensorFlow: Slurm's per-task binding is kept; otherwise local task k
//!   gets the k-th slice of the node's list (`4,5,6,7` → `4,5` | `6,7`), in
//!   Slurm's own tokens; a slice of 0 GPUs leaves the list as Slurm set it.
//! - JAX: an exclusive per-task binding is kept, JAX_LOCAL_DEVICE_IDS =
//!   0..m-1; a binding that lets tasks share GPUs is refused; without one,
//!   the k-th slice as for TensorFlow, ids 0..s-1. More tasks than GPUs is
//!   refused.
//! - PyTorch (`set_device(LOCAL_RANK)`): every local task sees the node's
//!   whole list, local rank k using the k-th GPU; a per-task binding is
//!   refused (LOCAL_RANK would name a GPU the task cannot see), and so are
//!   more tasks than GPUs. With JAX too, local task k's JAX_LOCAL_DEVICE_IDS
//!   are k, k+L, … within the whole list (its PyTorch GPU among them).
//!
//! All functions here are pure: the task's variables come in, the plan goes
//! out; [`check_before_launch`] is srun's early form of the same refusals.
//!
//! One file per concept: [`devices`] (the vendor variables Slurm sets),
//! [`bind`] (Slurm's binding, SLURMD_TRES_BIND), [`rules`] (what the
//! frameworks ask of the GPUs), [`refusals`] (the texts that refuse a
//! request), [`plan`] (one node's GPU plan) and [`request`] (srun's check of
//! the request before launch); where each GPU sits ([`topology`], read from
//! the kernel's files ([`kernel_files`]) through each vendor's file, [`nvidia`] and [`drm`], by
//! gres.conf's device files, [`gres_conf`]) and each task's CPUs and memory
//! chosen from its GPUs ([`cpu_plan`]). Whether a node's GPUs are counted is a fact of
//! the step (crate::step::needs_probe).

pub mod bind;
pub mod cpu_plan;
#[cfg(test)]
mod cpu_plan_tests;
pub mod devices;
pub mod drm;
pub mod gres_conf;
pub mod kernel_files;
pub mod nvidia;
pub mod plan;
#[cfg(test)]
mod plan_tests;
pub mod refusals;
pub mod request;
pub mod rules;
pub mod topology;

pub use bind::GpuBind;
pub use devices::{DEVICE_VARS, MAX_GPUS, Visible};
pub use plan::{GpuPlan, NodeGpus};
pub use request::{SrunRequest, check_before_launch};
pub use rules::Rules;
