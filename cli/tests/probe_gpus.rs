//! `tf-cluster probe-gpus` against the tests' stand-in of NVIDIA's
//! management library (tests/nvml_standin/nvml_standin.c, written from the
//! documented API), built here with the system's C compiler and found by the
//! dynamic linker's own search: each fault is named with the GPU's PCI
//! address, a healthy GPU is `ok`, GPUs not asked for are not named, and
//! without the library the probe says nothing and exits 0.

use std::path::{Path, PathBuf};
use std::process::Command;

fn standin_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tfc-nvml-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/nvml_standin/nvml_standin.c");
    let out = Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-o"])
        .arg(dir.join("libnvidia-ml.so.1"))
        .arg(&src)
        .output()
        .expect("a C compiler");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir
}

fn probe(lib_dir: &Path, config: &Path, minors: &str) -> (String, bool) {
    let out = Command::new(env!("CARGO_BIN_EXE_tf-cluster"))
        .env_clear()
        .env("LD_LIBRARY_PATH", lib_dir)
        .env("TFC_NVML_STANDIN", config)
        .args(["probe-gpus", minors])
        .output()
        .unwrap();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        out.status.success(),
    )
}

#[test]
fn each_gpu_fault_is_named_with_its_pci_address() {
    let dir = standin_dir();
    let config = dir.join("gpus");
    std::fs::write(
        &config,
        "0 00000000:3B:00.0 healthy\n1 00000000:3C:00.0 retired\n2 00000000:3D:00.0 remap\n\
         3 00000000:3E:00.0 ecc\n4 00000000:3F:00.0 fabric\n5 00000000:40:00.0 clique\n\
         6 00000000:41:00.0 completed\n",
    )
    .unwrap();
    let (text, ok) = probe(&dir, &config, "0,1,2,3,4,5,6");
    assert!(ok);
    // A zero clique id is a fault only on a node of a multi-node NVLink
    // domain (IMEX channels: the device listed and its directory), which
    // this host is not, unless it has both.
    let devices = std::fs::read_to_string("/proc/devices").unwrap();
    let in_domain = devices
        .lines()
        .any(|l| l.split_whitespace().nth(1) == Some("nvidia-caps-imex-channels"))
        && Path::new("/dev/nvidia-caps-imex-channels").is_dir();
    let clique = match in_domain {
        true => "its NVLink fabric has a zero clique id or cluster UUID",
        false => "ok",
    };
    assert_eq!(
        text,
        format!(
            "0 00000000:3B:00.0 ok\n\
             1 00000000:3C:00.0 pages are pending retirement (reset the GPU)\n\
             2 00000000:3D:00.0 a row remap failed\n\
             3 00000000:3E:00.0 3 volatile uncorrectable ECC error(s)\n\
             4 00000000:3F:00.0 its NVLink fabric is not completed (state 2)\n\
             5 00000000:40:00.0 {clique}\n\
             6 00000000:41:00.0 ok\n"
        )
    );
    // Only the GPUs asked for; the refusal names Slurm's index for the minor.
    let (text, _) = probe(&dir, &config, "3");
    assert_eq!(
        text,
        "3 00000000:3E:00.0 3 volatile uncorrectable ECC error(s)\n"
    );
    assert_eq!(
        tf_cluster_core::gpu_health::refusal("node2", &[(1, 3)], &text).as_deref(),
        Some("node2: GPU 1 (00000000:3E:00.0): 3 volatile uncorrectable ECC error(s)")
    );
    // Without the library: nothing, exit 0.
    let empty = dir.join("none");
    std::fs::create_dir_all(&empty).unwrap();
    assert_eq!(probe(&empty, &config, "0,1"), (String::new(), true));
    std::fs::remove_dir_all(&dir).unwrap();
}
