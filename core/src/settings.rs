//! The knobs of TensorFlow's SlurmClusterResolver, with their site defaults
//! (plugstack.conf arguments) and per-step values (srun/sbatch/salloc options).
//! Later sources win: built-in defaults < plugstack.conf < options.

use std::ffi::CStr;

use super::error::{Result, bail, shown};
use super::gpus::MAX_GPUS;
use super::number::parse_u32;
use super::roles::RoleSpec;
use super::scan::split_once;

/// TensorFlow's default port base.
pub const DEFAULT_PORT_BASE: u16 = 8888;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub roles: RoleSpec,
    pub port_base: u16,
    pub gpus_per_node: Option<u32>,
    pub gpus_per_task: Option<u32>,
    pub auto_set_gpu: bool,
    pub rpc_layer: Option<String>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            roles: RoleSpec::AllWorkers,
            port_base: DEFAULT_PORT_BASE,
            gpus_per_node: None,
            gpus_per_task: None,
            auto_set_gpu: true,
            rpc_layer: None,
        }
    }
}

/// One setting: its plugstack.conf key, its srun/sbatch/salloc option
/// (`--tf-<key>`), the option's argument name and its `--help` line (C strings,
/// because Slurm keeps pointers to them).
pub struct Knob {
    pub key: &'static str,
    pub option: &'static CStr,
    pub arg: &'static CStr,
    pub help: &'static CStr,
}

/// The step's role spec, the option that turns the plugin on.
pub const CLUSTER_OPTION: Knob = Knob {
    key: "cluster",
    option: c"tf-cluster",
    arg: c"ROLE:N,...",
    help: c"tf-cluster: set TF_CONFIG and CUDA_VISIBLE_DEVICES for TensorFlow, e.g. ps:1,worker:3 (default: all workers)",
};

/// Every setting but the role spec, which only a step can give.
pub const KNOBS: [Knob; 5] = [
    Knob {
        key: "port-base",
        option: c"tf-port-base",
        arg: c"N",
        help: c"tf-cluster: first port of each node's tasks (default 8888; reserved ports win)",
    },
    Knob {
        key: "gpus-per-node",
        option: c"tf-gpus-per-node",
        arg: c"N",
        help: c"tf-cluster: GPUs to share on each node (default: Slurm's CUDA_VISIBLE_DEVICES)",
    },
    Knob {
        key: "gpus-per-task",
        option: c"tf-gpus-per-task",
        arg: c"N",
        help: c"tf-cluster: GPUs per task (default: GPUs per node / most tasks on a node)",
    },
    Knob {
        key: "auto-set-gpu",
        option: c"tf-auto-set-gpu",
        arg: c"true|false",
        help: c"tf-cluster: set each task's CUDA_VISIBLE_DEVICES (default true)",
    },
    Knob {
        key: "rpc-layer",
        option: c"tf-rpc-layer",
        arg: c"NAME",
        help: c"tf-cluster: rpc_layer in TF_CONFIG, e.g. grpc (default: none)",
    },
];

impl Settings {
    /// Site defaults from the plugstack.conf arguments (`port-base=9000 …`).
    pub fn from_admin_args<'a>(args: impl IntoIterator<Item = &'a str>) -> Result<Settings> {
        let mut settings = Settings::default();
        for arg in args {
            let Some((key, value)) = split_once(arg, b'=') else {
                bail!("plugstack.conf argument {} is not key=value", shown(arg));
            };
            settings
                .set(key, value)
                .map_err(|e| super::Error::new(format!("plugstack.conf argument {e}")))?;
        }
        Ok(settings)
    }

    /// Sets one knob by its key; the error names the key and the value.
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let number = |what: &str| match parse_u32(value) {
            Some(n) => Ok(n),
            None => bail!("{key}={}: {what}", shown(value)),
        };
        match key {
            "port-base" => match number("not a port number")? {
                n @ 1..=65535 => self.port_base = n as u16,
                _ => bail!("{key}={value}: a port must be 1-65535"),
            },
            "gpus-per-node" | "gpus-per-task" => {
                let n = number("not a GPU count")?;
                if n > MAX_GPUS {
                    bail!("{key}={n}: at most {MAX_GPUS} GPUs");
                }
                if key == "gpus-per-node" {
                    self.gpus_per_node = Some(n);
                } else {
                    self.gpus_per_task = Some(n);
                }
            }
            "auto-set-gpu" => {
                self.auto_set_gpu = match value {
                    "true" | "yes" | "1" => true,
                    "false" | "no" | "0" => false,
                    _ => bail!("{key}={}: use true or false", shown(value)),
                }
            }
            "rpc-layer" => {
                let ok = !value.is_empty()
                    && value.len() <= 64
                    && value
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '_' | '.'));
                if !ok {
                    bail!("{key}={}: not an rpc layer name such as grpc", shown(value));
                }
                self.rpc_layer = Some(value.to_string());
            }
            _ => bail!(
                "unknown key {} (known: {})",
                shown(key),
                KNOBS.iter().map(|k| k.key).collect::<Vec<_>>().join(", ")
            ),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_tf_dash_key() {
        for knob in KNOBS.iter().chain([&CLUSTER_OPTION]) {
            assert_eq!(knob.option.to_str().unwrap(), format!("tf-{}", knob.key));
            assert!(knob.help.to_str().unwrap().starts_with("tf-cluster: "));
        }
    }

    #[test]
    fn admin_args_set_site_defaults() {
        let s = Settings::from_admin_args([
            "port-base=9000",
            "gpus-per-node=4",
            "gpus-per-task=2",
            "auto-set-gpu=false",
            "rpc-layer=grpc+verbs",
        ])
        .unwrap();
        assert_eq!(s.port_base, 9000);
        assert_eq!(s.gpus_per_node, Some(4));
        assert_eq!(s.gpus_per_task, Some(2));
        assert!(!s.auto_set_gpu);
        assert_eq!(s.rpc_layer.as_deref(), Some("grpc+verbs"));
        assert_eq!(Settings::from_admin_args([]).unwrap(), Settings::default());
    }

    #[test]
    fn bad_values_name_key_and_value() {
        for (arg, want) in [
            ("port-base=0", "port-base=0: a port must be 1-65535"),
            ("port-base=65536", "port-base=65536: a port must be 1-65535"),
            ("port-base=http", "port-base=\"http\": not a port number"),
            ("gpus-per-node=-1", "gpus-per-node=\"-1\": not a GPU count"),
            (
                "gpus-per-node=4294967295",
                "gpus-per-node=4294967295: at most 1024 GPUs",
            ),
            (
                "gpus-per-task=1025",
                "gpus-per-task=1025: at most 1024 GPUs",
            ),
            (
                "auto-set-gpu=maybe",
                "auto-set-gpu=\"maybe\": use true or false",
            ),
            ("rpc-layer=", "rpc-layer=\"\": not an rpc layer"),
            ("rpc-layer=a\"b", "not an rpc layer"),
            (
                "colour=blue",
                "unknown key \"colour\" (known: port-base, gpus-per-node",
            ),
            ("port-base", "\"port-base\" is not key=value"),
        ] {
            let e = Settings::from_admin_args([arg]).unwrap_err().to_string();
            assert!(e.starts_with("plugstack.conf argument"), "{arg}: {e}");
            assert!(e.contains(want), "{arg}: {e}");
        }
    }
}
