//! The step's network decided: srun's, before launch ([`for_step`]), and
//! each node's interface on it ([`for_node`]).

use super::lookups::{Lookups, resolve_all};
use crate::addresses::{Network, NodeNetwork, VARS, address_on, choose, covering};
use crate::error::{Error, Kind, Result, bail};
use crate::settings::Settings;
use crate::source::{Probe, Source};

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
            let found = resolve_all(&names, lookups).map_err(|e| match e.kind() {
                // The user's own doing: no advice.
                Kind::Interrupted => e,
                _ => Error::new(format!(
                    "{e} ({}): name the network with --tf-network=IFNAME|CIDR",
                    origin(settings)
                )),
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
    source: &mut (impl Source + Probe),
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
        address: address_on(&interfaces, &interface, &network),
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

#[cfg(test)]
mod tests {
    use super::*;

    use crate::addresses::tests::{iface, ip, node};
    use crate::handoff::Early;
    use crate::network::lookups::{LOOKUP_DEADLINE, MAX_PARALLEL_LOOKUPS, Resolver};
    use crate::settings::Frameworks;
    use crate::source::Given;
    use std::net::IpAddr;
    use std::sync::Arc;
    use std::time::Duration;

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
        let e = for_step(&template(), ["node1"], &lookups).unwrap_err();
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{:?}",
            start.elapsed()
        );
        // Its own kind, for srun to fail whatever the allocation; no advice.
        assert_eq!(e.kind(), Kind::Interrupted, "{e}");
        assert!(
            e.to_string().starts_with("interrupted while looking up"),
            "{e}"
        );
        assert!(!e.to_string().contains("--tf-network"), "{e}");
    }

    #[test]
    fn each_node_finds_its_interface_or_refuses_in_one_line() {
        let task = |interfaces| Given::vars([("SLURMD_NODENAME", "node3")]).interfaces(interfaces);
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
    /// `--export=NCCL_SOCKET_IFNAME=eth0`) it is the user's and kept (what
    /// the frameworks then set: frameworks/table_tests.rs).
    #[test]
    fn a_users_variable_is_kept_only_where_the_tasks_receive_it() {
        let eth1 = || Some(Network::parse("eth1").ok());
        let mut none = Given::vars(Vec::<(&str, String)>::new()).interfaces(node());
        let found = for_node(&template(), &mut none, eth1(), Some("node1"))
            .unwrap()
            .unwrap();
        assert!(found.kept.is_empty(), "{:?}", found.kept);
        let mut all = Given::vars([("NCCL_SOCKET_IFNAME", "=eth0")]).interfaces(node());
        let found = for_node(&template(), &mut all, eth1(), Some("node1"))
            .unwrap()
            .unwrap();
        assert_eq!(found.kept, ["NCCL_SOCKET_IFNAME"]);
        // A value given on srun's line (`--export=GLOO_SOCKET_IFNAME=eth0`)
        // is in the step's environment though srun's own had none.
        let mut given = Given::vars([("GLOO_SOCKET_IFNAME", "eth0")]).interfaces(node());
        let found = for_node(&template(), &mut given, eth1(), Some("node1"))
            .unwrap()
            .unwrap();
        assert_eq!(found.kept, ["GLOO_SOCKET_IFNAME"]);
    }

    /// Where srun's word does not reach (another component of a
    /// heterogeneous step): /etc/hosts only, and the task's own variables.
    #[test]
    fn without_srun_a_node_reads_etc_hosts_only() {
        let mut n = Given::vars([("GLOO_SOCKET_IFNAME", "eth0")])
            .interfaces(node())
            .etc_hosts("10.98.0.3 node2-ib\n");
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

    /// A task of component 1 of `srun --het-group=0,1 -n2 -w node1 : -n2
    /// -w node2` (srun's hand-off reaches component 0 only) holding `word`,
    /// on node2, whose /etc/hosts does not name node2-ib: its network.
    fn component_1(word: &str) -> Result<Option<NodeNetwork>> {
        let vars = [
            ("SLURM_JOB_ID", "16"),
            ("SLURM_STEP_ID", "0"),
            ("SLURM_PROCID", "2"),
            ("SLURM_STEP_NUM_TASKS", "4"),
            ("SLURM_STEP_NODELIST", "node[1-2]"),
            ("SLURM_STEP_TASKS_PER_NODE", "2(x2)"),
            ("SLURM_NODEID", "1"),
            ("SLURM_GTIDS", "2,3"),
            ("SLURMD_NODENAME", "node2"),
            ("SLURM_HET_SIZE", "2"),
            ("SLURM_JOB_ID_HET_GROUP_0", "15"),
            ("SLURM_JOB_ID_HET_GROUP_1", "16"),
            ("SLURM_JOB_NODELIST_HET_GROUP_0", "node1"),
            ("SLURM_JOB_NODELIST_HET_GROUP_1", "node2"),
            ("SLURM_TF_CLUSTER", word),
        ];
        let mut task = Given::vars(vars)
            .gpus(0)
            .interfaces(node())
            .etc_hosts("127.0.0.1 localhost\n172.18.0.3 node2\n");
        let mut settings = template();
        let torch = crate::frameworks::FRAMEWORKS
            .iter()
            .find(|f| f.option == "torch-cluster")
            .unwrap();
        settings.frameworks = settings.frameworks.with(torch);
        Ok(crate::step::Step::gather(&settings, &mut task)?
            .step()?
            .network)
    }

    /// The components srun's hand-off does not reach take the network srun
    /// resolved (DNS too) before the step existed, from its early word: no
    /// name is looked up on the node. An early word without it (srun could
    /// not tell the step's components) leaves the node to its /etc/hosts.
    #[test]
    fn a_component_srun_did_not_reach_takes_the_network_of_its_early_word() {
        let early = |net: Option<&str>| {
            let network = net.map(|n| Network::parse(n).unwrap());
            Early::new(Frameworks::default(), false, 0, network, None).encode()
        };
        let found = component_1(&early(Some("10.98.0.0/29"))).unwrap().unwrap();
        assert_eq!(found.interface, "eth1");
        assert_eq!(found.network.to_string(), "10.98.0.0/29");
        let e = component_1(&early(None)).unwrap_err().to_string();
        assert!(e.contains("node2-ib is not in /etc/hosts"), "{e}");
        // A network none of the node's interfaces is on: refused, naming it.
        let e = component_1(&early(Some("10.99.0.0/29")))
            .unwrap_err()
            .to_string();
        assert!(e.contains("node2 is not on 10.99.0.0/29"), "{e}");
    }
}
