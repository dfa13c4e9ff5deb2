//! Slurm's other vendors' variables, sliced and bound by the same rules: a
//! testbed whose gres.conf gives each node another vendor's flag
//! (docker/config/gres/vendors.conf: node1 `amd_gpu_env`, node2
//! `intel_gpu_env`, node3 `nvidia_gpu_env,opencl_env`), on the same fake
//! devices. (The testbed is under main.rs's topology too: one testbed start
//! for both.)

use crate::common;

use std::collections::BTreeMap;

const VARS: [&str; 6] = [
    "CUDA_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "ZE_AFFINITY_MASK",
    "GPU_DEVICE_ORDINAL",
    "LOCAL_RANK",
    "JAX_LOCAL_DEVICE_IDS",
];

/// By local id: the variables of [`VARS`] that are set.
fn run(args: &[&str]) -> (Option<i32>, BTreeMap<u32, BTreeMap<String, String>>, String) {
    let mut probe = String::from(r#"printf 'V\t%s'"#);
    probe.push_str(r#" "$SLURM_LOCALID"; for v in "#);
    probe.push_str(&VARS.join(" "));
    probe.push_str(r#"; do [ -n "${!v+x}" ] && printf '\t%s=%s' "$v" "${!v}"; done; echo"#);
    let mut cmd = vec!["--time=2"];
    cmd.extend_from_slice(args);
    cmd.extend_from_slice(&["bash", "-c", &probe]);
    // Each task's lines from its own file.
    let out = common::srun_tasks(&cmd);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut tasks = BTreeMap::new();
    for line in text.lines().filter_map(|l| l.strip_prefix("V\t")) {
        let mut f = line.split('\t');
        let local: u32 = f.next().unwrap().parse().unwrap();
        let vars = f
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        tasks.insert(local, vars);
    }
    (out.status.code(), tasks, text)
}

fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn every_vendor_variable_by_the_same_rule() {
    let _t = common::testbed_with_tree_and_vendors();
    for (node, names) in [
        ("node1", &["ROCR_VISIBLE_DEVICES"][..]),
        ("node2", &["ZE_AFFINITY_MASK"][..]),
        ("node3", &["CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL"][..]),
    ] {
        let base = ["-N1", "-n2", "-w", node, "--gres=gpu:4"];
        let each = |list: &str| {
            names
                .iter()
                .map(|n| (*n, list.to_string()))
                .collect::<Vec<_>>()
        };
        let with = |list: &str, extra: &[(&'static str, &'static str)]| {
            let mut m: BTreeMap<String, String> = each(list)
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect();
            m.extend(vars(extra));
            m
        };
        // TensorFlow: slices.
        let (code, tasks, text) = run(&[&base[..], &["--tf-cluster"]].concat());
        assert_eq!(code, Some(0), "{text}");
        assert_eq!(tasks[&0], with("0,1", &[]), "{node} tf: {text}");
        assert_eq!(tasks[&1], with("2,3", &[]), "{node} tf: {text}");
        // JAX: slices, ids from 0.
        let (code, tasks, text) = run(&[&base[..], &["--jax-cluster"]].concat());
        assert_eq!(code, Some(0), "{text}");
        assert_eq!(
            tasks[&1],
            with("2,3", &[("JAX_LOCAL_DEVICE_IDS", "0,1")]),
            "{node} jax: {text}"
        );
        // PyTorch with JAX: the whole list, JAX ids k, k+L.
        let (code, tasks, text) = run(&[&base[..], &["--torch-cluster", "--jax-cluster"]].concat());
        assert_eq!(code, Some(0), "{text}");
        assert_eq!(
            tasks[&1],
            with(
                "0,1,2,3",
                &[("LOCAL_RANK", "1"), ("JAX_LOCAL_DEVICE_IDS", "1,3")]
            ),
            "{node} torch+jax: {text}"
        );
        // Slurm's exclusive binding kept for JAX, in the vendor's variable.
        let bound = [
            "-N1",
            "-n2",
            "-w",
            node,
            "--gpus-per-task=1",
            "--jax-cluster",
        ];
        let (code, tasks, text) = run(&bound);
        assert_eq!(code, Some(0), "{text}");
        assert_eq!(
            tasks[&1],
            with("1", &[("JAX_LOCAL_DEVICE_IDS", "0")]),
            "{node} bound: {text}"
        );
    }
}
