//! torchrun's rendezvous as `--torch-cluster` names it: the settings hold
//! the step's choice, PyTorch's module renders it (crate::frameworks::pytorch).

use crate::error::{Result, bail, shown};
use crate::number::parse_u32;

/// torchrun's restarts of a node's workers in the elastic mode, unless
/// `elastic:MIN:RESTARTS` says otherwise.
pub const DEFAULT_MAX_RESTARTS: u32 = 3;

/// The launchers' rendezvous (`--torch-cluster=static|elastic[:MIN[:RESTARTS]]`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Rendezvous {
    /// torchrun's static rendezvous: node ranks in Slurm's order, no restart.
    #[default]
    Static,
    /// torchrun's c10d rendezvous, one launcher per node.
    Elastic {
        /// Fewest nodes the training goes on with (None: all of the step's).
        min: Option<u32>,
        /// torchrun's `--max-restarts`.
        max_restarts: u32,
    },
}

impl Rendezvous {
    /// `static`, `elastic`, `elastic:MIN` or `elastic:MIN:RESTARTS`; the
    /// empty value (the bare option) keeps `current` (the site's default).
    pub fn parse(value: &str, current: Rendezvous) -> Result<Rendezvous> {
        let bad =
            |why: &str| -> Result<Rendezvous> { bail!("--torch-cluster={}: {why}", shown(value)) };
        let mut parts = value.split(':');
        match parts.next() {
            Some("") if value.is_empty() => return Ok(current),
            Some("static") if value == "static" => return Ok(Rendezvous::Static),
            Some("elastic") => {}
            _ => {
                return bad("use static, elastic, elastic:MIN or elastic:MIN:RESTARTS (or off)");
            }
        }
        let min = match parts.next() {
            None => None,
            Some(text) => match parse_u32(text) {
                Some(0) => return bad("MIN, the fewest nodes, must be 1 or more"),
                Some(n) => Some(n),
                None => return bad("MIN, the fewest nodes, is not a number"),
            },
        };
        let max_restarts = match parts.next() {
            None => DEFAULT_MAX_RESTARTS,
            Some(text) => match parse_u32(text) {
                Some(n) => n,
                None => return bad("RESTARTS is not a number"),
            },
        };
        if parts.next().is_some() {
            return bad("at most elastic:MIN:RESTARTS");
        }
        Ok(Rendezvous::Elastic { min, max_restarts })
    }
}

#[cfg(test)]
mod tests {
    /// `--torch-cluster=VALUE` as srun reads it: MIN at least 1 (the step's
    /// node count when not given), RESTARTS 3 when not given.
    #[test]
    fn torch_rendezvous_values() {
        use super::Rendezvous::{self, Elastic, Static};
        let site = Elastic {
            min: Some(2),
            max_restarts: 1,
        };
        for (value, want) in [
            ("", Static),
            ("static", Static),
            (
                "elastic",
                Elastic {
                    min: None,
                    max_restarts: 3,
                },
            ),
            (
                "elastic:2",
                Elastic {
                    min: Some(2),
                    max_restarts: 3,
                },
            ),
            (
                "elastic:1:0",
                Elastic {
                    min: Some(1),
                    max_restarts: 0,
                },
            ),
            (
                "elastic:4:10",
                Elastic {
                    min: Some(4),
                    max_restarts: 10,
                },
            ),
        ] {
            assert_eq!(Rendezvous::parse(value, Static).unwrap(), want, "{value}");
        }
        // The bare option keeps the site's default.
        assert_eq!(Rendezvous::parse("", site).unwrap(), site);
        assert_eq!(Rendezvous::parse("static", site).unwrap(), Static);
        for (value, why) in [
            ("elastic:0", "MIN, the fewest nodes, must be 1 or more"),
            ("elastic:", "MIN, the fewest nodes, is not a number"),
            ("elastic:-1", "MIN, the fewest nodes, is not a number"),
            ("elastic:two", "MIN, the fewest nodes, is not a number"),
            ("elastic:2:", "RESTARTS is not a number"),
            ("elastic:2:+1", "RESTARTS is not a number"),
            ("elastic:1:2:3", "at most elastic:MIN:RESTARTS"),
            ("static:1", "use static, elastic"),
            ("Elastic", "use static, elastic"),
            ("elastic2", "use static, elastic"),
        ] {
            let e = Rendezvous::parse(value, Static).unwrap_err().to_string();
            let want = format!("--torch-cluster=\"{value}\": {why}");
            assert!(e.starts_with(&want), "{value}: {e}");
        }
    }
}
