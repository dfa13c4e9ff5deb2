//! The run's id every framework names: job, step and the job's restart
//! count, which srun reads from Slurm and hands to the tasks.

use crate::settings::Settings;
use crate::test_support::{given, launcher, launcher_word, resolve_vars, torch};

/// A requeued job (its second incarnation, restart count 1) starts its
/// step ids at 0 again: every id the plugin writes carries the count, in
/// either rendezvous and for every framework; the first incarnation's ids
/// stay JOB.STEP.
#[test]
fn ids_carry_the_jobs_restart_count() {
    // srun's hand-off carries the count to the tasks.
    let restarted = |procid: &str, node: &str, k: u32| {
        let mut vars = launcher(procid, node, &[]);
        for (name, value) in &mut vars {
            if *name == "SLURM_TF_CLUSTER" {
                *value = launcher_word(k);
            }
        }
        vars
    };
    for value in ["", "elastic"] {
        let settings = torch(value);
        let task = resolve_vars(&settings, restarted("1", "node1", 1)).unwrap();
        assert_eq!(task.get("PET_RDZV_ID"), Some("4242.7.r1"), "{value:?}");
        assert_eq!(
            task.get("TF_CLUSTER_RUN_ID"),
            Some("4242.7.r1"),
            "{value:?}"
        );
        let task = resolve_vars(&settings, restarted("1", "node1", 12)).unwrap();
        assert_eq!(task.get("PET_RDZV_ID"), Some("4242.7.r12"), "{value:?}");
    }
    let tf = Settings::default();
    let task = resolve_vars(&tf, restarted("2", "node2", 3)).unwrap();
    assert!(task.get("TF_CONFIG").is_some());
    assert_eq!(task.get("TF_CLUSTER_RUN_ID"), Some("4242.7.r3"));
    assert_eq!(task.get("PET_RDZV_ID"), None);
    // No ids known (the CLI's preview outside a job): no run id.
    let mut anonymous = launcher("1", "node2", &[]);
    anonymous.retain(|(n, _)| !matches!(*n, "SLURM_JOB_ID" | "SLURM_STEP_ID" | "SLURM_TF_CLUSTER"));
    let task = resolve_vars(&tf, anonymous).unwrap();
    assert_eq!(task.get("TF_CLUSTER_RUN_ID"), None);
}

/// srun reads the restart count from its environment's SLURM_RESTART_COUNT
/// (absent before the first requeue).
#[test]
fn the_restart_count_is_slurms_variable() {
    let count = |vars: &[(&'static str, &str)]| {
        let vars = vars.iter().map(|(k, v)| (*k, v.to_string())).collect();
        crate::step::restart_count(&mut given(vars))
    };
    assert_eq!(count(&[]).unwrap(), 0);
    assert_eq!(count(&[("SLURM_RESTART_COUNT", "2")]).unwrap(), 2);
    let e = count(&[("SLURM_RESTART_COUNT", "-1")]).unwrap_err();
    assert_eq!(e.to_string(), "SLURM_RESTART_COUNT is \"-1\", not a number");
}
