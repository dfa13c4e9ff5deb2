//! srun's lookups of the host template's names: a few at once in threads,
//! all of them within one deadline, the wait ended by Ctrl-C. The only
//! threads of the core, run in srun only (slurmstepd never resolves a name).

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

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
    let start = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let (started, answers) = start_workers(names, lookups, &stop);
    if started == 0 && !names.is_empty() {
        bail!("cannot start a thread to look the host template's names up");
    }
    let found = wait_for_answers(names.len(), lookups, start, &answers);
    if found.is_err() {
        // The workers still running take no further name.
        stop.store(true, Ordering::Relaxed);
    }
    found
}

/// One name's answer, with the name's index in the caller's list.
type Answer = (usize, Result<Vec<IpAddr>>);

/// Starts up to `lookups.parallel` worker threads (at most one per name)
/// that take names from one queue until it is empty or `stop` is set,
/// sending each answer; how many started, and where the answers come.
fn start_workers(
    names: &[String],
    lookups: &Lookups,
    stop: &Arc<AtomicBool>,
) -> (usize, mpsc::Receiver<Answer>) {
    let queue = Arc::new(Mutex::new(
        names
            .iter()
            .cloned()
            .enumerate()
            .collect::<Vec<_>>()
            .into_iter(),
    ));
    let (send, answers) = mpsc::channel::<Answer>();
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
    (started, answers)
}

/// The `count` names' addresses, in order, as the workers answer: the
/// first failed lookup, the deadline (counted from `start`) or an
/// interrupt ends the wait with an error.
fn wait_for_answers(
    count: usize,
    lookups: &Lookups,
    start: Instant,
    answers: &mpsc::Receiver<Answer>,
) -> Result<Vec<Vec<IpAddr>>> {
    let mut found: Vec<Option<Vec<IpAddr>>> = vec![None; count];
    let mut left = count;
    while left > 0 {
        if (lookups.interrupted)() {
            return Err(Error::interrupted(format!(
                "interrupted while looking up the host template's names ({} of {} answered)",
                count - left,
                count
            )));
        }
        let Some(remaining) = lookups.deadline.checked_sub(start.elapsed()) else {
            return Err(Error::new(format!(
                "the host template's names did not all resolve within {:?} ({} of {} answered; srun waits at most that long for all of them)",
                lookups.deadline,
                count - left,
                count
            )));
        };
        match answers.recv_timeout(remaining.min(POLL)) {
            Ok((i, Ok(addrs))) => {
                found[i] = Some(addrs);
                left -= 1;
            }
            Ok((_, Err(e))) => return Err(Error::new(e.to_string())),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(Error::new("a host-template lookup ended without an answer"));
            }
        }
    }
    Ok(found.into_iter().map(Option::unwrap_or_default).collect())
}
