#![no_main]
//! `--tf-cluster=SPEC`: never panics; an accepted spec round-trips.

use libfuzzer_sys::fuzz_target;
use tf_cluster_core::roles::RoleSpec;

fuzz_target!(|spec: &str| {
    let Ok(parsed) = RoleSpec::parse(spec) else { return };
    if let RoleSpec::Roles(roles) = &parsed {
        let written: Vec<String> = roles.iter().map(|r| format!("{}:{}", r.name, r.count)).collect();
        assert_eq!(RoleSpec::parse(&written.join(",")), Ok(parsed.clone()));
        assert!(roles.iter().all(|r| r.count >= 1 && !r.name.is_empty()));
    }
});
