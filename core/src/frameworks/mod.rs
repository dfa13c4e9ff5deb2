//! The frameworks, one module each, driven by one table ([`FRAMEWORKS`]).
//! Each declares in one place its option, its limits, the ports it takes,
//! what srun checks before launch, how its tasks see the GPUs, the part of
//! its variables a node's tasks share, and the variables it renders for one
//! rank from the [`Layout`] and the node's plan (crate::node_plan), and
//! the facts the rest of the core asks of it. Adding a framework is one
//! module and one entry here: everything else, messages listing the
//! options included, reads the table.

mod framework;
pub mod jax;
pub mod pytorch;
pub mod ray;
#[cfg(feature = "stand-in")]
pub mod stand_in;
pub mod tensorflow;

pub use framework::{Arg, Framework, GpuRule, Launch, RoleRule, Shared, Task, Vars};

use super::error::{Error, Result, bail, shown};
use super::gpus::Rules;
use super::injection::APPTAINER_PREFIXES;
use super::layout::Layout;
use super::limits::{check_env_total, check_size};
pub use super::node_plan::{Gpus, PortRule};
use super::node_plan::{Needs, PortNeeds};
use super::role_world::{books_min_exec_size, ports_per_task};
use super::settings::{Alone, Settings};
use crate::addresses::{NodeNetwork, VARS};

/// Every framework, in the order their ports are handed out and their
/// variables set.
pub static FRAMEWORKS: &[&Framework] = &[
    &tensorflow::FRAMEWORK,
    &pytorch::FRAMEWORK,
    &jax::FRAMEWORK,
    &ray::FRAMEWORK,
    // A test build's fifth framework: core/src/frameworks/stand_in.rs.
    #[cfg(feature = "stand-in")]
    &stand_in::FRAMEWORK,
];

/// The value of a framework's option that turns it off for one step, though
/// the job (sbatch, salloc) or the site asked for it: `--tf-cluster=off`.
pub const OFF: &str = "off";

/// The option that turns every framework off for one step, whatever the job
/// asked: `--tf-off`.
pub const ALL_OFF: &str = "tf-off";

/// [`ALL_OFF`]'s help.
pub fn all_off_help() -> String {
    let each: Vec<String> = FRAMEWORKS
        .iter()
        .map(|f| format!("--{}={OFF}", f.option))
        .collect();
    format!(
        "no framework's variables for this step, whatever the job asked (one framework: {})",
        each.join(", ")
    )
}

/// The options of `frameworks` as a message lists them: `--a, --b or --c`
/// (`last`: the word before the last one).
pub fn option_list<'a>(frameworks: impl IntoIterator<Item = &'a Framework>, last: &str) -> String {
    let names: Vec<String> = frameworks
        .into_iter()
        .map(|f| format!("--{}", f.option))
        .collect();
    match names.split_last() {
        Some((only, [])) => only.clone(),
        Some((end, rest)) => format!("{} {last} {end}", rest.join(", ")),
        None => String::new(),
    }
}

/// The frameworks that give each role a rendezvous of its own
/// ([`RoleRule::PerRole`]): those `--tf-roles` works with.
fn take_roles() -> impl Iterator<Item = &'static Framework> {
    FRAMEWORKS
        .iter()
        .copied()
        .filter(|f| matches!(f.roles, RoleRule::PerRole(_)))
}

/// Checks a framework option's value as srun, sbatch and salloc take it:
/// [`OFF`], the empty value (the bare option), or the framework's argument.
pub fn check_value(f: &Framework, value: &str) -> Result<()> {
    match &f.arg {
        _ if value == OFF => Ok(()),
        Some(arg) => (arg.set)(&mut Settings::default(), value),
        None if value.is_empty() => Ok(()),
        None => bail!("--{} takes no value but {OFF} (not {value:?})", f.option),
    }
}

/// The `--tf-<key>` options `given` to this srun itself (an inherited one
/// never breaks a helper step), on a step asking for `frameworks`: each
/// must act there, else the step is refused in one line naming what would
/// make it act. With no framework option only the settings the table says
/// act alone do ([`Alone`]: the record and the requeue, with their own
/// companions); every other shapes a framework's variables, ports or GPUs.
/// A setting of one framework alone (`rpc-layer`: TensorFlow's) needs that
/// framework.
pub fn check_given_settings(given: &[&str], frameworks: Frameworks) -> Result<()> {
    if given.is_empty() {
        return Ok(());
    }
    if frameworks.is_empty() {
        return check_alone(given);
    }
    for option in given {
        let Some(only) = setting_of(option).and_then(|s| s.only_with) else {
            continue;
        };
        if !frameworks.iter().any(|f| f.option == only) {
            bail!(
                "--{option} acts only with --{only}, which this step does not ask for: its framework options would ignore it"
            )
        }
    }
    Ok(())
}

/// Whether the `--tf-<key>` options `given` to an srun whose step asks for
/// no framework option make the step the plugin's: one of them acts alone
/// ([`Alone::Acts`]) and [`check_given_settings`] refuses none.
pub fn acts_alone(given: &[&str]) -> bool {
    check_alone(given).is_ok()
        && given
            .iter()
            .any(|o| setting_of(o).is_some_and(|s| s.alone == Alone::Acts))
}

/// Whether `name` is a setting's option, `tf-<key>` (srun's early word
/// names those given to srun itself).
pub fn is_setting_option(name: &str) -> bool {
    name.starts_with("tf-") && setting_of(name).is_some()
}

/// The table's setting of option `tf-<key>`.
fn setting_of(option: &str) -> Option<&'static crate::settings::Setting> {
    let key = option.strip_prefix("tf-").unwrap_or(option);
    crate::settings::SETTINGS.iter().find(|s| s.key == key)
}

/// [`check_given_settings`] on a step without a framework option.
fn check_alone(given: &[&str]) -> Result<()> {
    let mut refused = Vec::new();
    for option in given {
        match setting_of(option).map(|s| s.alone) {
            Some(Alone::Acts) => {}
            Some(Alone::Beside(with)) => {
                let with = format!("tf-{with}");
                if !given.contains(&with.as_str()) {
                    bail!(
                        "--{option} acts on a step without a framework option only beside --{with}, which this srun is not given; without it this step would run as if --{option} were absent"
                    )
                }
            }
            Some(Alone::Refused) | None => refused.push(*option),
        }
    }
    if refused.is_empty() {
        return Ok(());
    }
    let options = refused
        .iter()
        .map(|o| format!("--{o}"))
        .collect::<Vec<_>>()
        .join(" and ");
    let (verb, it) = if refused.len() == 1 {
        ("acts", "it")
    } else {
        ("act", "they")
    };
    bail!(
        "{options} {verb} only on a step with a framework option ({}); without one this step would run as if {it} were absent",
        option_list(FRAMEWORKS.iter().copied(), "or")
    )
}

pub use crate::settings::Frameworks;

/// The set's members are [`FRAMEWORKS`]' entries.
impl Frameworks {
    /// Every framework of the table.
    pub fn all() -> Frameworks {
        Frameworks((1 << FRAMEWORKS.len()) - 1)
    }

    pub fn only(f: &'static Framework) -> Frameworks {
        Frameworks::default().with(f)
    }

    pub fn with(self, f: &'static Framework) -> Frameworks {
        Frameworks(self.0 | 1 << index(f))
    }

    pub fn contains(self, f: &'static Framework) -> bool {
        self.0 & 1 << index(f) != 0
    }

    /// The chosen frameworks, in table order.
    pub fn iter(self) -> impl Iterator<Item = &'static Framework> {
        FRAMEWORKS
            .iter()
            .enumerate()
            .filter(move |(i, _)| self.0 & 1 << i != 0)
            .map(|(_, f)| *f)
    }
}

/// The table's framework of option `--<option>`.
pub fn by_option(option: &str) -> Option<&'static Framework> {
    FRAMEWORKS.iter().copied().find(|f| f.option == option)
}

/// `f`'s place in [`FRAMEWORKS`].
pub fn index(f: &Framework) -> usize {
    FRAMEWORKS
        .iter()
        .position(|g| std::ptr::eq(*g, f))
        .expect("every framework is in the table")
}

/// What the step's frameworks ask of the GPUs: each framework's rule, and
/// the option that asked for it (for messages).
pub fn gpu_rules(frameworks: Frameworks) -> Rules {
    let mut rules = Rules::default();
    for f in frameworks.iter() {
        match f.gpus {
            GpuRule::Slice => {}
            GpuRule::Whole => rules.whole = rules.whole.or(Some(f.option)),
            GpuRule::OwnIds => rules.own_ids = rules.own_ids.or(Some(f.option)),
        }
    }
    rules
}

/// srun's check of the step before launch: the step's size, then each
/// framework's own.
pub fn check_before_launch(settings: &Settings, launch: &Launch) -> Result<()> {
    check_size(u64::from(launch.tasks), 0)?;
    for f in settings.frameworks.iter() {
        check_limit(f, launch.tasks)?;
        (f.check_before_launch)(settings, launch)?;
    }
    let roles = check_roles(settings, launch.tasks, launch.components)?;
    check_books(settings, launch, &roles)?;
    // Every task would refuse a reservation too small for the fullest node.
    if let (Some(list), Some(most)) = (launch.resv_ports, launch.most_local) {
        let need = port_needs(settings, most, roles.len()).total();
        crate::ports::reserved_ports(list, need)?;
    }
    Ok(())
}

/// The roles' address books together within exec's limit, at their least:
/// each address the shortest node name (the host template's around it),
/// its port the fewest digits (none where tasks have no port of their own).
/// Each task checks its own variables again, exactly.
fn check_books(settings: &Settings, launch: &Launch, roles: &[(String, u32)]) -> Result<()> {
    if roles.is_empty() {
        return Ok(());
    }
    let template = settings.host_template.as_ref().map_or(0, |t| t.len() - 2);
    let port = match ports_per_task(settings) {
        0 => 1,
        _ => Launch::port_digits(settings),
    };
    let address = launch.shortest_host() + template + 1 + port;
    let prefixes: &[&str] = if settings.apptainer_env {
        &APPTAINER_PREFIXES
    } else {
        &[]
    };
    check_env_total(
        "the roles' address books would take at least",
        books_min_exec_size(roles, address, prefixes),
    )
}

/// The step's frameworks that take a rendezvous port per role, in the
/// order of their ports in a role's block.
pub fn per_role(settings: &Settings) -> Vec<&'static Framework> {
    take_roles()
        .filter(|f| settings.frameworks.contains(f))
        .collect()
}

/// The step's roles for its `tasks` tasks (`components`: a heterogeneous
/// step's tasks per component), or why they do not fit it: roles split a
/// PyTorch or JAX step with a static rendezvous (none: an empty list).
pub fn check_roles(
    settings: &Settings,
    tasks: u32,
    components: Option<&[u32]>,
) -> Result<Vec<(String, u32)>> {
    let Some(roles) = &settings.step_roles else {
        return Ok(Vec::new());
    };
    let with = || option_list(take_roles(), "or");
    for f in settings.frameworks.iter() {
        match f.roles {
            RoleRule::Refused(why) => bail!("{why}; use --tf-roles with {}", with()),
            RoleRule::PerRole(check) => check(settings)?,
            RoleRule::Indifferent => {}
        }
    }
    if per_role(settings).is_empty() {
        bail!("--tf-roles={} needs {}", roles.text(), with());
    }
    roles.for_step(tasks, components).map_err(Error::new)
}

/// The ports a step takes on every node for its record's defaults
/// (crate::record::DEBUG_DEFAULTS): one for NCCL's RAS where the step writes
/// a record and runs a framework whose ranks may use NCCL
/// ([`Framework::nccl`]).
pub fn ras_ports(settings: &Settings) -> u32 {
    let any = settings.frameworks.iter().any(|f| f.nccl);
    u32::from(settings.record.is_some() && any)
}

/// The step's ports on every node, block by block, given the most tasks on
/// one node and its `roles` roles: srun's check of the reservation, every
/// node's plan and the CLI's preview read this one plan.
pub fn port_needs(settings: &Settings, most_local: u32, roles: usize) -> PortNeeds {
    PortNeeds {
        frameworks: settings.frameworks.iter().map(|f| f.ports).collect(),
        most_local,
        role_rendezvous: roles as u32 * per_role(settings).len() as u32,
        tasks_own: ports_per_task(settings) * most_local,
        ras: ras_ports(settings),
    }
}

pub fn check_limit(f: &Framework, tasks: u32) -> Result<()> {
    if tasks > f.max_tasks {
        bail!("the step has {tasks} tasks; {}", f.max_tasks_why);
    }
    Ok(())
}

/// What the step's frameworks need of a node: their ports
/// ([`port_needs`]) and GPU rules.
pub fn needs(settings: &Settings, layout: &Layout, roles: usize) -> Needs {
    Needs {
        ports: port_needs(settings, layout.max_local(), roles),
        rules: gpu_rules(settings.frameworks),
    }
}

/// This node's interface and what its tasks get (each node finds its own).
pub fn network_summary(settings: &Settings, node: &NodeNetwork) -> String {
    let set: Vec<String> = network_vars(settings.frameworks, node)
        .into_iter()
        .map(|(n, v)| format!("{n}={v}"))
        .collect();
    let mut line = format!(
        "network {}: this node's interface {}; set {}",
        node.network,
        node.interface,
        if set.is_empty() {
            "nothing".into()
        } else {
            set.join(" ")
        }
    );
    if !node.kept.is_empty() {
        line.push_str(&format!("; kept the user's {}", node.kept.join(" ")));
    }
    line
}

/// The interface variables of the step's frameworks for a node on
/// `node`'s network, but the user's own.
pub fn network_vars(frameworks: Frameworks, node: &NodeNetwork) -> Vec<(&'static str, String)> {
    VARS.iter()
        .filter(|v| {
            frameworks
                .iter()
                .any(|f| f.interface_vars.iter().any(|w| std::ptr::eq(*w, **v)))
        })
        .filter(|v| !node.kept.iter().any(|k| k == v.name))
        .map(|v| (v.name, v.value(&node.interface)))
        .collect()
}

/// A setting's help names frameworks from the table.
impl crate::settings::Setting {
    /// Its help as srun and the CLI show it: [`crate::settings::ROLE_FRAMEWORKS`]
    /// written out (`--torch-cluster or --jax-cluster`).
    pub fn help_text(&self) -> String {
        let roles = || option_list(take_roles(), "or");
        self.help
            .replace(crate::settings::ROLE_FRAMEWORKS, &roles())
    }
}

/// The site's defaults include each framework's argument that takes one, so
/// the settings are read from plugstack.conf here, beside the table.
impl Settings {
    /// Site defaults from the plugstack.conf arguments (`port-base=9000 …`,
    /// and a framework option's default where its argument takes one:
    /// `torch-cluster=elastic`, which asks for no framework).
    pub fn from_admin_args<'a>(args: impl IntoIterator<Item = &'a str>) -> Result<Settings> {
        let mut settings = Settings::default();
        for arg in args {
            let Some((key, value)) = arg.split_once('=') else {
                bail!("plugstack.conf argument {} is not key=value", shown(arg));
            };
            let site_default = FRAMEWORKS
                .iter()
                .filter(|f| f.option == key)
                .find_map(|f| f.arg.as_ref().filter(|a| a.site_default));
            match site_default {
                Some(arg) => (arg.set)(&mut settings, value),
                None => settings.set(key, value),
            }
            .map_err(|e| Error::new(format!("plugstack.conf argument {e}")))?;
        }
        Ok(settings)
    }
}

#[cfg(test)]
mod pytorch_tests;
#[cfg(test)]
mod ray_tests;
#[cfg(test)]
mod table_tests;
#[cfg(test)]
mod tensorflow_tests;
