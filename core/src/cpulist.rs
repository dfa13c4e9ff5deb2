//! The kernel's CPU lists (`0-3,8-11`, as in `local_cpulist`,
//! `cpuset.cpus.effective`, `Cpus_allowed_list`, a NUMA node's `cpulist`):
//! a set of CPU numbers, parsed, combined and written back.

/// The highest CPU number taken, past which a list is not believed: a mask
/// of this many bits is what the task's binding hands the kernel.
pub const MAX_CPUS: u32 = 8192;

/// A set of CPU numbers, sorted, each once.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cpus(Vec<u32>);

impl Cpus {
    /// A list as the kernel writes it (`0-3,8,10-11`, spaces and a final
    /// newline allowed; empty is no CPU). None: not such a list, or a CPU
    /// at or past [`MAX_CPUS`].
    pub fn parse(text: &str) -> Option<Cpus> {
        let text = text.trim();
        let mut out = Vec::new();
        if text.is_empty() {
            return Some(Cpus(out));
        }
        for item in text.split(',') {
            let item = item.trim();
            let (lo, hi) = match item.split_once('-') {
                Some((a, b)) => (number(a)?, number(b)?),
                None => (number(item)?, number(item)?),
            };
            if lo > hi || hi >= MAX_CPUS {
                return None;
            }
            out.extend(lo..=hi);
        }
        out.sort_unstable();
        out.dedup();
        Some(Cpus(out))
    }

    /// From CPU numbers in any order.
    pub fn of(cpus: impl IntoIterator<Item = u32>) -> Cpus {
        let mut v: Vec<u32> = cpus.into_iter().filter(|&c| c < MAX_CPUS).collect();
        v.sort_unstable();
        v.dedup();
        Cpus(v)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().copied()
    }

    pub fn contains(&self, cpu: u32) -> bool {
        self.0.binary_search(&cpu).is_ok()
    }

    /// The CPUs in both.
    pub fn and(&self, other: &Cpus) -> Cpus {
        Cpus(self.iter().filter(|&c| other.contains(c)).collect())
    }

    /// The CPUs in either.
    pub fn or(&self, other: &Cpus) -> Cpus {
        Cpus::of(self.iter().chain(other.iter()))
    }

    pub fn meets(&self, other: &Cpus) -> bool {
        self.iter().any(|c| other.contains(c))
    }

    /// Part `i` of `n` contiguous parts of the list, as even as they come
    /// (the first parts one larger); the whole list where it has fewer
    /// CPUs than parts, so that no part is empty.
    pub fn part(&self, i: usize, n: usize) -> Cpus {
        let m = self.0.len();
        if n <= 1 || m < n || i >= n {
            return self.clone();
        }
        let (base, extra) = (m / n, m % n);
        let start = i * base + i.min(extra);
        let len = base + usize::from(i < extra);
        Cpus(self.0[start..start + len].to_vec())
    }

    /// The list as the kernel writes it: `0-3,8,10-11`.
    pub fn list(&self) -> String {
        let mut out = String::new();
        let mut i = 0;
        while i < self.0.len() {
            let mut j = i;
            while j + 1 < self.0.len() && self.0[j + 1] == self.0[j] + 1 {
                j += 1;
            }
            if !out.is_empty() {
                out.push(',');
            }
            match j > i {
                true => out.push_str(&format!("{}-{}", self.0[i], self.0[j])),
                false => out.push_str(&self.0[i].to_string()),
            }
            i = j + 1;
        }
        out
    }

    /// The set as a bit mask of 64-bit words, CPU n at bit n % 64 of word
    /// n / 64 (the layout of the kernel's `cpu_set_t` and node masks).
    pub fn mask(&self) -> Vec<u64> {
        let words = self.0.last().map_or(1, |&c| c as usize / 64 + 1);
        let mut mask = vec![0u64; words];
        for c in self.iter() {
            mask[c as usize / 64] |= 1 << (c % 64);
        }
        mask
    }
}

fn number(s: &str) -> Option<u32> {
    if s.is_empty() || s.len() > 9 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_lists_are_read_and_written_back() {
        let c = Cpus::parse("0-3,8,10-11\n").unwrap();
        assert_eq!(c.iter().collect::<Vec<_>>(), [0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(c.list(), "0-3,8,10-11");
        assert_eq!(Cpus::parse("").unwrap(), Cpus::default());
        assert_eq!(Cpus::parse("3,1-2,2").unwrap().list(), "1-3");
        for bad in ["a", "1-", "3-1", "-1", "0-8192", "1,,2"] {
            assert_eq!(Cpus::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn parts_are_contiguous_even_and_never_empty() {
        let c = Cpus::parse("0-9").unwrap();
        let parts: Vec<String> = (0..3).map(|i| c.part(i, 3).list()).collect();
        assert_eq!(parts, ["0-3", "4-6", "7-9"]);
        // Fewer CPUs than parts: each takes the whole list.
        let two = Cpus::parse("4-5").unwrap();
        assert_eq!(two.part(2, 3).list(), "4-5");
        assert_eq!(c.part(0, 1), c);
    }

    #[test]
    fn masks_are_the_kernels_layout() {
        assert_eq!(Cpus::parse("0,2,64").unwrap().mask(), [0b101, 1]);
        assert_eq!(Cpus::default().mask(), [0]);
        let a = Cpus::parse("0-7").unwrap();
        let b = Cpus::parse("4-11").unwrap();
        assert_eq!(a.and(&b).list(), "4-7");
        assert_eq!(a.or(&b).list(), "0-11");
        assert!(a.meets(&b) && !a.meets(&Cpus::parse("8").unwrap()));
    }
}
