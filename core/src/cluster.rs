//! The whole step as TensorFlow sees it: every rank's role, host and port,
//! from srun's task map or rebuilt from the step's variables, checked against
//! what Slurm says of this node.

use std::collections::HashMap;

use super::error::{bail, shown};
use super::gpus::GpuPlan;
use super::hostlist::HostList;
use super::layout::{self, Distribution, Placement};
use super::roles::{self, Role};
use super::settings::Frameworks;
use super::task_map::TaskMap;
use super::{Injection, MAX_TASKS, Result, Settings, Step, ports, tf_config};

/// The whole step as TensorFlow sees it: every rank's role, host and port.
#[derive(Debug)]
pub struct Cluster {
    /// The nodes, by their names in Slurm.
    hosts: HostList,
    /// The same nodes as addresses (on the fast network with a host template).
    addresses: HostList,
    /// Tasks of the step on each node.
    counts: Vec<u32>,
    /// Each node's index in the order of the nodes' first ranks (rank 0's
    /// node is 0): PyTorch's GROUP_RANK.
    groups: Vec<u32>,
    placements: Vec<Placement>,
    /// The ports of each node, by index: TF's task k takes index k, then
    /// PyTorch's MASTER_PORT and JAX's coordinator the next ones.
    ports: Vec<u16>,
    roles: Vec<Role>,
    gpus: GpuPlan,
    rpc_layer: Option<String>,
    frameworks: Frameworks,
    /// The step's job and step ids: torchrun's rendezvous id.
    job_step: Option<(u32, u32)>,
}

/// One rank of a [`Cluster`], for `tf-cluster explain`.
#[derive(Debug, PartialEq, Eq)]
pub struct RankInfo<'a> {
    pub rank: u32,
    pub role: &'a str,
    pub index: u32,
    pub host: &'a str,
    /// TF's port; 0 without `--tf-cluster`.
    pub port: u16,
    pub gpus: Option<String>,
}

impl Cluster {
    /// Lays out the step and checks it against what Slurm says of this node.
    pub fn new(settings: &Settings, step: &Step) -> Result<Cluster> {
        let counts = required(step.tasks_per_node.clone(), "SLURM_STEP_TASKS_PER_NODE")?;
        let hosts = required(step.hosts.clone(), "SLURM_STEP_NODELIST")?;
        if let Some(dup) = hosts.first_duplicate() {
            bail!("SLURM_STEP_NODELIST names {dup} twice: two tasks would share one address");
        }
        if hosts.len() != counts.len() {
            bail!(
                "SLURM_STEP_NODELIST names {} node(s) but SLURM_STEP_TASKS_PER_NODE gives {} count(s)",
                hosts.len(),
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
        match (step.num_tasks, settings.roles.total()) {
            (Some(n), _) => {
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
        let f = settings.frameworks;
        let wanted = if f.tf { max_local } else { 0 } + u32::from(f.torch) + u32::from(f.jax);
        let ports = ports::ports(settings.port_base, step.resv_ports.as_deref(), wanted)?;
        let addresses = match &settings.host_template {
            Some(template) => {
                let names: Vec<String> = hosts.iter().map(|h| template.replace("{}", h)).collect();
                HostList::from_names(names.iter().map(String::as_str))
            }
            None => hosts.clone(),
        };
        let mut groups = vec![u32::MAX; hosts.len()];
        let mut next = 0;
        for p in &placements {
            if groups[p.node as usize] == u32::MAX {
                groups[p.node as usize] = next;
                next += 1;
            }
        }
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
            addresses,
            counts: counts.clone(),
            groups,
            placements,
            ports,
            roles,
            gpus,
            rpc_layer: settings.rpc_layer.clone(),
            frameworks: f,
            job_step: step
                .task_map
                .as_ref()
                .map(|m| (m.job, m.step))
                .or(step.job_step),
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
        let node = match (&step.nodename, step.node_id) {
            (Some(name), _) => match self.hosts.position(name) {
                Some(i) => i as u32,
                None => bail!("this node, {name}, is not among the step's hosts"),
            },
            (None, Some(id)) => id,
            (None, None) => return Ok(()),
        };
        if node as usize >= self.hosts.len() {
            bail!(
                "SLURM_NODEID {node} is outside the step's {} node(s)",
                self.hosts.len()
            );
        }
        // Slurm lists the node's ranks in local order: the k-th is local task k.
        let computed: Vec<u32> = layout::ranks_on(&self.placements, node).collect();
        if computed != *gtids || computed.len() != counts[node as usize] as usize {
            let hint = match (&step.task_map, step.het_nodelists.is_empty()) {
                (Some(_), _) => " (srun's task map disagrees with this node)",
                (None, false) => {
                    " (without srun's task map, heterogeneous steps need block layouts in every component)"
                }
                (None, true) => "",
            };
            let list = |ids: &[u32]| ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
            bail!(
                "the task layout on {} is not the one Slurm made: computed ranks {} but SLURM_GTIDS is {}{hint}",
                self.hosts.get(node as usize),
                list(&computed),
                shown(&list(gtids))
            );
        }
        Ok(())
    }

    /// Host and TF port of `rank` (port 0 without `--tf-cluster`: the step
    /// has no TF ports then).
    fn address(&self, rank: usize) -> (&str, u16) {
        let p = self.placements[rank];
        let port = if self.frameworks.tf {
            self.ports[p.local as usize]
        } else {
            0
        };
        (self.addresses.get(p.node as usize), port)
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
        let Some(&p) = self.placements.get(rank as usize) else {
            bail!(
                "SLURM_PROCID {rank} is outside the step's {} task(s)",
                self.num_tasks()
            );
        };
        let f = self.frameworks;
        let mut vars: Vec<(&'static str, String)> = Vec::new();
        if f.tf {
            vars.push(("TF_CONFIG", self.tf_config(rank)?));
        }
        // PyTorch's scripts pick their GPU with set_device(LOCAL_RANK): they
        // see the node's GPUs, local rank k using the k-th (never two ranks
        // one GPU, as the plan gives each local task its own).
        let gpus = if f.torch {
            self.gpus.whole()
        } else {
            self.gpus.for_local(p.local)
        };
        if let Some(list) = gpus {
            // Slurm would drop a longer one and leave every GPU visible.
            let size = "CUDA_VISIBLE_DEVICES=".len() + list.len() + 1;
            if size >= tf_config::ENV_LIMIT {
                bail!(
                    "CUDA_VISIBLE_DEVICES would be {size} bytes, over the {}-byte limit of one environment variable",
                    tf_config::ENV_LIMIT
                );
            }
            vars.push(("CUDA_VISIBLE_DEVICES", list));
        }
        let first = self.placements[0];
        let coordinator = self.addresses.get(first.node as usize);
        let mut port = if f.tf {
            self.ports.len() - usize::from(f.torch) - usize::from(f.jax)
        } else {
            0
        };
        let world = self.num_tasks().to_string();
        if f.torch {
            let master_port = self.ports[port].to_string();
            vars.extend([
                ("MASTER_ADDR", coordinator.to_string()),
                ("MASTER_PORT", master_port.clone()),
                ("RANK", rank.to_string()),
                ("WORLD_SIZE", world.clone()),
                ("LOCAL_RANK", p.local.to_string()),
                ("LOCAL_WORLD_SIZE", self.counts[p.node as usize].to_string()),
                ("GROUP_RANK", self.groups[p.node as usize].to_string()),
                ("GROUP_WORLD_SIZE", self.hosts.len().to_string()),
            ]);
            // torchrun reads every argument it is not given from PET_<DEST>
            // (torch/distributed/argparse_util.py): one launcher per task,
            // ranked as Slurm ranks the tasks, meeting in a static rendezvous
            // (no election: launcher k is node k) on rank 0's host and the
            // step's MASTER_PORT. A directly launched rank never reads them.
            vars.extend([
                ("PET_NNODES", world),
                ("PET_NODE_RANK", rank.to_string()),
                ("PET_MASTER_ADDR", coordinator.to_string()),
                ("PET_MASTER_PORT", master_port.clone()),
                ("PET_RDZV_ENDPOINT", format!("{coordinator}:{master_port}")),
            ]);
            if let Some((job, step)) = self.job_step {
                vars.push(("PET_RDZV_ID", format!("{job}.{step}")));
            }
            vars.push(("PET_RDZV_BACKEND", "static".to_string()));
            port += 1;
        }
        if f.jax {
            // JAX takes the process count and id from SLURM_NTASKS and
            // SLURM_PROCID itself (global in heterogeneous steps too); its
            // own choice of coordinator is the node list's first host.
            vars.push((
                "JAX_COORDINATOR_ADDRESS",
                format!("{coordinator}:{}", self.ports[port]),
            ));
            if let Some(ids) = self.gpus.device_ids(p.local, f.torch) {
                vars.push(("JAX_LOCAL_DEVICE_IDS", ids));
            }
        }
        Ok(Injection { list: vars })
    }

    /// TF_CONFIG of `rank`. An `evaluator` stays out of the cluster part:
    /// TensorFlow runs it beside the cluster, not in it.
    fn tf_config(&self, rank: u32) -> Result<String> {
        let Some((role, index)) = roles::role_of(&self.roles, rank) else {
            bail!(
                "SLURM_PROCID {rank} is outside the step's {} task(s)",
                self.num_tasks()
            );
        };
        let ports: Vec<String> = self.ports.iter().map(u16::to_string).collect();
        let mut first = 0usize;
        let jobs = self.roles.iter().filter_map(|r| {
            let ranks = first..first + r.count as usize;
            first = ranks.end;
            (r.name != roles::EVALUATOR).then(|| tf_config::Job {
                name: r.name.as_str(),
                addresses: self.placements[ranks].iter().map(|p| {
                    (
                        self.addresses.get(p.node as usize),
                        ports[p.local as usize].as_str(),
                    )
                }),
            })
        });
        // Each address is `"host:port",`; role names and the rest are small.
        let capacity = self.placements.len() * (self.addresses.longest() + 9) + 256;
        let tf_config = tf_config::render(jobs, role, index, self.rpc_layer.as_deref(), capacity);
        tf_config::check_size(&tf_config, self.num_tasks())?;
        Ok(tf_config)
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
        step.distribution
    } else {
        Distribution::Block
    };
    if let Some(pattern) = &step.block_topology {
        layout::check_topology(dist, pattern, &counts, step.het_nodelists.len())?;
    }
    let placements = match (dist, &step.hostfile) {
        (Distribution::Arbitrary, Some(listed)) => layout::place_listed(&hosts, &counts, listed)?,
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
pub fn check_het_rebuild(map: &TaskMap, het_nodelists: &[HostList]) -> Result<()> {
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

/// A value the step must have.
pub(crate) fn required<T>(value: Option<T>, name: &str) -> Result<T> {
    match value {
        Some(v) => Ok(v),
        None => bail!("{name} is not set: not inside a Slurm step?"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{resolve, task_map};

    /// A task's variables, as slurmstepd would show them.
    struct Vars(HashMap<&'static str, String>);

    impl crate::Source for Vars {
        fn var(&mut self, name: &str) -> Result<Option<String>> {
            Ok(self.0.get(name).cloned())
        }
        fn gpu_count(&mut self) -> Result<u32> {
            Ok(0)
        }
        fn read_file(&mut self, path: &str) -> Result<String> {
            bail!("no file {path} here")
        }
    }

    /// A task of `srun -n1 -w node3 : -N2 -n3 -w node1,node2`, as measured on
    /// the testbed: the first component's task sees `cyclic`.
    fn het_task(procid: &str, node_id: &str, gtids: &str, dist: &str) -> Step {
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
        Step::gather(&Settings::default(), &mut Vars(vars)).unwrap()
    }

    fn vars_of(injection: &Injection) -> Vec<(&'static str, &str)> {
        injection.vars().collect()
    }

    /// `srun -N3 -n5 -m cyclic --resv-ports=4 --gres=gpu:4 --torch-cluster
    /// --jax-cluster --tf-host-template={}-ib`, rank 3 (on n1, as its
    /// second task: n1 runs 0,3, n2 1,4, n3 2).
    #[test]
    fn torch_and_jax_from_the_same_layout() {
        let vars = [
            ("SLURM_PROCID", "3"),
            ("SLURM_STEP_NUM_TASKS", "5"),
            ("SLURM_STEP_NODELIST", "n[1-3]"),
            ("SLURM_STEP_TASKS_PER_NODE", "2(x2),1"),
            ("SLURM_DISTRIBUTION", "cyclic"),
            ("SLURM_NODEID", "0"),
            ("SLURM_GTIDS", "0,3"),
            ("SLURM_STEP_RESV_PORTS", "12000-12003"),
            ("CUDA_VISIBLE_DEVICES", "4,5,6,7"),
            ("SLURM_JOB_ID", "4242"),
            ("SLURM_STEP_ID", "7"),
        ];
        let vars = vars.into_iter().map(|(k, v)| (k, v.to_string())).collect();
        let mut settings = Settings {
            frameworks: Frameworks {
                tf: false,
                torch: true,
                jax: true,
            },
            ..Settings::default()
        };
        settings.set("host-template", "{}-ib").unwrap();
        let step = Step::gather(&settings, &mut Vars(vars)).unwrap();
        let injection = resolve(&settings, &step).unwrap();
        assert_eq!(
            vars_of(&injection),
            [
                // The node's GPUs: local rank 1 takes the second with set_device(1).
                ("CUDA_VISIBLE_DEVICES", "4,5,6,7"),
                ("MASTER_ADDR", "n1-ib"),
                ("MASTER_PORT", "12000"),
                ("RANK", "3"),
                ("WORLD_SIZE", "5"),
                ("LOCAL_RANK", "1"),
                ("LOCAL_WORLD_SIZE", "2"),
                ("GROUP_RANK", "0"),
                ("GROUP_WORLD_SIZE", "3"),
                // torchrun, one launcher per task: this launcher is node 3 of 5.
                ("PET_NNODES", "5"),
                ("PET_NODE_RANK", "3"),
                ("PET_MASTER_ADDR", "n1-ib"),
                ("PET_MASTER_PORT", "12000"),
                ("PET_RDZV_ENDPOINT", "n1-ib:12000"),
                ("PET_RDZV_ID", "4242.7"),
                ("PET_RDZV_BACKEND", "static"),
                ("JAX_COORDINATOR_ADDRESS", "n1-ib:12001"),
                // Two GPUs per task; JAX numbers the visible 4,5,6,7 from 0.
                ("JAX_LOCAL_DEVICE_IDS", "2,3"),
            ]
        );
        // With TF_CONFIG too, TF's tasks take ports 0 and 1 of each node:
        // PyTorch's and JAX's come after them, so 4 reserved ports are needed.
        settings.frameworks.tf = true;
        let injection = resolve(&settings, &step).unwrap();
        assert_eq!(injection.get("MASTER_PORT"), Some("12002"));
        assert_eq!(injection.get("PET_MASTER_PORT"), Some("12002"));
        assert_eq!(injection.get("PET_RDZV_ENDPOINT"), Some("n1-ib:12002"));
        assert_eq!(
            injection.get("JAX_COORDINATOR_ADDRESS"),
            Some("n1-ib:12003")
        );
        let tf: serde_json::Value =
            serde_json::from_str(injection.get("TF_CONFIG").unwrap()).unwrap();
        assert_eq!(
            tf["cluster"]["worker"],
            serde_json::json!([
                "n1-ib:12000",
                "n2-ib:12000",
                "n3-ib:12000",
                "n1-ib:12001",
                "n2-ib:12001"
            ])
        );
        let mut short = step.clone();
        short.resv_ports = Some("12000-12002".into());
        let e = resolve(&settings, &short).unwrap_err().to_string();
        assert!(
            e.starts_with("Slurm reserved 3 port(s) (12000-12002) but"),
            "{e}"
        );
    }

    /// PyTorch's GROUP_RANK counts nodes in the order of their first rank:
    /// rank 0's node (node3 here, last by name) is group 0.
    #[test]
    fn group_ranks_follow_the_ranks() {
        let mut settings = Settings::default();
        settings.frameworks.torch = true;
        let injection = resolve(&settings, &het_task("1", "1", "1,2", "block")).unwrap();
        assert_eq!(injection.get("MASTER_ADDR"), Some("node3"));
        assert_eq!(injection.get("GROUP_RANK"), Some("1"));
        assert_eq!(injection.get("LOCAL_WORLD_SIZE"), Some("2"));
        assert_eq!(injection.get("TORCHELASTIC_RUN_ID"), None);
    }

    /// `srun -N3 --ntasks-per-node=1 --torch-cluster torchrun …` with srun's
    /// task map putting rank 0 on node3: every launcher gets torchrun's
    /// arguments as PET_* variables, its node rank being its Slurm rank and
    /// the rendezvous on rank 0's host; the rendezvous id is the map's step.
    /// Without --torch-cluster none of them is set.
    #[test]
    fn torchrun_launchers_get_their_arguments() {
        let map = TaskMap::new(
            4242,
            0,
            HostList::parse("node[1-3]", 10).unwrap(),
            vec![2, 0, 1],
        )
        .unwrap();
        let vars = [
            ("SLURM_PROCID", "1"),
            ("SLURM_STEP_NUM_TASKS", "3"),
            ("SLURM_STEP_NODELIST", "node[1-3]"),
            ("SLURM_STEP_TASKS_PER_NODE", "1(x3)"),
            ("SLURM_NODEID", "0"),
            ("SLURM_GTIDS", "1"),
            ("SLURM_STEP_RESV_PORTS", "12010-12011"),
            ("SLURM_JOB_ID", "4242"),
            ("SLURM_STEP_ID", "0"),
            ("SLURMD_NODENAME", "node1"),
            (task_map::VAR, &map.encode("node[1-3]")),
        ];
        let vars: HashMap<&'static str, String> =
            vars.into_iter().map(|(k, v)| (k, v.to_string())).collect();
        let mut settings = Settings::default();
        settings.frameworks.tf = false;
        settings.frameworks.torch = true;
        let step = Step::gather(&settings, &mut Vars(vars.clone())).unwrap();
        assert!(step.task_map.is_some());
        let injection = resolve(&settings, &step).unwrap();
        let pet: Vec<_> = vars_of(&injection)
            .into_iter()
            .filter(|(n, _)| n.starts_with("PET_"))
            .collect();
        assert_eq!(
            pet,
            [
                ("PET_NNODES", "3"),
                ("PET_NODE_RANK", "1"),
                ("PET_MASTER_ADDR", "node3"),
                ("PET_MASTER_PORT", "12010"),
                ("PET_RDZV_ENDPOINT", "node3:12010"),
                ("PET_RDZV_ID", "4242.0"),
                ("PET_RDZV_BACKEND", "static"),
            ]
        );
        assert_eq!(injection.get("MASTER_ADDR"), Some("node3"));
        assert_eq!(injection.get("GROUP_RANK"), Some("1"));
        // Without the map (a block layout rebuilt from the variables), the
        // task's own ids.
        let mut plain = vars.clone();
        plain.remove(task_map::VAR);
        plain.insert("SLURM_NODEID", "2".into());
        plain.insert("SLURM_GTIDS", "2".into());
        plain.insert("SLURM_PROCID", "2".into());
        plain.insert("SLURMD_NODENAME", "node3".into());
        plain.insert("SLURM_STEP_ID", "3".into());
        let step = Step::gather(&settings, &mut Vars(plain.clone())).unwrap();
        assert_eq!(step.job_step, Some((4242, 3)));
        let injection = resolve(&settings, &step).unwrap();
        assert_eq!(injection.get("PET_RDZV_ID"), Some("4242.3"));
        assert_eq!(injection.get("PET_NODE_RANK"), Some("2"));
        assert_eq!(injection.get("PET_MASTER_ADDR"), Some("node1"));
        // No ids known: torchrun keeps its own default id.
        plain.remove("SLURM_JOB_ID");
        let step = Step::gather(&settings, &mut Vars(plain.clone())).unwrap();
        let injection = resolve(&settings, &step).unwrap();
        assert_eq!(injection.get("PET_RDZV_ID"), None);
        assert_eq!(injection.get("PET_NNODES"), Some("3"));
        // TensorFlow or JAX alone: no PyTorch variable at all.
        settings.frameworks.torch = false;
        settings.frameworks.jax = true;
        let step = Step::gather(&settings, &mut Vars(plain)).unwrap();
        assert_eq!(step.job_step, None);
        let injection = resolve(&settings, &step).unwrap();
        assert!(
            injection
                .vars()
                .all(|(n, _)| !n.starts_with("PET_") && n != "MASTER_ADDR"),
            "{injection:?}"
        );
    }

    /// `chief:1,worker:2,evaluator:1`: the evaluator is the last rank, and no
    /// task's cluster names it.
    #[test]
    fn the_evaluator_runs_beside_the_cluster() {
        let settings = Settings {
            roles: roles::RoleSpec::parse("chief:1,worker:2,evaluator:1").unwrap(),
            ..Settings::default()
        };
        for (rank, task) in [
            ("0", r#"{"type":"chief","index":0}"#),
            ("3", r#"{"type":"evaluator","index":0}"#),
        ] {
            let vars = [
                ("SLURM_PROCID", rank),
                ("SLURM_STEP_NUM_TASKS", "4"),
                ("SLURM_STEP_NODELIST", "n[1-2]"),
                ("SLURM_STEP_TASKS_PER_NODE", "2(x2)"),
            ];
            let vars = vars.into_iter().map(|(k, v)| (k, v.to_string())).collect();
            let step = Step::gather(&settings, &mut Vars(vars)).unwrap();
            let tf = resolve(&settings, &step).unwrap();
            assert_eq!(
                tf.get("TF_CONFIG").unwrap(),
                format!(
                    r#"{{"cluster":{{"chief":["n1:8888"],"worker":["n1:8889","n2:8888"]}},"task":{task}}}"#
                )
            );
        }
    }

    /// `srun -n1 -w node3 : -n4 -w node[1-2] -m cyclic|block`: srun merges
    /// the components' layouts, and refuses the one the components without
    /// its map would rebuild differently.
    #[test]
    fn het_maps_are_merged_and_checked_against_the_rebuild() {
        let one = |list: &str| HostList::parse(list, 10).unwrap();
        let nodelists = [one("node3"), one("node[1-2]")];
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
            let injection = resolve(&settings, &step).unwrap();
            let tf = injection.get("TF_CONFIG").unwrap();
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
