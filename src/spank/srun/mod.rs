//! srun's side: the options' checks as srun parses them, whether the spec
//! was only inherited from the job, and the decision for a step that asked
//! for the plugin, made once in `local_user_init` after slurmctld created
//! the step: check the step, fetch its task map, and hand every task the map
//! or a verdict, with the rest of srun's word, in one variable
//! (core::handoff). srun decides, tasks apply. Beside it: the step's task
//! map (`task_map`), its network (`network`), and a heterogeneous step's
//! tactics (`het`).

use std::sync::OnceLock;

use super::fault;
use super::guard::{Answer, guard};
use super::handle::Spank;
use super::options::{self, inherited_var, inherited_var_of};
use super::slurmctld::job_record::Targets;
use super::slurmctld::step_kill;
use crate::core::frameworks::{FRAMEWORKS, Framework, Frameworks, option_list};
use crate::core::handoff::{self, Early, Handoff, Plain, Record, Verdict};
use crate::core::os::ProcessEnv;
use crate::core::secret::{self, Secret};
use crate::core::{self, Error, Kind, Result, Settings};

mod het;
mod network;
mod task_map;

use het::{early_network, het_map_for, het_step, outside_het_step};
use network::{PASSES, network_for};
use task_map::{Checks, fetch, step_info, with_map, without_map};

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

    /// The frameworks the step `asked` for whose option leaves unfitting
    /// steps alone and came only from the job (sbatch/salloc), not from
    /// this srun: the one rule, for the early word and the decision alike.
    fn only_inherited(&self, asked: impl Fn(&'static Framework) -> bool) -> Frameworks {
        let mut found = Frameworks::default();
        for &f in FRAMEWORKS.iter() {
            if asked(f)
                && f.skip_when_inherited
                && std::env::var_os(inherited_var(f)).is_some()
                && !options::given_here(f.option)
            {
                found = found.with(f);
            }
        }
        found
    }

    /// srun's undecided word on the step with the job's restart count,
    /// learnt once for the whole step from srun's environment (a requeued
    /// job's batch step has SLURM_RESTART_COUNT; the SPANK item
    /// S_SLURM_RESTART_COUNT is always 0) and carried to every task, so
    /// every node writes the same ids. Err: the hook's outcome, the step
    /// refused for a count that cannot be read.
    fn restarted(
        &self,
        spank: &Spank,
        off_overridden: bool,
        secret: Option<Secret>,
    ) -> std::result::Result<Handoff, Result<()>> {
        match core::restart_count(&mut ProcessEnv) {
            Ok(n) => undecided(spank, off_overridden, n, secret).map_err(Err),
            Err(e) => Err(undecided(spank, off_overridden, 0, None)
                .and_then(|handoff| self.refuse(spank, e, handoff))),
        }
    }

    /// At the end of each pass of srun's option parsing (one per component
    /// of a heterogeneous step), before slurmctld creates the step and
    /// before Slurm copies srun's environment for any component: counts the
    /// pass ([`options::end_pass`]) and sets srun's early word for a step
    /// that asks for the plugin, or that was given `--tf-<key>` options
    /// without a framework option, so that every component holds srun's
    /// word (the hand-off on the step replaces it where it reaches; an
    /// `srun --async` step has only this one) and none a value the user
    /// exported or an outer step left. A step that asks for nothing is left
    /// as it is, but for such a value, emptied. It always succeeds: what
    /// fails is refused in `local_user_init`.
    pub fn init_post_opt(&self, spank: &Spank) -> i32 {
        options::end_pass();
        guard("init_post_opt", Some(spank), Answer::Succeeds, || {
            // A `--tf-off` turns every framework off unless it was only
            // inherited and a framework option given to srun beats it.
            let off = options::seen(options::ALL_OFF).is_some() && !self.off_overridden();
            let pass = PASSES.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            // The `--tf-<key>` options given to srun itself, as
            // local_user_init judges them: an async step's tasks, which its
            // word on the step never reaches, judge them as it would.
            let given = options::settings_given_here();
            if options::seen_asking() && !off {
                let network = early_network(spank, pass);
                let mut early = self.early(network.as_ref().ok().cloned().flatten());
                if network.is_err() {
                    early.refuse();
                }
                early.given(given.iter().map(|g| g.to_string()).collect());
                set(early.encode());
            } else if !options::seen_framework_word() && !given.is_empty() {
                let restart = core::restart_count(&mut ProcessEnv).unwrap_or(0);
                let mut early = Early::new(Frameworks::default(), false, restart, None, None);
                early.given(given.iter().map(|g| g.to_string()).collect());
                set(early.encode());
            } else if std::env::var_os(handoff::VAR).is_some() {
                set(String::new());
            }
            Ok(())
        })
    }

    /// What srun knows before the step exists ([`Early`]), from what its
    /// option callbacks saw (Slurm answers no `spank_option_getopt` in
    /// `init_post_opt`), with a heterogeneous step's `network`.
    fn early(&self, network: Option<core::Network>) -> Early {
        let inherited =
            self.only_inherited(|f| options::seen(f.option).is_some_and(|v| v != options::OFF));
        Early::new(
            inherited,
            self.off_overridden(),
            // A malformed count is refused in local_user_init.
            core::restart_count(&mut ProcessEnv).unwrap_or(0),
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
        let answer = match self.own_allocation() {
            true => Answer::Fails,
            false => Answer::Succeeds,
        };
        guard(
            "local_user_init",
            Some(spank),
            answer,
            || match options::step_settings(spank, off_overridden) {
                Ok(Some(settings)) => self.decide(spank, &settings, off_overridden),
                Ok(None) => {
                    // A `--tf-<key>` given to this srun with no framework
                    // option acts where the settings table says it does
                    // (the record, the requeue), else it would change
                    // nothing: refused, never ignored (one only handed down
                    // leaves a helper step alone, and a step that says
                    // `--tf-off` or `--X-cluster=off` asked for none in so
                    // many words).
                    let given = match options::seen_framework_word() {
                        true => Vec::new(),
                        false => options::settings_given_here(),
                    };
                    let none = core::frameworks::Frameworks::default();
                    if let Err(e) = core::frameworks::check_given_settings(&given, none) {
                        let handoff = undecided(spank, off_overridden, 0, None)?;
                        return self.refuse(spank, e, handoff);
                    }
                    if core::frameworks::acts_alone(&given) {
                        return self.plain(spank, &given);
                    }
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
        )
    }

    /// Decides for a step without a framework option whose `given`
    /// `--tf-record` or `--tf-requeue-on` makes it the plugin's: its tasks
    /// get no variable; slurmstepd records it or requeues its job as srun's
    /// word says ([`Plain`]), from the site's defaults and the step's
    /// options. A heterogeneous step is refused: srun's word reaches one of
    /// its components only.
    fn plain(&self, spank: &Spank, given: &[&str]) -> Result<()> {
        let mut handoff = match self.restarted(spank, false, None) {
            Ok(handoff) => handoff,
            Err(outcome) => return outcome,
        };
        let settings = match core::het::components(&mut ProcessEnv) {
            Ok(Some(_)) => {
                let options = given
                    .iter()
                    .map(|o| format!("--{o}"))
                    .collect::<Vec<_>>()
                    .join(" and ");
                Err(Error::new(format!(
                    "{options} on a heterogeneous step act only with a framework option ({}): without one srun's word reaches one of its components only",
                    option_list(FRAMEWORKS.iter().copied(), "or")
                )))
            }
            Ok(None) => options::plain_settings(spank),
            Err(e) => Err(e),
        };
        match settings {
            Ok(settings) => {
                handoff.plain(Plain::of(&settings));
                hand_off(spank, &handoff)
            }
            Err(e) => self.refuse(spank, e, handoff),
        }
    }

    /// Decides for a step that asked for the plugin. Err: refuse now (srun
    /// exits, nothing launched); Ok: srun launches, the tasks apply the
    /// variable. A step that does not fit leaves out the frameworks it only
    /// inherited with a leave-unfitting-steps-alone option, those only: the
    /// others are decided again without them.
    fn decide(&self, spank: &Spank, settings: &Settings, off_overridden: bool) -> Result<()> {
        let mut handoff = match self.restarted(spank, off_overridden, self.secret()) {
            Ok(handoff) => handoff,
            Err(outcome) => return outcome,
        };
        // A setting of one framework given to a step of others: refused.
        let given = options::settings_given_here();
        if let Err(e) = core::frameworks::check_given_settings(&given, settings.frameworks) {
            return self.refuse(spank, e, handoff);
        }
        let e = match decide_for(spank, settings, &mut handoff) {
            Ok(()) => return hand_off(spank, &handoff),
            Err(e) => e,
        };
        let left_out = self.only_inherited(|f| settings.frameworks.contains(f));
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
        rest.frameworks = settings.frameworks.without(left_out);
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
        if het_step(spank) {
            let (job, step) = handoff.job_step();
            // The jobs as slurmctld records them for the user (one RPC).
            // SAFETY: getuid cannot fail.
            let targets = match Targets::of(job, unsafe { libc::getuid() }) {
                Ok(targets) => targets,
                Err(e) => {
                    log::debug!("cannot end the refused heterogeneous step: {e}");
                    return Ok(());
                }
            };
            let ended = std::thread::Builder::new()
                .name("tf-cluster-end".into())
                .spawn(move || step_kill::end_from_srun(targets, step));
            if let Err(e) = ended {
                log::warn!("cannot end the refused heterogeneous step: {e}");
            }
        }
        Ok(())
    }
}

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
    let kept = core::network::decision::kept(|name| std::env::var_os(name).is_some());
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
    if let Some(components) = core::het::components(&mut ProcessEnv)? {
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
