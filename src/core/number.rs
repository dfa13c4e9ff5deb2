//! Decimal formatting without `fmt`: the per-task path writes thousands of
//! numbers, and `write!` costs several times more than this.

/// Appends `n` in decimal, left-padded with zeros to `width` digits.
pub fn push_padded(buf: &mut String, n: u64, width: usize) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let mut v = n;
    loop {
        i -= 1;
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    for _ in (digits.len() - i)..width {
        buf.push('0');
    }
    // The bytes are ASCII digits.
    buf.push_str(std::str::from_utf8(&digits[i..]).expect("ASCII digits"));
}

/// How many decimal digits `n` has.
pub fn digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// Parses a plain decimal count (`0`..`u32::MAX`), no sign, no spaces.
pub fn parse_u32(text: &str) -> Option<u32> {
    if text.is_empty() || text.len() > 10 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pads_and_formats() {
        let mut s = String::new();
        for (n, w, want) in [
            (0, 0, "0"),
            (7, 3, "007"),
            (1234, 2, "1234"),
            (u64::MAX, 1, "18446744073709551615"),
        ] {
            s.clear();
            push_padded(&mut s, n, w);
            assert_eq!(s, want);
        }
    }

    #[test]
    fn counts_digits() {
        for (n, d) in [(0, 1), (9, 1), (10, 2), (8888, 4), (65535, 5)] {
            assert_eq!(digits(n), d, "{n}");
        }
    }

    #[test]
    fn parses_plain_counts_only() {
        assert_eq!(parse_u32("42"), Some(42));
        assert_eq!(parse_u32("4294967295"), Some(u32::MAX));
        for bad in ["", "-1", "+1", " 1", "4294967296", "1e3", "99999999999"] {
            assert_eq!(parse_u32(bad), None, "{bad}");
        }
    }
}
