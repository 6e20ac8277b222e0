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
        /// The argument or field (for example "--lambda", "costs\[3\]").
        name: String,
        /// Why it is invalid.
        msg: String,
    },
    /// A device cannot be used: no driver or device, the kernels did not compile, or the
    /// self-test run when it was opened failed. Nothing ran; the CPU engine still works.
    #[error("backend {backend}: {msg}")]
    DeviceUnavailable {
        /// The backend that was asked for (for example "cuda" or "cuda:0").
        backend: String,
        /// Why it is unavailable.
        msg: String,
    },
    /// A device operation failed while it ran (an allocation, a copy, a kernel launch).
    /// The engine may be unusable from here on: open a new one.
    #[error("backend {backend} failed: {msg}")]
    DeviceFailed {
        /// The backend that failed.
        backend: String,
        /// What failed.
        msg: String,
    },
    /// The operation has no implementation on this backend (or with this storage).
    #[error("{what} is not supported on backend {backend}")]
    Unsupported {
        /// The backend asked to run it.
        backend: String,
        /// The operation.
        what: String,
    },
    /// The oracle (a reranker) failed: unreachable, an HTTP error, or a malformed answer.
    #[error("oracle {oracle}: {}{msg}", status.map_or(String::new(), |s| format!("HTTP {s}: ")))]
    Oracle {
        /// Which oracle (a URL, or a name).
        oracle: String,
        /// The HTTP status of the failing response, when there was one.
        status: Option<u16>,
        /// What went wrong.
        msg: String,
    },
}

/// The families of [`Error`] a service branches on (see [`Error::kind`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The caller's input is wrong (a value, a shape, a file's contents): a 4xx.
    InvalidInput,
    /// A file could not be read or written.
    Io,
    /// The device cannot be used ([`Error::DeviceUnavailable`]).
    DeviceUnavailable,
    /// A device operation failed while running ([`Error::DeviceFailed`]).
    DeviceFailed,
    /// Not implemented on this backend ([`Error::Unsupported`]).
    Unsupported,
    /// The oracle failed ([`Error::Oracle`]).
    Oracle,
}

impl Error {
    /// Which family this error belongs to.
    #[must_use]
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Io { .. } => ErrorKind::Io,
            Error::Format { .. }
            | Error::NonFinite { .. }
            | Error::ZeroNorm { .. }
            | Error::DimensionMismatch { .. }
            | Error::Empty(_)
            | Error::InvalidArgument { .. } => ErrorKind::InvalidInput,
            Error::DeviceUnavailable { .. } => ErrorKind::DeviceUnavailable,
            Error::DeviceFailed { .. } => ErrorKind::DeviceFailed,
            Error::Unsupported { .. } => ErrorKind::Unsupported,
            Error::Oracle { .. } => ErrorKind::Oracle,
        }
    }

    /// An [`Error::Unsupported`]: `what` has no implementation on `backend`.
    pub fn unsupported(backend: impl Into<String>, what: impl Into<String>) -> Self {
        Error::Unsupported {
            backend: backend.into(),
            what: what.into(),
        }
    }

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
