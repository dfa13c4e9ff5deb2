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
