//! The crate's one error type. Every variant names what was wrong and where, so a
//! pipeline log line is enough to find the bad row, field or file.

use std::path::PathBuf;

/// Result alias used across the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong across the public API. Nothing in the crate panics on
/// bad input; it returns one of these instead.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file could not be opened, read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// A file was read but its contents are not what the format requires.
    #[error("{path}: {msg}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong with it (names the row or field where there is one).
        msg: String,
    },
    /// A value in an embedding matrix is NaN or infinite.
    #[error("{source_name}: row {row}, column {col}: value is {value} (NaN and infinities are not allowed)")]
    NonFinite {
        /// Where the matrix came from (a file name, or "query", "embeddings").
        source_name: String,
        /// Row index (0-based).
        row: usize,
        /// Column index (0-based).
        col: usize,
        /// The offending value.
        value: f32,
    },
    /// A row has zero norm, so it has no direction to normalise.
    #[error("{source_name}: row {row} has zero norm and cannot be unit-normalised")]
    ZeroNorm {
        /// Where the matrix came from.
        source_name: String,
        /// Row index (0-based).
        row: usize,
    },
    /// Two things that must have the same dimension do not.
    #[error("{what}: dimension mismatch, expected {expected}, got {got}")]
    DimensionMismatch {
        /// What was compared (for example "query vs embeddings").
        what: String,
        /// The dimension required.
        expected: usize,
        /// The dimension found.
        got: usize,
    },
    /// A collection that must not be empty is empty.
    #[error("{0} is empty")]
    Empty(String),
    /// An argument is out of its allowed range or inconsistent with others.
    #[error("invalid {name}: {msg}")]
    InvalidArgument {
        /// The argument or field (for example "--lambda", "costs[3]").
        name: String,
        /// Why it is invalid.
        msg: String,
    },
    /// A backend could not be used (no CUDA driver, no device, a failed self-test).
    #[error("backend {backend}: {msg}")]
    Backend {
        /// The backend that was asked for.
        backend: String,
        /// Why it is unavailable.
        msg: String,
    },
}

impl Error {
    /// An [`Error::InvalidArgument`] for `name`.
    pub fn invalid(name: impl Into<String>, msg: impl Into<String>) -> Self {
        Error::InvalidArgument {
            name: name.into(),
            msg: msg.into(),
        }
    }

    /// An [`Error::Format`] for `path`.
    pub fn format(path: impl Into<PathBuf>, msg: impl Into<String>) -> Self {
        Error::Format {
            path: path.into(),
            msg: msg.into(),
        }
    }

    /// An [`Error::Io`] for `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}
