// SLURM_VERSION_NUMBER (0xMMmmuu) from the text of slurm_version.h: one
// parser for build.rs (the Slurm the plugin is built against, `include!`)
// and `tf-cluster doctor` (the installed Slurm, cli/src/doctor/system.rs,
// `#[path]`).

/// The `#define SLURM_VERSION_NUMBER 0x…` line's number; None without one.
pub fn parse_version_header(text: &str) -> Option<u32> {
    text.lines().find_map(|line| {
        let rest = line.trim().strip_prefix("#define")?.trim_start();
        let hex = rest.strip_prefix("SLURM_VERSION_NUMBER")?.trim();
        u32::from_str_radix(hex.strip_prefix("0x")?, 16).ok()
    })
}

/// Whether a Slurm of `version` (0xMMmmuu) lays the nodes of a block
/// distribution out in network-topology order under a topology plugin
/// (build.rs turns it into the cfg `slurm_blocks_follow_topology`).
/// Measured: 22.05, 24.11 and SchedMD's 25.11.7 (under topology/tree) fill
/// them in node-name order; topology order begins with 26.05 (Slurm's
/// changelog, 26.05.0rc1: "Tasks and step nodes now follow topology order").
#[allow(dead_code)] // build.rs's; the doctor includes only the parser
pub fn blocks_follow_topology(version: u32) -> bool {
    version >= 0x1a_05_00
}
