//! The one file-open contract: every path the crate and the CLI read goes through here.
//!
//! - A file is read only when it is a regular file (following links): a directory, a
//!   device (`/dev/zero` grows without end), a FIFO (blocks until a writer comes) or a
//!   socket is refused by what it is, naming the path, before a byte is read. What the
//!   path names is checked before it is opened, and the opened file again.
//! - Every read has a cap ([`crate::limits`]: configurations, JSON data, tensors): a file
//!   longer than the cap is refused naming the file and the cap, before it is read.
//! - A directory ([`dir`]) must be one; the files inside it are read through [`read`].
//! - An output path ([`output`], [`output_dir`]) is checked before any work, so a command
//!   that cannot write its file fails before it prints anything.

use crate::error::{Error, Result};
use std::io::Read;
use std::path::Path;

/// What `t` is, in words ("a directory", "a named pipe", ...).
fn what(t: &std::fs::FileType) -> &'static str {
    if t.is_dir() {
        return "a directory";
    }
    if t.is_file() {
        return "a regular file";
    }
    special_kind(t)
}

#[cfg(unix)]
fn special_kind(t: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_fifo() {
        "a named pipe"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a file"
    }
}

#[cfg(not(unix))]
fn special_kind(_: &std::fs::FileType) -> &'static str {
    "a special file"
}

/// Checks that `meta` (of `path`) is a regular file of at most `cap` bytes.
fn check_regular(path: &Path, meta: &std::fs::Metadata, cap: u64) -> Result<()> {
    let t = meta.file_type();
    if !t.is_file() {
        return Err(Error::format(
            path,
            format!("is {}, not a regular file", what(&t)),
        ));
    }
    if meta.len() > cap {
        return Err(Error::format(
            path,
            format!(
                "is {} bytes, more than the {cap} bytes a file of this kind may hold",
                meta.len()
            ),
        ));
    }
    Ok(())
}

/// Opens a regular, non-empty file of at most `cap` bytes ([`crate::limits`] names the
/// caps): the file and its length. What the path names is checked before it is opened
/// (opening a FIFO blocks until a writer comes), and the opened file again (the path may
/// have changed in between).
pub fn open(path: &Path, cap: u64) -> Result<(std::fs::File, u64)> {
    check_regular(
        path,
        &std::fs::metadata(path).map_err(|e| Error::io(path, e))?,
        cap,
    )?;
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let meta = file.metadata().map_err(|e| Error::io(path, e))?;
    check_regular(path, &meta, cap)?;
    if meta.len() == 0 {
        return Err(Error::format(path, "file is empty"));
    }
    Ok((file, meta.len()))
}

/// Reads a whole regular, non-empty file of at most `cap` bytes ([`open`]'s checks).
pub fn read(path: &Path, cap: u64) -> Result<Vec<u8>> {
    let (file, len) = open(path, cap)?;
    let mut bytes = Vec::new();
    bytes
        .try_reserve_exact(usize::try_from(len).unwrap_or(usize::MAX))
        .map_err(|e| Error::format(path, format!("cannot hold its {len} bytes in memory: {e}")))?;
    // A regular file that grows while it is read is read to the length it had.
    file.take(len)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io(path, e))?;
    Ok(bytes)
}

/// [`read`] as UTF-8 text, after an optional byte order mark.
pub fn read_text(path: &Path, cap: u64) -> Result<String> {
    let mut bytes = read(path, cap)?;
    if bytes.starts_with(b"\xef\xbb\xbf") {
        bytes.drain(..3);
    }
    String::from_utf8(bytes).map_err(|e| Error::format(path, format!("not UTF-8: {}", e.utf8_error())))
}

/// Checks that `path` names a directory (following links); anything else is an error
/// naming what it is.
pub fn dir(path: &Path) -> Result<()> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    let t = meta.file_type();
    if t.is_dir() {
        Ok(())
    } else {
        Err(Error::format(path, format!("is {}, not a directory", what(&t))))
    }
}

/// Whether an optional file exists (a dangling link does not): the caller then reads it
/// through [`read`], which refuses anything but a regular file.
pub fn exists(path: &Path) -> Result<bool> {
    match std::fs::metadata(path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(Error::io(path, e)),
    }
}

/// Checks, before any work, that a file can be written at `path`: an existing regular
/// file must open for writing (it is not changed), a device or pipe is taken as it is
/// (`/dev/null`, `/dev/stdout`), a directory is refused, and a new file must be creatable
/// (it is created and removed again).
pub fn output(path: &Path) -> Result<()> {
    let cannot = |e: std::io::Error| Error::format(path, format!("cannot be written: {e}"));
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => Err(Error::format(path, "is a directory, not a file to write")),
        Ok(meta) if meta.is_file() => std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .map(drop)
            .map_err(cannot),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
                .map_err(cannot)?;
            std::fs::remove_file(path).map_err(cannot)
        }
        Err(e) => Err(cannot(e)),
    }
}

/// Checks, before any work, that files can be written into the directory `path`: it is
/// created (with its parents) when missing; anything but a directory is refused.
pub fn output_dir(path: &Path) -> Result<()> {
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(meta) => Err(Error::format(
            path,
            format!("is {}, not a directory to write into", what(&meta.file_type())),
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(path).map_err(|e| Error::format(path, format!("cannot be created: {e}")))
        }
        Err(e) => Err(Error::io(path, e)),
    }
}
