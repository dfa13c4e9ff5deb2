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

/// Where the tasks of one component of a heterogeneous step take their ports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ComponentPorts {
    /// The ports Slurm reserved for the component (SLURM_STEP_RESV_PORTS).
    Reserved(String),
    /// None reserved: the SLURM_STEP_RESV_PORTS of srun's environment, which
    /// Slurm passes on to a component srun's word does not reach (an outer
    /// step's, the user's: not this step's).
    PassedOn(String),
    /// None: port base + index.
    Base,
}

/// What each component's tasks use, from what Slurm reserved for each
/// (`reserved[k]`, from slurmctld's record of component k) and the
/// SLURM_STEP_RESV_PORTS in srun's environment. srun's word reaches only
/// component 0, so only its tasks can be told to leave a passed-on value
/// alone; the others read the variable as Slurm sets it.
pub fn het_component_ports(
    reserved: &[Option<String>],
    in_srun_env: Option<&str>,
) -> Vec<ComponentPorts> {
    reserved
        .iter()
        .enumerate()
        .map(|(k, r)| match (r, in_srun_env) {
            (Some(list), _) => ComponentPorts::Reserved(list.clone()),
            (None, Some(list)) if k > 0 => ComponentPorts::PassedOn(list.to_string()),
            (None, _) => ComponentPorts::Base,
        })
        .collect()
}

/// Every component of a heterogeneous step must give local task i the same
/// port, since each task's address is named in every other task's
/// variables. Err (one line) when two components would not.
pub fn check_het_ports(reserved: &[Option<String>], in_srun_env: Option<&str>) -> Result<()> {
    let each = het_component_ports(reserved, in_srun_env);
    let list = |p: &ComponentPorts| -> Result<Option<Vec<u16>>> {
        Ok(match p {
            ComponentPorts::Reserved(l) | ComponentPorts::PassedOn(l) => {
                Some(parse_reserved(l, 65535)?)
            }
            ComponentPorts::Base => None,
        })
    };
    let said = |k: usize, p: &ComponentPorts| match p {
        ComponentPorts::Reserved(l) => {
            format!("component {k} the ports Slurm reserved for it, {l}")
        }
        ComponentPorts::PassedOn(l) => format!(
            "component {k} SLURM_STEP_RESV_PORTS={l}, passed on from srun's environment (not this step's: unset it before srun)"
        ),
        ComponentPorts::Base => format!("component {k} the port base (no ports reserved)"),
    };
    let Some(first) = each.first() else {
        return Ok(());
    };
    let first_list = list(first)?;
    for (k, p) in each.iter().enumerate().skip(1) {
        let agree = match (&first_list, list(p)?) {
            (None, None) => true,
            (Some(a), Some(b)) => {
                let n = a.len().min(b.len());
                a[..n] == b[..n]
            }
            _ => false,
        };
        if !agree {
            bail!(
                "the components of this heterogeneous step would give their tasks different ports ({}; {}): give every component the same --resv-ports=N, or run the components as separate steps",
                said(0, first),
                said(k, p)
            );
        }
    }
    Ok(())
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

    fn some(list: &str) -> Option<String> {
        Some(list.to_string())
    }

    /// The same reservation in every component (what Slurm gave the
    /// testbed's `-n1 -w node3 : -N2 -n3`: 12006 and up in both): agreed.
    #[test]
    fn het_components_with_the_same_ports_agree() {
        let same = [some("12006-12008"), some("12006-12008")];
        assert!(check_het_ports(&same, None).is_ok());
        // No reservation anywhere, nothing passed on: the port base in all.
        assert!(check_het_ports(&[None, None, None], None).is_ok());
        // A longer list with the same first ports gives local task i the same.
        assert!(check_het_ports(&[some("12006-12007"), some("12006-12009")], None).is_ok());
        assert_eq!(
            het_component_ports(&[None, None], Some("13000-13003")),
            [
                ComponentPorts::Base,
                ComponentPorts::PassedOn("13000-13003".into())
            ]
        );
    }

    /// Component 0 (srun's word) on its reservation or the port base while
    /// another reads other ports: every task would name wrong addresses.
    #[test]
    fn het_components_that_would_disagree_are_refused_in_one_line() {
        let e = check_het_ports(&[some("12006-12008"), None], None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("component 1"), "{e}");
        assert!(e.contains("--resv-ports"), "{e}");
        assert!(!e.contains('\n'), "{e}");
        let e = check_het_ports(&[some("12006-12008"), some("12100-12102")], None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("12100-12102"), "{e}");
        // Nothing reserved, but srun's environment holds an outer step's
        // list: component 0 is told to leave it, component 1 cannot be.
        let e = check_het_ports(&[None, None], Some("13000-13003"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("SLURM_STEP_RESV_PORTS"), "{e}");
        assert!(e.contains("13000-13003"), "{e}");
    }
}
