//! The fast network: which interface of this node carries the step's data
//! connections, and the variables that tell the frameworks so.
//!
//! A step names its network in one of two ways: `--tf-network=ib0|CIDR`
//! (a setting, [`Network`]), or the host template, whose names srun resolves
//! before launch (it is the user's process: DNS may take its time there) and
//! hands every task as the smallest subnet holding every node's address
//! ([`covering`], in its hand-off, crate::handoff). Each node then only lists its own interfaces
//! (getifaddrs, no DNS, no fork: crate::os::node_interfaces) and picks the one
//! carrying an address on that network ([`choose`]). Without srun's word (the
//! components of a heterogeneous step srun's variable does not reach) a node
//! looks its own template name up in /etc/hosts only: a bounded file read.

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result, bail, shown};
use crate::frameworks::Frameworks;
use crate::settings::Settings;
use crate::step::Source;

/// A subnet, `10.98.0.0/16`, host bits cleared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    pub fn new(addr: IpAddr, prefix: u8) -> Cidr {
        let bits = width(addr);
        let prefix = prefix.min(bits);
        let addr = match addr {
            IpAddr::V4(a) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
                IpAddr::V4((u32::from(a) & mask).into())
            }
            IpAddr::V6(a) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
                IpAddr::V6((u128::from(a) & mask).into())
            }
        };
        Cidr { addr, prefix }
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        width(ip) == width(self.addr) && Cidr::new(ip, self.prefix).addr == self.addr
    }

    fn parse(text: &str) -> Option<Cidr> {
        let (addr, prefix) = text.split_once('/')?;
        let addr: IpAddr = addr.parse().ok()?;
        if prefix.is_empty() || prefix.len() > 3 || !prefix.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let prefix: u8 = prefix.parse().ok().filter(|p| *p <= width(addr))?;
        Some(Cidr::new(addr, prefix))
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

fn width(ip: IpAddr) -> u8 {
    if ip.is_ipv4() { 32 } else { 128 }
}

/// The smallest subnet of each address family holding every address: the
/// network the step's names are on. Subnets nest, so it lies inside the
/// fast network's own subnet and holds no other network's address.
pub fn covering(addrs: &[IpAddr]) -> Vec<Cidr> {
    let mut out = Vec::new();
    for v4 in [true, false] {
        let mut family = addrs.iter().copied().filter(|a| a.is_ipv4() == v4);
        let Some(first) = family.next() else { continue };
        let mut cidr = Cidr::new(first, width(first));
        for a in family {
            while !cidr.contains(a) {
                cidr = Cidr::new(cidr.addr, cidr.prefix - 1);
            }
        }
        out.push(cidr);
    }
    out
}

/// A step's network: an interface by name, or the interface with an address
/// in one of these subnets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Network {
    Interface(String),
    Subnets(Vec<Cidr>),
}

impl Network {
    /// `ib0`, `10.98.0.0/16`, `fd00::/64`, or several subnets separated by
    /// commas (as srun hands them: one per address family).
    pub fn parse(text: &str) -> std::result::Result<Network, String> {
        if text.contains('/') {
            let cidrs: Option<Vec<Cidr>> = text.split(',').take(8).map(Cidr::parse).collect();
            return match cidrs {
                Some(c) if text.split(',').count() <= 8 => Ok(Network::Subnets(c)),
                _ => Err(format!(
                    "{}: not a subnet such as 10.98.0.0/16",
                    shown(text)
                )),
            };
        }
        // Linux's rule for interface names (dev_valid_name): 1-15 bytes, no
        // '/', ':' or white space, not "." or "..".
        let ok = !text.is_empty()
            && text.len() < 16
            && text != "."
            && text != ".."
            && text
                .bytes()
                .all(|b| b.is_ascii_graphic() && b != b':' && b != b',');
        if !ok {
            return Err(format!(
                "{}: not an interface name such as ib0 or a subnet such as 10.98.0.0/16",
                shown(text)
            ));
        }
        Ok(Network::Interface(text.to_string()))
    }
}

impl fmt::Display for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Network::Interface(name) => f.write_str(name),
            Network::Subnets(cidrs) => {
                let list: Vec<String> = cidrs.iter().map(Cidr::to_string).collect();
                f.write_str(&list.join(","))
            }
        }
    }
}

/// One interface of the node and its addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    pub name: String,
    pub addrs: Vec<IpAddr>,
}

/// The interface of `interfaces` on `network`: the named one, if it has an
/// address, or the one address in the subnets. None carrying it, or two
/// (the subnets span two networks), is an error: never a silent fall-back.
pub fn choose<'a>(interfaces: &'a [Interface], network: &Network) -> Result<&'a str> {
    match network {
        Network::Interface(name) => match interfaces.iter().find(|i| &i.name == name) {
            Some(i) if !i.addrs.is_empty() => Ok(&i.name),
            Some(_) => bail!("interface {name} has no address"),
            None => bail!("no interface {name}"),
        },
        Network::Subnets(cidrs) => {
            let on = |i: &&Interface| i.addrs.iter().any(|a| cidrs.iter().any(|c| c.contains(*a)));
            let mut found = interfaces.iter().filter(on);
            match (found.next(), found.next()) {
                (Some(i), None) => Ok(&i.name),
                (None, _) => bail!("no interface with an address in {network}"),
                (Some(a), Some(b)) => bail!(
                    "both {} and {} have an address in {network}: name one with --tf-network=IFNAME",
                    a.name,
                    b.name
                ),
            }
        }
    }
}

/// A variable a framework reads to pick the interface of its data
/// connections.
pub struct InterfaceVar {
    pub name: &'static str,
    /// What the value is before the interface's name (NCCL's `=`: exactly
    /// this interface, where a bare name is a prefix: `ib` matches `ib0`
    /// and `ib1`).
    pub prefix: &'static str,
    /// Who reads it, for the docs and `explain`.
    pub reader: &'static str,
}

impl InterfaceVar {
    pub fn value(&self, interface: &str) -> String {
        format!("{}{interface}", self.prefix)
    }
}

pub static NCCL: InterfaceVar = InterfaceVar {
    name: "NCCL_SOCKET_IFNAME",
    prefix: "=",
    reader: "NCCL (PyTorch, TensorFlow and JAX on GPUs): bootstrap and socket transport",
};
pub static GLOO: InterfaceVar = InterfaceVar {
    name: "GLOO_SOCKET_IFNAME",
    prefix: "",
    reader: "PyTorch's gloo process groups",
};
pub static TENSORPIPE: InterfaceVar = InterfaceVar {
    name: "TP_SOCKET_IFNAME",
    prefix: "",
    reader: "PyTorch's RPC (TensorPipe)",
};

/// Every interface variable, in the order they are set.
pub static VARS: [&InterfaceVar; 3] = [&NCCL, &GLOO, &TENSORPIPE];

/// What a node found: its interface on the step's network, and the
/// variables the user set, which stay as they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeNetwork {
    pub network: Network,
    pub interface: String,
    pub kept: Vec<String>,
}

/// The interface variables `present` says are set: the user's, kept.
pub fn kept(mut present: impl FnMut(&str) -> bool) -> Vec<String> {
    VARS.iter()
        .filter(|v| present(v.name))
        .map(|v| v.name.to_string())
        .collect()
}

/// Where the step's network comes from, for messages.
fn origin(settings: &Settings) -> String {
    match (&settings.network, &settings.host_template) {
        (Some(n), _) => format!("--tf-network={n}"),
        (None, Some(t)) => format!("the network of --tf-host-template={t}"),
        (None, None) => "no network".into(),
    }
}

/// Most host-template lookups srun runs at once.
pub const MAX_PARALLEL_LOOKUPS: usize = 32;

/// The time all of a step's host-template lookups together may take in
/// srun: past it the step is refused in one line naming it.
pub const LOOKUP_DEADLINE: Duration = Duration::from_secs(10);

/// A name lookup (the system's resolver in srun, a stand-in in tests).
pub type Resolver = Arc<dyn Fn(&str) -> Result<Vec<IpAddr>> + Send + Sync>;

/// How srun looks the template's names up: the resolver, the deadline for
/// all of them, how many at once, and whether the user interrupted srun.
pub struct Lookups {
    pub resolve: Resolver,
    pub deadline: Duration,
    pub parallel: usize,
    pub interrupted: Box<dyn Fn() -> bool>,
}

impl Lookups {
    /// srun's: `resolve`, [`LOOKUP_DEADLINE`], [`MAX_PARALLEL_LOOKUPS`].
    pub fn new(resolve: Resolver) -> Lookups {
        Lookups {
            resolve,
            deadline: LOOKUP_DEADLINE,
            parallel: MAX_PARALLEL_LOOKUPS,
            interrupted: Box::new(|| false),
        }
    }
}

/// How often the waiting thread checks for an interrupt.
const POLL: Duration = Duration::from_millis(50);

/// The addresses of each of `names`, in order: at most `lookups.parallel`
/// lookups at once in worker threads, all of them within `lookups.deadline`,
/// the wait ended early by an interrupt. A lookup cannot be cancelled
/// (getaddrinfo): one still running when srun gives up is left behind, its
/// thread detached, and its answer dropped.
fn resolve_all(names: &[String], lookups: &Lookups) -> Result<Vec<Vec<IpAddr>>> {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc;
    let start = std::time::Instant::now();
    let queue = Arc::new(Mutex::new(
        names
            .iter()
            .cloned()
            .enumerate()
            .collect::<Vec<_>>()
            .into_iter(),
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let (send, answers) = mpsc::channel::<(usize, Result<Vec<IpAddr>>)>();
    let workers = lookups.parallel.clamp(1, names.len().max(1));
    let mut started = 0;
    for _ in 0..workers {
        let (queue, stop, send, resolve) = (
            queue.clone(),
            stop.clone(),
            send.clone(),
            lookups.resolve.clone(),
        );
        let spawned = std::thread::Builder::new()
            .name("tf-cluster-lookup".into())
            .stack_size(256 << 10)
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let next = queue.lock().unwrap_or_else(|e| e.into_inner()).next();
                    let Some((i, name)) = next else { break };
                    if send.send((i, resolve(&name))).is_err() {
                        break;
                    }
                }
            });
        if spawned.is_ok() {
            started += 1;
        }
    }
    drop(send);
    if started == 0 && !names.is_empty() {
        bail!("cannot start a thread to look the host template's names up");
    }
    let mut found: Vec<Option<Vec<IpAddr>>> = vec![None; names.len()];
    let mut left = names.len();
    let give_up = |why: String| -> Result<Vec<Vec<IpAddr>>> {
        stop.store(true, Ordering::Relaxed);
        Err(Error::new(why))
    };
    while left > 0 {
        if (lookups.interrupted)() {
            return give_up(format!(
                "interrupted while looking up the host template's names ({} of {} answered)",
                names.len() - left,
                names.len()
            ));
        }
        let Some(remaining) = lookups.deadline.checked_sub(start.elapsed()) else {
            return give_up(format!(
                "the host template's names did not all resolve within {:?} ({} of {} answered; srun waits at most that long for all of them)",
                lookups.deadline,
                names.len() - left,
                names.len()
            ));
        };
        match answers.recv_timeout(remaining.min(POLL)) {
            Ok((i, Ok(addrs))) => {
                found[i] = Some(addrs);
                left -= 1;
            }
            Ok((_, Err(e))) => return give_up(e.to_string()),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return give_up("a host-template lookup ended without an answer".into());
            }
        }
    }
    Ok(found.into_iter().map(Option::unwrap_or_default).collect())
}

/// srun's decision for the step's network, before launch: `--tf-network`
/// as given, or the subnet covering every node's template name, resolved
/// here with `lookups` (None: the step names no network).
pub fn for_step<'h>(
    settings: &Settings,
    hosts: impl IntoIterator<Item = &'h str>,
    lookups: &Lookups,
) -> Result<Option<Network>> {
    let network = match (&settings.network, &settings.host_template) {
        (Some(n), _) => Some(n.clone()),
        (None, Some(template)) => {
            let names: Vec<String> = hosts
                .into_iter()
                .map(|host| template.replace("{}", host))
                .collect();
            let found = resolve_all(&names, lookups).map_err(|e| {
                Error::new(format!(
                    "{e} ({}): name the network with --tf-network=IFNAME|CIDR",
                    origin(settings)
                ))
            })?;
            let mut addrs = Vec::new();
            for (name, found) in names.iter().zip(found) {
                if found.is_empty() {
                    bail!("{name} has no address ({})", origin(settings));
                }
                addrs.extend(found);
            }
            let cidrs = covering(&addrs);
            (!cidrs.is_empty()).then_some(Network::Subnets(cidrs))
        }
        (None, None) => None,
    };
    Ok(network)
}

/// This node's interface on the step's network, or None when the step names
/// no network. `handed`: srun's word on the network (Some: from srun's
/// hand-off, the network or none). `source` gives the node's interfaces
/// and, without srun's word, the node's own template name (slurmstepd: from
/// /etc/hosts only). A node that has no interface on the network fails, in
/// one line naming the node and the network.
pub fn for_node(
    settings: &Settings,
    source: &mut impl Source,
    handed: Option<Option<Network>>,
    nodename: Option<&str>,
) -> Result<Option<NodeNetwork>> {
    if settings.network.is_none() && settings.host_template.is_none() {
        return Ok(None);
    }
    let node = nodename.unwrap_or("this node");
    let network = match handed {
        Some(network) => network,
        None => match (&settings.network, &settings.host_template) {
            (Some(n), _) => Some(n.clone()),
            (None, Some(template)) => {
                let Some(nodename) = nodename else {
                    bail!(
                        "SLURMD_NODENAME is not set: the node's name on the fast network is unknown"
                    );
                };
                let name = template.replace("{}", nodename);
                let addrs = source.resolve(&name)?;
                if addrs.is_empty() {
                    bail!(
                        "{node}: srun handed no network and {name} is not in /etc/hosts ({})",
                        origin(settings)
                    );
                }
                Some(Network::Subnets(covering(&addrs)))
            }
            (None, None) => None,
        },
    };
    // The user's own: the interface variables the step's environment holds,
    // which is what its tasks receive (srun's --export applied: under
    // `--export=NONE` or `--export=HOME` srun's own value never reaches
    // them, and `--export=NAME=VALUE` gives them one srun's did not have).
    // srun's list (KEPT) is what srun's environment held: not the tasks'.
    let mut kept = Vec::new();
    for v in VARS {
        if source.var(v.name)?.is_some() {
            kept.push(v.name.to_string());
        }
    }
    let Some(network) = network else {
        return Ok(None);
    };
    let interfaces = source.interfaces()?;
    let interface = choose(&interfaces, &network)
        .map_err(|e| {
            Error::new(format!(
                "{node} is not on {}: {e}",
                origin_of(settings, &network)
            ))
        })?
        .to_string();
    Ok(Some(NodeNetwork {
        network,
        interface,
        kept,
    }))
}

/// The network as the step named it, for the refusal's line.
fn origin_of(settings: &Settings, network: &Network) -> String {
    match &settings.network {
        Some(_) => format!("--tf-network={network}"),
        None => format!("{network}, {}", origin(settings)),
    }
}

/// The interface variables of the step's frameworks for a node on
/// `node`'s network, but the user's own.
pub fn vars(frameworks: Frameworks, node: &NodeNetwork) -> Vec<(&'static str, String)> {
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

/// The addresses of `host` in the text of an /etc/hosts file.
pub fn etc_hosts_lookup(text: &str, host: &str) -> Vec<IpAddr> {
    text.lines()
        .filter_map(|line| {
            let line = line.split('#').next().unwrap_or_default();
            let mut words = line.split_whitespace();
            let addr: IpAddr = words.next()?.parse().ok()?;
            words.any(|w| w.eq_ignore_ascii_case(host)).then_some(addr)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn iface(name: &str, addrs: &[&str]) -> Interface {
        Interface {
            name: name.into(),
            addrs: addrs.iter().map(|a| ip(a)).collect(),
        }
    }

    /// A two-network node as the testbed's: Slurm's names on eth0, the
    /// `-ib` names on eth1.
    fn node() -> Vec<Interface> {
        vec![
            iface("lo", &["127.0.0.1", "::1"]),
            iface("eth0", &["172.18.0.3", "fe80::42:acff:fe12:3"]),
            iface("eth1", &["10.98.0.3"]),
            iface("docker0", &[]),
        ]
    }

    #[test]
    fn the_covering_subnet_holds_every_address_and_no_more() {
        let addrs = [ip("10.98.0.2"), ip("10.98.0.3"), ip("10.98.0.4")];
        let cidrs = covering(&addrs);
        assert_eq!(cidrs.len(), 1);
        assert_eq!(cidrs[0].to_string(), "10.98.0.0/29");
        assert!(addrs.iter().all(|a| cidrs[0].contains(*a)));
        assert!(!cidrs[0].contains(ip("10.98.0.8")));
        assert_eq!(covering(&[ip("10.98.0.2")])[0].to_string(), "10.98.0.2/32");
        let both = covering(&[ip("10.1.0.1"), ip("fd00::1"), ip("fd00::2")]);
        assert_eq!(Network::Subnets(both).to_string(), "10.1.0.1/32,fd00::/126");
        assert!(covering(&[]).is_empty());
        // Far apart: the whole family.
        assert_eq!(
            covering(&[ip("1.0.0.1"), ip("200.0.0.1")])[0].to_string(),
            "0.0.0.0/0"
        );
    }

    #[test]
    fn a_node_finds_its_interface_by_subnet_or_name() {
        let n = node();
        let net = Network::parse("10.98.0.0/16").unwrap();
        assert_eq!(choose(&n, &net).unwrap(), "eth1");
        let net = Network::Subnets(covering(&[ip("10.98.0.2"), ip("10.98.0.4")]));
        assert_eq!(choose(&n, &net).unwrap(), "eth1");
        assert_eq!(
            choose(&n, &Network::parse("eth0").unwrap()).unwrap(),
            "eth0"
        );
        // Host bits are cleared, as Flux's interface hint takes them.
        assert_eq!(
            choose(&n, &Network::parse("172.18.0.9/16").unwrap()).unwrap(),
            "eth0"
        );
    }

    #[test]
    fn a_node_without_the_network_is_told_so_never_ethernet() {
        let n = node();
        let e = choose(&n, &Network::parse("10.99.0.0/16").unwrap()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "no interface with an address in 10.99.0.0/16"
        );
        let e = choose(&n, &Network::parse("ib0").unwrap()).unwrap_err();
        assert_eq!(e.to_string(), "no interface ib0");
        let e = choose(&n, &Network::parse("docker0").unwrap()).unwrap_err();
        assert_eq!(e.to_string(), "interface docker0 has no address");
        // Subnets spanning two networks: ambiguous, refused.
        let e = choose(&n, &Network::parse("0.0.0.0/0").unwrap()).unwrap_err();
        assert!(e.to_string().contains("--tf-network=IFNAME"), "{e}");
    }

    #[test]
    fn networks_parse_as_names_or_subnets() {
        for good in [
            "ib0",
            "hsn0",
            "enp65s0f1np1",
            "10.98.0.0/16",
            "fd00::/64",
            "10.0.0.0/8,fd00::/8",
        ] {
            assert_eq!(Network::parse(good).unwrap().to_string(), good);
        }
        for bad in [
            "",
            ".",
            "a very long name",
            "ib0:1",
            "eth 0",
            "10.98.0.0/33",
            "10.98.0.0/",
            "10.98.0/16",
            "10.98.0.0/+8",
            "fd00::/129",
            "ib0/16",
        ] {
            assert!(Network::parse(bad).is_err(), "{bad:?}");
        }
    }

    /// A task as slurmstepd shows it: variables, the node's interfaces, and
    /// its /etc/hosts.
    struct Node {
        vars: Vec<(&'static str, String)>,
        interfaces: Vec<Interface>,
        hosts: &'static str,
    }

    impl Source for Node {
        fn var(&mut self, name: &str) -> Result<Option<String>> {
            Ok(self
                .vars
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.clone()))
        }
        fn gpu_count(&mut self) -> Result<u32> {
            Ok(0)
        }
        fn read_file(&mut self, path: &str) -> Result<String> {
            bail!("no file {path}")
        }
        fn interfaces(&mut self) -> Result<Vec<Interface>> {
            Ok(self.interfaces.clone())
        }
        fn resolve(&mut self, host: &str) -> Result<Vec<IpAddr>> {
            Ok(etc_hosts_lookup(self.hosts, host))
        }
    }

    fn template() -> Settings {
        let mut s = Settings::default();
        s.set("host-template", "{}-ib").unwrap();
        s
    }

    #[test]
    fn srun_resolves_every_nodes_name_and_notes_the_users_variables() {
        let names = Lookups::new(Arc::new(|name: &str| -> Result<Vec<IpAddr>> {
            match name {
                "node1-ib" => Ok(vec![ip("10.98.0.2")]),
                "node2-ib" => Ok(vec![ip("10.98.0.3")]),
                "node3-ib" => Ok(vec![ip("10.98.0.4")]),
                _ => bail!("cannot resolve {name}: Name or service not known"),
            }
        }));
        let handed = for_step(&template(), ["node1", "node2", "node3"], &names).unwrap();
        assert_eq!(handed.unwrap().to_string(), "10.98.0.0/29");
        assert_eq!(kept(|v| v == "GLOO_SOCKET_IFNAME"), ["GLOO_SOCKET_IFNAME"]);
        let e = for_step(&template(), ["node1", "node4"], &names).unwrap_err();
        assert_eq!(
            e.to_string(),
            "cannot resolve node4-ib: Name or service not known (the network of --tf-host-template={}-ib): name the network with --tf-network=IFNAME|CIDR"
        );
        // --tf-network wins and needs no name resolved.
        let mut s = template();
        s.set("network", "ib0").unwrap();
        let handed = for_step(&s, ["node4"], &names).unwrap();
        assert_eq!(handed, Some(Network::Interface("ib0".into())));
        // No network named: nothing resolved, nothing handed.
        let handed = for_step(&Settings::default(), ["node4"], &names).unwrap();
        assert_eq!(handed, None);
    }

    /// A resolver that sleeps `each` per name and counts the lookups in
    /// flight at once (the most, in `most`).
    fn slow(each: Duration, most: Arc<std::sync::atomic::AtomicUsize>) -> Resolver {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let now = Arc::new(AtomicUsize::new(0));
        Arc::new(move |name: &str| {
            let n = now.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(n, Ordering::SeqCst);
            std::thread::sleep(each);
            now.fetch_sub(1, Ordering::SeqCst);
            let k: u8 = name
                .trim_start_matches("node")
                .trim_end_matches("-ib")
                .parse()
                .unwrap();
            Ok(vec![IpAddr::from([10, 98, 0, k])])
        })
    }

    fn hosts(n: usize) -> Vec<String> {
        (1..=n).map(|k| format!("node{k}")).collect()
    }

    /// 50 lookups of 200 ms each: 10 s one after the other; at most 32 at
    /// once they take two rounds.
    #[test]
    fn srun_looks_the_names_up_in_parallel_at_most_32_at_once() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let most = Arc::new(AtomicUsize::new(0));
        let lookups = Lookups::new(slow(Duration::from_millis(200), most.clone()));
        let hosts = hosts(50);
        let start = std::time::Instant::now();
        let handed = for_step(&template(), hosts.iter().map(String::as_str), &lookups).unwrap();
        let took = start.elapsed();
        assert_eq!(handed.unwrap().to_string(), "10.98.0.0/26");
        let most = most.load(Ordering::SeqCst);
        assert!(most > 1, "lookups ran one at a time");
        assert!(most <= MAX_PARALLEL_LOOKUPS, "{most} lookups at once");
        assert!(took < Duration::from_secs(5), "50 lookups took {took:?}");
    }

    /// One name that never answers: the step is refused when the deadline
    /// for all names passes, in one line naming it, and srun goes on (the
    /// stuck lookup is left behind).
    #[test]
    fn a_lookup_past_the_deadline_is_refused_in_one_line() {
        let stuck: Resolver = Arc::new(|name: &str| {
            if name == "node2-ib" {
                std::thread::sleep(Duration::from_secs(30));
            }
            Ok(vec![ip("10.98.0.2")])
        });
        let mut lookups = Lookups::new(stuck);
        lookups.deadline = Duration::from_millis(300);
        let start = std::time::Instant::now();
        let e = for_step(&template(), ["node1", "node2", "node3"], &lookups)
            .unwrap_err()
            .to_string();
        let took = start.elapsed();
        assert!(took < Duration::from_secs(5), "refused after {took:?}");
        assert!(e.contains("within 300ms"), "{e}");
        assert!(!e.contains('\n'), "{e}");
        assert_eq!(LOOKUP_DEADLINE, Duration::from_secs(10));
    }

    /// Ctrl-C (srun's interrupt, as the predicate sees it) ends the wait.
    #[test]
    fn an_interrupted_srun_stops_waiting_for_the_names() {
        let stuck: Resolver = Arc::new(|_: &str| {
            std::thread::sleep(Duration::from_secs(30));
            Ok(vec![])
        });
        let mut lookups = Lookups::new(stuck);
        let start = std::time::Instant::now();
        lookups.interrupted = Box::new(move || start.elapsed() > Duration::from_millis(100));
        let e = for_step(&template(), ["node1"], &lookups)
            .unwrap_err()
            .to_string();
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{:?}",
            start.elapsed()
        );
        assert!(e.contains("interrupted"), "{e}");
    }

    #[test]
    fn each_node_finds_its_interface_or_refuses_in_one_line() {
        let task = |interfaces| Node {
            vars: vec![("SLURMD_NODENAME", "node3".into())],
            interfaces,
            hosts: "",
        };
        let net = || Some(Network::parse("10.98.0.0/29").ok());
        let found = for_node(&template(), &mut task(node()), net(), Some("node3"))
            .unwrap()
            .unwrap();
        assert_eq!(found.interface, "eth1");
        let without = vec![iface("lo", &["127.0.0.1"]), iface("eth0", &["172.18.0.4"])];
        let e = for_node(&template(), &mut task(without), net(), Some("node3")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "node3 is not on 10.98.0.0/29, the network of --tf-host-template={}-ib: no interface with an address in 10.98.0.0/29"
        );
        // srun said the step names no network: nothing is read.
        assert_eq!(
            for_node(&template(), &mut task(vec![]), Some(None), Some("node3")).unwrap(),
            None
        );
        // A step naming no network reads nothing at all.
        assert_eq!(
            for_node(&Settings::default(), &mut task(vec![]), None, None).unwrap(),
            None
        );
    }

    /// Under `srun --export=NONE` (or `--export=HOME`) the tasks never get
    /// srun's own NCCL_SOCKET_IFNAME, though srun saw it and listed it as
    /// the user's: the step's environment, what the tasks really receive,
    /// decides. With the variable there (plain export, or
    /// `--export=NCCL_SOCKET_IFNAME=eth0`) it is the user's and kept.
    #[test]
    fn a_users_variable_is_kept_only_where_the_tasks_receive_it() {
        let eth1 = || Some(Network::parse("eth1").ok());
        let mut none = Node {
            vars: vec![],
            interfaces: node(),
            hosts: "",
        };
        let found = for_node(&template(), &mut none, eth1(), Some("node1"))
            .unwrap()
            .unwrap();
        assert!(found.kept.is_empty(), "{:?}", found.kept);
        let torch = Settings {
            frameworks: Frameworks::only(&crate::frameworks::pytorch::FRAMEWORK),
            ..Settings::default()
        };
        assert!(
            vars(torch.frameworks, &found).contains(&("NCCL_SOCKET_IFNAME", "=eth1".into())),
            "{:?}",
            vars(torch.frameworks, &found)
        );
        let mut all = Node {
            vars: vec![("NCCL_SOCKET_IFNAME", "=eth0".into())],
            interfaces: node(),
            hosts: "",
        };
        let found = for_node(&template(), &mut all, eth1(), Some("node1"))
            .unwrap()
            .unwrap();
        assert_eq!(found.kept, ["NCCL_SOCKET_IFNAME"]);
        assert!(
            !vars(torch.frameworks, &found)
                .iter()
                .any(|(n, _)| *n == "NCCL_SOCKET_IFNAME")
        );
        // A value given on srun's line (`--export=GLOO_SOCKET_IFNAME=eth0`)
        // is in the step's environment though srun's own had none.
        let mut given = Node {
            vars: vec![("GLOO_SOCKET_IFNAME", "eth0".into())],
            interfaces: node(),
            hosts: "",
        };
        let found = for_node(&template(), &mut given, eth1(), Some("node1"))
            .unwrap()
            .unwrap();
        assert_eq!(found.kept, ["GLOO_SOCKET_IFNAME"]);
    }

    /// Where srun's word does not reach (another component of a
    /// heterogeneous step): /etc/hosts only, and the task's own variables.
    #[test]
    fn without_srun_a_node_reads_etc_hosts_only() {
        let mut n = Node {
            vars: vec![("GLOO_SOCKET_IFNAME", "eth0".into())],
            interfaces: node(),
            hosts: "10.98.0.3 node2-ib\n",
        };
        let found = for_node(&template(), &mut n, None, Some("node2"))
            .unwrap()
            .unwrap();
        assert_eq!(found.interface, "eth1");
        assert_eq!(found.kept, ["GLOO_SOCKET_IFNAME"]);
        let e = for_node(&template(), &mut n, None, Some("node1")).unwrap_err();
        assert!(
            e.to_string().contains("node1-ib is not in /etc/hosts"),
            "{e}"
        );
    }

    #[test]
    fn etc_hosts_gives_a_names_addresses() {
        let text = "127.0.0.1 localhost\n# 10.0.0.1 node1-ib\n10.98.0.2\tnode1-ib node1-ib.cluster # fast\nfd00::2 node1-ib\n10.98.0.3 node2-ib\n";
        assert_eq!(
            etc_hosts_lookup(text, "node1-ib"),
            vec![ip("10.98.0.2"), ip("fd00::2")]
        );
        assert!(etc_hosts_lookup(text, "node3-ib").is_empty());
    }
}
