//! Request bodies: JSON read with errors that name the field, and embeddings given inline
//! (arrays of rows) or as base64 little-endian f32/f16 with a shape.

use crate::error::{Error, Result};
use crate::Embeddings;
use base64::Engine as _;
use serde_json::{Map, Value};

/// A JSON object's fields, each read once; what is left over is an error naming it.
pub struct Fields {
    map: Map<String, Value>,
}

impl Fields {
    /// The body's fields; the body must be one JSON object.
    pub fn parse(body: &[u8]) -> Result<Fields> {
        let v: Value =
            serde_json::from_slice(body).map_err(|e| Error::invalid("body", format!("not JSON ({e})")))?;
        match v {
            Value::Object(map) => Ok(Fields { map }),
            other => Err(Error::invalid(
                "body",
                format!("must be a JSON object, got {}", crate::io::json_type(&other)),
            )),
        }
    }

    /// The body's fields, with the text of `raw` exactly as sent (not parsed into a
    /// `Value`, which would turn a 30-digit integer into a float): the messages of
    /// `/v1/mask` are written back byte for byte.
    pub fn parse_keeping(body: &[u8], raw: &str) -> Result<(Fields, Option<String>)> {
        let m: std::collections::BTreeMap<String, &serde_json::value::RawValue> =
            serde_json::from_slice(body).map_err(|e| {
                // Not an object, or not JSON: the same words as `parse`.
                match Fields::parse(body) {
                    Err(err) => err,
                    Ok(_) => Error::invalid("body", format!("not JSON ({e})")),
                }
            })?;
        let mut map = Map::new();
        let mut kept = None;
        for (k, v) in m {
            if k == raw {
                if v.get() != "null" {
                    kept = Some(v.get().to_string());
                }
                continue;
            }
            let v: Value =
                serde_json::from_str(v.get()).map_err(|e| Error::invalid(&k, format!("not JSON ({e})")))?;
            map.insert(k, v);
        }
        Ok((Fields { map }, kept))
    }

    /// Takes `name` (absent or null: `None`).
    pub fn take(&mut self, name: &str) -> Option<Value> {
        self.map.remove(name).filter(|v| !v.is_null())
    }

    fn typed<T>(&mut self, name: &str, want: &str, f: impl FnOnce(&Value) -> Option<T>) -> Result<Option<T>> {
        match self.take(name) {
            None => Ok(None),
            Some(v) => f(&v)
                .map(Some)
                .ok_or_else(|| Error::invalid(name, format!("must be {want}, got {}", short(&v)))),
        }
    }

    /// A string field.
    pub fn str(&mut self, name: &str) -> Result<Option<String>> {
        self.typed(name, "a string", |v| v.as_str().map(str::to_string))
    }

    /// A non-negative integer field.
    pub fn count(&mut self, name: &str) -> Result<Option<usize>> {
        self.typed(name, "a non-negative integer", |v| {
            v.as_u64().and_then(|x| usize::try_from(x).ok())
        })
    }

    /// A finite number field.
    pub fn num(&mut self, name: &str) -> Result<Option<f64>> {
        self.typed(name, "a finite number", |v| v.as_f64().filter(|x| x.is_finite()))
    }

    /// A boolean field.
    pub fn bool(&mut self, name: &str) -> Result<Option<bool>> {
        self.typed(name, "true or false", Value::as_bool)
    }

    /// An array whose every element `f` reads, naming `name[i]` (wanting `want`) at the
    /// first it cannot.
    fn array<T>(
        &mut self,
        name: &str,
        want: &str,
        f: impl Fn(&Value) -> Option<T>,
    ) -> Result<Option<Vec<T>>> {
        match self.take(name) {
            None => Ok(None),
            Some(Value::Array(a)) => a
                .iter()
                .enumerate()
                .map(|(i, x)| {
                    f(x).ok_or_else(|| {
                        Error::invalid(
                            format!("{name}[{i}]"),
                            format!("must be {want}, got {}", short(x)),
                        )
                    })
                })
                .collect::<Result<Vec<_>>>()
                .map(Some),
            Some(v) => Err(Error::invalid(
                name,
                format!("must be an array, got {}", short(&v)),
            )),
        }
    }

    /// An array of finite numbers.
    pub fn nums(&mut self, name: &str) -> Result<Option<Vec<f64>>> {
        self.array(name, "a finite number", |x| x.as_f64().filter(|x| x.is_finite()))
    }

    /// An array of non-negative integers.
    pub fn counts(&mut self, name: &str) -> Result<Option<Vec<usize>>> {
        self.array(name, "a non-negative integer", |x| {
            x.as_u64().and_then(|x| usize::try_from(x).ok())
        })
    }

    /// An array of strings.
    pub fn strs(&mut self, name: &str) -> Result<Option<Vec<String>>> {
        self.array(name, "a string", |x| x.as_str().map(str::to_string))
    }

    /// A vector of f32 (a query), each value in f32's range.
    pub fn vector(&mut self, name: &str) -> Result<Option<Vec<f32>>> {
        let Some(v) = self.nums(name)? else {
            return Ok(None);
        };
        v.iter()
            .enumerate()
            .map(|(i, &x)| narrow(&format!("{name}[{i}]"), x))
            .collect::<Result<Vec<_>>>()
            .map(Some)
    }

    /// Embeddings: an array of rows, or `{"base64", "dtype": "f32"|"f16", "shape": [n, d]}`.
    pub fn matrix(&mut self, name: &str) -> Result<Option<Embeddings>> {
        let Some(v) = self.take(name) else { return Ok(None) };
        matrix(name, v).map(Some)
    }

    /// Fails naming the first field no one read.
    pub fn done(self) -> Result<()> {
        match self.map.keys().next() {
            None => Ok(()),
            Some(k) => Err(Error::invalid(k, "unknown field")),
        }
    }
}

/// A value's kind and, when short, the value itself, for messages.
fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.len() <= 40 {
        format!("{} ({s})", crate::io::json_type(v))
    } else {
        crate::io::json_type(v).to_string()
    }
}

/// `x` as f32, naming `at` when it does not fit; JSON has no NaN or infinity.
fn narrow(at: &str, x: f64) -> Result<f32> {
    crate::embeddings::narrow_f32(x).map_err(|m| Error::invalid(at, m))
}

/// The embeddings in `v`, named `name` in errors.
pub fn matrix(name: &str, v: Value) -> Result<Embeddings> {
    match v {
        Value::Array(rows) => {
            let n = rows.len();
            let d = rows.first().and_then(Value::as_array).map_or(0, Vec::len);
            let mut data = Vec::with_capacity(n.saturating_mul(d).min(1 << 28));
            for (r, row) in rows.iter().enumerate() {
                let row = row.as_array().ok_or_else(|| {
                    Error::invalid(
                        format!("{name}[{r}]"),
                        format!("must be an array of numbers, got {}", short(row)),
                    )
                })?;
                if row.len() != d {
                    return Err(Error::invalid(
                        format!("{name}[{r}]"),
                        format!("has {} values; row 0 has {d}", row.len()),
                    ));
                }
                for (c, x) in row.iter().enumerate() {
                    let at = || format!("{name}[{r}][{c}]");
                    let x = x
                        .as_f64()
                        .ok_or_else(|| Error::invalid(at(), format!("must be a number, got {}", short(x))))?;
                    data.push(narrow(&at(), x)?);
                }
            }
            Embeddings::new(n, d, data, name)
        }
        Value::Object(mut o) => {
            let mut f = Fields {
                map: std::mem::take(&mut o),
            };
            let sub = |k: &str| format!("{name}.{k}");
            let b64 = f
                .str("base64")
                .map_err(|e| rename(e, &sub("base64")))?
                .ok_or_else(|| Error::invalid(sub("base64"), "required"))?;
            let dtype = f
                .str("dtype")
                .map_err(|e| rename(e, &sub("dtype")))?
                .unwrap_or_else(|| "f32".into());
            let shape = f
                .counts("shape")
                .map_err(|e| rename(e, &sub("shape")))?
                .ok_or_else(|| Error::invalid(sub("shape"), "required: [rows, dimensions]"))?;
            if let Some(k) = f.map.keys().next() {
                return Err(Error::invalid(sub(k), "unknown field (base64, dtype, shape)"));
            }
            let &[n, d] = shape.as_slice() else {
                return Err(Error::invalid(
                    sub("shape"),
                    format!("must be [rows, dimensions], got {} entries", shape.len()),
                ));
            };
            let width = match dtype.as_str() {
                "f32" => 4,
                "f16" => 2,
                t => {
                    return Err(Error::invalid(
                        sub("dtype"),
                        format!("unknown dtype '{t}' (f32, f16)"),
                    ))
                }
            };
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(b64.as_bytes())
                .map_err(|e| Error::invalid(sub("base64"), format!("not base64 ({e})")))?;
            let want = n.checked_mul(d).and_then(|c| c.checked_mul(width));
            if want != Some(bytes.len()) {
                return Err(Error::invalid(
                    sub("base64"),
                    format!(
                        "{} bytes, but shape [{n}, {d}] of {dtype} needs {}",
                        bytes.len(),
                        want.map_or("more than 2^64".into(), |w| w.to_string())
                    ),
                ));
            }
            let data: Vec<f32> = if width == 4 {
                bytes
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect()
            } else {
                bytes
                    .chunks_exact(2)
                    .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
                    .collect()
            };
            Embeddings::new(n, d, data, name)
        }
        other => Err(Error::invalid(
            name,
            format!(
                "must be an array of rows or {{base64, dtype, shape}}, got {}",
                short(&other)
            ),
        )),
    }
}

/// `e` with an invalid-argument name replaced by `name`.
fn rename(e: Error, name: &str) -> Error {
    match e {
        Error::InvalidArgument { msg, .. } => Error::invalid(name, msg),
        e => e,
    }
}
