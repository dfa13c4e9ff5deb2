//! `tf-cluster launcher-env`: what a shell gets from its output, and its exit
//! codes, with a site's slurm.conf and plugstack.conf in a temporary directory.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A directory with slurm.conf naming plugstack.conf, which loads `so` (a
/// file named like the plugin; its ELF symbols are not read when it has none).
fn site(name: &str, so: Option<&str>) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tfc-launcher-env-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let plugstack = dir.join("plugstack.conf");
    std::fs::write(
        dir.join("slurm.conf"),
        format!("ClusterName=t\nPlugStackConfig={}\n", plugstack.display()),
    )
    .unwrap();
    let line = match so {
        Some(so) => {
            std::fs::write(dir.join(so), b"").unwrap();
            format!("required {}\n", dir.join(so).display())
        }
        None => String::new(),
    };
    std::fs::write(&plugstack, line).unwrap();
    dir
}

/// `sh -c 'eval "$(tf-cluster launcher-env ARGS)"; env'` with SLURM_CONF in `dir`.
fn eval_in_sh(dir: &Path, args: &str) -> Output {
    let bin = env!("CARGO_BIN_EXE_tf-cluster");
    Command::new("sh")
        .arg("-c")
        .arg(format!(
            "eval \"$('{bin}' launcher-env {args})\"; echo rc=$?; env"
        ))
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("SLURM_CONF", dir.join("slurm.conf"))
        .output()
        .unwrap()
}

fn var<'a>(stdout: &'a str, name: &str) -> Option<&'a str> {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix('='))
}

#[test]
fn eval_sets_the_variables_slurm_reads() {
    let dir = site("ok", Some("tf_cluster.so"));
    let out = eval_in_sh(
        &dir,
        "--torch-cluster --tf-host-template='{}-ib' --tf-cluster=ps:1,worker:3",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("rc=0"), "{stdout}");
    let p = "SLURM_SPANK__SLURM_SPANK_OPTION_tf_cluster_";
    assert_eq!(
        var(&stdout, &format!("{p}torch_cluster")),
        Some(""),
        "{stdout}"
    );
    assert_eq!(
        var(&stdout, &format!("{p}tf_host_template")),
        Some("{}-ib"),
        "{stdout}"
    );
    assert_eq!(
        var(&stdout, &format!("{p}tf_cluster")),
        Some("ps:1,worker:3"),
        "{stdout}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn without_the_plugin_here_it_warns_and_exits_2() {
    let dir = site("none", None);
    let out = Command::new(env!("CARGO_BIN_EXE_tf-cluster"))
        .args(["launcher-env", "--jax-cluster"])
        .env_clear()
        .env("SLURM_CONF", dir.join("slurm.conf"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with(&format!(
            "tf-cluster: no line of {} (includes followed) loads tf-cluster here",
            dir.join("plugstack.conf").display()
        )),
        "{stderr}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("export SLURM_SPANK__SLURM_SPANK_OPTION_tf_cluster_jax_cluster=\n"),
        "{stdout}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_bad_value_prints_nothing_and_exits_1() {
    let dir = site("bad", Some("tf_cluster.so"));
    let out = Command::new(env!("CARGO_BIN_EXE_tf-cluster"))
        .args(["launcher-env", "--tf-cluster=ps:1,,worker:3"])
        .env_clear()
        .env("SLURM_CONF", dir.join("slurm.conf"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("tf-cluster: "), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    std::fs::remove_dir_all(dir).unwrap();
}
