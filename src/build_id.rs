//! Which build this is: the plugin exports the id build.rs derives from the
//! workspace's sources (buildinfo.rs), the CLI built from the same sources
//! prints the same one, so `tf-cluster doctor` can tell a plugin that came
//! with the CLI from one of another build.

/// `VERSION src HASH`, plus ` +FEATURE` for a build with features.
const BUILD_ID: &str = env!("TF_CLUSTER_BUILD_ID");

const fn nul_terminated<const N: usize>(s: &str) -> [u8; N] {
    let mut out = [0u8; N];
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        out[i] = bytes[i];
        i += 1;
    }
    out
}

/// Exported only to be read from the file (never called): `tf-cluster
/// doctor` compares it with its own id.
#[unsafe(no_mangle)]
#[allow(non_upper_case_globals)]
pub static tf_cluster_build_id: [u8; BUILD_ID.len() + 1] = nul_terminated(BUILD_ID);
