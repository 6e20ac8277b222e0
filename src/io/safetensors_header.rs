//! Every safetensors file the crate reads (embeddings, attention Q/K dumps, encoder
//! weights, controller weights) has its JSON header checked here first, by the one JSON
//! reader ([`super::json`]): a tensor or metadata entry named twice would otherwise be
//! resolved by whichever value the safetensors crate keeps, silently.

use super::json;
use crate::error::{Error, Result};
use std::path::Path;

/// The largest header the crate reads (the safetensors crate's own limit).
pub const MAX_HEADER_BYTES: u64 = 100 << 20;

/// The header's byte range in a safetensors file of `len` bytes whose first 8 bytes are
/// `len8`; an error names `path`.
pub fn header_range(path: &Path, len8: [u8; 8], len: u64) -> Result<std::ops::Range<usize>> {
    let n = u64::from_le_bytes(len8);
    match 8u64.checked_add(n) {
        Some(end) if n <= MAX_HEADER_BYTES && end <= len => Ok(8..end as usize),
        _ => Err(Error::format(
            path,
            format!("header length {n} does not fit the file ({len} bytes)"),
        )),
    }
}

/// Parses a header's JSON (refusing repeated keys at any depth); errors name `path`.
pub fn parse(path: &Path, header: &[u8]) -> Result<serde_json::Value> {
    json::value(header).map_err(|e| Error::format(path, format!("safetensors header: {e}")))
}

/// Checks the header of safetensors bytes (its length, its JSON, no repeated key) before
/// they go to the safetensors crate or candle; errors name `path`.
pub fn check(path: &Path, bytes: &[u8]) -> Result<()> {
    let Some(len8) = bytes.get(..8) else {
        return Err(Error::format(path, "shorter than a safetensors header (8 bytes)"));
    };
    let mut b = [0u8; 8];
    b.copy_from_slice(len8);
    let r = header_range(path, b, bytes.len() as u64)?;
    json::scan(&bytes[r]).map_err(|e| Error::format(path, format!("safetensors header: {e}")))?;
    Ok(())
}

/// Reads a whole safetensors file (the file contract, [`crate::limits::TENSOR_FILE_BYTES`])
/// and checks its header ([`check`]).
pub fn read(path: &Path) -> Result<Vec<u8>> {
    let bytes = super::file::read(path, crate::limits::TENSOR_FILE_BYTES)?;
    check(path, &bytes)?;
    Ok(bytes)
}
