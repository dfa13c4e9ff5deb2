//! TF_CLUSTER_BUILD_ID for `tf-cluster --version` and `tf-cluster doctor`:
//! the same id as the plugin built from the same sources (../buildinfo.rs).

include!("../buildinfo.rs");

fn main() {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR");
    let root = std::path::Path::new(&manifest)
        .parent()
        .expect("the workspace root");
    println!("cargo:rustc-env=TF_CLUSTER_BUILD_ID={}", build_id(root));
}
