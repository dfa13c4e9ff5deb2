//! Numbers as Slurm writes them: plain decimal counts, no sign, no spaces
//! (`str::parse` would also take `+1`).

/// How many decimal digits `n` has.
pub fn digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// Parses a plain decimal count (`0`..`u32::MAX`), no sign, no spaces.
pub fn parse_u32(text: &str) -> Option<u32> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_digits() {
        for (n, d) in [(0, 1), (9, 1), (10, 2), (8888, 4), (65535, 5)] {
            assert_eq!(digits(n), d, "{n}");
        }
    }

    #[test]
    fn parses_plain_counts_only() {
        assert_eq!(parse_u32("42"), Some(42));
        assert_eq!(parse_u32("007"), Some(7));
        assert_eq!(parse_u32("4294967295"), Some(u32::MAX));
        for bad in [
            "",
            "-1",
            "+1",
            " 1",
            "4294967296",
            "1e3",
            "99999999999",
            "٣",
        ] {
            assert_eq!(parse_u32(bad), None, "{bad}");
        }
    }
}
