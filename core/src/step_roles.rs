//! The roles of one step (`--tf-roles=trainer:4,rollout:2`): the step's
//! tasks split, in rank order, into named groups, each with a world of its
//! own (crate::role_world). Distinct from TensorFlow's job names
//! (crate::roles, `--tf-cluster=ps:1,worker:3`), which name a TF_CONFIG's
//! jobs in one world. In a heterogeneous step, `--tf-roles=NAME,NAME…`
//! names its components, one role each.

use super::error::shown;
use super::hostlist::HostList;
use super::limits::MAX_TASKS;
use super::number::parse_u32;

/// Longest role name: it becomes part of a variable's name.
const MAX_NAME: usize = 32;

/// Most roles in one step.
pub const MAX_ROLES: usize = 64;

/// The ports each task of a step with roles gets where the step does not
/// say (`--tf-ports-per-task`): its serving port, then VLLM_PORT and the
/// ports vLLM counts up from it.
pub const DEFAULT_PORTS_PER_TASK: u32 = 4;

/// The variables the inference engines read, each set only where the
/// user's environment does not hold it.
pub const ENGINE_VARS: [&str; 3] = ["VLLM_HOST_IP", "SGLANG_HOST_IP", "VLLM_PORT"];

/// The most ports one task may ask for.
pub const MAX_PORTS_PER_TASK: u32 = 64;

/// One role: its name and its tasks (None: a heterogeneous step's
/// component, as many tasks as the component has).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepRole {
    pub name: String,
    pub count: Option<u32>,
}

/// What `--tf-roles` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepRoles(pub Vec<StepRole>);

impl StepRoles {
    /// `NAME:COUNT[,NAME:COUNT…]`, or `NAME,NAME…` for the components of a
    /// heterogeneous step; never both kinds at once.
    pub fn parse(text: &str) -> Result<StepRoles, String> {
        let bad = |why: String| {
            Err(format!(
                "{}: {why} (expected NAME:COUNT[,NAME:COUNT…], e.g. trainer:4,rollout:2, or NAME,NAME… naming a heterogeneous step's components)",
                shown(text)
            ))
        };
        let mut roles: Vec<StepRole> = Vec::new();
        for (i, item) in text.split(',').enumerate() {
            if i == MAX_ROLES {
                return bad(format!("more than {MAX_ROLES} roles"));
            }
            let (name, count) = match item.split_once(':') {
                Some((name, count)) => (name, Some(count)),
                None => (item, None),
            };
            if let Some(why) = not_a_role_name(name, i) {
                return bad(why);
            }
            let count = match count.map(parse_u32) {
                None => None,
                Some(Some(n)) if (1..=MAX_TASKS).contains(&n) => Some(n),
                Some(_) => {
                    return bad(format!(
                        "role {name} has count {} (a whole number 1-{MAX_TASKS})",
                        shown(count.unwrap_or_default())
                    ));
                }
            };
            if roles.iter().any(|r| r.name == name) {
                return bad(format!("role {name} is given twice"));
            }
            if roles
                .first()
                .is_some_and(|r| r.count.is_some() != count.is_some())
            {
                return bad(
                    "every role has a count, or none has (a heterogeneous step's components)"
                        .into(),
                );
            }
            roles.push(StepRole {
                name: name.to_string(),
                count,
            });
        }
        Ok(StepRoles(roles))
    }

    /// The roles with their counts for a step of `tasks` tasks, or why they
    /// do not fit it: counts must add up to the step's tasks; names alone
    /// need a heterogeneous step of as many components (`components`: each
    /// component's tasks, in component order).
    pub fn for_step(
        &self,
        tasks: u32,
        components: Option<&[u32]>,
    ) -> Result<Vec<(String, u32)>, String> {
        let named = || {
            self.0
                .iter()
                .map(|r| r.name.as_str())
                .collect::<Vec<_>>()
                .join(",")
        };
        if self.0.iter().all(|r| r.count.is_none()) {
            let Some(components) = components else {
                return Err(format!(
                    "--tf-roles={} names roles without counts, which only a heterogeneous step's components have: write NAME:COUNT for each",
                    named()
                ));
            };
            if components.len() != self.0.len() {
                return Err(format!(
                    "--tf-roles={} names {} roles but the heterogeneous step has {} components",
                    named(),
                    self.0.len(),
                    components.len()
                ));
            }
            return Ok(self
                .0
                .iter()
                .map(|r| r.name.clone())
                .zip(components.iter().copied())
                .collect());
        }
        let sum: u64 = self.0.iter().filter_map(|r| r.count).map(u64::from).sum();
        if sum != u64::from(tasks) {
            return Err(format!(
                "--tf-roles={} asks for {sum} tasks but the step has {tasks}",
                self.text()
            ));
        }
        Ok(self
            .0
            .iter()
            .map(|r| (r.name.clone(), r.count.unwrap_or(0)))
            .collect())
    }

    /// The roles as written.
    pub fn text(&self) -> String {
        let one = |r: &StepRole| match r.count {
            Some(n) => format!("{}:{n}", r.name),
            None => r.name.clone(),
        };
        self.0.iter().map(one).collect::<Vec<_>>().join(",")
    }
}

/// The tasks of each component of a heterogeneous step, from its `nodes`
/// (each node's name and its tasks) and the components' node lists: a
/// component's tasks are those on its nodes. Components sharing a node
/// cannot be told apart so.
pub fn component_tasks<'n>(
    nodes: impl Iterator<Item = (&'n str, u32)>,
    components: &[HostList],
) -> Result<Vec<u32>, String> {
    let mut tasks = vec![0u32; components.len()];
    for (name, count) in nodes {
        let mut owners = (0..components.len()).filter(|&k| components[k].position(name).is_some());
        match (owners.next(), owners.next()) {
            (Some(k), None) => tasks[k] += count,
            (Some(a), Some(b)) => {
                return Err(format!(
                    "--tf-roles=NAME,NAME… cannot tell the components of this heterogeneous step apart: {name} is in components {a} and {b}; write NAME:COUNT for each role"
                ));
            }
            (None, _) => {
                return Err(format!(
                    "--tf-roles=NAME,NAME…: {name} is in no component of this heterogeneous step"
                ));
            }
        }
    }
    Ok(tasks)
}

/// The variable naming the addresses of role `name`'s tasks.
pub fn addrs_var(name: &str) -> String {
    format!("TF_CLUSTER_ROLE_{}_ADDRS", name.to_ascii_uppercase())
}

/// Why `name` (entry `i`) is no role name: `[a-z][a-z0-9_]*`, at most
/// [`MAX_NAME`] bytes (it is written upper-cased into a variable's name).
fn not_a_role_name(name: &str, i: usize) -> Option<String> {
    if name.is_empty() {
        return Some(format!("entry {} has no role name", i + 1));
    }
    if name.len() > MAX_NAME {
        return Some(format!(
            "role name {} is longer than {MAX_NAME} bytes",
            shown(name)
        ));
    }
    let ok = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_';
    match (name.chars().next(), name.chars().find(|c| !ok(*c))) {
        (_, Some(c)) => Some(format!(
            "role name {} has {c:?} (use a-z, 0-9 and '_', a letter first)",
            shown(name)
        )),
        (Some(c), None) if !c.is_ascii_lowercase() => Some(format!(
            "role name {} starts with {c:?} (use a-z, 0-9 and '_', a letter first)",
            shown(name)
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_split_the_step_in_rank_order() {
        let r = StepRoles::parse("trainer:4,rollout:2").unwrap();
        assert_eq!(r.text(), "trainer:4,rollout:2");
        assert_eq!(
            r.for_step(6, None).unwrap(),
            [("trainer".to_string(), 4), ("rollout".to_string(), 2)]
        );
        assert_eq!(
            r.for_step(7, None).unwrap_err(),
            "--tf-roles=trainer:4,rollout:2 asks for 6 tasks but the step has 7"
        );
        assert_eq!(addrs_var("rollout_2"), "TF_CLUSTER_ROLE_ROLLOUT_2_ADDRS");
    }

    #[test]
    fn names_alone_are_a_heterogeneous_steps_components() {
        let r = StepRoles::parse("trainer,rollout").unwrap();
        assert_eq!(
            r.for_step(6, Some(&[4, 2])).unwrap(),
            [("trainer".to_string(), 4), ("rollout".to_string(), 2)]
        );
        let e = r.for_step(6, None).unwrap_err();
        assert!(e.contains("only a heterogeneous step's components"), "{e}");
        let e = r.for_step(6, Some(&[2, 2, 2])).unwrap_err();
        assert!(
            e.contains("names 2 roles but the heterogeneous step has 3"),
            "{e}"
        );
    }

    #[test]
    fn a_components_tasks_are_those_on_its_nodes() {
        let lists = [
            HostList::parse("node3", 64).unwrap(),
            HostList::parse("node[1-2]", 64).unwrap(),
        ];
        let nodes = [("node1", 2), ("node2", 1), ("node3", 1)];
        assert_eq!(component_tasks(nodes.into_iter(), &lists).unwrap(), [1, 3]);
        let shared = [
            HostList::parse("node[1-2]", 64).unwrap(),
            HostList::parse("node2", 64).unwrap(),
        ];
        let e = component_tasks(nodes.into_iter(), &shared).unwrap_err();
        assert!(e.contains("node2 is in components 0 and 1"), "{e}");
    }

    #[test]
    fn bad_roles_name_the_bad_part() {
        for (text, why) in [
            ("", "entry 1 has no role name"),
            ("trainer:4,", "entry 2 has no role name"),
            (":4", "entry 1 has no role name"),
            ("trainer:0", "count \"0\""),
            ("trainer:x", "count \"x\""),
            ("trainer:-1", "count \"-1\""),
            ("trainer:262145", "count \"262145\""),
            ("trainer:1:2", "count \"1:2\""),
            ("Trainer:1", "has 'T'"),
            ("1x:1", "starts with '1'"),
            ("_x:1", "starts with '_'"),
            ("roll-out:1", "has '-'"),
            ("roll out:1", "has ' '"),
            ("a:1,a:2", "role a is given twice"),
            ("a:1,b", "every role has a count, or none has"),
            ("a,b:1", "every role has a count, or none has"),
        ] {
            let e = StepRoles::parse(text).unwrap_err();
            assert!(e.contains(why), "{text}: {e}");
        }
        let long = format!("{}:1", "a".repeat(10_000));
        let e = StepRoles::parse(&long).unwrap_err();
        assert!(e.len() < 400 && e.contains("longer than 32"), "{e}");
        let many: Vec<String> = (0..65).map(|i| format!("r{i}:1")).collect();
        let e = StepRoles::parse(&many.join(",")).unwrap_err();
        assert!(e.contains("more than 64 roles"), "{e}");
    }
}
