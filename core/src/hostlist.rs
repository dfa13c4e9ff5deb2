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
use std::fmt::Write;

use super::number::digits;

/// Bracket groups allowed in one name (bounds the expansion's recursion).
const MAX_GROUPS: usize = 8;

/// Names whose room is reserved up front; longer lists grow as they go (a
/// caller may allow any number of names).
const RESERVE_NAMES: u64 = 1 << 16;

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
/// (literals[i] precedes groups[i]; one more literal ends the name). A group
/// is kept as its checked text (`01-04`) and read again where it is
/// expanded, which costs less than storing its ranges.
#[derive(Debug)]
struct Item<'a> {
    literals: [&'a str; MAX_GROUPS + 1],
    groups: [&'a str; MAX_GROUPS],
    k: usize,
    /// How many names it gives,
    count: u64,
    /// and the longest of them.
    longest: usize,
}

impl Item<'_> {
    fn group(&self, g: usize) -> impl Iterator<Item = Range> + '_ {
        self.groups[g]
            .split(',')
            .map(|r| parse_range(r).expect("parse_item checked the ranges"))
    }
}

/// The names as they are written out: one buffer and where each name ends.
struct Names {
    /// Pieces of the list's text (so UTF-8) and digits.
    buf: Vec<u8>,
    ends: Vec<u32>,
}

impl HostList {
    /// Expands `list`, refusing more than `max_hosts` names (hostile input such
    /// as `n[0-99999999]` must not allocate without bound).
    pub fn parse(list: &str, max_hosts: usize) -> Result<HostList> {
        let bad = |e: Error| Error::new(format!("bad host list {}: {e}", shown(list)));
        if list.is_empty() {
            bail!("the host list is empty");
        }
        check_brackets(list).map_err(bad)?;
        let mut names = Names {
            buf: Vec::new(),
            ends: Vec::new(),
        };
        let mut head = String::new();
        for text in top_level_items(list) {
            let item = parse_item(text).map_err(bad)?;
            let count = item.count;
            if count.saturating_add(names.ends.len() as u64) > max_hosts as u64 {
                return Err(bad(Error::new(format!("more than {max_hosts} hosts"))));
            }
            let reserve = count.min(RESERVE_NAMES) as usize;
            names.ends.reserve(reserve);
            names.buf.reserve(reserve * item.longest);
            names.expand(&item, &mut head, &mut [(0, 0); MAX_GROUPS], 0);
        }
        if names.ends.is_empty() {
            bail!("the host list {} names no host", shown(list));
        }
        // Whole pieces of the (UTF-8) list, so one check of the whole.
        let Ok(buf) = String::from_utf8(names.buf) else {
            bail!("the host list {} is not text", shown(list));
        };
        Ok(HostList {
            buf,
            ends: names.ends,
        })
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

    /// A name listed twice, if any (two ranks must never share host:port).
    /// Slurm's node lists are sorted (shorter names first, as `node9` before
    /// `node10`): those are checked in one pass without hashing.
    pub fn first_duplicate(&self) -> Option<&str> {
        let names = self.buf.as_bytes();
        let mut start = 0;
        let mut prev: &[u8] = &[];
        let mut sorted = true;
        for &end in &self.ends {
            let name = &names[start..end as usize];
            if (prev.len(), prev) >= (name.len(), name) && start > 0 {
                sorted = false;
                break;
            }
            (prev, start) = (name, end as usize);
        }
        if sorted {
            return None;
        }
        let mut seen = std::collections::HashSet::with_capacity(self.len());
        self.iter().find(|&name| !seen.insert(name))
    }

    /// The index of `name`.
    pub fn position(&self, name: &str) -> Option<usize> {
        let mut start = 0;
        self.ends.iter().position(|&end| {
            let found =
                end as usize - start == name.len() && &self.buf[start..end as usize] == name;
            start = end as usize;
            found
        })
    }

    /// The length of the longest name.
    pub fn longest(&self) -> usize {
        let mut start = 0;
        let mut longest = 0;
        for &end in &self.ends {
            longest = longest.max(end - start);
            start = end;
        }
        longest as usize
    }
}

/// A decimal number zero-padded to a width, counted up in place: a range
/// of thousands of names is written without formatting each number.
struct Counter {
    digits: Vec<u8>,
}

impl Counter {
    fn new(n: u64, width: usize) -> Counter {
        let mut digits = n.to_string().into_bytes();
        let pad = width.saturating_sub(digits.len());
        digits.splice(0..0, std::iter::repeat_n(b'0', pad));
        Counter { digits }
    }

    fn increment(&mut self) {
        for d in self.digits.iter_mut().rev() {
            if *d == b'9' {
                *d = b'0';
            } else {
                *d += 1;
                return;
            }
        }
        self.digits.insert(0, b'1');
    }
}

impl Names {
    /// Appends every name of `item`, choosing the value of one bracket
    /// group per level; `chosen[g]` holds group g's value and width. Slurm
    /// varies the last group fastest, then the first, second, …, so the
    /// levels take groups k-2, k-3, …, 0, then k-1. At the last level the
    /// name up to the last group is the same for every name (`head`, written
    /// in `scratch` when there are several groups) and the last group's
    /// number counts up in place.
    fn expand(
        &mut self,
        item: &Item,
        scratch: &mut String,
        chosen: &mut [(u64, usize); MAX_GROUPS],
        level: usize,
    ) {
        let k = item.k;
        if k == 0 {
            self.buf.extend_from_slice(item.literals[0].as_bytes());
            self.ends.push(self.buf.len() as u32);
            return;
        }
        if level == k - 1 {
            let head = if k == 1 {
                item.literals[0]
            } else {
                scratch.clear();
                for (g, &(n, width)) in chosen[..k - 1].iter().enumerate() {
                    let _ = write!(scratch, "{}{n:0width$}", item.literals[g]);
                }
                scratch.push_str(item.literals[k - 1]);
                scratch.as_str()
            };
            let tail = item.literals[k];
            for r in item.group(k - 1) {
                let mut n = Counter::new(r.lo, r.width);
                for _ in r.lo..=r.hi {
                    self.buf.extend_from_slice(head.as_bytes());
                    self.buf.extend_from_slice(&n.digits);
                    self.buf.extend_from_slice(tail.as_bytes());
                    self.ends.push(self.buf.len() as u32);
                    n.increment();
                }
            }
            return;
        }
        let g = k - 2 - level;
        for r in item.group(g) {
            for n in r.lo..=r.hi {
                chosen[g] = (n, r.width);
                self.expand(item, scratch, chosen, level + 1);
            }
        }
    }
}

/// Refuses brackets that are nested, unopened or never closed.
fn check_brackets(list: &str) -> Result<()> {
    let mut depth = 0u8;
    for (i, b) in list.bytes().enumerate() {
        match b {
            b'[' if depth == 0 => depth = 1,
            b'[' => bail!("nested '[' at byte {i}"),
            b']' if depth == 1 => depth = 0,
            b']' => bail!("']' without '[' at byte {i}"),
            _ => {}
        }
    }
    if depth != 0 {
        bail!("'[' is never closed");
    }
    Ok(())
}

/// The items of a list whose brackets are checked: split at commas and
/// blanks outside brackets, empty items dropped.
fn top_level_items(list: &str) -> impl Iterator<Item = &str> {
    let mut start = 0;
    let mut depth = 0u8;
    let mut bytes = list.bytes().enumerate();
    std::iter::from_fn(move || {
        for (i, b) in bytes.by_ref() {
            match b {
                b'[' => depth = 1,
                b']' => depth = 0,
                // ASCII: character boundaries on both sides.
                b',' | b' ' | b'\t' if depth == 0 => {
                    let item = &list[start..i];
                    start = i + 1;
                    return Some(item);
                }
                _ => {}
            }
        }
        let item = &list[start..];
        start = list.len();
        (!item.is_empty()).then_some(item)
    })
    .filter(|s| !s.is_empty())
}

/// `r[1-2]n[01-04]-ib` → literals r, n, -ib around two groups, each checked;
/// with the number of names it gives and the length of the longest.
fn parse_item(text: &str) -> Result<Item<'_>> {
    let mut item = Item {
        literals: [""; MAX_GROUPS + 1],
        groups: [""; MAX_GROUPS],
        k: 0,
        count: 1,
        longest: 0,
    };
    let mut rest = text;
    while let Some(open) = rest.bytes().position(|b| b == b'[') {
        let close = rest.bytes().position(|b| b == b']');
        let close = close.expect("check_brackets checked brackets");
        let literal = check_name_text(&rest[..open])?;
        let group = &rest[open + 1..close];
        let (mut names, mut longest) = (0u64, 0);
        for r in group.split(',') {
            let r = parse_range(r)?;
            names += r.hi - r.lo + 1;
            longest = longest.max(r.width.max(digits(r.hi)));
        }
        rest = &rest[close + 1..];
        if item.k == MAX_GROUPS {
            bail!("more than {MAX_GROUPS} bracket groups in {}", shown(text));
        }
        item.literals[item.k] = literal;
        item.groups[item.k] = group;
        item.k += 1;
        item.count = item.count.saturating_mul(names);
        item.longest += literal.len() + longest;
    }
    item.literals[item.k] = check_name_text(rest)?;
    item.longest += rest.len();
    Ok(item)
}

/// Node names are letters, digits, '-', '_' and '.': anything else (spaces,
/// quotes, ':' that would break `host:port`) is refused rather than passed on.
fn check_name_text(text: &str) -> Result<&str> {
    if text
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return Ok(text);
    }
    match text
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        Some(c) => bail!("character {c:?} is not allowed in a host name"),
        None => Ok(text),
    }
}

/// One range of a bracket group: `1-3`, `7` or `010-012`.
fn parse_range(r: &str) -> Result<Range> {
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
}

fn parse_bound(digits: &str, range: &str) -> Result<u64> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.len() > 18 {
        bail!("range [{range}] is not of the form N or N-M");
    }
    // At most 18 ASCII digits: they fit a u64.
    Ok(digits.bytes().fold(0, |n, b| n * 10 + u64::from(b - b'0')))
}

#[cfg(test)]
mod tests {

    #[test]
    fn counted_numbers_as_format_writes_them() {
        for (lo, width) in [(0, 0), (0, 3), (7, 1), (95, 4), (998, 2), (99_990, 0)] {
            let mut n = Counter::new(lo, width);
            for v in lo..lo + 20 {
                assert_eq!(n.digits, format!("{v:0width$}").as_bytes());
                n.increment();
            }
        }
    }

    #[test]
    fn duplicates_in_any_order() {
        for (list, dup) in [
            ("n[1-10]", None),
            ("n[08-11]", None),
            ("b,a,c", None),
            ("n[1-3],n2", Some("n2")),
            ("n[1-2],n[1-2]", Some("n1")),
            ("n10,n9,n10", Some("n10")),
        ] {
            assert_eq!(
                HostList::parse(list, 100).unwrap().first_duplicate(),
                dup,
                "{list}"
            );
        }
    }

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
