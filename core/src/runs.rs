//! A step's ranks as runs of node indices, `A[-B][*K][xR]` terms: the nodes
//! A to B (ascending or descending), each repeated K times, the whole
//! repeated R times. A block step of 16,384 nodes with 8 tasks each is one
//! term (`0-16383*8`), a cyclic one `0-16383x8`, plane=2 `0-16383*2x4`.
//!
//! A task answers every question about the layout from the terms, never
//! expanding them per rank: where a rank runs and its local index cost
//! O(terms), the tasks of one node O(terms + its tasks), every node's count
//! and the order of first ranks O(Σ term spans), which is O(nodes) for the
//! regular layouts (block, cyclic, plane).

use std::fmt::Write;

use super::error::{Result, bail, shown};
use super::limits::MAX_TASKS;
use super::number::parse_u32;

/// One term.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Term {
    first: u32,
    last: u32,
    each: u32,
    times: u32,
}

impl Term {
    /// Nodes in the span.
    fn span(&self) -> u32 {
        self.first.abs_diff(self.last) + 1
    }

    /// The span's i-th node.
    fn node(&self, i: u32) -> u32 {
        if self.first <= self.last {
            self.first + i
        } else {
            self.first - i
        }
    }

    /// `node`'s place in the span, if it is in it.
    fn position(&self, node: u32) -> Option<u32> {
        let (lo, hi) = (self.first.min(self.last), self.first.max(self.last));
        (lo..=hi).contains(&node).then(|| node.abs_diff(self.first))
    }

    /// Ranks in one repetition.
    fn round(&self) -> u64 {
        u64::from(self.span()).saturating_mul(u64::from(self.each))
    }

    /// Saturates: a hostile term is refused for its size, never wraps.
    fn len(&self) -> u64 {
        self.round().saturating_mul(u64::from(self.times))
    }

    /// The node of the term's `offset`-th rank.
    fn node_at(&self, offset: u64) -> u32 {
        self.node(((offset % self.round()) / u64::from(self.each)) as u32)
    }

    /// How often the span's `p`-th node occurs in the term's first `n` ranks.
    fn occurrences(&self, p: u32, n: u64) -> u64 {
        let each = u64::from(self.each);
        let (rounds, rest) = (n / self.round(), n % self.round());
        rounds * each + rest.saturating_sub(u64::from(p) * each).min(each)
    }
}

/// A step's ranks and their nodes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Runs {
    terms: Vec<Term>,
    len: u32,
}

impl Runs {
    /// The runs of `node_of` (the node of every rank), as short as the
    /// encoding allows: runs of one node, then runs of consecutive nodes
    /// with equal lengths, then repeats of equal terms.
    pub fn from_node_of(node_of: &[u32]) -> Runs {
        let mut runs: Vec<(u32, u32)> = Vec::new();
        for &n in node_of {
            match runs.last_mut() {
                Some((node, len)) if *node == n => *len += 1,
                _ => runs.push((n, 1)),
            }
        }
        let mut terms: Vec<Term> = Vec::new();
        for (node, len) in runs {
            if let Some(t) = terms.last_mut()
                && t.times == 1
                && t.each == len
            {
                let ascending = t.first <= t.last && t.last.checked_add(1) == Some(node);
                let descending = t.first >= t.last && t.last.checked_sub(1) == Some(node);
                let single = t.first == t.last;
                if (ascending || descending) && (single || (t.first < t.last) == ascending) {
                    t.last = node;
                    continue;
                }
            }
            terms.push(Term {
                first: node,
                last: node,
                each: len,
                times: 1,
            });
        }
        let mut out: Vec<Term> = Vec::new();
        for t in terms {
            match out.last_mut() {
                Some(prev) if Term { times: 1, ..*prev } == t => prev.times += 1,
                _ => out.push(t),
            }
        }
        Runs {
            terms: out,
            len: node_of.len() as u32,
        }
    }

    /// Reads the terms of a map of `nodes` nodes, refusing more than
    /// [`MAX_TASKS`] ranks in all.
    pub fn parse(text: &str, nodes: usize) -> Result<Runs> {
        let mut terms = Vec::new();
        let mut total = 0u64;
        for item in text.split(',') {
            let (rest, times) = suffix(item, 'x')?;
            let (rest, each) = suffix(rest, '*')?;
            let (first, last) = match rest.split_once('-') {
                Some((a, b)) => (number(a)?, number(b)?),
                None => (number(rest)?, number(rest)?),
            };
            if first.max(last) as usize >= nodes {
                bail!(
                    "node index {} but the map has {nodes} node(s)",
                    first.max(last)
                );
            }
            let term = Term {
                first,
                last,
                each,
                times,
            };
            total += term.len();
            if total > u64::from(MAX_TASKS) {
                bail!("more than {MAX_TASKS} tasks");
            }
            terms.push(term);
        }
        Ok(Runs {
            terms,
            len: total as u32,
        })
    }

    /// The terms as the map writes them.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for (i, t) in self.terms.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(out, "{}", t.first);
            if t.last != t.first {
                let _ = write!(out, "-{}", t.last);
            }
            if t.each != 1 {
                let _ = write!(out, "*{}", t.each);
            }
            if t.times != 1 {
                let _ = write!(out, "x{}", t.times);
            }
        }
        out
    }

    /// The number of ranks.
    pub fn len(&self) -> u32 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The node of every rank, in rank order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.terms.iter().flat_map(|t| {
            (0..t.times).flat_map(move |_| {
                (0..t.span()).flat_map(move |i| std::iter::repeat_n(t.node(i), t.each as usize))
            })
        })
    }

    /// The term holding `rank`, and the rank's offset in it.
    fn find(&self, rank: u32) -> Option<(&Term, u64, u64)> {
        let mut start = 0u64;
        for t in &self.terms {
            let end = start + t.len();
            if u64::from(rank) < end {
                return Some((t, start, u64::from(rank) - start));
            }
            start = end;
        }
        None
    }

    /// Where `rank` runs: its node, and its index among that node's ranks.
    pub fn placement(&self, rank: u32) -> Option<(u32, u32)> {
        let (term, start, offset) = self.find(rank)?;
        let node = term.node_at(offset);
        Some((node, self.occurrences(node, start + offset) as u32))
    }

    /// How often `node` occurs among the first `n` ranks.
    fn occurrences(&self, node: u32, n: u64) -> u64 {
        let mut start = 0u64;
        let mut count = 0;
        for t in &self.terms {
            if start >= n {
                break;
            }
            if let Some(p) = t.position(node) {
                count += t.occurrences(p, (n - start).min(t.len()));
            }
            start += t.len();
        }
        count
    }

    /// The ranks of `node`, in rank order.
    pub fn ranks_on(&self, node: u32) -> Vec<u32> {
        let mut ranks = Vec::new();
        let mut start = 0u64;
        for t in &self.terms {
            if let Some(p) = t.position(node) {
                for round in 0..u64::from(t.times) {
                    let first = start + round * t.round() + u64::from(p) * u64::from(t.each);
                    ranks.extend((first..first + u64::from(t.each)).map(|r| r as u32));
                }
            }
            start += t.len();
        }
        ranks
    }

    /// How many ranks each of the `nodes` nodes runs.
    pub fn counts(&self, nodes: usize) -> Vec<u32> {
        let mut counts = vec![0u32; nodes];
        for t in &self.terms {
            let per = t.each * t.times;
            for i in 0..t.span() {
                counts[t.node(i) as usize] += per;
            }
        }
        counts
    }

    /// Each node's place in the order of the nodes' first ranks (`u32::MAX`
    /// for a node that runs none): within a term, its span's new nodes come
    /// in span order.
    pub fn first_rank_order(&self, nodes: usize) -> Vec<u32> {
        let mut order = vec![u32::MAX; nodes];
        let mut next = 0;
        for t in &self.terms {
            for i in 0..t.span() {
                let slot = &mut order[t.node(i) as usize];
                if *slot == u32::MAX {
                    *slot = next;
                    next += 1;
                }
            }
        }
        order
    }
}

/// `text` split at its last `sep`, the count after it (1 when absent; 0 is
/// refused: an empty term is never written).
fn suffix(text: &str, sep: char) -> Result<(&str, u32)> {
    match text.rsplit_once(sep) {
        None => Ok((text, 1)),
        Some((rest, n)) => match number(n)? {
            0 => bail!("a count of 0 in {}", shown(text)),
            n => Ok((rest, n)),
        },
    }
}

fn number(text: &str) -> Result<u32> {
    match parse_u32(text) {
        Some(n) => Ok(n),
        None => bail!("{} is not a number", shown(text)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every query answered from the terms equals the one from the expanded
    /// ranks, for the layouts Slurm makes and odd ones.
    #[test]
    fn queries_match_the_expanded_ranks() {
        let layouts: Vec<Vec<u32>> = vec![
            vec![0, 1, 1, 1, 2],
            vec![0, 1, 2, 1, 1],
            vec![0, 0, 0, 2, 1],
            (0..12).map(|r| (r / 2) % 3).collect(),
            vec![2, 1, 0],
            (0..64).map(|r| r / 8).collect(),
            (0..64).map(|r| r % 8).collect(),
            vec![3, 3, 1, 0, 2, 2, 0, 1, 3, 0],
            (0..30).map(|r| 4 - (r / 3) % 5).collect(),
        ];
        for node_of in layouts {
            let nodes = *node_of.iter().max().unwrap() as usize + 1;
            let runs = Runs::from_node_of(&node_of);
            assert_eq!(Runs::parse(&runs.text(), nodes).unwrap(), runs);
            assert_eq!(runs.iter().collect::<Vec<_>>(), node_of);
            assert_eq!(runs.len() as usize, node_of.len());
            let mut seen = vec![0u32; nodes];
            let mut order = vec![u32::MAX; nodes];
            let mut next = 0;
            for (rank, &n) in node_of.iter().enumerate() {
                assert_eq!(runs.placement(rank as u32), Some((n, seen[n as usize])));
                seen[n as usize] += 1;
                if order[n as usize] == u32::MAX {
                    order[n as usize] = next;
                    next += 1;
                }
            }
            assert_eq!(runs.counts(nodes), seen, "{node_of:?}");
            assert_eq!(runs.first_rank_order(nodes), order, "{node_of:?}");
            for n in 0..nodes as u32 {
                let want: Vec<u32> = (0..node_of.len() as u32)
                    .filter(|&r| node_of[r as usize] == n)
                    .collect();
                assert_eq!(runs.ranks_on(n), want);
            }
            assert_eq!(runs.placement(node_of.len() as u32), None);
        }
    }
}
