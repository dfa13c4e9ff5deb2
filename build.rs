//! Generates the SPANK bindings from the installed Slurm headers.
//!
//! The plugin must be built against the Slurm it runs under: Slurm refuses a
//! plugin whose `plugin_version` differs in major.minor, so the version is read
//! from the same headers (`SLURM_VERSION_NUMBER`).

use std::env;
use std::path::{Path, PathBuf};

include!("buildinfo.rs");
include!("slurm_version.rs");

fn main() {
    println!("cargo:rerun-if-env-changed=SLURM_INCLUDE_DIR");
    // cargo reruns this script when a header named below is newer than its
    // last run, so headers of another Slurm copied into the same directory
    // with their package's older time would leave the plugin built for the
    // previous ones. The scripts that build (packaging/, docker/matrix.sh)
    // pass the headers' content digest (packaging/slurm-headers.sh): another
    // content is another value, and cargo reruns this script for it.
    println!("cargo:rerun-if-env-changed=TFC_SLURM_HEADERS_DIGEST");
    let include = env::var("SLURM_INCLUDE_DIR").unwrap_or_else(|_| "/usr/include".into());
    let header = PathBuf::from(&include).join("slurm/spank.h");
    if !header.exists() {
        panic!(
            "{} not found: install Slurm's headers (Debian: apt-get install libslurm-dev) \
             or point SLURM_INCLUDE_DIR at the directory holding slurm/spank.h",
            header.display()
        );
    }
    println!("cargo:rerun-if-changed={}", header.display());
    println!(
        "cargo:rerun-if-changed={}",
        PathBuf::from(&include).join("slurm/slurm.h").display()
    );
    let version_h = PathBuf::from(&include).join("slurm/slurm_version.h");
    println!("cargo:rerun-if-changed={}", version_h.display());
    // What differs between the Slurm releases this builds for (22.05, 24.11,
    // 26.05) is behaviour, not the part of spank.h used here; it becomes a cfg.
    let version = slurm_version(&version_h);
    // The build id the plugin exports (src/build_id.rs), the CLI's plus the
    // features: a fault-injection build is another build.
    let mut features: Vec<String> = env::vars()
        .filter_map(|(k, _)| k.strip_prefix("CARGO_FEATURE_").map(|f| f.to_lowercase()))
        .collect();
    features.sort();
    let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    println!(
        "cargo:rustc-env=TF_CLUSTER_BUILD_ID={}{}",
        build_id(&root),
        features
            .iter()
            .map(|f| format!(" +{f}"))
            .collect::<String>()
    );
    // slurm_get_job_steps takes (update_time, job_id, step_id, …) up to 24.11
    // and a slurm_step_id_t * in 26.05: told by the header itself.
    println!("cargo::rustc-check-cfg=cfg(slurm_get_job_steps_by_id)");
    let slurm_h =
        std::fs::read_to_string(PathBuf::from(&include).join("slurm/slurm.h")).unwrap_or_default();
    if slurm_h.contains("slurm_get_job_steps(slurm_step_id_t") {
        println!("cargo:rustc-cfg=slurm_get_job_steps_by_id");
    }
    // slurm_requeue (src/spank/requeue.rs) takes a job id up to 25.11 and a
    // slurm_step_id_t in 26.05: told by the header too.
    println!("cargo::rustc-check-cfg=cfg(slurm_requeue_by_id)");
    if slurm_h.contains("slurm_requeue(slurm_step_id_t") {
        println!("cargo:rustc-cfg=slurm_requeue_by_id");
    }
    // slurm_load_job (src/spank/requeue.rs) likewise: a job id up to 25.11, a
    // slurm_step_id_t in 26.05.
    println!("cargo::rustc-check-cfg=cfg(slurm_load_job_by_id)");
    if slurm_h.contains("slurm_load_job(job_info_msg_t **resp, slurm_step_id_t") {
        println!("cargo:rustc-cfg=slurm_load_job_by_id");
    }
    println!("cargo::rustc-check-cfg=cfg(slurm_blocks_follow_topology)");
    if blocks_follow_topology(version) {
        // From 26.05 on (22.05, 24.11 and 25.11 do not: slurm_version.rs), a
        // topology plugin makes Slurm fill the nodes of a block distribution
        // in topology order instead of node-list order (see core::layout).
        println!("cargo:rustc-cfg=slurm_blocks_follow_topology");
    }
    // slurm_kill_job_step (src/spank/slurmctld/step_kill.rs): a `flags` argument
    // from 23.11 on, the step named by a slurm_step_id_t from 25.11 on.
    println!("cargo::rustc-check-cfg=cfg(slurm_kill_step_flags, slurm_kill_step_by_id)");
    if version >= 0x17_0b_00 {
        println!("cargo:rustc-cfg=slurm_kill_step_flags");
    }
    if version >= 0x19_0b_00 {
        println!("cargo:rustc-cfg=slurm_kill_step_by_id");
    }

    // spank.h for the callbacks; slurm.h for the step layout srun fetches
    // and the kill a refusing task sends.
    let bindings = bindgen::Builder::default()
        .header_contents(
            "tf_cluster.h",
            "#include <slurm/spank.h>\n#include <slurm/slurm.h>\n",
        )
        .clang_arg(format!("-I{include}"))
        .allowlist_function(
            "spank_(getenv|setenv|option_getopt|option_register|remote|get_item|strerror|context)",
        )
        .allowlist_function("slurm_(error|info|verbose|debug|strerror|spank_log)")
        .allowlist_function("slurm_job_step_layout_(get|free)|slurm_kill_job_step|slurm_requeue")
        .allowlist_function("slurm_get_job_steps|slurm_free_job_step_info_response_msg")
        .allowlist_function("slurm_load_job|slurm_free_job_info_msg")
        .allowlist_function("slurm_(init_job_desc_msg|update_job)")
        .allowlist_function("slurm_load_partitions|slurm_free_partition_info_msg")
        .allowlist_type("spank_option|spank_err_t|spank_item_t|spank_t|job_states")
        .allowlist_var("SLURM_VERSION_NUMBER|ESPANK_SUCCESS|NO_VAL")
        .layout_tests(false)
        .generate()
        .unwrap_or_else(|e| panic!("bindgen failed on {}: {e}", header.display()));
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR")).join("spank_bindings.rs");
    bindings
        .write_to_file(&out)
        .unwrap_or_else(|e| panic!("writing {}: {e}", out.display()));
}

/// SLURM_VERSION_NUMBER (0xMMmmuu) from slurm_version.h.
fn slurm_version(path: &Path) -> u32 {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e} (Slurm's headers are incomplete)", path.display()));
    parse_version_header(&text)
        .unwrap_or_else(|| panic!("{}: no SLURM_VERSION_NUMBER 0x… line", path.display()))
}
