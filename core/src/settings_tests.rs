//! The table of settings beside the frameworks' options, and the site's
//! defaults from plugstack.conf.

use crate::settings::Settings;

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
            "requeue-max"
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
