//! What the tasks printed, parsed: the probe's `TASK` lines into a [`Run`],
//! other lines by rank, the plugin's messages, and the assertions on a
//! step's TF_CONFIG that Slurm's real placement implies.

use std::collections::BTreeMap;
use std::process::Output;

use serde_json::Value;

/// What each task of a step printed, from its own file
/// ([`outputs::Outputs::labelled`]): the probe's lines and every other line
/// by rank.
pub struct Labelled {
    /// The probe's `TASK` lines, for [`parse_run`].
    pub probe: String,
    /// The other lines, by rank.
    pub lines: BTreeMap<u32, Vec<String>>,
}

impl Labelled {
    /// Each rank's one `PREFIX` line, parsed as JSON.
    pub fn json(&self, prefix: &str) -> BTreeMap<u32, Value> {
        let mut found = BTreeMap::new();
        for (&rank, lines) in &self.lines {
            for text in lines {
                if let Some(j) = text.strip_prefix(prefix) {
                    let v = serde_json::from_str(j)
                        .unwrap_or_else(|e| panic!("rank {rank}: {j:?}: {e}"));
                    assert!(
                        found.insert(rank, v).is_none(),
                        "rank {rank}: {prefix} twice"
                    );
                }
            }
        }
        found
    }

    /// The probe's tasks, with `code` and `context` for failure messages.
    pub fn run(&self, code: Option<i32>, context: String) -> Run {
        let mut run = parse_run(Output {
            status: std::process::ExitStatus::default(),
            stdout: self.probe.clone().into_bytes(),
            stderr: Vec::new(),
        });
        run.code = code;
        run.stderr = context;
        run
    }
}

/// What each task prints: its Slurm facts and the variables under test.
pub const PROBE: &str = r#"printf 'TASK\t%s\t%s\t%s\t%s\t%s\t%s\n' "$SLURM_PROCID" "$(hostname)" "$SLURM_LOCALID" "${SLURM_STEP_RESV_PORTS-<unset>}" "${CUDA_VISIBLE_DEVICES-<unset>}" "${TF_CONFIG-<unset>}""#;

#[derive(Debug, Clone)]
pub struct Task {
    pub rank: u32,
    pub host: String,
    pub local: u32,
    pub resv_ports: Option<String>,
    pub cuda_visible_devices: Option<String>,
    pub tf_config: Option<Value>,
}

pub struct Run {
    pub code: Option<i32>,
    pub stderr: String,
    /// By rank.
    pub tasks: Vec<Task>,
}

pub fn parse_run(out: Output) -> Run {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let unset = |s: &str| (s != "<unset>").then(|| s.to_string());
    let mut tasks: Vec<Task> = stdout
        .lines()
        .filter_map(|line| line.strip_prefix("TASK\t"))
        .map(|line| {
            let f: Vec<&str> = line.split('\t').collect();
            assert_eq!(f.len(), 6, "bad probe line {line:?}");
            Task {
                rank: f[0].parse().unwrap(),
                host: f[1].to_string(),
                local: f[2].parse().unwrap(),
                resv_ports: unset(f[3]),
                cuda_visible_devices: unset(f[4]),
                tf_config: unset(f[5]).map(|t| {
                    serde_json::from_str(&t).unwrap_or_else(|e| panic!("TF_CONFIG {t:?}: {e}"))
                }),
            }
        })
        .collect();
    tasks.sort_by_key(|t| t.rank);
    Run {
        code: out.status.code(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        tasks,
    }
}

impl Run {
    /// The step succeeded and ran `n` tasks, ranks 0..n.
    pub fn assert_ran(&self, n: u32) -> &Self {
        assert_eq!(self.code, Some(0), "step failed: {}", self.stderr);
        let ranks: Vec<u32> = self.tasks.iter().map(|t| t.rank).collect();
        assert_eq!(ranks, (0..n).collect::<Vec<_>>(), "stderr: {}", self.stderr);
        self
    }

    /// The step was refused before any task ran, with one `tf-cluster:` line
    /// containing `why`.
    pub fn assert_refused(&self, why: &str) {
        assert_ne!(self.code, Some(0), "step should fail");
        assert!(self.tasks.is_empty(), "tasks ran: {:?}", self.tasks);
        let lines = self.messages();
        assert_eq!(lines.len(), 1, "want one tf-cluster line: {}", self.stderr);
        assert!(lines[0].contains(why), "want {why:?} in {:?}", lines[0]);
    }

    /// The `tf-cluster:` messages of the run's stderr: see [`messages`].
    pub fn messages(&self) -> Vec<&str> {
        messages(&self.stderr)
    }

    /// The step ran `n` tasks, all workers with the default port base.
    pub fn assert_workers(&self, n: u32) -> &Self {
        self.assert_ran(n).assert_tf_config(&[("worker", n)], 8888)
    }

    /// Every task's TF_CONFIG is the one Slurm's real placement implies for
    /// `roles` (ranks to roles in order) and ports from `port_base` or from
    /// the ports Slurm reserved.
    pub fn assert_tf_config(&self, roles: &[(&str, u32)], port_base: u16) -> &Self {
        self.assert_tf_config_rpc(roles, port_base, None)
    }

    /// [`Run::assert_tf_config`] with an `rpc_layer` in TF_CONFIG.
    pub fn assert_tf_config_rpc(
        &self,
        roles: &[(&str, u32)],
        port_base: u16,
        rpc_layer: Option<&str>,
    ) -> &Self {
        let address = |t: &Task| {
            let port = match &t.resv_ports {
                Some(list) => reserved_ports(list)[t.local as usize],
                None => port_base + t.local as u16,
            };
            format!("{}:{port}", t.host)
        };
        let mut cluster = BTreeMap::new();
        let mut own = Vec::new();
        let mut rank = 0usize;
        for &(role, count) in roles {
            let addrs: Vec<String> = self.tasks[rank..rank + count as usize]
                .iter()
                .map(address)
                .collect();
            for index in 0..count {
                own.push((role, index));
            }
            cluster.insert(role.to_string(), Value::from(addrs));
            rank += count as usize;
        }
        assert_eq!(rank, self.tasks.len(), "roles do not cover the step");
        for (task, (role, index)) in self.tasks.iter().zip(own) {
            let mut want =
                serde_json::json!({"cluster": cluster, "task": {"type": role, "index": index}});
            if let Some(layer) = rpc_layer {
                want["rpc_layer"] = layer.into();
            }
            assert_eq!(
                task.tf_config.as_ref(),
                Some(&want),
                "rank {} on {}",
                task.rank,
                task.host
            );
        }
        self
    }

    /// CUDA_VISIBLE_DEVICES of each task, by rank.
    pub fn gpus(&self) -> Vec<Option<&str>> {
        self.tasks
            .iter()
            .map(|t| t.cuda_visible_devices.as_deref())
            .collect()
    }

    pub fn hosts(&self) -> Vec<&str> {
        self.tasks.iter().map(|t| t.host.as_str()).collect()
    }
}

/// The plugin's messages in `text`, one a `tf-cluster:` line, in order, with
/// what stands before them (Slurm's `srun: error: ` and the like) stripped.
pub fn messages(text: &str) -> Vec<&str> {
    text.lines()
        .filter_map(|l| l.split_once("tf-cluster: ").map(|(_, m)| m))
        .collect()
}

/// `12001,12003-12005` → the ports, as Slurm lists them.
pub fn reserved_ports(list: &str) -> Vec<u16> {
    list.split(',')
        .flat_map(|r| {
            let (lo, hi) = r.split_once('-').unwrap_or((r, r));
            lo.parse::<u16>().unwrap()..=hi.parse::<u16>().unwrap()
        })
        .collect()
}
