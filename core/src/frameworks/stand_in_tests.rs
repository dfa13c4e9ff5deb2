//! The stand-in framework, which only its own file and one line of the
//! table declare: its option is refused and listed like the others', its
//! port follows PyTorch's in the node's plan and srun's reservation count,
//! and its variable reaches each task.
//! `cargo test -p tf-cluster-core --features stand-in stand_in`

use super::FRAMEWORK;
use crate::frameworks::{Frameworks, Launch, by_option};
use crate::node::Node;
use crate::settings::Settings;
use crate::source::Given;
use crate::step::Step;

/// `srun -N2 --ntasks-per-node=2 --resv-ports=3 --torch-cluster
/// --stand-in-cluster --tf-record=/rec`: the node of `name`.
fn node(name: &str) -> Node {
    let settings = Settings {
        frameworks: Frameworks::only(by_option("torch-cluster").unwrap()).with(&FRAMEWORK),
        record: Some("/rec".into()),
        ..Settings::default()
    };
    let vars = vec![
        ("SLURM_STEP_NUM_TASKS", "4"),
        ("SLURM_STEP_NODELIST", "n[1-2]"),
        ("SLURM_STEP_TASKS_PER_NODE", "2(x2)"),
        ("SLURMD_NODENAME", name),
        ("SLURM_STEP_RESV_PORTS", "12000-12002"),
    ];
    let step = Step::gather(&settings, &mut Given::vars(vars).gpus(0))
        .unwrap()
        .step()
        .unwrap();
    Node::prepare(settings, step).unwrap()
}

/// Its port is the one after PyTorch's MASTER_PORT, then NCCL's RAS (a
/// recorded step, and its ranks may use NCCL); rank 0's node listens on
/// all three, the other node on RAS's alone.
#[test]
fn its_port_follows_pytorchs_and_its_variable_reaches_every_task() {
    let (n1, n2) = (node("n1"), node("n2"));
    let rank2 = n2.task(2, Some(0), None).unwrap();
    assert_eq!(rank2.get("MASTER_PORT"), Some("12000"));
    assert_eq!(rank2.get("STAND_IN_ADDRESS"), Some("n1:12001"));
    assert_eq!(n2.ras_port(), Some(12002));
    assert_eq!(n1.listening_ports(), [12000, 12001, 12002]);
    assert_eq!(n2.listening_ports(), [12002]);
    // Its column in `tf-cluster preview`, rank 3's cell.
    let rows = n1.rank_table().unwrap().rows;
    let column = rows[0].iter().position(|c| c == "STAND_IN").unwrap();
    assert_eq!(rows[4][column], "n1:12001");
}

/// srun counts its port in the reservation: two reserved ports are one
/// short of MASTER_PORT, its own and RAS's.
#[test]
fn srun_counts_its_port() {
    let settings = Settings {
        frameworks: Frameworks::only(by_option("torch-cluster").unwrap()).with(&FRAMEWORK),
        record: Some("/rec".into()),
        ..Settings::default()
    };
    let launch = |resv| Launch {
        tasks: 4,
        nodelist: Some("n[1-2]"),
        nodes: Some(2),
        resv_ports: Some(resv),
        most_local: Some(2),
        ..Launch::default()
    };
    let e = crate::frameworks::check_before_launch(&settings, &launch("12000-12001"));
    assert_eq!(
        e.unwrap_err().to_string(),
        "Slurm reserved 2 port(s) (12000-12001) for this step but it needs 3 on a node: ask for them with srun --resv-ports=3"
    );
    assert!(crate::frameworks::check_before_launch(&settings, &launch("12000-12002")).is_ok());
}

/// Every message that lists the framework options lists it: `--tf-off`'s
/// help, a setting given without a framework, the frameworks `--tf-roles`
/// works with (its refusal and its help); its option takes no value but
/// off.
#[test]
fn the_messages_list_its_option() {
    use crate::frameworks::{all_off_help, check_given_settings, check_roles, check_value};
    assert_eq!(
        all_off_help(),
        "no framework's variables for this step, whatever the job asked (one framework: --tf-cluster=off, --torch-cluster=off, --jax-cluster=off, --ray-cluster=off, --stand-in-cluster=off)"
    );
    let e = check_given_settings(&["tf-port-base"], Frameworks::default()).unwrap_err();
    assert!(
        e.to_string().contains(
            "only on a step with a framework option (--tf-cluster, --torch-cluster, --jax-cluster, --ray-cluster or --stand-in-cluster)"
        ),
        "{e}"
    );
    let mut settings = Settings::default();
    settings.set("roles", "a:1,b:1").unwrap();
    let e = check_roles(&settings, 2, None).unwrap_err().to_string();
    assert!(
        e.ends_with("; use --tf-roles with --torch-cluster, --jax-cluster or --stand-in-cluster"),
        "{e}"
    );
    assert_eq!(
        check_value(&FRAMEWORK, "yes").unwrap_err().to_string(),
        "--stand-in-cluster takes no value but off (not \"yes\")"
    );
    let roles = crate::settings::SETTINGS.iter().find(|s| s.key == "roles");
    let help = roles.unwrap().help_text();
    assert!(
        help.contains("; with --torch-cluster, --jax-cluster or --stand-in-cluster; "),
        "{help}"
    );
    assert!(Frameworks::all().contains(&FRAMEWORK));
}
