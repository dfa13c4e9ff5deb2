//! What one setting of the table is ([`Setting`]): its key, help, range,
//! default, what it does alone, and its parser into [`Settings`].

use super::values::Settings;

/// In a setting's help, the options of the frameworks that take roles.
pub const ROLE_FRAMEWORKS: &str = "{role-frameworks}";

/// One setting. This table is the only declaration: the SPANK shell makes
/// `--tf-<key>=<arg>` options of srun, sbatch and salloc from it, admins
/// write `key=value` in plugstack.conf, and the CLI takes `--tf-<key>`.
/// Adding one is an entry here, a field of [`Settings`] and a test. Its
/// range and default are data the pages that describe it are tested against
/// (the manual, the admin guide, the user guide), and its help states both
/// (settings_tests.rs).
pub struct Setting {
    pub key: &'static str,
    /// The argument's name in `--help`.
    pub arg: &'static str,
    /// Its help, where [`ROLE_FRAMEWORKS`] stands for the options of the
    /// frameworks that take roles (`Setting::help_text`, beside the
    /// framework table, writes them out).
    pub help: &'static str,
    /// The whole numbers it takes, both ends included, where its value is
    /// one: the parser takes exactly these.
    pub range: Option<(u32, u32)>,
    /// What it is where neither the site nor the step gives it.
    pub default: Unset,
    /// The one framework option it acts with (`tf-cluster` for TensorFlow's
    /// rpc_layer), where it acts with one only; None: with any.
    pub only_with: Option<&'static str>,
    /// What it does on a step that asks for no framework option.
    pub alone: Alone,
    pub(super) set: fn(&mut Settings, &str) -> std::result::Result<(), String>,
}

/// What a setting does given to an srun whose step asks for no framework
/// option (no `--tf-cluster`, `--torch-cluster`, `--jax-cluster`,
/// `--ray-cluster`): srun refuses the step with one line naming why, or the
/// setting acts on the step's tasks, which get no framework's variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alone {
    /// It shapes a framework's variables, ports or GPUs: refused alone.
    Refused,
    /// It acts alone: the record, the requeue.
    Acts,
    /// It acts beside this setting given to the same srun
    /// (`requeue-max` beside `requeue-on`), refused without it.
    Beside(&'static str),
}

/// What a setting is where neither the site nor the step gives it, in the
/// words its help and every page use after "default".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unset {
    /// This value, as if given: `Settings::default()` is the setting at it.
    Value(&'static str),
    /// No value: what the step does instead ("none" where it does nothing).
    Absent(&'static str),
}

impl Unset {
    /// The words after "default".
    pub fn words(self) -> &'static str {
        match self {
            Unset::Value(w) | Unset::Absent(w) => w,
        }
    }
}
