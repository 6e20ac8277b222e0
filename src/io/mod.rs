//! File formats: embeddings from `.npy` (2-D, f16/f32/f64, C order), safetensors (a named
//! 2-D tensor) and JSON lines (`{"embedding": [...], "tokens": n, "text": "..."}`); query
//! vectors and token costs from `.npy` or JSON. Errors name the file and the row, line or
//! field at fault, in one line.
//!
//! Every file is read through the one file-open contract ([`file`](mod@file)): only when it is a
//! regular file (a link to `/dev/urandom`, a FIFO or a directory is refused by name before
//! a byte is read), and only up to the cap of its kind ([`crate::limits`]), so a read
//! always ends. Every JSON goes through the one JSON reader ([`json`]: a repeated key is an
//! error naming it), and every safetensors header through [`safetensors_header`]. Each
//! format also has a parser over bytes ([`parse_embeddings`], [`parse_npy_f32`],
//! [`parse_numbers`]) that the file loaders call: what a service receives in a request
//! body goes through the same checks, and the fuzz targets (fuzz/) drive them directly.
//!
//! Numbers: embeddings and queries must be floating point (an integer `.npy` there is
//! refused; convert with `.astype(np.float32)`); costs and oracle scores may be integers.
//! An f64 that does not fit in f32 (`1e39`, or a non-zero `1e-50` that would become 0) is
//! an error naming its row and column, never an infinity or a silent zero. A UTF-8 byte
//! order mark at the start of a JSON or JSON-lines file is skipped, as Python's
//! `utf-8-sig` does.

pub mod fields;
pub mod file;
pub mod json;
mod npy;
pub mod safetensors_header;

use crate::embeddings::Embeddings;
use crate::error::{flatten_lines, Error, Result};
use npy::{npy_f32, npy_f64, Numbers};
use std::io::Read;
use std::path::Path;

/// What an embeddings file held: the matrix, and from JSON lines the token counts and
/// texts when every row had them.
#[derive(Clone, Debug)]
pub struct Loaded {
    /// The embeddings, validated (finite, not ragged, at least one row), not yet
    /// normalised.
    pub embeddings: Embeddings,
    /// `tokens` of every row, when every row had the field.
    pub tokens: Option<Vec<f64>>,
    /// `text` of every row, when every row had the field.
    pub texts: Option<Vec<String>>,
}

/// The embeddings file formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EmbeddingsFormat {
    /// NumPy `.npy`: a 2-D float array in C order.
    Npy,
    /// safetensors: a named 2-D F32/F64/F16/BF16 tensor.
    Safetensors,
    /// JSON lines (`.jsonl`, `.ndjson`, `.json`): one object with `"embedding"` per line.
    JsonLines,
}

impl EmbeddingsFormat {
    /// The format a file's extension names.
    pub fn of(path: &Path) -> Result<Self> {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        match ext.as_deref() {
            Some("npy") => Ok(EmbeddingsFormat::Npy),
            Some("safetensors") => Ok(EmbeddingsFormat::Safetensors),
            Some("jsonl" | "json" | "ndjson") => Ok(EmbeddingsFormat::JsonLines),
            Some(other) => Err(Error::format(
                path,
                format!("unknown embeddings format '.{other}' (expected .npy, .safetensors or .jsonl)"),
            )),
            None => Err(Error::format(
                path,
                "has no extension to tell its format (expected .npy, .safetensors or .jsonl)",
            )),
        }
    }
}

/// Reads a whole regular, non-empty file of at most [`crate::limits::TEXT_FILE_BYTES`]
/// ([`file::read`]: a directory, device, FIFO or socket, or a link to one, is an error
/// naming it, so the read always ends). Readers that know their kind of file call
/// [`file::read`] with its cap.
pub fn read_file(path: &Path) -> Result<Vec<u8>> {
    file::read(path, crate::limits::TEXT_FILE_BYTES)
}

/// `bytes` as UTF-8 text after an optional byte order mark; an error names `path`.
pub(crate) fn utf8<'b>(path: &Path, bytes: &'b [u8]) -> Result<&'b str> {
    let bytes = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
    std::str::from_utf8(bytes).map_err(|e| Error::format(path, format!("not UTF-8: {e}")))
}

/// Splits an embeddings spec `FILE.safetensors:NAME` after the first ".safetensors:" (so
/// tensor names may hold ':' too) into the file and the tensor's name.
pub fn split_spec(spec: &str) -> (&Path, Option<&str>) {
    match spec.to_ascii_lowercase().find(".safetensors:") {
        Some(i) => {
            let cut = i + ".safetensors".len();
            (Path::new(&spec[..cut]), Some(&spec[cut + 1..]))
        }
        None => (Path::new(spec), None),
    }
}

/// Loads embeddings, choosing the format by extension: `.npy`, `.safetensors`
/// (`FILE.safetensors:NAME` picks a tensor; without a name the file must hold one tensor
/// or one called `embeddings`), `.jsonl` / `.json` / `.ndjson`. A `.npy` is streamed (no
/// second full-size copy); the others are read whole and parsed by [`parse_embeddings`].
pub fn load_embeddings(spec: &str) -> Result<Loaded> {
    let (path, tensor) = split_spec(spec);
    match EmbeddingsFormat::of(path)? {
        EmbeddingsFormat::Npy => {
            let (file, len) = file::open(path, crate::limits::TENSOR_FILE_BYTES)?;
            let reader = std::io::BufReader::with_capacity(1 << 20, file);
            npy_matrix(path, reader, len)
        }
        EmbeddingsFormat::Safetensors => parse_embeddings(
            path,
            EmbeddingsFormat::Safetensors,
            &file::read(path, crate::limits::TENSOR_FILE_BYTES)?,
            tensor,
        ),
        f => parse_embeddings(path, f, &read_file(path)?, tensor),
    }
}

/// Parses embeddings held in memory (`bytes` in `format`; `source` names them in errors;
/// `tensor` picks a safetensors tensor). The same checks as [`load_embeddings`].
pub fn parse_embeddings(
    source: &Path,
    format: EmbeddingsFormat,
    bytes: &[u8],
    tensor: Option<&str>,
) -> Result<Loaded> {
    if tensor.is_some() && format != EmbeddingsFormat::Safetensors {
        return Err(Error::format(
            source,
            "a tensor name (:NAME) applies to .safetensors files",
        ));
    }
    if bytes.is_empty() {
        return Err(Error::format(source, "file is empty"));
    }
    match format {
        EmbeddingsFormat::Npy => npy_matrix(source, bytes, bytes.len() as u64),
        EmbeddingsFormat::Safetensors => safetensors_matrix(source, bytes, tensor),
        EmbeddingsFormat::JsonLines => jsonl(source, bytes),
    }
}

/// A 2-D float `.npy` from `r` (`len` bytes in all) as embeddings.
fn npy_matrix<R: Read>(path: &Path, r: R, len: u64) -> Result<Loaded> {
    let (shape, data) = npy_f32(path, r, len, Numbers::Floats)?;
    if shape.len() != 2 {
        return Err(Error::format(
            path,
            format!("expected a 2-D array (rows x dim), got shape {shape:?}"),
        ));
    }
    if shape[0] == 0 {
        return Err(Error::format(path, format!("no rows (shape {shape:?})")));
    }
    let e = Embeddings::new(shape[0], shape[1], data, path.display().to_string())?;
    Ok(Loaded {
        embeddings: e,
        tokens: None,
        texts: None,
    })
}

/// Where element `i` of an array of shape `shape` is, in words.
fn position(shape: &[usize], i: usize) -> String {
    match shape {
        [_, cols] if *cols > 0 => format!("row {}, column {}", i / cols, i % cols),
        _ => format!("element {i}"),
    }
}

/// `x` as f32 ([`crate::embeddings::narrow_f32`]), or an error naming where it is.
fn narrow(path: &Path, shape: &[usize], i: usize, x: f64) -> Result<f32> {
    crate::embeddings::narrow_f32(x).map_err(|m| Error::format(path, format!("{}: {m}", position(shape, i))))
}

/// Reads a float `.npy` (C order; f2, f4 or f8) as `f32`, with its shape: embeddings and
/// queries. Integer arrays are refused.
pub fn read_npy_f32(path: &Path) -> Result<(Vec<usize>, Vec<f32>)> {
    let (file, len) = file::open(path, crate::limits::TENSOR_FILE_BYTES)?;
    npy_f32(
        path,
        std::io::BufReader::with_capacity(1 << 20, file),
        len,
        Numbers::Floats,
    )
}

/// Parses a float `.npy` held in memory as `f32`, with its shape ([`read_npy_f32`]'s
/// checks; `source` names it in errors).
pub fn parse_npy_f32(source: &Path, bytes: &[u8]) -> Result<(Vec<usize>, Vec<f32>)> {
    npy_f32(source, bytes, bytes.len() as u64, Numbers::Floats)
}

/// Reads a numeric `.npy` (C order; floats of 2, 4 or 8 bytes, or integers) as `f64`, with
/// its shape: costs and scores.
pub fn read_npy_f64(path: &Path) -> Result<(Vec<usize>, Vec<f64>)> {
    let (file, len) = file::open(path, crate::limits::TENSOR_FILE_BYTES)?;
    npy_f64(path, std::io::BufReader::with_capacity(1 << 20, file), len)
}

fn safetensors_matrix(path: &Path, bytes: &[u8], name: Option<&str>) -> Result<Loaded> {
    use safetensors::{Dtype, SafeTensors};
    safetensors_header::check(path, bytes)?;
    let st = SafeTensors::deserialize(bytes).map_err(|e| {
        Error::format(
            path,
            format!("not a valid safetensors file: {}", flatten_lines(&e.to_string())),
        )
    })?;
    let names = st.names();
    let name = match name {
        Some(n) => n.to_string(),
        None if names.len() == 1 => names[0].to_string(),
        None if names.contains(&"embeddings") => "embeddings".into(),
        None => {
            let mut n: Vec<&str> = names.clone();
            n.sort_unstable();
            return Err(Error::format(
                path,
                format!(
                    "holds {} tensors ({}); pick one with FILE.safetensors:NAME",
                    n.len(),
                    n.join(", ")
                ),
            ));
        }
    };
    let t = st.tensor(&name).map_err(|e| {
        Error::format(
            path,
            format!("tensor '{name}': {}", flatten_lines(&e.to_string())),
        )
    })?;
    let shape = t.shape().to_vec();
    if shape.len() != 2 {
        return Err(Error::format(
            path,
            format!("tensor '{name}' has shape {shape:?}; expected 2-D (rows x dim)"),
        ));
    }
    if shape[0] == 0 {
        return Err(Error::format(
            path,
            format!("tensor '{name}' has no rows (shape {shape:?})"),
        ));
    }
    let raw = t.data();
    let data: Vec<f32> = match t.dtype() {
        Dtype::F32 => raw
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        Dtype::F64 => raw
            .chunks_exact(8)
            .enumerate()
            .map(|(i, b)| {
                narrow(
                    path,
                    &shape,
                    i,
                    f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
                )
            })
            .collect::<Result<_>>()?,
        Dtype::F16 => raw
            .chunks_exact(2)
            .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        Dtype::BF16 => raw
            .chunks_exact(2)
            .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        d => {
            return Err(Error::format(
                path,
                format!("tensor '{name}' has dtype {d:?}; expected F32, F64, F16 or BF16"),
            ))
        }
    };
    let e = Embeddings::new(shape[0], shape[1], data, format!("{}:{name}", path.display()))?;
    Ok(Loaded {
        embeddings: e,
        tokens: None,
        texts: None,
    })
}

/// A non-empty JSON array of numbers as `f32`, each narrowed by
/// [`crate::embeddings::narrow_f32`]; the error says what is wrong (the caller names the
/// field and line): "is empty", "is a string, not an array of numbers", "element 2 is
/// null, not a number", "element 1: 1e39 does not fit in f32".
pub fn json_f32_array(v: &serde_json::Value) -> std::result::Result<Vec<f32>, String> {
    let a = match v {
        serde_json::Value::Array(a) if !a.is_empty() => a,
        serde_json::Value::Array(_) => return Err("is empty".into()),
        other => return Err(format!("is {}, not an array of numbers", json_type(other))),
    };
    a.iter()
        .enumerate()
        .map(|(i, x)| {
            let f = x
                .as_f64()
                .ok_or_else(|| format!("element {i} is {}, not a number", json_type(x)))?;
            crate::embeddings::narrow_f32(f).map_err(|m| format!("element {i}: {m}"))
        })
        .collect()
}

/// A JSON value's type in words, for errors.
pub fn json_type(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// A token count: finite, positive and at most [`crate::limits::MAX_TOKEN_COUNT`].
fn token_count(t: &serde_json::Value) -> std::result::Result<f64, String> {
    const MAX: u64 = crate::limits::MAX_TOKEN_COUNT;
    match t.as_f64() {
        Some(x) if x.is_finite() && x > MAX as f64 => Err(format!(
            "\"tokens\" is {x:e}, above the largest accepted token count {MAX}"
        )),
        Some(x) if x.is_finite() && x > 0.0 => Ok(x),
        Some(x) => Err(format!("\"tokens\" must be a positive number, got {x}")),
        None => Err(format!("\"tokens\" is {}, not a number", json_type(t))),
    }
}

fn jsonl(path: &Path, bytes: &[u8]) -> Result<Loaded> {
    let text = utf8(path, bytes)?;
    let mut rows: Vec<f32> = Vec::new();
    let mut dim = None;
    let (mut tokens, mut texts) = (Column::new("tokens"), Column::new("text"));
    let mut n = 0usize;
    for (ln, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let at = |msg: String| Error::format(path, format!("line {}: {msg}", ln + 1));
        let v = json::value_str(line).map_err(|e| at(format!("invalid JSON: {e}")))?;
        let obj = v
            .as_object()
            .ok_or_else(|| at(format!("expected a JSON object, got {}", json_type(&v))))?;
        let emb = match obj.get("embedding") {
            Some(serde_json::Value::Array(a)) => a,
            Some(other) => {
                return Err(at(format!(
                    "\"embedding\" is {}, not an array of numbers",
                    json_type(other)
                )))
            }
            None => return Err(at("missing \"embedding\" (an array of numbers)".into())),
        };
        let mut norm2 = 0.0f64;
        for (j, x) in emb.iter().enumerate() {
            let f = x
                .as_f64()
                .ok_or_else(|| at(format!("embedding[{j}] is {}, not a number", json_type(x))))?;
            let v = crate::embeddings::narrow_f32(f).map_err(|m| at(format!("embedding[{j}] = {m}")))?;
            if !v.is_finite() {
                return Err(at(format!("embedding[{j}] = {f:e} is not finite")));
            }
            norm2 += f64::from(v) * f64::from(v);
            rows.push(v);
        }
        match dim {
            None if emb.is_empty() => return Err(at("\"embedding\" is empty".into())),
            None => dim = Some(emb.len()),
            Some(d) if d != emb.len() => {
                return Err(at(format!(
                    "embedding has {} values, earlier rows have {d} (ragged rows)",
                    emb.len()
                )))
            }
            _ => {}
        }
        if norm2 == 0.0 {
            return Err(at(
                "embedding is all zeros (zero norm: it has no direction to compare)".into(),
            ));
        }
        let line = ln + 1;
        match obj.get("tokens") {
            Some(t) => tokens.push(line, token_count(t).map_err(&at)?),
            None => tokens.missing(line),
        }
        match obj.get("text") {
            Some(serde_json::Value::String(t)) => texts.push(line, t.clone()),
            Some(other) => return Err(at(format!("\"text\" is {}, not a string", json_type(other)))),
            None => texts.missing(line),
        }
        n += 1;
    }
    let dim = dim.ok_or_else(|| Error::format(path, "no rows (every line is blank)"))?;
    let e = Embeddings::new(n, dim, rows, path.display().to_string())?;
    Ok(Loaded {
        embeddings: e,
        tokens: tokens.finish(path)?,
        texts: texts.finish(path)?,
    })
}

/// An optional per-row JSON field: kept when every row has it, an error naming the lines
/// when only some do (rather than silently dropping the column).
struct Column<T> {
    name: &'static str,
    values: Vec<T>,
    present: Option<usize>,
    missing: Option<usize>,
}

impl<T> Column<T> {
    fn new(name: &'static str) -> Self {
        Column {
            name,
            values: Vec::new(),
            present: None,
            missing: None,
        }
    }
    fn push(&mut self, line: usize, v: T) {
        self.present.get_or_insert(line);
        self.values.push(v);
    }
    fn missing(&mut self, line: usize) {
        self.missing.get_or_insert(line);
    }
    fn finish(self, path: &Path) -> Result<Option<Vec<T>>> {
        match (self.present, self.missing) {
            (Some(p), Some(m)) => Err(Error::format(
                path,
                format!(
                    "line {p} has \"{}\" but line {m} does not: give it on every line or on none",
                    self.name
                ),
            )),
            (Some(_), None) => Ok(Some(self.values)),
            _ => Ok(None),
        }
    }
}

/// Loads pool texts: JSON lines with `"text"` (required) and `"tokens"` (on every line
/// or on none; each a positive number).
pub fn load_texts(path: &Path) -> Result<(Vec<String>, Option<Vec<f64>>)> {
    parse_texts(path, &read_file(path)?)
}

/// Parses pool texts held in memory ([`load_texts`]; `source` names them in errors).
pub fn parse_texts(source: &Path, bytes: &[u8]) -> Result<(Vec<String>, Option<Vec<f64>>)> {
    let text = utf8(source, bytes)?;
    let (mut texts, mut tokens) = (Vec::new(), Column::new("tokens"));
    for (ln, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = |m: String| Error::format(source, format!("line {}: {m}", ln + 1));
        let v = json::value_str(line).map_err(|e| at(format!("invalid JSON: {e}")))?;
        match v.get("text") {
            Some(serde_json::Value::String(t)) => texts.push(t.clone()),
            Some(other) => return Err(at(format!("\"text\" is {}, not a string", json_type(other)))),
            None => return Err(at("missing \"text\" (a string)".into())),
        }
        match v.get("tokens") {
            Some(k) => tokens.push(ln + 1, token_count(k).map_err(&at)?),
            None => tokens.missing(ln + 1),
        }
    }
    if texts.is_empty() {
        return Err(Error::format(source, "no rows (every line is blank)"));
    }
    Ok((texts, tokens.finish(source)?))
}

/// Loads a query vector: a float `.npy` of shape `(d,)` or `(1, d)`, or a JSON array of
/// numbers; finite, non-zero, every value within f32.
pub fn load_query(path: &Path) -> Result<Vec<f32>> {
    let v = if EmbeddingsFormat::of(path).ok() == Some(EmbeddingsFormat::Npy) {
        let (shape, v) = read_npy_f32(path)?;
        if !(shape.len() == 1 || (shape.len() == 2 && shape[0] == 1)) {
            return Err(Error::format(
                path,
                format!("query must have shape (d,) or (1, d), got {shape:?}"),
            ));
        }
        v
    } else {
        let x = parse_numbers(path, &read_file(path)?)?;
        x.iter()
            .enumerate()
            .map(|(i, &f)| narrow(path, &[x.len()], i, f))
            .collect::<Result<Vec<f32>>>()?
    };
    if v.is_empty() {
        return Err(Error::format(path, "query vector is empty"));
    }
    crate::embeddings::unit_vector(&v, &path.display().to_string())?;
    Ok(v)
}

/// Loads token costs: a 1-D `.npy` (floats or integers) or a JSON array of numbers, each
/// finite and positive.
pub fn load_costs(path: &Path) -> Result<Vec<f64>> {
    let v = load_vector(path, "costs")?;
    if let Some(i) = v.iter().position(|&c| !(c.is_finite() && c > 0.0)) {
        return Err(Error::format(
            path,
            format!(
                "element {i}: a token cost must be a positive number, got {}",
                v[i]
            ),
        ));
    }
    Ok(v)
}

/// Loads a 1-D vector of numbers (`what` names it in errors): a 1-D `.npy` (floats or
/// integers) or a JSON array.
pub fn load_vector(path: &Path, what: &str) -> Result<Vec<f64>> {
    if EmbeddingsFormat::of(path).ok() == Some(EmbeddingsFormat::Npy) {
        let (shape, v) = read_npy_f64(path)?;
        if shape.len() != 1 {
            return Err(Error::format(
                path,
                format!("{what} must be 1-D, got shape {shape:?}"),
            ));
        }
        return Ok(v);
    }
    parse_numbers(path, &read_file(path)?)
}

/// Parses a JSON array of numbers (`source` names it in errors).
pub fn parse_numbers(source: &Path, bytes: &[u8]) -> Result<Vec<f64>> {
    let text = utf8(source, bytes)?;
    let v = json::value_str(text).map_err(|e| Error::format(source, format!("invalid JSON: {e}")))?;
    let a = v.as_array().ok_or_else(|| {
        Error::format(
            source,
            format!("expected a JSON array of numbers, got {}", json_type(&v)),
        )
    })?;
    a.iter()
        .enumerate()
        .map(|(i, x)| {
            x.as_f64().ok_or_else(|| {
                Error::format(source, format!("element {i} is {}, not a number", json_type(x)))
            })
        })
        .collect()
}

/// Writes a 2-D `f32` `.npy` (for tests, demos and tools).
pub fn write_npy_f32(path: &Path, rows: usize, cols: usize, data: &[f32]) -> Result<()> {
    write_npy(path, &[rows as u64, cols as u64], data)
}

/// Writes a 1-D `f32` `.npy` (costs, scores).
pub fn write_npy_f32_vec(path: &Path, data: &[f32]) -> Result<()> {
    write_npy(path, &[data.len() as u64], data)
}

fn write_npy(path: &Path, shape: &[u64], data: &[f32]) -> Result<()> {
    let buf = npy_f32_bytes(shape, data).map_err(|e| match e {
        Error::Io { source, .. } => Error::io(path, source),
        e => e,
    })?;
    std::fs::write(path, buf).map_err(|e| Error::io(path, e))
}

/// An `f32` `.npy` of `shape` in memory (for stdout).
pub fn npy_f32_bytes(shape: &[u64], data: &[f32]) -> Result<Vec<u8>> {
    use npyz::WriterBuilder;
    let mut buf = Vec::new();
    {
        let mut w = npyz::WriteOptions::new()
            .default_dtype()
            .shape(shape)
            .writer(&mut buf)
            .begin_nd()
            .map_err(|e| Error::io("<npy>", e))?;
        w.extend(data.iter().copied())
            .map_err(|e| Error::io("<npy>", e))?;
        w.finish().map_err(|e| Error::io("<npy>", e))?;
    }
    Ok(buf)
}

/// Writes one 2-D `f32` tensor `name` to a safetensors file, with `metadata`.
pub fn write_safetensors_f32(
    path: &Path,
    name: &str,
    rows: usize,
    cols: usize,
    data: &[f32],
    metadata: std::collections::HashMap<String, String>,
) -> Result<()> {
    let bytes: &[u8] = bytemuck::cast_slice(data);
    let view = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![rows, cols], bytes)
        .map_err(|e| Error::invalid(name, format!("{e}")))?;
    let out = safetensors::serialize([(name, view)], Some(metadata))
        .map_err(|e| Error::invalid(name, format!("{e}")))?;
    std::fs::write(path, out).map_err(|e| Error::io(path, e))
}
