//! The step's job as slurmctld records it: the one source of the jobs a
//! requeue or a kill names. slurmstepd sends those as root, and srun is the
//! user's own program (a preloaded library or a rebuilt srun sets any
//! variable it likes in the environment slurmstepd receives), so what such
//! an action targets is read here from Slurm's items and slurmctld, never
//! from an environment: the step's own job (slurmstepd's item) and, in a
//! heterogeneous job, its leader as slurmctld holds it (`het_job_id`), both
//! of the step's own user. [`Targets`] can only be made here.

use super::super::bindings as sys;
use super::super::handle::Spank;
use super::api;
use crate::core::het;
use crate::core::{Error, Result};

/// slurm.h's job states (enum job_states and the state flags, macros
/// bindgen cannot read), the same from 22.05 to 26.05.
const JOB_STATE_BASE: u32 = 0xff;
const JOB_RUNNING: u32 = 1;
const JOB_REQUEUE: u32 = 1 << 10;
const JOB_REQUEUE_HOLD: u32 = 1 << 11;
const JOB_SPECIAL_EXIT: u32 = 1 << 12;
const JOB_COMPLETING: u32 = 1 << 15;
const JOB_REQUEUE_FED: u32 = 1 << 20;

/// What slurmctld's record says of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobRecord {
    /// Running, neither being requeued nor completing.
    pub running: bool,
    /// Slurm's count of the job's restarts.
    pub restarts: u32,
    /// The job's user.
    user: u32,
    /// `het_job_id`: the heterogeneous job's leader (0 for a plain job).
    het_job_id: u32,
}

/// Frees the response whatever happens while it is read.
struct Owned(*mut sys::job_info_msg_t);

impl Drop for Owned {
    fn drop(&mut self) {
        // SAFETY: a response slurm_load_job filled, freed once.
        unsafe { sys::slurm_free_job_info_msg(self.0) }
    }
}

/// Job `job` as slurmctld records it (one RPC, bounded by MessageTimeout).
pub fn load(job: u32) -> Result<JobRecord> {
    with_job(job, |j| {
        Ok(JobRecord {
            running: is_running(j.job_state),
            restarts: u32::from(j.restart_cnt),
            user: j.user_id,
            het_job_id: j.het_job_id,
        })
    })
}

/// `read` of slurmctld's record of job `job` (one RPC, bounded by
/// MessageTimeout), the response freed whatever `read` does.
pub fn with_job<T>(job: u32, read: impl FnOnce(&sys::slurm_job_info_t) -> Result<T>) -> Result<T> {
    let mut resp: *mut sys::job_info_msg_t = std::ptr::null_mut();
    #[cfg(not(slurm_load_job_by_id))]
    // SAFETY: `resp` is written with NULL or a response we own.
    let rc = unsafe { sys::slurm_load_job(&mut resp, job, 0) };
    // 26.05 on: the job named by a step id (the whole job: no step).
    #[cfg(slurm_load_job_by_id)]
    // SAFETY: a valid step id; `resp` is written with NULL or a response we
    // own.
    let rc = unsafe { sys::slurm_load_job(&mut resp, api::step_id(job, sys::NO_VAL), 0) };
    let what = || format!("slurmctld gave no record of job {job}");
    api::check(rc, what)?;
    let resp = Owned(api::non_null(resp, what)?.as_ptr());
    // SAFETY: non-NULL, filled by Slurm: record_count records.
    let r = unsafe { &*resp.0 };
    let jobs = match r.job_array.is_null() {
        true => &[][..],
        // SAFETY: job_array holds record_count records.
        false => unsafe { std::slice::from_raw_parts(r.job_array, r.record_count as usize) },
    };
    match jobs.iter().find(|j| j.job_id == job) {
        Some(j) => read(j),
        None => Err(Error::new(format!("slurmctld has no job {job}"))),
    }
}

/// Running, with no requeue or completion under way.
fn is_running(state: u32) -> bool {
    let busy = JOB_REQUEUE | JOB_REQUEUE_HOLD | JOB_SPECIAL_EXIT | JOB_COMPLETING | JOB_REQUEUE_FED;
    state & JOB_STATE_BASE == JOB_RUNNING && state & busy == 0
}

/// The jobs an action on a step may name: the step's own job and, in a
/// heterogeneous job, its leader, as slurmctld records them, both the
/// step's user's. Made only from slurmctld's record ([`Targets::of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Targets {
    job: u32,
    leader: Option<u32>,
}

impl Targets {
    /// This step's: its job and user from Slurm's SPANK items (slurmstepd's
    /// own, in srun the job srun launches), the leader from slurmctld.
    pub fn of_step(spank: &Spank) -> Result<Targets> {
        Targets::with_record(spank).map(|(targets, _)| targets)
    }

    /// [`Targets::of_step`] with slurmctld's record of the step's own job,
    /// which the requeue reads too (one RPC for both).
    pub fn with_record(spank: &Spank) -> Result<(Targets, JobRecord)> {
        let (job, uid) = (spank.job_id()?, spank.job_uid()?);
        let record = load(job)?;
        Ok((Targets::from_record(job, uid, &record)?, record))
    }

    /// Job `job` of user `uid`: one RPC.
    pub fn of(job: u32, uid: u32) -> Result<Targets> {
        Targets::from_record(job, uid, &load(job)?)
    }

    /// Whether the job as a whole is the step's own (no other leader).
    pub fn is_own(&self) -> bool {
        self.leader.is_none()
    }

    /// slurmctld's record of `job` made targets, when it is `uid`'s.
    fn from_record(job: u32, uid: u32, record: &JobRecord) -> Result<Targets> {
        if record.user != uid {
            return Err(Error::new(format!(
                "slurmctld records job {job} as user {}'s, not the step's user {uid}'s: nothing is sent",
                record.user
            )));
        }
        let leader = het::leader(job, record.het_job_id);
        Ok(Targets { job, leader })
    }

    /// The job as a whole: the leader of a heterogeneous job (what a
    /// requeue names), else the step's own.
    pub fn whole(&self) -> u32 {
        self.leader.unwrap_or(self.job)
    }

    /// Every job whose step of this id is ended: the leader's, then this
    /// component's.
    pub fn jobs(self) -> impl Iterator<Item = u32> {
        self.leader.into_iter().chain([self.job])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(user: u32, het_job_id: u32) -> JobRecord {
        JobRecord {
            running: true,
            restarts: 0,
            user,
            het_job_id,
        }
    }

    /// slurm.h's values of the states read here.
    #[test]
    fn a_job_is_running_only_with_no_requeue_or_completion_under_way() {
        assert!(is_running(JOB_RUNNING));
        assert!(!is_running(0)); // pending: requeued already
        assert!(!is_running(JOB_RUNNING | JOB_COMPLETING));
        assert!(!is_running(JOB_RUNNING | JOB_REQUEUE));
        assert!(!is_running(JOB_COMPLETING | JOB_REQUEUE));
        assert!(!is_running(5)); // failed
        assert_eq!(sys::job_states_JOB_RUNNING, JOB_RUNNING);
    }

    /// A plain job names itself; a component its recorded leader first; a
    /// job slurmctld records as another user's names nothing.
    #[test]
    fn targets_are_the_jobs_slurmctld_records_for_the_steps_user() {
        let plain = Targets::from_record(30, 1000, &record(1000, 0)).unwrap();
        assert_eq!(
            (plain.whole(), plain.jobs().collect::<Vec<_>>()),
            (30, vec![30])
        );
        let leader = Targets::from_record(28, 1000, &record(1000, 28)).unwrap();
        assert_eq!(leader.jobs().collect::<Vec<_>>(), [28]);
        let component = Targets::from_record(30, 1000, &record(1000, 28)).unwrap();
        assert_eq!(component.whole(), 28);
        assert_eq!(component.jobs().collect::<Vec<_>>(), [28, 30]);
        let theirs = Targets::from_record(30, 1000, &record(1001, 0)).unwrap_err();
        assert!(theirs.message().contains("user 1001's"), "{theirs:?}");
    }
}
