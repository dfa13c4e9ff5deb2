//! Generates the SPANK bindings from the installed Slurm headers.
//!
//! The plugin must be built against the Slurm it runs under: Slurm refuses a
//! plugin whose `plugin_version` differs in major.minor, so the version is read
//! from the same headers (`SLURM_VERSION_NUMBER`).

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=SLURM_INCLUDE_DIR");
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
        PathBuf::from(&include)
            .join("slurm/slurm_version.h")
            .display()
    );

    let bindings = bindgen::Builder::default()
        .header(header.to_string_lossy())
        .clang_arg(format!("-I{include}"))
        .allowlist_function("spank_(getenv|setenv|option_getopt|option_register|remote|get_item)")
        .allowlist_function("slurm_(error|info|verbose|debug)")
        .allowlist_type("spank_option|spank_err_t|spank_item_t|spank_t")
        .allowlist_var("SLURM_VERSION_NUMBER|ESPANK_SUCCESS")
        .layout_tests(false)
        .generate()
        .unwrap_or_else(|e| panic!("bindgen failed on {}: {e}", header.display()));
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR")).join("spank_bindings.rs");
    bindings
        .write_to_file(&out)
        .unwrap_or_else(|e| panic!("writing {}: {e}", out.display()));
}
