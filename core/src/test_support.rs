//! What the core's tests share: a task's variables as slurmstepd would show
//! them, the tasks of the steps several topics use, and their resolution.

use std::collections::HashMap;

use crate::addresses::{Interface, Network};
use crate::error::Result;
use crate::frameworks::{Frameworks, pytorch};
use crate::handoff::{Handoff, Verdict};
use crate::hostlist::HostList;
use crate::injection::Injection;
use crate::node::resolve;
use crate::secret::Secret;
use crate::settings::Settings;
use crate::source::Given;
use crate::step::Step;
use crate::task_map::TaskMap;

/// A task's variables, as slurmstepd would show them, on a node without
/// GPUs, with Slurm's names on eth0 and the fast network on ib0.
pub(crate) fn given(vars: HashMap<&'static str, String>) -> Given {
    let iface = |name: &str, addr: &str| Interface {
        name: name.into(),
        addrs: vec![addr.parse().unwrap()],
    };
    Given::vars(vars)
        .gpus(0)
        .interfaces(vec![iface("eth0", "172.18.0.2"), iface("ib0", "10.98.0.2")])
}

/// A task of `srun -n1 -w node3 : -N2 -n3 -w node1,node2`, as measured on
/// the testbed: the first component's task sees `cyclic`.
pub(crate) fn het_task(procid: &str, node_id: &str, gtids: &str, dist: &str) -> Step {
    let vars = [
        ("SLURM_PROCID", procid),
        ("SLURM_STEP_NUM_TASKS", "4"),
        ("SLURM_STEP_NODELIST", "node[1-3]"),
        ("SLURM_STEP_TASKS_PER_NODE", "2,1(x2)"),
        ("SLURM_DISTRIBUTION", dist),
        ("SLURM_NODEID", node_id),
        ("SLURM_GTIDS", gtids),
        ("SLURM_HET_SIZE", "2"),
        ("SLURM_JOB_NODELIST_HET_GROUP_0", "node3"),
        ("SLURM_JOB_NODELIST_HET_GROUP_1", "node[1-2]"),
    ];
    let vars = vars.into_iter().map(|(k, v)| (k, v.to_string())).collect();
    Step::gather(&Settings::default(), &mut given(vars))
        .unwrap()
        .step()
        .unwrap()
}

pub(crate) fn vars_of(injection: &Injection) -> Vec<(&str, &str)> {
    injection.vars().collect()
}

/// A task of `srun -N3 --ntasks-per-node=1 -m arbitrary --resv-ports
/// --torch-cluster=… torchrun …` in step 4242.7, with the host file
/// node3,node1,node2: rank 0 runs on node3, rank 1 on node1, rank 2 on
/// node2. `extra`: more of the task's variables.
pub(crate) fn launcher(
    procid: &str,
    node: &str,
    extra: &[(&'static str, &str)],
) -> Vec<(&'static str, String)> {
    let mut vars = vec![
        ("SLURM_PROCID", procid),
        ("SLURM_STEP_NUM_TASKS", "3"),
        ("SLURM_STEP_NODELIST", "node[1-3]"),
        ("SLURM_STEP_TASKS_PER_NODE", "1(x3)"),
        ("SLURMD_NODENAME", node),
        ("SLURM_GTIDS", procid),
        ("SLURM_STEP_RESV_PORTS", "13000-13001"),
        ("SLURM_JOB_ID", "4242"),
        ("SLURM_STEP_ID", "7"),
    ];
    let word = launcher_word(0);
    vars.push(("SLURM_TF_CLUSTER", &word));
    vars.extend_from_slice(extra);
    vars.into_iter().map(|(k, v)| (k, v.to_string())).collect()
}

/// srun's word to the tasks of [`launcher`]'s step 4242.7 in the job's
/// `restart`th incarnation: its map, ranks 0, 1 and 2 on node3, node1 and
/// node2 of node[1-3].
pub(crate) fn launcher_word(restart: u32) -> String {
    launcher_word_on(restart, None)
}

/// [`launcher_word`] naming the step's network `net` (`10.98.0.0/29`).
pub(crate) fn launcher_word_on(restart: u32, net: Option<&str>) -> String {
    let hosts = "node[1-3]";
    let list = HostList::parse(hosts, 3).unwrap();
    let map = TaskMap::new(4242, 7, list, vec![2, 0, 1]).unwrap();
    let verdict = Verdict::Map {
        map,
        hosts: hosts.into(),
    };
    let mut word = Handoff::undecided(4242, 7, false, restart, None);
    let net = net.map(|n| Network::parse(n).unwrap());
    word.decided(verdict, net, Vec::new()).unwrap();
    word.encode()
}

/// srun's word on step `job`.0 without a map (the tasks rebuild it), with
/// the step's network `net`, the interface variables srun's environment
/// held (`kept`) and the step's `secret` (hex).
pub(crate) fn rebuild_word(job: u32, net: &str, kept: &[&str], secret: Option<&str>) -> String {
    let secret = secret.map(|s| Secret::parse(s).unwrap());
    let mut word = Handoff::undecided(job, 0, false, 0, secret);
    let kept = kept.iter().map(|k| k.to_string()).collect();
    let net = Some(Network::parse(net).unwrap());
    word.decided(Verdict::Rebuild, net, kept).unwrap();
    word.encode()
}

pub(crate) fn resolve_vars(
    settings: &Settings,
    vars: Vec<(&'static str, String)>,
) -> Result<Injection> {
    let step = Step::gather(settings, &mut given(vars.into_iter().collect()))?.step()?;
    resolve(settings, &step)
}

pub(crate) fn torch(value: &str) -> Settings {
    let mut settings = Settings {
        frameworks: Frameworks::only(&pytorch::FRAMEWORK),
        ..Settings::default()
    };
    (pytorch::FRAMEWORK.arg.as_ref().unwrap().set)(&mut settings, value).unwrap();
    settings
}
