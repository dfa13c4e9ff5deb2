//! Facts read from the node itself, shared by the plugin and the CLI.

use crate::core::{Error, Result};

/// The NVIDIA driver lists one directory per GPU here; reading it costs no
/// fork (TensorFlow's resolver runs `nvidia-smi`, which slurmstepd must not).
const NVIDIA_GPUS: &str = "/proc/driver/nvidia/gpus";

/// The node's GPU count: 0 without the NVIDIA driver.
pub fn node_gpu_count() -> Result<u32> {
    match std::fs::read_dir(NVIDIA_GPUS) {
        Ok(entries) => Ok(entries.count() as u32),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(Error::new(format!(
            "cannot count GPUs in {NVIDIA_GPUS}: {e}"
        ))),
    }
}

/// A file the user named, as the calling process can read it.
pub fn read_user_file(path: &str) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| Error::new(format!("cannot read {path}: {e}")))
}
