//! The preflight: before any task of a step starts, each node checks what
//! its tasks are about to rely on, so that a dead link, a port held by a
//! stray process or a missing GPU device node ends the step in seconds with
//! one line naming the node, instead of every peer waiting for its
//! framework's timeout (gloo's and NCCL's 30 minutes).
//!
//! What is checked is decided here, from the node's share ([`Checks::of`]);
//! the host answers the questions ([`Host`]: the SPANK shell reads sysfs,
//! binds the ports and looks at /dev, as the job's user, in slurmstepd's
//! `user_init`); the verdict is the first failed check ([`check`]), which the
//! shell carries to every task of the node as the step's refusal.

use super::error::{Error, Result};
use super::limits::MAX_GPUS;
use super::node::Node;
use super::number::parse_u32;

/// What one node checks before its tasks start.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Checks {
    /// The node's name for the refusal's line.
    pub node: String,
    /// The node's interface on the step's network (None: the step names no
    /// network). That it carries an address on the network was checked as
    /// it was chosen.
    pub interface: Option<String>,
    /// The ports this node's tasks will listen on.
    pub ports: Vec<u16>,
    /// The GPUs Slurm gave the step on this node, by Slurm's index.
    pub gpus: Vec<u32>,
}

impl Checks {
    /// The checks of a node's share; `step_gpus`: the step's
    /// SLURM_STEP_GPUS as slurmstepd holds it on the host (Slurm's indices of
    /// the node's GPUs the step was given).
    pub fn of(node: &Node, step_gpus: Option<&str>) -> Checks {
        Checks {
            node: node
                .step()
                .nodename
                .clone()
                .unwrap_or_else(|| "this node".into()),
            interface: node.step().network.as_ref().map(|n| n.interface.clone()),
            ports: node.listening_ports(),
            gpus: step_gpus.map(gpu_indices).unwrap_or_default(),
        }
    }
}

/// Slurm's GPU indices (`0,2-3`); anything else in the list is skipped (the
/// check is about device nodes, never a reason to refuse by itself).
pub fn gpu_indices(list: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for item in list.split(',') {
        let (lo, hi) = match item.split_once('-') {
            Some((a, b)) => (parse_u32(a), parse_u32(b)),
            None => (parse_u32(item), parse_u32(item)),
        };
        let (Some(lo), Some(hi)) = (lo, hi) else {
            continue;
        };
        if lo > hi || hi >= MAX_GPUS {
            continue;
        }
        for i in lo..=hi {
            if out.len() as u32 >= MAX_GPUS {
                return out;
            }
            out.push(i);
        }
    }
    out
}

/// An interface as the kernel shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    Absent,
    /// Administratively down.
    Down,
    /// Up, but the kernel says no carrier (a cable out, a switch port
    /// down, a veth whose peer is down).
    NoCarrier,
    /// Up with a carrier, or up where the kernel does not say.
    Up,
}

/// IFF_UP: administratively up.
const IFF_UP: u32 = 0x1;
/// IFF_LOWER_UP: the driver reports a carrier (what sysfs's `carrier` shows).
const IFF_LOWER_UP: u32 = 0x1_0000;

impl Link {
    /// The link from the interface's flags in the node's own network
    /// namespace (`None`: no such interface there).
    pub fn of_flags(flags: Option<u32>) -> Link {
        match flags {
            None => Link::Absent,
            Some(f) if f & IFF_UP == 0 => Link::Down,
            Some(f) if f & IFF_LOWER_UP == 0 => Link::NoCarrier,
            Some(_) => Link::Up,
        }
    }
}

/// A GPU's device node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Device {
    /// A character device: fine.
    Char,
    Missing(String),
    NotChar(String),
}

/// The host's answers.
pub trait Host {
    fn link(&mut self, interface: &str) -> Link;
    /// Binds `port` as the tasks will (and lets it go): Err says why not.
    fn bind(&mut self, port: u16) -> std::result::Result<(), String>;
    /// The device node of Slurm's GPU `index`; None where the node names its
    /// devices otherwise (nothing to check).
    fn gpu_device(&mut self, index: u32) -> Option<Device>;
}

/// The first failed check, as the step's refusal: one line naming the node
/// and the check.
pub fn check(checks: &Checks, host: &mut impl Host) -> Result<()> {
    let node = &checks.node;
    if let Some(name) = &checks.interface {
        let why = match host.link(name) {
            Link::Up => None,
            Link::Absent => Some("is gone"),
            Link::Down => Some("is down"),
            Link::NoCarrier => Some("has no carrier"),
        };
        if let Some(why) = why {
            return Err(Error::new(format!("{node}: {name} {why}")));
        }
    }
    for &port in &checks.ports {
        if let Err(why) = host.bind(port) {
            return Err(Error::new(format!(
                "{node}: port {port}, which a task listens on, cannot be bound: {why}"
            )));
        }
    }
    for &gpu in &checks.gpus {
        match host.gpu_device(gpu) {
            None | Some(Device::Char) => {}
            Some(Device::Missing(path)) => {
                return Err(Error::new(format!(
                    "{node}: GPU {gpu}'s device node {path} is missing"
                )));
            }
            Some(Device::NotChar(path)) => {
                return Err(Error::new(format!(
                    "{node}: GPU {gpu}'s device node {path} is not a character device"
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node whose answers are given.
    struct Given {
        link: Link,
        held: Vec<u16>,
        devices: Vec<(u32, Device)>,
        asked_ports: Vec<u16>,
    }

    impl Host for Given {
        fn link(&mut self, _: &str) -> Link {
            self.link
        }
        fn bind(&mut self, port: u16) -> std::result::Result<(), String> {
            self.asked_ports.push(port);
            match self.held.contains(&port) {
                true => Err("Address already in use".into()),
                false => Ok(()),
            }
        }
        fn gpu_device(&mut self, index: u32) -> Option<Device> {
            self.devices
                .iter()
                .find(|(i, _)| *i == index)
                .map(|(_, d)| d.clone())
        }
    }

    fn healthy() -> Given {
        Given {
            link: Link::Up,
            held: vec![],
            devices: (0..4).map(|i| (i, Device::Char)).collect(),
            asked_ports: vec![],
        }
    }

    fn checks() -> Checks {
        Checks {
            node: "node3".into(),
            interface: Some("eth1".into()),
            ports: vec![23456, 23457],
            gpus: vec![0, 1],
        }
    }

    #[test]
    fn a_healthy_node_passes_every_check() {
        let mut host = healthy();
        check(&checks(), &mut host).unwrap();
        assert_eq!(host.asked_ports, [23456, 23457]);
    }

    #[test]
    fn each_failure_is_one_line_naming_the_node_and_the_check() {
        for (link, want) in [
            (Link::NoCarrier, "node3: eth1 has no carrier"),
            (Link::Down, "node3: eth1 is down"),
            (Link::Absent, "node3: eth1 is gone"),
        ] {
            let mut host = Given { link, ..healthy() };
            let e = check(&checks(), &mut host).unwrap_err();
            assert_eq!(e.message(), want);
            assert!(host.asked_ports.is_empty(), "stops at the first failure");
        }
        let mut host = Given {
            held: vec![23457],
            ..healthy()
        };
        let e = check(&checks(), &mut host).unwrap_err();
        assert_eq!(
            e.message(),
            "node3: port 23457, which a task listens on, cannot be bound: Address already in use"
        );
        let mut host = Given {
            devices: vec![
                (0, Device::Char),
                (1, Device::Missing("/dev/nvidia1".into())),
            ],
            ..healthy()
        };
        let e = check(&checks(), &mut host).unwrap_err();
        assert_eq!(
            e.message(),
            "node3: GPU 1's device node /dev/nvidia1 is missing"
        );
        let mut host = Given {
            devices: vec![(0, Device::NotChar("/dev/nvidia0".into()))],
            ..healthy()
        };
        let e = check(&checks(), &mut host).unwrap_err();
        assert!(e.message().ends_with("is not a character device"), "{e}");
    }

    /// A node whose devices are named otherwise (no answer) passes; no
    /// interface or no GPU asks nothing.
    #[test]
    fn what_the_node_cannot_say_is_not_a_failure() {
        let mut host = Given {
            devices: vec![],
            ..healthy()
        };
        check(&checks(), &mut host).unwrap();
        let bare = Checks {
            node: "n".into(),
            ..Checks::default()
        };
        let mut host = Given {
            link: Link::Absent,
            ..healthy()
        };
        check(&bare, &mut host).unwrap();
    }

    /// The flags as `ip link` shows them: `<BROADCAST,MULTICAST,UP,LOWER_UP>`
    /// (0x11003) is up; `<NO-CARRIER,BROADCAST,MULTICAST,UP>` (0x1003) has no
    /// carrier; `<BROADCAST,MULTICAST>` (0x1002) is down, carrier or not.
    #[test]
    fn the_link_follows_the_interfaces_own_flags() {
        assert_eq!(Link::of_flags(Some(0x11003)), Link::Up);
        assert_eq!(Link::of_flags(Some(0x1003)), Link::NoCarrier);
        assert_eq!(Link::of_flags(Some(0x1002)), Link::Down);
        assert_eq!(Link::of_flags(Some(0x11002)), Link::Down);
        assert_eq!(Link::of_flags(None), Link::Absent);
    }

    #[test]
    fn slurms_gpu_indices_are_read_bounded() {
        assert_eq!(gpu_indices("0,1"), [0, 1]);
        assert_eq!(gpu_indices("0,2-3"), [0, 2, 3]);
        assert_eq!(gpu_indices("3"), [3]);
        assert!(gpu_indices("").is_empty());
        assert!(gpu_indices("x,N/A").is_empty());
        assert!(gpu_indices("3-1").is_empty());
        assert!(gpu_indices("0-4294967295").is_empty());
        assert_eq!(gpu_indices("0-1023").len(), MAX_GPUS as usize);
    }

    /// `srun -N3 --ntasks-per-node=1 --ray-cluster` on n1-n3, ports
    /// 12000-12063 reserved: node n`nodeid + 1`'s checks.
    fn ray_checks(nodeid: u32) -> Checks {
        use crate::frameworks::{Frameworks, ray};
        use crate::settings::Settings;
        use crate::source::Given;
        use crate::step::Step;
        let id = nodeid.to_string();
        let name = format!("n{}", nodeid + 1);
        let word = crate::handoff::Handoff::new(7, 0, crate::handoff::Verdict::Rebuild).encode();
        let vars = [
            ("SLURM_PROCID", id.as_str()),
            ("SLURM_STEP_NUM_TASKS", "3"),
            ("SLURM_STEP_NODELIST", "n[1-3]"),
            ("SLURM_STEP_TASKS_PER_NODE", "1(x3)"),
            ("SLURM_NODEID", id.as_str()),
            ("SLURMD_NODENAME", name.as_str()),
            ("SLURM_GTIDS", id.as_str()),
            ("SLURM_JOB_ID", "7"),
            ("SLURM_STEP_ID", "0"),
            ("SLURM_STEP_RESV_PORTS", "12000-12063"),
            ("SLURM_TF_CLUSTER", &word),
        ];
        let vars: std::collections::HashMap<&str, String> =
            vars.into_iter().map(|(k, v)| (k, v.to_string())).collect();
        let settings = Settings {
            frameworks: Frameworks::only(&ray::FRAMEWORK),
            ..Settings::default()
        };
        let step = Step::gather(&settings, &mut Given::vars(vars).gpus(0))
            .unwrap()
            .step()
            .unwrap();
        Checks::of(&Node::prepare(settings, step).unwrap(), None)
    }

    /// Every Ray node listens on the step's node-wide Ray ports, so every
    /// node checks them: the head all 64, each other node all but the
    /// head's own three (GCS 12000, client server 12007, dashboard 12008).
    #[test]
    fn every_ray_node_checks_the_ports_its_ray_node_opens() {
        let head = ray_checks(0);
        assert_eq!(head.node, "n1");
        assert_eq!(head.ports, (12000..=12063).collect::<Vec<u16>>());
        for nodeid in [1, 2] {
            let other = ray_checks(nodeid);
            let want: Vec<u16> = (12001..=12006).chain(12009..=12063).collect();
            assert_eq!(other.ports, want, "{}", other.node);
        }
    }
}
