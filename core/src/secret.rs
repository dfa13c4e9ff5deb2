//! The step's secret: random bytes srun draws once per step and hands every
//! task of it in its word (core::handoff). Only the step's own processes
//! hold it (a task's environment is readable by its user alone; it is in no
//! file): Ray's token for the step's cluster and the name of the step's
//! private directory on each node come from it, so another user of the
//! nodes can neither join the cluster nor predict, enter or make the
//! directory first.

use std::fmt;

/// Bytes of the secret: 32 for the token (256 bits, as Ray's own generator
/// draws), 8 for the directory's name (64 bits: no one guesses it before
/// the step makes it).
pub const LEN: usize = 40;
const TOKEN: usize = 32;

#[derive(Clone, PartialEq, Eq)]
pub struct Secret([u8; LEN]);

impl Secret {
    /// The secret made of `bytes` (srun's draw from the kernel's random
    /// source).
    pub fn from_bytes(bytes: [u8; LEN]) -> Secret {
        Secret(bytes)
    }

    /// The secret as the hand-off writes it: lowercase hex.
    pub fn hex(&self) -> String {
        hex(&self.0)
    }

    /// The secret in `text` (its hex), None unless exactly [`LEN`] bytes of
    /// hex.
    pub fn parse(text: &str) -> Option<Secret> {
        if text.len() != 2 * LEN || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let mut bytes = [0u8; LEN];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(Secret(bytes))
    }

    /// The step's token (Ray's `RAY_AUTH_TOKEN`): 64 hex digits.
    pub fn token(&self) -> String {
        hex(&self.0[..TOKEN])
    }

    /// The name part of the step's private directories: 16 hex digits no
    /// other user can know before the step makes them.
    pub fn dir_id(&self) -> String {
        hex(&self.0[TOKEN..])
    }
}

/// Never printed whole: a log line or a panic message shows no secret.
impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(…)")
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counting() -> Secret {
        let mut bytes = [0u8; LEN];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(7);
        }
        Secret::from_bytes(bytes)
    }

    #[test]
    fn round_trips_through_its_hex() {
        let s = counting();
        assert_eq!(s.hex().len(), 80);
        assert_eq!(Secret::parse(&s.hex()), Some(s.clone()));
        assert_eq!(Secret::parse(&s.hex().to_uppercase()), Some(s));
    }

    #[test]
    fn token_and_directory_are_disjoint_parts() {
        let s = counting();
        assert_eq!(s.token(), s.hex()[..64]);
        assert_eq!(s.dir_id(), s.hex()[64..]);
        assert_eq!(s.dir_id(), "e0e7eef5fc030a11");
    }

    #[test]
    fn anything_else_is_no_secret() {
        let s = counting().hex();
        for bad in [
            &s[..78],
            &format!("{s}00"),
            &format!("{}g", &s[..79]),
            "",
            "+0",
        ] {
            assert_eq!(Secret::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn debug_shows_no_byte() {
        assert_eq!(format!("{:?}", counting()), "Secret(…)");
    }
}
