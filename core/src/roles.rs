//! The role spec of `--tf-cluster=ps:1,worker:3`: ranks go to roles in the
//! order written (ps gets rank 0, workers ranks 1-3). An empty spec makes
//! every task a `worker`.

use super::error::{Result, bail, shown};
use super::limits::MAX_TASKS;
use super::number::parse_u32;

/// Why `count` (no u32) is no role count: digits too many for any step,
/// or not a whole number.
fn not_a_count(count: &str) -> String {
    match !count.is_empty() && count.bytes().all(|b| b.is_ascii_digit()) {
        true => format!("{count} (too large, at most {MAX_TASKS})"),
        false => format!("{} (not a whole number ≥ 1)", shown(count)),
    }
}

/// TensorFlow's side-car evaluator: a role of the step, but not of the
/// cluster its TF_CONFIG describes (tensorflow#30121).
pub const EVALUATOR: &str = "evaluator";

/// TensorFlow's coordinating worker: at most one, as for the evaluator.
const CHIEF: &str = "chief";

/// The old name of the chief, which TensorFlow's strategies refuse.
const MASTER: &str = "master";

/// Longest role name accepted (TensorFlow job names are short words).
const MAX_NAME: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Role {
    pub name: String,
    pub count: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoleSpec {
    /// `--tf-cluster` or `--tf-cluster=`: every task is a worker.
    AllWorkers,
    Roles(Vec<Role>),
}

impl RoleSpec {
    pub fn parse(spec: &str) -> Result<RoleSpec> {
        if spec.is_empty() {
            return Ok(RoleSpec::AllWorkers);
        }
        let bad = |why: String| -> Result<RoleSpec> {
            bail!(
                "bad --tf-cluster {}: {why} (expected role:count[,role:count…], e.g. ps:1,worker:3)",
                shown(spec)
            )
        };
        let mut roles: Vec<Role> = Vec::new();
        for (i, item) in spec.split(',').enumerate() {
            let Some((name, count)) = item.split_once(':') else {
                return if item.is_empty() {
                    bad(format!("entry {} is empty", i + 1))
                } else {
                    bad(format!("{} has no ':count'", shown(item)))
                };
            };
            if name.is_empty() {
                return bad(format!("entry {} has an empty role name", i + 1));
            }
            if name.len() > MAX_NAME {
                return bad(format!(
                    "role name {} is longer than {MAX_NAME} bytes",
                    shown(name)
                ));
            }
            // Before the case: `Master` is refused for what it names.
            if name.eq_ignore_ascii_case(MASTER) {
                return bad(format!(
                    "role {name} is refused: TensorFlow's strategies take only chief, worker, \
                     evaluator and ps (\"Disallowed task type\"), and {MASTER} is the old name \
                     of the one {CHIEF} (write {CHIEF}:1)"
                ));
            }
            if let Some(why) = not_a_job_name(name) {
                return bad(why);
            }
            let count = match parse_u32(count) {
                Some(0) => {
                    return bad(format!(
                        "role {name} has count 0 (every count must be at least 1)"
                    ));
                }
                Some(n) => n,
                None => return bad(format!("role {name} has count {}", not_a_count(count))),
            };
            if count > 1 && (name == CHIEF || name == EVALUATOR) {
                return bad(format!(
                    "role {name} has count {count} (TensorFlow allows at most one {name})"
                ));
            }
            if roles.iter().any(|r| r.name == name) {
                return bad(format!("role {name} is given twice"));
            }
            roles.push(Role {
                name: name.to_string(),
                count,
            });
        }
        Ok(RoleSpec::Roles(roles))
    }

    /// The roles for a step of `num_tasks` tasks; their counts must add up to it.
    pub fn for_step(&self, num_tasks: u32) -> Result<Vec<Role>> {
        match self {
            RoleSpec::AllWorkers => Ok(vec![Role {
                name: "worker".into(),
                count: num_tasks,
            }]),
            RoleSpec::Roles(roles) => {
                let sum: u64 = roles.iter().map(|r| u64::from(r.count)).sum();
                if sum != u64::from(num_tasks) {
                    bail!(
                        "--tf-cluster asks for {sum} tasks ({}) but the step has {num_tasks}",
                        roles
                            .iter()
                            .map(|r| format!("{}:{}", r.name, r.count))
                            .collect::<Vec<_>>()
                            .join(",")
                    );
                }
                Ok(roles.clone())
            }
        }
    }

    /// The total the spec asks for, when it says.
    pub fn total(&self) -> Option<u64> {
        match self {
            RoleSpec::AllWorkers => None,
            RoleSpec::Roles(roles) => Some(roles.iter().map(|r| u64::from(r.count)).sum()),
        }
    }
}

/// Why `name` is not a TensorFlow job name, if it is not: a lower-case
/// letter, then lower-case letters, digits and '_'. TensorFlow's device
/// names (`/job:NAME/…`) take no other character, and its strategies find
/// `chief`, `worker`, `ps` and `evaluator` only spelt so: `Worker` would be
/// a job of its own.
fn not_a_job_name(name: &str) -> Option<String> {
    let job_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_';
    if name.chars().all(|c| job_char(c) || c.is_ascii_uppercase())
        && name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name.contains(|c: char| c.is_ascii_uppercase())
    {
        return Some(format!(
            "role name {} is not lower-case, as TensorFlow job names are (write {})",
            shown(name),
            name.to_ascii_lowercase()
        ));
    }
    let use_ = "(use a-z, 0-9 and '_', a letter first)";
    if let Some(c) = name.chars().find(|c| !job_char(*c)) {
        return Some(format!("role name {} has {c:?} {use_}", shown(name)));
    }
    match name.chars().next() {
        Some(c) if !c.is_ascii_lowercase() => Some(format!(
            "role name {} starts with {c:?} {use_}",
            shown(name)
        )),
        _ => None,
    }
}

/// The role and index of `rank` among `roles` (ranks handed out in order).
pub fn role_of(roles: &[Role], rank: u32) -> Option<(&str, u32)> {
    let mut first = 0u64;
    for role in roles {
        let end = first + u64::from(role.count);
        if u64::from(rank) < end {
            return Some((&role.name, (u64::from(rank) - first) as u32));
        }
        first = end;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roles(spec: &str) -> Vec<(String, u32)> {
        match RoleSpec::parse(spec).unwrap() {
            RoleSpec::AllWorkers => vec![],
            RoleSpec::Roles(r) => r.into_iter().map(|r| (r.name, r.count)).collect(),
        }
    }

    #[test]
    fn parses_roles_in_written_order() {
        assert_eq!(
            roles("ps:1,worker:3"),
            [("ps".into(), 1), ("worker".into(), 3)]
        );
        assert_eq!(
            roles("worker:2,chief:1"),
            [("worker".into(), 2), ("chief".into(), 1)]
        );
        assert_eq!(RoleSpec::parse(""), Ok(RoleSpec::AllWorkers));
    }

    #[test]
    fn ranks_go_to_roles_in_order() {
        let r = RoleSpec::parse("ps:1,worker:3")
            .unwrap()
            .for_step(4)
            .unwrap();
        let got: Vec<_> = (0..5).map(|rank| role_of(&r, rank)).collect();
        assert_eq!(
            got,
            [
                Some(("ps", 0)),
                Some(("worker", 0)),
                Some(("worker", 1)),
                Some(("worker", 2)),
                None
            ]
        );
        let all = RoleSpec::AllWorkers.for_step(3).unwrap();
        assert_eq!(role_of(&all, 2), Some(("worker", 2)));
    }

    #[test]
    fn bad_specs_name_the_bad_part() {
        for (spec, why) in [
            ("ps", "\"ps\" has no ':count'"),
            ("ps:1,", "entry 2 is empty"),
            (",ps:1", "entry 1 is empty"),
            (":1", "empty role name"),
            ("ps:0", "count 0"),
            ("ps:-1", "count \"-1\""),
            (
                "ps:99999999999",
                "count 99999999999 (too large, at most 262144)",
            ),
            ("ps:x", "count \"x\""),
            ("ps:1,ps:2", "ps is given twice"),
            ("pß:1", "has 'ß'"),
            ("p s:1", "has ' '"),
            ("p\"s:1", "has '\"'"),
            ("my-ps:1", "has '-'"),
            ("1ps:1", "starts with '1'"),
            ("_ps:1", "starts with '_'"),
            ("ps:1:2", "count \"1:2\""),
        ] {
            let e = RoleSpec::parse(spec).unwrap_err().to_string();
            assert!(e.contains(why), "{spec}: {e}");
            assert!(e.starts_with("bad --tf-cluster"), "{e}");
        }
        let long = format!("{}:1", "a".repeat(10_000));
        let e = RoleSpec::parse(&long).unwrap_err().to_string();
        assert!(e.len() < 300 && e.contains("longer than 64"), "{e}");
    }

    /// TensorFlow's job names: a lower-case letter, then lower-case
    /// letters, digits and '_' (`/job:NAME` in device names; its strategies
    /// look for `chief`, `worker`, `ps` and `evaluator` spelt so).
    #[test]
    fn role_names_are_tensorflow_job_names() {
        assert_eq!(
            roles("chief:1,worker_2:2,ps0:1,evaluator:1"),
            [
                ("chief".into(), 1),
                ("worker_2".into(), 2),
                ("ps0".into(), 1),
                ("evaluator".into(), 1)
            ]
        );
        let e = RoleSpec::parse("Worker:3").unwrap_err().to_string();
        assert_eq!(
            e,
            "bad --tf-cluster \"Worker:3\": role name \"Worker\" is not lower-case, \
             as TensorFlow job names are (write worker) \
             (expected role:count[,role:count…], e.g. ps:1,worker:3)"
        );
        let e = RoleSpec::parse("ps:1,PS_b:1").unwrap_err().to_string();
        assert!(
            e.contains("not lower-case, as TensorFlow job names are (write ps_b)"),
            "{e}"
        );
        let e = RoleSpec::parse("my-ps:1").unwrap_err().to_string();
        assert!(
            e.contains("role name \"my-ps\" has '-' (use a-z, 0-9 and '_', a letter first)"),
            "{e}"
        );
    }

    /// TensorFlow refuses a cluster of two chiefs or two evaluators
    /// (multi_worker_util: "at most one"); so does the spec, in srun.
    #[test]
    fn at_most_one_chief_and_one_evaluator() {
        for (spec, role) in [
            ("chief:2,worker:2", "chief"),
            ("worker:2,evaluator:2", "evaluator"),
        ] {
            let e = RoleSpec::parse(spec).unwrap_err().to_string();
            assert_eq!(
                e,
                format!(
                    "bad --tf-cluster \"{spec}\": role {role} has count 2 \
                     (TensorFlow allows at most one {role}) \
                     (expected role:count[,role:count…], e.g. ps:1,worker:3)"
                )
            );
        }
        assert!(RoleSpec::parse("chief:1,worker:2,evaluator:1").is_ok());
        assert!(RoleSpec::parse("ps:2,worker:2").is_ok());
    }

    /// TensorFlow 2.21's strategies take only chief, worker, evaluator and
    /// ps ("Disallowed task type"): `master`, the old name of the one chief,
    /// fails every task there, so srun refuses it, in any spelling and
    /// beside a chief too. Other job names stay (`tf.train.ClusterSpec`
    /// and SlurmClusterResolver take them).
    #[test]
    fn master_is_refused_for_the_chief() {
        for (spec, name) in [
            ("master:2,worker:1", "master"),
            ("chief:1,master:1,worker:1", "master"),
            ("master:1", "master"),
            ("worker:3,master:1", "master"),
            ("Master:1,worker:1", "Master"),
            ("MASTER:1", "MASTER"),
        ] {
            let e = RoleSpec::parse(spec).unwrap_err().to_string();
            assert_eq!(
                e,
                format!(
                    "bad --tf-cluster \"{spec}\": role {name} is refused: TensorFlow's \
                     strategies take only chief, worker, evaluator and ps (\"Disallowed task \
                     type\"), and master is the old name of the one chief (write chief:1) \
                     (expected role:count[,role:count…], e.g. ps:1,worker:3)"
                ),
            );
        }
        assert_eq!(
            roles("chief:1,worker:2,trainer:1,master_1:1,masters:2"),
            [
                ("chief".into(), 1),
                ("worker".into(), 2),
                ("trainer".into(), 1),
                ("master_1".into(), 1),
                ("masters".into(), 2)
            ]
        );
    }

    #[test]
    fn counts_must_add_up_to_the_step() {
        let spec = RoleSpec::parse("ps:1,worker:2").unwrap();
        let e = spec.for_step(4).unwrap_err().to_string();
        assert_eq!(
            e,
            "--tf-cluster asks for 3 tasks (ps:1,worker:2) but the step has 4"
        );
        assert!(spec.for_step(2).is_err());
        assert!(spec.for_step(3).is_ok());
        let huge = RoleSpec::parse("a:4294967295,b:4294967295").unwrap();
        assert!(huge.for_step(u32::MAX).is_err());
    }
}
