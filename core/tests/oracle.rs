//! Parity with the program the plugin replaces: TensorFlow 2.21's
//! SlurmClusterResolver, run on the 59 task environments of
//! tests/data/oracle/ (see the README there).
//!
//! [`classify`] turns each case and TensorFlow's answer into an
//! [`Expectation`], from the oracle README's rules:
//! - TensorFlow is right (ok, runs the rank where Slurm's block layout does,
//!   no `bug`/`quirk` tag, CUDA_VISIBLE_DEVICES unset or `0,…,n-1` before):
//!   the plugin must give the same TF_CONFIG and CUDA_VISIBLE_DEVICES;
//! - TensorFlow is wrong (the README's table, [`README_TABLE`]): the right
//!   answer is computed from the case and from Slurm's truth (the annotation);
//! - TensorFlow errs for a real reason: the plugin must refuse too;
//! - a few documented deviations beyond the README ([`DEVIATIONS`]).
//!
//! Nothing expected here is copied from the plugin's own output.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};
use tf_cluster_core::Given;
use tf_cluster_core::roles::RoleSpec;
use tf_cluster_core::{Error, Injection, Settings, Step, resolve};

const CASES: &str = include_str!("data/oracle/cases.jsonl");
const RESULTS: &str = include_str!("data/oracle/tf_2.21_results.jsonl");

/// TensorFlow's default port base (the plugin's too).
const TF_PORT_BASE: u64 = 8888;

// ---------------------------------------------------------------------------
// The explicit lists: the README's table of TensorFlow's bugs, and the
// deviations beyond it. Everything else is classified by the general rules.
// ---------------------------------------------------------------------------

/// What is right where TensorFlow is wrong (the README's "right" column).
#[derive(Debug, Clone, Copy)]
enum Right {
    /// The layout Slurm really makes: hosts in SLURM_STEP_NODELIST order (not
    /// sorted as strings), ranks dealt by SLURM_DISTRIBUTION, the host list
    /// expanded with Slurm's grammar. Checked against the annotation.
    SlurmLayout,
    /// CPU-only: the step's TF_CONFIG, CUDA_VISIBLE_DEVICES left as it was.
    CpuOnly,
    /// TensorFlow's TF_CONFIG is right, its CUDA_VISIBLE_DEVICES is not: the
    /// task's slice of Slurm's own tokens (an empty list is no GPUs).
    SlurmGpuTokens,
    /// An error whose message names the reason (each of these substrings).
    Refuse(&'static [&'static str]),
}

/// The README's table, row by row (`*` ends a name prefix).
const README_TABLE: &[(&str, Right)] = &[
    // Hosts sorted as strings (node10 < node9): ranks get another host's
    // address and GPUs. Right: rank r gets the host that runs it.
    ("lexi-*", Right::SlurmLayout),
    // With SLURM_DISTRIBUTION=cyclic, rank 1 runs on the second node.
    ("cyclic-distribution-ignored-r1", Right::SlurmLayout),
    // `r[1-2]n[1-2]` is valid Slurm syntax: expand it.
    ("hostlist-multi-bracket", Right::SlurmLayout),
    // TF: ValueError (0 GPUs per task). Right: CPU-only.
    ("gpu-per-node-0", Right::CpuOnly),
    ("gpu-per-node-1-2tpn", Right::CpuOnly),
    // TF counts '' as one GPU and sets 0. Right: an empty list is no GPUs.
    ("gpu-cvd-empty-string-1tpn", Right::SlurmGpuTokens),
    // Slurm gave 2,3 and TF writes ordinals. Right: slice Slurm's tokens.
    ("gpu-cvd-2-3-remapped", Right::SlurmGpuTokens),
    // TF: FileNotFoundError. Right: no GPU source is 0 GPUs, CPU-only.
    ("gpu-nvidia-smi-missing", Right::CpuOnly),
    // TF: no error, an empty task. Right: the rank is outside the step.
    ("rank-out-of-range-no-autogpu", Right::Refuse(&["outside"])),
    // TF silently drops a node. Right: the two lists disagree.
    (
        "tpn-shorter-than-hostlist-truncates",
        Right::Refuse(&["SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE"]),
    ),
    // TF accepts ps:-1. Right: every count is at least 1.
    ("jobs-negative-count", Right::Refuse(&["count"])),
    // TF writes n1:65536. Right: no port above 65535.
    ("port-overflow-65535", Right::Refuse(&["port", "65535"])),
];

/// Known behaviour of the plugin beyond the README's table.
#[derive(Debug, Clone, Copy)]
enum Deviation {
    /// Succeeds with the layout Slurm makes where TensorFlow raises.
    SlurmLayout,
    /// Refuses; the message contains each of these.
    Refuse(&'static [&'static str]),
    /// TensorFlow's TF_CONFIG without the `evaluator` job: the evaluator runs
    /// beside the cluster (tensorflow#30121), so no task's cluster names it.
    EvaluatorBeside,
}

/// Not listed here, because the general rules already give what the plugin
/// does: `missing-SLURM_STEP_NUM_TASKS` (TF errs, and so must the plugin: the
/// step's size is unknown) and `missing-SLURM_STEP_NUM_TASKS-jobs-given` (the
/// spec's counts give the size: TF's answer, which is right); see
/// `step_size_from_the_role_spec_only_when_it_gives_counts`.
const DEVIATIONS: &[(&str, Deviation)] = &[
    // `n[1-2]-ib` is valid Slurm syntax (`scontrol show hostnames 'n[1-2]-ib'`
    // prints n1-ib and n2-ib); TF's parser raises ValueError, the plugin
    // expands it as Slurm does.
    ("hostlist-suffix-after-range", Deviation::SlurmLayout),
    // TF accepts ps:0 and writes `"ps": {}` (an empty job, not even a list);
    // the plugin requires every count to be at least 1.
    ("jobs-zero-count", Deviation::Refuse(&["count 0"])),
    // nvidia-smi is there but fails: TF raises, and the plugin refuses too,
    // with the probe's own message. Only a missing nvidia-smi means 0 GPUs;
    // a failing one must not silently make the task CPU-only.
    (
        "gpu-nvidia-smi-fails",
        Deviation::Refuse(&["NVIDIA-SMI has failed"]),
    ),
    ("jobs-all-four-types-r3", Deviation::EvaluatorBeside),
];

fn matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => pattern == name,
    }
}

fn lookup<T: Copy>(table: &[(&str, T)], name: &str) -> Option<T> {
    table
        .iter()
        .find(|(pattern, _)| matches(pattern, name))
        .map(|&(_, t)| t)
}

// ---------------------------------------------------------------------------
// Expectations and the classification.
// ---------------------------------------------------------------------------

/// Why a case expects what it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Basis {
    /// The README's rule: TensorFlow is right, the plugin must equal it.
    TfRight,
    /// A row of the README's table: TensorFlow is wrong.
    ReadmeTable,
    /// Not named lexi-* but the same bug: the annotation says TensorFlow's
    /// sorted host order differs from SLURM_STEP_NODELIST's.
    TfSortedHosts,
    /// TensorFlow errs for a real reason: the plugin must refuse too.
    TfError,
    /// TensorFlow got `tasks_per_node`, which the plugin has no equivalent
    /// of, and the environment lacks SLURM_STEP_TASKS_PER_NODE.
    TasksPerNodeArgOnly,
    /// A documented deviation beyond the README.
    Deviation,
}

#[derive(Debug, Clone, PartialEq)]
enum Cuda {
    /// The plugin must leave CUDA_VISIBLE_DEVICES alone (give None).
    Untouched,
    /// Its value once the plugin ran: the plugin's, or the one before when
    /// the plugin leaves it (None = unset). Writing the value it already has
    /// counts as leaving it (TF rewrites `0` as `0` in
    /// tftest-SimpleRetrievalFromEnv).
    After(Option<String>),
}

#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    Success { tf_config: Value, cuda: Cuda },
    Error { mentions: Vec<String> },
}

#[derive(Debug, Clone, PartialEq)]
struct Expectation {
    basis: Basis,
    outcome: Outcome,
}

struct Case {
    name: String,
    tags: Vec<String>,
    env: BTreeMap<String, String>,
    args: Map<String, Value>,
    nvidia_smi: Value,
}

impl Case {
    fn var(&self, name: &str) -> Result<&str, String> {
        self.env
            .get(name)
            .map(String::as_str)
            .ok_or_else(|| format!("{name} is not in the case's environment"))
    }

    fn arg_u64(&self, key: &str) -> Option<u64> {
        self.args.get(key).and_then(Value::as_u64)
    }

    fn rpc_layer(&self) -> Option<&str> {
        self.args.get("rpc_layer").and_then(Value::as_str)
    }

    fn auto_set_gpu(&self) -> bool {
        self.args
            .get("auto_set_gpu")
            .and_then(Value::as_bool)
            .unwrap_or(true)
    }
}

fn load() -> Vec<(Case, Value)> {
    let cases: Vec<Value> = CASES
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let results: Vec<Value> = RESULTS
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(cases.len(), 59, "cases.jsonl");
    assert_eq!(results.len(), cases.len(), "one TF result per case");
    cases
        .into_iter()
        .zip(results)
        .map(|(c, tf)| {
            assert_eq!(c["name"], tf["name"], "results in the cases' order");
            let case = Case {
                name: c["name"].as_str().unwrap().to_string(),
                tags: c["tags"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| t.as_str().unwrap().to_string())
                    .collect(),
                env: c["env"]
                    .as_object()
                    .unwrap()
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                    .collect(),
                args: c
                    .get("args")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default(),
                nvidia_smi: c.get("nvidia_smi").cloned().unwrap_or(Value::Null),
            };
            (case, tf)
        })
        .collect()
}

const KNOWN_ARGS: [&str; 7] = [
    "jobs",
    "port_base",
    "gpus_per_node",
    "gpus_per_task",
    "tasks_per_node",
    "auto_set_gpu",
    "rpc_layer",
];

/// The expectation for one case, or why it cannot be classified.
fn classify(c: &Case, tf: &Value) -> Result<Expectation, String> {
    if let Some(key) = c.args.keys().find(|k| !KNOWN_ARGS.contains(&k.as_str())) {
        return Err(format!("unknown TF argument {key}"));
    }
    if let Some(deviation) = lookup(DEVIATIONS, &c.name) {
        let outcome = match deviation {
            Deviation::SlurmLayout => layout_outcome(c, tf, false)?,
            Deviation::Refuse(mentions) => refuse(mentions),
            Deviation::EvaluatorBeside => {
                tf_is_right(c, tf)?;
                let mut tf_config = with_rpc_layer(c, tf["tf_config"].clone());
                let cluster = tf_config["cluster"].as_object_mut().ok_or("no cluster")?;
                if cluster.remove("evaluator").is_none() {
                    return Err("TF's cluster has no evaluator".into());
                }
                Outcome::Success {
                    tf_config,
                    cuda: Cuda::After(tf["cuda_visible_devices"].as_str().map(String::from)),
                }
            }
        };
        return Ok(Expectation {
            basis: Basis::Deviation,
            outcome,
        });
    }
    // TF's `tasks_per_node` has no plugin equivalent: the plugin always reads
    // SLURM_STEP_TASKS_PER_NODE.
    if let Some(tpn) = c.args.get("tasks_per_node") {
        match c.env.get("SLURM_STEP_TASKS_PER_NODE") {
            None => {
                return Ok(Expectation {
                    basis: Basis::TasksPerNodeArgOnly,
                    outcome: refuse(&["SLURM_STEP_TASKS_PER_NODE"]),
                });
            }
            Some(env) => check_tasks_per_node_agree(c, tpn, env)?,
        }
    }
    if let Some(right) = lookup(README_TABLE, &c.name) {
        let outcome = match right {
            Right::SlurmLayout => layout_outcome(c, tf, false)?,
            Right::CpuOnly => layout_outcome(c, tf, true)?,
            Right::SlurmGpuTokens => {
                if tf["ok"] != true {
                    return Err("TF erred: its TF_CONFIG cannot be kept".into());
                }
                let truth = slurm_truth(c, &tf["annotation"])?;
                Outcome::Success {
                    tf_config: with_rpc_layer(c, tf["tf_config"].clone()),
                    cuda: right_cuda(c, annotated_local(tf)?, truth.max_local)?,
                }
            }
            Right::Refuse(mentions) => refuse(mentions),
        };
        return Ok(Expectation {
            basis: Basis::ReadmeTable,
            outcome,
        });
    }
    if let Some(tag) = c.tags.iter().find(|t| *t == "bug" || *t == "quirk") {
        return Err(format!(
            "tagged {tag} but in neither the README's table nor DEVIATIONS"
        ));
    }
    // The lexi-* bug in a case of another name. The README's first rule only
    // looks at the rank's own host, which TF may get right by chance
    // (hostlist-zero-padded-r6) while listing the other ranks at the wrong
    // hosts: the annotation's flag catches that.
    if tf["annotation"]["tf_sorted_hosts_differ_from_nodelist_order"] == true {
        return Ok(Expectation {
            basis: Basis::TfSortedHosts,
            outcome: layout_outcome(c, tf, false)?,
        });
    }
    if tf["ok"] != true {
        return Ok(Expectation {
            basis: Basis::TfError,
            outcome: Outcome::Error {
                mentions: reasons_named_by(tf["error"]["message"].as_str().unwrap_or("")),
            },
        });
    }
    tf_is_right(c, tf)?;
    Ok(Expectation {
        basis: Basis::TfRight,
        outcome: Outcome::Success {
            tf_config: with_rpc_layer(c, tf["tf_config"].clone()),
            cuda: Cuda::After(tf["cuda_visible_devices"].as_str().map(String::from)),
        },
    })
}

fn refuse(mentions: &[&str]) -> Outcome {
    Outcome::Error {
        mentions: mentions.iter().map(|m| m.to_string()).collect(),
    }
}

/// What TF's error message names that the plugin's must name too.
fn reasons_named_by(message: &str) -> Vec<String> {
    let mut mentions = Vec::new();
    // "SLURM_PROCID not found in environment. …": the variable.
    if let Some((var, _)) = message.split_once(" not found in environment") {
        mentions.push(var.to_string());
    }
    // "Requested 5 tasks but only 4 were assigned.": both counts.
    if let Some(rest) = message.strip_prefix("Requested ")
        && let Some((asked, rest)) = rest.split_once(" tasks but only ")
        && let Some((given, _)) = rest.split_once(' ')
    {
        mentions.push(asked.to_string());
        mentions.push(given.to_string());
    }
    // "Requested more GPUs per node than available."
    if message.contains("GPUs") {
        mentions.push("GPU".into());
    }
    // "Invalid tasks-per-node list format …"
    if message.contains("tasks-per-node") {
        mentions.push("SLURM_STEP_TASKS_PER_NODE".into());
    }
    mentions
}

/// TF's `tasks_per_node` must say what SLURM_STEP_TASKS_PER_NODE says, or
/// the two programs would not be given the same step.
fn check_tasks_per_node_agree(c: &Case, tpn: &Value, env: &str) -> Result<(), String> {
    let counts = expand_counts(env).ok_or("SLURM_STEP_TASKS_PER_NODE is malformed")?;
    let agree = match tpn {
        Value::Number(n) => counts.iter().all(|&k| Some(u64::from(k)) == n.as_u64()),
        Value::Object(per_host) => {
            let hosts = expand_hostlist(c.var("SLURM_STEP_NODELIST")?).ok_or("bad host list")?;
            hosts.len() == counts.len()
                && hosts.len() == per_host.len()
                && hosts
                    .iter()
                    .zip(&counts)
                    .all(|(h, &k)| per_host.get(h).and_then(Value::as_u64) == Some(u64::from(k)))
        }
        _ => false,
    };
    if agree {
        Ok(())
    } else {
        Err(format!(
            "TF's tasks_per_node {tpn} disagrees with SLURM_STEP_TASKS_PER_NODE {env}"
        ))
    }
}

/// The README's rule for "TensorFlow is right" (ok and no bug/quirk tag were
/// checked before).
fn tf_is_right(c: &Case, tf: &Value) -> Result<(), String> {
    let annotation = &tf["annotation"];
    if annotation.is_null() {
        // No annotation: only where the layout is trivially block and TF's
        // equals the one Slurm makes.
        if c.env.contains_key("SLURM_DISTRIBUTION") {
            return Err("no annotation and a distribution other than the default".into());
        }
        let truth = slurm_truth(c, &tf["annotation"])?;
        if truth.tf_config_without_rpc != tf["tf_config"] {
            return Err(format!(
                "no annotation, and TF's TF_CONFIG is not Slurm's block layout {}",
                truth.tf_config_without_rpc
            ));
        }
    } else if annotation["host_matches_block"] != true {
        return Err("the annotation says TF puts the rank on another host".into());
    }
    // CUDA_VISIBLE_DEVICES unset or 0,1,…,n-1 before ("" being n = 0).
    if let Some(before) = c.env.get("CUDA_VISIBLE_DEVICES")
        && !before.is_empty()
        && !before
            .split(',')
            .enumerate()
            .all(|(i, t)| t == i.to_string())
    {
        return Err(format!("CUDA_VISIBLE_DEVICES was {before:?}, not 0,…,n-1"));
    }
    Ok(())
}

fn with_rpc_layer(c: &Case, mut tf_config: Value) -> Value {
    // TF's recorded TF_CONFIG holds cluster and task only; the rpc layer
    // it was given (its master() says grpc+verbs://…) goes alongside.
    if let Some(layer) = c.rpc_layer() {
        tf_config["rpc_layer"] = json!(layer);
    }
    tf_config
}

fn annotated_local(tf: &Value) -> Result<u32, String> {
    tf["annotation"]["slurm_block_local_id"]
        .as_u64()
        .map(|l| l as u32)
        .ok_or_else(|| "no slurm_block_local_id in the annotation".into())
}

/// The right answer computed from the case: the layout Slurm makes, and
/// either the task's GPUs or CPU-only.
fn layout_outcome(c: &Case, tf: &Value, cpu_only: bool) -> Result<Outcome, String> {
    let truth = slurm_truth(c, &tf["annotation"])?;
    let cuda = if cpu_only {
        Cuda::Untouched
    } else {
        right_cuda(c, truth.local, truth.max_local)?
    };
    Ok(Outcome::Success {
        tf_config: with_rpc_layer(c, truth.tf_config_without_rpc),
        cuda,
    })
}

// ---------------------------------------------------------------------------
// Slurm's truth, computed from the case by a deliberately plain model (Slurm's
// host list grammar, block and cyclic distributions, TensorFlow's GPU
// rules), independent of the plugin's code.
// ---------------------------------------------------------------------------

struct Truth {
    tf_config_without_rpc: Value,
    local: u32,
    max_local: u32,
}

/// Slurm's layout of the case's step, checked against `annotation` (TF's
/// result's) when that says where the block layout runs the rank.
fn slurm_truth(c: &Case, annotation: &Value) -> Result<Truth, String> {
    let nodelist = c.var("SLURM_STEP_NODELIST")?;
    let hosts = expand_hostlist(nodelist).ok_or(format!("cannot expand {nodelist:?}"))?;
    let tpn = c.var("SLURM_STEP_TASKS_PER_NODE")?;
    let counts = expand_counts(tpn).ok_or(format!("cannot expand {tpn:?}"))?;
    if hosts.len() != counts.len() {
        return Err("host and count lists differ in length".into());
    }
    let dist = c
        .env
        .get("SLURM_DISTRIBUTION")
        .map_or("block", |d| d.split(':').next().unwrap_or_default());
    let placements = match dist {
        "block" => block(&counts),
        "cyclic" => cyclic(&counts),
        other => return Err(format!("no model of distribution {other}")),
    };
    let total = placements.len();
    let rank: usize = c.var("SLURM_PROCID")?.parse().map_err(|_| "SLURM_PROCID")?;
    if rank >= total {
        return Err(format!("rank {rank} outside {total} tasks"));
    }
    // TF's job names in its (sorted) order, or every task a worker.
    let roles: Vec<(String, usize)> = match c.args.get("jobs") {
        None => vec![("worker".into(), total)],
        Some(jobs) => {
            let sorted: BTreeMap<&String, &Value> =
                jobs.as_object().ok_or("jobs")?.iter().collect();
            sorted
                .into_iter()
                .map(|(name, n)| match n.as_u64() {
                    Some(n) if n > 0 => Ok((name.clone(), n as usize)),
                    _ => Err(format!("job {name} has count {n}")),
                })
                .collect::<Result<_, _>>()?
        }
    };
    if roles.iter().map(|(_, n)| n).sum::<usize>() != total {
        return Err("the jobs do not add up to the step".into());
    }
    let base = c.arg_u64("port_base").unwrap_or(TF_PORT_BASE);
    let mut cluster = Map::new();
    let mut task = Value::Null;
    let mut first = 0;
    for (name, count) in roles {
        let ranks = first..first + count;
        if ranks.contains(&rank) {
            task = json!({"type": name, "index": rank - first});
        }
        let addresses = ranks
            .map(|r| {
                let (node, local) = placements[r];
                let port = base + u64::from(local);
                if port > 65535 {
                    return Err(format!("port {port}"));
                }
                Ok(json!(format!("{}:{port}", hosts[node])))
            })
            .collect::<Result<Vec<_>, String>>()?;
        cluster.insert(name, Value::Array(addresses));
        first += count;
    }
    let (node, local) = placements[rank];
    // Slurm's truth for block layouts: the annotation, where there is one.
    if dist == "block"
        && let Some(host) = annotation["slurm_block_host"].as_str()
        && (host != hosts[node] || annotation["slurm_block_local_id"] != local)
    {
        return Err(format!(
            "model puts rank {rank} on {}/{local}, the annotation on {host}/{}",
            hosts[node], annotation["slurm_block_local_id"]
        ));
    }
    Ok(Truth {
        tf_config_without_rpc: json!({"cluster": cluster, "task": task}),
        local,
        max_local: counts.iter().copied().max().unwrap_or(0),
    })
}

/// (node, local index) of every rank, block distribution.
fn block(counts: &[u32]) -> Vec<(usize, u32)> {
    counts
        .iter()
        .enumerate()
        .flat_map(|(node, &k)| (0..k).map(move |local| (node, local)))
        .collect()
}

/// Cyclic: one task per node per round, skipping full nodes.
fn cyclic(counts: &[u32]) -> Vec<(usize, u32)> {
    let total: u32 = counts.iter().sum();
    let mut placed = vec![0u32; counts.len()];
    let mut out = Vec::new();
    while out.len() < total as usize {
        for (node, &k) in counts.iter().enumerate() {
            if placed[node] < k {
                out.push((node, placed[node]));
                placed[node] += 1;
            }
        }
    }
    out
}

/// Slurm's host list grammar: names separated by commas outside brackets,
/// each bracket group `[1-3,7]` expanding in place (leftmost slowest), zero
/// padding from the width of a range's lower bound.
fn expand_hostlist(list: &str) -> Option<Vec<String>> {
    if list.is_empty() {
        return None;
    }
    let mut items = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, ch) in list.char_indices() {
        match ch {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&list[start..]);
    let mut hosts = Vec::new();
    for item in items {
        hosts.extend(expand_name(item)?);
    }
    Some(hosts)
}

fn expand_name(name: &str) -> Option<Vec<String>> {
    let Some(open) = name.find('[') else {
        return (!name.is_empty() && !name.contains(']')).then(|| vec![name.to_string()]);
    };
    let close = open + name[open..].find(']')?;
    let rest = expand_name(&name[close + 1..]).unwrap_or_else(|| vec![String::new()]);
    let mut out = Vec::new();
    for range in name[open + 1..close].split(',') {
        let (lo, hi) = range.split_once('-').unwrap_or((range, range));
        let (a, b): (u64, u64) = (lo.parse().ok()?, hi.parse().ok()?);
        for n in a..=b {
            for tail in &rest {
                out.push(format!("{}{n:0w$}{tail}", &name[..open], w = lo.len()));
            }
        }
    }
    Some(out)
}

/// `2(x3),1` → [2, 2, 2, 1].
fn expand_counts(text: &str) -> Option<Vec<u32>> {
    let mut counts = Vec::new();
    for item in text.split(',') {
        let (k, times) = match item.split_once("(x") {
            Some((k, rest)) => (k, rest.strip_suffix(')')?.parse().ok()?),
            None => (item, 1),
        };
        counts.extend(std::iter::repeat_n(k.parse::<u32>().ok()?, times));
    }
    Some(counts)
}

/// CUDA_VISIBLE_DEVICES of local task `local`, by TensorFlow's rules where
/// they are right (GPUs per task: the option, or the node's GPUs / the most
/// tasks on a node) and the README's where TF is wrong: the node's GPUs are
/// Slurm's own tokens (the first gpus_per_node of them), an empty list is no
/// GPUs, a missing nvidia-smi is 0 GPUs, and 0 GPUs per task is CPU-only.
fn right_cuda(c: &Case, local: u32, max_local: u32) -> Result<Cuda, String> {
    if !c.auto_set_gpu() {
        return Ok(Cuda::Untouched);
    }
    let slurm: Option<Vec<String>> = c.env.get("CUDA_VISIBLE_DEVICES").map(|v| {
        v.split(',')
            .filter(|t| !t.is_empty())
            .map(String::from)
            .collect()
    });
    let ordinals = |n: u64| (0..n).map(|i| i.to_string()).collect::<Vec<_>>();
    let tokens = match (c.arg_u64("gpus_per_node"), slurm) {
        (Some(n), Some(t)) if !t.is_empty() => t
            .get(..n as usize)
            .ok_or("gpus_per_node above Slurm's GPUs")?
            .to_vec(),
        (Some(n), _) => ordinals(n),
        (None, Some(t)) => t,
        (None, None) => match c.nvidia_smi["mode"].as_str() {
            None | Some("missing") => Vec::new(),
            Some("gpus") => ordinals(c.nvidia_smi["gpus"].as_u64().ok_or("gpus")?),
            Some(other) => return Err(format!("no GPU count from nvidia-smi ({other})")),
        },
    };
    let per_task = match c.arg_u64("gpus_per_task") {
        Some(n) => n as usize,
        None => tokens.len() / max_local.max(1) as usize,
    };
    if per_task == 0 {
        return Ok(Cuda::Untouched);
    }
    let first = local as usize * per_task;
    let slice = tokens
        .get(first..first + per_task)
        .ok_or("more GPUs per task than the node has")?;
    Ok(Cuda::After(Some(slice.join(","))))
}

// ---------------------------------------------------------------------------
// Running the plugin's core on a case.
// ---------------------------------------------------------------------------

/// The plugin's settings for TF's arguments.
fn settings_of(c: &Case) -> Result<Settings, Error> {
    let mut s = Settings::default();
    for (key, value) in &c.args {
        match key.as_str() {
            "jobs" => {
                // TF sorts job names and gives ranks in that order; the plugin
                // gives them in the order written: write them sorted.
                let sorted: BTreeMap<&String, &Value> =
                    value.as_object().into_iter().flatten().collect();
                let spec: Vec<String> = sorted.iter().map(|(k, v)| format!("{k}:{v}")).collect();
                s.roles = RoleSpec::parse(&spec.join(","))?;
            }
            "port_base" => s.set("port-base", &value.to_string())?,
            "gpus_per_node" => s.set("gpus-per-node", &value.to_string())?,
            "gpus_per_task" => s.set("gpus-per-task", &value.to_string())?,
            "auto_set_gpu" => s.set("auto-set-gpu", &value.to_string())?,
            "rpc_layer" => {
                // null: no rpc layer, the plugin's default.
                if let Some(layer) = value.as_str() {
                    s.set("rpc-layer", layer)?;
                }
            }
            // No equivalent: the plugin always reads SLURM_STEP_TASKS_PER_NODE.
            "tasks_per_node" => {}
            other => return Err(Error::new(format!("oracle: unknown TF argument {other}"))),
        }
    }
    Ok(s)
}

/// The case as the plugin's source of facts: its environment, and
/// `nvidia_smi` for the node's GPU count (absent or missing: 0 GPUs).
fn case_source(c: &Case) -> Given {
    let smi = &c.nvidia_smi;
    let mut given = Given::vars(c.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    given.gpus = match smi["mode"].as_str() {
        None | Some("missing") => Ok(0),
        Some("gpus") => Ok(smi["gpus"].as_u64().unwrap() as u32),
        _ => Err(format!(
            "nvidia-smi --list-gpus failed with exit code {}: {}",
            smi["returncode"],
            smi["output"].as_str().unwrap_or_default()
        )),
    };
    given
}

fn run_plugin(c: &Case) -> Result<Injection, Error> {
    let settings = settings_of(c)?;
    let step = Step::gather(&settings, &mut case_source(c))?.step()?;
    resolve(&settings, &step)
}

/// Checks the plugin's answer against the expectation.
fn check(c: &Case, expected: &Outcome, got: &Result<Injection, Error>) -> Result<(), String> {
    match (expected, got) {
        (Outcome::Success { tf_config, cuda }, Ok(inj)) => {
            let parsed: Value = serde_json::from_str(inj.get("TF_CONFIG").unwrap())
                .map_err(|e| format!("TF_CONFIG is not JSON: {e}"))?;
            let mut wrong = Vec::new();
            if parsed != *tf_config {
                wrong.push(format!("TF_CONFIG should be {tf_config}"));
            }
            match cuda {
                Cuda::Untouched if inj.get("CUDA_VISIBLE_DEVICES").is_some() => {
                    wrong.push("CUDA_VISIBLE_DEVICES should be left alone".into())
                }
                Cuda::After(want) => {
                    let after = inj
                        .get("CUDA_VISIBLE_DEVICES")
                        .map(str::to_string)
                        .or_else(|| c.env.get("CUDA_VISIBLE_DEVICES").cloned());
                    if after != *want {
                        wrong.push(format!("CUDA_VISIBLE_DEVICES should end as {want:?}"));
                    }
                }
                Cuda::Untouched => {}
            }
            if wrong.is_empty() {
                Ok(())
            } else {
                Err(wrong.join("; "))
            }
        }
        (Outcome::Success { .. }, Err(_)) => Err("should succeed".into()),
        (Outcome::Error { mentions }, Err(e)) => {
            let missing: Vec<&String> = mentions
                .iter()
                .filter(|m| !e.message().contains(m.as_str()))
                .collect();
            if missing.is_empty() {
                Ok(())
            } else {
                Err(format!("the error should mention {missing:?}"))
            }
        }
        (Outcome::Error { mentions }, Ok(_)) => Err(format!(
            "should refuse, with a message mentioning {mentions:?}"
        )),
    }
}

fn tf_answer(tf: &Value) -> String {
    if tf["ok"] == true {
        format!(
            "TF_CONFIG {} CUDA_VISIBLE_DEVICES {} -> {}",
            tf["tf_config"], tf["cuda_visible_devices_before"], tf["cuda_visible_devices"]
        )
    } else {
        format!("{}: {}", tf["error"]["type"], tf["error"]["message"])
    }
}

fn plugin_answer(got: &Result<Injection, Error>) -> String {
    match got {
        Ok(inj) => format!(
            "TF_CONFIG {} CUDA_VISIBLE_DEVICES {:?}",
            inj.get("TF_CONFIG").unwrap(),
            inj.get("CUDA_VISIBLE_DEVICES")
        ),
        Err(e) => format!("error: {e}"),
    }
}

#[test]
fn every_case_matches_tensorflow_or_the_readme() {
    let cases = load();
    let mut failures = Vec::new();
    let mut counts: BTreeMap<Basis, usize> = BTreeMap::new();
    // A listed name that matches no case is a stale list.
    let listed = README_TABLE.iter().map(|(p, _)| *p);
    for pattern in listed.chain(DEVIATIONS.iter().map(|(p, _)| *p)) {
        if !cases.iter().any(|(c, _)| matches(pattern, &c.name)) {
            failures.push(format!("{pattern}: listed, but no case has that name"));
        }
    }
    for (c, tf) in &cases {
        let got = run_plugin(c);
        match classify(c, tf) {
            Err(why) => failures.push(format!(
                "{}: UNCLASSIFIED ({why})\n    TF:     {}\n    plugin: {}",
                c.name,
                tf_answer(tf),
                plugin_answer(&got)
            )),
            Ok(exp) => {
                *counts.entry(exp.basis).or_default() += 1;
                if let Err(why) = check(c, &exp.outcome, &got) {
                    failures.push(format!(
                        "{} [{:?}]: {why}\n    TF:     {}\n    plugin: {}",
                        c.name,
                        exp.basis,
                        tf_answer(tf),
                        plugin_answer(&got)
                    ));
                }
            }
        }
    }
    println!("classification of {} cases: {counts:?}", cases.len());
    assert!(
        failures.is_empty(),
        "{} failure(s) (classification {counts:?}):\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_eq!(counts.values().sum::<usize>(), 59);
}

/// The pair the README's rules settle without a DEVIATIONS entry: without
/// SLURM_STEP_NUM_TASKS only a role spec that gives its counts says the
/// step's size.
#[test]
fn step_size_from_the_role_spec_only_when_it_gives_counts() {
    let cases = load();
    let find = |name: &str| cases.iter().find(|(c, _)| c.name == name).unwrap();
    let (c, tf) = find("missing-SLURM_STEP_NUM_TASKS");
    let exp = classify(c, tf).unwrap();
    assert_eq!(exp.basis, Basis::TfError);
    assert_eq!(exp.outcome, refuse(&["SLURM_STEP_NUM_TASKS"]));
    check(c, &exp.outcome, &run_plugin(c)).unwrap();
    let (c, tf) = find("missing-SLURM_STEP_NUM_TASKS-jobs-given");
    let exp = classify(c, tf).unwrap();
    assert_eq!(exp.basis, Basis::TfRight);
    check(c, &exp.outcome, &run_plugin(c)).unwrap();
}

// ---------------------------------------------------------------------------
// TensorFlow's own resolver-level unit tests (slurm_cluster_resolver_test.py),
// with the expected values from the oracle README. Its host list and
// tasks-per-node cases are unit tests in src/core/hostlist.rs and
// src/core/tasks_per_node.rs (`tensorflow_cases`).
// ---------------------------------------------------------------------------

const T02: &str = "t02n13,t02n41,t02n43";

fn resolve_env(settings: &Settings, env: &[(&str, &str)]) -> (Value, Option<String>) {
    // A fixed environment and no GPU probe (none of these tests needs one).
    let step = Step::gather(settings, &mut Given::vars(env.iter().copied()))
        .unwrap()
        .step()
        .unwrap();
    let inj = resolve(settings, &step).unwrap();
    (
        serde_json::from_str(inj.get("TF_CONFIG").unwrap()).unwrap(),
        inj.get("CUDA_VISIBLE_DEVICES").map(str::to_string),
    )
}

fn settings(pairs: &[(&str, &str)], roles: &str) -> Settings {
    let mut s = Settings {
        roles: RoleSpec::parse(roles).unwrap(),
        ..Settings::default()
    };
    for (k, v) in pairs {
        s.set(k, v).unwrap();
    }
    s
}

#[test]
fn tf_test_simple_retrieval_from_env() {
    let env = [
        ("SLURM_PROCID", "0"),
        ("SLURM_STEP_NUM_TASKS", "3"),
        ("SLURM_STEP_TASKS_PER_NODE", "1(x3)"),
        ("SLURM_STEP_NODELIST", T02),
        ("CUDA_VISIBLE_DEVICES", "0"),
    ];
    let (tf_config, _) = resolve_env(&Settings::default(), &env);
    assert_eq!(
        tf_config,
        json!({"cluster": {"worker": ["t02n13:8888", "t02n41:8888", "t02n43:8888"]},
               "task": {"type": "worker", "index": 0}})
    );
}

#[test]
fn tf_test_simple_successful_retrieval() {
    // TF passes tasks_per_node=1; the plugin reads it from Slurm.
    let env = [
        ("SLURM_PROCID", "0"),
        ("SLURM_STEP_NUM_TASKS", "3"),
        ("SLURM_STEP_TASKS_PER_NODE", "1(x3)"),
        ("SLURM_STEP_NODELIST", T02),
    ];
    let s = settings(
        &[
            ("port-base", "8888"),
            ("gpus-per-node", "1"),
            ("gpus-per-task", "1"),
            ("auto-set-gpu", "false"),
        ],
        "ps:1,worker:2",
    );
    let (tf_config, cuda) = resolve_env(&s, &env);
    assert_eq!(
        tf_config,
        json!({"cluster": {"ps": ["t02n13:8888"], "worker": ["t02n41:8888", "t02n43:8888"]},
               "task": {"type": "ps", "index": 0}})
    );
    assert_eq!(cuda, None);
}

#[test]
fn tf_test_multi_task_and_multiple_gpus_per_task() {
    let cluster = json!({
        "ps": ["t02n13:8888"],
        "worker": ["t02n13:8889", "t02n41:8888", "t02n41:8889", "t02n43:8888"]
    });
    // TF's tests set CUDA_VISIBLE_DEVICES to ''; unset must give the same.
    for visible in [None, Some("")] {
        let mut env = vec![
            ("SLURM_PROCID", "1"),
            ("SLURM_STEP_NUM_TASKS", "5"),
            ("SLURM_STEP_TASKS_PER_NODE", "2(x2),1"),
            ("SLURM_STEP_NODELIST", T02),
        ];
        env.extend(visible.map(|v| ("CUDA_VISIBLE_DEVICES", v)));
        for (per_node, per_task, want) in [("2", "1", "1"), ("4", "2", "2,3")] {
            let s = settings(
                &[
                    ("port-base", "8888"),
                    ("gpus-per-node", per_node),
                    ("gpus-per-task", per_task),
                    ("auto-set-gpu", "true"),
                ],
                "ps:1,worker:4",
            );
            let (tf_config, cuda) = resolve_env(&s, &env);
            assert_eq!(
                tf_config,
                json!({"cluster": cluster, "task": {"type": "worker", "index": 0}}),
                "{visible:?} {per_node}/{per_task}"
            );
            assert_eq!(
                cuda.as_deref(),
                Some(want),
                "{visible:?} {per_node}/{per_task}"
            );
        }
    }
}
