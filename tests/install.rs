//! `packaging/install.sh` beside a Slurm that is not Debian's: this host's
//! Slurm headers copied under a prefix, as a source build would install
//! them (`./configure --prefix=…/opt/slurm`), with another micro version so
//! that the plugin's `plugin_version` shows which headers it was built
//! against; the install staged with `--destdir`, as an RPM or Spack build
//! does, then put in place, and `tf-cluster doctor` run on the result.
//!
//! The script builds the plugin (cargo, CARGO_TARGET_DIR honoured: the
//! workspace's target dir, so only the plugin crate is rebuilt for the
//! prefix's headers: 25 s on 2 idle cores, 75 s with other builds beside
//! it). The next `cargo build` of the host's plugin rebuilds it for
//! /usr/include again.

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use object::{Object, ObjectSection, ObjectSymbol};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A u32 or a NUL-terminated string an exported symbol of a shared object
/// names, read from the file (never loaded).
fn symbol(so: &[u8], name: &str) -> Option<Vec<u8>> {
    let elf = object::File::parse(so).expect("an ELF file");
    let sym = elf.dynamic_symbols().find(|s| s.name() == Ok(name))?;
    let section = elf.section_by_index(sym.section_index()?).ok()?;
    let data = section.data().ok()?;
    let at = (sym.address() - section.address()) as usize;
    let size = if sym.size() > 0 {
        sym.size() as usize
    } else {
        4
    };
    Some(data[at..at + size].to_vec())
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `bash packaging/install.sh ARGS`, with the test's target dir.
fn install(args: &[&str]) -> Output {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target"));
    Command::new("bash")
        .arg(repo().join("packaging/install.sh"))
        .args(args)
        .env("CARGO_TARGET_DIR", target)
        .env_remove("SLURM_INCLUDE_DIR")
        .output()
        .unwrap()
}

/// Relative link targets `[text](target)` of a Markdown text, the anchor
/// dropped.
fn links(text: &str) -> Vec<&str> {
    text.split("](")
        .skip(1)
        .filter_map(|rest| rest.split_once(')').map(|(target, _)| target))
        .filter(|t| !t.contains("://") && !t.starts_with("mailto:"))
        .map(|t| t.split('#').next().unwrap())
        .filter(|t| !t.is_empty())
        .collect()
}

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files_under(&p, out);
        } else {
            out.push(p);
        }
    }
}

#[test]
fn installs_beside_a_slurm_under_a_prefix() {
    let tmp = std::env::temp_dir().join(format!("tfc-install-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let prefix = tmp.join("opt/slurm");
    let stage = tmp.join("stage");
    let p = prefix.to_str().unwrap().to_string();

    // The prefix's Slurm: this host's headers, micro version 99 (same
    // major.minor, so the same spank.h), and its plugin directory.
    let host = std::env::var("SLURM_INCLUDE_DIR").unwrap_or_else(|_| "/usr/include".into());
    let include = prefix.join("include/slurm");
    std::fs::create_dir_all(&include).unwrap();
    std::fs::create_dir_all(prefix.join("lib/slurm")).unwrap();
    let mut host_version = 0;
    for e in std::fs::read_dir(Path::new(&host).join("slurm")).unwrap() {
        let e = e.unwrap();
        let mut data = std::fs::read_to_string(e.path()).unwrap();
        if e.file_name() == "slurm_version.h" {
            let line = data
                .lines()
                .find(|l| l.starts_with("#define SLURM_VERSION_NUMBER 0x"))
                .unwrap()
                .to_string();
            host_version =
                u32::from_str_radix(line.rsplit("0x").next().unwrap().trim(), 16).unwrap();
            let ours = (host_version & !0xff) | 99;
            data = data.replace(&line, &format!("#define SLURM_VERSION_NUMBER 0x{ours:06x}"));
        }
        std::fs::write(include.join(e.file_name()), data).unwrap();
    }
    let version = (host_version & !0xff) | 99;
    assert_ne!(version, host_version);
    let args = [
        "--slurm-prefix",
        &p,
        "--sysconfdir",
        &format!("{p}/etc"),
        "--prefix",
        &p,
        "--destdir",
        stage.to_str().unwrap(),
    ];

    // --dry-run: the commands, nothing done.
    let mut dry = args.to_vec();
    dry.push("--dry-run");
    let out = install(&dry);
    assert!(out.status.success(), "{}", text(&out));
    let said = text(&out);
    assert!(
        said.lines().any(
            |l| l.starts_with(&format!("env SLURM_INCLUDE_DIR={p}/include "))
                && l.contains("cargo build --release")
        ),
        "{said}"
    );
    assert!(
        said.contains(&format!("{}{p}/lib/slurm/tf_cluster.so", stage.display())),
        "{said}"
    );
    assert!(!stage.exists(), "--dry-run wrote {}", stage.display());

    let out = install(&args);
    assert!(out.status.success(), "{}", text(&out));
    // The plugstack.conf here includes nothing: the script says what to add.
    assert!(
        text(&out).contains(&format!("add 'include {p}/etc/plugstack.conf.d/*.conf'")),
        "{}",
        text(&out)
    );

    // Every file where the prefix's Slurm and the admin's options put it.
    let staged = |path: &str| stage.join(path.trim_start_matches('/'));
    let so_path = format!("{p}/lib/slurm/tf_cluster.so");
    let so = std::fs::read(staged(&so_path)).unwrap();
    let built = u32::from_ne_bytes(
        symbol(&so, "plugin_version").unwrap()[..4]
            .try_into()
            .unwrap(),
    );
    assert_eq!(
        built, version,
        "plugin_version {built:#x}, the prefix's headers {version:#x}"
    );
    assert_eq!(symbol(&so, "plugin_name").unwrap(), b"tf_cluster\0");
    let snippet =
        std::fs::read_to_string(staged(&format!("{p}/etc/plugstack.conf.d/tf-cluster.conf")))
            .unwrap();
    assert!(
        snippet.lines().any(|l| l == format!("required {so_path}")),
        "{snippet}"
    );
    let cli = staged(&format!("{p}/bin/tf-cluster"));
    assert_eq!(
        std::fs::metadata(&cli).unwrap().permissions().mode() & 0o777,
        0o755
    );
    assert_eq!(
        std::fs::read(staged(&format!("{p}/share/man/man1/tf-cluster.1"))).unwrap(),
        std::fs::read(repo().join("cli/tf-cluster.1")).unwrap()
    );

    // The docs of packaging/docs.list, and every relative link of every
    // page shipped resolves inside the installed doc dir.
    let docdir = staged(&format!("{p}/share/doc/tf-cluster"));
    let list = std::fs::read_to_string(repo().join("packaging/docs.list")).unwrap();
    for entry in list
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        assert!(docdir.join(entry).exists(), "{entry} not installed");
    }
    assert!(docdir.join("docs/admin.md").exists());
    let mut shipped = Vec::new();
    files_under(&docdir, &mut shipped);
    let mut broken = BTreeSet::new();
    let mut readme_links = 0;
    for page in shipped
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "md"))
    {
        let text = std::fs::read_to_string(page).unwrap();
        for link in links(&text) {
            if page.ends_with("README.md") {
                readme_links += 1;
            }
            let target = page.parent().unwrap().join(link);
            let inside = target
                .canonicalize()
                .is_ok_and(|t| t.starts_with(docdir.canonicalize().unwrap()));
            if !inside {
                broken.insert(format!("{}: {link}", page.display()));
            }
        }
    }
    assert!(readme_links > 20, "{readme_links} links in the README");
    assert!(broken.is_empty(), "links that do not resolve: {broken:#?}");

    // Put in place (what the package manager does with a staged tree), and
    // the doctor finds it through the prefix's slurm.conf and plugstack.conf.
    let out = Command::new("cp")
        .arg("-a")
        .arg(staged(&format!("{p}/.")))
        .arg(&prefix)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    std::fs::write(
        prefix.join("etc/slurm.conf"),
        format!("PluginDir={p}/lib/slurm\nMpiParams=ports=12000-12999\n"),
    )
    .unwrap();
    std::fs::write(
        prefix.join("etc/plugstack.conf"),
        format!("include {p}/etc/plugstack.conf.d/*.conf\n"),
    )
    .unwrap();
    let out = Command::new(prefix.join("bin/tf-cluster"))
        .arg("doctor")
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("SLURM_CONF", prefix.join("etc/slurm.conf"))
        .output()
        .unwrap();
    let report = text(&out);
    let (major, minor) = (version >> 16, (version >> 8) & 0xff);
    assert!(
        report.contains(&format!("built for Slurm {major}.{minor:02}.99")),
        "{report}"
    );
    assert!(
        report.contains(&format!("tf-cluster.conf:18: required {so_path}")),
        "{report}"
    );
    assert!(report.contains("same build as this CLI"), "{report}");
    assert!(!report.contains("FAIL"), "{report}");
    std::fs::remove_dir_all(&tmp).unwrap();
}
