//! Ports: the step's ports on each node, by index (TensorFlow's local task k
//! takes the k-th, PyTorch's and JAX's rendezvous the next ones), the same
//! on every node of the step. In order of precedence:
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
    /// m = ⌈n ÷ [`SLOT`]⌉ slots: the range is cut into ⌊slots ÷ m⌋ blocks of
    /// m slots, and the step takes block (job × [`STEPS`] + step mod
    /// [`STEPS`]) mod that count, its ports consecutive from the block's
    /// start (never wrapping). With m = 1 (up to 4 ports, every step but a
    /// large TensorFlow one or Ray's) the block is the slot. Two steps of the
    /// same m therefore meet only if their job ids differ by
    /// ⌊slots ÷ m⌋ ÷ [`STEPS`] or more (and their step ids agree modulo
    /// [`STEPS`]): a large step never spills into the slots of its own job's
    /// next steps or of the next jobs, as it would if it ran on from its slot.
    /// Steps of unrelated jobs meet by chance, about (a + b − 1) ÷ slots for
    /// steps of a and b slots.
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
        let index = (u64::from(job) * u64::from(STEPS) + u64::from(step % STEPS)) % blocks;
        let start = u32::from(self.first) + index as u32 * m * SLOT;
        Ok((0..n).map(|k| (start + k) as u16).collect())
    }
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

/// The ports of indices 0..`max_local_tasks` (the tasks of the fullest
/// node, plus one for each framework's rendezvous).
pub fn ports(
    unreserved: Unreserved,
    reserved: Option<&str>,
    max_local_tasks: u32,
) -> Result<Vec<u16>> {
    match (reserved, unreserved) {
        (Some(list), _) => reserved_ports(list, max_local_tasks),
        (None, Unreserved::Block { range, job, step }) => range.block(job, step, max_local_tasks),
        (None, Unreserved::Base(base)) => {
            let last = u64::from(base) + u64::from(max_local_tasks.max(1)) - 1;
            if last > 65535 {
                bail!(
                    "port base {base} + {max_local_tasks} tasks on a node needs port {last}, above 65535"
                );
            }
            Ok((0..max_local_tasks as u16).map(|k| base + k).collect())
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
    /// range) of jobs less than 9 apart never meet (9 × 16 step ids = 144
    /// blocks), stay inside the range, and never run into the next block.
    #[test]
    fn large_steps_take_aligned_blocks() {
        let r = DEFAULT_RANGE;
        let mut seen = std::collections::HashSet::new();
        for job in 1_000_000..1_000_009 {
            for step in 0..STEPS {
                let b = r.block(job, step, 64).unwrap();
                assert_eq!((b[0] - 20000) % 64, 0, "{job}.{step}");
                assert!(b.iter().all(|&p| (20000..=29499).contains(&p)));
                for p in b {
                    assert!(seen.insert(p), "{job}.{step} shares port {p}");
                }
            }
        }
        // A 4-port step keeps its slot: job 7, step 0, slot 112, port 20448.
        assert_eq!(r.block(7, 0, 4).unwrap()[0], 20448);
        // 5 ports: two slots, 1187 blocks; job 7 step 0 block 112: 20896.
        assert_eq!(r.block(7, 0, 5).unwrap()[0], 20896);
    }
}
