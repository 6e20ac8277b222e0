//! File formats: embeddings from `.npy` (2-D, f32/f64/f16, C order), safetensors (a named
//! 2-D tensor) and JSON lines (`{"embedding": [...], "tokens": n, "text": "..."}`); query
//! vectors and token costs from `.npy` or JSON. Errors name the file and the row, line or
//! field at fault.

use crate::embeddings::Embeddings;
use crate::error::{Error, Result};
use std::path::Path;

/// What an embeddings file held: the matrix, and from JSON lines the token counts and
/// texts when every row had them.
#[derive(Clone, Debug)]
pub struct Loaded {
    /// The embeddings, validated (finite, not ragged), not yet normalised.
    pub embeddings: Embeddings,
    /// `tokens` of every row, when every row had the field.
    pub tokens: Option<Vec<f64>>,
    /// `text` of every row, when every row had the field.
    pub texts: Option<Vec<String>>,
}

fn read(path: &Path) -> Result<Vec<u8>> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    if bytes.is_empty() {
        return Err(Error::format(path, "file is empty"));
    }
    Ok(bytes)
}

fn ext(path: &Path) -> String {
    path.extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase()
}

/// Loads embeddings, choosing the format by extension: `.npy`, `.safetensors`
/// (`FILE.safetensors:NAME` picks a tensor; without a name the file must hold one tensor
/// or one called `embeddings`), `.jsonl` / `.json` / `.ndjson`.
pub fn load_embeddings(spec: &str) -> Result<Loaded> {
    // `FILE.safetensors:NAME`: split after the first ".safetensors:", so tensor names may
    // hold ':' too.
    let (path, tensor) = match spec.to_ascii_lowercase().find(".safetensors:") {
        Some(i) => {
            let cut = i + ".safetensors".len();
            (Path::new(&spec[..cut]), Some(&spec[cut + 1..]))
        }
        None => (Path::new(spec), None),
    };
    match ext(path).as_str() {
        "npy" => {
            let (shape, data) = read_npy_f32(path)?;
            if shape.len() != 2 {
                return Err(Error::format(
                    path,
                    format!("expected a 2-D array (rows x dim), got shape {shape:?}"),
                ));
            }
            let e = Embeddings::new(shape[0], shape[1], data, path.display().to_string())?;
            Ok(Loaded {
                embeddings: e,
                tokens: None,
                texts: None,
            })
        }
        "safetensors" => load_safetensors(path, tensor),
        "jsonl" | "json" | "ndjson" => load_jsonl(path),
        other => Err(Error::format(
            path,
            format!("unknown embeddings format '.{other}' (expected .npy, .safetensors or .jsonl)"),
        )),
    }
}

/// Opens a `.npy` for streaming reads and checks it is in C order.
fn open_npy(path: &Path) -> Result<npyz::NpyFile<std::io::BufReader<std::fs::File>>> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    if file.metadata().map_err(|e| Error::io(path, e))?.len() == 0 {
        return Err(Error::format(path, "file is empty"));
    }
    let file_len = file.metadata().map_err(|e| Error::io(path, e))?.len();
    if let (hl, Some(shape)) = npy_header(path)? {
        let count = shape.iter().try_fold(1u64, |a, &s| a.checked_mul(s));
        if count.is_none_or(|c| c > file_len.saturating_sub(hl)) {
            return Err(Error::format(
                path,
                format!("header declares shape {shape:?}, more data than the file's {file_len} bytes"),
            ));
        }
    }
    let f = npyz::NpyFile::new(std::io::BufReader::with_capacity(1 << 20, file))
        .map_err(|e| Error::format(path, format!("not a valid .npy file: {e}")))?;
    if f.order() != npyz::Order::C {
        return Err(Error::format(
            path,
            "array is in Fortran order; save it in C order (np.ascontiguousarray)",
        ));
    }
    let item = match f.dtype() {
        npyz::DType::Plain(t)
            if matches!(
                t.type_char(),
                npyz::TypeChar::Float | npyz::TypeChar::Int | npyz::TypeChar::Uint
            ) =>
        {
            t.num_bytes().unwrap_or(1) as u64
        }
        d => {
            return Err(Error::format(
                path,
                format!(
                    "unsupported dtype {}: expected a float or integer array",
                    d.descr()
                ),
            ))
        }
    };
    // The data must fill the file exactly: refuse a header that promises more than the
    // file holds (before allocating for it), and trailing bytes a writer did not mean.
    let len = std::fs::metadata(path).map_err(|e| Error::io(path, e))?.len();
    let need = f.shape().iter().try_fold(item, |a, &s| a.checked_mul(s));
    let data_len = len.checked_sub(npy_header_len(path)?);
    if need.is_none() || need > data_len {
        return Err(Error::format(
            path,
            format!(
                "header declares shape {:?}, more data than the file's {len} bytes",
                f.shape()
            ),
        ));
    }
    if need != data_len {
        return Err(Error::format(
            path,
            format!(
                "{} bytes after the data of shape {:?}",
                data_len.unwrap_or(0) - need.unwrap_or(0),
                f.shape()
            ),
        ));
    }
    Ok(f)
}

/// Bytes before the data: magic (6), version (2), header length (2 bytes in format 1,
/// 4 in formats 2 and 3), header.
fn npy_header_len(path: &Path) -> Result<u64> {
    Ok(npy_header(path)?.0)
}

/// The header length and the declared shape, read before npyz parses the header: npyz
/// multiplies the shape without overflow checks (a crafted header panics in it), so a
/// shape whose element count overflows or exceeds the file is refused here first.
fn npy_header(path: &Path) -> Result<(u64, Option<Vec<u64>>)> {
    use std::io::Read;
    let bad = |m: String| Error::format(path, m);
    let mut f = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut head = [0u8; 12];
    f.read_exact(&mut head)
        .map_err(|e| bad(format!("not a valid .npy file (truncated header: {e})")))?;
    if &head[..6] != b"\x93NUMPY" {
        return Err(bad("not a valid .npy file (no \\x93NUMPY magic)".into()));
    }
    let (start, len) = match head[6] {
        1 => (10u64, u64::from(u16::from_le_bytes([head[8], head[9]]))),
        _ => (
            12u64,
            u64::from(u32::from_le_bytes([head[8], head[9], head[10], head[11]])),
        ),
    };
    if len > 1 << 20 {
        return Err(bad(format!("not a valid .npy file (header of {len} bytes)")));
    }
    let mut text = vec![0u8; (start + len) as usize];
    let mut f = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    f.read_exact(&mut text)
        .map_err(|e| bad(format!("not a valid .npy file (truncated header: {e})")))?;
    let text = String::from_utf8_lossy(&text[start as usize..]);
    let shape = text.find("shape").and_then(|i| {
        let open = i + text[i..].find('(')?;
        let close = open + text[open..].find(')')?;
        Some(&text[open + 1..close])
    });
    let shape = match shape {
        None => None,
        Some(inner) => Some(
            inner
                .split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(|t| {
                    t.trim_end_matches('L')
                        .parse::<u64>()
                        .map_err(|_| bad(format!("shape entry '{t}' is not a size")))
                })
                .collect::<Result<Vec<u64>>>()?,
        ),
    };
    Ok((start + len, shape))
}

/// Reads the values of `f` as `$out`, trying each element type in turn (npyz reads only
/// the exact dtype of the file) and converting while streaming, so no second full-size
/// copy exists.
macro_rules! read_as {
    ($path:expr, $f:expr, $out:ty, $($t:ty => $conv:expr),*) => {{
        let path: &Path = $path;
        let f = $f;
        let dtype = f.dtype();
        $(
            let f = match f.try_data::<$t>() {
                Ok(r) => {
                    let mut v: Vec<$out> = Vec::with_capacity(r.len() as usize);
                    for x in r {
                        let x = x.map_err(|e| Error::format(path, format!("cannot read the data: {e}")))?;
                        v.push($conv(x));
                    }
                    return Ok(v);
                }
                Err(f) => f,
            };
        )*
        drop(f);
        Err(Error::format(path, format!("unsupported dtype {}: expected a float or integer array", dtype.descr())))
    }};
}

fn npy_values_f32(path: &Path, f: npyz::NpyFile<std::io::BufReader<std::fs::File>>) -> Result<Vec<f32>> {
    read_as!(path, f, f32,
        f32 => |x| x, f64 => |x| x as f32, half::f16 => |x: half::f16| x.to_f32(),
        i64 => |x| x as f32, i32 => |x| x as f32, i16 => f32::from, i8 => f32::from,
        u64 => |x| x as f32, u32 => |x| x as f32, u16 => f32::from, u8 => f32::from)
}

fn npy_values_f64(path: &Path, f: npyz::NpyFile<std::io::BufReader<std::fs::File>>) -> Result<Vec<f64>> {
    read_as!(path, f, f64,
        f32 => f64::from, f64 => |x| x, half::f16 => |x: half::f16| x.to_f64(),
        i64 => |x| x as f64, i32 => f64::from, i16 => f64::from, i8 => f64::from,
        u64 => |x| x as f64, u32 => f64::from, u16 => f64::from, u8 => f64::from)
}

/// Reads a numeric `.npy` (C order) as `f32`, with its shape. Floats of 2, 4 or 8 bytes
/// and integers of any width are accepted.
pub fn read_npy_f32(path: &Path) -> Result<(Vec<usize>, Vec<f32>)> {
    let f = open_npy(path)?;
    let shape: Vec<usize> = f.shape().iter().map(|&s| s as usize).collect();
    Ok((shape, npy_values_f32(path, f)?))
}

/// Reads a numeric `.npy` (C order) as `f64`, with its shape.
pub fn read_npy_f64(path: &Path) -> Result<(Vec<usize>, Vec<f64>)> {
    let f = open_npy(path)?;
    let shape: Vec<usize> = f.shape().iter().map(|&s| s as usize).collect();
    Ok((shape, npy_values_f64(path, f)?))
}

fn load_safetensors(path: &Path, name: Option<&str>) -> Result<Loaded> {
    use safetensors::{Dtype, SafeTensors};
    let bytes = read(path)?;
    let st = SafeTensors::deserialize(&bytes)
        .map_err(|e| Error::format(path, format!("not a valid safetensors file: {e}")))?;
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
    let t = st
        .tensor(&name)
        .map_err(|e| Error::format(path, format!("tensor '{name}': {e}")))?;
    let shape = t.shape().to_vec();
    if shape.len() != 2 {
        return Err(Error::format(
            path,
            format!("tensor '{name}' has shape {shape:?}; expected 2-D (rows x dim)"),
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
            .map(|b| f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]) as f32)
            .collect(),
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

fn load_jsonl(path: &Path) -> Result<Loaded> {
    let bytes = read(path)?;
    let text = std::str::from_utf8(&bytes).map_err(|e| Error::format(path, format!("not UTF-8: {e}")))?;
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
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| at(format!("invalid JSON: {e}")))?;
        let obj = v.as_object().ok_or_else(|| at("expected a JSON object".into()))?;
        let emb = obj
            .get("embedding")
            .and_then(|e| e.as_array())
            .ok_or_else(|| at("missing \"embedding\" (an array of numbers)".into()))?;
        for (j, x) in emb.iter().enumerate() {
            let f = x
                .as_f64()
                .ok_or_else(|| at(format!("embedding[{j}] is not a number: {x}")))?;
            let v = f as f32;
            if !v.is_finite() {
                return Err(at(format!("embedding[{j}] = {f} does not fit in f32")));
            }
            if v == 0.0 && f != 0.0 {
                return Err(at(format!("embedding[{j}] = {f} underflows f32 to 0")));
            }
            rows.push(v);
        }
        match dim {
            None => dim = Some(emb.len()),
            Some(d) if d != emb.len() => {
                return Err(at(format!(
                    "embedding has {} values, earlier rows have {d} (ragged rows)",
                    emb.len()
                )))
            }
            _ => {}
        }
        let line = ln + 1;
        match obj.get("tokens") {
            Some(t) => tokens.push(
                line,
                t.as_f64()
                    .ok_or_else(|| at(format!("\"tokens\" is not a number: {t}")))?,
            ),
            None => tokens.missing(line),
        }
        match obj.get("text") {
            Some(t) => texts.push(
                line,
                t.as_str()
                    .ok_or_else(|| at("\"text\" is not a string".into()))?
                    .to_string(),
            ),
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
/// or on none).
pub fn load_texts(path: &Path) -> Result<(Vec<String>, Option<Vec<f64>>)> {
    let bytes = read(path)?;
    let text = std::str::from_utf8(&bytes).map_err(|e| Error::format(path, format!("not UTF-8: {e}")))?;
    let (mut texts, mut tokens) = (Vec::new(), Column::new("tokens"));
    for (ln, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = |m: String| Error::format(path, format!("line {}: {m}", ln + 1));
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| at(format!("invalid JSON: {e}")))?;
        let t = v
            .get("text")
            .and_then(|t| t.as_str())
            .ok_or_else(|| at("missing \"text\" (a string)".into()))?;
        texts.push(t.to_string());
        match v.get("tokens") {
            Some(k) => tokens.push(
                ln + 1,
                k.as_f64()
                    .ok_or_else(|| at(format!("\"tokens\" is not a number: {k}")))?,
            ),
            None => tokens.missing(ln + 1),
        }
    }
    if texts.is_empty() {
        return Err(Error::format(path, "no rows (every line is blank)"));
    }
    Ok((texts, tokens.finish(path)?))
}

/// Loads a query vector: a `.npy` of shape `(d,)` or `(1, d)`, or a JSON array of numbers.
pub fn load_query(path: &Path) -> Result<Vec<f32>> {
    let v = match ext(path).as_str() {
        "npy" => {
            let (shape, v) = read_npy_f32(path)?;
            if !(shape.len() == 1 || (shape.len() == 2 && shape[0] == 1)) {
                return Err(Error::format(
                    path,
                    format!("query must have shape (d,) or (1, d), got {shape:?}"),
                ));
            }
            v
        }
        _ => json_numbers(path)?.into_iter().map(|x| x as f32).collect(),
    };
    if v.is_empty() {
        return Err(Error::format(path, "query vector is empty"));
    }
    crate::embeddings::unit_vector(&v, &path.display().to_string())?;
    Ok(v)
}

/// Loads token costs: a 1-D `.npy` or a JSON array of numbers.
pub fn load_costs(path: &Path) -> Result<Vec<f64>> {
    load_vector(path, "costs")
}

/// Loads a 1-D vector of numbers (`what` names it in errors): a 1-D `.npy` or a JSON array.
pub fn load_vector(path: &Path, what: &str) -> Result<Vec<f64>> {
    match ext(path).as_str() {
        "npy" => {
            let (shape, v) = read_npy_f64(path)?;
            if shape.len() != 1 {
                return Err(Error::format(
                    path,
                    format!("{what} must be 1-D, got shape {shape:?}"),
                ));
            }
            Ok(v)
        }
        _ => json_numbers(path),
    }
}

fn json_numbers(path: &Path) -> Result<Vec<f64>> {
    let bytes = read(path)?;
    let v: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| Error::format(path, format!("invalid JSON: {e}")))?;
    let a = v
        .as_array()
        .ok_or_else(|| Error::format(path, "expected a JSON array of numbers"))?;
    a.iter()
        .enumerate()
        .map(|(i, x)| {
            x.as_f64()
                .ok_or_else(|| Error::format(path, format!("element {i} is not a number: {x}")))
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
    use npyz::WriterBuilder;
    let mut buf = Vec::new();
    {
        let mut w = npyz::WriteOptions::new()
            .default_dtype()
            .shape(shape)
            .writer(&mut buf)
            .begin_nd()
            .map_err(|e| Error::io(path, e))?;
        w.extend(data.iter().copied()).map_err(|e| Error::io(path, e))?;
        w.finish().map_err(|e| Error::io(path, e))?;
    }
    std::fs::write(path, buf).map_err(|e| Error::io(path, e))
}
