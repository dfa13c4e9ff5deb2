//! Reading slurm.conf, or `scontrol show config` when there is none (configless).

use std::collections::HashMap;

/// Where Slurm looks for slurm.conf when SLURM_CONF is not set (Debian's and
/// SchedMD's builds).
pub const DEFAULT_SLURM_CONF: &str = "/etc/slurm/slurm.conf";

/// The top-level `Key=Value` settings of slurm.conf (keys lower-cased, the
/// last one wins, comments dropped). Lines holding several pairs (NodeName=…)
/// give their first pair, which is all that is looked up here.
pub fn parse_slurm_conf(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|line| {
            let line = line.split('#').next().unwrap_or_default().trim();
            let (key, value) = line.split_once('=')?;
            let value = value.trim();
            // `Key=Value Other=…`: only the first pair.
            let value = value.split_whitespace().next().unwrap_or_default();
            Some((key.trim().to_ascii_lowercase(), value.to_string()))
        })
        .collect()
}

/// `scontrol show config` lines `Name   = value` as [`parse_slurm_conf`] gives.
pub fn parse_show_config(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|line| {
            let (key, value) = line.split_once(" = ")?;
            Some((key.trim().to_ascii_lowercase(), value.trim().to_string()))
        })
        .collect()
}
