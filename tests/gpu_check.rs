//! The GPU check of `--tf-bind=gpu` (tests/gpu-affinity.sh), which runs on
//! a node with NVIDIA GPUs and Slurm: here its reading of `nvidia-smi topo
//! -m` (a fixture written from the command's documented table: tab-separated
//! columns, a header underlined with terminal codes, NIC columns, the legend
//! after a blank line), and its one line and exit 77 (skipped, never passed)
//! where no NVIDIA GPU is.

use std::path::Path;
use std::process::Command;

fn script() -> Command {
    let mut cmd = Command::new("bash");
    cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/gpu-affinity.sh"));
    cmd
}

#[test]
fn reads_each_gpus_cpu_affinity_from_nvidia_smi_topo() {
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gpu/nvidia-smi-topo.txt");
    let out = script().arg("--parse").arg(&fixture).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "0 0-15,32-47\n1 0-15,32-47\n2 16-31,48-63\n3 16-31,48-63\n"
    );
}

/// Run where no `nvidia-smi` is on the PATH (as on a machine without
/// NVIDIA's driver), whatever this machine has.
#[test]
fn without_an_nvidia_gpu_it_says_so_and_is_skipped() {
    let out = Command::new("/bin/bash")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/gpu-affinity.sh"))
        .env("PATH", "/nonexistent")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(77), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "gpu-affinity: skipped: no NVIDIA GPU here (nvidia-smi finds none)\n"
    );
}
