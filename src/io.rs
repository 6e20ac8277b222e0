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
    let (path, tensor) = match spec.rsplit_once(':') {
        Some((p, name)) if p.to_ascii_lowercase().ends_with(".safetensors") => (Path::new(p), Some(name)),
        _ => (Path::new(spec), None),
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
    let f = npyz::NpyFile::new(std::io::BufReader::with_capacity(1 << 20, file))
        .map_err(|e| Error::format(path, format!("not a valid .npy file: {e}")))?;
    if f.order() != npyz::Order::C {
        return Err(Error::format(
            path,
            "array is in Fortran order; save it in C order (np.ascontiguousarray)",
        ));
    }
    // Refuse a header that promises more data than the file holds before allocating for it.
    let len = std::fs::metadata(path).map_err(|e| Error::io(path, e))?.len();
    let item = match f.dtype() {
        npyz::DType::Plain(t) => t.num_bytes().unwrap_or(1) as u64,
        _ => 1,
    };
    let need = f.shape().iter().try_fold(item, |a, &s| a.checked_mul(s));
    if need.is_none_or(|n| n > len) {
        return Err(Error::format(
            path,
            format!(
                "header declares shape {:?}, more data than the file's {len} bytes",
                f.shape()
            ),
        ));
    }
    Ok(f)
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
    let (mut tokens, mut texts) = (Some(Vec::new()), Some(Vec::new()));
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
            let f = f as f32;
            if !f.is_finite() {
                return Err(at(format!("embedding[{j}] = {f} is not finite")));
            }
            rows.push(f);
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
        match obj.get("tokens") {
            Some(t) => {
                let t = t
                    .as_f64()
                    .ok_or_else(|| at(format!("\"tokens\" is not a number: {t}")))?;
                if let Some(v) = tokens.as_mut() {
                    v.push(t);
                }
            }
            None => tokens = None,
        }
        match obj.get("text") {
            Some(t) => {
                let t = t.as_str().ok_or_else(|| at("\"text\" is not a string".into()))?;
                if let Some(v) = texts.as_mut() {
                    v.push(t.to_string());
                }
            }
            None => texts = None,
        }
        n += 1;
    }
    let dim = dim.ok_or_else(|| Error::format(path, "no rows (every line is blank)"))?;
    let e = Embeddings::new(n, dim, rows, path.display().to_string())?;
    Ok(Loaded {
        embeddings: e,
        tokens,
        texts,
    })
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
    match ext(path).as_str() {
        "npy" => {
            let (shape, v) = read_npy_f64(path)?;
            if shape.len() != 1 {
                return Err(Error::format(
                    path,
                    format!("costs must be 1-D, got shape {shape:?}"),
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
    use npyz::WriterBuilder;
    let mut buf = Vec::new();
    {
        let mut w = npyz::WriteOptions::new()
            .default_dtype()
            .shape(&[rows as u64, cols as u64])
            .writer(&mut buf)
            .begin_nd()
            .map_err(|e| Error::io(path, e))?;
        w.extend(data.iter().copied()).map_err(|e| Error::io(path, e))?;
        w.finish().map_err(|e| Error::io(path, e))?;
    }
    std::fs::write(path, buf).map_err(|e| Error::io(path, e))
}
