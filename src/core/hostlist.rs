//! Slurm's hostlist grammar: `node[1-3,7],gpu[01-04]-ib,r[1-2]n[1-4]`.
//!
//! Expansion matches `scontrol show hostnames`: names in the order written
//! (never sorted, duplicates kept); items separated by commas or blanks, empty
//! ones ignored; zero padding from how a range's lower bound is written
//! (`n[08-11]` → n08 … n11, `n[0-0099]` → n0 … n99); several bracket groups in
//! one name vary as Slurm varies them (last fastest, then first, second, …).
//! Suffixes after brackets (`n[1-2]-ib`) are accepted, as since Slurm 23.02.5.
//! Stricter than Slurm, malformed input (`n[1-]`, `n[`, huge numbers) is an
//! error rather than a guess. Names are kept in one buffer, so a 10,000 node
//! list costs a few allocations, not 10,000.

use super::error::{Error, Result, bail, shown};
use super::number::push_padded;

/// Bracket groups allowed in one name (bounds the expansion's recursion).
const MAX_GROUPS: usize = 8;

/// The expanded names of a hostlist, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostList {
    buf: String,
    ends: Vec<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Range {
    lo: u64,
    hi: u64,
    width: usize,
}

/// One item such as `r[1-2]n[01-04]-ib`: `literals` around `groups`
/// (literals[i] precedes groups[i]; one more literal ends the name).
#[derive(Debug)]
struct Item<'a> {
    literals: Vec<&'a str>,
    groups: Vec<Vec<Range>>,
}

impl Item<'_> {
    fn count(&self) -> u64 {
        self.groups.iter().fold(1u64, |n, g| {
            n.saturating_mul(g.iter().map(|r| r.hi - r.lo + 1).sum())
        })
    }
}

impl HostList {
    /// Expands `list`, refusing more than `max_hosts` names (hostile input such
    /// as `n[0-99999999]` must not allocate without bound).
    pub fn parse(list: &str, max_hosts: usize) -> Result<HostList> {
        let bad = |e: Error| Error::new(format!("bad host list {}: {e}", shown(list)));
        if list.is_empty() {
            bail!("the host list is empty");
        }
        let mut hosts = HostList {
            buf: String::with_capacity(list.len()),
            ends: Vec::new(),
        };
        for text in split_top_level(list).map_err(bad)? {
            let item = parse_item(text).map_err(bad)?;
            if item.count().saturating_add(hosts.len() as u64) > max_hosts as u64 {
                return Err(bad(Error::new(format!("more than {max_hosts} hosts"))));
            }
            hosts.expand(&item, &mut [(0, 0); MAX_GROUPS], 0);
        }
        if hosts.is_empty() {
            bail!("the host list {} names no host", shown(list));
        }
        Ok(hosts)
    }

    /// A list of names already expanded.
    pub fn from_names<'a>(names: impl IntoIterator<Item = &'a str>) -> HostList {
        let mut hosts = HostList {
            buf: String::new(),
            ends: Vec::new(),
        };
        for name in names {
            hosts.buf.push_str(name);
            hosts.ends.push(hosts.buf.len() as u32);
        }
        hosts
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    pub fn get(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.buf[start..self.ends[i] as usize]
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        (0..self.len()).map(|i| self.get(i))
    }

    /// Appends every name of `item`, choosing the value of one bracket
    /// group per level; `chosen[g]` holds group g's value and width. Slurm
    /// varies the last group fastest, then the first, second, …, so the
    /// levels take groups k-2, k-3, …, 0, then k-1.
    fn expand(&mut self, item: &Item, chosen: &mut [(u64, usize); MAX_GROUPS], level: usize) {
        let k = item.groups.len();
        if level == k {
            for (g, literal) in item.literals.iter().enumerate() {
                self.buf.push_str(literal);
                if let Some(&(n, width)) = chosen[..k].get(g) {
                    push_padded(&mut self.buf, n, width);
                }
            }
            self.ends.push(self.buf.len() as u32);
            return;
        }
        let g = if level == k - 1 { k - 1 } else { k - 2 - level };
        for r in &item.groups[g] {
            for n in r.lo..=r.hi {
                chosen[g] = (n, r.width);
                self.expand(item, chosen, level + 1);
            }
        }
    }
}

/// Splits at commas and blanks outside brackets, dropping empty items.
fn split_top_level(list: &str) -> Result<Vec<&str>> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0u8, 0);
    for (i, b) in list.bytes().enumerate() {
        match b {
            b'[' if depth == 0 => depth = 1,
            b'[' => bail!("nested '[' at byte {i}"),
            b']' if depth == 1 => depth = 0,
            b']' => bail!("']' without '[' at byte {i}"),
            b',' | b' ' | b'\t' if depth == 0 => {
                items.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        bail!("'[' is never closed");
    }
    items.push(&list[start..]);
    items.retain(|s| !s.is_empty());
    Ok(items)
}

/// `r[1-2]n[01-04]-ib` → literals r, n, -ib around two groups.
fn parse_item(text: &str) -> Result<Item<'_>> {
    let mut item = Item {
        literals: Vec::new(),
        groups: Vec::new(),
    };
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        let close = rest.find(']').expect("split_top_level checked brackets");
        item.literals.push(check_name_text(&rest[..open])?);
        item.groups.push(parse_ranges(&rest[open + 1..close])?);
        rest = &rest[close + 1..];
        if item.groups.len() > MAX_GROUPS {
            bail!("more than {MAX_GROUPS} bracket groups in {}", shown(text));
        }
    }
    item.literals.push(check_name_text(rest)?);
    Ok(item)
}

/// Node names are letters, digits, '-', '_' and '.': anything else (spaces,
/// quotes, ':' that would break `host:port`) is refused rather than passed on.
fn check_name_text(text: &str) -> Result<&str> {
    match text
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        Some(c) => bail!("character {c:?} is not allowed in a host name"),
        None => Ok(text),
    }
}

/// `1-3,7,010-012` inside brackets.
fn parse_ranges(text: &str) -> Result<Vec<Range>> {
    text.split(',')
        .map(|r| {
            let (lo, hi) = r.split_once('-').unwrap_or((r, r));
            let lo_n = parse_bound(lo, r)?;
            let hi_n = parse_bound(hi, r)?;
            if lo_n > hi_n {
                bail!("range [{r}] runs backwards");
            }
            Ok(Range {
                lo: lo_n,
                hi: hi_n,
                width: lo.len(),
            })
        })
        .collect()
}

fn parse_bound(digits: &str, range: &str) -> Result<u64> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.len() > 18 {
        bail!("range [{range}] is not of the form N or N-M");
    }
    Ok(digits.parse().expect("at most 18 ASCII digits fit a u64"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &str) -> Vec<String> {
        HostList::parse(list, 1 << 20)
            .unwrap()
            .iter()
            .map(String::from)
            .collect()
    }

    fn err(list: &str) -> String {
        HostList::parse(list, 1 << 20).unwrap_err().to_string()
    }

    // TensorFlow's own test cases (slurm_cluster_resolver_test.py).
    #[test]
    fn tensorflow_cases() {
        assert_eq!(names("n1"), ["n1"]);
        assert_eq!(names("n[1,3]"), ["n1", "n3"]);
        assert_eq!(names("n[1-3]"), ["n1", "n2", "n3"]);
        assert_eq!(
            names("n[1-2],m5,o[3-4,6,7-9]"),
            ["n1", "n2", "m5", "o3", "o4", "o6", "o7", "o8", "o9"]
        );
        assert_eq!(
            names("n[0001-0003],m5,o[009-011]"),
            ["n0001", "n0002", "n0003", "m5", "o009", "o010", "o011"]
        );
    }

    #[test]
    fn never_sorted() {
        assert_eq!(names("node[9-11]"), ["node9", "node10", "node11"]);
        assert_eq!(names("n[5,1-2]"), ["n5", "n1", "n2"]);
    }

    #[test]
    fn padding_follows_the_lower_bound() {
        assert_eq!(names("n[08-11]"), ["n08", "n09", "n10", "n11"]);
        assert_eq!(names("n[8-11]"), ["n8", "n9", "n10", "n11"]);
        assert_eq!(names("n[0-0099]").len(), 100);
        assert_eq!(names("n[0-0099]")[99], "n99");
        assert_eq!(names("n[01-1]"), ["n01"]);
        assert_eq!(names("n[1-02]"), ["n1", "n2"]);
        assert_eq!(names("n[01,2]"), ["n01", "n2"]);
    }

    #[test]
    fn several_groups_and_suffixes() {
        assert_eq!(names("r[1-2]n[1-2]"), ["r1n1", "r1n2", "r2n1", "r2n2"]);
        assert_eq!(names("n[1-2]-ib"), ["n1-ib", "n2-ib"]);
        assert_eq!(
            names("a[1-3]b[01-02]c"),
            ["a1b01c", "a1b02c", "a2b01c", "a2b02c", "a3b01c", "a3b02c"]
        );
    }

    #[test]
    fn like_scontrol_duplicates_blanks_and_empty_items() {
        assert_eq!(names("n[1-2],n[1-2]"), ["n1", "n2", "n1", "n2"]);
        assert_eq!(names("n[1-3,2]"), ["n1", "n2", "n3", "n2"]);
        assert_eq!(names("n1 n2\tn3"), ["n1", "n2", "n3"]);
        assert_eq!(names("n[1-2],,m1,"), ["n1", "n2", "m1"]);
        assert_eq!(names("[1-2]"), ["1", "2"]);
        assert_eq!(names("node-[1-3]"), ["node-1", "node-2", "node-3"]);
    }

    #[test]
    fn malformed_lists_are_refused_with_the_reason() {
        assert!(err("").contains("empty"));
        assert!(err("n[").contains("never closed"));
        assert!(err("n[1-2]]").contains("without '['"));
        assert!(err("n[[1]]").contains("nested"));
        assert!(err("n[1-]").contains("not of the form"));
        assert!(err("n[a-b]").contains("not of the form"));
        assert!(err("n[3-1]").contains("backwards"));
        assert!(err(",").contains("names no host"));
        assert!(err("n[]").contains("not of the form"));
        assert!(err("n:1").contains("not allowed"));
        assert!(err("nœ").contains("not allowed"));
        assert!(err("n[99999999999999999999]").contains("not of the form"));
    }

    #[test]
    fn expansion_is_bounded() {
        let e = HostList::parse("n[1-100]", 99).unwrap_err().to_string();
        assert!(e.contains("more than 99 hosts"), "{e}");
        assert_eq!(HostList::parse("n[1-100]", 100).unwrap().len(), 100);
        let many = "[1-9]".repeat(MAX_GROUPS + 1);
        assert!(err(&format!("n{many}")).contains("bracket groups"));
    }
}
