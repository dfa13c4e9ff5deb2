//! A GPU's own health, as NVIDIA's management library reports it: what
//! makes a GPU unfit for a step's tasks, decided here from the facts a
//! probe read (`tf-cluster probe-gpus`, which loads the library at run time
//! where the node has it), and the probe's one line per GPU.
//!
//! Unfit: pages waiting to be retired, a row remap that failed, volatile
//! uncorrectable ECC errors since the driver loaded, and on a GPU attached
//! to an NVLink fabric (GB200) a fabric state not completed with success,
//! a zero clique id or a zero cluster UUID (the last only on a node of a
//! multi-node NVLink domain: a single-node NVSwitch system's GPUs report a
//! completed fabric with zeros there). A check the GPU does not support is
//! no fault.

/// The fabric's state (NVML's `nvmlGpuFabricState_t`): completed.
pub const FABRIC_COMPLETED: u8 = 3;
/// NVML_SUCCESS.
pub const NVML_SUCCESS: u32 = 0;

/// What the probe read of one GPU (None: not supported there).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuFacts {
    /// The device's minor (`/dev/nvidiaN`), as Slurm's gres.conf names it.
    pub minor: u32,
    /// Its PCI bus id (`00000000:3B:00.0`).
    pub pci: String,
    pub retired_pages_pending: Option<bool>,
    pub row_remap_failed: Option<bool>,
    pub volatile_uncorrected: Option<u64>,
    pub fabric: Option<Fabric>,
}

/// A fabric-attached GPU's fabric, as NVML's `nvmlGpuFabricInfo_t` has it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fabric {
    pub state: u8,
    pub status: u32,
    pub clique_id: u32,
    pub cluster_uuid_zero: bool,
}

/// Why the GPU is unfit, in words; None: fit. `nvl_domain`: the node is
/// in a multi-node NVLink domain (crate::imex::in_domain).
pub fn fault(g: &GpuFacts, nvl_domain: bool) -> Option<String> {
    if g.retired_pages_pending == Some(true) {
        return Some("pages are pending retirement (reset the GPU)".into());
    }
    if g.row_remap_failed == Some(true) {
        return Some("a row remap failed".into());
    }
    if let Some(n) = g.volatile_uncorrected.filter(|&n| n > 0) {
        return Some(format!("{n} volatile uncorrectable ECC error(s)"));
    }
    if let Some(f) = g.fabric {
        if f.state != FABRIC_COMPLETED {
            return Some(format!(
                "its NVLink fabric is not completed (state {})",
                f.state
            ));
        }
        if f.status != NVML_SUCCESS {
            return Some(format!("its NVLink fabric failed (status {})", f.status));
        }
        if nvl_domain && (f.clique_id == 0 || f.cluster_uuid_zero) {
            return Some("its NVLink fabric has a zero clique id or cluster UUID".into());
        }
    }
    None
}

/// The probe's line for one GPU: `MINOR PCI ok` or `MINOR PCI REASON`.
pub fn probe_line(g: &GpuFacts, nvl_domain: bool) -> String {
    let pci = match g.pci.is_empty() || g.pci.contains(char::is_whitespace) {
        true => "?",
        false => g.pci.as_str(),
    };
    let verdict = fault(g, nvl_domain).unwrap_or_else(|| "ok".into());
    format!("{} {pci} {verdict}", g.minor)
}

/// Each of the step's GPUs (Slurm's `indices`) with its NVIDIA device minor,
/// from Slurm's own index-to-file map (crate::gpus::gres_conf::gpu_devices:
/// gres.conf's order, `/dev/nvidiaN` where GPUs are autodetected); a GPU
/// whose file is not an NVIDIA device node is left out (the probe knows
/// NVIDIA's GPUs only).
pub fn probe_pairs(devices: &[(u32, String)], indices: &[u32]) -> Vec<(u32, u32)> {
    indices
        .iter()
        .filter_map(|&i| {
            let (_, file) = devices.iter().find(|(j, _)| *j == i)?;
            let minor = file.strip_prefix("/dev/nvidia")?;
            Some((i, crate::number::parse_u32(minor)?))
        })
        .collect()
}

/// The preflight's refusal from the probe's answer: the first GPU of
/// Slurm's `gpus` (index, minor) whose line is not `ok`, named by node,
/// Slurm's index and PCI address. GPUs the probe did not name pass.
pub fn refusal(node: &str, gpus: &[(u32, u32)], answer: &str) -> Option<String> {
    for line in answer.lines().take(1024) {
        let mut w = line.splitn(3, ' ');
        let (Some(minor), Some(pci), Some(why)) = (w.next(), w.next(), w.next()) else {
            continue;
        };
        let Some(minor) = crate::number::parse_u32(minor) else {
            continue;
        };
        if why == "ok" {
            continue;
        }
        if let Some((index, _)) = gpus.iter().find(|(_, m)| *m == minor) {
            let why: String = why.chars().take(160).filter(|c| !c.is_control()).collect();
            return Some(format!("{node}: GPU {index} ({pci}): {why}"));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn healthy(minor: u32) -> GpuFacts {
        GpuFacts {
            minor,
            pci: format!("00000000:{:02X}:00.0", 0x3b + minor),
            retired_pages_pending: Some(false),
            row_remap_failed: Some(false),
            volatile_uncorrected: Some(0),
            fabric: None,
        }
    }

    #[test]
    fn each_fault_is_named_and_a_healthy_gpu_passes() {
        assert_eq!(fault(&healthy(0), true), None);
        let unsupported = GpuFacts {
            minor: 0,
            ..GpuFacts::default()
        };
        assert_eq!(
            fault(&unsupported, true),
            None,
            "nothing supported: no fault"
        );
        let cases = [
            (
                GpuFacts {
                    retired_pages_pending: Some(true),
                    ..healthy(1)
                },
                "pages are pending retirement (reset the GPU)",
            ),
            (
                GpuFacts {
                    row_remap_failed: Some(true),
                    ..healthy(1)
                },
                "a row remap failed",
            ),
            (
                GpuFacts {
                    volatile_uncorrected: Some(2),
                    ..healthy(1)
                },
                "2 volatile uncorrectable ECC error(s)",
            ),
            (
                GpuFacts {
                    fabric: Some(Fabric {
                        state: 2,
                        status: 0,
                        clique_id: 1,
                        cluster_uuid_zero: false,
                    }),
                    ..healthy(1)
                },
                "its NVLink fabric is not completed (state 2)",
            ),
            (
                GpuFacts {
                    fabric: Some(Fabric {
                        state: 3,
                        status: 0,
                        clique_id: 0,
                        cluster_uuid_zero: false,
                    }),
                    ..healthy(1)
                },
                "its NVLink fabric has a zero clique id or cluster UUID",
            ),
        ];
        for (g, want) in cases {
            assert_eq!(fault(&g, true).as_deref(), Some(want));
            let line = probe_line(&g, true);
            assert_eq!(line, format!("1 00000000:3C:00.0 {want}"));
            // Slurm's GPU 3 is the device of minor 1 here.
            assert_eq!(
                refusal(
                    "node2",
                    &[(2, 0), (3, 1)],
                    &format!("0 00000000:3B:00.0 ok\n{line}\n")
                )
                .as_deref(),
                Some(&*format!("node2: GPU 3 (00000000:3C:00.0): {want}"))
            );
        }
        let good = fabric_ok();
        assert_eq!(fault(&good, true), None);
    }

    /// A single-node NVSwitch system (no IMEX channels: no multi-node
    /// domain) reports a completed fabric with a zero clique id and cluster
    /// UUID: fit. The same GPU on a node of a domain is not.
    #[test]
    fn zero_clique_ids_matter_only_in_a_multi_node_nvlink_domain() {
        let single_node = GpuFacts {
            fabric: Some(Fabric {
                clique_id: 0,
                cluster_uuid_zero: true,
                ..fabric_ok().fabric.unwrap()
            }),
            ..healthy(0)
        };
        assert_eq!(fault(&single_node, false), None);
        assert_eq!(probe_line(&single_node, false), "0 00000000:3B:00.0 ok");
        assert_eq!(
            fault(&single_node, true).as_deref(),
            Some("its NVLink fabric has a zero clique id or cluster UUID")
        );
        // A fabric not completed is a fault with or without a domain.
        let stuck = GpuFacts {
            fabric: Some(Fabric {
                state: 1,
                ..fabric_ok().fabric.unwrap()
            }),
            ..healthy(0)
        };
        assert!(fault(&stuck, false).is_some());
    }

    fn fabric_ok() -> GpuFacts {
        GpuFacts {
            fabric: Some(Fabric {
                state: FABRIC_COMPLETED,
                status: NVML_SUCCESS,
                clique_id: 7,
                cluster_uuid_zero: false,
            }),
            ..healthy(0)
        }
    }

    /// Slurm's index is not the minor where gres.conf lists the devices out
    /// of order: the probe is asked about, and a refusal names, the right
    /// one. Not NVIDIA's device files (AMD's, Intel's) are not asked about.
    #[test]
    fn slurms_index_goes_to_the_minor_gres_conf_gives_it() {
        let gres =
            "NodeName=n1 Name=gpu File=/dev/nvidia3\nNodeName=n1 Name=gpu File=/dev/nvidia1\n";
        let devices = crate::gpus::gres_conf::gpu_devices(gres, "n1", &[0, 1]);
        let pairs = probe_pairs(&devices, &[0, 1]);
        assert_eq!(pairs, [(0, 3), (1, 1)]);
        let answer = "1 00000000:3C:00.0 ok\n3 00000000:3E:00.0 a row remap failed\n";
        assert_eq!(
            refusal("n1", &pairs, answer).as_deref(),
            Some("n1: GPU 0 (00000000:3E:00.0): a row remap failed")
        );
        let amd = vec![(0, "/dev/dri/renderD128".to_string())];
        assert_eq!(probe_pairs(&amd, &[0]), []);
    }

    /// GPUs not the step's, garbage and an empty answer (no library) pass.
    #[test]
    fn only_the_steps_gpus_are_refused() {
        let bad = probe_line(
            &GpuFacts {
                volatile_uncorrected: Some(1),
                ..healthy(5)
            },
            false,
        );
        assert_eq!(refusal("n", &[(0, 0)], &bad), None);
        assert_eq!(refusal("n", &[(0, 0)], ""), None);
        assert_eq!(refusal("n", &[(0, 0)], "x y\n\u{1b}[2J"), None);
    }
}
