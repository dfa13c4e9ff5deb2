//! Splitting short values at an ASCII byte: `fields(s, b',')` is
//! `s.split(',')` and `split_once(s, b'-')` is `s.split_once('-')`. The std
//! searchers set up a memchr that costs more than a whole scan of `0001-1024`
//! or `4(x1024)`; these look at each byte, which for the values Slurm sets
//! (a few to a few hundred bytes) is the cheaper way.

/// The pieces of `text` between the `sep` bytes, as `text.split(sep)`.
pub fn fields(text: &str, sep: u8) -> Fields<'_> {
    debug_assert!(sep.is_ascii(), "a separator must be ASCII");
    Fields {
        rest: Some(text),
        sep,
    }
}

pub struct Fields<'a> {
    rest: Option<&'a str>,
    sep: u8,
}

impl<'a> Iterator for Fields<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let rest = self.rest?;
        match rest.bytes().position(|b| b == self.sep) {
            // An ASCII byte is a character boundary on both sides.
            Some(i) => {
                self.rest = Some(&rest[i + 1..]);
                Some(&rest[..i])
            }
            None => {
                self.rest = None;
                Some(rest)
            }
        }
    }
}

/// `text.split_once(sep)`.
pub fn split_once(text: &str, sep: u8) -> Option<(&str, &str)> {
    debug_assert!(sep.is_ascii(), "a separator must be ASCII");
    let i = text.bytes().position(|b| b == sep)?;
    Some((&text[..i], &text[i + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_as_std() {
        for text in [
            "",
            ",",
            "a",
            "a,",
            ",a",
            "a,,b",
            "0001-1024",
            "é,ü-x",
            "1-2-3",
            "-",
        ] {
            for sep in [b',', b'-'] {
                let std: Vec<&str> = text.split(char::from(sep)).collect();
                assert_eq!(fields(text, sep).collect::<Vec<_>>(), std, "{text:?}");
                assert_eq!(split_once(text, sep), text.split_once(char::from(sep)));
            }
        }
    }
}
