//! The fast network: which interface of this node carries the step's data
//! connections, and the variables that tell the frameworks so.
//!
//! A step names its network in one of two ways: `--tf-network=ib0|CIDR`
//! (a setting, crate::addresses::Network), or the host template, whose names srun resolves
//! before launch (it is the user's process: DNS may take its time there) and
//! hands every task as the smallest subnet holding every node's address
//! (crate::addresses::covering, in its hand-off, crate::handoff). Each node
//! then only lists its own interfaces
//! (getifaddrs, no DNS, no fork: crate::os::node_interfaces) and picks the one
//! carrying an address on that network (crate::addresses::choose, in [`decision`]).
//! The components of a heterogeneous step srun's hand-off does not reach get
//! the network in srun's early word: srun resolves, before the step exists,
//! the template names of every component's nodes (each component's own
//! SLURM_JOB_NODELIST_HET_GROUP_k, crate::het::early_template_hosts). Only
//! without any word of srun's on the network (a heterogeneous step srun
//! allocated itself) a node looks its own template name up in /etc/hosts: a
//! bounded file read, never DNS.

//!
//! By concept: the subnet, address and interface types and the variables
//! that name an interface (crate::addresses, a grammar before the settings,
//! the OS and the sources that use it; no system call); srun's name
//! lookups with their deadline and Ctrl-C ([`lookups`], threads, srun only);
//! the decision ([`decision`]). No re-exports: each type has one path.

pub mod decision;
pub mod lookups;
