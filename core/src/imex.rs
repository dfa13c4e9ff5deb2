//! Multi-node NVLink at launch: NVIDIA's IMEX channels. On a node with them
//! (the `nvidia-caps-imex-channels` device in /proc/devices and the node's
//! channel directory) a step spanning
//! several nodes needs exactly one channel in each task's /dev
//! (`/dev/nvidia-caps-imex-channels/channelN`, given by Slurm's
//! switch/nvidia_imex and, in a container, mounted by enroot with
//! `nofail`): with none, CUDA's fabric memory fails and NCCL falls back to
//! the network without an error; with more, the task is not confined to its
//! job's channel. An exported `NCCL_CUMEM_ENABLE=0` or `NCCL_MNNVL_ENABLE=0`
//! turns multi-node NVLink off the same silent way: said, not refused.

use super::error::{Error, Result};
use super::settings::Imex;

/// The device /proc/devices names when the node has IMEX channels.
pub const DEVICE: &str = "nvidia-caps-imex-channels";
/// Where a task sees its channels.
pub const CHANNELS_DIR: &str = "/dev/nvidia-caps-imex-channels";
/// The variables that turn multi-node NVLink off when set to 0.
pub const NVLINK_OFF: [&str; 2] = ["NCCL_CUMEM_ENABLE", "NCCL_MNNVL_ENABLE"];

/// Whether /proc/devices' text names the IMEX channels' character device.
pub fn node_has_channels(proc_devices: &str) -> bool {
    let mut chars = false;
    for line in proc_devices.lines() {
        match line.trim() {
            "Character devices:" => chars = true,
            "Block devices:" => chars = false,
            entry if chars && entry.split_whitespace().nth(1) == Some(DEVICE) => return true,
            _ => {}
        }
    }
    false
}

/// Whether the node's tasks of a step on `nodes` nodes need their channel,
/// as `mode` (`--tf-imex`, the site's `imex=`) says: `auto` only where the
/// node shows channels ([`in_domain`]: the driver registers the device
/// (`device_listed`) on GPU nodes that use no IMEX at all, so only where the
/// node also has the channel directory, which Slurm's switch/nvidia_imex or
/// the site made); `required` on every node; `off` never.
pub fn needed(mode: Imex, device_listed: bool, channel_dir: bool, nodes: u32) -> bool {
    let here = match mode {
        Imex::Auto => in_domain(device_listed, channel_dir),
        Imex::Required => true,
        Imex::Off => false,
    };
    here && nodes > 1
}

/// Whether the node is in a multi-node NVLink domain: it has IMEX channels
/// (see [`needed`] for why the device alone does not say so).
pub fn in_domain(device_listed: bool, channel_dir: bool) -> bool {
    device_listed && channel_dir
}

/// A task's channels (the names of the character devices in its
/// [`CHANNELS_DIR`]): exactly one, or the refusal naming the node.
pub fn check_channels(node: &str, channels: &[String]) -> Result<()> {
    let mut ours: Vec<&str> = channels
        .iter()
        .map(String::as_str)
        .filter(|n| n.starts_with("channel"))
        .collect();
    ours.sort_unstable();
    match ours.as_slice() {
        [_] => Ok(()),
        [] => Err(Error::new(format!(
            "{node}: this multi-node step's task sees no IMEX channel in {CHANNELS_DIR}, so multi-node NVLink cannot work (Slurm's SwitchType=switch/nvidia_imex gives a step one; with a container, its runtime must mount it)"
        ))),
        many => Err(Error::new(format!(
            "{node}: this multi-node step's task sees {} IMEX channels ({}), not its job's one: the node's channels are not confined to the job (Slurm's switch/nvidia_imex with ConstrainDevices=yes)",
            many.len(),
            many.iter().take(4).copied().collect::<Vec<_>>().join(", ")
        ))),
    }
}

/// The line saying an exported variable turns multi-node NVLink off, if
/// one does (`value` answers a variable's value in the step).
pub fn nvlink_off_line<'a>(value: impl Fn(&str) -> Option<&'a str>) -> Option<String> {
    let off: Vec<&str> = NVLINK_OFF
        .into_iter()
        .filter(|name| value(name).is_some_and(|v| v.trim() == "0"))
        .collect();
    (!off.is_empty()).then(|| {
        format!(
            "{}=0 is exported: NCCL uses the network, not multi-node NVLink, between this step's nodes (unset it to use the NVLink domain)",
            off.join("=0 and ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// /proc/devices as a node with IMEX channels shows it (major 236 is
    /// where a driver put it on one node; any major counts).
    const WITH: &str = "Character devices:\n  1 mem\n195 nvidia-frontend\n236 nvidia-caps-imex-channels\n\nBlock devices:\n  8 sd\n";

    #[test]
    fn the_channels_device_is_found_among_character_devices_only() {
        assert!(node_has_channels(WITH));
        assert!(!node_has_channels(
            "Character devices:\n  1 mem\n195 nvidia\n"
        ));
        assert!(!node_has_channels(
            "Character devices:\n  1 mem\nBlock devices:\n236 nvidia-caps-imex-channels\n"
        ));
        assert!(!node_has_channels(""));
    }

    #[test]
    fn only_a_step_over_several_nodes_needs_a_channel() {
        assert!(needed(Imex::Auto, true, true, 2));
        assert!(!needed(Imex::Auto, true, true, 1));
        assert!(!needed(Imex::Auto, false, true, 4));
        // The device registered, no channel made on the node: no IMEX here.
        assert!(!needed(Imex::Auto, true, false, 4));
    }

    /// The site's (or the step's) word beats what the node shows: required
    /// on a node that shows nothing, off on one that shows channels; a
    /// one-node step never needs one.
    #[test]
    fn the_setting_requires_or_turns_off_the_channel() {
        assert!(needed(Imex::Required, false, false, 2));
        assert!(!needed(Imex::Required, false, false, 1));
        assert!(!needed(Imex::Off, true, true, 4));
        let mut s = crate::settings::Settings::default();
        assert_eq!(s.imex, Imex::Auto);
        s.set("imex", "required").unwrap();
        assert_eq!(s.imex, Imex::Required);
        s.set("imex", "off").unwrap();
        assert_eq!(s.imex, Imex::Off);
        let e = s.set("imex", "yes").unwrap_err();
        assert!(e.message().contains("use auto, required or off"), "{e}");
    }

    #[test]
    fn a_task_needs_exactly_one_channel() {
        let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(check_channels("node1", &names(&["channel7"])).is_ok());
        let none = check_channels("node1", &names(&[])).unwrap_err();
        assert!(
            none.message()
                .starts_with("node1: this multi-node step's task sees no IMEX channel")
        );
        let other = check_channels("node1", &names(&["README"])).unwrap_err();
        assert!(other.message().contains("sees no IMEX channel"));
        let two = check_channels("node2", &names(&["channel1", "channel0"])).unwrap_err();
        assert!(
            two.message()
                .contains("sees 2 IMEX channels (channel0, channel1)"),
            "{}",
            two.message()
        );
        for e in [none, two] {
            assert!(!e.message().contains('\n'));
            assert!(e.message().len() <= 300, "{}", e.message().len());
        }
    }

    #[test]
    fn an_exported_zero_is_said_and_nothing_else() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
        };
        assert_eq!(nvlink_off_line(env(&[])), None);
        assert_eq!(nvlink_off_line(env(&[("NCCL_CUMEM_ENABLE", "1")])), None);
        let one = nvlink_off_line(env(&[("NCCL_MNNVL_ENABLE", "0")])).unwrap();
        assert!(
            one.starts_with("NCCL_MNNVL_ENABLE=0 is exported: NCCL uses the network"),
            "{one}"
        );
        let both = nvlink_off_line(env(&[
            ("NCCL_CUMEM_ENABLE", "0"),
            ("NCCL_MNNVL_ENABLE", " 0"),
        ]))
        .unwrap();
        assert!(
            both.starts_with("NCCL_CUMEM_ENABLE=0 and NCCL_MNNVL_ENABLE=0 is exported"),
            "{both}"
        );
    }
}
