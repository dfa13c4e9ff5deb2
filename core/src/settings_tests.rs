//! The table of settings beside the frameworks' options, and the site's
//! defaults from plugstack.conf.

use crate::settings::{SETTINGS, Settings, Unset};

#[test]
fn every_setting_has_a_key_an_argument_and_help() {
    let keys: Vec<&str> = crate::settings::SETTINGS.iter().map(|s| s.key).collect();
    assert_eq!(
        keys,
        [
            "port-base",
            "port-range",
            "gpus-per-node",
            "gpus-per-task",
            "auto-set-gpu",
            "rpc-layer",
            "host-template",
            "network",
            "apptainer-env",
            "preflight",
            "record",
            "record-log",
            "requeue-on",
            "requeue-max",
            "exclude-max",
            "roles",
            "ports-per-task",
            "bind",
            "imex"
        ]
    );
    for s in &crate::settings::SETTINGS {
        assert!(!s.arg.is_empty() && !s.help.is_empty(), "{}", s.key);
    }
    assert!(Settings::default().set("cluster", "ps:1").is_err());
    let options: Vec<&str> = crate::frameworks::FRAMEWORKS
        .iter()
        .map(|f| f.option)
        .collect();
    assert_eq!(
        options,
        ["tf-cluster", "torch-cluster", "jax-cluster", "ray-cluster"]
    );
}

/// `torch-cluster=elastic:2` in plugstack.conf: the rendezvous a bare
/// `--torch-cluster` gets, asking for no framework by itself; the
/// step's own value wins.
#[test]
fn the_site_may_make_torchrun_elastic() {
    use crate::frameworks::pytorch::{self, Rendezvous};
    let s = Settings::from_admin_args(["torch-cluster=elastic:2", "port-base=9000"]).unwrap();
    let elastic = Rendezvous::Elastic {
        min: Some(2),
        max_restarts: 3,
    };
    assert_eq!(s.torch, elastic);
    assert_eq!(s.port_base, Some(9000));
    assert_eq!(s.frameworks, Settings::default().frameworks);
    let arg = pytorch::FRAMEWORK.arg.as_ref().unwrap();
    let mut bare = s.clone();
    (arg.set)(&mut bare, "").unwrap();
    assert_eq!(bare.torch, elastic);
    let mut own = s.clone();
    (arg.set)(&mut own, "static").unwrap();
    assert_eq!(own.torch, Rendezvous::Static);
    assert_eq!(Settings::default().torch, Rendezvous::Static);
    for (arg, want) in [
        (
            "torch-cluster=elastic:0",
            "plugstack.conf argument --torch-cluster=\"elastic:0\": MIN, the fewest nodes, must be 1 or more",
        ),
        // TensorFlow's roles are the step's, never a site's.
        ("tf-cluster=ps:1", "unknown key \"tf-cluster\""),
    ] {
        let e = Settings::from_admin_args([arg]).unwrap_err().to_string();
        assert!(e.contains(want), "{arg}: {e}");
    }
}

/// Each numeric setting takes exactly the range the table declares: both
/// ends, and neither number beside them.
#[test]
fn every_setting_takes_its_declared_range_and_no_more() {
    let ranged: Vec<&str> = SETTINGS
        .iter()
        .filter(|s| s.range.is_some())
        .map(|s| s.key)
        .collect();
    assert_eq!(
        ranged,
        [
            "port-base",
            "gpus-per-node",
            "gpus-per-task",
            "requeue-on",
            "requeue-max",
            "exclude-max",
            "ports-per-task"
        ]
    );
    for s in &SETTINGS {
        let Some((lo, hi)) = s.range else { continue };
        let set = |n: u64| Settings::default().set(s.key, &n.to_string());
        assert!(set(lo.into()).is_ok(), "{} {lo}", s.key);
        assert!(set(hi.into()).is_ok(), "{} {hi}", s.key);
        assert!(set(u64::from(hi) + 1).is_err(), "{} {}", s.key, hi + 1);
        if lo > 0 {
            assert!(set(u64::from(lo) - 1).is_err(), "{} {}", s.key, lo - 1);
        }
    }
}

/// Whether `key`'s field holds no value, for the settings whose default is
/// none; a key with no arm here declares `Unset::Absent` for a field that
/// always has a value.
fn is_absent(s: &Settings, key: &str) -> bool {
    match key {
        "port-base" => s.port_base.is_none(),
        "gpus-per-node" => s.gpus_per_node.is_none(),
        "gpus-per-task" => s.gpus_per_task.is_none(),
        "rpc-layer" => s.rpc_layer.is_none(),
        "host-template" => s.host_template.is_none(),
        "network" => s.network.is_none(),
        "record" => s.record.is_none(),
        "requeue-on" => s.requeue_on.is_none(),
        "roles" => s.step_roles.is_none(),
        "ports-per-task" => s.ports_per_task.is_none(),
        _ => panic!("{key}: declared without a value, but its field always has one"),
    }
}

/// The table's defaults are the built-in ones: a declared value, given,
/// leaves `Settings::default()` as it is; a declared absence is no value.
#[test]
fn every_declared_default_is_the_built_in_one() {
    let built_in = Settings::default();
    for s in &SETTINGS {
        match s.default {
            Unset::Value(v) => {
                let mut given = Settings::default();
                given.set(s.key, v).unwrap();
                assert_eq!(given, built_in, "{}: declared default {v}", s.key);
            }
            Unset::Absent(_) => assert!(is_absent(&built_in, s.key), "{}", s.key),
        }
    }
}

/// Each setting's help (srun's and the CLI's `--help`) states the declared
/// range and default, and no other default.
#[test]
fn every_help_states_its_range_and_default() {
    for s in &SETTINGS {
        if let Some((lo, hi)) = s.range {
            assert!(
                s.help.contains(&format!("{lo}-{hi}")),
                "{}: {}",
                s.key,
                s.help
            );
        }
        let words = s.default.words();
        let stated: Vec<&str> = s.help.split("default").skip(1).collect();
        assert!(!stated.is_empty(), "{}: no default in {}", s.key, s.help);
        for after in stated {
            let after = after.strip_prefix(':').unwrap_or(after);
            assert!(
                after
                    .strip_prefix(' ')
                    .is_some_and(|a| a.starts_with(words)),
                "{}: the help's default is not {words:?}: {}",
                s.key,
                s.help
            );
        }
    }
}
