//! srun's lookups of the host template's names: a few at once in threads,
//! all of them within one deadline, the wait ended by Ctrl-C. The only
//! threads of the core, run in srun only (slurmstepd never resolves a name).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result, bail};

/// Most host-template lookups srun runs at once.
pub const MAX_PARALLEL_LOOKUPS: usize = 32;

/// The time all of a step's host-template lookups together may take in
/// srun: past it the step is refused in one line naming it.
pub const LOOKUP_DEADLINE: Duration = Duration::from_secs(10);

/// A name lookup (the system's resolver in srun, a stand-in in tests).
pub type Resolver = Arc<dyn Fn(&str) -> Result<Vec<IpAddr>> + Send + Sync>;

/// How srun looks the template's names up: the resolver, the deadline for
/// all of them, how many at once, and whether the user interrupted srun.
pub struct Lookups {
    pub resolve: Resolver,
    pub deadline: Duration,
    pub parallel: usize,
    pub interrupted: Box<dyn Fn() -> bool>,
}

impl Lookups {
    /// srun's: `resolve`, [`LOOKUP_DEADLINE`], [`MAX_PARALLEL_LOOKUPS`].
    pub fn new(resolve: Resolver) -> Lookups {
        Lookups {
            resolve,
            deadline: LOOKUP_DEADLINE,
            parallel: MAX_PARALLEL_LOOKUPS,
            interrupted: Box::new(|| false),
        }
    }
}

/// How often the waiting thread checks for an interrupt.
const POLL: Duration = Duration::from_millis(50);

/// The addresses of each of `names`, in order: at most `lookups.parallel`
/// lookups at once in worker threads, all of them within `lookups.deadline`,
/// the wait ended early by an interrupt. A lookup cannot be cancelled
/// (getaddrinfo): one still running when srun gives up is left behind, its
/// thread detached, and its answer dropped.
pub fn resolve_all(names: &[String], lookups: &Lookups) -> Result<Vec<Vec<IpAddr>>> {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc;
    let start = std::time::Instant::now();
    let queue = Arc::new(Mutex::new(
        names
            .iter()
            .cloned()
            .enumerate()
            .collect::<Vec<_>>()
            .into_iter(),
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let (send, answers) = mpsc::channel::<(usize, Result<Vec<IpAddr>>)>();
    let workers = lookups.parallel.clamp(1, names.len().max(1));
    let mut started = 0;
    for _ in 0..workers {
        let (queue, stop, send, resolve) = (
            queue.clone(),
            stop.clone(),
            send.clone(),
            lookups.resolve.clone(),
        );
        let spawned = std::thread::Builder::new()
            .name("tf-cluster-lookup".into())
            .stack_size(256 << 10)
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let next = queue.lock().unwrap_or_else(|e| e.into_inner()).next();
                    let Some((i, name)) = next else { break };
                    if send.send((i, resolve(&name))).is_err() {
                        break;
                    }
                }
            });
        if spawned.is_ok() {
            started += 1;
        }
    }
    drop(send);
    if started == 0 && !names.is_empty() {
        bail!("cannot start a thread to look the host template's names up");
    }
    let mut found: Vec<Option<Vec<IpAddr>>> = vec![None; names.len()];
    let mut left = names.len();
    let give_up = |why: String| -> Result<Vec<Vec<IpAddr>>> {
        stop.store(true, Ordering::Relaxed);
        Err(Error::new(why))
    };
    while left > 0 {
        if (lookups.interrupted)() {
            stop.store(true, Ordering::Relaxed);
            return Err(Error::interrupted(format!(
                "interrupted while looking up the host template's names ({} of {} answered)",
                names.len() - left,
                names.len()
            )));
        }
        let Some(remaining) = lookups.deadline.checked_sub(start.elapsed()) else {
            return give_up(format!(
                "the host template's names did not all resolve within {:?} ({} of {} answered; srun waits at most that long for all of them)",
                lookups.deadline,
                names.len() - left,
                names.len()
            ));
        };
        match answers.recv_timeout(remaining.min(POLL)) {
            Ok((i, Ok(addrs))) => {
                found[i] = Some(addrs);
                left -= 1;
            }
            Ok((_, Err(e))) => return give_up(e.to_string()),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return give_up("a host-template lookup ended without an answer".into());
            }
        }
    }
    Ok(found.into_iter().map(Option::unwrap_or_default).collect())
}
