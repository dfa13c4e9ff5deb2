//! The network's pure types: a subnet ([`Cidr`]), a step's network
//! ([`Network`]), a node's interfaces and the one on the network
//! ([`choose`]), the variables that tell a framework which to use
//! ([`InterfaceVar`]), and the reading of /etc/hosts. No system call, no
//! setting: the node's interfaces come in (crate::os lists them).

use std::fmt;
use std::net::IpAddr;

use crate::error::{Result, bail, shown};

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

/// `interface`'s address on `network` (an IPv4 one first), among
/// `interfaces`.
pub fn address_on(interfaces: &[Interface], interface: &str, network: &Network) -> Option<IpAddr> {
    let addrs = &interfaces.iter().find(|i| i.name == interface)?.addrs;
    let on = |a: &&IpAddr| match network {
        Network::Interface(_) => true,
        Network::Subnets(cidrs) => cidrs.iter().any(|c| c.contains(**a)),
    };
    let v4 = addrs.iter().filter(on).find(|a| a.is_ipv4());
    v4.or(addrs.iter().find(on)).copied()
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
    /// The interface's address on the network (an IPv4 first).
    pub address: Option<IpAddr>,
    pub kept: Vec<String>,
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
pub(crate) mod tests {
    use super::*;

    pub(crate) fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    pub(crate) fn iface(name: &str, addrs: &[&str]) -> Interface {
        Interface {
            name: name.into(),
            addrs: addrs.iter().map(|a| ip(a)).collect(),
        }
    }

    /// A two-network node as the testbed's: Slurm's names on eth0, the
    /// `-ib` names on eth1.
    pub(crate) fn node() -> Vec<Interface> {
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
