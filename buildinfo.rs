// The build id shared by the plugin and the CLI, included by build.rs and
// cli/build.rs (`include!`): `VERSION src HASH`, the hash (FNV-1a, 64 bits)
// covering every source of the workspace, so that a plugin and a CLI built
// from the same sources carry the same id whatever the order of the builds,
// and no git checkout is needed. `tf-cluster doctor` compares them.
//
// VERSION (`version` below) is the one version of the build: the .deb's and
// the .rpm's, `tf-cluster --version`'s and the plugin's exported id.

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
    let cargo = std::env::var("CARGO_PKG_VERSION").expect("CARGO_PKG_VERSION");
    format!("{} src {hash:016x}", version(root, &cargo))
}

/// The build's version. A release is Cargo.toml's version (`0.2.0`): a
/// checkout at the tag `v0.2.0`, or a source tarball without `.git`. Any
/// other checkout is a development build of the release to come,
/// `0.2.0~dev.N.gREV`: N the commits of the history (`git rev-list --count
/// HEAD`), REV the commit. `~` sorts before the release for dpkg and rpm
/// alike (0.1.0 < 0.2.0~dev.400.g… < 0.2.0~dev.401.g… < 0.2.0), so Cargo.toml
/// is raised to the next release right after a release is tagged.
/// TF_CLUSTER_VERSION overrides it (a build from a snapshot's tarball, as
/// packaging/rpm.sh makes): it must start with Cargo.toml's version, `cargo`.
fn version(root: &std::path::Path, cargo: &str) -> String {
    let cargo = cargo.to_string();
    println!("cargo:rerun-if-env-changed=TF_CLUSTER_VERSION");
    if let Ok(forced) = std::env::var("TF_CLUSTER_VERSION") {
        let ok = forced.starts_with(&cargo)
            && forced
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b".~+".contains(&b));
        assert!(
            ok,
            "TF_CLUSTER_VERSION={forced}: want {cargo} or {cargo}~dev.N.gREV (letters, digits, . ~ +)"
        );
        return forced;
    }
    let git = |args: &[&str]| -> Option<String> {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(root)
            .args(args)
            .output()
            .ok()?;
        let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
        (out.status.success() && !text.is_empty()).then_some(text)
    };
    // Not a checkout (a tarball, or no git): the release.
    if !root.join(".git").exists() {
        return cargo;
    }
    // A checkout whose history cannot be read (no git, a work tree whose
    // repository is elsewhere): a development build, its revision unknown.
    let Some(git_dir) = git(&["rev-parse", "--absolute-git-dir"]) else {
        return format!("{cargo}~dev");
    };
    // A commit, a checkout or a new tag changes the version: build again. Only files that
    // exist (cargo runs the script again at every build for a missing one).
    let mut watched = vec![
        std::path::PathBuf::from(&git_dir).join("HEAD"),
        std::path::PathBuf::from(&git_dir).join("logs/HEAD"),
    ];
    if let Some(common) = git(&["rev-parse", "--git-common-dir"]) {
        let common = root.join(common);
        watched.push(common.join("refs/tags"));
        watched.push(common.join("packed-refs"));
    }
    for path in watched.iter().filter(|p| p.exists()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    let tag = format!("v{cargo}");
    let tags = git(&["tag", "--points-at", "HEAD"]).unwrap_or_default();
    if tags.lines().any(|t| t == tag) {
        return cargo;
    }
    if git(&["rev-parse", "--verify", "--quiet", &format!("refs/tags/{tag}")]).is_some() {
        println!(
            "cargo:warning={tag} is tagged already: raise the version in Cargo.toml, or this \
             development build sorts before the release"
        );
    }
    match (
        git(&["rev-list", "--count", "HEAD"]),
        git(&["rev-parse", "--short=10", "HEAD"]),
    ) {
        (Some(count), Some(rev)) => format!("{cargo}~dev.{count}.g{rev}"),
        _ => format!("{cargo}~dev"),
    }
}
