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

/// Parses a plain decimal count as u64, no sign, no spaces.
pub fn parse_u64(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Parses plain hexadecimal digits (a GPU mask without its `0x`), no sign.
pub fn parse_hex_u64(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(text, 16).ok()
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
    fn wide_and_hex_numbers_take_no_sign() {
        assert_eq!(parse_u64("18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64("+1"), None);
        assert_eq!(parse_u64(""), None);
        assert_eq!(parse_hex_u64("fF"), Some(255));
        assert_eq!(parse_hex_u64("+f"), None);
        assert_eq!(parse_hex_u64("0x3"), None, "the caller strips 0x");
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
