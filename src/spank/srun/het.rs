//! srun's tactics for a heterogeneous step, where its word on the step
//! reaches one component only: the whole step's map from one RPC per
//! component, an srun started outside the job told apart by slurmctld's
//! record, the network resolved before the step exists, and the step ended
//! by srun when it refused it. The heterogeneous job's facts and rules are
//! the core's (core::het).

use super::super::fault;
use super::super::handle::Spank;
use super::super::options;
use super::super::slurmctld::step_info;
use super::network::{EARLY_NETWORK, template_lookups};
use super::task_map::{Checks, fetch, with_map, without_map};
use crate::core::handoff::Verdict;
use crate::core::het::{self, OUTSIDE_HET};
use crate::core::network;
use crate::core::os::ProcessEnv;
use crate::core::step_number as number;
use crate::core::task_map;
use crate::core::{self, Error, Result, Settings};

/// Whether this srun launches a heterogeneous step of more than one
/// component, which its word on the step reaches in one component only:
/// its environment says so (Slurm set it for the step just before
/// `local_user_init`: SLURM_NTASKS the whole step's tasks, more than this
/// component's), or srun found it so (see [`INVISIBLE_HET`]). A
/// `--het-group=1` step is one component: srun's word reaches it whole.
/// Which jobs srun then ends is slurmctld's record (step_kill), not this.
pub fn het_step(spank: &Spank) -> bool {
    INVISIBLE_HET.load(std::sync::atomic::Ordering::Relaxed)
        || het::several_components(&mut ProcessEnv, spank.total_task_count().ok())
}

/// srun found its step to be a heterogeneous one its environment does not
/// describe (an srun given `--jobid` from outside the job).
pub static INVISIBLE_HET: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A heterogeneous step whose environment srun was not given: an srun
/// started from outside the job (`srun --jobid=J --het-group=0,1` from a
/// login shell) has none of the job's SLURM_JOB_ID_HET_GROUP_k and
/// SLURM_JOB_NODELIST_HET_GROUP_k, so it learns only its first component's
/// layout and the other components cannot rebuild theirs: refused, saying
/// so. Told from Slurm's record: Slurm sets srun's SLURM_NTASKS to the whole
/// step's task count (more than this component's `tasks`), and a
/// neighbouring job of the heterogeneous job has a step of the same id run
/// by this very srun (one more RPC, only then).
pub fn outside_het_step(spank: &Spank, job: u32, step: u32, tasks: u32) -> Result<()> {
    if !het::undescribed(&mut ProcessEnv, tasks) {
        return Ok(());
    }
    let host = short_hostname();
    let ours = |other: u32| {
        let info = match fault::active("step_info_rpc", Some(spank)) {
            true => return false,
            false => step_info::fetch(other, step),
        };
        info.is_ok_and(|i| i.srun.0 == std::process::id() && i.srun.1.as_deref() == host.as_deref())
    };
    let neighbours = [job.checked_add(1), job.checked_sub(1)];
    if !neighbours.into_iter().flatten().any(ours) {
        return Ok(());
    }
    INVISIBLE_HET.store(true, std::sync::atomic::Ordering::Relaxed);
    Err(Error::new(OUTSIDE_HET))
}

/// This host's short name, as srun records itself in the step (slurmctld's
/// `srun_host`).
pub fn short_hostname() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: writes at most buf.len() bytes into buf.
    if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name = std::str::from_utf8(&buf[..end]).ok()?;
    Some(name.split('.').next().unwrap_or(name).to_string())
}

/// A heterogeneous step: one RPC per component gives the whole step's map,
/// which must equal what the components srun's map cannot reach rebuild
/// (core::check_het_rebuild). Without the layouts, every task rebuilds.
pub fn het_map_for(
    spank: &Spank,
    settings: &Settings,
    job: u32,
    step: u32,
    components: &[(u32, core::hostlist::HostList)],
    info: Option<step_info::StepInfo>,
) -> Result<Verdict> {
    let start = std::time::Instant::now();
    let mut layouts = Vec::with_capacity(components.len());
    for &(component_job, _) in components {
        match fetch(spank, component_job, step) {
            Ok((component, _)) => layouts.push(component.into_parts()?),
            Err(e) => {
                let tasks = number(&mut ProcessEnv, "SLURM_NTASKS")?
                    .ok_or_else(|| Error::new("heterogeneous step without SLURM_NTASKS"))?;
                return without_map(settings, e, tasks, None);
            }
        }
    }
    let map = task_map::TaskMap::from_components(job, step, &layouts)?;
    let hosts_text = map.hosts.iter().collect::<Vec<_>>().join(",");
    let nodelists: Vec<_> = components.iter().map(|(_, nodes)| nodes.clone()).collect();
    let checks = Checks {
        // Slurm reserves each component's ports apart: component 0's
        // record says nothing of the others' nodes, so each component's
        // tasks check their own reservation.
        resv_ports: None,
        info: info.as_ref(),
        het_nodelists: Some(&nodelists),
    };
    with_map(spank, settings, map, hosts_text, checks, || {
        format!(
            "heterogeneous step {job}.{step} ({} components) from slurmctld in {} µs",
            components.len(),
            start.elapsed().as_micros()
        )
    })
}

/// For srun's early word in `init_post_opt`'s `pass`: the network of a
/// heterogeneous step's host template (a step of several components, in a
/// heterogeneous job, with a template and no `--tf-network`), resolved once
/// by the system's resolver (files and DNS alike) over every component's
/// nodes. Slurm copies srun's environment for each component before
/// `local_user_init`, whose hand-off reaches one component only: the
/// others' nodes, where slurmstepd resolves no name, take it from here.
/// Ok(None) otherwise. Err when it cannot be had: srun refuses the step in
/// `local_user_init` (super::network::network_for), and its early word
/// says so to every component before (`refused`), so that none starts the
/// user's command.
pub fn early_network(spank: &Spank, pass: u32) -> Result<Option<core::Network>> {
    if pass < 2 {
        return Ok(None);
    }
    let found = EARLY_NETWORK.get_or_init(|| {
        let mut settings = Settings::from_admin_args(spank.args()?)?;
        for key in ["host-template", "network"] {
            if let Some(value) = options::seen(&format!("tf-{key}")) {
                settings
                    .set(key, &value)
                    .map_err(|e| Error::new(format!("--tf-{e}")))?;
            }
        }
        if settings.network.is_some() || settings.host_template.is_none() {
            return Ok(None);
        }
        let Some(hosts) = core::het::early_template_hosts(&mut ProcessEnv, pass)? else {
            return Ok(None);
        };
        let lookups = template_lookups(true);
        network::decision::for_step(&settings, hosts.iter().map(String::as_str), &lookups)
    });
    found.clone()
}
