//! Which device file each of Slurm's GPU indices is on a node: gres.conf's
//! `Name=gpu File=…` lines for the node, in the file's order (Slurm's own
//! order with `AutoDetect=off`). Without such a line (autodetected GPUs),
//! index N is `/dev/nvidiaN`, NVIDIA's naming that NVML's detection keeps.

use crate::hostlist::HostList;
use crate::limits::MAX_GPUS;

/// Slurm's GPU indices on `node` with their device files.
pub fn gpu_devices(text: &str, node: &str, step_gpus: &[u32]) -> Vec<(u32, String)> {
    let mut files = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or_default();
        let (mut name, mut file, mut here) = (None, None, true);
        for word in line.split_whitespace() {
            let Some((key, value)) = word.split_once('=') else {
                continue;
            };
            match key.to_ascii_lowercase().as_str() {
                "name" => name = Some(value),
                "file" => file = Some(value),
                "nodename" => here = names(value, node),
                _ => {}
            }
        }
        if let (Some("gpu"), Some(file), true) = (name, file, here) {
            files.extend(expand(file));
        }
        if files.len() > MAX_GPUS as usize {
            return Vec::new();
        }
    }
    if files.is_empty() {
        return step_gpus
            .iter()
            .map(|&i| (i, format!("/dev/nvidia{i}")))
            .collect();
    }
    (0u32..).zip(files).collect()
}

fn names(list: &str, node: &str) -> bool {
    HostList::parse(list, 65536).is_ok_and(|h| h.position(node).is_some())
}

/// `/dev/nvidia[0-3,5]` → each file; `/dev/dri/renderD128` → itself.
fn expand(file: &str) -> Vec<String> {
    let Some((head, rest)) = file.split_once('[') else {
        return file.split(',').map(str::to_string).collect();
    };
    let Some((ranges, tail)) = rest.split_once(']') else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for r in ranges.split(',') {
        let (a, b) = r.split_once('-').unwrap_or((r, r));
        let (Ok(lo), Ok(hi)) = (a.parse::<u32>(), b.parse::<u32>()) else {
            return Vec::new();
        };
        if hi < lo || hi - lo > MAX_GPUS {
            return Vec::new();
        }
        let width = a.len();
        out.extend((lo..=hi).map(|n| format!("{head}{n:0width$}{tail}")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_index_is_its_line_and_place_in_gres_conf() {
        let conf = "AutoDetect=off\n\
            NodeName=node[1-2] Name=gpu File=/dev/nvidia[0-3] # four\n\
            NodeName=node3 Name=gpu File=/dev/dri/renderD[128-129]\n\
            NodeName=node3 Name=gpu File=/dev/dri/renderD130\n\
            Name=mps Count=100\n";
        let node2 = gpu_devices(conf, "node2", &[]);
        assert_eq!(node2[3], (3, "/dev/nvidia3".to_string()));
        assert_eq!(node2.len(), 4);
        let node3: Vec<String> = gpu_devices(conf, "node3", &[])
            .into_iter()
            .map(|(_, f)| f)
            .collect();
        assert_eq!(
            node3,
            [
                "/dev/dri/renderD128",
                "/dev/dri/renderD129",
                "/dev/dri/renderD130"
            ]
        );
        // Autodetected: NVIDIA's names, by Slurm's index.
        let auto = gpu_devices("AutoDetect=nvml\n", "node1", &[0, 2]);
        assert_eq!(
            auto,
            [(0, "/dev/nvidia0".into()), (2, "/dev/nvidia2".into())]
        );
    }
}
