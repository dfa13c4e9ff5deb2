#![no_main]
//! SLURM_STEP_RESV_PORTS and the port base: never panics; every port is valid.

use libfuzzer_sys::fuzz_target;
use tf_cluster_core::ports;

fuzz_target!(|input: (u16, u8, &str)| {
    let (base, tasks, list) = input;
    for reserved in [None, Some(list)] {
        if let Ok(ports) = ports::ports(ports::Unreserved::Base(base.max(1)), reserved, u32::from(tasks)) {
            assert_eq!(ports.len(), usize::from(tasks));
            assert!(ports.iter().all(|&p| p >= 1));
        }
    }
});
