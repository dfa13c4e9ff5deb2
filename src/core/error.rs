//! The one error type of the core: a sentence for the user, naming the bad part.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error(String);

impl Error {
    pub fn new(message: impl Into<String>) -> Self {
        Error(message.into())
    }

    pub fn message(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

/// `return Err(Error::new(format!(...)))` in one line.
macro_rules! bail {
    ($($arg:tt)*) => {
        return Err($crate::core::Error::new(format!($($arg)*)))
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
