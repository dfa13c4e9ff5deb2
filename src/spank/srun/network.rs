//! The step's network as srun decides it: `--tf-network`, or the subnet of
//! every node's host-template name, resolved here (and, for a heterogeneous
//! step, once before the step exists: super::het).

use super::super::interrupt;
use crate::core::handoff::Verdict;
use crate::core::network;
use crate::core::os::ProcessEnv;
use crate::core::{self, Error, MAX_NODES, Probe, Result, Settings};

/// The step's network: `--tf-network`, or the subnet of every node's
/// template name, resolved here (srun is the user's own process: a slow DNS
/// delays this srun, never a slurmstepd). The nodes are the map's, else the
/// allocation's. A Ctrl-C ends the lookups (see super::super::interrupt).
pub fn network_for(
    settings: &Settings,
    verdict: &Verdict,
    job: u32,
) -> Result<Option<core::Network>> {
    let needs_hosts = settings.network.is_none() && settings.host_template.is_some();
    let hosts = match needs_hosts {
        false => None,
        true => Some(step_hosts(verdict, job).ok_or_else(|| {
            Error::new(
                "srun knows no node list to resolve the host template's names: name the network with --tf-network=IFNAME|CIDR",
            )
        })?),
    };
    // The components srun's word does not reach have the network srun
    // resolved before the step existed: a step it could not resolve it for
    // is refused as a whole.
    if needs_hosts && PASSES.load(std::sync::atomic::Ordering::Relaxed) > 1 {
        if let Some(Err(e)) = EARLY_NETWORK.get() {
            return Err(e.clone());
        }
    }
    let lookups = template_lookups(needs_hosts);
    network::decision::for_step(settings, hosts.iter().flat_map(|h| h.iter()), &lookups)
}

/// srun's lookups of the host template's names, ended by a Ctrl-C (see
/// [`interrupt`]) when there are any to make.
pub fn template_lookups(needed: bool) -> network::lookups::Lookups {
    let mut lookups =
        network::lookups::Lookups::new(std::sync::Arc::new(|name: &str| ProcessEnv.resolve(name)));
    // Only lookups need it: ended (and reaped) when `lookups` drops.
    if let Some(sentinel) = needed.then(interrupt::Sentinel::start).flatten() {
        lookups.interrupted = Box::new(move || sentinel.interrupted());
    }
    lookups
}

/// The passes of srun's option parsing so far: one per component of the
/// step (see super::super::options::end_pass).
pub static PASSES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// The network of a heterogeneous step's host template, as srun resolved it
/// before the step existed (see super::het::early_network).
pub static EARLY_NETWORK: std::sync::OnceLock<Result<Option<core::Network>>> =
    std::sync::OnceLock::new();

/// The step's nodes: the map's, else the allocation's (a superset): in a
/// heterogeneous job, that of the step's own component (`job`), whose
/// SLURM_JOB_NODELIST_HET_GROUP_k srun's environment holds; its
/// SLURM_JOB_NODELIST is component 0's in a batch script.
pub fn step_hosts(verdict: &Verdict, job: u32) -> Option<core::hostlist::HostList> {
    if let Verdict::Map { map, .. } = verdict {
        return Some(map.hosts.clone());
    }
    if let Some(hosts) = core::het::component_nodelist(&mut ProcessEnv, job)
        .ok()
        .flatten()
    {
        return Some(hosts);
    }
    ["SLURM_JOB_NODELIST", "SLURM_NODELIST"]
        .iter()
        .find_map(|v| std::env::var(v).ok())
        .and_then(|list| core::hostlist::HostList::parse(&list, MAX_NODES as usize).ok())
}
