//! What the plugin exports is what Slurm's loader needs: the three plugin
//! symbols and the hooks used, nothing else (no `init`, no job prolog), plus
//! the build id `tf-cluster doctor` reads from the file.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

/// The plugin cargo built alongside this test: the test binary is
/// `<target dir>/<profile>/deps/symbols-<hash>`, and the cdylib is
/// `<target dir>/<profile>/libtf_cluster.so`, whatever the profile and
/// wherever CARGO_TARGET_DIR (or `--target`) puts the target dir.
fn built_plugin() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let deps = exe.parent().expect("the test binary's folder");
    assert!(deps.ends_with("deps"), "{} is not in deps/", exe.display());
    let so = deps.parent().unwrap().join("libtf_cluster.so");
    assert!(
        so.exists(),
        "{} is missing: `cargo build --lib` it with this test's profile and target dir",
        so.display()
    );
    so
}

#[test]
fn exports_only_the_plugin_symbols_and_used_hooks() {
    let so = built_plugin();
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&so)
        .output()
        .expect("nm (binutils) runs");
    assert!(
        out.status.success(),
        "nm {}: {}",
        so.display(),
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
        "slurm_spank_exit",
        "slurm_spank_init",
        "slurm_spank_init_post_opt",
        "slurm_spank_local_user_init",
        "slurm_spank_task_exit",
        "slurm_spank_task_init",
        "slurm_spank_task_init_privileged",
        "slurm_spank_user_init",
        "tf_cluster_build_id",
    ]
    .map(String::from)
    .into();
    assert_eq!(symbols, want);
}
