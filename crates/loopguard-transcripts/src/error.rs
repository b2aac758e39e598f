//! The errors this crate returns. Reading never fails on content (every line it cannot
//! use is counted in [`ReadStats`](crate::ReadStats)): only I/O, a format name that does
//! not exist and a failure rule that does not compile are errors.

use std::io;

/// What went wrong, without the details: for callers that branch on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Reading the input failed.
    Io,
    /// A format name that no reader has.
    UnknownFormat,
    /// A failure rule that is not valid (a regex that does not compile, a malformed rules
    /// document).
    FailureRule,
}

/// An error of this crate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Reading the input failed.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// A format name that no reader has.
    #[error("unknown format {name:?} (known: {known})")]
    UnknownFormat {
        /// The name given.
        name: String,
        /// The names that exist, comma-separated.
        known: String,
    },
    /// A failure rule that is not valid.
    #[error("invalid failure rule {rule}: {reason}")]
    FailureRule {
        /// The rule, as given.
        rule: String,
        /// Why it is not valid.
        reason: String,
    },
}

impl Error {
    /// What kind of error this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Io(_) => ErrorKind::Io,
            Self::UnknownFormat { .. } => ErrorKind::UnknownFormat,
            Self::FailureRule { .. } => ErrorKind::FailureRule,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_messages() {
        let io = Error::from(io::Error::other("disk"));
        assert_eq!(io.kind(), ErrorKind::Io);
        assert_eq!(io.to_string(), "disk");
        let e = "nope".parse::<crate::Format>().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::UnknownFormat);
        assert!(e.to_string().contains("openclaw"), "{e}");
    }
}
