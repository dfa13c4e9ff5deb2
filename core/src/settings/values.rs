//! The Settings a step asks for, with their site defaults (plugstack.conf
//! arguments) and per-step values (srun/sbatch/salloc options), and the
//! Frameworks set. Later sources win: built-in defaults < plugstack.conf <
//! options.

use crate::addresses::Network;
use crate::ports::{DEFAULT_RANGE, PortRange};
use crate::rendezvous::Rendezvous;
use crate::roles::RoleSpec;
use crate::step_roles::StepRoles;

/// TensorFlow's default port base: the ports of a step whose job and step
/// ids are unknown (the CLI outside a step) and that names no base.
pub const DEFAULT_PORT_BASE: u16 = 8888;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub roles: RoleSpec,
    pub frameworks: Frameworks,
    /// An explicit port base (`--tf-port-base`, `port-base=`): local index k
    /// takes base + k where Slurm reserved no ports. None: the step's block
    /// of `port_range`.
    pub port_base: Option<u16>,
    /// The ports a step takes its block from where Slurm reserved none and
    /// no base is given ([`crate::ports::PortRange::block`]).
    pub port_range: PortRange,
    pub gpus_per_node: Option<u32>,
    pub gpus_per_task: Option<u32>,
    pub auto_set_gpu: bool,
    pub rpc_layer: Option<String>,
    /// The name of each host on the fast network, `{}` standing for the
    /// node's name (`{}-ib`: node1 → node1-ib).
    pub host_template: Option<String>,
    /// The fast network by interface name or subnet; without it, the host
    /// template's names say which network it is.
    pub network: Option<Network>,
    /// Also set every variable as `APPTAINERENV_<NAME>` and
    /// `SINGULARITYENV_<NAME>` ([`crate::Injection`]).
    pub apptainer_env: bool,
    /// torchrun's rendezvous (`--torch-cluster=elastic[:MIN[:RESTARTS]]`,
    /// or `torch-cluster=…` in plugstack.conf).
    pub torch: Rendezvous,
    /// Each node checks its interface, ports and GPU device nodes before
    /// its tasks start (crate::preflight).
    pub preflight: bool,
    /// Where each node writes the step's record (crate::record), as the
    /// job's user: an absolute directory.
    pub record: Option<String>,
    /// One line per node in slurmd's log, at info level, naming the step's
    /// ranks there (the admin's choice).
    pub record_log: bool,
    /// A task of the step exiting with this code has slurmstepd requeue
    /// the job (once per incarnation).
    pub requeue_on: Option<u8>,
    /// `requeue_on` requeues no job Slurm has already restarted this many
    /// times (its restart count, whatever requeued it).
    pub requeue_max: u32,
    /// The most nodes `requeue_on` excludes from the job over its life, one
    /// per requeue: the node whose task ended with the code, or that the
    /// preflight refused (0: none).
    pub exclude_max: u32,
    /// The step's roles (`--tf-roles`): each its own world.
    pub step_roles: Option<StepRoles>,
    /// Ports of each task's own (`--tf-ports-per-task`); None: the
    /// default of a step with roles, none without.
    pub ports_per_task: Option<u32>,
    /// Each task's CPUs and memory chosen from its GPUs (`--tf-bind`).
    pub bind: Bind,
    /// Whether a multi-node step needs one IMEX channel in each task
    /// (`--tf-imex`, the site's `imex=`).
    pub imex: Imex,
}

/// When a step over several nodes needs each task's IMEX channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Imex {
    /// Where the node shows IMEX channels (crate::imex::in_domain).
    Auto,
    /// On every node: the site says its nodes use them, whatever they show.
    Required,
    /// Never: the step does not use multi-node NVLink.
    Off,
}

/// What `--tf-bind` binds each task to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bind {
    /// The CPUs near its own GPUs, its memory on their NUMA nodes.
    Gpu,
    /// Nothing: Slurm's binding stays.
    Off,
}

/// The most times `--tf-requeue-on` lets a job be restarted, unless the site
/// (`requeue-max=`) or the step says otherwise: a training that exits with
/// its code every time comes back three times, not for ever.
pub const DEFAULT_REQUEUE_MAX: u32 = 3;

/// The most nodes `--tf-requeue-on` excludes from a job over its life,
/// unless the site (`exclude-max=`) or the step says otherwise.
pub const DEFAULT_EXCLUDE_MAX: u32 = 1;

/// The largest `exclude-max`.
pub const MAX_EXCLUDE_MAX: u32 = 64;

/// The largest `requeue-max` (Slurm counts restarts in 16 bits).
pub const MAX_REQUEUE_MAX: u32 = 1000;

impl Default for Settings {
    fn default() -> Self {
        Settings {
            roles: RoleSpec::AllWorkers,
            // TensorFlow's, as `--tf-cluster` alone asks (and the CLI without
            // a framework option).
            frameworks: Frameworks::TENSORFLOW,
            port_base: None,
            port_range: DEFAULT_RANGE,
            gpus_per_node: None,
            gpus_per_task: None,
            auto_set_gpu: true,
            rpc_layer: None,
            host_template: None,
            network: None,
            apptainer_env: false,
            torch: Rendezvous::Static,
            preflight: true,
            record: None,
            record_log: false,
            requeue_on: None,
            requeue_max: DEFAULT_REQUEUE_MAX,
            exclude_max: DEFAULT_EXCLUDE_MAX,
            step_roles: None,
            ports_per_task: None,
            bind: Bind::Gpu,
            imex: Imex::Auto,
        }
    }
}

/// The frameworks a step asked for: a set of indices into
/// crate::frameworks::FRAMEWORKS, whose methods taking a framework live
/// there (the settings know no framework's code), as does
/// `Settings::from_admin_args`, which reads each framework's site default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Frameworks(pub(crate) u8);

impl Frameworks {
    /// TensorFlow alone, the table's first (frameworks/table_tests.rs checks it).
    pub const TENSORFLOW: Frameworks = Frameworks(1);

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// These frameworks but `other`'s.
    pub fn without(self, other: Frameworks) -> Frameworks {
        Frameworks(self.0 & !other.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admin_args_set_site_defaults() {
        let s = Settings::from_admin_args([
            "port-base=9000",
            "port-range=40000-40999",
            "gpus-per-node=4",
            "gpus-per-task=2",
            "auto-set-gpu=false",
            "rpc-layer=grpc+verbs",
            "host-template={}-ib",
            "network=10.98.0.0/16",
            "apptainer-env=yes",
            "preflight=false",
            "record=/scratch/records",
            "record-log=true",
            "requeue-on=43",
            "requeue-max=2",
        ])
        .unwrap();
        assert_eq!(s.requeue_on, Some(43));
        assert_eq!(s.requeue_max, 2);
        assert_eq!(Settings::default().requeue_max, DEFAULT_REQUEUE_MAX);
        assert_eq!(s.record.as_deref(), Some("/scratch/records"));
        assert!(s.record_log);
        assert!(!s.preflight);
        assert!(Settings::default().preflight);
        assert_eq!(s.network, Some(Network::parse("10.98.0.0/16").unwrap()));
        assert!(s.apptainer_env);
        assert_eq!(s.host_template.as_deref(), Some("{}-ib"));
        assert_eq!(s.port_base, Some(9000));
        assert_eq!(s.port_range, PortRange::parse("40000-40999").unwrap());
        assert_eq!(s.gpus_per_node, Some(4));
        assert_eq!(s.gpus_per_task, Some(2));
        assert!(!s.auto_set_gpu);
        assert_eq!(s.rpc_layer.as_deref(), Some("grpc+verbs"));
        assert_eq!(Settings::from_admin_args([]).unwrap(), Settings::default());
        for good in [
            "{}-ib",
            "{}",
            "ib-{}",
            "{}.ib.example.org",
            "a{}b",
            "{}-IB0",
        ] {
            let s = Settings::from_admin_args([format!("host-template={good}").as_str()]);
            assert_eq!(s.unwrap().host_template.as_deref(), Some(good));
        }
    }

    #[test]
    fn bad_values_name_key_and_value() {
        for (arg, want) in [
            ("port-base=0", "port-base=0: a port must be 1-65535"),
            ("port-base=65536", "port-base=65536: a port must be 1-65535"),
            ("port-base=http", "port-base=\"http\": not a port number"),
            (
                "port-range=20000",
                "port-range=\"20000\": not a port range LO-HI",
            ),
            (
                "port-range=20000-20010",
                "port-range=20000-20010: 11 ports; a port range has at least 64",
            ),
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
            (
                "apptainer-env=on",
                "apptainer-env=\"on\": use true or false",
            ),
            ("rpc-layer=a\"b", "not an rpc layer"),
            (
                "colour=blue",
                "unknown key \"colour\" (known: port-base, port-range, gpus-per-node",
            ),
            ("port-base", "\"port-base\" is not key=value"),
            (
                "host-template=-ib",
                "host-template=\"-ib\": not a host name template",
            ),
            ("host-template={}-{}", "not a host name template"),
            ("host-template={}/ib", "letters, digits and '-'"),
            ("host-template=-{}", "neither begins nor ends with '-'"),
            ("host-template={}-", "neither begins nor ends with '-'"),
            ("host-template=.{}", "no empty label"),
            ("host-template={}.", "no empty label"),
            ("host-template={}..ib", "no empty label"),
            ("host-template={}_ib", "letters, digits and '-'"),
            ("host-template={}.-ib", "neither begins nor ends with '-'"),
            (
                "network=10.98.0.0/33",
                "network=\"10.98.0.0/33\": not a subnet",
            ),
            ("network=ib0:1", "network=\"ib0:1\": not an interface name"),
            (
                "record=records",
                "record=\"records\": not an absolute directory",
            ),
            ("preflight=maybe", "preflight=\"maybe\": use true or false"),
            (
                "requeue-on=0",
                "requeue-on=\"0\": an exit code must be 3-125",
            ),
            // What any failure exits with: a Python exception (1), a usage
            // error (2), a task the plugin or Slurm refused (1).
            (
                "requeue-on=1",
                "requeue-on=\"1\": an exit code must be 3-125",
            ),
            (
                "requeue-on=2",
                "requeue-on=\"2\": an exit code must be 3-125",
            ),
            // What a shell reports for a command it could not run (126,
            // 127) or one a signal ended (128 + N).
            (
                "requeue-on=127",
                "requeue-on=\"127\": an exit code must be 3-125",
            ),
            (
                "requeue-on=137",
                "requeue-on=\"137\": an exit code must be 3-125",
            ),
            (
                "requeue-on=256",
                "requeue-on=\"256\": an exit code must be 3-125",
            ),
            (
                "requeue-max=1001",
                "requeue-max=\"1001\": a count of requeues must be 0-1000",
            ),
            (
                "requeue-max=-1",
                "requeue-max=\"-1\": a count of requeues must be 0-1000",
            ),
        ] {
            let e = Settings::from_admin_args([arg]).unwrap_err().to_string();
            assert!(e.starts_with("plugstack.conf argument"), "{arg}: {e}");
            assert!(e.contains(want), "{arg}: {e}");
        }
    }
}
