// The build id shared by the plugin and the CLI, included by build.rs and
// cli/build.rs (`include!`): `VERSION src HASH`, the hash (FNV-1a, 64 bits)
// covering every source of the workspace, so that a plugin and a CLI built
// from the same sources carry the same id whatever the order of the builds,
// and no git checkout is needed. `tf-cluster doctor` compares them.

/// Prints the rerun-if-changed lines and returns the id; `root` is the
/// workspace root (the plugin's manifest dir).
fn build_id(root: &std::path::Path) -> String {
    use std::path::PathBuf;
    let mut files: Vec<PathBuf> = [
        "Cargo.toml",
        "Cargo.lock",
        "build.rs",
        "buildinfo.rs",
        "slurm_version.rs",
        "core/Cargo.toml",
        "cli/Cargo.toml",
        "cli/build.rs",
    ]
    .map(PathBuf::from)
    .to_vec();
    let mut dirs: Vec<PathBuf> = ["src", "core/src", "cli/src"].map(PathBuf::from).to_vec();
    for path in files.iter().chain(&dirs) {
        println!("cargo:rerun-if-changed={}", root.join(path).display());
    }
    while let Some(dir) = dirs.pop() {
        let entries = std::fs::read_dir(root.join(&dir))
            .unwrap_or_else(|e| panic!("{}: {e}", root.join(&dir).display()));
        for entry in entries {
            let name = dir.join(entry.expect("reading a source dir").file_name());
            if root.join(&name).is_dir() {
                dirs.push(name);
            } else {
                files.push(name);
            }
        }
    }
    files.sort();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |bytes: &[u8]| {
        for &b in bytes {
            hash = (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    };
    for file in &files {
        feed(file.to_string_lossy().as_bytes());
        feed(&[0]);
        // A missing Cargo.lock (a fresh checkout) hashes as empty.
        feed(&std::fs::read(root.join(file)).unwrap_or_default());
        feed(&[0]);
    }
    format!(
        "{} src {hash:016x}",
        std::env::var("CARGO_PKG_VERSION").expect("CARGO_PKG_VERSION")
    )
}
