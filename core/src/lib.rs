//! The pure core: one [`Step`] (what Slurm says about the step on a node)
//! and the [`Settings`] in; a [`Node`] (the node's share, made once per node)
//! out, and from it one [`Injection`] (the variables to set) per task.
//!
//! Each file imports only files before it, in this order: the error, the
//! numbers and the limits; the grammars of Slurm's variables (host lists, topology.conf's blocks,
//! runs, tasks per node, distributions, srun's task map, roles, ports, GPU
//! devices and bindings, the network's `addresses`); [`os`], the one place
//! the core touches the operating system; the [`settings`] (what the step
//! asks for); the `source` of facts (what Slurm says, what the node has);
//! the [`network`]'s decision (and srun's name lookups, the one place the
//! core starts threads: [`network::lookups`]), the heterogeneous job's
//! variables ([`het`]) and the `step`; the `layout` (where every rank
//! runs: it knows no framework) and its NVLink domains (`nvl_domains`); the
//! node's `node_plan` and [`gpus`]; the
//! [`frameworks`] (each framework's variables, one module each, driven by
//! one table); and the `node`, then what a node checks of its share
//! before its tasks start ([`preflight`]) and the [`record`] of the step.
//!
//! What the plugin, the CLI, the fuzzers and the benches see: the grammars
//! (each parses one of Slurm's variables or the plugin's own), the facades
//! both processes share ([`handoff`], [`record`], [`settings`],
//! [`frameworks`], [`gpus`], [`het`], [`network`], [`os`], [`preflight`],
//! [`secret`], [`step_layout`]) and the items re-exported below. The steps
//! between them (the layout, the node's plan, the rendezvous, the roles'
//! world, TF_CONFIG's text, the step and its sources) are `pub(crate)`.
//! This file only names them and re-exports: no file imports it. So the SPANK shell and the CLI gather the facts and
//! apply the result; everything between is computation on values, but the
//! lookups srun runs through [`network::lookups`] and what [`os`] reads.

pub(crate) mod addresses;
pub mod cpulist;
pub mod distribution;
mod error;
pub mod exclusion;
pub mod frameworks;
pub mod gpu_health;
pub mod gpus;
pub mod handoff;
pub mod het;
#[cfg(test)]
mod het_tests;
pub mod hostlist;
pub mod imex;
mod injection;
pub(crate) mod layout;
mod limits;
pub mod network;
pub(crate) mod node;
pub(crate) mod node_plan;
#[cfg(test)]
mod node_tests;
pub mod number;
pub(crate) mod nvl_domains;
#[cfg(test)]
mod nvl_domains_tests;
pub mod os;
pub mod ports;
#[cfg(test)]
mod ports_tests;
pub mod preflight;
pub mod record;
pub(crate) mod rendezvous;
pub(crate) mod role_world;
#[cfg(test)]
mod role_world_tests;
pub mod roles;
#[cfg(test)]
mod run_id_tests;
pub mod runs;
pub mod secret;
pub mod settings;
#[cfg(test)]
mod settings_tests;
pub(crate) mod source;
pub(crate) mod step;
pub(crate) mod step_kind;
pub mod step_layout;
pub(crate) mod step_roles;
pub mod task_map;
pub mod tasks_per_node;
#[cfg(test)]
mod test_support;
pub(crate) mod tf_config;
pub mod topology_blocks;

pub use addresses::{Interface, Network};
pub use error::{Error, Kind, Result};
pub use frameworks::{FRAMEWORKS, Framework, Frameworks, Launch, check_before_launch};
pub use handoff::FromSrun;
pub use het::check_het_rebuild;
pub use injection::{APPTAINER_PREFIXES, Injection};
pub use layout::Layout;
pub use limits::{ENV_LIMIT, MAX_GPUS, MAX_NODES, MAX_TASKS, check_size};
pub use node::{Node, resolve, task_log_line};
pub use node_plan::TaskBinding;
pub use settings::Settings;
pub use source::{Given, Probe, Source};
pub use step::number as step_number;
pub use step::{Gathered, Handed, RUN_ID_VAR, Step, restart_count, run_id};
pub use step_kind::{Asked, StepKind};
pub use step_roles::component_tasks;
