//! The fast network: which interface of this node carries the step's data
//! connections, and the variables that tell the frameworks so.
//!
//! A step names its network in one of two ways: `--tf-network=ib0|CIDR`
//! (a setting, [`addresses::Network`]), or the host template, whose names srun resolves
//! before launch (it is the user's process: DNS may take its time there) and
//! hands every task as the smallest subnet holding every node's address
//! ([`addresses::covering`], in its hand-off, crate::handoff). Each node
//! then only lists its own interfaces
//! (getifaddrs, no DNS, no fork: crate::os::node_interfaces) and picks the one
//! carrying an address on that network ([`addresses::choose`], in [`decision`]). Without srun's word (the
//! components of a heterogeneous step srun's variable does not reach) a node
//! looks its own template name up in /etc/hosts only: a bounded file read.

//!
//! By concept: the subnet, address and interface types and the variables
//! that name an interface ([`addresses`], no system call); srun's name
//! lookups with their deadline and Ctrl-C ([`lookups`], threads, srun only);
//! the decision ([`decision`]). No re-exports: each type has one path.

pub mod addresses;
pub mod decision;
pub mod lookups;
