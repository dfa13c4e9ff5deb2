#![no_main]
//! The whole core from an arbitrary task environment and settings: never
//! panics; what it accepts is a TF_CONFIG TensorFlow can parse, naming this
//! task, and small enough for one environment variable.

use libfuzzer_sys::fuzz_target;
use tf_cluster_core::Given;
use tf_cluster_core::{Settings, Step, resolve};

/// Lines of the input are the values of these variables, in order; an empty
/// line leaves a variable unset. The last lines are settings.
const VARS: [&str; 14] = [
    "SLURM_PROCID",
    "SLURM_STEP_NUM_TASKS",
    "SLURM_STEP_NODELIST",
    "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_DISTRIBUTION",
    "SLURM_DIST_PLANESIZE",
    "SLURM_NODEID",
    "SLURM_GTIDS",
    "SLURM_STEP_RESV_PORTS",
    "CUDA_VISIBLE_DEVICES",
    "SLURMD_TRES_BIND",
    "SLURM_HET_SIZE",
    "SLURM_JOB_NODELIST_HET_GROUP_0",
    "SLURM_HOSTFILE",
];

/// The task's facts from the input's lines: the variables, a GPU count, and
/// the line after the settings' spec as the text of SLURM_HOSTFILE.
fn given(lines: &[&str]) -> Given {
    let vars = VARS.iter().zip(lines).filter(|(_, v)| !v.is_empty());
    let mut given = Given::vars(vars.map(|(k, v)| (*k, *v))).gpus(lines.len() as u32 % 9);
    if let Some(path) = lines.get(VARS.len() - 1).filter(|p| !p.is_empty()) {
        let text = lines.get(VARS.len() + 1).unwrap_or(&"").replace(';', "\n");
        given.files.push((path.to_string(), text));
    }
    given
}

fuzz_target!(|text: &str| {
    let lines: Vec<&str> = text.split('\n').collect();
    let mut settings = Settings::default();
    if let Some(spec) = lines.get(VARS.len()) {
        let Ok(roles) = tf_cluster_core::roles::RoleSpec::parse(spec) else { return };
        settings.roles = roles;
    }
    for kv in lines.iter().skip(VARS.len() + 2) {
        if let Some((k, v)) = kv.split_once('=') {
            if settings.set(k, v).is_err() {
                return;
            }
        }
    }
    let Ok(step) = Step::gather(&settings, &mut given(&lines)).and_then(|g| g.step()) else { return };
    let Ok(injection) = resolve(&settings, &step) else { return };
    let tf: serde_json::Value = serde_json::from_str(injection.get("TF_CONFIG").unwrap()).expect("TF_CONFIG is JSON");
    let (kind, index) = (tf["task"]["type"].as_str().unwrap(), tf["task"]["index"].as_u64().unwrap());
    assert!(tf["cluster"][kind].as_array().unwrap().len() as u64 > index);
    assert!(injection.get("TF_CONFIG").unwrap().len() + "TF_CONFIG=".len() < 131_072);
});
