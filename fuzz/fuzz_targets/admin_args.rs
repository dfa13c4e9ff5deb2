#![no_main]
//! plugstack.conf arguments: never panics; accepted values are in range.

use libfuzzer_sys::fuzz_target;
use tf_cluster_core::Settings;

fuzz_target!(|line: &str| {
    if let Ok(settings) = Settings::from_admin_args(line.split_whitespace()) {
        assert!(settings.port_base.is_none_or(|b| b >= 1));
    }
});
