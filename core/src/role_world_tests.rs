//! Roles in one step (`--tf-roles`): each task's world in its role, the
//! step-wide world, the address book, each task's own ports and the
//! inference engines' variables, resolved on every node of whole steps.

use std::collections::{HashMap, HashSet};

use crate::frameworks::{Frameworks, Launch, check_before_launch, jax, pytorch, tensorflow};
use crate::node::Node;
use crate::settings::Settings;
use crate::source::Given;
use crate::step::Step;

/// Each task: its rank, its node, its variables.
type Tasks = Vec<(u32, String, HashMap<String, String>)>;

/// Every task of `srun -N3 -n6 -m cyclic --resv-ports …` (ranks 0 and 3 on
/// n1, 1 and 4 on n2, 2 and 5 on n3; ports 12000-12099 reserved), as
/// (rank, node, its variables); `extra`: more of the step's variables,
/// `hosts`: the nodes' /etc/hosts.
fn step_tasks(
    settings: &Settings,
    extra: &[(&str, &str)],
    hosts: &str,
) -> crate::error::Result<Tasks> {
    let mut out = Vec::new();
    for node in ["n1", "n2", "n3"] {
        let mut vars: Vec<(String, String)> = [
            ("SLURM_STEP_NUM_TASKS", "6"),
            ("SLURM_STEP_NODELIST", "n[1-3]"),
            ("SLURM_STEP_TASKS_PER_NODE", "2(x3)"),
            ("SLURM_DISTRIBUTION", "cyclic"),
            ("SLURMD_NODENAME", node),
            ("SLURM_STEP_RESV_PORTS", "12000-12099"),
        ]
        .iter()
        .chain(extra)
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        vars.sort();
        let mut source = Given::vars(vars).gpus(0).etc_hosts(hosts);
        let step = Step::gather(settings, &mut source)?.step()?;
        let prepared = Node::prepare(settings.clone(), step)?;
        for (rank, local) in prepared.here() {
            let injection = prepared.task(rank, Some(local), None)?;
            let vars = injection
                .vars()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect();
            out.push((rank, node.to_string(), vars));
        }
    }
    out.sort_by_key(|(rank, _, _)| *rank);
    Ok(out)
}

fn with_roles(frameworks: Frameworks, roles: &str) -> Settings {
    let mut settings = Settings {
        frameworks,
        ..Settings::default()
    };
    settings.set("roles", roles).unwrap();
    settings
}

fn torch() -> Frameworks {
    Frameworks::only(&pytorch::FRAMEWORK)
}

/// GRPO's shape: 4 trainer ranks, 2 rollout servers. Each role is a world
/// of its own (rank, size, local rank among its own tasks on the node, its
/// first rank's node and a port of its own); the step-wide world is the
/// step's; the address book lists each role's tasks in rank order by their
/// first own port; each task has 4 ports of its own.
#[test]
fn each_role_is_a_world_of_its_own() {
    let settings = with_roles(torch(), "trainer:4,rollout:2");
    let tasks = step_tasks(&settings, &[], "").unwrap();
    // Ports: 12000 PyTorch's own (the step-wide one); 12001 the trainers',
    // 12002 the rollout servers'; then 4 per local task: local 0 takes
    // 12003-12006, local 1 12007-12010.
    let want = [
        // rank, role, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
        // MASTER_ADDR, MASTER_PORT, GROUP_RANK, GROUP_WORLD_SIZE, own ports
        (
            0,
            "trainer",
            "0",
            "4",
            "0",
            "2",
            "n1",
            "12001",
            "0",
            "3",
            "12003,12004,12005,12006",
        ),
        (
            1,
            "trainer",
            "1",
            "4",
            "0",
            "1",
            "n1",
            "12001",
            "1",
            "3",
            "12003,12004,12005,12006",
        ),
        (
            2,
            "trainer",
            "2",
            "4",
            "0",
            "1",
            "n1",
            "12001",
            "2",
            "3",
            "12003,12004,12005,12006",
        ),
        (
            3,
            "trainer",
            "3",
            "4",
            "1",
            "2",
            "n1",
            "12001",
            "0",
            "3",
            "12007,12008,12009,12010",
        ),
        (
            4,
            "rollout",
            "0",
            "2",
            "0",
            "1",
            "n2",
            "12002",
            "0",
            "2",
            "12007,12008,12009,12010",
        ),
        (
            5,
            "rollout",
            "1",
            "2",
            "0",
            "1",
            "n2",
            "12002",
            "1",
            "2",
            "12007,12008,12009,12010",
        ),
    ];
    for ((rank, node, vars), w) in tasks.iter().zip(want) {
        let get = |n: &str| vars.get(n).map(String::as_str).unwrap_or("-");
        let got = (
            *rank,
            get("TF_CLUSTER_ROLE"),
            get("RANK"),
            get("WORLD_SIZE"),
            get("LOCAL_RANK"),
            get("LOCAL_WORLD_SIZE"),
            get("MASTER_ADDR"),
            get("MASTER_PORT"),
            get("GROUP_RANK"),
            get("GROUP_WORLD_SIZE"),
            get("TF_CLUSTER_PORTS"),
        );
        assert_eq!(got, w, "rank {rank} on {node}");
        assert_eq!(get("TF_CLUSTER_STEP_RANK"), rank.to_string());
        assert_eq!(get("TF_CLUSTER_STEP_WORLD_SIZE"), "6");
        assert_eq!(get("TF_CLUSTER_STEP_MASTER_ADDR"), "n1");
        assert_eq!(get("TF_CLUSTER_STEP_MASTER_PORT"), "12000");
        assert_eq!(
            get("TF_CLUSTER_ROLE_TRAINER_ADDRS"),
            "n1:12003,n2:12003,n3:12003,n1:12007"
        );
        assert_eq!(get("TF_CLUSTER_ROLE_ROLLOUT_ADDRS"), "n2:12007,n3:12007");
        // No /etc/hosts line for the node: its name.
        assert_eq!(get("VLLM_HOST_IP"), node);
        assert_eq!(get("SGLANG_HOST_IP"), node);
        assert_eq!(get("VLLM_PORT"), &w.10[6..11]);
        // torchrun's per-launcher arguments follow the role.
        assert_eq!(get("PET_NNODES"), w.3);
        assert_eq!(get("PET_NODE_RANK"), w.2);
    }
}

/// No two tasks of a node share a port, and none is a role's rendezvous
/// port or the step-wide one (with PyTorch and JAX: two per role).
#[test]
fn no_two_tasks_of_a_node_share_a_port() {
    let both = torch().with(&jax::FRAMEWORK);
    for settings in [
        with_roles(torch(), "trainer:4,rollout:2"),
        with_roles(both, "a:1,b:2,c:3"),
    ] {
        let tasks = step_tasks(&settings, &[], "").unwrap();
        let mut rendezvous = HashSet::new();
        for (_, _, vars) in &tasks {
            rendezvous.insert(vars["MASTER_PORT"].clone());
            rendezvous.insert(vars["TF_CLUSTER_STEP_MASTER_PORT"].clone());
            if let Some(c) = vars.get("JAX_COORDINATOR_ADDRESS") {
                rendezvous.insert(c.rsplit(':').next().unwrap().to_string());
            }
        }
        let roles = settings.step_roles.as_ref().unwrap().0.len();
        let per_role = if settings.frameworks.contains(&jax::FRAMEWORK) {
            2
        } else {
            1
        };
        // The step-wide port(s) and each role's own.
        assert!(rendezvous.len() > roles * per_role, "{rendezvous:?}");
        for node in ["n1", "n2", "n3"] {
            let mut seen = HashSet::new();
            for (rank, _, vars) in tasks.iter().filter(|t| t.1 == node) {
                let own: Vec<&str> = vars["TF_CLUSTER_PORTS"].split(',').collect();
                assert_eq!(own.len(), 4);
                for port in own {
                    assert!(
                        seen.insert(port.to_string()),
                        "{node}: rank {rank} shares {port}"
                    );
                    assert!(!rendezvous.contains(port), "{node}: rank {rank}'s {port}");
                }
            }
        }
    }
}

/// JAX alone: each role's coordinator on its first rank's node, on its
/// role's port, and the role's RANK … MASTER_PORT for the process count and
/// id JAX would otherwise take from Slurm's step-wide ones.
#[test]
fn jax_roles_have_their_own_coordinator() {
    let settings = with_roles(Frameworks::only(&jax::FRAMEWORK), "trainer:4,rollout:2");
    let tasks = step_tasks(&settings, &[], "").unwrap();
    let rollout = &tasks[5].2;
    assert_eq!(rollout["JAX_COORDINATOR_ADDRESS"], "n2:12002");
    assert_eq!(rollout["MASTER_ADDR"], "n2");
    assert_eq!(rollout["MASTER_PORT"], "12002");
    assert_eq!(rollout["RANK"], "1");
    assert_eq!(rollout["WORLD_SIZE"], "2");
    assert_eq!(tasks[3].2["JAX_COORDINATOR_ADDRESS"], "n1:12001");
    assert_eq!(tasks[3].2["TF_CLUSTER_STEP_MASTER_PORT"], "12000");
}

/// The engines' variables: the node's address on the step's network (its
/// /etc/hosts line without one), and none the user set.
#[test]
fn engines_get_the_nodes_address_unless_the_user_set_it() {
    let settings = with_roles(torch(), "trainer:4,rollout:2");
    let hosts = "127.0.0.1 localhost\n10.1.0.1 n1\n10.1.0.2 n2\n10.1.0.3 n3\n";
    let tasks = step_tasks(&settings, &[("VLLM_PORT", "9999")], hosts).unwrap();
    assert_eq!(tasks[4].2["VLLM_HOST_IP"], "10.1.0.2");
    assert_eq!(tasks[4].2["SGLANG_HOST_IP"], "10.1.0.2");
    assert!(!tasks[4].2.contains_key("VLLM_PORT"), "{:?}", tasks[4].2);
    let mut settings = settings;
    settings.set("network", "10.98.0.0/16").unwrap();
    let iface = |name: &str, addr: &str| crate::addresses::Interface {
        name: name.into(),
        addrs: vec![addr.parse().unwrap()],
    };
    let mut source = Given::vars([
        ("SLURM_STEP_NUM_TASKS", "2"),
        ("SLURM_STEP_NODELIST", "n1"),
        ("SLURM_STEP_TASKS_PER_NODE", "2"),
        ("SLURMD_NODENAME", "n1"),
        ("SLURM_STEP_RESV_PORTS", "12000-12099"),
    ])
    .gpus(0)
    .interfaces(vec![iface("eth0", "172.18.0.2"), iface("ib0", "10.98.0.7")]);
    settings.set("roles", "a:1,b:1").unwrap();
    let step = Step::gather(&settings, &mut source)
        .unwrap()
        .step()
        .unwrap();
    let node = Node::prepare(settings, step).unwrap();
    let task = node.task(1, Some(1), None).unwrap();
    assert_eq!(task.get("VLLM_HOST_IP"), Some("10.98.0.7"));
    assert_eq!(task.get("TF_CLUSTER_ROLE_B_ADDRS"), Some("n1:12007"));
}

/// `--tf-ports-per-task` alone: each task's own ports, and no roles.
#[test]
fn ports_per_task_without_roles() {
    let mut settings = Settings {
        frameworks: torch(),
        ..Settings::default()
    };
    settings.set("ports-per-task", "2").unwrap();
    let tasks = step_tasks(&settings, &[], "").unwrap();
    assert_eq!(tasks[3].2["TF_CLUSTER_PORTS"], "12003,12004");
    assert_eq!(tasks[3].2["RANK"], "3");
    assert_eq!(tasks[3].2["MASTER_PORT"], "12000");
    assert!(!tasks[3].2.contains_key("TF_CLUSTER_ROLE"));
    assert!(!tasks[3].2.contains_key("VLLM_PORT"));
}

/// What srun refuses before launch, in one line each: roles with
/// TensorFlow, without PyTorch or JAX, with an elastic rendezvous, counts
/// that do not add up to the step, a reservation too small (naming what to
/// ask for); every node refuses the same.
#[test]
fn roles_that_do_not_fit_are_refused() {
    let launch = |tasks, resv| Launch {
        tasks,
        resv_ports: resv,
        most_local: Some(2),
        ..Launch::default()
    };
    let check = |s: &Settings, l: &Launch| check_before_launch(s, l).map_err(|e| e.to_string());
    let tf = with_roles(torch().with(&tensorflow::FRAMEWORK), "a:3,b:3");
    assert!(
        check(&tf, &launch(6, None))
            .unwrap_err()
            .contains("TensorFlow")
    );
    let ray = with_roles(Frameworks::only(&crate::frameworks::ray::FRAMEWORK), "a:1");
    let one = Launch {
        most_local: Some(1),
        ..launch(1, None)
    };
    assert_eq!(
        check(&ray, &one).unwrap_err(),
        "--tf-roles=a:1 needs --torch-cluster or --jax-cluster"
    );
    let mut elastic = with_roles(torch(), "a:1,b:1");
    elastic.torch = pytorch::Rendezvous::Elastic {
        min: None,
        max_restarts: 3,
    };
    assert!(
        check(&elastic, &launch(2, None))
            .unwrap_err()
            .contains("elastic")
    );
    let grpo = with_roles(torch(), "trainer:4,rollout:2");
    assert_eq!(
        check(&grpo, &launch(7, None)).unwrap_err(),
        "--tf-roles=trainer:4,rollout:2 asks for 6 tasks but the step has 7"
    );
    check(&grpo, &launch(6, Some("12000-12010"))).unwrap();
    // 1 (PyTorch's) + 2 (a port per role) + 2 × 4 (each task's) = 11.
    assert_eq!(
        check(&grpo, &launch(6, Some("12000-12009"))).unwrap_err(),
        "Slurm reserved 10 port(s) (12000-12009) for this step but it needs 11 on a node: ask for them with srun --resv-ports=11"
    );
    let e = step_tasks(&with_roles(torch(), "a:2,b:2"), &[], "").unwrap_err();
    assert!(
        e.to_string()
            .contains("asks for 4 tasks but the step has 6"),
        "{e}"
    );
    let e = Settings::default()
        .set("roles", "a-b:1")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("roles=\"a-b:1\": role name \"a-b\" has '-'"),
        "{e}"
    );
    let e = Settings::default()
        .set("ports-per-task", "0")
        .unwrap_err()
        .to_string();
    assert_eq!(e, "ports-per-task=\"0\": ports per task must be 1-64");
}

/// In a heterogeneous step (`srun -n1 -w node3 : -N2 -n3 -w node1,node2`)
/// `--tf-roles=server,trainer` names its components: the first's task is
/// the server, the second's three tasks the trainers (ranks 1-3, their
/// RANK 0-2).
#[test]
fn names_alone_are_the_components_of_a_heterogeneous_step() {
    let settings = with_roles(torch(), "server,trainer");
    let task = |procid: &str, node_id: &str, gtids: &str| {
        let vars = [
            ("SLURM_PROCID", procid),
            ("SLURM_STEP_NUM_TASKS", "4"),
            ("SLURM_STEP_NODELIST", "node[1-3]"),
            ("SLURM_STEP_TASKS_PER_NODE", "2,1(x2)"),
            ("SLURM_DISTRIBUTION", "block"),
            ("SLURM_NODEID", node_id),
            ("SLURM_GTIDS", gtids),
            ("SLURM_HET_SIZE", "2"),
            ("SLURM_JOB_NODELIST_HET_GROUP_0", "node3"),
            ("SLURM_JOB_NODELIST_HET_GROUP_1", "node[1-2]"),
        ];
        let mut source = Given::vars(vars).gpus(0);
        let step = Step::gather(&settings, &mut source)
            .unwrap()
            .step()
            .unwrap();
        crate::node::resolve(&settings, &step).unwrap()
    };
    let server = task("0", "0", "0");
    assert_eq!(server.get("TF_CLUSTER_ROLE"), Some("server"));
    assert_eq!(server.get("WORLD_SIZE"), Some("1"));
    assert_eq!(server.get("MASTER_ADDR"), Some("node3"));
    let trainer = task("2", "1", "1,2");
    assert_eq!(trainer.get("TF_CLUSTER_ROLE"), Some("trainer"));
    assert_eq!(trainer.get("RANK"), Some("1"));
    assert_eq!(trainer.get("WORLD_SIZE"), Some("3"));
    assert_eq!(trainer.get("TF_CLUSTER_STEP_RANK"), Some("2"));
    assert_eq!(trainer.get("MASTER_ADDR"), Some("node1"));
}

/// The preflight checks every port a node's tasks listen on: each task's
/// own, each role's rendezvous port on its first rank's node, and the
/// step-wide one on rank 0's.
#[test]
fn a_node_listens_on_its_roles_and_tasks_ports() {
    let settings = with_roles(torch(), "trainer:4,rollout:2");
    let listening = |node: &str| {
        let vars = [
            ("SLURM_STEP_NUM_TASKS", "6"),
            ("SLURM_STEP_NODELIST", "n[1-3]"),
            ("SLURM_STEP_TASKS_PER_NODE", "2(x3)"),
            ("SLURM_DISTRIBUTION", "cyclic"),
            ("SLURMD_NODENAME", node),
            ("SLURM_STEP_RESV_PORTS", "12000-12099"),
        ];
        let step = Step::gather(&settings, &mut Given::vars(vars).gpus(0))
            .unwrap()
            .step()
            .unwrap();
        let mut ports = Node::prepare(settings.clone(), step)
            .unwrap()
            .listening_ports();
        ports.sort();
        ports
    };
    let own: Vec<u16> = (12003..=12010).collect();
    let with = |extra: &[u16]| {
        let mut all: Vec<u16> = extra.iter().copied().chain(own.iter().copied()).collect();
        all.sort();
        all
    };
    assert_eq!(listening("n1"), with(&[12000, 12001]));
    assert_eq!(listening("n2"), with(&[12002]));
    assert_eq!(listening("n3"), with(&[]));
}

/// A task's variables, in order.
type Vars = Vec<(String, String)>;

/// 24 roles of 2,600 tasks each, on 780 nodes of 80 tasks (`hosts`, the
/// first `first`), ports 12000-12999 reserved, `more` settings: srun's
/// check before launch, and rank 0's variables (on `first`).
fn roles_24x2600(
    hosts: &str,
    first: &str,
    more: &[(&str, &str)],
) -> (Result<(), String>, Result<Vars, String>) {
    let spec: Vec<String> = (0..24).map(|i| format!("r{i}:2600")).collect();
    let mut settings = with_roles(torch(), &spec.join(","));
    for (key, value) in more {
        settings.set(key, value).unwrap();
    }
    let launch = Launch {
        tasks: 62_400,
        nodelist: Some(hosts),
        nodes: Some(780),
        resv_ports: Some("12000-12999"),
        most_local: Some(80),
        ..Launch::default()
    };
    let srun = check_before_launch(&settings, &launch).map_err(|e| e.to_string());
    let vars = [
        ("SLURM_STEP_NUM_TASKS", "62400"),
        ("SLURM_STEP_NODELIST", hosts),
        ("SLURM_STEP_TASKS_PER_NODE", "80(x780)"),
        ("SLURM_DISTRIBUTION", "block"),
        ("SLURMD_NODENAME", first),
        ("SLURM_STEP_RESV_PORTS", "12000-12999"),
    ];
    let task = (|| {
        let step = Step::gather(&settings, &mut Given::vars(vars).gpus(0))?.step()?;
        let injection = Node::prepare(settings.clone(), step)?.task(0, Some(0), None)?;
        Ok::<_, crate::error::Error>(
            injection
                .vars()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
        )
    })()
    .map_err(|e| e.to_string());
    (srun, task)
}

/// Whether `/bin/true` starts with `vars` as its whole environment: None
/// where this machine's exec limit is not Linux's default 2 MiB (its stack
/// limit not 8 MiB), so no answer is the one a default node gives.
fn execs_with(vars: &[(String, String)]) -> Option<std::io::Result<()>> {
    // SAFETY: sysconf reads a limit.
    if unsafe { libc::sysconf(libc::_SC_ARG_MAX) } != crate::limits::ARG_MAX as libc::c_long {
        eprintln!("SKIPPED the exec: ARG_MAX here is not 2 MiB");
        return None;
    }
    let run = std::process::Command::new("/bin/true")
        .env_clear()
        .envs(vars.iter().map(|(n, v)| (n, v)))
        .status();
    Some(run.map(|status| assert!(status.success())))
}

/// Each role's address book within the 131,072 bytes of one variable, but
/// the 24 together (2.3 MB with hosts named `cluster-a100-80gb-gpu-nodeNNNN`)
/// over the exec limit: exec itself refuses them ("Argument list too
/// long"), and srun refuses the step before launch in one line (each task
/// too, the catch-all).
#[test]
fn address_books_over_the_exec_limit_together_are_refused_before_launch() {
    let prefix = "cluster-a100-80gb-gpu-node";
    let host = |node: u32| format!("{prefix}{:04}", node + 1);
    // Rank 0's books as any task has them: each rank's node, then its first
    // own port (after PyTorch's and the roles' 25, 4 per local task).
    let books: Vec<(String, String)> = (0..24u32)
        .map(|role| {
            let book: Vec<String> = (role * 2600..(role + 1) * 2600)
                .map(|rank| format!("{}:{}", host(rank / 80), 12025 + 4 * (rank % 80)))
                .collect();
            (format!("TF_CLUSTER_ROLE_R{role}_ADDRS"), book.join(","))
        })
        .collect();
    assert!(
        books
            .iter()
            .all(|(n, v)| n.len() + v.len() + 2 < crate::limits::ENV_LIMIT)
    );
    if let Some(run) = execs_with(&books) {
        assert_eq!(run.unwrap_err().raw_os_error(), Some(libc::E2BIG));
    }
    let (srun, task) = roles_24x2600(&format!("{prefix}[0001-0780]"), &host(0), &[]);
    let tail = " bytes in each task, over tf-cluster's 1572864 of Linux's 2097152-byte exec limit (ARG_MAX): use fewer roles or fewer tasks";
    let bytes = |text: &str, head: &str| -> usize {
        let n = text.strip_prefix(head).and_then(|t| t.strip_suffix(tail));
        n.unwrap_or_else(|| panic!("{text}")).parse().unwrap()
    };
    // srun's is the least the books take, each task's what it would set.
    let least = bytes(
        &srun.unwrap_err(),
        "the roles' address books would take at least ",
    );
    let exact = bytes(&task.unwrap_err(), "tf-cluster's variables would take ");
    let books: usize = books.iter().map(|(n, v)| n.len() + v.len() + 2 + 8).sum();
    assert!(least <= books && books < exact, "{least} {books} {exact}");
    assert!(least > 1572864, "{least}");
}

/// The same step on nodes named `nNNN`: 0.7 MB of address books, which
/// exec takes beside the rest of a task's variables; srun lets it start.
#[test]
fn address_books_within_the_exec_limit_together_start() {
    let (srun, task) = roles_24x2600("n[001-780]", "n001", &[]);
    srun.unwrap();
    let vars = task.unwrap();
    let books: usize = vars
        .iter()
        .filter(|(n, _)| n.ends_with("_ADDRS"))
        .map(|(n, v)| n.len() + v.len() + 2)
        .sum();
    assert!(books > 650_000, "{books} bytes of books");
    if let Some(run) = execs_with(&vars) {
        run.unwrap();
    }
}

/// The same books given three times (`--tf-apptainer-env`: once more as
/// APPTAINERENV_ and SINGULARITYENV_) no longer fit: refused before launch.
#[test]
fn address_books_mirrored_for_apptainer_count_three_times() {
    let (srun, task) = roles_24x2600("n[001-780]", "n001", &[("apptainer-env", "yes")]);
    let srun = srun.unwrap_err();
    assert!(
        srun.starts_with("the roles' address books would take at least "),
        "{srun}"
    );
    let task = task.unwrap_err();
    assert!(
        task.starts_with("tf-cluster's variables would take "),
        "{task}"
    );
}
