//! The Debian package on the testbed (every container installed it at start,
//! docker/testbed.sh): removal leaves steps untouched and nothing behind but
//! the admin's edited snippet, reinstalling brings that back, a purge removes
//! it; a package built for another Slurm release is refused by apt and dpkg;
//! `tf-cluster doctor` tells a healthy node from each broken one, and Slurm
//! agrees with its verdict.

use crate::common;

use std::process::{Command, Output};

use common::{HOSTS, PLUGIN, deb, exclusive, on, srun};

const SNIPPET: &str = "/etc/slurm/plugstack.conf.d/tf-cluster.conf";

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `cmd` on `host`, which must succeed; its stdout.
fn ok(host: &str, cmd: &[&str]) -> String {
    let out = on(host, cmd);
    assert!(out.status.success(), "{host}: {cmd:?}: {}", text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn sh(host: &str, script: &str) -> Output {
    on(host, &["sh", "-c", script])
}

/// The testbed's Slurm as `srun --version` says (`24.11.5`), and its MM.mm.
fn slurm_release() -> (String, String) {
    let out = ok("ctl", &["srun", "--version"]);
    let version = out.split_whitespace().last().unwrap().to_string();
    let mut parts = version.split('.');
    let release = format!("{}.{}", parts.next().unwrap(), parts.next().unwrap());
    (version, release)
}

/// The regular files the package holds, from the .deb itself.
fn packaged_files() -> Vec<String> {
    let out = Command::new("dpkg-deb")
        .arg("-c")
        .arg(deb())
        .output()
        .unwrap();
    assert!(out.status.success());
    let files: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with('-'))
        .map(|l| {
            l.split_whitespace()
                .last()
                .unwrap()
                .trim_start_matches('.')
                .to_string()
        })
        .collect();
    assert!(files.contains(&PLUGIN.to_string()), "{files:?}");
    assert!(
        files.contains(&"/usr/bin/tf-cluster".to_string()),
        "{files:?}"
    );
    files
}

fn deb_name() -> String {
    deb().file_name().unwrap().to_string_lossy().into_owned()
}

fn apt_all(args: &str) {
    for host in HOSTS {
        let out = sh(
            host,
            &format!("DEBIAN_FRONTEND=noninteractive apt-get {args} 2>&1"),
        );
        assert!(
            out.status.success(),
            "{host}: apt-get {args}: {}",
            text(&out)
        );
    }
}

fn install_all() {
    apt_all(&format!(
        "install -y --no-install-recommends /opt/tfc-deb/{}",
        deb_name()
    ));
}

/// A 3-task step with --tf-cluster and no reserved ports: it ran, and every
/// task's TF_CONFIG has ports from the site's `port_base`, or without one
/// (None) from the default port range, 20000-29499.
fn assert_plugin_works(port_base: Option<u16>) {
    let run = srun(&["-N3", "-n3", "--resv-ports=0", "--tf-cluster"]);
    run.assert_ran(3);
    let Some(base) = port_base else {
        for task in &run.tasks {
            let tf = task.tf_config.as_ref().expect("TF_CONFIG");
            for address in tf["cluster"]["worker"].as_array().unwrap() {
                let port: u16 = address
                    .as_str()
                    .unwrap()
                    .rsplit(':')
                    .next()
                    .unwrap()
                    .parse()
                    .unwrap();
                assert!((20000..=29499).contains(&port), "{address}");
            }
        }
        return;
    };
    run.assert_tf_config(&[("worker", 3)], base);
}

/// The plugin is gone: plain steps run untouched, --tf-cluster is unknown.
fn assert_plugin_gone() {
    let run = srun(&["-N3", "-n3"]);
    run.assert_ran(3);
    assert!(run.tasks.iter().all(|t| t.tf_config.is_none()));
    let run = srun(&["-N1", "-n1", "--tf-cluster"]);
    assert_ne!(run.code, Some(0));
    assert!(run.tasks.is_empty());
    assert!(
        run.stderr.contains("unrecognized option") && run.stderr.contains("tf-cluster"),
        "{}",
        run.stderr
    );
}

#[test]
fn the_package_is_what_runs_and_names_its_slurm() {
    let _bed = exclusive();
    let (_, release) = slurm_release();
    let deb = deb();
    let field = |f: &str| {
        let out = Command::new("dpkg-deb")
            .args(["-f"])
            .arg(&deb)
            .arg(f)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    // Slurm numbers releases YY.MM: the next one is at least MM+1.
    let (major, minor) = release.split_once('.').unwrap();
    let next = format!("{major}.{:02}", minor.parse::<u32>().unwrap() + 1);
    assert!(
        field("Version").ends_with(&format!("+slurm{release}")),
        "{}",
        field("Version")
    );
    assert_eq!(
        field("Pre-Depends"),
        format!("slurm-wlm-basic-plugins (>= {release}), slurm-wlm-basic-plugins (<< {next}~)")
    );
    let version = field("Version");
    for host in HOSTS {
        let out = ok(
            host,
            &[
                "dpkg-query",
                "-W",
                "-f",
                "${Status} ${Version}",
                "tf-cluster",
            ],
        );
        assert_eq!(out, format!("install ok installed {version}"), "{host}");
        // Every packaged file is there, unmodified.
        ok(host, &["dpkg", "--verify", "tf-cluster"]);
        let snippet = ok(host, &["cat", SNIPPET]);
        assert!(
            snippet.lines().any(|l| l == format!("required {PLUGIN}")),
            "{host}: {snippet}"
        );
    }
    // The default plugstack.conf only includes plugstack.conf.d: the package enabled it.
    let stack = ok("ctl", &["cat", "/etc/slurm/plugstack.conf"]);
    assert!(!stack.contains("tf_cluster"), "{stack}");
    assert_plugin_works(None);
}

/// Should a test fail half-way, the package is put back as the testbed
/// installed it, so that the test binaries after this one are not affected.
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for host in HOSTS {
                sh(host, "apt-get purge -y tf-cluster >/dev/null 2>&1");
            }
            install_all();
        }
    }
}

#[test]
fn remove_reinstall_purge() {
    let _bed = exclusive();
    let _restore = Restore;
    let files = packaged_files();
    // The admin sets a site default in the snippet, on every host.
    for host in HOSTS {
        ok(
            host,
            &[
                "sed",
                "-i",
                "s|^required .*tf_cluster.so$|& port-base=9000|",
                SNIPPET,
            ],
        );
    }
    assert_plugin_works(Some(9000));

    apt_all("remove -y tf-cluster");
    assert_plugin_gone();
    for host in HOSTS {
        for f in &files {
            let out = on(host, &["test", "-e", f]);
            assert!(!out.status.success(), "{host}: {f} left after removal");
        }
        // Only the admin's edited snippet stays, renamed so that Slurm skips it.
        let left = ok(host, &["ls", "-A", "/etc/slurm/plugstack.conf.d"]);
        assert_eq!(left.trim(), "tf-cluster.conf.removed", "{host}");
        let kept = ok(host, &["cat", &format!("{SNIPPET}.removed")]);
        assert!(
            kept.contains(&format!("required {PLUGIN} port-base=9000")),
            "{host}: {kept}"
        );
        assert!(
            !on(host, &["test", "-e", "/var/lib/tf-cluster"])
                .status
                .success()
        );
    }

    // Reinstalling brings the admin's snippet back.
    install_all();
    assert_plugin_works(Some(9000));

    // A purge leaves nothing; a new install is the pristine default.
    apt_all("purge -y tf-cluster");
    for host in HOSTS {
        let left = ok(host, &["ls", "-A", "/etc/slurm/plugstack.conf.d"]);
        assert_eq!(left.trim(), "", "{host}");
        let status = on(host, &["dpkg-query", "-W", "-f", "${Status}", "tf-cluster"]);
        assert!(
            !String::from_utf8_lossy(&status.stdout).contains("installed"),
            "{host}: {}",
            text(&status)
        );
    }
    assert_plugin_gone();
    install_all();
    assert_plugin_works(None);
}

#[test]
fn a_package_for_another_slurm_release_is_refused() {
    let _bed = exclusive();
    let (installed, release) = slurm_release();
    // Another real Slurm release than the testbed's.
    let other = ["22.05", "24.11", "26.05"]
        .into_iter()
        .find(|r| *r != release)
        .unwrap();
    let (major, minor) = other.split_once('.').unwrap();
    let other_next = format!("{major}.{:02}", minor.parse::<u32>().unwrap() + 1);
    let (major, minor) = release.split_once('.').unwrap();
    let next = format!("{major}.{:02}", minor.parse::<u32>().unwrap() + 1);
    // The same package, relabelled for the other release (as deb.sh would
    // label a build against that release's headers).
    let wrong = format!("/tmp/tf-cluster_0+slurm{other}_amd64.deb");
    let script = format!(
        "set -e; rm -rf /tmp/w; dpkg-deb -R /opt/tfc-deb/{deb} /tmp/w; \
         sed -i -e 's/slurm{release}/slurm{other}/; s/(>= {release})/(>= {other})/; s/(<< {next}~)/(<< {other_next}~)/' /tmp/w/DEBIAN/control; \
         grep -q '(>= {other})' /tmp/w/DEBIAN/control; dpkg-deb -b /tmp/w {wrong} >/dev/null",
        deb = deb_name()
    );
    let out = sh("ctl", &script);
    assert!(out.status.success(), "{}", text(&out));
    let before = ok("ctl", &["md5sum", PLUGIN]);

    let apt = sh("ctl", &format!("apt-get install -y {wrong} 2>&1"));
    let said = text(&apt);
    assert_eq!(apt.status.code(), Some(100), "{said}");
    // apt names the pre-dependency and the Slurm installed (Debian's version
    // of it begins with srun's).
    let needle = "tf-cluster : PreDepends: slurm-wlm-basic-plugins (";
    let line = said
        .lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("{said}"));
    assert!(
        (line.contains(other) || line.contains(&other_next))
            && line.contains(&format!(" but {installed}")),
        "{line}"
    );

    let dpkg = sh("ctl", &format!("dpkg -i {wrong} 2>&1"));
    let said = text(&dpkg);
    assert_eq!(dpkg.status.code(), Some(1), "{said}");
    assert!(
        said.contains("pre-dependency problem - not installing tf-cluster"),
        "{said}"
    );

    // Nothing was touched: the package for this Slurm is still there and works.
    assert_eq!(ok("ctl", &["md5sum", PLUGIN]), before);
    ok("ctl", &["dpkg", "--verify", "tf-cluster"]);
    let version = ok(
        "ctl",
        &["dpkg-query", "-W", "-f", "${Version}", "tf-cluster"],
    );
    assert!(version.ends_with(&format!("+slurm{release}")), "{version}");
    assert_plugin_works(None);
    ok("ctl", &["rm", "-rf", "/tmp/w", &wrong]);
}

/// `tf-cluster doctor` on `host`: its exit code and report.
fn doctor(host: &str) -> (Option<i32>, String) {
    let out = on(host, &["tf-cluster", "doctor"]);
    (out.status.code(), text(&out))
}

#[test]
fn doctor_tells_healthy_from_broken() {
    let bed = exclusive();
    let (installed, _) = slurm_release();
    // Healthy, on the submit host and on a node.
    for host in ["ctl", "node1"] {
        let (code, report) = doctor(host);
        assert_eq!(code, Some(0), "{host}: {report}");
        assert!(report.contains(&format!("{SNIPPET}:")), "{report}");
        assert!(report.contains(&format!("required {PLUGIN}")), "{report}");
        assert!(
            report.contains(&format!("this node runs {installed} (srun --version)")),
            "{report}"
        );
        assert!(report.contains("same build as this CLI"), "{report}");
        assert!(report.contains("MpiParams=ports=12000-12999"), "{report}");
        assert!(report.trim_end().ends_with("healthy"), "{report}");
    }

    // A plugin built for another Slurm: a C stand-in whose plugin_version
    // is one major lower, on the submit host.
    let (major, minor) = {
        let mut p = installed.split('.').map(|n| n.parse::<u32>().unwrap());
        (p.next().unwrap(), p.next().unwrap())
    };
    let dir = std::env::temp_dir().join(format!("tfc-doctor-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let c = dir.join("wrong.c");
    std::fs::write(
        &c,
        format!(
            "const char plugin_name[] = \"tf_cluster\"; const char plugin_type[] = \"spank\";\n\
             const unsigned int plugin_version = {};\n",
            (major - 1) << 16 | minor << 8
        ),
    )
    .unwrap();
    let so = dir.join("tf_cluster.so");
    let out = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&so)
        .arg(&c)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let put = Command::new(common::repo().join("docker/testbed.sh"))
        .args(["admin", "sh", "-c", "mkdir -p /opt/wrong && cat >/opt/wrong/tf_cluster.so && chmod 644 /opt/wrong/tf_cluster.so"])
        .stdin(std::fs::File::open(&so).unwrap())
        .output()
        .unwrap();
    assert!(put.status.success(), "{}", text(&put));
    std::fs::remove_dir_all(&dir).unwrap();

    let cases = [
        (
            "required /opt/wrong/tf_cluster.so\n",
            1,
            format!(
                "built for Slurm {}.{minor:02}.0, this node runs {installed}",
                major - 1
            ),
        ),
        (
            "required /opt/nowhere/tf_cluster.so\n",
            1,
            "required /opt/nowhere/tf_cluster.so does not exist: every srun fails".into(),
        ),
        (
            &format!("optional {PLUGIN}\n"),
            2,
            "optional: Slurm ignores the plugin's errors".into(),
        ),
        (
            &format!("required {PLUGIN} port-base=0\n"),
            1,
            "port-base=0".into(),
        ),
    ];
    for (stack, want_code, want) in &cases {
        bed.plugstack(stack);
        let (code, report) = doctor("ctl");
        assert_eq!(code, Some(*want_code), "{stack}: {report}");
        let flagged = report
            .lines()
            .find(|l| l.contains(want.as_str()))
            .unwrap_or_else(|| panic!("{stack}: want {want:?} in {report}"));
        let tag = if *want_code == 1 { "FAIL " } else { "WARN " };
        assert!(flagged.starts_with(tag), "{flagged}");
        // Slurm's own verdict agrees with the doctor's.
        let plain = srun(&["-N1", "-n1"]);
        let tf = srun(&["-N1", "-n1", "--tf-cluster"]);
        match stack.split_whitespace().next().unwrap() {
            _ if stack.contains("/opt/wrong/") => {
                assert_ne!(plain.code, Some(0));
                assert!(
                    plain.stderr.contains("Incompatible plugin version"),
                    "{}",
                    plain.stderr
                );
            }
            _ if stack.contains("/opt/nowhere/") => {
                assert_ne!(plain.code, Some(0));
                assert!(
                    plain.stderr.contains("Failed to load plugin"),
                    "{}",
                    plain.stderr
                );
            }
            "optional" => {
                plain.assert_ran(1);
                tf.assert_ran(1);
            }
            _ => {
                plain.assert_ran(1);
                tf.assert_refused("port-base=0");
            }
        }
    }
    ok("ctl", &["rm", "-rf", "/opt/wrong"]);
}
