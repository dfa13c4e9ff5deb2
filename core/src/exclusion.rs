//! Which node a requeue excludes from its job (`--tf-requeue-on` with
//! `--tf-exclude-max=N`): the node whose task ended with the code, or that
//! the preflight refused, is added to the job's excluded nodes so that the
//! next incarnation runs elsewhere. Decided here from slurmctld's record of
//! the job and its partition ([`Placement`]); the plugin's slurmstepd reads
//! the record and sends the update as root.
//!
//! The count of nodes the plugin excluded over the job's life is kept in
//! slurmctld's record, in the job's admin comment (one [`MARK`] per node),
//! which only an operator, an admin or root may change: a user's own
//! `--exclude` or `scontrol update ExcNodeList=` never counts, and a user
//! cannot lower the count to exceed the cap. An admin who lifts an
//! exclusion (`ExcNodeList=`) leaves the count as it was.

use crate::hostlist::HostList;

/// One node the plugin excluded, in the job's admin comment.
pub const MARK: &str = "tf-cluster-excluded=";

/// Most names read from one list (a job's or a partition's nodes).
const MAX_NAMES: usize = 65_536;

/// slurmctld's record of the job and of its partition, as read for one
/// exclusion.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placement {
    /// The nodes the job runs on (its allocation).
    pub nodes: String,
    /// The job's excluded nodes (`ExcNodeList`), as Slurm writes them.
    pub exc_nodes: String,
    /// The nodes the job requires (`ReqNodeList`).
    pub req_nodes: String,
    /// The job's admin comment.
    pub admin_comment: String,
    /// How many nodes the job runs on.
    pub num_nodes: u32,
    /// Its partition's nodes (None: slurmctld gave none).
    pub partition_nodes: Option<String>,
}

/// What a requeue does about the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exclusion {
    /// Exclude `node`: the job's new excluded nodes and admin comment;
    /// `count` nodes excluded by the plugin with this one.
    Add {
        exc_nodes: String,
        admin_comment: String,
        count: u32,
    },
    /// No exclusion: the line that says why (None: the setting is off).
    Not(Option<String>),
}

/// How many nodes the plugin already excluded from the job.
pub fn excluded_count(admin_comment: &str) -> u32 {
    admin_comment
        .split_whitespace()
        .filter(|w| w.starts_with(MARK))
        .count() as u32
}

/// The nodes the plugin excluded, in order.
pub fn excluded_nodes(admin_comment: &str) -> Vec<&str> {
    admin_comment
        .split_whitespace()
        .filter_map(|w| w.strip_prefix(MARK))
        .collect()
}

/// Whether the job requeued to exclude `node` (of at most `max` the plugin
/// excludes over its life) still fits its partition, and how.
pub fn decide(node: &str, max: u32, p: &Placement) -> Exclusion {
    if max == 0 {
        return Exclusion::Not(None);
    }
    let not = |why: String| Exclusion::Not(Some(format!("{node} is not excluded: {why}")));
    let done = excluded_count(&p.admin_comment);
    if done >= max {
        return not(format!(
            "the plugin excluded {done} node(s) from the job already, the most --tf-exclude-max allows ({max})"
        ));
    }
    let names = |list: &str| HostList::parse(list, MAX_NAMES).ok();
    if names(&p.nodes).is_none_or(|n| n.position(node).is_none()) {
        return not("slurmctld does not record it among the job's nodes".into());
    }
    let excluded = names(&p.exc_nodes);
    if excluded
        .as_ref()
        .is_some_and(|e| e.position(node).is_some())
    {
        return not("the job excludes it already".into());
    }
    if names(&p.req_nodes).is_some_and(|r| r.position(node).is_some()) {
        return not("the job requires it (--nodelist)".into());
    }
    let Some(partition) = p.partition_nodes.as_deref().and_then(names) else {
        return not("slurmctld gave no node list of the job's partition".into());
    };
    let excluded: std::collections::HashSet<&str> =
        excluded.iter().flat_map(HostList::iter).collect();
    let left = partition
        .iter()
        .filter(|n| *n != node && !excluded.contains(n))
        .count();
    if left < p.num_nodes as usize {
        return not(format!(
            "that would leave {left} node(s) of its partition for a job of {}",
            p.num_nodes
        ));
    }
    let exc_nodes = match p.exc_nodes.trim() {
        "" => node.to_string(),
        old => format!("{old},{node}"),
    };
    let admin_comment = match p.admin_comment.trim() {
        "" => format!("{MARK}{node}"),
        old => format!("{old} {MARK}{node}"),
    };
    Exclusion::Add {
        exc_nodes,
        admin_comment,
        count: done + 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placement() -> Placement {
        Placement {
            nodes: "node[1-3]".into(),
            num_nodes: 3,
            partition_nodes: Some("node[1-6]".into()),
            ..Placement::default()
        }
    }

    #[test]
    fn the_node_is_added_to_the_excluded_ones_and_counted_in_the_admin_comment() {
        let got = decide("node2", 1, &placement());
        assert_eq!(
            got,
            Exclusion::Add {
                exc_nodes: "node2".into(),
                admin_comment: "tf-cluster-excluded=node2".into(),
                count: 1
            }
        );
        let p = Placement {
            exc_nodes: "node[5-6]".into(),
            admin_comment: "site note tf-cluster-excluded=node4".into(),
            ..placement()
        };
        let Exclusion::Add {
            exc_nodes,
            admin_comment,
            count,
        } = decide("node2", 2, &p)
        else {
            panic!()
        };
        assert_eq!(exc_nodes, "node[5-6],node2");
        assert_eq!(
            admin_comment,
            "site note tf-cluster-excluded=node4 tf-cluster-excluded=node2"
        );
        assert_eq!(count, 2);
        assert_eq!(excluded_nodes(&admin_comment), ["node4", "node2"]);
    }

    /// The cap counts the plugin's own marks only: a user's own --exclude
    /// neither counts nor lifts it.
    #[test]
    fn the_cap_counts_only_what_the_plugin_excluded() {
        assert_eq!(decide("node2", 0, &placement()), Exclusion::Not(None));
        let user_excluded = Placement {
            exc_nodes: "node[4-5]".into(),
            ..placement()
        };
        assert!(matches!(
            decide("node2", 1, &user_excluded),
            Exclusion::Add { count: 1, .. }
        ));
        let at_cap = Placement {
            admin_comment: "tf-cluster-excluded=node4".into(),
            ..placement()
        };
        let Exclusion::Not(Some(line)) = decide("node2", 1, &at_cap) else {
            panic!()
        };
        assert_eq!(
            line,
            "node2 is not excluded: the plugin excluded 1 node(s) from the job already, the most --tf-exclude-max allows (1)"
        );
    }

    #[test]
    fn a_partition_left_too_small_or_a_node_not_the_jobs_is_not_excluded() {
        let small = Placement {
            partition_nodes: Some("node[1-3]".into()),
            ..placement()
        };
        let Exclusion::Not(Some(line)) = decide("node2", 1, &small) else {
            panic!()
        };
        assert_eq!(
            line,
            "node2 is not excluded: that would leave 2 node(s) of its partition for a job of 3"
        );
        let already = Placement {
            exc_nodes: "node[4-6]".into(),
            partition_nodes: Some("node[1-6]".into()),
            ..placement()
        };
        assert!(matches!(
            decide("node1", 1, &already),
            Exclusion::Not(Some(_))
        ));
        for (node, p, why) in [
            ("node9", placement(), "among the job's nodes"),
            (
                "node2",
                Placement {
                    req_nodes: "node[1-2]".into(),
                    ..placement()
                },
                "requires it",
            ),
            (
                "node2",
                Placement {
                    partition_nodes: None,
                    ..placement()
                },
                "no node list",
            ),
        ] {
            let Exclusion::Not(Some(line)) = decide(node, 1, &p) else {
                panic!("{node}")
            };
            assert!(line.contains(why), "{line}");
        }
    }
}
