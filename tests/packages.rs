//! The packages as built on this host (tests/run.sh builds both first:
//! `bash packaging/deb.sh` into target/deb, `bash packaging/rpm.sh` into
//! target/rpm): where the files go and which Slurm release they require, the
//! release taken from the headers they were built against.

use std::path::PathBuf;
use std::process::Command;

fn only(dir: &str, ext: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(dir);
    let found: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e}: build the package first (tests/run.sh does)",
                dir.display()
            )
        })
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(ext))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "want one *{ext} in {}: {found:?}",
        dir.display()
    );
    found.into_iter().next().unwrap()
}

fn run(cmd: &str, args: &[&str], file: &PathBuf) -> String {
    let out = Command::new(cmd).args(args).arg(file).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `MM.mm` of the headers on this host, and the release after it.
fn release() -> (String, String) {
    let include = std::env::var("SLURM_INCLUDE_DIR").unwrap_or_else(|_| "/usr/include".into());
    let text = std::fs::read_to_string(format!("{include}/slurm/slurm_version.h")).unwrap();
    let hex = text
        .lines()
        .find_map(|l| l.strip_prefix("#define SLURM_VERSION_NUMBER 0x"))
        .unwrap();
    let v = u32::from_str_radix(hex.trim(), 16).unwrap();
    let (major, minor) = (v >> 16, (v >> 8) & 255);
    (
        format!("{major}.{minor:02}"),
        format!("{major}.{:02}", minor + 1),
    )
}

#[test]
fn rpm_files_and_requirements() {
    let rpm = only("target/rpm", ".rpm");
    let (release, next) = release();
    let files = run("rpm", &["-qlp"], &rpm);
    let files: Vec<&str> = files.lines().collect();
    for want in [
        "/usr/lib64/slurm/tf_cluster.so",
        "/usr/bin/tf-cluster",
        "/etc/slurm/plugstack.conf.d/tf-cluster.conf",
    ] {
        assert!(files.contains(&want), "{want} not in {files:?}");
    }
    // The CLI's manual (rpm may compress it).
    assert!(
        files
            .iter()
            .any(|f| f.starts_with("/usr/share/man/man1/tf-cluster.1")),
        "no manual in {files:?}"
    );
    // The snippet is an admin's file: kept on upgrade, set aside on removal.
    let config = run(
        "rpm",
        &["-qp", "--qf", "[%{FILEFLAGS:fflags} %{FILENAMES}\n]"],
        &rpm,
    );
    assert!(
        config
            .lines()
            .any(|l| l == "cn /etc/slurm/plugstack.conf.d/tf-cluster.conf"),
        "{config}"
    );
    let requires = run("rpm", &["-qp", "--requires"], &rpm);
    let requires: Vec<&str> = requires.lines().map(str::trim).collect();
    assert!(
        requires.contains(&format!("slurm >= {release}").as_str()),
        "{requires:?}"
    );
    assert!(
        requires.contains(&format!("slurm < {next}").as_str()),
        "{requires:?}"
    );
    let name = run("rpm", &["-qp", "--qf", "%{NAME} %{RELEASE}"], &rpm);
    assert!(
        name.starts_with(&format!("tf-cluster 1.slurm{release}")),
        "{name}"
    );
}

#[test]
fn deb_files_and_dependencies() {
    let deb = only("target/deb", ".deb");
    let (release, next) = release();
    let listing = run("dpkg-deb", &["-c"], &deb);
    for want in [
        "./usr/lib/x86_64-linux-gnu/slurm-wlm/tf_cluster.so",
        "./usr/bin/tf-cluster",
        "./usr/share/tf-cluster/tf-cluster.conf",
        "./usr/share/doc/tf-cluster/copyright",
        "./usr/share/man/man1/tf-cluster.1.gz",
    ] {
        assert!(
            listing.lines().any(|l| l.ends_with(want)),
            "{want} not in {listing}"
        );
    }
    // Nothing in /etc: the snippet is managed by the maintainer scripts.
    assert!(!listing.contains(" ./etc/"), "{listing}");
    let field = |f: &str| {
        run("dpkg-deb", &["-f"], &deb.clone())
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{f}: ")).map(str::to_string))
            .unwrap_or_default()
    };
    assert_eq!(
        field("Pre-Depends"),
        format!("slurm-wlm-basic-plugins (>= {release}), slurm-wlm-basic-plugins (<< {next}~)")
    );
    assert!(
        field("Version").ends_with(&format!("+slurm{release}")),
        "{}",
        field("Version")
    );
}

/// The files of `deb`, unpacked into a scratch dir of this test (`what`).
fn unpack(deb: &PathBuf, what: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tfc-deb-{what}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = Command::new("dpkg-deb")
        .arg("-x")
        .arg(deb)
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    dir
}

/// The entries of packaging/docs.list: the docs every install ships.
fn doc_entries() -> Vec<String> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(root.join("packaging/docs.list"))
        .unwrap()
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect()
}

/// Every relative link of the Markdown pages under `docdir` resolves to a
/// file under `docdir`; returns how many links the README has.
fn links_resolve_inside(docdir: &std::path::Path) -> usize {
    let docdir = docdir.canonicalize().unwrap();
    let mut pages = vec![docdir.join("README.md")];
    for e in std::fs::read_dir(docdir.join("docs")).unwrap() {
        pages.push(e.unwrap().path());
    }
    let mut readme = 0;
    let mut broken = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        for rest in text.split("](").skip(1) {
            let Some((link, _)) = rest.split_once(')') else {
                continue;
            };
            let file = link.split('#').next().unwrap();
            if file.is_empty() || link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            if page.ends_with("README.md") {
                readme += 1;
            }
            let target = page.parent().unwrap().join(file).canonicalize();
            if !target.is_ok_and(|t| t.starts_with(&docdir)) {
                broken.push(format!("{}: {link}", page.display()));
            }
        }
    }
    assert!(broken.is_empty(), "{broken:#?}");
    readme
}

/// True metadata (no borrowed Homepage, no made-up address) and the docs,
/// uncompressed under their own paths so that the README's links resolve
/// in /usr/share/doc/tf-cluster.
#[test]
fn deb_metadata_and_docs() {
    let deb = only("target/deb", ".deb");
    let control = run("dpkg-deb", &["-f"], &deb);
    assert!(
        control
            .lines()
            .any(|l| l == "Maintainer: tf-cluster developers"),
        "{control}"
    );
    assert!(!control.contains("Homepage:"), "{control}");
    assert!(!control.contains("schedmd"), "{control}");
    assert!(!control.contains("localhost"), "{control}");
    let dir = unpack(&deb, "docs");
    let docdir = dir.join("usr/share/doc/tf-cluster");
    for entry in doc_entries() {
        assert!(docdir.join(&entry).exists(), "{entry} not in the .deb");
    }
    assert!(docdir.join("docs/admin.md").is_file());
    assert!(links_resolve_inside(&docdir) > 20);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn rpm_metadata_and_docs() {
    let rpm = only("target/rpm", ".rpm");
    let meta = run("rpm", &["-qp", "--qf", "%{URL}|%{PACKAGER}"], &rpm);
    assert_eq!(meta, "(none)|(none)");
    let changelog = run("rpm", &["-qp", "--changelog"], &rpm);
    assert!(!changelog.contains("localhost"), "{changelog}");
    // Where this rpm puts them (%{_docdir}/tf-cluster on the RHEL family,
    // tf-cluster-VERSION with Debian's rpm), README.md beside docs/.
    let docs = run("rpm", &["-qdp"], &rpm);
    let readme = docs
        .lines()
        .find(|l| l.ends_with("/README.md"))
        .unwrap_or_else(|| panic!("no README.md in {docs}"));
    let docdir = readme.strip_suffix("README.md").unwrap();
    for want in [
        "docs/admin.md",
        "LICENSE",
        "examples/tensorflow/mwms.sbatch",
    ] {
        assert!(
            docs.lines().any(|l| l == format!("{docdir}{want}")),
            "{want} not in {docs}"
        );
    }
    // Unpacked, every entry of docs.list is under its own path (rpm's %doc
    // would put tests/fixtures at fixtures/) and every link resolves.
    let dir = std::env::temp_dir().join(format!("tfc-rpm-docs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let out = Command::new("sh")
        .arg("-c")
        .arg("rpm2cpio \"$0\" | cpio -idm --quiet")
        .arg(std::fs::canonicalize(&rpm).unwrap())
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let unpacked = dir.join(docdir.trim_start_matches('/'));
    for entry in doc_entries() {
        assert!(unpacked.join(&entry).exists(), "{entry} not under {docdir}");
    }
    assert!(links_resolve_inside(&unpacked) > 20);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The version headings of CHANGELOG.md (`## 0.2.0`), newest first.
fn changelog_versions() -> Vec<String> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(root.join("CHANGELOG.md"))
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("## "))
        .map(str::to_string)
        .collect()
}

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(env!("CARGO_MANIFEST_DIR"))
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn dpkg_compare(a: &str, op: &str, b: &str) -> bool {
    Command::new("dpkg")
        .args(["--compare-versions", a, op, b])
        .status()
        .unwrap()
        .success()
}

/// rpm's own comparison of two versions: -1, 0 or 1.
fn rpm_compare(a: &str, b: &str) -> i32 {
    let out = Command::new("rpm")
        .arg("--eval")
        .arg(format!("%{{lua: print(rpm.vercmp(\"{a}\", \"{b}\"))}}"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// One version per build: the .deb's, the .rpm's, the packaged
/// `tf-cluster --version` and the id the packaged plugin exports say the
/// same; a development build names its commit (it exists, with that many
/// commits behind it); and dpkg and rpm sort it after the previous release
/// of the changelog, before the release it leads to and before a later
/// development build.
#[test]
fn one_version_per_build_in_the_packages_the_cli_and_the_plugin() {
    let deb = only("target/deb", ".deb");
    let (release, _) = release();
    let deb_version = run("dpkg-deb", &["-f"], &deb)
        .lines()
        .find_map(|l| l.strip_prefix("Version: ").map(str::to_string))
        .unwrap();
    let version = deb_version
        .strip_suffix(&format!("+slurm{release}"))
        .unwrap_or_else(|| panic!("{deb_version}: no +slurm{release}"))
        .to_string();

    let dir = unpack(&deb, "version");
    let cli = Command::new(dir.join("usr/bin/tf-cluster"))
        .arg("--version")
        .output()
        .unwrap();
    let cli = String::from_utf8(cli.stdout).unwrap();
    let id = cli
        .trim()
        .strip_prefix("tf-cluster ")
        .unwrap_or_else(|| panic!("--version: {cli}"));
    assert!(
        id.starts_with(&format!("{version} src ")),
        "the .deb is {deb_version}, its tf-cluster --version {cli}"
    );
    let so = std::fs::read(dir.join("usr/lib/x86_64-linux-gnu/slurm-wlm/tf_cluster.so")).unwrap();
    let exported = format!("{id}\0");
    assert!(
        so.windows(exported.len()).any(|w| w == exported.as_bytes()),
        "the packaged plugin does not export the CLI's id {id:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();

    let rpm = only("target/rpm", ".rpm");
    assert_eq!(run("rpm", &["-qp", "--qf", "%{VERSION}"], &rpm), version);

    // The changelog has a section per version, the newest Cargo.toml's.
    let versions = changelog_versions();
    let cargo = env!("CARGO_PKG_VERSION");
    assert_eq!(
        versions.first().map(String::as_str),
        Some(cargo),
        "{versions:?}"
    );
    let previous = &versions[1];

    match version.strip_prefix(&format!("{cargo}~dev.")) {
        Some(dev) => {
            let (count, rev) = dev.split_once(".g").unwrap_or_else(|| panic!("{version}"));
            assert!(rev.len() >= 7, "{version}");
            assert_eq!(
                git(&["rev-list", "--count", rev]).as_deref(),
                Some(count),
                "{version}: not a commit of this repository with {count} commits"
            );
            let next = format!(
                "{cargo}~dev.{}.g0000000000",
                count.parse::<u64>().unwrap() + 1
            );
            for (a, b) in [
                (previous.as_str(), version.as_str()),
                (version.as_str(), cargo),
                (version.as_str(), next.as_str()),
            ] {
                let (da, db) = (format!("{a}+slurm{release}"), format!("{b}+slurm{release}"));
                assert!(dpkg_compare(&da, "lt", &db), "dpkg: {da} is not < {db}");
                assert_eq!(rpm_compare(a, b), -1, "rpm: {a} is not < {b}");
            }
        }
        None => {
            assert_eq!(
                version, cargo,
                "neither the release nor a development build"
            );
            let tags = git(&["tag", "--points-at", "HEAD"]).unwrap_or_default();
            assert!(tags.lines().any(|t| t == format!("v{cargo}")), "{tags}");
            let (dp, dv) = (format!("{previous}+slurm{release}"), deb_version.clone());
            assert!(dpkg_compare(&dp, "lt", &dv), "dpkg: {dp} is not < {dv}");
        }
    }
}
