//! Every task distribution Slurm makes, on the real testbed: the expected
//! TF_CONFIG comes from where Slurm really ran each rank.

use crate::common;

use std::collections::BTreeMap;
use std::process::{Command, Output};

use common::outputs::Outputs;
use common::{PROBE, Run, exec, parse_run, repo, reserved_ports, srun, srun_env, testbed};

/// `run` ran the six tasks of `roles` with their TF_CONFIG, and ranks 0-3
/// alternate over the nodes, as `-m cyclic` lays them.
fn assert_cyclic(run: &Run, roles: &[(&str, u32)]) {
    run.assert_ran(6).assert_tf_config(roles, 8888);
    let h = run.hosts();
    assert!(
        h[0] != h[1] && h[1] != h[2] && h[0] == h[3],
        "not cyclic: {h:?}"
    );
}

/// `-m cyclic`: ranks alternate over the nodes.
#[test]
fn cyclic() {
    let _t = testbed();
    let run = srun(&[
        "-N3",
        "-n6",
        "--ntasks-per-node=2",
        "-m",
        "cyclic",
        "--tf-cluster=ps:1,worker:5",
    ]);
    assert_cyclic(&run, &[("ps", 1), ("worker", 5)]);
}

/// `-m plane=2`: blocks of two ranks per node per round.
#[test]
fn plane_two() {
    let _t = testbed();
    let run = srun(&[
        "-N2",
        "-n6",
        "--ntasks-per-node=3",
        "-m",
        "plane=2",
        "--tf-cluster",
    ]);
    run.assert_workers(6);
    let h = run.hosts();
    assert!(
        h[0] == h[1] && h[1] != h[2] && h[2] == h[3] && h[4] == h[0],
        "not plane=2: {h:?}"
    );
}

/// Uneven counts per node (`-n5` on 3 nodes).
#[test]
fn uneven_tasks() {
    let _t = testbed();
    let run = srun(&["-N3", "-n5", "-m", "cyclic", "--tf-cluster=worker:5"]);
    run.assert_workers(5);
}

/// A heterogeneous step: ranks are global across components and roles span
/// them; ps on the first component's node.
#[test]
fn heterogeneous_step() {
    let _t = testbed();
    let run = srun(&[
        "-n1",
        "-w",
        "node3",
        ":",
        "-N2",
        "-n3",
        "-w",
        "node1,node2",
        "--tf-cluster=ps:1,worker:3",
    ]);
    run.assert_ran(4)
        .assert_tf_config(&[("ps", 1), ("worker", 3)], 8888);
    assert_eq!(
        run.tasks[0].host, "node3",
        "rank 0 is the first component's"
    );
}

/// `-m arbitrary` with SLURM_HOSTFILE: the layout is the file's (comments
/// skipped), whether the nodes can read the file (the shared /home) or it
/// exists only where srun runs: srun's map carries the layout, no node reads
/// the file.
#[test]
fn arbitrary_from_a_host_file() {
    let _t = testbed();
    for (file, text, hosts) in [
        (
            "/home/alice/hostfile-layout-test",
            "node2\\nnode1\\n# a comment\\nnode2\\nnode3\\n",
            ["node2", "node1", "node2", "node3"],
        ),
        (
            "/tmp/hostfile-only-on-the-submit-host",
            "node3\\nnode1\\nnode3\\nnode2\\n",
            ["node3", "node1", "node3", "node2"],
        ),
    ] {
        let made = exec(&["bash", "-c", &format!("printf '{text}' > {file}")]);
        assert!(made.status.success(), "{made:?}");
        if file.starts_with("/tmp/") {
            for node in ["node1", "node2", "node3"] {
                let seen = Command::new(repo().join("docker/testbed.sh"))
                    .args(["node-exec", node, "test", "-e", file])
                    .status()
                    .unwrap();
                assert_eq!(seen.code(), Some(1), "{file} must not exist on {node}");
            }
        }
        let var = format!("SLURM_HOSTFILE={file}");
        let run = srun_env(
            &[&var],
            &["-n4", "-m", "arbitrary", "--tf-cluster=chief:1,worker:3"],
        );
        run.assert_ran(4)
            .assert_tf_config(&[("chief", 1), ("worker", 3)], 8888);
        assert_eq!(run.hosts(), hosts);
    }
}

/// `bash -c SCRIPT` in an allocation of all three nodes, as alice; the
/// probe is in a file of the shared /home so nested quoting stays simple.
/// Every srun there puts each task's output in a file of its own in
/// `outputs` (SLURM_STDOUTMODE), unless the script gives its own.
fn in_allocation(outputs: &Outputs, vars: &[&str], script: &str) -> Output {
    let probe = exec(&[
        "bash",
        "-c",
        &format!("cat > probe.sh <<'EOF'\n{PROBE}\nEOF"),
    ]);
    assert!(probe.status.success(), "{probe:?}");
    let env = outputs.env();
    let mut cmd = vec!["env"];
    cmd.extend(env.iter().map(String::as_str));
    cmd.extend_from_slice(vars);
    cmd.extend_from_slice(&["salloc", "-N3", "-n6", "bash", "-c", script]);
    exec(&cmd)
}

/// The probe's tasks of `stdout`, with the step's exit code and messages.
fn tasks_of(stdout: String, out: &Output) -> Run {
    parse_run(Output {
        status: out.status,
        stdout: stdout.into_bytes(),
        stderr: out.stderr.clone(),
    })
}

/// A `--tf-cluster` srun inside a `--tf-cluster` step: the inner step's tasks
/// inherit the outer step's map and spec, and still get their own step's
/// layout (cyclic here, where the outer map would say otherwise).
#[test]
fn nested_srun_inside_an_allocation_step() {
    let _t = testbed();
    let outputs = Outputs::new("nested");
    let out = in_allocation(
        &outputs,
        &[],
        "srun --overlap -N1 -n1 -w node1 --tf-cluster=chief:1 bash -c \
         'srun --overlap -N3 -n6 -m cyclic --tf-cluster=chief:1,worker:5 bash probe.sh'",
    );
    // The outer step's task printed nothing of its own; the inner step's
    // tasks, each in its file, the probe.
    let steps = outputs.steps_stdout();
    assert_eq!(
        steps.len(),
        2,
        "the outer and the inner step:\n{}",
        outputs.dump()
    );
    assert!(steps[0].is_empty(), "{}", outputs.dump());
    let run = tasks_of(steps[1].clone(), &out);
    // Slurm's cyclic order depends on the CPUs the outer step holds: the
    // check is that TF_CONFIG is the inner step's real layout.
    run.assert_ran(6)
        .assert_tf_config(&[("chief", 1), ("worker", 5)], 8888);
    let mut hosts = run.hosts();
    hosts.dedup();
    assert!(
        hosts.len() >= 3,
        "the inner step spans the allocation: {hosts:?}"
    );
}

/// Two `--tf-cluster` steps at once in one allocation, laid out differently:
/// each step's tasks get their own step's layout.
#[test]
fn two_steps_at_once_in_one_allocation() {
    let _t = testbed();
    let (job, cyclic, block) = (
        Outputs::new("two-steps"),
        Outputs::new("cyclic"),
        Outputs::new("block"),
    );
    let (c, b) = (
        format!("C={}", cyclic.path()),
        format!("B={}", block.path()),
    );
    let out = in_allocation(
        &job,
        &[&c, &b],
        "srun --overlap -n6 -m cyclic --tf-cluster=ps:1,worker:5 --output=$C/%j.%s.%t.out bash probe.sh &
         srun --overlap -n6 -m block --tf-cluster=ps:2,worker:4 --output=$B/%j.%s.%t.out bash probe.sh &
         wait",
    );
    let (cyclic, block) = (
        tasks_of(cyclic.stdout(), &out),
        tasks_of(block.stdout(), &out),
    );
    cyclic
        .assert_ran(6)
        .assert_tf_config(&[("ps", 1), ("worker", 5)], 8888);
    block
        .assert_ran(6)
        .assert_tf_config(&[("ps", 2), ("worker", 4)], 8888);
}

/// `--torch-cluster --jax-cluster` with fast-network names: every task's
/// variables follow from where Slurm really ran each rank (SLURM_PROCID,
/// hostname, SLURM_LOCALID), on an uneven cyclic layout, and the `-ib`
/// names resolve on the nodes.
#[test]
fn torch_and_jax_variables_follow_the_real_layout() {
    let _t = testbed();
    let names = [
        "SLURM_PROCID",
        "SLURM_LOCALID",
        "SLURM_STEP_RESV_PORTS",
        "MASTER_ADDR",
        "MASTER_PORT",
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "GROUP_WORLD_SIZE",
        "JAX_COORDINATOR_ADDRESS",
        "TF_CONFIG",
        "TORCHELASTIC_RUN_ID",
    ];
    let probe = format!(
        "printf 'VARS\\thost=%s' \"$(hostname)\"; for v in {}; do printf '\\t%s=%s' $v \"${{!v-<unset>}}\"; done; \
         getent hosts \"$MASTER_ADDR\" >/dev/null && printf '\\tresolves=yes'; echo",
        names.join(" ")
    );
    let out = exec(&[
        "srun",
        "-N3",
        "-n5",
        "-m",
        "cyclic",
        "--resv-ports=2",
        "--torch-cluster",
        "--jax-cluster",
        "--tf-host-template={}-ib",
        "bash",
        "-c",
        &probe,
    ]);
    assert!(out.status.success(), "{out:?}");
    let tasks: Vec<BTreeMap<&str, &str>> = std::str::from_utf8(&out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("VARS\t"))
        .map(|l| l.split('\t').filter_map(|kv| kv.split_once('=')).collect())
        .collect();
    assert_eq!(tasks.len(), 5, "{out:?}");
    let by_rank = |r: usize| {
        tasks
            .iter()
            .find(|t| t["SLURM_PROCID"] == r.to_string())
            .unwrap()
    };
    let host0 = by_rank(0)["host"];
    // Nodes in the order of their first rank: PyTorch's group ranks.
    let mut order: Vec<&str> = Vec::new();
    for r in 0..5 {
        let h = by_rank(r)["host"];
        if !order.contains(&h) {
            order.push(h);
        }
    }
    for t in &tasks {
        let ports = reserved_ports(t["SLURM_STEP_RESV_PORTS"]);
        let on_host = tasks.iter().filter(|o| o["host"] == t["host"]).count();
        assert_eq!(t["MASTER_ADDR"], format!("{host0}-ib"), "{t:?}");
        assert_eq!(t["resolves"], "yes", "{t:?}");
        assert_eq!(t["MASTER_PORT"], ports[0].to_string(), "{t:?}");
        assert_eq!(
            t["JAX_COORDINATOR_ADDRESS"],
            format!("{host0}-ib:{}", ports[1]),
            "{t:?}"
        );
        assert_eq!(t["RANK"], t["SLURM_PROCID"]);
        assert_eq!(t["WORLD_SIZE"], "5");
        assert_eq!(t["LOCAL_RANK"], t["SLURM_LOCALID"]);
        assert_eq!(t["LOCAL_WORLD_SIZE"], on_host.to_string(), "{t:?}");
        let group = order.iter().position(|h| *h == t["host"]).unwrap();
        assert_eq!(t["GROUP_RANK"], group.to_string(), "{t:?}");
        assert_eq!(t["GROUP_WORLD_SIZE"], "3");
        assert_eq!(t["TF_CONFIG"], "<unset>", "only the frameworks asked for");
        assert_eq!(t["TORCHELASTIC_RUN_ID"], "<unset>");
    }
    let counts: Vec<usize> = order
        .iter()
        .map(|h| tasks.iter().filter(|t| t["host"] == *h).count())
        .collect();
    assert!(
        counts.iter().min() < counts.iter().max(),
        "an uneven layout: {counts:?}"
    );
}
