//! The plugin loaded by real srun and slurmstepd on a 3-node Slurm cluster in
//! Docker (docker/testbed.sh) in its default configuration: every testbed test
//! that needs no other bring-up, one module per topic. Where each module (or
//! test) runs, on which suites and in which lane of docker/matrix.sh, is
//! declared in tests/where.tsv.

#[path = "../common/mod.rs"]
mod common;

mod bad_node;
mod concurrent;
mod containers;
mod elastic;
mod examples;
mod export;
mod faults;
mod frameworks;
mod gpus;
mod hang;
mod het;
mod hostile;
mod inherited;
mod launchers;
mod launchers_sbatch;
mod launchers_torchx;
mod layouts;
mod network;
mod options;
mod package;
mod ports;
mod prefix;
mod preflight;
mod preview;
mod ray;
mod record;
mod refusals;
mod refused_input;
mod requeue;
mod requeue_on;
mod roles;
mod templates;
mod tensorflow;
mod untouched;
