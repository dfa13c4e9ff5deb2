//! tf-cluster: a Slurm SPANK plugin that gives every task of
//! `srun --tf-cluster=ps:1,worker:3 …` its TF_CONFIG and CUDA_VISIBLE_DEVICES.
//!
//! [`core`] computes them from the step's facts and is plain Rust; `spank` is
//! the thin shell slurmstepd and srun call into.

use tf_cluster_core as core;
mod build_id;
mod spank;

/// The build's version (buildinfo.rs, included by build.rs and cli/build.rs),
/// from real git repositories made here.
#[cfg(test)]
mod build_version {
    #![allow(dead_code)]
    include!("../buildinfo.rs");

    use std::path::Path;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) {
        let out = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                "commit.gpgsign=false",
            ])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    }

    fn rev(dir: &Path) -> String {
        let out = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["rev-parse", "--short=10", "HEAD"])
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    /// A tarball (no .git) is the release; a checkout at the release's tag
    /// too; two commits later a development build naming its commit, which
    /// dpkg sorts before the release.
    #[test]
    fn release_tag_tarball_and_development_builds() {
        let dir = std::env::temp_dir().join(format!("tfc-version-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(version(&dir, "3.1.0"), "3.1.0");
        git(&dir, &["init", "-q"]);
        git(&dir, &["commit", "-q", "--allow-empty", "-m", "one"]);
        assert_eq!(
            version(&dir, "3.1.0"),
            format!("3.1.0~dev.1.g{}", rev(&dir))
        );
        git(&dir, &["tag", "v3.1.0"]);
        assert_eq!(version(&dir, "3.1.0"), "3.1.0");
        git(&dir, &["commit", "-q", "--allow-empty", "-m", "two"]);
        git(&dir, &["commit", "-q", "--allow-empty", "-m", "three"]);
        let dev = version(&dir, "3.2.0");
        assert_eq!(dev, format!("3.2.0~dev.3.g{}", rev(&dir)));
        let sorts = |a: &str, b: &str| {
            Command::new("dpkg")
                .args(["--compare-versions", a, "lt", b])
                .status()
                .unwrap()
                .success()
        };
        assert!(sorts("3.1.0+slurm24.11", &format!("{dev}+slurm24.11")));
        assert!(sorts(&format!("{dev}+slurm24.11"), "3.2.0+slurm24.11"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// build.rs's rules on the Slurm version, tested here (build.rs includes
/// the same file).
#[cfg(test)]
mod slurm_version_rules {
    #![allow(dead_code)]
    include!("../slurm_version.rs");

    /// Block steps follow the topology from 26.05 only: 25.05 and 25.11
    /// (25.11.7 measured under topology/tree) lay them out by node name,
    /// as 22.05 and 24.11 do.
    #[test]
    fn blocks_follow_the_topology_from_26_05() {
        for (version, follows) in [
            (0x16_05_08, false), // 22.05.8
            (0x18_0b_05, false), // 24.11.5
            (0x19_05_00, false), // 25.05.0
            (0x19_0b_07, false), // 25.11.7
            (0x1a_05_00, true),  // 26.05.0
            (0x1a_05_05, true),  // 26.05.5
            (0x1a_0b_00, true),  // 26.11
        ] {
            assert_eq!(blocks_follow_topology(version), follows, "{version:#x}");
        }
    }
}
