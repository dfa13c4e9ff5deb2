//! What the plugin exports is what Slurm's loader needs: the three plugin
//! symbols and the hooks used, nothing else (no `init`, no job prolog).

use std::collections::BTreeSet;
use std::process::Command;

#[test]
fn exports_only_the_plugin_symbols_and_used_hooks() {
    let so = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/target/release/libtf_cluster.so"
    );
    let out = Command::new("nm")
        .args(["-D", "--defined-only", so])
        .output()
        .expect("nm (binutils) runs");
    assert!(
        out.status.success(),
        "nm {so}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let symbols: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2).map(String::from))
        .collect();
    let want: BTreeSet<String> = [
        "plugin_name",
        "plugin_type",
        "plugin_version",
        "slurm_spank_init",
        "slurm_spank_local_user_init",
        "slurm_spank_task_init",
    ]
    .map(String::from)
    .into();
    assert_eq!(symbols, want);
}
