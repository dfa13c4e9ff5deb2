//! How many tasks Slurm puts on each node of a step before it starts, from
//! the CPUs the step may use on each node: what `tf-cluster explain` needs to
//! show the step srun will start (a started step's counts come from Slurm
//! itself). Two parts of Slurm decide it:
//!
//! - a new job's allocation (srun or salloc outside a job) takes the CPUs of
//!   its nodes in node order, each node as many as it has while the nodes
//!   after it keep at least one each ([`job_cpus`]): `-N3 -n5` on nodes of 4
//!   CPUs gets 3,1,1;
//! - the step layout (slurm_step_layout.c) deals tasks over the step's CPUs
//!   per node ([`tasks_per_node`]): block and cyclic one task per node per
//!   round over the nodes with a CPU left, plane `N` tasks per node per
//!   round (each node one first); past the CPUs, block deals one more task
//!   per node per round, cyclic raises every node by the same share first,
//!   plane deals N per node per round.
//!
//! Every function here costs O(nodes + tasks): the rounds skip the nodes
//! that are full.

use super::distribution::Distribution;

/// The CPUs a new job of `cpus_needed` CPUs gets on each of its nodes, whose
/// CPU counts are `node_cpus` (in Slurm's node order): each node as many as
/// it has, but for one left to each later node; at least one each. Fewer
/// CPUs than nodes is the caller's refusal.
pub fn job_cpus(node_cpus: &[u32], cpus_needed: u64) -> Vec<u32> {
    let mut left = cpus_needed;
    let nodes = node_cpus.len() as u64;
    node_cpus
        .iter()
        .enumerate()
        .map(|(i, &have)| {
            let later = nodes - i as u64 - 1;
            let take = u64::from(have.max(1))
                .min(left.saturating_sub(later))
                .max(1);
            left = left.saturating_sub(take);
            take as u32
        })
        .collect()
}

/// Tasks per node of a step of `tasks` tasks over nodes with `cpus` CPUs each
/// (at least 1 each; already divided by the CPUs per task), for a block,
/// cyclic or plane distribution (arbitrary counts come from its host list).
pub fn tasks_per_node(tasks: u32, cpus: &[u32], dist: Distribution) -> Vec<u32> {
    let cpus: Vec<u32> = cpus.iter().map(|&c| c.max(1)).collect();
    let mut counts = vec![0u32; cpus.len()];
    if cpus.is_empty() {
        return counts;
    }
    let total: u64 = cpus.iter().map(|&c| u64::from(c)).sum();
    let over = u64::from(tasks).saturating_sub(total);
    let mut left = tasks;
    match dist {
        Distribution::Plane(size) => plane(&mut counts, &cpus, size.max(1), &mut left),
        // Cyclic past the CPUs: every node's share raised alike first.
        Distribution::Cyclic if over > 0 => {
            let extra = over.div_ceil(cpus.len() as u64) as u32;
            let caps: Vec<u32> = cpus.iter().map(|&c| c.saturating_add(extra)).collect();
            deal(&mut counts, &caps, 1, &mut left);
        }
        _ => deal(&mut counts, &cpus, 1, &mut left),
    }
    // Past every cap: `per_round` more per node per round, all nodes.
    let per_round = match dist {
        Distribution::Plane(size) => size.max(1),
        _ => 1,
    };
    spread(&mut counts, per_round, left);
    counts
}

/// Rounds over the nodes below their cap, `per_round` tasks each at most,
/// until `left` runs out or every node is at its cap.
fn deal(counts: &mut [u32], caps: &[u32], per_round: u32, left: &mut u32) {
    let mut open: Vec<usize> = (0..counts.len()).filter(|&i| counts[i] < caps[i]).collect();
    while *left > 0 && !open.is_empty() {
        for &i in &open {
            if *left == 0 {
                break;
            }
            let take = per_round.min(caps[i] - counts[i]).min(*left);
            counts[i] += take;
            *left -= take;
        }
        open.retain(|&i| counts[i] < caps[i]);
    }
}

/// Plane: one task on each node first, then the rest of the first plane
/// and the next planes within each node's CPUs.
fn plane(counts: &mut [u32], cpus: &[u32], size: u32, left: &mut u32) {
    for c in counts.iter_mut() {
        if *left == 0 {
            return;
        }
        *c += 1;
        *left -= 1;
    }
    // The rest of the first round: up to `size` on each node in all.
    for (i, c) in counts.iter_mut().enumerate() {
        let take = (size - 1).min(cpus[i].saturating_sub(*c)).min(*left);
        *c += take;
        *left -= take;
    }
    deal(counts, cpus, size, left);
}

/// Past the caps: `per_round` more tasks on each node per round, in node
/// order, the last round partial. In closed form (no loop over rounds).
fn spread(counts: &mut [u32], per_round: u32, left: u32) {
    let nodes = counts.len() as u64;
    if left == 0 || nodes == 0 {
        return;
    }
    let round = nodes * u64::from(per_round);
    let full = u64::from(left) / round;
    let mut rest = u64::from(left) % round;
    for c in counts.iter_mut() {
        let take = (full * u64::from(per_round)) + rest.min(u64::from(per_round));
        rest -= rest.min(u64::from(per_round));
        *c += take as u32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Distribution::*;

    #[test]
    fn a_new_job_packs_its_first_nodes() {
        // Measured on the testbed (nodes of 4 CPUs): `-N3 -n5` 3,1,1;
        // `-w node[1-3] -n7` 4,2,1.
        assert_eq!(job_cpus(&[4, 4, 4], 5), [3, 1, 1]);
        assert_eq!(job_cpus(&[4, 4, 4], 7), [4, 2, 1]);
        assert_eq!(job_cpus(&[4, 4, 4], 12), [4, 4, 4]);
        assert_eq!(job_cpus(&[4, 4], 20), [4, 4]);
        assert_eq!(job_cpus(&[2, 8, 4], 9), [2, 6, 1]);
        assert_eq!(job_cpus(&[4, 4, 4], 3), [1, 1, 1]);
    }

    #[test]
    fn block_and_cyclic_deal_over_the_cpus() {
        // slurm_step_layout.c's own example: cpus 4,2,4,2 and 10 tasks.
        assert_eq!(tasks_per_node(10, &[4, 2, 4, 2], Block), [3, 2, 3, 2]);
        assert_eq!(tasks_per_node(10, &[4, 2, 4, 2], Cyclic), [3, 2, 3, 2]);
        assert_eq!(tasks_per_node(7, &[4, 2, 1], Block), [4, 2, 1]);
        assert_eq!(tasks_per_node(5, &[4, 4, 4], Block), [2, 2, 1]);
        // Past the CPUs, block deals one per node per round; cyclic first
        // raises every node by ceil(extra / nodes).
        assert_eq!(tasks_per_node(6, &[4, 1], Block), [5, 1]);
        assert_eq!(tasks_per_node(6, &[4, 1], Cyclic), [4, 2]);
        assert_eq!(tasks_per_node(9, &[1, 1], Block), [5, 4]);
        assert_eq!(tasks_per_node(9, &[1, 1], Cyclic), [5, 4]);
    }

    #[test]
    fn plane_deals_planes_over_the_cpus() {
        // slurm_step_layout.c's own example: plane 2, 6 tasks, cpus 4,1,1.
        assert_eq!(tasks_per_node(6, &[4, 1, 1], Plane(2)), [4, 1, 1]);
        assert_eq!(tasks_per_node(7, &[4, 2, 1], Plane(2)), [4, 2, 1]);
        assert_eq!(tasks_per_node(5, &[4, 4], Plane(2)), [3, 2]);
        assert_eq!(tasks_per_node(6, &[4, 4], Plane(4)), [4, 2]);
        // Past the CPUs: N per node per round.
        assert_eq!(tasks_per_node(8, &[1, 1], Plane(2)), [5, 3]);
        assert_eq!(tasks_per_node(5, &[1, 1], Plane(2)), [3, 2]);
        assert_eq!(tasks_per_node(2, &[4, 4, 4], Plane(2)), [1, 1, 0]);
    }

    /// The work is bounded by nodes + tasks: a step of 262,144 tasks over
    /// 65,536 nodes of 1 CPU and one of 262,144 CPUs, in every
    /// distribution, counts every task once (the rounds skip full nodes).
    #[test]
    fn counts_add_up_on_large_steps() {
        let mut cpus = vec![1u32; 65_536];
        cpus[0] = 262_144;
        for dist in [Block, Cyclic, Plane(3)] {
            let counts = tasks_per_node(262_144, &cpus, dist);
            assert_eq!(counts.iter().map(|&c| u64::from(c)).sum::<u64>(), 262_144);
        }
        let counts = tasks_per_node(1 << 20, &[1; 4], Block);
        assert_eq!(counts, [1 << 18; 4]);
    }
}
