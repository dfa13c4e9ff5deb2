#![no_main]
//! SLURM_STEP_NODELIST: never panics, never exceeds its bound, never yields
//! an empty name or one that needs escaping in TF_CONFIG.

use libfuzzer_sys::fuzz_target;
use tf_cluster_core::hostlist::HostList;

fuzz_target!(|list: &str| {
    let Ok(hosts) = HostList::parse(list, 4096) else { return };
    assert!(!hosts.is_empty() && hosts.len() <= 4096);
    for name in hosts.iter() {
        assert!(!name.is_empty());
        assert!(name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)));
    }
});
