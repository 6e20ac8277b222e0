//! The crate's one error type. Every variant names what was wrong and where, so a
//! pipeline log line is enough to find the bad row, field or file.

use std::path::PathBuf;

/// Result alias used across the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong across the public API. Nothing in the crate panics on
/// bad input; it returns one of these instead.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A file could not be opened, read or written.
    Io {
        /// The file.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// A file was read but its contents are not what the format requires.
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong with it (names the row or field where there is one).
        msg: String,
    },
    /// A value in an embedding matrix is NaN or infinite.
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
    ZeroNorm {
        /// Where the matrix came from.
        source_name: String,
        /// Row index (0-based).
        row: usize,
    },
    /// Two things that must have the same dimension do not.
    DimensionMismatch {
        /// What was compared (for example "query vs embeddings").
        what: String,
        /// The dimension required.
        expected: usize,
        /// The dimension found.
        got: usize,
    },
    /// A collection that must not be empty is empty.
    Empty(String),
    /// An argument is out of its allowed range or inconsistent with others.
    InvalidArgument {
        /// The argument or field (for example "--lambda", "costs\[3\]").
        name: String,
        /// Why it is invalid.
        msg: String,
    },
    /// A device cannot be used: no driver or device, the kernels did not compile, or the
    /// self-test run when it was opened failed. Nothing ran; the CPU engine still works.
    DeviceUnavailable {
        /// The backend that was asked for (for example "cuda" or "cuda:0").
        backend: String,
        /// Why it is unavailable.
        msg: String,
    },
    /// A device operation failed while it ran (an allocation, a copy, a kernel launch).
    /// The engine may be unusable from here on: open a new one.
    DeviceFailed {
        /// The backend that failed.
        backend: String,
        /// What failed.
        msg: String,
    },
    /// The operation has no implementation on this backend (or with this storage).
    Unsupported {
        /// The backend asked to run it.
        backend: String,
        /// The operation.
        what: String,
    },
    /// The oracle (a reranker) failed: unreachable, an HTTP error, or a malformed answer.
    Oracle {
        /// Which oracle (a URL, or a name).
        oracle: String,
        /// The HTTP status of the failing response, when there was one.
        status: Option<u16>,
        /// What went wrong.
        msg: String,
    },
    /// The work was stopped by its [`crate::cancel::Cancel`]: cancelled, or past its
    /// deadline. Nothing of it is returned.
    Cancelled {
        /// Why it stopped ("past its deadline", "cancelled").
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
    /// The work was stopped by its cancel signal ([`Error::Cancelled`]).
    Cancelled,
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
            Error::Cancelled { .. } => ErrorKind::Cancelled,
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

/// Where an error is shown. The library names every input by its one name, the Rust
/// field and the Python keyword and the JSON field alike (`token_budget`), and a message
/// that points to another input writes it in backticks (`` `costs` ``); each surface then
/// spells it its own way ([`Error::render`]): the CLI as its flag (`--costs`), Python as
/// the keyword (`costs=`), HTTP as the JSON field (`"costs"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Surface {
    /// The library itself: the message as written.
    Rust,
    /// The `ctxprune` command line.
    Cli,
    /// The Python package.
    Python,
    /// `ctxprune serve`'s request bodies.
    Http,
}

impl Surface {
    /// How this surface spells the input `name` (snake case) where a message points to it.
    #[must_use]
    pub fn spell(self, name: &str) -> String {
        match self {
            Surface::Rust => format!("`{name}`"),
            Surface::Cli => format!("--{}", name.replace('_', "-")),
            Surface::Python => format!("{name}="),
            Surface::Http => format!("\"{name}\""),
        }
    }
}

/// Whether `s` is an input's name: lower-case ASCII words joined by `_`.
fn is_input_name(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_lowercase())
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// `msg` with every `` `name` `` spelled as `surface` spells an input.
fn respell(msg: &str, surface: Surface) -> String {
    let mut out = String::with_capacity(msg.len());
    let mut rest = msg;
    while let Some(i) = rest.find('`') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        match after.find('`') {
            Some(j) if is_input_name(&after[..j]) => {
                out.push_str(&surface.spell(&after[..j]));
                rest = &after[j + 1..];
            }
            _ => {
                out.push('`');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

impl Error {
    /// The one line of this error as `surface` shows it: the inputs its message points to
    /// spelled as that surface names them ([`Surface`]); an invalid argument named in
    /// kebab case (`graph-degree`, from a file's field) is named in snake case in Python
    /// and over HTTP. (The CLI names the argument itself by its flag where the command
    /// has one; the library cannot know which of its names are a command's flags.)
    #[must_use]
    pub fn render(&self, surface: Surface) -> String {
        match self {
            Error::InvalidArgument { name, msg } if surface != Surface::Rust => {
                let name = match surface {
                    Surface::Python | Surface::Http if !name.starts_with('-') => name.replace('-', "_"),
                    _ => name.clone(),
                };
                escape_controls(&format!("invalid {name}: {}", respell(msg, surface)))
            }
            e => e.to_string(),
        }
    }
}

impl std::fmt::Display for Error {
    /// One line, always: the message is built, then every line break or other control
    /// character in it (from a file name, an id, a foreign library's message) is escaped,
    /// so a log line or a CLI's stderr holds exactly one line per error.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let raw = match self {
            Error::Io { path, source } => format!("{}: {source}", path.display()),
            Error::Format { path, msg } => format!("{}: {msg}", path.display()),
            Error::NonFinite {
                source_name,
                row,
                col,
                value,
            } => format!(
                "{source_name}: row {row}, column {col}: value is {value} (NaN and infinities are not allowed)"
            ),
            Error::ZeroNorm { source_name, row } => {
                format!("{source_name}: row {row} has zero norm and cannot be unit-normalised")
            }
            Error::DimensionMismatch {
                what,
                expected,
                got,
            } => format!("{what}: dimension mismatch, expected {expected}, got {got}"),
            Error::Empty(what) => format!("{what} is empty"),
            Error::InvalidArgument { name, msg } => format!("invalid {name}: {msg}"),
            Error::DeviceUnavailable { backend, msg } => format!("backend {backend}: {msg}"),
            Error::DeviceFailed { backend, msg } => format!("backend {backend} failed: {msg}"),
            Error::Unsupported { backend, what } => {
                format!("{what} is not supported on backend {backend}")
            }
            Error::Oracle {
                oracle,
                status,
                msg,
            } => match status {
                Some(s) => format!("oracle {oracle}: HTTP {s}: {msg}"),
                None => format!("oracle {oracle}: {msg}"),
            },
            Error::Cancelled { msg } => format!("stopped: {msg}"),
        };
        f.write_str(&escape_controls(&raw))
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// `s` with every control character written as an escape (`\n`, `\r`, `\t`, `\u{1b}`)
/// and the Unicode line separators too: text that is certainly one line.
#[must_use]
pub fn escape_controls(s: &str) -> String {
    let bad = |c: char| c.is_control() || matches!(c, '\u{2028}' | '\u{2029}');
    if !s.chars().any(bad) {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if bad(c) => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
            c => out.push(c),
        }
    }
    out
}

/// A foreign library's multi-line message (a parser's report with context lines, a
/// compiler log) as one readable line: its non-blank lines, trimmed, joined by " | ".
#[must_use]
pub fn flatten_lines(s: &str) -> String {
    s.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_displays_as_one_line() {
        let e = Error::format("a\nb.npy", "bad\r\nheader\u{2028}x\u{1b}[31m");
        let s = e.to_string();
        assert_eq!(s, "a\\nb.npy: bad\\r\\nheader\\u{2028}x\\u{1b}[31m");
        assert_eq!(s.lines().count(), 1);
        let e = Error::invalid("id \"x\ny\"", "answers nothing");
        assert_eq!(e.to_string(), "invalid id \"x\\ny\": answers nothing");
        assert_eq!(
            flatten_lines("first\n   second  \n\n third"),
            "first | second | third"
        );
        let io = Error::io("f", std::io::Error::other("disk\nfull"));
        assert_eq!(io.to_string(), "f: disk\\nfull");
        assert!(std::error::Error::source(&io).is_some());
    }
}
