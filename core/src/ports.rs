//! Ports: where the step's ports on each node come from, the same on every
//! node of the step (how they are cut into blocks, each for what:
//! crate::node_plan::PortNeeds). In order of precedence:
//!
//! - the ports Slurm reserved for the step (SLURM_STEP_RESV_PORTS, only
//!   where slurm.conf has `MpiParams=ports=…`), as Slurm gave them;
//! - an explicit port base (`--tf-port-base`, `port-base=`): base + index;
//! - else the step's own block of the port range (`port-range=`, default
//!   20000-29999), placed by its job and step ids as Slurm gives them
//!   ([`PortRange::block`]), so that steps sharing a node rarely meet.

use super::error::{Result, bail, shown};
use super::number::parse_u32;

/// Ports per slot of the range: a step of up to this many ports on a node
/// takes one slot.
pub const SLOT: u32 = 4;
/// Step ids a job spreads over before two of its steps share a slot (step
/// ids are taken modulo this).
pub const STEPS: u32 = 16;

/// The ports steps take their block from when Slurm reserved none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange {
    pub first: u16,
    pub last: u16,
}

/// The default range: above the ports Slurm and most services listen on
/// (slurmctld 6817, TensorFlow's 8888, MpiParams ranges usually at 12000),
/// below torchrun's default 29500 and Linux's ephemeral ports (32768 up).
pub const DEFAULT_RANGE: PortRange = PortRange {
    first: 20000,
    last: 29499,
};

impl PortRange {
    /// `LO-HI`, at least [`SLOT`] × [`STEPS`] ports.
    pub fn parse(text: &str) -> std::result::Result<PortRange, String> {
        let fit = || {
            let (lo, hi) = text.split_once('-')?;
            let (lo, hi) = (parse_u32(lo)?, parse_u32(hi)?);
            (1..=65535).contains(&lo).then_some(())?;
            (lo..=65535).contains(&hi).then_some(())?;
            Some(PortRange {
                first: lo as u16,
                last: hi as u16,
            })
        };
        let min = SLOT * STEPS;
        match fit() {
            Some(r) if r.len() >= min => Ok(r),
            Some(r) => Err(format!(
                "{text}: {} ports; a port range has at least {min}",
                r.len()
            )),
            None => Err(format!(
                "{}: not a port range LO-HI within 1-65535, such as 20000-29499",
                shown(text)
            )),
        }
    }

    fn len(&self) -> u32 {
        u32::from(self.last) - u32::from(self.first) + 1
    }

    /// The range's slots of [`SLOT`] ports.
    pub fn slots(&self) -> u32 {
        self.len() / SLOT
    }

    /// The `n` ports of step `step` of job `job`. A step of `n` ports takes
    /// m = ⌈n ÷ [`SLOT`]⌉ slots: the range is cut into B = ⌊slots ÷ m⌋
    /// blocks of m slots, and the step takes block (job × k + step mod
    /// [`STEPS`]) mod B, where k ([`stride`]) is the first number from
    /// [`STEPS`] up with no factor in common with B; its ports run
    /// consecutive from the block's start (never wrapping). With m = 1 (up
    /// to 4 ports, every step but a large TensorFlow one or Ray's) the block
    /// is the slot, and k is 16 for the default range (2,375 slots).
    ///
    /// Since k and B share no factor, job × k mod B goes through every block
    /// before it repeats: two steps of the same m whose step ids agree
    /// modulo [`STEPS`] meet only when their job ids differ by a multiple of
    /// B, and steps of one job whose step ids differ modulo [`STEPS`] never
    /// meet (when B ≥ [`STEPS`]). Steps of jobs less than (B − 15) ÷ k
    /// apart never meet at all. A multiplier sharing a factor with B (16
    /// with Ray's 148 blocks) would repeat every B ÷ gcd jobs and crowd the
    /// steps into a fraction of the blocks. Steps of unrelated jobs meet by
    /// chance, 1 in B for two steps of the same m.
    pub fn block(&self, job: u32, step: u32, n: u32) -> Result<Vec<u16>> {
        let slots = self.slots();
        let size = slots * SLOT;
        if n > size {
            bail!(
                "this step needs {n} ports on a node, more than the {size} of the port range {}-{}",
                self.first,
                self.last
            );
        }
        let m = n.div_ceil(SLOT).max(1);
        let blocks = u64::from(slots / m);
        let k = stride(blocks);
        let index = (u64::from(job) * k + u64::from(step % STEPS)) % blocks;
        let start = u32::from(self.first) + index as u32 * m * SLOT;
        Ok((0..n).map(|k| (start + k) as u16).collect())
    }
}

/// The multiplier of a job id over `blocks` blocks: the first number from
/// [`STEPS`] up that shares no factor with `blocks`, so that job ids walk
/// every block before one repeats (16 for the default range's 2,375 slots,
/// 17 for Ray's 148 blocks).
pub fn stride(blocks: u64) -> u64 {
    fn gcd(a: u64, b: u64) -> u64 {
        if b == 0 { a } else { gcd(b, a % b) }
    }
    (u64::from(STEPS)..)
        .find(|&k| gcd(k, blocks) == 1)
        .unwrap_or(1)
}

/// Where a step's ports come from when Slurm reserved none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unreserved {
    /// An explicit port base: local index k takes base + k.
    Base(u16),
    /// The step's block of the range, by its job and step ids.
    Block {
        range: PortRange,
        job: u32,
        step: u32,
    },
}

/// The step's `count` ports on a node (the count of its port
/// plan: crate::node_plan::PortNeeds::total).
pub fn ports(unreserved: Unreserved, reserved: Option<&str>, count: u32) -> Result<Vec<u16>> {
    match (reserved, unreserved) {
        (Some(list), _) => reserved_ports(list, count),
        (None, Unreserved::Block { range, job, step }) => range.block(job, step, count),
        (None, Unreserved::Base(base)) => {
            let last = u64::from(base) + u64::from(count.max(1)) - 1;
            if last > 65535 {
                bail!("port base {base} + {count} tasks on a node needs port {last}, above 65535");
            }
            Ok((0..count as u16).map(|k| base + k).collect())
        }
    }
}

/// The first `need` ports Slurm reserved, or the refusal of a step that
/// needs more than Slurm reserved (srun makes it before launch).
pub fn reserved_ports(list: &str, need: u32) -> Result<Vec<u16>> {
    let ports = parse_reserved(list, need)?;
    if (ports.len() as u64) < u64::from(need) {
        bail!(
            "Slurm reserved {} port(s) ({list}) for this step but it needs {need} on a node: ask for them with srun --resv-ports={need}",
            ports.len()
        );
    }
    Ok(ports)
}

/// `12001,12003-12005` → [12001, 12003, 12004, 12005]; only the first `want`
/// ports matter, so a hostile range costs no more than that.
fn parse_reserved(list: &str, want: u32) -> Result<Vec<u16>> {
    let bad = |why: &str| -> Result<Vec<u16>> {
        bail!("bad SLURM_STEP_RESV_PORTS {}: {why}", shown(list))
    };
    let mut ports = Vec::with_capacity(want as usize);
    for item in list.split(',') {
        let (lo, hi) = item.split_once('-').unwrap_or((item, item));
        let (Some(lo), Some(hi)) = (parse_u32(lo), parse_u32(hi)) else {
            return bad(&format!("{} is not N or N-M", shown(item)));
        };
        if lo == 0 || lo > hi || hi > 65535 {
            return bad(&format!("{item} is not a range of ports 1-65535"));
        }
        for port in lo..=hi {
            if ports.len() as u32 == want {
                break;
            }
            ports.push(port as u16);
        }
    }
    Ok(ports)
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: fn(u16) -> Unreserved = Unreserved::Base;

    #[test]
    fn base_plus_local_index() {
        assert_eq!(ports(B(8888), None, 3).unwrap(), [8888, 8889, 8890]);
        assert_eq!(ports(B(65534), None, 2).unwrap(), [65534, 65535]);
        let e = ports(B(65535), None, 2).unwrap_err().to_string();
        assert!(e.contains("needs port 65536, above 65535"), "{e}");
    }

    #[test]
    fn reserved_ports_win() {
        let block = Unreserved::Block {
            range: DEFAULT_RANGE,
            job: 4242,
            step: 0,
        };
        for free in [B(8888), block] {
            assert_eq!(ports(free, Some("12043-12045"), 2).unwrap(), [12043, 12044]);
            assert_eq!(
                ports(free, Some("12001,12003-12005"), 4).unwrap(),
                [12001, 12003, 12004, 12005]
            );
            let e = ports(free, Some("12001"), 2).unwrap_err().to_string();
            assert_eq!(
                e,
                "Slurm reserved 1 port(s) (12001) for this step but it needs 2 on a node: ask for them with srun --resv-ports=2"
            );
        }
        // A hostile, huge range is read only as far as needed.
        assert_eq!(ports(B(1), Some("1-65535"), 2).unwrap(), [1, 2]);
    }

    #[test]
    fn garbage_is_refused() {
        for bad in [
            "",
            "x",
            "1-",
            "-1",
            "0",
            "5-3",
            "70000",
            "1,,2",
            "1 2",
            "12001-99999999999",
        ] {
            let e = ports(B(8888), Some(bad), 1).unwrap_err().to_string();
            assert!(e.starts_with("bad SLURM_STEP_RESV_PORTS"), "{bad}: {e}");
        }
    }

    fn overlap(a: &[u16], b: &[u16]) -> bool {
        a.iter().any(|p| b.contains(p))
    }

    /// Steps of jobs whose ids are less than 148 apart never share a port
    /// (each taking up to a slot: 4 ports), nor do a job's steps whose ids
    /// differ modulo 16; every block stays inside the range.
    #[test]
    fn nearby_steps_never_meet() {
        let r = DEFAULT_RANGE;
        assert_eq!(r.slots(), 2375);
        for base in [0u32, 1_000_003, u32::MAX - 200] {
            let mut blocks = Vec::new();
            for job in base..base + 148 {
                for step in 0..STEPS {
                    let b = r.block(job, step, SLOT).unwrap();
                    assert!(b.iter().all(|&p| (20000..=29499).contains(&p)), "{b:?}");
                    blocks.push(((job, step), b));
                }
            }
            let mut seen = std::collections::HashSet::new();
            for (id, b) in &blocks {
                for p in b {
                    assert!(seen.insert(*p), "{id:?} shares port {p}");
                }
            }
        }
        // 148 apart, their step ids 7 apart: the same slot.
        assert_eq!(r.block(7, 0, 1).unwrap(), r.block(7 + 148, 7, 1).unwrap());
    }

    /// Unrelated jobs (ids spread at random over a cluster's lifetime) meet
    /// with a chance of about 1 in 2,375 per pair of one-slot steps.
    #[test]
    fn unrelated_steps_meet_rarely() {
        let r = DEFAULT_RANGE;
        // A small deterministic generator (xorshift): job ids 1 to 10^7.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % 10_000_000) as u32 + 1
        };
        let pairs = 200_000;
        let mut met = 0;
        for _ in 0..pairs {
            let (a, b) = (next(), next());
            if a != b && overlap(&r.block(a, 0, 2).unwrap(), &r.block(b, 0, 2).unwrap()) {
                met += 1;
            }
        }
        // Expected 200,000 / 2,375 ≈ 84 (binomial: ±3 sigma is ±28).
        assert!((56..=112).contains(&met), "{met} of {pairs} pairs met");
    }

    /// An explicit base keeps its meaning; a range too small for the step
    /// refuses it; a step of more than a slot takes a block of whole slots
    /// aligned on its size, inside the range.
    #[test]
    fn blocks_wrap_and_refuse_what_does_not_fit() {
        let r = PortRange::parse("30000-30063").unwrap();
        assert_eq!(r.slots(), 16);
        // 6 ports: blocks of 2 slots (8 ports), 8 of them; job 0 step 15
        // takes block 15 mod 8 = 7, ports 30056 on, not the last slot run on
        // past the range's end.
        assert_eq!(
            r.block(0, 15, 6).unwrap(),
            [30056, 30057, 30058, 30059, 30060, 30061]
        );
        // 64 ports: the one block of 16 slots, the whole range.
        assert_eq!(
            r.block(5, 3, 64).unwrap(),
            (30000..=30063).collect::<Vec<u16>>()
        );
        let e = r.block(0, 0, 65).unwrap_err().to_string();
        assert_eq!(
            e,
            "this step needs 65 ports on a node, more than the 64 of the port range 30000-30063"
        );
        assert_eq!(
            PortRange::parse("30000-30062").unwrap_err(),
            "30000-30062: 63 ports; a port range has at least 64"
        );
        for bad in ["", "30000", "0-100", "2-1", "1-65536", "a-b", "1-2-3"] {
            let e = PortRange::parse(bad).unwrap_err();
            assert!(e.contains("not a port range LO-HI"), "{bad}: {e}");
        }
    }

    /// Ray's steps (64 ports: blocks of 16 slots, 148 of them in the default
    /// range, multiplier 17) of jobs less than 8 apart never meet ((148 −
    /// 15) ÷ 17 = 7.8), stay inside the range, and never run into the next
    /// block; 8 apart, two of them meet.
    #[test]
    fn large_steps_take_aligned_blocks() {
        let r = DEFAULT_RANGE;
        let mut seen = std::collections::HashSet::new();
        for job in 1_000_000..1_000_008 {
            for step in 0..STEPS {
                let b = r.block(job, step, 64).unwrap();
                assert_eq!((b[0] - 20000) % 64, 0, "{job}.{step}");
                assert!(b.iter().all(|&p| (20000..=29499).contains(&p)));
                for p in b {
                    assert!(seen.insert(p), "{job}.{step} shares port {p}");
                }
            }
        }
        let met = (0..STEPS).any(|step| {
            (0..STEPS).any(|other| {
                r.block(1_000_000, step, 64).unwrap() == r.block(1_000_008, other, 64).unwrap()
            })
        });
        assert!(met, "8 apart: 8 × 17 + 15 wraps past 148");
        // A 4-port step keeps its slot: job 7, step 0, slot 112, port 20448.
        assert_eq!(r.block(7, 0, 4).unwrap()[0], 20448);
        // 5 ports: two slots, 1187 blocks; job 7 step 0 block 112: 20896.
        assert_eq!(r.block(7, 0, 5).unwrap()[0], 20896);
    }

    /// A small deterministic generator (xorshift).
    struct Xorshift(u64);

    impl Xorshift {
        fn below(&mut self, n: u32) -> u32 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % u64::from(n)) as u32
        }
    }

    /// The chance that two steps of `a` and `b` ports meet when each takes
    /// any of its blocks alike, counted over every pair of blocks (the
    /// range's geometry only, no job or step id).
    fn ideal(r: &PortRange, a: u32, b: u32) -> f64 {
        let slots = r.slots();
        let (ma, mb) = (a.div_ceil(SLOT), b.div_ceil(SLOT));
        let (ba, bb) = (slots / ma, slots / mb);
        let mut met = 0u64;
        for i in 0..ba {
            for j in 0..bb {
                // Slots [i·ma, i·ma + ma) and [j·mb, j·mb + mb); the ports
                // used are the first a and b of them.
                let (lo_a, hi_a) = (i * ma * SLOT, i * ma * SLOT + a);
                let (lo_b, hi_b) = (j * mb * SLOT, j * mb * SLOT + b);
                if lo_a < hi_b && lo_b < hi_a {
                    met += 1;
                }
            }
        }
        met as f64 / (f64::from(ba) * f64::from(bb))
    }

    /// 100,000 pairs of unrelated jobs (ids drawn from 1 to 10^7), both
    /// steps step 0 (a batch script's first srun, the most common step), and
    /// again with step ids drawn from 0-63: the share of pairs whose steps
    /// share a port is the ideal one (each step any of its blocks alike) for
    /// steps of 1, 4, 32 and 64 ports, within 4 standard deviations. These
    /// are the chances docs/layouts-and-gpus.md states.
    #[test]
    fn unrelated_steps_meet_as_often_as_an_even_spread_says() {
        let r = DEFAULT_RANGE;
        let mut g = Xorshift(0x9e37_79b9_7f4a_7c15);
        let pairs = 100_000u32;
        let sizes = [(1, 1), (4, 4), (32, 32), (64, 64), (4, 64)];
        for ((a, b), any_step) in sizes.iter().flat_map(|&s| [(s, false), (s, true)]) {
            let mut met = 0u32;
            let mut drawn = 0u32;
            while drawn < pairs {
                let (ja, jb) = (g.below(10_000_000) + 1, g.below(10_000_000) + 1);
                if ja == jb {
                    continue;
                }
                drawn += 1;
                let (sa, sb) = match any_step {
                    true => (g.below(64), g.below(64)),
                    false => (0, 0),
                };
                if overlap(&r.block(ja, sa, a).unwrap(), &r.block(jb, sb, b).unwrap()) {
                    met += 1;
                }
            }
            let p = ideal(&r, a, b);
            let want = p * f64::from(pairs);
            let sigma = (want * (1.0 - p)).sqrt();
            let seen = f64::from(met) / f64::from(pairs);
            eprintln!(
                "{a} and {b} ports, {}: {met} of {pairs} pairs met ({:.3} %), ideal {:.3} % (1 in {:.0})",
                if any_step { "steps 0-63" } else { "steps 0" },
                seen * 100.0,
                p * 100.0,
                1.0 / p
            );
            assert!(
                (f64::from(met) - want).abs() <= 4.0 * sigma,
                "{a} and {b} ports (any step {any_step}): {met} of {pairs} pairs met, ideal {want:.0} ± {sigma:.0}"
            );
        }
    }

    /// No period shorter than the blocks: for every step size, jobs J and
    /// J + p take different blocks for every p below the count of blocks
    /// (step ids alike), from several starting ids.
    #[test]
    fn no_job_id_period_shorter_than_the_blocks() {
        for range in [DEFAULT_RANGE, PortRange::parse("30000-30063").unwrap()] {
            let slots = range.slots();
            for n in [1, 4, 5, 8, 29, 32, 33, 64] {
                if n > slots * SLOT {
                    continue;
                }
                let blocks = slots / n.div_ceil(SLOT);
                for base in [0u32, 1_000_003, 4_000_000_000] {
                    for step in [0, 5] {
                        let first = range.block(base, step, n).unwrap();
                        for p in 1..blocks {
                            assert_ne!(
                                range.block(base + p, step, n).unwrap(),
                                first,
                                "{range:?}, {n} ports: jobs {base} and {base} + {p}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// Every block is taken: over as many consecutive job ids as there are
    /// blocks, each block once (the walk covers the whole range).
    #[test]
    fn job_ids_walk_every_block() {
        let r = DEFAULT_RANGE;
        for n in [4u32, 32, 64] {
            let blocks = r.slots() / n.div_ceil(SLOT);
            let starts: std::collections::HashSet<u16> = (0..blocks)
                .map(|j| r.block(777 + j, 3, n).unwrap()[0])
                .collect();
            assert_eq!(starts.len() as u32, blocks, "{n} ports");
        }
    }
}
