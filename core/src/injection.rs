//! What the plugin sets in a task's environment: made by crate::node for
//! each task, and mirrored for Apptainer when the step asks.

use std::borrow::Cow;

use crate::error::{Error, Result};
use crate::limits::{ENV_LIMIT, exec_size};

/// What the plugin sets in one task's environment, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Injection {
    /// Made by crate::node, which knows what each task gets.
    pub(crate) list: Vec<(Cow<'static, str>, String)>,
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

    /// What exec counts of these variables in the task's environment
    /// (crate::limits::exec_size): each `NAME=value`, its NUL, its pointer.
    pub fn exec_size(&self) -> usize {
        self.vars()
            .map(|(name, value)| exec_size(name.len() + 1 + value.len()))
            .sum()
    }

    /// The value given to `name`, if any.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars().find(|(n, _)| *n == name).map(|(_, v)| v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
