//! `packaging/install.sh` beside a running Slurm installed under a prefix:
//! one throwaway container of the testbed's image (not the testbed: one node,
//! its own controller), whose Slurm is moved under /opt/slurm as a source
//! build lays it out, Debian's paths taken away (tests/prefix/
//! slurm-under-prefix.sh), the daemons started from /opt/slurm/sbin. The
//! script installs the plugin built for that Slurm (docker/matrix.sh's build
//! against the image's headers: `--no-build`, the headers under the prefix
//! checked against its `plugin_version`), as docs/admin.md tells an admin;
//! then real steps get TF_CONFIG and the PyTorch variables, `tf-cluster
//! doctor` finds the plugin under the prefix, and no tf_cluster.so is
//! anywhere else.
//!
//! The image has no binutils (install.sh reads `plugin_version` with nm and
//! readelf): this host's are mounted in, with the libraries they load
//! (the host's glibc is older than any suite's, as for the .deb).
//! A container that cannot start, or a Slurm that does not come up, fails
//! the test.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{PROBE, parse_run, plugin_dir, repo};

const P: &str = "/opt/slurm";
const HOST: &str = "prefixnode";
const CONF: &str = "SLURM_CONF=/opt/slurm/etc/slurm.conf";
const PATH: &str = "PATH=/opt/slurm/bin:/opt/slurm/sbin:/usr/sbin:/usr/bin:/sbin:/bin";

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The throwaway container and the host's directory of tools mounted in
/// it, removed when dropped (TFC_KEEP=1 keeps the container).
struct Container(String, PathBuf);

impl Drop for Container {
    fn drop(&mut self) {
        if std::env::var("TFC_KEEP").as_deref() != Ok("1") {
            let _ = Command::new("docker").args(["rm", "-f", &self.0]).output();
        }
        let _ = std::fs::remove_dir_all(&self.1);
    }
}

impl Container {
    /// `docker exec` as `user`, in /tmp, with the prefix's PATH and
    /// slurm.conf, under a time limit.
    fn exec(&self, user: &str, cmd: &[&str]) -> Output {
        Command::new("docker")
            .args(["exec", "-u", user, "-w", "/tmp", "-e", CONF, "-e", PATH])
            .arg(&self.0)
            .args(["timeout", "120"])
            .args(cmd)
            .output()
            .unwrap_or_else(|e| panic!("docker exec {}: {e}", self.0))
    }

    /// [`Container::exec`] as root, which must succeed: its output.
    fn ok(&self, cmd: &[&str]) -> String {
        let out = self.exec("root", cmd);
        assert!(out.status.success(), "{cmd:?}: {}", text(&out));
        text(&out)
    }

    /// The daemons' logs, for a failure message.
    fn logs(&self) -> String {
        text(&self.exec(
            "root",
            &[
                "tail",
                "-n",
                "30",
                "/var/log/slurm/slurmctld.log",
                "/var/log/slurm/slurmd.log",
            ],
        ))
    }
}

/// `dir/bin/nm` and `dir/bin/readelf`: this host's, run with the libraries
/// they load from `dir/lib` (the image has none of them).
fn host_binutils(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
    for d in ["bin", "real", "lib"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    for tool in ["nm", "readelf"] {
        let path = String::from_utf8(
            Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap();
        let path = path.trim();
        assert!(!path.is_empty(), "no {tool} on this host (binutils)");
        std::fs::copy(path, dir.join("real").join(tool)).unwrap();
        let ldd = Command::new("ldd").arg(path).output().unwrap();
        for line in String::from_utf8_lossy(&ldd.stdout).lines() {
            // `libbfd-2.40-system.so => /lib/…/libbfd-2.40-system.so (0x…)`;
            // glibc's own are the container's.
            let Some((name, rest)) = line.trim().split_once(" => ") else {
                continue;
            };
            if name.starts_with("libc.so") || name.starts_with("ld-linux") {
                continue;
            }
            let lib = rest.split_whitespace().next().unwrap();
            std::fs::copy(lib, dir.join("lib").join(name)).unwrap();
        }
        let wrapper = dir.join("bin").join(tool);
        std::fs::write(
            &wrapper,
            format!(
                "#!/bin/sh\nLD_LIBRARY_PATH=/tfc-tools/lib exec /tfc-tools/real/{tool} \"$@\"\n"
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// Starts the container and Slurm under the prefix in it.
fn start() -> Container {
    let suite = std::env::var("TFC_SUITE").unwrap_or_else(|_| "bookworm".into());
    let image = std::env::var("TFC_IMAGE").unwrap_or_else(|_| format!("tfc-node:{suite}"));
    let name = format!(
        "{}-prefix",
        std::env::var("TFC_PREFIX").unwrap_or_else(|_| "tfc".into())
    );
    // The plugin and CLI built for this suite's Slurm: CARGO_TARGET_DIR's
    // release/ (docker/matrix.sh: target/slurm-SUITE).
    let target: PathBuf = plugin_dir().parent().unwrap().to_path_buf();
    let tools = std::env::temp_dir().join(format!("tfc-prefix-tools-{}", std::process::id()));
    host_binutils(&tools);
    let _ = Command::new("docker").args(["rm", "-f", &name]).output();
    let mount = |from: &Path, to: &str| format!("{}:{to}:ro", from.display());
    let out = Command::new("docker")
        .args(["run", "-d", "--rm", "--name", &name, "--hostname", HOST])
        .args(["--label", "tfc.testbed=1"])
        .args(["-v", &mount(&repo(), "/src")])
        .args(["-v", &mount(&target, "/tfc-target")])
        .args(["-v", &mount(&tools, "/tfc-tools")])
        .args([
            "--entrypoint",
            "/usr/bin/tini",
            &image,
            "--",
            "sleep",
            "infinity",
        ])
        .output()
        .expect("docker run");
    assert!(
        out.status.success(),
        "the container did not start: {}",
        text(&out)
    );
    let c = Container(name, tools);
    let out = c.exec("root", &["bash", "/src/tests/prefix/slurm-under-prefix.sh"]);
    assert!(
        out.status.success(),
        "Slurm under {P} did not come up: {}",
        text(&out)
    );
    c
}

#[test]
fn install_sh_beside_a_running_slurm_under_a_prefix() {
    let c = start();
    // Nothing of Debian's Slurm is left where its packages put it.
    c.ok(&[
        "sh",
        "-c",
        "! ls -d /usr/lib/x86_64-linux-gnu/slurm-wlm /etc/slurm /usr/include/slurm \
         /usr/bin/srun /usr/sbin/slurmd 2>/dev/null",
    ]);

    // As docs/admin.md says for a source build under /opt/slurm (the build
    // done: --no-build checks it against the prefix's headers).
    let out = c.exec(
        "root",
        &[
            "env",
            "CARGO_TARGET_DIR=/tfc-target",
            "PATH=/tfc-tools/bin:/opt/slurm/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "bash",
            "/src/packaging/install.sh",
            "--slurm-prefix",
            P,
            "--prefix",
            P,
            "--no-build",
        ],
    );
    let said = text(&out);
    assert!(out.status.success(), "install.sh: {said}");
    assert!(
        said.contains(&format!("add 'include {P}/etc/plugstack.conf.d/*.conf'")),
        "{said}"
    );
    c.ok(&[
        "sh",
        "-c",
        &format!("echo 'include {P}/etc/plugstack.conf.d/*.conf' >>{P}/etc/plugstack.conf"),
    ]);

    // Where the prefix's Slurm reads it, and nowhere else.
    let so = format!("{P}/lib/slurm/tf_cluster.so");
    let found = c.ok(&[
        "find",
        "/",
        "-xdev",
        "(",
        "-name",
        "tf_cluster.so*",
        "-o",
        "-name",
        "tf-cluster",
        "-type",
        "f",
        ")",
    ]);
    let mut found: Vec<&str> = found.lines().collect();
    found.sort();
    assert_eq!(found, [format!("{P}/bin/tf-cluster"), so.clone()]);
    let snippet = c.ok(&["cat", &format!("{P}/etc/plugstack.conf.d/tf-cluster.conf")]);
    assert!(
        snippet
            .lines()
            .any(|l| l == format!("required {so}") || l.starts_with(&format!("required {so} "))),
        "{snippet}"
    );

    // Real steps, as alice, with the prefix's srun; each task's output in a
    // file of its own, printed rank by rank afterwards.
    let per_task = |args: &[&str]| {
        let mut cmd = vec![
            "bash",
            "-c",
            "d=$(mktemp -d); srun --output=\"$d/%t\" \"$@\"; rc=$?; for t in 0 1; do cat \"$d/$t\"; done; rm -rf \"$d\"; exit $rc",
            "per-task",
        ];
        cmd.extend_from_slice(args);
        c.exec("alice", &cmd)
    };
    let run = parse_run(per_task(&[
        "-n2",
        "--tf-cluster=worker:2",
        "bash",
        "-c",
        PROBE,
    ]));
    if run.code != Some(0) {
        panic!("srun --tf-cluster: {}\n{}", run.stderr, c.logs());
    }
    run.assert_ran(2).assert_tf_config(&[("worker", 2)], 8888);
    assert_eq!(run.hosts(), [HOST, HOST]);

    let torch = per_task(&[
        "-n2",
        "--torch-cluster",
        "bash",
        "-c",
        r#"printf 'T\t%s\t%s\t%s\t%s\t%s\n' "$SLURM_PROCID" "${MASTER_ADDR-}" "${MASTER_PORT-}" "${RANK-}" "${WORLD_SIZE-}""#,
    ]);
    assert!(
        torch.status.success(),
        "srun --torch-cluster: {}",
        text(&torch)
    );
    let mut lines: Vec<Vec<String>> = String::from_utf8_lossy(&torch.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("T\t"))
        .map(|l| l.split('\t').map(str::to_string).collect())
        .collect();
    lines.sort();
    assert_eq!(lines.len(), 2, "{}", text(&torch));
    for (rank, f) in lines.iter().enumerate() {
        assert_eq!(f[0], rank.to_string(), "{f:?}");
        assert_eq!(f[1], HOST, "MASTER_ADDR: {f:?}");
        assert!(f[2].parse::<u16>().is_ok(), "MASTER_PORT: {f:?}");
        assert_eq!(f[2], lines[0][2], "one MASTER_PORT: {lines:?}");
        assert_eq!(f[3], rank.to_string(), "RANK: {f:?}");
        assert_eq!(f[4], "2", "WORLD_SIZE: {f:?}");
    }

    // The doctor, with the prefix's slurm.conf, finds the plugin there.
    let doctor = c.exec("root", &["tf-cluster", "doctor"]);
    let report = text(&doctor);
    assert_eq!(doctor.status.code(), Some(0), "{report}");
    assert!(
        report.contains(&format!("{P}/etc/plugstack.conf.d/tf-cluster.conf:")),
        "{report}"
    );
    assert!(
        report.contains(&format!("{P}/etc/plugstack.conf (PlugStackConfig)")),
        "{report}"
    );
    assert!(report.contains(&format!("required {so}")), "{report}");
    let version = c.ok(&["srun", "--version"]);
    let version = version.split_whitespace().last().unwrap();
    assert!(
        report.contains(&format!(
            "built for Slurm {version}, this node runs {version}"
        )),
        "{report}"
    );
    assert!(report.contains("same build as this CLI"), "{report}");
    assert!(report.trim_end().ends_with("healthy"), "{report}");
    assert!(!report.contains("/etc/slurm/"), "{report}");
    assert!(!report.contains("slurm-wlm"), "{report}");
}
