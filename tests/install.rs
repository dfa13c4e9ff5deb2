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
    install_from(&target, args, &[])
}

/// `bash packaging/install.sh ARGS` with `target` as CARGO_TARGET_DIR and
/// more variables.
fn install_from(target: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new("bash")
        .arg(repo().join("packaging/install.sh"))
        .args(args)
        .env("CARGO_TARGET_DIR", target)
        .env_remove("SLURM_INCLUDE_DIR")
        .env_remove("CARGO")
        .envs(env.iter().copied())
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
    // The plugin's GPU probe execs the CLI where this install put it (not
    // the packages' /usr/bin/tf-cluster, which is not there).
    let cli_path = format!("{p}/bin/tf-cluster");
    assert!(
        so.windows(cli_path.len()).any(|w| w == cli_path.as_bytes()),
        "the plugin does not name {cli_path}"
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
    // No Slurm command on PATH: this machine's own srun (if any) is not the
    // prefix's, and must not decide the report.
    let no_slurm = tmp.join("empty-bin");
    std::fs::create_dir_all(&no_slurm).unwrap();
    let out = Command::new(prefix.join("bin/tf-cluster"))
        .arg("doctor")
        .env_clear()
        .env("PATH", &no_slurm)
        .env("SLURM_CONF", prefix.join("etc/slurm.conf"))
        .output()
        .unwrap();
    let report = text(&out);
    let (major, minor) = (version >> 16, (version >> 8) & 0xff);
    assert!(
        report.contains(&format!("built for Slurm {major}.{minor:02}.99")),
        "{report}"
    );
    // The snippet's line that loads it (its number: the example's comments
    // above it).
    let loads = format!(": required {so_path}");
    assert!(
        report
            .lines()
            .any(|l| l.contains("/tf-cluster.conf:") && l.ends_with(&loads)),
        "{report}"
    );
    assert!(report.contains("same build as this CLI"), "{report}");
    assert!(!report.contains("FAIL"), "{report}");
    std::fs::remove_dir_all(&tmp).unwrap();
}

/// A Slurm of release `version` under `prefix`, as install.sh sees one: the
/// three headers it checks (`slurm_version.h` saying `version`) and the
/// plugin directory.
fn fake_slurm(prefix: String, version: u32) -> String {
    let include = Path::new(&prefix).join("include/slurm");
    std::fs::create_dir_all(&include).unwrap();
    std::fs::create_dir_all(Path::new(&prefix).join("lib/slurm")).unwrap();
    std::fs::write(include.join("spank.h"), "").unwrap();
    std::fs::write(include.join("slurm.h"), "").unwrap();
    std::fs::write(
        include.join("slurm_version.h"),
        format!("#define SLURM_VERSION_NUMBER 0x{version:06x}\n"),
    )
    .unwrap();
    prefix
}

/// What `cargo build --release` leaves in `target` for install.sh, made in a
/// moment: a shared object exporting `plugin_version` = `version` (cc), and
/// a CLI.
fn fake_build(target: &Path, version: u32) {
    let release = target.join("release");
    std::fs::create_dir_all(&release).unwrap();
    let c = release.join("plugin.c");
    std::fs::write(
        &c,
        format!("const unsigned int plugin_version = 0x{version:06x};\n"),
    )
    .unwrap();
    let out = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(release.join("libtf_cluster.so"))
        .arg(&c)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    std::fs::write(release.join("tf-cluster"), "#!/bin/sh\n").unwrap();
}

/// A scratch directory of its own for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tfc-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A scratch directory with a build for [`VERSION`] in its `target`.
fn with_build(name: &str) -> (PathBuf, PathBuf) {
    let tmp = scratch(name);
    let target = tmp.join("target");
    fake_build(&target, VERSION);
    (tmp, target)
}

/// The lines of an output's stderr.
fn stderr_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .map(str::to_string)
        .collect()
}

/// The fake Slurm's release: 24.11.5.
const VERSION: u32 = 0x180b05;

/// A path plugstack.conf cannot hold (Slurm splits its lines at blanks, cuts
/// them at '#', reads 4095 bytes of a line and globs an include line; a
/// path with sed's or the shell's specials is refused with them) is refused
/// in one line before anything is built or written, by --dry-run too: the
/// plugin's directory (given or found under --slurm-prefix) and the
/// snippet's (--sysconfdir, or found under --slurm-prefix).
#[test]
fn refuses_a_path_plugstack_conf_cannot_hold_before_writing_anything() {
    let (tmp, target) = with_build("install-paths");
    let t = tmp.to_str().unwrap();
    let spaced = fake_slurm(format!("{t}/opt/my slurm"), VERSION);
    let plain = fake_slurm(format!("{t}/opt/slurm"), VERSION);
    // A cargo that leaves a mark when it is run.
    let ran = tmp.join("cargo-ran");
    let cargo = tmp.join("cargo");
    std::fs::write(&cargo, format!("#!/bin/sh\ntouch '{}'\n", ran.display())).unwrap();
    std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o755)).unwrap();
    let long = format!("{t}/{}", "d".repeat(4090));
    let dir = |name: &str| vec!["--plugin-dir".to_string(), format!("{t}/{name}")];
    let conf = |name: &str| vec!["--sysconfdir".to_string(), format!("{t}/{name}")];
    // Each case: its arguments, the option the message names, what it says
    // the path has.
    let cases: Vec<(Vec<String>, &str, &str)> = vec![
        (
            vec!["--slurm-prefix".into(), spaced.clone()],
            "--plugin-dir",
            "has a blank",
        ),
        (
            vec![
                "--slurm-prefix".into(),
                spaced.clone(),
                "--plugin-dir".into(),
                format!("{plain}/lib/slurm"),
            ],
            "--sysconfdir",
            "has a blank",
        ),
        (dir("a&b"), "--plugin-dir", "has '&'"),
        (dir("a#b"), "--plugin-dir", "has '#'"),
        (dir("a\tb"), "--plugin-dir", "has a tab"),
        (dir("a\nb"), "--plugin-dir", "has a line break"),
        (dir("a\\1b"), "--plugin-dir", "has '\\'"),
        (dir("$(id)"), "--plugin-dir", "has '$'"),
        (dir("a|b"), "--plugin-dir", "has '|'"),
        (dir("a'b"), "--plugin-dir", "has '''"),
        (dir("sl\u{e9}"), "--plugin-dir", "has the byte"),
        (conf("etc*"), "--sysconfdir", "has '*'"),
        (conf("etc[1]"), "--sysconfdir", "has '['"),
        (
            vec!["--plugin-dir".into(), long],
            "--plugin-dir",
            "bytes long",
        ),
    ];
    let stage = tmp.join("stage");
    for (given, option, has) in cases {
        for dry in [false, true] {
            let mut args: Vec<String> = vec![];
            if !given.iter().any(|a| a == "--slurm-prefix") {
                args.extend(["--slurm-prefix".into(), plain.clone()]);
            }
            args.extend(given.iter().cloned());
            args.extend([
                "--prefix".into(),
                format!("{t}/usr"),
                "--destdir".into(),
                stage.to_str().unwrap().into(),
            ]);
            if dry {
                args.push("--dry-run".into());
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let out = install_from(&target, &args, &[("CARGO", cargo.to_str().unwrap())]);
            let case = format!("{given:?} dry-run {dry}");
            assert_eq!(out.status.code(), Some(1), "{case}: {}", text(&out));
            assert!(out.stdout.is_empty(), "{case}: {}", text(&out));
            let lines = stderr_lines(&out);
            assert_eq!(lines.len(), 1, "{case}: {}", text(&out));
            assert!(
                lines[0].starts_with("install: error: ")
                    && lines[0].contains(has)
                    && lines[0].contains(&format!("give {option} ")),
                "{case}: {}",
                lines[0]
            );
            assert!(!stage.exists(), "{case}: wrote {}", stage.display());
            assert!(!ran.exists(), "{case}: cargo ran");
        }
    }
    std::fs::remove_dir_all(&tmp).unwrap();
}

/// Paths plugstack.conf holds are written there as given, beside a prefix
/// whose name only the shell and sed would mind (it is not in
/// plugstack.conf): the snippet is plugstack.conf.example with the plugin's
/// path on its line.
#[test]
fn writes_the_plugin_s_path_as_given() {
    let (tmp, target) = with_build("install-written");
    let t = tmp.to_str().unwrap();
    let slurm = fake_slurm(format!("{t}/spack/slurm-24.11.5+pmix@x=y,z:1"), VERSION);
    let prefix = format!("{t}/tools & more #1/a\\b");
    let stage = tmp.join("stage");
    let args = [
        "--slurm-prefix",
        &slurm,
        "--prefix",
        &prefix,
        "--destdir",
        stage.to_str().unwrap(),
        "--no-build",
    ];
    let out = install_from(&target, &args, &[]);
    assert!(out.status.success(), "{}", text(&out));
    let staged = |path: &str| stage.join(path.trim_start_matches('/'));
    let snippet = std::fs::read_to_string(staged(&format!(
        "{slurm}/etc/plugstack.conf.d/tf-cluster.conf"
    )))
    .unwrap();
    let example = std::fs::read_to_string(repo().join("plugstack.conf.example")).unwrap();
    let plugin_line = format!("required {slurm}/lib/slurm/tf_cluster.so");
    assert_eq!(
        snippet.lines().collect::<Vec<_>>(),
        example
            .lines()
            .map(|l| match l.starts_with("required ") {
                true => plugin_line.as_str(),
                false => l,
            })
            .collect::<Vec<_>>()
    );
    assert!(staged(&format!("{slurm}/lib/slurm/tf_cluster.so")).is_file());
    assert!(staged(&format!("{prefix}/bin/tf-cluster")).is_file());
    assert!(staged(&format!("{prefix}/share/man/man1/tf-cluster.1")).is_file());
    assert!(staged(&format!("{prefix}/share/doc/tf-cluster/docs/admin.md")).is_file());
    let said = text(&out);
    assert!(
        said.contains(&format!(
            "add 'include {slurm}/etc/plugstack.conf.d/*.conf' to {slurm}/etc/plugstack.conf"
        )),
        "{said}"
    );
    // With that include line in plugstack.conf, the script does not ask for it.
    std::fs::write(
        staged(&format!("{slurm}/etc/plugstack.conf")),
        format!("  include {slurm}/etc/plugstack.conf.d/*.conf\n"),
    )
    .unwrap();
    let again = install_from(&target, &args, &[]);
    assert!(again.status.success(), "{}", text(&again));
    assert!(
        !text(&again).contains("to enable the plugin"),
        "{}",
        text(&again)
    );
    std::fs::remove_dir_all(&tmp).unwrap();
}

/// `--dry-run` makes every check the real run makes, and fails as it does:
/// a build for another Slurm, a build missing, cargo missing.
#[test]
fn dry_run_fails_where_the_real_run_fails() {
    let tmp = scratch("install-dry");
    let t = tmp.to_str().unwrap();
    let slurm = fake_slurm(format!("{t}/opt/slurm"), VERSION);
    let other = tmp.join("other");
    fake_build(&other, VERSION + 0x100);
    let ours = tmp.join("ours");
    fake_build(&ours, VERSION);
    let empty = tmp.join("empty");
    let stage = tmp.join("stage");
    let usr = format!("{t}/usr");
    let base = [
        "--slurm-prefix",
        &slurm,
        "--prefix",
        &usr,
        "--destdir",
        stage.to_str().unwrap(),
    ];
    let run = |target: &Path, more: &[&str], env: &[(&str, &str)]| {
        let mut args = base.to_vec();
        args.extend_from_slice(more);
        install_from(target, &args, env)
    };
    let none: &[(&str, &str)] = &[];
    for (case, target, more, env, says) in [
        (
            "built for another Slurm",
            &other,
            &["--no-build"][..],
            none,
            "was built for Slurm 24.12.5, not 24.11.5: build again",
        ),
        ("not built", &empty, &["--no-build"][..], none, "is missing"),
        (
            "no cargo",
            &ours,
            &[][..],
            &[("CARGO", "/nonexistent/cargo")][..],
            "/nonexistent/cargo not found",
        ),
    ] {
        let real = run(target, more, env);
        let mut dry_args = more.to_vec();
        dry_args.push("--dry-run");
        let dry = run(target, &dry_args, env);
        for (mode, out) in [("real", &real), ("dry-run", &dry)] {
            assert_eq!(out.status.code(), Some(1), "{case}, {mode}: {}", text(out));
            let last = stderr_lines(out).pop().unwrap_or_default();
            assert!(
                last.starts_with("install: error: ") && last.contains(says),
                "{case}, {mode}: {}",
                text(out)
            );
            assert!(!stage.exists(), "{case}, {mode}: wrote {}", stage.display());
        }
        assert_eq!(stderr_lines(&real), stderr_lines(&dry), "{case}");
    }
    // A build for this Slurm: the dry run passes and writes nothing.
    let dry = run(&ours, &["--no-build", "--dry-run"], none);
    assert!(dry.status.success(), "{}", text(&dry));
    assert!(!stage.exists());
    std::fs::remove_dir_all(&tmp).unwrap();
}
