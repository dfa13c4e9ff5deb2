//! srun's side: the options' checks as srun parses them, whether the spec
//! was only inherited from the job, and the decision for a step that asked
//! for the plugin, made once in `local_user_init` after slurmctld created
//! the step: check the step, fetch its task map, and hand every task the map
//! or a verdict, with the rest of srun's word, in one variable
//! (core::handoff). srun decides, tasks apply.

use std::sync::OnceLock;

use super::guard::guard;
use super::handle::Spank;
use super::options::{self, inherited_var, inherited_var_of};
use super::{fault, interrupt, step_info_rpc, step_kill_rpc, step_layout_rpc};
use crate::core::frameworks::{FRAMEWORKS, Frameworks};
use crate::core::gpus;
use crate::core::handoff::{self, Early, Handoff, Record, Verdict};
use crate::core::het::{self, OUTSIDE_HET};
use crate::core::network;
use crate::core::os::ProcessEnv;
use crate::core::secret::{self, Secret};
use crate::core::step::number;
use crate::core::task_map;
use crate::core::{self, Error, Kind, MAX_NODES, Probe, Result, Settings};

/// srun's state, from its start to its `local_user_init`.
pub struct Srun {
    /// srun's environment at its start named no job and no submit directory,
    /// so Slurm's mark of an allocation srun made itself (see
    /// [`Srun::own_allocation`]) can be read in `local_user_init`.
    started_outside: bool,
    /// The step's secret, drawn once for all its components (srun parses
    /// its options once per component of a heterogeneous step); None when
    /// the kernel gave no random bytes.
    secret: OnceLock<Option<Secret>>,
}

impl Srun {
    pub fn new() -> Srun {
        Srun {
            started_outside: !["SLURM_JOB_ID", "SLURM_JOBID", SUBMIT_DIR]
                .iter()
                .any(|v| std::env::var_os(v).is_some()),
            secret: OnceLock::new(),
        }
    }

    /// The step's secret (core::secret), from the kernel's random source:
    /// srun's alone to draw, handed to every task in its word.
    fn secret(&self) -> Option<Secret> {
        self.secret
            .get_or_init(|| {
                let mut bytes = [0u8; secret::LEN];
                // SAFETY: fills the array; up to 256 bytes come whole.
                let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
                (n == bytes.len() as isize).then(|| Secret::from_bytes(bytes))
            })
            .clone()
    }

    /// An explicit srun option beats an inherited one: a `--tf-off` only
    /// handed down by sbatch/salloc (or exported as their variable) does not
    /// turn off a framework option given to this srun itself.
    fn off_overridden(&self) -> bool {
        let only_inherited = std::env::var_os(inherited_var_of(options::ALL_OFF)).is_some()
            && !options::given_here(options::ALL_OFF);
        only_inherited && FRAMEWORKS.iter().any(|f| options::given_here(f.option))
    }

    /// srun made the step's allocation itself: its exit ends the job, so it
    /// may refuse before launch (inside an existing allocation the created
    /// step would stay behind). Decided from what srun did, not from how its
    /// command line is spelled (`--jobi=22` is getopt's `--jobid=22`): only
    /// when srun allocates does it set SLURM_SUBMIT_DIR in its own
    /// environment before local_user_init (measured on 22.05, 24.11, 26.05;
    /// SLURM_JOB_ID and SLURM_JOB_NAME it sets either way). Unknown (the
    /// variable exported from the start) counts as an existing allocation,
    /// the safe side.
    fn own_allocation(&self) -> bool {
        self.started_outside && std::env::var_os(SUBMIT_DIR).is_some()
    }

    /// The frameworks of `settings` whose option leaves unfitting steps
    /// alone and came only from the job (sbatch/salloc), not from this srun.
    fn only_inherited(&self, settings: &Settings) -> Frameworks {
        let mut found = Frameworks::default();
        for &f in FRAMEWORKS.iter() {
            if settings.frameworks.contains(f)
                && f.skip_when_inherited
                && std::env::var_os(inherited_var(f)).is_some()
                && !options::given_here(f.option)
            {
                found = found.with(f);
            }
        }
        found
    }

    /// At the end of each pass of srun's option parsing (one per component
    /// of a heterogeneous step), before slurmctld creates the step and
    /// before Slurm copies srun's environment for any component: counts the
    /// pass ([`options::end_pass`]) and sets srun's early word for a step
    /// that asks for the plugin, so that every component holds srun's word
    /// (the hand-off on the step replaces it where it reaches) and none a
    /// value the user exported or an outer step left. A step that asks for
    /// nothing is left as it is, but for such a value, emptied. It always
    /// succeeds: what fails is refused in `local_user_init`.
    pub fn init_post_opt(&self, spank: &Spank) -> i32 {
        options::end_pass();
        let _ = guard("init_post_opt", Some(spank), || {
            // A `--tf-off` turns every framework off unless it was only
            // inherited and a framework option given to srun beats it.
            let off = options::seen(options::ALL_OFF).is_some() && !self.off_overridden();
            let pass = PASSES.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            if options::seen_asking() && !off {
                set(self.early(early_network(spank, pass)).encode());
            } else if std::env::var_os(handoff::VAR).is_some() {
                set(String::new());
            }
            Ok(())
        });
        0
    }

    /// What srun knows before the step exists ([`Early`]), from what its
    /// option callbacks saw (Slurm answers no `spank_option_getopt` in
    /// `init_post_opt`), with a heterogeneous step's `network`.
    fn early(&self, network: Option<network::addresses::Network>) -> Early {
        let mut inherited = Frameworks::default();
        for &f in FRAMEWORKS.iter() {
            let asked = options::seen(f.option).is_some_and(|v| v != options::OFF);
            if asked
                && f.skip_when_inherited
                && std::env::var_os(inherited_var(f)).is_some()
                && !options::given_here(f.option)
            {
                inherited = inherited.with(f);
            }
        }
        Early::new(
            inherited,
            self.off_overridden(),
            // A malformed count is refused in local_user_init.
            core::step::restart_count(&mut ProcessEnv).unwrap_or(0),
            network,
            self.secret(),
        )
    }

    /// After slurmctld created the step and before anything is launched:
    /// check the step, fetch its task map, and hand the tasks the map or a
    /// verdict. It fails only when srun made its own allocation.
    pub fn local_user_init(&self, spank: &Spank) -> i32 {
        // Decided once: the step's settings and srun's word both follow it.
        let off_overridden = self.off_overridden();
        let rc = guard(
            "local_user_init",
            Some(spank),
            || match options::step_settings(spank, off_overridden) {
                Ok(Some(settings)) => self.decide(spank, &settings, off_overridden),
                Ok(None) => {
                    // A hand-off the user exported or an outer step left
                    // would reach the tasks (a variable removed here still
                    // does): emptied, it names no step.
                    if std::env::var_os(handoff::VAR).is_some() {
                        set(String::new());
                    }
                    Ok(())
                }
                Err(e) => self.refuse(spank, e, undecided(spank, off_overridden, 0, None)?),
            },
        );
        if self.own_allocation() { rc } else { 0 }
    }

    /// Decides for a step that asked for the plugin. Err: refuse now (srun
    /// exits, nothing launched); Ok: srun launches, the tasks apply the
    /// variable. A step that does not fit leaves out the frameworks it only
    /// inherited with a leave-unfitting-steps-alone option, those only: the
    /// others are decided again without them.
    fn decide(&self, spank: &Spank, settings: &Settings, off_overridden: bool) -> Result<()> {
        // The job's restart count, learnt once for the whole step from
        // srun's environment (a requeued job's batch step has
        // SLURM_RESTART_COUNT; the SPANK item S_SLURM_RESTART_COUNT is
        // always 0) and carried to every task in the hand-off, so every node
        // writes the same ids.
        let restart_count = match core::step::restart_count(&mut ProcessEnv) {
            Ok(n) => n,
            Err(e) => return self.refuse(spank, e, undecided(spank, off_overridden, 0, None)?),
        };
        let mut handoff = undecided(spank, off_overridden, restart_count, self.secret())?;
        let e = match decide_for(spank, settings, &mut handoff) {
            Ok(()) => return hand_off(spank, &handoff),
            Err(e) => e,
        };
        let left_out = self.only_inherited(settings);
        // Interrupted, the user asked for no more lookups: refused as is.
        if left_out.is_empty() || e.kind() == Kind::Interrupted {
            return self.refuse(spank, e, handoff);
        }
        let names: Vec<String> = left_out.iter().map(|f| format!("--{}", f.option)).collect();
        let warn = || {
            log::warn!(
                "{e}; the {} inherited from the job is not applied to this step (give this srun {}=VALUE, or {}=off)",
                names.join(" and "),
                names[0],
                names[0]
            )
        };
        let mut rest = settings.clone();
        rest.frameworks = Frameworks::default();
        for f in settings
            .frameworks
            .iter()
            .filter(|&f| !left_out.contains(f))
        {
            rest.frameworks = rest.frameworks.with(f);
        }
        if rest.frameworks.is_empty() {
            warn();
            handoff.skip();
            return hand_off(spank, &handoff);
        }
        // What the step asked of srun itself must fit on its own: if it does
        // not, that is the step's refusal (and nothing is said of the rest).
        match decide_for(spank, &rest, &mut handoff) {
            Ok(()) => {
                warn();
                handoff.leave_out(left_out);
                hand_off(spank, &handoff)
            }
            Err(e) => self.refuse(spank, e, handoff),
        }
    }

    /// What cannot run: refused before launch when srun can end the job,
    /// else handed to the tasks to fail.
    fn refuse(&self, spank: &Spank, e: Error, mut handoff: Handoff) -> Result<()> {
        // Interrupted too: failing srun inside an existing allocation would
        // leave the created step RUNNING (srun's shepherd asks slurmctld to
        // kill it, measured to no effect on 22.05, 24.11, 26.05): its tasks refuse
        // it instead, before the user's command, and the step ends.
        if self.own_allocation() {
            return Err(e);
        }
        log::error!("{e}");
        handoff.refuse();
        set(handoff.encode());
        // srun's word reaches one component of a heterogeneous step: the
        // others, with only srun's early word, cannot know that srun refused
        // the step, so srun ends it itself once it is launched.
        if let Some(leader) = het_step(spank) {
            let (job, step) = handoff.job_step();
            let ended = std::thread::Builder::new()
                .name("tf-cluster-end".into())
                .spawn(move || step_kill_rpc::end_from_srun(job, step, leader));
            if let Err(e) = ended {
                log::warn!("cannot end the refused heterogeneous step: {e}");
            }
        }
        Ok(())
    }
}

/// Whether this srun launches a heterogeneous step of more than one
/// component, which its word on the step reaches in one component only:
/// Some(the leader's job, when it is another job than this component's).
/// Its environment says so (Slurm set it for the step just before
/// `local_user_init`: SLURM_JOB_ID is the leader's, SLURM_NTASKS the whole
/// step's tasks, more than this component's), or srun found it so (see
/// [`INVISIBLE_HET`]). A `--het-group=1` step is one component: srun's word
/// reaches it whole.
fn het_step(spank: &Spank) -> Option<Option<u32>> {
    let invisible = INVISIBLE_HET.load(std::sync::atomic::Ordering::Relaxed);
    if !(invisible || het::several_components(&mut ProcessEnv, spank.total_task_count().ok())) {
        return None;
    }
    let job = spank.job_id().ok()?;
    let leader = std::env::var("SLURM_JOB_ID")
        .ok()
        .and_then(|named| het::leader(job, &named));
    Some(leader)
}

/// srun found its step to be a heterogeneous one its environment does not
/// describe (an srun given `--jobid` from outside the job).
static INVISIBLE_HET: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// srun's hand-off on its step before it decided (a verdict of `none`).
fn undecided(
    spank: &Spank,
    off_overridden: bool,
    restart_count: u32,
    secret: Option<Secret>,
) -> Result<Handoff> {
    Ok(Handoff::undecided(
        spank.job_id()?,
        spank.step_id()?,
        off_overridden,
        restart_count,
        secret,
    ))
}

/// Decides the step's layout and network into `handoff`, whole within
/// core::handoff::MAX_LEN.
fn decide_for(spank: &Spank, settings: &Settings, handoff: &mut Handoff) -> Result<()> {
    let verdict = map_for(spank, settings, handoff)?;
    let network = network_for(settings, &verdict, handoff.job_step().0)?;
    let kept = network::decision::kept(|name| std::env::var_os(name).is_some());
    handoff.decided(verdict, network, kept)
}

/// Hands `handoff` to every task of the step, in its one variable.
fn hand_off(spank: &Spank, handoff: &Handoff) -> Result<()> {
    let value = match handoff.garbled() {
        Some(garbled) if fault::active("map_garbage", Some(spank)) => garbled,
        _ => handoff.encode(),
    };
    set(value);
    Ok(())
}

/// Sets the hand-off, which every task of the step inherits.
fn set(value: String) {
    // SAFETY: srun's launch threads read its environment only after this
    // callback returns (the value reaches the tasks from there).
    unsafe { std::env::set_var(handoff::VAR, value) };
}

/// What srun sets in its own environment once it allocated the job itself.
const SUBMIT_DIR: &str = "SLURM_SUBMIT_DIR";

/// The step's network: `--tf-network`, or the subnet of every node's
/// template name, resolved here (srun is the user's own process: a slow DNS
/// delays this srun, never a slurmstepd). The nodes are the map's, else the
/// allocation's. A Ctrl-C ends the lookups (see [`interrupt`]).
fn network_for(
    settings: &Settings,
    verdict: &Verdict,
    job: u32,
) -> Result<Option<network::addresses::Network>> {
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
fn template_lookups(needed: bool) -> network::lookups::Lookups {
    let mut lookups =
        network::lookups::Lookups::new(std::sync::Arc::new(|name: &str| ProcessEnv.resolve(name)));
    // Only lookups need it: ended (and reaped) when `lookups` drops.
    if let Some(sentinel) = needed.then(interrupt::Sentinel::start).flatten() {
        lookups.interrupted = Box::new(move || sentinel.interrupted());
    }
    lookups
}

/// The passes of srun's option parsing so far: one per component of the
/// step (see [`options::end_pass`]).
static PASSES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// The network of a heterogeneous step's host template, as srun resolved it
/// before the step existed (see [`early_network`]).
static EARLY_NETWORK: std::sync::OnceLock<Result<Option<network::addresses::Network>>> =
    std::sync::OnceLock::new();

/// For srun's early word in `init_post_opt`'s `pass`: the network of a
/// heterogeneous step's host template (a step of several components, in a
/// heterogeneous job, with a template and no `--tf-network`), resolved once
/// by the system's resolver (files and DNS alike) over every component's
/// nodes. Slurm copies srun's environment for each component before
/// `local_user_init`, whose hand-off reaches one component only: the
/// others' nodes, where slurmstepd resolves no name, take it from here.
/// None otherwise, or when it cannot be resolved (the step is then refused
/// in `local_user_init`, see [`network_for`]).
fn early_network(spank: &Spank, pass: u32) -> Option<network::addresses::Network> {
    if pass < 2 {
        return None;
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
    found.as_ref().ok().cloned().flatten()
}

/// The step's nodes: the map's, else the allocation's (a superset): in a
/// heterogeneous job, that of the step's own component (`job`), whose
/// SLURM_JOB_NODELIST_HET_GROUP_k srun's environment holds; its
/// SLURM_JOB_NODELIST is component 0's in a batch script.
fn step_hosts(verdict: &Verdict, job: u32) -> Option<core::hostlist::HostList> {
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

/// srun's verdict on the layout of a step that may run: the map, or
/// `Rebuild` when Slurm gave none (the tasks then rebuild the layout); with
/// slurmctld's record of the step in `handoff`.
fn map_for(spank: &Spank, settings: &Settings, handoff: &mut Handoff) -> Result<Verdict> {
    let (job, step) = handoff.job_step();
    // slurmctld's record of the step, first: its reserved ports and GPU
    // binding are srun's word even where the layout cannot be had.
    let info = step_info(spank, job, step);
    handoff.record(info.as_ref().map(|i| Record {
        resv_ports: i.resv_ports.is_some(),
        tres_bind: i.tres_bind.as_deref(),
    }));
    if let Some(components) = het::components(&mut ProcessEnv)? {
        return het_map_for(spank, settings, job, step, &components, info);
    }
    let (component, took) = match fetch(spank, job, step) {
        Ok(got) => got,
        Err(e) => {
            let tasks = spank.total_task_count()?;
            let nodelist = std::env::var("SLURM_NODELIST").ok();
            return without_map(settings, e, tasks, nodelist.as_deref());
        }
    };
    let (map, hosts_text) = component.into_map(job, step)?;
    outside_het_step(spank, job, step, map.runs.len())?;
    let resv_ports = info.as_ref().and_then(|i| i.resv_ports.as_deref());
    let checks = Checks {
        resv_ports,
        info: info.as_ref(),
        het_nodelists: None,
    };
    with_map(spank, settings, map, hosts_text, checks, || {
        format!(
            "step {job}.{step} from slurmctld in {} µs",
            took.as_micros()
        )
    })
}

/// A heterogeneous step whose environment srun was not given: an srun
/// started from outside the job (`srun --jobid=J --het-group=0,1` from a
/// login shell) has none of the job's SLURM_JOB_ID_HET_GROUP_k and
/// SLURM_JOB_NODELIST_HET_GROUP_k, so it learns only its first component's
/// layout and the other components cannot rebuild theirs: refused, saying
/// so. Told from Slurm's record: Slurm sets srun's SLURM_NTASKS to the whole
/// step's task count (more than this component's `tasks`), and a
/// neighbouring job of the heterogeneous job has a step of the same id run
/// by this very srun (one more RPC, only then).
fn outside_het_step(spank: &Spank, job: u32, step: u32, tasks: u32) -> Result<()> {
    if !het::undescribed(&mut ProcessEnv, tasks) {
        return Ok(());
    }
    let host = short_hostname();
    let ours = |other: u32| {
        let info = match fault::active("step_info_rpc", Some(spank)) {
            true => return false,
            false => step_info_rpc::fetch(other, step),
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
fn short_hostname() -> Option<String> {
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
fn het_map_for(
    spank: &Spank,
    settings: &Settings,
    job: u32,
    step: u32,
    components: &[(u32, core::hostlist::HostList)],
    info: Option<step_info_rpc::StepInfo>,
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

/// Without the step's map (`e`: why): srun's check of what it knows (the
/// step's `tasks`, its `nodelist`), and a verdict of `none` (the tasks
/// rebuild the layout).
fn without_map(
    settings: &Settings,
    e: Error,
    tasks: u32,
    nodelist: Option<&str>,
) -> Result<Verdict> {
    let launch = core::Launch {
        tasks,
        nodelist,
        ..core::Launch::default()
    };
    core::check_before_launch(settings, &launch)?;
    log::info!("{e}: the tasks rebuild the layout");
    Ok(Verdict::Rebuild)
}

/// What srun checks a map against beside the settings.
struct Checks<'a> {
    /// The step's reserved ports, when its record tells them for every node.
    resv_ports: Option<&'a str>,
    /// slurmctld's record of the step.
    info: Option<&'a step_info_rpc::StepInfo>,
    /// A heterogeneous step's components' node lists: the map must equal
    /// what the components srun's word cannot reach rebuild.
    het_nodelists: Option<&'a [core::hostlist::HostList]>,
}

/// The step's map as srun's verdict, once srun checked the step before
/// launch against it, whole within core::handoff::MAX_LEN; `what` names the step and
/// the fetch's time in srun's log.
fn with_map(
    spank: &Spank,
    settings: &Settings,
    map: task_map::TaskMap,
    hosts_text: String,
    checks: Checks,
    what: impl FnOnce() -> String,
) -> Result<Verdict> {
    // Unknown (None) only where Slurm would not say: nothing refused then.
    let command = spank.job_argv().ok();
    core::check_before_launch(
        settings,
        &core::Launch {
            tasks: map.runs.len(),
            nodelist: Some(&hosts_text),
            nodes: Some(map.hosts.len() as u32),
            resv_ports: checks.resv_ports,
            most_local: Some(most_local(&map)),
            command: command.as_deref(),
        },
    )?;
    check_gpus(settings, &map, checks.info)?;
    if let Some(nodelists) = checks.het_nodelists {
        core::check_het_rebuild(&map, nodelists)?;
    }
    let (verdict, len) = Handoff::map_verdict(map, hosts_text)?;
    log::info!("task map of {}, {len} bytes", what());
    Ok(verdict)
}

/// This step as slurmctld recorded it, or None (srun's environment is then
/// taken as it is).
fn step_info(spank: &Spank, job: u32, step: u32) -> Option<step_info_rpc::StepInfo> {
    let got = if fault::active("step_info_rpc", Some(spank)) {
        Err(Error::new("slurmctld gave no step record: fault injected"))
    } else {
        step_info_rpc::fetch(job, step)
    };
    got.map_err(|e| log::info!("{e}: srun's environment is taken as it is"))
        .ok()
}

/// The GPU refusals srun can make before launch: the GPU request as srun's
/// own environment shows it (core::gpus::SrunRequest), its binding the
/// step's as slurmctld recorded it (srun 22.05 leaves a SLURM_GPU_BIND of
/// `sbatch --gpu-bind` in its environment whatever its own --gpu-bind),
/// against the most tasks the map puts on one node. Each task checks again
/// (the catch-all).
fn check_gpus(
    settings: &Settings,
    map: &task_map::TaskMap,
    info: Option<&step_info_rpc::StepInfo>,
) -> Result<()> {
    let most = most_local(map);
    let mut request = gpus::SrunRequest::from_env(|name| std::env::var(name).ok());
    if let Some(info) = info {
        request = request.for_step(info.tres_bind.as_deref());
    }
    let rules = core::frameworks::gpu_rules(settings.frameworks);
    gpus::check_before_launch(settings, rules, &request, most)
}

/// The most tasks the map puts on one node.
fn most_local(map: &task_map::TaskMap) -> u32 {
    map.runs
        .counts(map.hosts.len())
        .into_iter()
        .max()
        .unwrap_or(0)
}

/// The layout of step `job`.`step` from slurmctld (or the injected fault).
fn fetch(
    spank: &Spank,
    job: u32,
    step: u32,
) -> Result<(step_layout_rpc::Component, std::time::Duration)> {
    if fault::active("layout_rpc", Some(spank)) {
        return Err(Error::new("slurmctld gave no layout: fault injected"));
    }
    step_layout_rpc::fetch(job, step)
}
