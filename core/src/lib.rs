//! The pure core: one [`Step`] (what Slurm says about the step on a node)
//! and the [`Settings`] in; a [`Node`] (the node's share, made once per node)
//! out, and from it one [`Injection`] (the variables to set) per task. The
//! dependencies run one way: [`step`] (what Slurm says) → [`layout`] (where
//! every rank runs; it knows no framework) → [`plan`] (the node's ports,
//! GPUs and network) → [`frameworks`] (each framework's variables, one
//! module each, driven by one table) → [`node`]. Below them all: [`settings`]
//! (what the step asks for), the parsers of Slurm's variables and the limits.
//! The one place the core touches the operating system is [`os`] (the
//! process environment, the node's GPUs, a file a user names); everything
//! else is computation on values, so the SPANK shell and the CLI gather the
//! facts and apply the result.

pub mod distribution;
mod error;
pub mod frameworks;
pub mod gpus;
pub mod handoff;
pub mod hostlist;
pub mod layout;
mod limits;
pub mod network;
pub mod node;
pub mod number;
pub mod os;
pub mod plan;
pub mod ports;
pub mod roles;
pub mod runs;
pub mod settings;
pub mod step;
pub mod task_map;
pub mod tasks_per_node;
pub mod tf_config;

pub use error::{Error, Result};
pub use frameworks::{FRAMEWORKS, Framework, Frameworks};
pub use layout::{Layout, check_het_rebuild};
pub use limits::{ENV_LIMIT, MAX_GPUS, MAX_NODES, MAX_TASKS, check_size};
pub use node::Node;
pub use settings::Settings;
pub use step::{FromSrun, Gathered, Source, Step};

use layout::required;
use std::borrow::Cow;

/// What the plugin sets in one task's environment, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Injection {
    list: Vec<(Cow<'static, str>, String)>,
}

/// Apptainer and Singularity pass the host's environment in, but a name the
/// image sets wins over it and `--cleanenv`/`--containall` drop it; a name
/// given as `APPTAINERENV_<NAME>` (Singularity: `SINGULARITYENV_<NAME>`)
/// is set inside over the image's, and survives both.
pub const APPTAINER_PREFIXES: [&str; 2] = ["APPTAINERENV_", "SINGULARITYENV_"];

impl Injection {
    /// The variables to set, in order.
    pub fn vars(&self) -> impl Iterator<Item = (&str, &str)> {
        self.list
            .iter()
            .map(|(name, value)| (name.as_ref(), value.as_str()))
    }

    /// The variables to set, in order, by value: a caller that copies each
    /// value to C can reuse its buffer instead of copying it once more.
    pub fn into_vars(self) -> impl Iterator<Item = (Cow<'static, str>, String)> {
        self.list.into_iter()
    }

    /// `apptainer-env`: every variable once more under each of
    /// [`APPTAINER_PREFIXES`], after them all; each copy within Slurm's
    /// limit of one variable, like the rest.
    pub(crate) fn with_apptainer_mirror(mut self) -> Result<Injection> {
        let mut mirrors = Vec::with_capacity(self.list.len() * APPTAINER_PREFIXES.len());
        for (name, value) in &self.list {
            for prefix in APPTAINER_PREFIXES {
                let mirror = format!("{prefix}{name}");
                let size = mirror.len() + 1 + value.len() + 1;
                if size >= ENV_LIMIT {
                    return Err(Error::new(format!(
                        "{mirror} (--tf-apptainer-env) would be {size} bytes, over the {ENV_LIMIT}-byte limit of one environment variable"
                    )));
                }
                mirrors.push((Cow::Owned(mirror), value.clone()));
            }
        }
        self.list.extend(mirrors);
        Ok(self)
    }

    /// The value given to `name`, if any.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars().find(|(n, _)| *n == name).map(|(_, v)| v)
    }
}

pub use frameworks::Launch;

/// What srun checks before anything is launched, knowing the step's task
/// count, the allocation's node list (the step runs on some of its nodes)
/// and, when it can tell, the step's node count and whether Slurm reserved
/// its ports: the step's size, and each framework its own limits.
pub fn check_before_launch(settings: &Settings, launch: &Launch) -> Result<()> {
    frameworks::check_before_launch(settings, launch)
}

/// One line for the logs at debug level: what the task was given and why.
pub fn explain(step: &Step, rank: u32, injection: &Injection) -> String {
    let layout = match &step.from_srun {
        FromSrun::Map(_) => "srun's task map",
        FromSrun::NoMap => "rebuilt (srun could not get the map)",
        FromSrun::Nothing => "rebuilt (no map from srun)",
    };
    let ports = match &step.resv_ports {
        Some(list) => format!("reserved {list}"),
        None => "from the port base".into(),
    };
    let gpus = match injection.get("CUDA_VISIBLE_DEVICES") {
        Some(list) => format!("CUDA_VISIBLE_DEVICES={list}"),
        None => "CUDA_VISIBLE_DEVICES untouched".into(),
    };
    let names: Vec<&str> = injection.vars().map(|(name, _)| name).collect();
    format!(
        "rank {} on {}: layout {layout}, ports {ports}, {gpus}; set {}",
        rank,
        step.nodename.as_deref().unwrap_or("?"),
        names.join(" ")
    )
}

/// Resolves one task: its node's share, then its own part.
pub fn resolve(settings: &Settings, step: &Step) -> Result<Injection> {
    let rank = required(step.procid, "SLURM_PROCID")?;
    Node::prepare(settings.clone(), step.clone())?.task(rank, None, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A task's variables, as slurmstepd would show them.
    struct Vars(Vec<(&'static str, &'static str)>);

    impl Source for Vars {
        fn var(&mut self, name: &str) -> Result<Option<String>> {
            Ok(self
                .0
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string()))
        }
        fn gpu_count(&mut self) -> Result<u32> {
            Ok(0)
        }
        fn read_file(&mut self, path: &str) -> Result<String> {
            Err(Error::new(format!("no file {path} here")))
        }
    }

    fn injection(vars: &[(&'static str, &str)]) -> Injection {
        Injection {
            list: vars
                .iter()
                .map(|(n, v)| ((*n).into(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn apptainer_mirror_repeats_every_variable_after_them_all() {
        let tf = r#"{"cluster": {"worker": ["n1:8888"]}, "task": {"type": "worker", "index": 0}}"#;
        let mirrored = injection(&[("CUDA_VISIBLE_DEVICES", "2,3"), ("TF_CONFIG", tf)])
            .with_apptainer_mirror()
            .unwrap();
        let got: Vec<(&str, &str)> = mirrored.vars().collect();
        assert_eq!(
            got,
            [
                ("CUDA_VISIBLE_DEVICES", "2,3"),
                ("TF_CONFIG", tf),
                ("APPTAINERENV_CUDA_VISIBLE_DEVICES", "2,3"),
                ("SINGULARITYENV_CUDA_VISIBLE_DEVICES", "2,3"),
                ("APPTAINERENV_TF_CONFIG", tf),
                ("SINGULARITYENV_TF_CONFIG", tf),
            ]
        );
    }

    /// `TF_CONFIG=` plus the value plus the NUL one byte under the limit
    /// fits; under its longer mirrored names it does not, and the step is
    /// refused rather than run without the mirror.
    #[test]
    fn apptainer_mirror_counts_against_the_variable_limit() {
        let value = "x".repeat(ENV_LIMIT - "TF_CONFIG=".len() - 2);
        let e = injection(&[("TF_CONFIG", &value)])
            .with_apptainer_mirror()
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "APPTAINERENV_TF_CONFIG (--tf-apptainer-env) would be 131084 bytes, over the 131072-byte limit of one environment variable"
        );
        let value = "x".repeat(ENV_LIMIT - "SINGULARITYENV_TF_CONFIG=".len() - 1);
        let e = injection(&[("TF_CONFIG", &value)])
            .with_apptainer_mirror()
            .unwrap_err();
        assert!(e.to_string().starts_with("SINGULARITYENV_TF_CONFIG"), "{e}");
        let value = "x".repeat(ENV_LIMIT - "SINGULARITYENV_TF_CONFIG=".len() - 2);
        assert_eq!(
            injection(&[("TF_CONFIG", &value)])
                .with_apptainer_mirror()
                .unwrap()
                .vars()
                .count(),
            3
        );
    }

    /// `srun -N1 -n2 --torch-cluster --tf-apptainer-env=true`, rank 1: each
    /// of PyTorch's variables once more under both prefixes; without the
    /// setting none.
    #[test]
    fn resolve_mirrors_only_when_asked() {
        let task = || {
            Vars(vec![
                ("SLURM_PROCID", "1"),
                ("SLURM_STEP_NUM_TASKS", "2"),
                ("SLURM_STEP_NODELIST", "n1"),
                ("SLURM_STEP_TASKS_PER_NODE", "2"),
                ("SLURM_NODEID", "0"),
                ("SLURM_GTIDS", "0,1"),
            ])
        };
        let mut settings = Settings {
            frameworks: Frameworks::only(&frameworks::pytorch::FRAMEWORK),
            ..Settings::default()
        };
        let step = Step::gather(&settings, &mut task())
            .unwrap()
            .step()
            .unwrap();
        let plain = resolve(&settings, &step).unwrap();
        assert_eq!(plain.get("RANK"), Some("1"));
        assert_eq!(plain.get("MASTER_ADDR"), Some("n1"));
        assert!(plain.vars().all(|(n, _)| !n.contains("ENV_")), "{plain:?}");
        settings.set("apptainer-env", "true").unwrap();
        let mirrored = resolve(&settings, &step).unwrap();
        assert_eq!(mirrored.vars().count(), 3 * plain.vars().count());
        for (name, value) in plain.vars() {
            for prefix in ["APPTAINERENV_", "SINGULARITYENV_"] {
                assert_eq!(
                    mirrored.get(&format!("{prefix}{name}")),
                    Some(value),
                    "{name}"
                );
            }
        }
        assert_eq!(mirrored.get("APPTAINERENV_RANK"), Some("1"));
        assert_eq!(mirrored.get("SINGULARITYENV_MASTER_ADDR"), Some("n1"));
    }
}
