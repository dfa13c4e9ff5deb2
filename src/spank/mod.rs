//! The SPANK shell: gathers the step's facts from Slurm, runs the core, and
//! applies the result. Nothing here decides anything the core could. One
//! file per process it runs in, as NVIDIA's pyxis does: the exported hooks
//! (`hooks`), srun's side (`srun`, with the slurmctld RPCs in
//! `step_layout_rpc` and `step_info_rpc`, and its Ctrl-C sentinel in
//! `interrupt`) and slurmstepd's side (`stepd`).

mod bindings;
mod bounded_io;
mod fault;
mod guard;
mod handle;
mod hooks;
mod interrupt;
mod logger;
mod options;
mod preflight;
mod private_dir;
mod record;
mod requeue;
mod slurm_api;
mod srun;
mod step_info_rpc;
mod step_kill_rpc;
mod step_layout_rpc;
mod stepd;
