//! The one error type of the core: a sentence for the user, naming the bad part.

use std::fmt;

/// Longest message, in characters: one terminal line or two.
pub const MAX_MESSAGE: usize = 300;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: Kind,
    message: String,
}

/// What the caller does with an error: the one place code branches on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A refusal the user reads: the caller says it.
    Refused,
    /// Already said once, elsewhere (srun's refusal of the step, the panic
    /// hook's line): the caller fails without saying it again.
    Reported,
    /// The user interrupted srun (Ctrl-C): refused as it is, with no advice
    /// and no second try.
    Interrupted,
}

impl Error {
    /// One readable line whatever the message holds: control characters
    /// become spaces and the text stops at [`MAX_MESSAGE`] characters.
    pub fn new(message: impl Into<String>) -> Self {
        let mut text: String = message
            .into()
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        if let Some((cut, _)) = text.char_indices().nth(MAX_MESSAGE) {
            text.truncate(cut);
            text.push('…');
        }
        Error {
            kind: Kind::Refused,
            message: text,
        }
    }

    /// A failure already said where it happened: `what` names it for the
    /// logs of a caller that shows it anyway (tests, debug).
    pub fn reported(what: &str) -> Self {
        Error {
            kind: Kind::Reported,
            ..Error::new(what)
        }
    }

    /// The user interrupted the wait: see [`Kind::Interrupted`].
    pub fn interrupted(message: impl Into<String>) -> Self {
        Error {
            kind: Kind::Interrupted,
            ..Error::new(message)
        }
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

/// `return Err(Error::new(format!(...)))` in one line.
macro_rules! bail {
    ($($arg:tt)*) => {
        return Err($crate::error::Error::new(format!($($arg)*)))
    };
}
pub(crate) use bail;

pub type Result<T> = std::result::Result<T, Error>;

/// Shows at most the first 40 characters of user input inside a message, so a
/// 10 KB option value still gives one readable line.
pub fn shown(input: &str) -> String {
    const MAX: usize = 40;
    match input.char_indices().nth(MAX) {
        None => format!("{input:?}"),
        Some((cut, _)) => format!("{:?}… ({} bytes)", &input[..cut], input.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_one_bounded_line() {
        let e = Error::new(format!("a\nb\0c{}", "x".repeat(30_000)));
        assert!(e.message().starts_with("a b c"), "{e}");
        assert_eq!(e.message().chars().count(), MAX_MESSAGE + 1);
        assert!(e.message().ends_with('…'));
        assert_eq!(Error::new("short").message(), "short");
    }
}
