//! Decimal formatting without `fmt`: the per-task path writes thousands of
//! numbers, and `write!` costs several times more than this. The digits are
//! pushed as ASCII bytes, so no UTF-8 check is made on any of them.

/// `n` in decimal: the digits are `.0[.1..]`.
pub fn decimal(n: u64) -> ([u8; 20], usize) {
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
    (digits, i)
}

/// Appends `n` in decimal, left-padded with zeros to `width` digits.
pub fn push_padded(buf: &mut String, n: u64, width: usize) {
    let (digits, start) = decimal(n);
    let len = digits.len() - start;
    buf.reserve(width.max(len));
    for _ in len..width {
        buf.push('0');
    }
    for &d in &digits[start..] {
        buf.push(char::from(d));
    }
}

/// [`push_padded`] for a byte buffer.
pub fn push_padded_bytes(buf: &mut Vec<u8>, n: u64, width: usize) {
    let (digits, start) = decimal(n);
    let len = digits.len() - start;
    if width > len {
        buf.resize(buf.len() + (width - len), b'0');
    }
    buf.extend_from_slice(&digits[start..]);
}

/// A number written in decimal with zero padding, counting up in place: the
/// names of a host range cost a copy each instead of a conversion.
pub struct Counter {
    /// The digits, then room to grow.
    digits: [u8; Counter::SIZE],
    len: usize,
}

impl Counter {
    /// Room for any u64 (20 digits) and for any padding a range may ask for
    /// (its bounds have at most 18 digits).
    pub const SIZE: usize = 24;

    /// `n` padded to `width` digits (at most 24).
    pub fn new(n: u64, width: usize) -> Counter {
        let (digits, start) = decimal(n);
        let len = (digits.len() - start).max(width);
        let mut counter = Counter {
            digits: [b'0'; Counter::SIZE],
            len,
        };
        counter.digits[len - (digits.len() - start)..len].copy_from_slice(&digits[start..]);
        counter
    }

    /// The digits: what [`push_padded`] writes for the current value.
    #[cfg(test)]
    fn as_bytes(&self) -> &[u8] {
        &self.digits[..self.len]
    }

    /// The digits and what follows them, to copy at a fixed size.
    pub fn padded(&self) -> (&[u8; Counter::SIZE], usize) {
        (&self.digits, self.len)
    }

    /// Adds one. Padding zeros take the carry (`0099` → `0100`); a number
    /// with no zero left grows by a digit (`99` → `100`), as its padding is
    /// then no longer needed.
    pub fn increment(&mut self) {
        for i in (0..self.len).rev() {
            if self.digits[i] == b'9' {
                self.digits[i] = b'0';
            } else {
                self.digits[i] += 1;
                return;
            }
        }
        // All nines, now all zeros: a leading one.
        self.digits[self.len] = b'0';
        self.digits[0] = b'1';
        self.len += 1;
    }
}

/// Appends the first `len` bytes of `bytes`: a copy of fixed size (a few
/// moves, no call), then the bytes beyond `len` dropped.
pub fn push_fixed<const N: usize>(buf: &mut Vec<u8>, bytes: &[u8; N], len: usize) {
    debug_assert!(len <= N);
    buf.extend_from_slice(bytes);
    buf.truncate(buf.len() - (N - len));
}

/// How many decimal digits `n` has.
pub fn digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// Parses a plain decimal count (`0`..`u32::MAX`), no sign, no spaces.
pub fn parse_u32(text: &str) -> Option<u32> {
    if text.is_empty() || text.len() > 10 {
        return None;
    }
    let mut n = 0u64;
    for b in text.bytes() {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n * 10 + u64::from(b - b'0');
    }
    u32::try_from(n).ok()
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
    fn counter_writes_what_push_padded_writes() {
        for (from, width) in [
            (0u64, 0usize),
            (0, 4),
            (95, 1),
            (95, 2),
            (995, 4),
            (9_999, 4),
        ] {
            let mut counter = Counter::new(from, width);
            for n in from..from + 20 {
                let (mut text, mut bytes) = (String::new(), Vec::new());
                push_padded(&mut text, n, width);
                push_padded_bytes(&mut bytes, n, width);
                assert_eq!(counter.as_bytes(), text.as_bytes(), "{n} padded to {width}");
                assert_eq!(bytes, text.as_bytes());
                counter.increment();
            }
        }
        let big = 999_999_999_999_999_999;
        let mut counter = Counter::new(big, 18);
        counter.increment();
        assert_eq!(counter.as_bytes(), b"1000000000000000000");
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
