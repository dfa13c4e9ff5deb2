//! The one table of settings ([`SETTINGS`]), each a [`Setting`];
//! plugstack.conf arguments, the SPANK options and the CLI's flags are all
//! made from it.

use super::setting::{Alone, Setting, Unset};
use super::values::{Bind, Imex, MAX_EXCLUDE_MAX, MAX_REQUEUE_MAX, Settings};
use crate::addresses::Network;
use crate::error::{Error, Result, bail, shown};
use crate::limits::MAX_GPUS;
use crate::number::parse_u32;
use crate::ports::PortRange;
use crate::step_roles::{MAX_PORTS_PER_TASK, StepRoles};

/// The ports a port base may be.
const PORTS: (u32, u32) = (1, 65535);
/// The GPU counts a node or a task may be given.
const GPU_COUNTS: (u32, u32) = (0, MAX_GPUS);
/// The exit codes `requeue-on` takes. Not 1 or 2, what any failure exits
/// with (a Python exception, a usage error, a task the plugin refused): a
/// bug would requeue for ever. Not 126 up: a shell's "could not run", or a
/// signal.
const EXIT_CODES: (u32, u32) = (3, 125);
/// The counts of restarts `requeue-max` takes.
const RESTART_COUNTS: (u32, u32) = (0, MAX_REQUEUE_MAX);
/// The counts of nodes `exclude-max` takes.
const EXCLUDED_COUNTS: (u32, u32) = (0, MAX_EXCLUDE_MAX);
/// The ports a task may ask for of its own.
const TASK_PORTS: (u32, u32) = (1, MAX_PORTS_PER_TASK);

/// `v` as a whole number in `range`; Err(Some(n)) for a number outside it,
/// Err(None) for no number.
fn within(v: &str, (lo, hi): (u32, u32)) -> std::result::Result<u32, Option<u32>> {
    match parse_u32(v) {
        Some(n) if (lo..=hi).contains(&n) => Ok(n),
        other => Err(other),
    }
}

/// Every setting.
pub const SETTINGS: [Setting; 19] = [
    Setting {
        key: "port-base",
        arg: "N",
        help: "first port of each node's tasks (1-65535): local task k takes N+k (default: the step's own block of the port range; ports Slurm reserved win)",
        range: Some(PORTS),
        default: Unset::Absent("the step's own block of the port range"),
        only_with: None,
        alone: Alone::Refused,
        set: |s, v| {
            s.port_base = match within(v, PORTS) {
                Ok(n) => Some(n as u16),
                Err(Some(_)) => {
                    let (lo, hi) = PORTS;
                    return Err(format!("{v}: a port must be {lo}-{hi}"));
                }
                Err(None) => return Err(format!("{}: not a port number", shown(v))),
            };
            Ok(())
        },
    },
    Setting {
        key: "port-range",
        arg: "LO-HI",
        help: "the ports each step takes a block of, placed by its job and step ids, where Slurm reserved none and no port base is given (default 20000-29499)",
        range: None,
        default: Unset::Value("20000-29499"),
        only_with: None,
        alone: Alone::Refused,
        set: |s, v| {
            s.port_range = PortRange::parse(v)?;
            Ok(())
        },
    },
    Setting {
        key: "gpus-per-node",
        arg: "N",
        help: "GPUs to share on each node (0-1024; default: Slurm's CUDA_VISIBLE_DEVICES)",
        range: Some(GPU_COUNTS),
        default: Unset::Absent("Slurm's CUDA_VISIBLE_DEVICES"),
        only_with: None,
        alone: Alone::Refused,
        set: |s, v| {
            s.gpus_per_node = Some(gpu_count(v)?);
            Ok(())
        },
    },
    Setting {
        key: "gpus-per-task",
        arg: "N",
        help: "GPUs per task (0-1024; default: GPUs per node / most tasks on a node)",
        range: Some(GPU_COUNTS),
        default: Unset::Absent("GPUs per node / most tasks on a node"),
        only_with: None,
        alone: Alone::Refused,
        set: |s, v| {
            s.gpus_per_task = Some(gpu_count(v)?);
            Ok(())
        },
    },
    Setting {
        key: "auto-set-gpu",
        arg: "true|false",
        help: "whether to set each task's CUDA_VISIBLE_DEVICES (default true)",
        range: None,
        default: Unset::Value("true"),
        only_with: None,
        alone: Alone::Refused,
        set: |s, v| {
            s.auto_set_gpu = flag(v)?;
            Ok(())
        },
    },
    Setting {
        key: "rpc-layer",
        arg: "NAME",
        help: "rpc_layer in TF_CONFIG, e.g. grpc (default: none)",
        range: None,
        default: Unset::Absent("none"),
        only_with: Some("tf-cluster"),
        alone: Alone::Refused,
        set: |s, v| {
            let name = |c: char| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '_' | '.');
            if v.is_empty() || v.len() > 64 || !v.chars().all(name) {
                return Err(format!("{}: not an rpc layer name such as grpc", shown(v)));
            }
            s.rpc_layer = Some(v.to_string());
            Ok(())
        },
    },
    Setting {
        key: "host-template",
        arg: "TEMPLATE",
        help: "each host's name on the fast network, {} being the node's name, e.g. {}-ib (default: the node's name)",
        range: None,
        default: Unset::Absent("the node's name"),
        only_with: None,
        alone: Alone::Refused,
        set: |s, v| {
            if v.len() > 64 || v.matches("{}").count() != 1 {
                return Err(format!(
                    "{}: not a host name template with one {{}} for the node's name, such as {{}}-ib",
                    shown(v)
                ));
            }
            // Filled with a one-letter node name: what the template adds
            // must keep every name it makes a host name.
            if let Some(rule) = host_name_rule(&v.replace("{}", "n")) {
                return Err(format!(
                    "{}: not a host name once the node's name is put in ({rule}, RFC 1123), such as {{}}-ib",
                    shown(v)
                ));
            }
            s.host_template = Some(v.to_string());
            Ok(())
        },
    },
    Setting {
        key: "network",
        arg: "IFNAME|CIDR",
        help: "the fast network's interface, by name (ib0) or subnet (10.98.0.0/16), given to NCCL, gloo and TensorPipe (default: the host template's network, else none)",
        range: None,
        default: Unset::Absent("the host template's network, else none"),
        only_with: None,
        alone: Alone::Refused,
        set: |s, v| {
            s.network = Some(Network::parse(v)?);
            Ok(())
        },
    },
    Setting {
        key: "apptainer-env",
        arg: "true|false",
        help: "also set each variable as APPTAINERENV_<NAME> and SINGULARITYENV_<NAME>, which win over an Apptainer image's and survive --cleanenv (default false)",
        range: None,
        default: Unset::Value("false"),
        only_with: None,
        alone: Alone::Refused,
        set: |s, v| {
            s.apptainer_env = flag(v)?;
            Ok(())
        },
    },
    Setting {
        key: "preflight",
        arg: "true|false",
        help: "before any task starts, each node checks that the step's interface is up with a carrier, that its tasks' ports can be bound and that its GPUs' device nodes exist, and refuses the step naming the node otherwise (default true)",
        range: None,
        default: Unset::Value("true"),
        only_with: None,
        alone: Alone::Refused,
        set: |s, v| {
            s.preflight = flag(v)?;
            Ok(())
        },
    },
    Setting {
        key: "record",
        arg: "DIR",
        help: "write a record of the step under DIR (an absolute directory): every rank's host, address, ports, GPUs, interface and role, and how each task ended, in DIR/JOB.STEP where DIR is the user's own private directory, else (a shared directory, or the site's) in DIR/<uid>/JOB.STEP, the user's own; read it with tf-cluster postmortem (default: none)",
        range: None,
        default: Unset::Absent("none"),
        only_with: None,
        alone: Alone::Acts,
        set: |s, v| {
            s.record = Some(record_dir(v)?);
            Ok(())
        },
    },
    Setting {
        key: "record-log",
        arg: "true|false",
        help: "also log one line per node at info level in slurmd's log naming the step's ranks there (default false)",
        range: None,
        default: Unset::Value("false"),
        only_with: None,
        alone: Alone::Beside("record"),
        set: |s, v| {
            s.record_log = flag(v)?;
            Ok(())
        },
    },
    Setting {
        key: "requeue-on",
        arg: "CODE",
        help: "when a task of the step exits with CODE (3-125), slurmstepd requeues the job, once per incarnation, as scontrol requeue would, with no scontrol in the task's image; never a job submitted with --no-requeue (default: none)",
        range: Some(EXIT_CODES),
        default: Unset::Absent("none"),
        only_with: None,
        alone: Alone::Acts,
        set: |s, v| {
            s.requeue_on = match within(v, EXIT_CODES) {
                Ok(n) => Some(n as u8),
                Err(_) => {
                    let (lo, hi) = EXIT_CODES;
                    return Err(format!("{}: an exit code must be {lo}-{hi}", shown(v)));
                }
            };
            Ok(())
        },
    },
    Setting {
        key: "requeue-max",
        arg: "N",
        help: "--tf-requeue-on requeues no job Slurm has already restarted N times (0-1000; Slurm's restart count, whatever requeued the job); past it one line says so and the job ends (default 3)",
        range: Some(RESTART_COUNTS),
        default: Unset::Value("3"),
        only_with: None,
        alone: Alone::Beside("requeue-on"),
        set: |s, v| {
            s.requeue_max = match within(v, RESTART_COUNTS) {
                Ok(n) => n,
                Err(_) => {
                    let (lo, hi) = RESTART_COUNTS;
                    return Err(format!(
                        "{}: a count of requeues must be {lo}-{hi}",
                        shown(v)
                    ));
                }
            };
            Ok(())
        },
    },
    Setting {
        key: "exclude-max",
        arg: "N",
        help: "--tf-requeue-on excludes from the job the node whose task exited with the code (or that the preflight refused) before it requeues, at most N nodes over the job's life (0-64; 0: none, as before); never one that would leave its partition too few nodes (default 1)",
        range: Some(EXCLUDED_COUNTS),
        default: Unset::Value("1"),
        only_with: None,
        alone: Alone::Beside("requeue-on"),
        set: |s, v| {
            s.exclude_max = match within(v, EXCLUDED_COUNTS) {
                Ok(n) => n,
                Err(_) => {
                    let (lo, hi) = EXCLUDED_COUNTS;
                    return Err(format!("{}: a count of nodes must be {lo}-{hi}", shown(v)));
                }
            };
            Ok(())
        },
    },
    Setting {
        key: "roles",
        arg: "NAME:COUNT,...",
        help: "split the step's tasks, in rank order, into named roles (NAME: lower-case letters, digits and '_', a letter first), each with its own RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT, beside a step-wide world and every role's addresses; with {role-frameworks}; in a heterogeneous step NAME,NAME,... names its components (default: none)",
        range: None,
        default: Unset::Absent("none"),
        only_with: None,
        alone: Alone::Refused,
        set: |s, v| {
            s.step_roles = Some(StepRoles::parse(v)?);
            Ok(())
        },
    },
    Setting {
        key: "ports-per-task",
        arg: "K",
        help: "ports of each task's own, in TF_CLUSTER_PORTS (1-64), from Slurm's reservation or the step's block (default 4 with --tf-roles, else none)",
        range: Some(TASK_PORTS),
        default: Unset::Absent("4 with --tf-roles, else none"),
        only_with: None,
        alone: Alone::Refused,
        set: |s, v| {
            s.ports_per_task = match within(v, TASK_PORTS) {
                Ok(n) => Some(n),
                Err(_) => {
                    let (lo, hi) = TASK_PORTS;
                    return Err(format!("{}: ports per task must be {lo}-{hi}", shown(v)));
                }
            };
            Ok(())
        },
    },
    Setting {
        key: "bind",
        arg: "gpu|off",
        help: "gpu: each task given GPUs runs on the CPUs near its own GPUs, within the step's CPUs on the node and shared with no other task there, its memory preferred on their NUMA nodes; an explicit --cpu-bind wins; off: Slurm's binding stays (default gpu)",
        range: None,
        default: Unset::Value("gpu"),
        only_with: None,
        alone: Alone::Refused,
        set: |s, v| {
            s.bind = match v {
                "gpu" => Bind::Gpu,
                "off" => Bind::Off,
                _ => return Err(format!("{}: use gpu or off", shown(v))),
            };
            Ok(())
        },
    },
    Setting {
        key: "imex",
        arg: "auto|required|off",
        help: "a step over several nodes needs exactly one IMEX channel (multi-node NVLink) in each task, else it is refused: auto, where the node shows IMEX channels (/proc/devices and /dev/nvidia-caps-imex-channels); required, on every node; off, never (default auto)",
        range: None,
        default: Unset::Value("auto"),
        only_with: None,
        alone: Alone::Refused,
        set: |s, v| {
            s.imex = match v {
                "auto" => Imex::Auto,
                "required" => Imex::Required,
                "off" => Imex::Off,
                _ => return Err(format!("{}: use auto, required or off", shown(v))),
            };
            Ok(())
        },
    },
];

/// A record directory: absolute, one line, a bounded length.
fn record_dir(v: &str) -> std::result::Result<String, String> {
    if !v.starts_with('/') || v.len() > 1024 || v.chars().any(char::is_control) {
        return Err(format!(
            "{}: not an absolute directory such as /home/me/records",
            shown(v)
        ));
    }
    Ok(v.to_string())
}

/// The RFC 1123 rule `name` breaks as a host name, if any: dot-separated
/// labels of 1 to 63 letters, digits and '-', none beginning or ending with
/// '-', 253 bytes in all.
fn host_name_rule(name: &str) -> Option<&'static str> {
    if name.len() > 253 {
        return Some("a host name has at most 253 bytes");
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Some("no empty label: no leading, trailing or doubled '.'");
        }
        if label.len() > 63 {
            return Some("a label has at most 63 characters");
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        {
            return Some("a label has only letters, digits and '-'");
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Some("a label neither begins nor ends with '-'");
        }
    }
    None
}

fn flag(v: &str) -> std::result::Result<bool, String> {
    match v {
        "true" | "yes" | "1" => Ok(true),
        "false" | "no" | "0" => Ok(false),
        _ => Err(format!("{}: use true or false", shown(v))),
    }
}

fn gpu_count(v: &str) -> std::result::Result<u32, String> {
    match within(v, GPU_COUNTS) {
        Ok(n) => Ok(n),
        Err(Some(n)) => Err(format!("{n}: at most {} GPUs", GPU_COUNTS.1)),
        Err(None) => Err(format!("{}: not a GPU count", shown(v))),
    }
}

impl Settings {
    /// Sets one setting by its key; the error names the key and the value.
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let Some(setting) = SETTINGS.iter().find(|s| s.key == key) else {
            bail!(
                "unknown key {} (known: {})",
                shown(key),
                SETTINGS
                    .iter()
                    .map(|s| s.key)
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        };
        (setting.set)(self, value).map_err(|why| Error::new(format!("{key}={why}")))
    }
}
