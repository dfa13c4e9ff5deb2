//! The SPANK shell: gathers the step's facts from Slurm, runs the core, and
//! applies the result. Nothing here decides anything the core could.

mod bindings;
mod callbacks;
mod fault;
mod handle;
mod layout;
mod logger;
mod options;
mod srun;
