//! Ports: the step's ports on each node, by index (TensorFlow's local task k
//! takes the k-th, PyTorch's and JAX's rendezvous the next ones): the ports
//! Slurm reserved for the step (SLURM_STEP_RESV_PORTS, the same list on
//! every node), or else port base + index. Jobs sharing a node therefore only avoid each other when
//! Slurm reserves ports (`--resv-ports` or MpiParams=ports=…).

use super::error::{Result, bail, shown};
use super::number::parse_u32;

/// The ports of indices 0..`max_local_tasks` (the tasks of the fullest
/// node, plus one for each framework's rendezvous).
pub fn ports(base: u16, reserved: Option<&str>, max_local_tasks: u32) -> Result<Vec<u16>> {
    match reserved {
        Some(list) => {
            let ports = parse_reserved(list, max_local_tasks)?;
            if (ports.len() as u64) < u64::from(max_local_tasks) {
                bail!(
                    "Slurm reserved {} port(s) ({list}) but this step needs {max_local_tasks} on a node: ask for them with --resv-ports={max_local_tasks}",
                    ports.len()
                );
            }
            Ok(ports)
        }
        None => {
            let last = u64::from(base) + u64::from(max_local_tasks.max(1)) - 1;
            if last > 65535 {
                bail!(
                    "port base {base} + {max_local_tasks} tasks on a node needs port {last}, above 65535"
                );
            }
            Ok((0..max_local_tasks as u16).map(|k| base + k).collect())
        }
    }
}

/// `12001,12003-12005` → [12001, 12003, 12004, 12005]; only the first `want`
/// ports matter, so a hostile range costs no more than that.
fn parse_reserved(list: &str, want: u32) -> Result<Vec<u16>> {
    let bad = |why: &str| -> Result<Vec<u16>> {
        bail!("bad SLURM_STEP_RESV_PORTS {}: {why}", shown(list))
    };
    let mut ports = Vec::with_capacity(want as usize);
    for item in list.split(',') {
        let (lo, hi) = item.split_once('-').unwrap_or((item, item));
        let (Some(lo), Some(hi)) = (parse_u32(lo), parse_u32(hi)) else {
            return bad(&format!("{} is not N or N-M", shown(item)));
        };
        if lo == 0 || lo > hi || hi > 65535 {
            return bad(&format!("{item} is not a range of ports 1-65535"));
        }
        for port in lo..=hi {
            if ports.len() as u32 == want {
                break;
            }
            ports.push(port as u16);
        }
    }
    Ok(ports)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_plus_local_index() {
        assert_eq!(ports(8888, None, 3).unwrap(), [8888, 8889, 8890]);
        assert_eq!(ports(65534, None, 2).unwrap(), [65534, 65535]);
        let e = ports(65535, None, 2).unwrap_err().to_string();
        assert!(e.contains("needs port 65536, above 65535"), "{e}");
    }

    #[test]
    fn reserved_ports_win() {
        assert_eq!(ports(8888, Some("12043-12045"), 2).unwrap(), [12043, 12044]);
        assert_eq!(
            ports(8888, Some("12001,12003-12005"), 4).unwrap(),
            [12001, 12003, 12004, 12005]
        );
        let e = ports(8888, Some("12001"), 2).unwrap_err().to_string();
        assert!(
            e.contains("reserved 1 port(s) (12001) but this step needs 2 on a node: ask for them with --resv-ports=2"),
            "{e}"
        );
        // A hostile, huge range is read only as far as needed.
        assert_eq!(ports(1, Some("1-65535"), 2).unwrap(), [1, 2]);
    }

    #[test]
    fn garbage_is_refused() {
        for bad in [
            "",
            "x",
            "1-",
            "-1",
            "0",
            "5-3",
            "70000",
            "1,,2",
            "1 2",
            "12001-99999999999",
        ] {
            let e = ports(8888, Some(bad), 1).unwrap_err().to_string();
            assert!(e.starts_with("bad SLURM_STEP_RESV_PORTS"), "{bad}: {e}");
        }
    }
}
