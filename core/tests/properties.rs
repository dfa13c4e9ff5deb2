//! Properties of the parsers over generated input (proptest): what Slurm
//! writes, in any of its forms, reads back as what it means.

use proptest::prelude::*;
use tf_cluster_core::hostlist::HostList;
use tf_cluster_core::roles::{Role, RoleSpec};
use tf_cluster_core::{ports, tasks_per_node};

/// Slurm's run-length form of per-node counts: `2(x3),1`.
fn compress(counts: &[u32]) -> String {
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for &c in counts {
        match runs.last_mut() {
            Some((last, n)) if *last == c => *n += 1,
            _ => runs.push((c, 1)),
        }
    }
    let items: Vec<String> = runs
        .iter()
        .map(|&(c, n)| {
            if n == 1 {
                c.to_string()
            } else {
                format!("{c}(x{n})")
            }
        })
        .collect();
    items.join(",")
}

proptest! {
    #[test]
    fn tasks_per_node_reads_back(counts in prop::collection::vec(1u32..40, 1..60)) {
        prop_assert_eq!(tasks_per_node::parse(&compress(&counts), 1000).unwrap(), counts);
    }

    /// `prefix[lo-hi,…]suffix` expands to every number of every range, in
    /// order, padded to the lower bound's written width.
    #[test]
    fn hostlist_ranges_expand_in_order(
        prefix in "[a-z]{1,6}",
        suffix in "(-[a-z]{1,3})?",
        ranges in prop::collection::vec((0u64..500, 0u64..20, 0usize..5), 1..6),
    ) {
        let mut text = Vec::new();
        let mut want = Vec::new();
        for &(lo, len, pad) in &ranges {
            let lo_text = format!("{}{lo}", "0".repeat(pad));
            let width = lo_text.len();
            text.push(if len == 0 { lo_text.clone() } else { format!("{lo_text}-{}", lo + len) });
            want.extend((lo..=lo + len).map(|n| format!("{prefix}{n:0width$}{suffix}")));
        }
        let list = format!("{prefix}[{}]{suffix}", text.join(","));
        let hosts = HostList::parse(&list, 100_000).unwrap();
        prop_assert_eq!(hosts.iter().collect::<Vec<_>>(), want);
    }

    /// Plain names separated by commas read back unchanged, duplicates kept.
    #[test]
    fn hostlist_plain_names_read_back(names in prop::collection::vec("[a-z][a-z0-9_.-]{0,12}", 1..40)) {
        let hosts = HostList::parse(&names.join(","), 1000).unwrap();
        prop_assert_eq!(hosts.iter().collect::<Vec<_>>(), names);
    }

    /// TensorFlow job names (one chief and one evaluator at most; not
    /// `master`, refused for the chief) read back.
    #[test]
    fn role_specs_read_back(roles in prop::collection::btree_map("[a-z][a-z0-9_]{0,10}", 1u32..100, 1..8)) {
        prop_assume!(!roles.iter().any(|(n, &c)| c > 1 && (n == "chief" || n == "evaluator")));
        prop_assume!(!roles.contains_key("master"));
        let spec: Vec<String> = roles.iter().map(|(n, c)| format!("{n}:{c}")).collect();
        let want: Vec<Role> = roles.into_iter().map(|(name, count)| Role { name, count }).collect();
        prop_assert_eq!(RoleSpec::parse(&spec.join(",")).unwrap(), RoleSpec::Roles(want));
    }

    /// Reserved port lists give their ports in order, as far as needed.
    #[test]
    fn reserved_ports_read_back(ranges in prop::collection::vec((1024u32..60000, 0u32..8), 1..5), want in 0u32..20) {
        let text: Vec<String> = ranges.iter().map(|&(lo, n)| if n == 0 { lo.to_string() } else { format!("{lo}-{}", lo + n) }).collect();
        let all: Vec<u16> = ranges.iter().flat_map(|&(lo, n)| (lo..=lo + n).map(|p| p as u16)).collect();
        match ports::ports(ports::Unreserved::Base(8888), Some(&text.join(",")), want) {
            Ok(got) => prop_assert_eq!(&got[..], &all[..want as usize]),
            Err(_) => prop_assert!(all.len() < want as usize),
        }
    }
}
