//! srun's one hand-off to the tasks of its step: everything srun decided
//! before launch, in one versioned variable, [`VAR`], set once by srun and
//! checked once on each node (the step it names, its version, its length).
//!
//! Format (version 1): `1;JOB.STEP` then `;`-separated fields, each at most
//! once, in this order:
//!
//! ```text
//! hosts=HOSTLIST;runs=RUNS | verdict=none|skip|refused|plain   exactly one of the two
//! record=HEX;record-log;requeue-on=N;requeue-max=N   after verdict=plain
//!                        only (requeue-max always; the record's directory
//!                        in hex): a step without a framework option
//! net=NETWORK            the step's network (none without the field)
//! kept=NAME,…            interface variables srun's environment held
//! leave-out=BITS         frameworks the step only inherited, left out (their
//!                        indices in crate::frameworks::FRAMEWORKS, as bits)
//! no-resv-ports          Slurm reserved no ports for the step
//! tres-bind=TEXT | no-tres-bind   the step's GPU binding as slurmctld recorded it
//! off-overridden         an inherited --tf-off, beaten by an srun option
//! restart=K              the job's restart count (K > 0)
//! secret=HEX             the step's secret (crate::secret), drawn once by
//!                        srun for every component of the step
//! ```
//!
//! e.g. `1;4242.0;hosts=node[1-3];runs=0*3,2,1;net=ib0;no-resv-ports`.
//! The map: `HOSTS` names the step's nodes (node index i = the i-th name),
//! `RUNS` the node index of every rank ([`Runs`](crate::runs::Runs)). A
//! verdict instead: `none`, srun could not get the layout (the tasks
//! rebuild it); `skip`, the step inherited a spec that does not fit it
//! (nothing is set); `refused`, srun
//! refused the step and said why (every task fails before exec); `plain`,
//! a step without a framework option that `--tf-record` or
//! `--tf-requeue-on` makes the plugin's (no variable is set; slurmstepd
//! writes its record or requeues its job as srun decided, [`Plain`]).
//!
//! srun's early word, `1;srun` then the fields `inherited=BITS`,
//! `off-overridden`, `restart=K`, `net=NETWORK`, `secret=HEX`, `refused`,
//! `given=NAME,…` (each at most once, in this order; `net`: a heterogeneous
//! step's network of its host template, resolved over every component's
//! nodes; `refused`: srun refused the step already, as that template cannot
//! be resolved; `given`: the `--tf-<key>` options given to srun itself): what
//! srun knows once it parsed its options, before slurmctld creates the step
//! ([`Early`]). srun sets it for every step that asks for the plugin or was
//! given a `--tf-<key>` option without a framework option, before
//! Slurm copies its environment for each component of the step; its word on
//! the step then replaces it where it reaches (every task of a plain step,
//! one component of a heterogeneous one). An `srun --async` step (Slurm
//! 26.05) has only this one: that srun runs no `local_user_init`.
//!
//! A `SLURM_` name: srun passes it even with `--export=NONE`. Only the tasks
//! of the step it names read it: a value made for another step (an outer
//! srun's, one the user exported) is not srun's word. srun sets it for every
//! step that asks for the plugin and empties one it finds for any other, as
//! Slurm copies srun's environment before `local_user_init` (a variable set
//! there wins, one removed does not).
//!
//! By job: the words, their fields and srun's setters (`word.rs`), the text
//! on the wire, one parser for both words (`wire.rs`), what a task makes of
//! the word (`applied.rs`).

mod applied;
#[cfg(test)]
mod tests;
mod wire;
mod word;

pub use applied::{Applied, Options, Said};
pub use word::{Early, FromSrun, Handoff, MAX_LEN, Plain, Record, StepBind, VAR, Verdict, Word};
