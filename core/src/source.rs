//! Where a node's facts come from, in two parts: what Slurm says of the task
//! ([`Source`]: its variables and ids) and what the node has ([`Probe`]: its
//! GPUs, a file the user names, its interfaces, a host's addresses). The
//! plugin reads slurmstepd's view; srun and the CLI their own process.

use std::net::IpAddr;

use crate::addresses::{Interface, etc_hosts_lookup};
use crate::error::{Error, Result, bail};
use crate::number::parse_u32;
use crate::os::{self, ProcessEnv};

/// What Slurm says of the task.
pub trait Source {
    /// A variable of the task's environment.
    fn var(&mut self, name: &str) -> Result<Option<String>>;
    /// The task's job and step ids. The plugin asks Slurm (S_JOB_ID,
    /// S_JOB_STEPID), which no user can forge; by default they are read from
    /// SLURM_JOB_ID and SLURM_STEP_ID.
    fn job_step(&mut self) -> Result<Option<(u32, u32)>> {
        let job = self.var("SLURM_JOB_ID")?;
        let step = self.var("SLURM_STEP_ID")?;
        Ok(job
            .as_deref()
            .and_then(parse_u32)
            .zip(step.as_deref().and_then(parse_u32)))
    }
    /// Whether this Slurm fills the nodes of a block distribution in
    /// topology order (26.05 on; the plugin knows it from the headers it was
    /// built with). Then, without srun's map, a task reads
    /// SLURM_TOPOLOGY_ADDR_PATTERN to refuse what it cannot rebuild.
    fn blocks_follow_topology(&self) -> bool {
        false
    }
    /// The step's task count as slurmstepd was given it (S_JOB_TOTAL_TASK_COUNT:
    /// in a heterogeneous step the component's, where SLURM_STEP_NUM_TASKS
    /// counts the whole step), None where no one but the environment can say.
    fn component_tasks(&mut self) -> Result<Option<u32>> {
        Ok(None)
    }
}

/// What the node has, probed only when the step needs it; a source that
/// cannot tell keeps the default, which refuses.
pub trait Probe {
    /// Slurm's topology.conf as the node has it (None: no such file): its
    /// blocks name the NVLink domains (crate::nvl_domains).
    fn topology_conf(&mut self) -> Option<String> {
        None
    }

    /// The number of GPUs the node has.
    fn gpu_count(&mut self) -> Result<u32> {
        bail!("the node's GPUs are not counted here")
    }
    /// A file named by the user (SLURM_HOSTFILE), read as the user.
    fn read_file(&mut self, path: &str) -> Result<String> {
        bail!("no file is read here ({path})")
    }
    /// The node's network interfaces (read only when the step names a
    /// network).
    fn interfaces(&mut self) -> Result<Vec<Interface>> {
        bail!("the node's network interfaces are not known here")
    }
    /// The addresses of `host`, for a node srun handed no network. By
    /// default /etc/hosts only: a bounded read, where DNS could hang.
    fn resolve(&mut self, host: &str) -> Result<Vec<IpAddr>> {
        Ok(etc_hosts_lookup(&os::read_user_file("/etc/hosts")?, host))
    }
}

/// srun reads its own variables through the core's parsers, and the CLI
/// reads a task's as the plugin reads them in slurmstepd.
impl Source for ProcessEnv {
    fn var(&mut self, name: &str) -> Result<Option<String>> {
        match std::env::var(name) {
            Ok(v) => Ok(Some(v)),
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => {
                Err(Error::new(format!("{name} is not valid UTF-8")))
            }
        }
    }
}

impl Probe for ProcessEnv {
    fn gpu_count(&mut self) -> Result<u32> {
        os::node_gpu_count()
    }

    fn topology_conf(&mut self) -> Option<String> {
        os::slurm_conf_file("topology.conf")
    }

    fn read_file(&mut self, path: &str) -> Result<String> {
        os::read_user_file(path)
    }

    fn interfaces(&mut self) -> Result<Vec<Interface>> {
        os::node_interfaces()
    }

    /// The CLI is the user's own process: the system's resolver, DNS too.
    fn resolve(&mut self, host: &str) -> Result<Vec<IpAddr>> {
        os::resolve_host(host)
    }
}

/// Facts given as values: a task's variables, the node's GPU count and
/// interfaces, its /etc/hosts, the files a user could name. The one source
/// of the core's tests, the CLI's and the fuzz targets: no process, no file
/// of this machine. What is not given is refused as [`Probe`]'s defaults do.
#[derive(Clone, Debug)]
pub struct Given {
    /// The variables, looked up as spank_getenv does: the first of a name.
    pub vars: Vec<(String, String)>,
    /// The node's GPU count, or the error counting them gives.
    pub gpus: std::result::Result<u32, String>,
    pub interfaces: Option<Vec<Interface>>,
    /// The text of the node's /etc/hosts.
    pub etc_hosts: String,
    /// The files a user names (SLURM_HOSTFILE), by path.
    pub files: Vec<(String, String)>,
    /// [`Source::component_tasks`].
    pub component_tasks: Option<u32>,
}

impl Given {
    /// A task with these variables and nothing else known.
    pub fn vars<K: Into<String>, V: Into<String>>(vars: impl IntoIterator<Item = (K, V)>) -> Given {
        Given {
            vars: vars
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
            gpus: Err("the node's GPUs are not counted here".into()),
            interfaces: None,
            etc_hosts: String::new(),
            files: Vec::new(),
            component_tasks: None,
        }
    }

    /// The node has `n` GPUs.
    pub fn gpus(mut self, n: u32) -> Given {
        self.gpus = Ok(n);
        self
    }

    /// The node's interfaces.
    pub fn interfaces(mut self, interfaces: Vec<Interface>) -> Given {
        self.interfaces = Some(interfaces);
        self
    }

    /// The node's /etc/hosts.
    pub fn etc_hosts(mut self, text: &str) -> Given {
        self.etc_hosts = text.into();
        self
    }
}

impl Source for Given {
    fn var(&mut self, name: &str) -> Result<Option<String>> {
        Ok(self
            .vars
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone()))
    }
    fn component_tasks(&mut self) -> Result<Option<u32>> {
        Ok(self.component_tasks)
    }
}

impl Probe for Given {
    fn gpu_count(&mut self) -> Result<u32> {
        self.gpus.clone().map_err(Error::new)
    }
    fn read_file(&mut self, path: &str) -> Result<String> {
        match self.files.iter().find(|(p, _)| p == path) {
            Some((_, text)) => Ok(text.clone()),
            None => bail!("no file is read here ({path})"),
        }
    }
    fn interfaces(&mut self) -> Result<Vec<Interface>> {
        match &self.interfaces {
            Some(list) => Ok(list.clone()),
            None => bail!("the node's network interfaces are not known here"),
        }
    }
    fn resolve(&mut self, host: &str) -> Result<Vec<IpAddr>> {
        Ok(etc_hosts_lookup(&self.etc_hosts, host))
    }
}
