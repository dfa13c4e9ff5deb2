//! TensorFlow's cluster as each task's TF_CONFIG shows it.

use crate::node::resolve;
use crate::roles;
use crate::settings::Settings;
use crate::step::Step;
use crate::test_support::given;

/// `chief:1,worker:2,evaluator:1`: the evaluator is the last rank, and no
/// task's cluster names it.
#[test]
fn the_evaluator_runs_beside_the_cluster() {
    let settings = Settings {
        roles: roles::RoleSpec::parse("chief:1,worker:2,evaluator:1").unwrap(),
        ..Settings::default()
    };
    for (rank, task) in [
        ("0", r#"{"type":"chief","index":0}"#),
        ("3", r#"{"type":"evaluator","index":0}"#),
    ] {
        let vars = [
            ("SLURM_PROCID", rank),
            ("SLURM_STEP_NUM_TASKS", "4"),
            ("SLURM_STEP_NODELIST", "n[1-2]"),
            ("SLURM_STEP_TASKS_PER_NODE", "2(x2)"),
        ];
        let vars = vars.into_iter().map(|(k, v)| (k, v.to_string())).collect();
        let step = Step::gather(&settings, &mut given(vars))
            .unwrap()
            .step()
            .unwrap();
        let tf = resolve(&settings, &step).unwrap();
        assert_eq!(
            tf.get("TF_CONFIG").unwrap(),
            format!(
                r#"{{"cluster":{{"chief":["n1:8888"],"worker":["n1:8889","n2:8888"]}},"task":{task}}}"#
            )
        );
    }
}
