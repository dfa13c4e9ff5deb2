//! The SPANK shell: gathers the step's facts from Slurm, runs the core, and
//! applies the result. Nothing here decides anything the core could. One
//! file per process it runs in, as NVIDIA's pyxis does: the exported hooks
//! (`hooks`, with the guard every hook runs in, `guard`), srun's side
//! (`srun`, with its Ctrl-C sentinel in `interrupt`), slurmstepd's side
//! (`stepd`), and what either asks of slurmctld (`slurmctld`).

mod bad_node;
mod bindings;
mod bounded_child;
mod bounded_io;
mod fault;
mod gpu_probe;
mod guard;
mod handle;
mod hooks;
mod interrupt;
mod logger;
mod options;
mod preflight;
mod private_dir;
mod record;
mod record_dir;
mod slurmctld;
mod srun;
mod stepd;
