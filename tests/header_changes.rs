//! One target directory, two Slurms: the plugin built for one release's
//! headers, then packaged again after another release's headers replaced them
//! in the same include directory with their package's old modification time
//! (as `docker/testbed.sh headers` copies a rebuilt image's, `cp -a`, `tar`),
//! so that cargo's comparison of times sees nothing newer. The package must
//! hold a plugin whose `plugin_version` is the headers' it names, or not be
//! made at all.
//!
//! The second Slurm is this host's headers with the next minor release in
//! slurm_version.h (below every release that changes build.rs's cfgs), so the
//! test needs no other suite's headers. It builds the plugin crate twice in
//! the workspace's target dir (release, as packaging/deb.sh does); the next
//! `cargo build --release` rebuilds it for the host's headers.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use object::{Object, ObjectSection, ObjectSymbol};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The u32 the exported `plugin_version` of a shared object holds, read from
/// the file (as `tf-cluster doctor` reads it, cli/src/elf.rs).
fn plugin_version(so: &Path) -> u32 {
    let data = std::fs::read(so).unwrap_or_else(|e| panic!("{}: {e}", so.display()));
    let elf = object::File::parse(&*data).expect("an ELF file");
    let sym = elf
        .dynamic_symbols()
        .find(|s| s.name() == Ok("plugin_version"))
        .unwrap_or_else(|| panic!("{}: no plugin_version", so.display()));
    let section = elf.section_by_index(sym.section_index().unwrap()).unwrap();
    let at = (sym.address() - section.address()) as usize;
    let bytes = &section.data().unwrap()[at..at + 4];
    u32::from_ne_bytes(bytes.try_into().unwrap())
}

/// `bash packaging/deb.sh OUT` against the headers in `include`, in `target`.
fn deb(include: &Path, target: &Path, out: &Path, env: &[(&str, &str)]) -> Output {
    Command::new("bash")
        .arg(repo().join("packaging/deb.sh"))
        .arg(out)
        .env("SLURM_INCLUDE_DIR", include)
        .env("CARGO_TARGET_DIR", target)
        .env_remove("TFC_DEB_NO_BUILD")
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

/// The plugin_version of the one .deb in `out`, and the .deb's name.
fn packaged_version(out: &Path) -> (u32, String) {
    let debs: Vec<PathBuf> = std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "deb"))
        .collect();
    assert_eq!(debs.len(), 1, "{debs:?}");
    let root = out.join("root");
    let x = Command::new("dpkg-deb")
        .arg("-x")
        .arg(&debs[0])
        .arg(&root)
        .output()
        .unwrap();
    assert!(x.status.success(), "{}", text(&x));
    let so = std::fs::read_dir(root.join("usr/lib"))
        .unwrap()
        .map(|e| e.unwrap().path().join("slurm-wlm/tf_cluster.so"))
        .find(|p| p.exists())
        .expect("tf_cluster.so in the package");
    let name = debs[0].file_name().unwrap().to_string_lossy().into_owned();
    (plugin_version(&so), name)
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tfc-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn release(v: u32) -> String {
    format!("{}.{:02}", v >> 16, (v >> 8) & 255)
}

#[test]
fn a_package_after_the_headers_change_with_old_times_holds_the_new_release() {
    let tmp = scratch("header-changes");
    let host = std::env::var("SLURM_INCLUDE_DIR").unwrap_or_else(|_| "/usr/include".into());
    let include = tmp.join("include");
    std::fs::create_dir_all(&include).unwrap();
    // The first Slurm: the host's headers, their times kept.
    let cp = Command::new("cp")
        .arg("-a")
        .arg(Path::new(&host).join("slurm"))
        .arg(&include)
        .output()
        .unwrap();
    assert!(cp.status.success(), "{}", text(&cp));
    let version_h = include.join("slurm/slurm_version.h");
    let header = std::fs::read_to_string(&version_h).unwrap();
    let line = header
        .lines()
        .find(|l| l.starts_with("#define SLURM_VERSION_NUMBER 0x"))
        .unwrap()
        .to_string();
    let first = u32::from_str_radix(line.rsplit("0x").next().unwrap().trim(), 16).unwrap();
    let second = first + 0x100;
    let target = repo().join("target");
    let t0 = std::time::Instant::now();
    let one = deb(&include, &target, &tmp.join("one"), &[]);
    assert!(one.status.success(), "{}", text(&one));
    let first_build = t0.elapsed();
    assert_eq!(packaged_version(&tmp.join("one")).0, first);

    // The second Slurm in the same directory, with the first's old time.
    let old = std::fs::metadata(&version_h).unwrap().modified().unwrap();
    std::fs::write(
        &version_h,
        header.replace(
            &line,
            &format!("#define SLURM_VERSION_NUMBER 0x{second:06x}"),
        ),
    )
    .unwrap();
    std::fs::File::options()
        .write(true)
        .open(&version_h)
        .unwrap()
        .set_modified(old)
        .unwrap();
    let t1 = std::time::Instant::now();
    let two = deb(&include, &target, &tmp.join("two"), &[]);
    let second_build = t1.elapsed();
    eprintln!("first build {first_build:?}, second {second_build:?}");
    assert!(two.status.success(), "{}", text(&two));
    let (built, name) = packaged_version(&tmp.join("two"));
    assert!(
        name.contains(&format!("+slurm{}_", release(second))),
        "{name}"
    );
    assert_eq!(
        built, second,
        "{name} holds a plugin for Slurm {:#08x}, built for the headers before they changed",
        built
    );
    std::fs::remove_dir_all(&tmp).unwrap();
}

/// deb.sh packages what the target dir holds (`TFC_DEB_NO_BUILD=1`) only if
/// its plugin was built for the headers: a .so exporting another
/// `plugin_version` is refused in one line, and no package is made.
/// (The stand-ins are ELF files, as deb.sh reads the libraries they need.)
#[test]
fn no_package_holds_a_plugin_of_another_release_than_its_name() {
    let tmp = scratch("deb-refuses");
    let host = std::env::var("SLURM_INCLUDE_DIR").unwrap_or_else(|_| "/usr/include".into());
    let text_h = std::fs::read_to_string(Path::new(&host).join("slurm/slurm_version.h")).unwrap();
    let hex = text_h
        .lines()
        .find_map(|l| l.strip_prefix("#define SLURM_VERSION_NUMBER 0x"))
        .unwrap();
    let headers = u32::from_str_radix(hex.trim(), 16).unwrap();
    let other = headers + 0x100;
    // What a build for `other` leaves in a target dir: a shared object
    // exporting plugin_version (cc) and a CLI that tells its version.
    let built = tmp.join("target/release");
    std::fs::create_dir_all(&built).unwrap();
    let c = tmp.join("plugin.c");
    std::fs::write(
        &c,
        format!("const unsigned int plugin_version = 0x{other:06x};\n"),
    )
    .unwrap();
    let cc = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(built.join("libtf_cluster.so"))
        .arg(&c)
        .output()
        .unwrap();
    assert!(cc.status.success(), "{}", text(&cc));
    assert_eq!(plugin_version(&built.join("libtf_cluster.so")), other);
    let cli_c = tmp.join("cli.c");
    std::fs::write(
        &cli_c,
        "#include <stdio.h>\nint main(void) { puts(\"tf-cluster 0.2.0\"); return 0; }\n",
    )
    .unwrap();
    let cc = Command::new("cc")
        .arg("-o")
        .arg(built.join("tf-cluster"))
        .arg(&cli_c)
        .output()
        .unwrap();
    assert!(cc.status.success(), "{}", text(&cc));
    let out = tmp.join("deb");
    let run = deb(
        Path::new(&host),
        &tmp.join("target"),
        &out,
        &[("TFC_DEB_NO_BUILD", "1")],
    );
    assert_eq!(run.status.code(), Some(1), "{}", text(&run));
    let stderr = String::from_utf8_lossy(&run.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    let want = format!(
        "was built for Slurm {}.{}, not {}.{}",
        release(other),
        other & 255,
        release(headers),
        headers & 255
    );
    assert!(
        lines.len() == 1 && lines[0].starts_with("deb: error: ") && lines[0].contains(&want),
        "want one line saying {want:?}: {stderr}"
    );
    let made = std::fs::read_dir(&out).map(|d| d.count()).unwrap_or(0);
    assert_eq!(made, 0, "a package was made in {}", out.display());
    std::fs::remove_dir_all(&tmp).unwrap();
}
