//! The whole step as TensorFlow sees it: every rank's role, host and port,
//! from srun's task map or rebuilt from the step's variables, checked against
//! what Slurm says of this node.

use std::collections::HashMap;

use super::error::{bail, shown};
use super::gpus::GpuPlan;
use super::hostlist::HostList;
use super::layout::{self, Distribution, Placement};
use super::number::parse_u32;
use super::roles::{self, Role};
use super::task_map::TaskMap;
use super::{
    Error, Injection, MAX_TASKS, Result, Settings, Step, ports, tasks_per_node, tf_config,
};

/// The whole step as TensorFlow sees it: every rank's role, host and port.
#[derive(Debug)]
pub struct Cluster {
    hosts: HostList,
    placements: Vec<Placement>,
    ports: Vec<u16>,
    roles: Vec<Role>,
    gpus: GpuPlan,
    rpc_layer: Option<String>,
}

/// One rank of a [`Cluster`], for `tf-cluster explain`.
#[derive(Debug, PartialEq, Eq)]
pub struct RankInfo<'a> {
    pub rank: u32,
    pub role: &'a str,
    pub index: u32,
    pub host: &'a str,
    pub port: u16,
    pub gpus: Option<String>,
}

impl Cluster {
    /// Lays out the step and checks it against what Slurm says of this node.
    pub fn new(settings: &Settings, step: &Step) -> Result<Cluster> {
        let counts = tasks_per_node::parse(
            required(&step.tasks_per_node, "SLURM_STEP_TASKS_PER_NODE")?,
            MAX_TASKS as usize,
        )?;
        let nodelist = required(&step.nodelist, "SLURM_STEP_NODELIST")?;
        let hosts = HostList::parse(nodelist, MAX_TASKS as usize)
            .map_err(|e| Error::new(format!("SLURM_STEP_NODELIST: {e}")))?;
        if let Some(dup) = hosts.first_duplicate() {
            bail!("SLURM_STEP_NODELIST names {dup} twice: two tasks would share one address");
        }
        if hosts.len() != counts.len() {
            bail!(
                "SLURM_STEP_NODELIST {} names {} node(s) but SLURM_STEP_TASKS_PER_NODE {} gives {} count(s)",
                shown(nodelist),
                hosts.len(),
                shown(step.tasks_per_node.as_deref().unwrap_or_default()),
                counts.len()
            );
        }
        let total: u64 = counts.iter().map(|&c| u64::from(c)).sum();
        if total > u64::from(MAX_TASKS) {
            bail!(
                "the step has {total} tasks; TF_CONFIG for more than {MAX_TASKS} cannot fit in one environment variable"
            );
        }
        let total = total as u32;
        match (&step.num_tasks, settings.roles.total()) {
            (Some(n), _) => {
                let n = parse_number(n, "SLURM_STEP_NUM_TASKS")?;
                if n != total {
                    bail!(
                        "SLURM_STEP_NUM_TASKS is {n} but SLURM_STEP_TASKS_PER_NODE adds up to {total}"
                    );
                }
            }
            // Without it, only a spec that gives its counts says the size.
            (None, Some(_)) => {}
            (None, None) => bail!("SLURM_STEP_NUM_TASKS is not set: not inside a Slurm step?"),
        }
        let roles = settings.roles.for_step(total)?;
        let (hosts, counts, placements) = match &step.task_map {
            Some(map) => from_map(map, &hosts, &counts)?,
            None => reconstruct(step, hosts, counts)?,
        };
        let max_local = counts.iter().copied().max().unwrap_or(0);
        let ports = ports::ports(settings.port_base, step.resv_ports.as_deref(), max_local)?;
        let gpus = if settings.auto_set_gpu && !step.gpus_bound_by_slurm {
            GpuPlan::new(
                settings,
                step.cuda_visible_devices.as_deref(),
                step.node_gpus,
                max_local,
            )?
        } else {
            GpuPlan::untouched()
        };
        let cluster = Cluster {
            hosts,
            placements,
            ports,
            roles,
            gpus,
            rpc_layer: settings.rpc_layer.clone(),
        };
        cluster.check_this_node(step, &counts)?;
        Ok(cluster)
    }

    pub fn num_tasks(&self) -> u32 {
        self.placements.len() as u32
    }

    /// Compares the computed ranks of this node, found by its name
    /// (SLURMD_NODENAME, else SLURM_NODEID), with SLURM_GTIDS, the ground
    /// truth: a mismatch must fail the task rather than give it a wrong
    /// TF_CONFIG.
    fn check_this_node(&self, step: &Step, counts: &[u32]) -> Result<()> {
        let Some(gtids) = &step.gtids else {
            return Ok(());
        };
        let node = match (&step.nodename, &step.node_id) {
            (Some(name), _) => match self.hosts.position(name) {
                Some(i) => i as u32,
                None => bail!("this node, {name}, is not among the step's hosts"),
            },
            (None, Some(id)) => parse_number(id, "SLURM_NODEID")?,
            (None, None) => return Ok(()),
        };
        if node as usize >= self.hosts.len() {
            bail!(
                "SLURM_NODEID {node} is outside the step's {} node(s)",
                self.hosts.len()
            );
        }
        if !self.node_has(node, counts[node as usize], gtids) {
            let computed: Vec<String> = layout::ranks_on(&self.placements, node)
                .map(|r| r.to_string())
                .collect();
            let hint = match (&step.task_map, step.het_nodelists.is_empty()) {
                (Some(_), _) => " (srun's task map disagrees with this node)",
                (None, false) => {
                    " (without srun's task map, heterogeneous steps need block layouts in every component)"
                }
                (None, true) => "",
            };
            bail!(
                "the task layout on {} is not the one Slurm made: computed ranks {} but SLURM_GTIDS is {}{hint}",
                self.hosts.get(node as usize),
                computed.join(","),
                shown(gtids)
            );
        }
        Ok(())
    }

    /// Whether `gtids` lists the ranks on `node` in local order, as
    /// `layout::ranks_on` does, without a pass over every rank: the node runs
    /// `count` ranks, the one of local index k being the k-th in rank order,
    /// so the list must have `count` entries, the k-th placed at (node, k).
    fn node_has(&self, node: u32, count: u32, gtids: &str) -> bool {
        let mut local = 0u32;
        for given in gtids.split(',') {
            let Some(rank) = parse_u32(given) else {
                return false;
            };
            let here = Placement { node, local };
            if local == count || self.placements.get(rank as usize) != Some(&here) {
                return false;
            }
            local += 1;
        }
        local == count
    }

    /// Host and port of `rank`.
    fn address(&self, rank: usize) -> (&str, u16) {
        let p = self.placements[rank];
        (
            self.hosts.get(p.node as usize),
            self.ports[p.local as usize],
        )
    }

    /// Every rank, in order.
    pub fn ranks(&self) -> impl Iterator<Item = RankInfo<'_>> {
        let roles = self
            .roles
            .iter()
            .flat_map(|r| (0..r.count).map(move |i| (r.name.as_str(), i)));
        roles.enumerate().map(|(rank, (role, index))| {
            let (host, port) = self.address(rank);
            RankInfo {
                rank: rank as u32,
                role,
                index,
                host,
                port,
                gpus: self.gpus.for_local(self.placements[rank].local),
            }
        })
    }

    /// The variables of `rank`.
    pub fn injection(&self, rank: u32) -> Result<Injection> {
        let Some((role, index)) = roles::role_of(&self.roles, rank) else {
            bail!(
                "SLURM_PROCID {rank} is outside the step's {} task(s)",
                self.num_tasks()
            );
        };
        let ports: Vec<String> = self.ports.iter().map(u16::to_string).collect();
        let mut first = 0usize;
        let jobs = self.roles.iter().map(|r| {
            let ranks = first..first + r.count as usize;
            first = ranks.end;
            tf_config::Job {
                name: r.name.as_str(),
                addresses: self.placements[ranks].iter().map(|p| {
                    (
                        self.hosts.get(p.node as usize),
                        ports[p.local as usize].as_str(),
                    )
                }),
            }
        });
        // Each address is `"host:port",`; role names and the rest are small.
        let capacity = self.placements.len() * (self.hosts.longest() + 9) + 256;
        let tf_config = tf_config::render(jobs, role, index, self.rpc_layer.as_deref(), capacity);
        tf_config::check_size(&tf_config, self.num_tasks())?;
        let cuda_visible_devices = self.gpus.for_local(self.placements[rank as usize].local);
        if let Some(list) = &cuda_visible_devices {
            // Slurm would drop a longer one and leave every GPU visible.
            let size = "CUDA_VISIBLE_DEVICES=".len() + list.len() + 1;
            if size >= tf_config::ENV_LIMIT {
                bail!(
                    "CUDA_VISIBLE_DEVICES would be {size} bytes, over the {}-byte limit of one environment variable",
                    tf_config::ENV_LIMIT
                );
            }
        }
        Ok(Injection {
            tf_config,
            cuda_visible_devices,
        })
    }
}

/// The hosts in node-index order, their counts and every rank's placement,
/// from srun's map: it must agree with what slurmstepd says of the step.
fn from_map(
    map: &TaskMap,
    nodelist: &HostList,
    counts: &[u32],
) -> Result<(HostList, Vec<u32>, Vec<Placement>)> {
    let mut map_counts = vec![0u32; map.hosts.len()];
    let placements: Vec<Placement> = map
        .node_of
        .iter()
        .map(|&node| {
            let local = &mut map_counts[node as usize];
            *local += 1;
            Placement {
                node,
                local: *local - 1,
            }
        })
        .collect();
    let given: HashMap<&str, u32> = nodelist.iter().zip(counts.iter().copied()).collect();
    let agrees = map.hosts.len() == nodelist.len()
        && map
            .hosts
            .iter()
            .zip(&map_counts)
            .all(|(host, n)| given.get(host) == Some(n));
    if !agrees {
        bail!(
            "srun's task map does not match SLURM_STEP_NODELIST and SLURM_STEP_TASKS_PER_NODE: it is not this step's"
        );
    }
    Ok((map.hosts.clone(), map_counts, placements))
}

/// The layout rebuilt from the step's variables when srun gave no map: the
/// distribution, the host file or the heterogeneous components' node lists.
fn reconstruct(
    step: &Step,
    hosts: HostList,
    counts: Vec<u32>,
) -> Result<(HostList, Vec<u32>, Vec<Placement>)> {
    let (hosts, counts) = if step.het_nodelists.is_empty() {
        (hosts, counts)
    } else {
        layout::het_order(&hosts, &counts, &step.het_nodelists)?
    };
    // Each component of a heterogeneous step has its own distribution, and a
    // task sees only its own (Slurm even reports `cyclic` for a one-task
    // component). Components are laid out in blocks, which Slurm's defaults
    // always amount to; a node whose component really is laid out otherwise
    // fails the SLURM_GTIDS check.
    let dist = if step.het_nodelists.is_empty() {
        Distribution::from_env(step.distribution.as_deref(), step.plane_size.as_deref())?
    } else {
        Distribution::Block
    };
    if let Some(pattern) = &step.block_topology {
        layout::check_topology(dist, pattern, &counts, step.het_nodelists.len())?;
    }
    let placements = match (dist, &step.hostfile) {
        (Distribution::Arbitrary, Some(file)) => {
            layout::place_listed(&hosts, &counts, &hostfile_hosts(file)?)?
        }
        (Distribution::Arbitrary, None) => {
            bail!("the layout of an arbitrary distribution is only known from SLURM_HOSTFILE")
        }
        (dist, _) => layout::place(&counts, dist),
    };
    Ok((hosts, counts, placements))
}

/// srun's check of a heterogeneous step. Slurm runs srun's
/// `local_user_init` once for the whole step and hands what it sets to one
/// component's tasks only (srun.c, `_launch_one_app`: "Run pre-launch once
/// for entire hetjob"); the other components rebuild the layout, in blocks
/// over the components' node lists in component order. This refuses a step
/// whose real map differs from that rebuild, before anything runs.
pub fn check_het_rebuild(map: &TaskMap, het_nodelists: &[String]) -> Result<()> {
    let mut counts = vec![0u32; map.hosts.len()];
    for &n in &map.node_of {
        counts[n as usize] += 1;
    }
    let (hosts, counts) = layout::het_order(&map.hosts, &counts, het_nodelists)?;
    let rebuilt = layout::place(&counts, Distribution::Block);
    for (rank, (p, &node)) in rebuilt.iter().zip(&map.node_of).enumerate() {
        let (guess, real) = (hosts.get(p.node as usize), map.hosts.get(node as usize));
        if guess != real {
            bail!(
                "rank {rank} of this heterogeneous step runs on {real}, not on {guess} as the components that srun's task map cannot reach would take it: Slurm hands srun's variables to one component only, so lay out every component in blocks (-m block) or run the components as separate steps"
            );
        }
    }
    Ok(())
}

/// SLURM_HOSTFILE: one host name or hostlist per line, `#` comments.
fn hostfile_hosts(text: &str) -> Result<HostList> {
    let lines: Vec<&str> = text
        .lines()
        .map(|l| l.split('#').next().unwrap_or_default().trim())
        .filter(|l| !l.is_empty())
        .collect();
    HostList::parse(&lines.join(","), MAX_TASKS as usize)
        .map_err(|e| Error::new(format!("SLURM_HOSTFILE: {e}")))
}

pub(crate) fn required<'a>(value: &'a Option<String>, name: &str) -> Result<&'a str> {
    match value {
        Some(v) => Ok(v),
        None => bail!("{name} is not set: not inside a Slurm step?"),
    }
}

pub(crate) fn parse_number(text: &str, name: &str) -> Result<u32> {
    match parse_u32(text) {
        Some(n) => Ok(n),
        None => bail!("{name} is {}, not a number", shown(text)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resolve;

    /// A task of `srun -n1 -w node3 : -N2 -n3 -w node1,node2`, as measured on
    /// the testbed: the first component's task sees `cyclic`.
    fn het_task(procid: &str, node_id: &str, gtids: &str, dist: &str) -> Step {
        Step {
            procid: Some(procid.into()),
            num_tasks: Some("4".into()),
            nodelist: Some("node[1-3]".into()),
            tasks_per_node: Some("2,1(x2)".into()),
            distribution: Some(dist.into()),
            node_id: Some(node_id.into()),
            gtids: Some(gtids.into()),
            het_nodelists: vec!["node3".into(), "node[1-2]".into()],
            ..Step::default()
        }
    }

    /// `srun -n1 -w node3 : -n4 -w node[1-2] -m cyclic|block`: srun merges
    /// the components' layouts, and refuses the one the components without
    /// its map would rebuild differently.
    #[test]
    fn het_maps_are_merged_and_checked_against_the_rebuild() {
        let one = |list: &str| HostList::parse(list, 10).unwrap();
        let nodelists = ["node3".to_string(), "node[1-2]".to_string()];
        let cyclic = TaskMap::from_components(
            5,
            0,
            &[
                (one("node3"), vec![vec![0]]),
                (one("node[1-2]"), vec![vec![0, 2], vec![1, 3]]),
            ],
        )
        .unwrap();
        assert_eq!(
            cyclic.hosts.iter().collect::<Vec<_>>(),
            ["node3", "node1", "node2"]
        );
        assert_eq!(cyclic.node_of, [0, 1, 2, 1, 2]);
        let e = check_het_rebuild(&cyclic, &nodelists)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("rank 2 of this heterogeneous step runs on node2, not on node1"),
            "{e}"
        );
        let block = TaskMap::from_components(
            5,
            0,
            &[
                (one("node3"), vec![vec![0]]),
                (one("node[1-2]"), vec![vec![0, 1], vec![2, 3]]),
            ],
        )
        .unwrap();
        assert_eq!(block.node_of, [0, 1, 1, 2, 2]);
        check_het_rebuild(&block, &nodelists).unwrap();
        // A component's task ids beyond its own count are Slurm's error.
        let e = TaskMap::from_components(5, 0, &[(one("node1"), vec![vec![0, 2]])]).unwrap_err();
        assert!(e.to_string().contains("out of range"), "{e}");
    }

    #[test]
    fn het_components_agree_whatever_distribution_they_report() {
        let settings = Settings {
            roles: roles::RoleSpec::parse("ps:1,worker:3").unwrap(),
            ..Settings::default()
        };
        let want = r#"{"cluster":{"ps":["node3:8888"],"worker":["node1:8888","node1:8889","node2:8888"]},"#;
        for step in [
            het_task("0", "0", "0", "cyclic"),
            het_task("1", "1", "1,2", "block"),
            het_task("3", "2", "3", "block"),
        ] {
            let tf = resolve(&settings, &step).unwrap().tf_config;
            assert!(tf.starts_with(want), "{tf}");
        }
        // A component really laid out cyclically is caught on its nodes.
        let e = resolve(&settings, &het_task("1", "1", "1,3", "cyclic")).unwrap_err();
        assert!(
            e.to_string()
                .contains("heterogeneous steps need block layouts"),
            "{e}"
        );
    }
}
