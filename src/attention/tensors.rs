//! Q and K of the hooked layers from one safetensors file (App. E.2's dump).
//!
//! Tensor names: `layers.{l}.q` and `layers.{l}.k` for every hooked layer `l` (any
//! non-negative integers; layers are taken in numeric order, and each needs both). Shapes:
//! `[N, H, d]` and `[N, G, d]` (positions, heads, head dimension), or `[N, H·d]` and
//! `[N, G·d]` with the head dimension given (`head_dim`, or the file's `__metadata__`
//! entry `"head_dim"`). `N` is the rendered prompt's length in tokens; `H` must be a
//! multiple of `G` (grouped-query attention). Types F32, F16 or BF16, read as f32. Any
//! other tensor name is an error naming it, and so are two names for one tensor
//! (`layers.01.q` beside `layers.1.q`). The header is read by the one JSON reader (a
//! repeated key is an error).
//!
//! Only what the analysis reads is read: the query rows at the steps and the keys up to the
//! last step, by seeking in the file (a 32k-token dump of 8 layers is gigabytes; this
//! reads the keys and 50 query rows). The file is opened through the file contract
//! ([`crate::io::file`]: a FIFO or a device is refused by what it is), and every read is
//! bounded by [`crate::limits::MAX_ALLOC_BYTES`].

use super::{Qk, QkLayer};
use crate::error::{Error, Result};
use crate::io::safetensors_header;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dtype {
    F32,
    F16,
    Bf16,
}

impl Dtype {
    fn size(self) -> usize {
        match self {
            Dtype::F32 => 4,
            Dtype::F16 | Dtype::Bf16 => 2,
        }
    }
}

#[derive(Clone, Debug)]
struct Entry {
    name: String,
    dtype: Dtype,
    shape: Vec<usize>,
    begin: u64,
}

/// What a tensors file holds, before reading.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Positions `N`.
    pub n: usize,
    /// Query heads `H`.
    pub heads: usize,
    /// Key heads `G`.
    pub kv_heads: usize,
    /// Head dimension `d`.
    pub head_dim: usize,
    /// The hooked layers' indices, in order.
    pub layers: Vec<u64>,
}

/// An open tensors file.
pub struct TensorFile {
    path: PathBuf,
    file: File,
    data_start: u64,
    layout: Layout,
    entries: BTreeMap<(u64, bool), Entry>,
}

impl TensorFile {
    /// Opens `path` and checks its header; `head_dim` is needed for 2-D tensors without a
    /// `head_dim` metadata entry.
    pub fn open(path: &Path, head_dim: Option<usize>) -> Result<Self> {
        let fmt = |msg: String| Error::Format {
            path: path.to_path_buf(),
            msg,
        };
        let io = |source| Error::Io {
            path: path.to_path_buf(),
            source,
        };
        let (mut file, file_len) = crate::io::file::open(path, crate::limits::PARTS_FILE_BYTES)?;
        let mut len8 = [0u8; 8];
        file.read_exact(&mut len8)
            .map_err(|_| fmt("shorter than a safetensors header (8 bytes)".into()))?;
        let range = safetensors_header::header_range(path, len8, file_len)?;
        let mut header = vec![0u8; range.len()];
        file.read_exact(&mut header).map_err(io)?;
        let header = safetensors_header::parse(path, &header)?;
        let obj = header
            .as_object()
            .ok_or_else(|| fmt("header is not a JSON object".into()))?;
        let data_start = range.end as u64;
        let data_len = file_len - data_start;
        let mut entries = BTreeMap::new();
        let mut meta_dim = None;
        for (name, v) in obj {
            if name == "__metadata__" {
                if let Some(s) = v.get("head_dim") {
                    let s = s
                        .as_str()
                        .ok_or_else(|| fmt("__metadata__.head_dim is not a string".into()))?;
                    meta_dim = Some(
                        s.parse::<usize>()
                            .map_err(|_| fmt(format!("__metadata__.head_dim '{s}' is not a count")))?,
                    );
                }
                continue;
            }
            let key = parse_name(name).ok_or_else(|| {
                fmt(format!(
                    "tensor '{name}' is not named layers.{{l}}.q or layers.{{l}}.k"
                ))
            })?;
            let dtype = match v.get("dtype").and_then(Value::as_str) {
                Some("F32") => Dtype::F32,
                Some("F16") => Dtype::F16,
                Some("BF16") => Dtype::Bf16,
                other => {
                    return Err(fmt(format!(
                        "tensor '{name}': dtype {other:?} (F32, F16 or BF16)"
                    )));
                }
            };
            let shape: Vec<usize> = v
                .get("shape")
                .and_then(Value::as_array)
                .and_then(|a| a.iter().map(|x| x.as_u64().map(|x| x as usize)).collect())
                .ok_or_else(|| fmt(format!("tensor '{name}': shape is not a list of counts")))?;
            let offs: Vec<u64> = v
                .get("data_offsets")
                .and_then(Value::as_array)
                .and_then(|a| a.iter().map(Value::as_u64).collect())
                .filter(|o: &Vec<u64>| o.len() == 2)
                .ok_or_else(|| fmt(format!("tensor '{name}': data_offsets is not [begin, end]")))?;
            let numel = shape.iter().try_fold(1usize, |a, &b| a.checked_mul(b));
            let bytes = numel.and_then(|n| n.checked_mul(dtype.size())).map(|b| b as u64);
            let fits = matches!((bytes, offs[1].checked_sub(offs[0])), (Some(a), Some(b)) if a == b);
            if !fits || offs[1] > data_len {
                return Err(fmt(format!(
                    "tensor '{name}': data_offsets {offs:?} do not hold shape {shape:?} of {dtype:?} within {data_len} data bytes"
                )));
            }
            if let Some(other) = entries.get(&key) {
                let other: &Entry = other;
                return Err(fmt(format!(
                    "tensors '{}' and '{name}' name the same layer and kind: one name per tensor",
                    other.name
                )));
            }
            entries.insert(
                key,
                Entry {
                    name: name.clone(),
                    dtype,
                    shape,
                    begin: offs[0],
                },
            );
        }
        if let (Some(a), Some(b)) = (head_dim, meta_dim) {
            if a != b {
                return Err(fmt(format!(
                    "--head-dim {a} disagrees with the file's __metadata__ head_dim {b}"
                )));
            }
        }
        let layout = layout_of(&entries, head_dim.or(meta_dim)).map_err(fmt)?;
        Ok(TensorFile {
            path: path.to_path_buf(),
            file,
            data_start,
            layout,
            entries,
        })
    }

    /// The file's shapes.
    #[must_use]
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The query rows at `steps` and the keys up to the last step, as a checked [`Qk`].
    pub fn read(&mut self, steps: &[usize]) -> Result<Qk> {
        let Layout {
            n,
            heads,
            kv_heads,
            head_dim,
            ..
        } = self.layout.clone();
        if let Some((r, &t)) = steps.iter().enumerate().find(|(_, &t)| t >= n) {
            return Err(Error::invalid(
                format!("steps[{r}]"),
                format!(
                    "position {t} is past the tensors' {n} positions ({})",
                    self.path.display()
                ),
            ));
        }
        let nk = steps.last().map_or(0, |&t| t + 1);
        let layers = self.layout.layers.clone();
        // What is read, in all (every layer's query rows and keys, as f32), within the one
        // byte budget of a buffer sized from a file.
        let qw = heads * head_dim;
        let rows = steps
            .len()
            .checked_mul(qw)
            .and_then(|q| nk.checked_mul(kv_heads * head_dim).and_then(|k| q.checked_add(k)))
            .unwrap_or(usize::MAX);
        crate::limits::bytes_of(&[("layers", layers.len()), ("values per layer", rows)], 4)
            .map_err(|m| Error::format(&self.path, format!("the query rows and keys to read: {m}")))?;
        let mut out = Vec::with_capacity(layers.len());
        for l in layers {
            let mut q = Vec::with_capacity(steps.len() * qw);
            for &t in steps {
                q.extend(self.rows(l, true, t, 1, qw)?);
            }
            let k = self.rows(l, false, 0, nk, kv_heads * head_dim)?;
            out.push(QkLayer { q, k });
        }
        Qk::new(heads, kv_heads, head_dim, steps.to_vec(), out).map_err(|e| Error::Format {
            path: self.path.clone(),
            msg: e.to_string(),
        })
    }

    /// Rows `from..from + count` (of `width` values) of layer `l`'s q or k, as f32.
    fn rows(&mut self, l: u64, is_q: bool, from: usize, count: usize, width: usize) -> Result<Vec<f32>> {
        let e = &self.entries[&(l, is_q)];
        let es = e.dtype.size();
        // Within the tensor's checked extent, so within the file; still bounded, as every
        // buffer sized from a file is.
        let len = crate::limits::bytes_of(&[("rows", count), ("width", width)], es)
            .map_err(|m| Error::format(&self.path, format!("{}: reading {m}", e.name)))?;
        let mut bytes: Vec<u8> = crate::limits::zeroed(len, &e.name)?;
        let at = self.data_start + e.begin + (from * width * es) as u64;
        let io = |source| Error::Io {
            path: self.path.clone(),
            source,
        };
        self.file.seek(SeekFrom::Start(at)).map_err(io)?;
        self.file.read_exact(&mut bytes).map_err(io)?;
        Ok(match e.dtype {
            Dtype::F32 => bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            Dtype::F16 => bytes
                .chunks_exact(2)
                .map(|b| half::f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32())
                .collect(),
            Dtype::Bf16 => bytes
                .chunks_exact(2)
                .map(|b| half::bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32())
                .collect(),
        })
    }
}

/// `layers.{l}.q` → `(l, true)`, `layers.{l}.k` → `(l, false)`.
fn parse_name(name: &str) -> Option<(u64, bool)> {
    let rest = name.strip_prefix("layers.")?;
    let (l, which) = rest.split_once('.')?;
    if l.is_empty() || !l.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let l = l.parse().ok()?;
    match which {
        "q" => Some((l, true)),
        "k" => Some((l, false)),
        _ => None,
    }
}

/// The shapes every layer must share.
fn layout_of(
    entries: &BTreeMap<(u64, bool), Entry>,
    head_dim: Option<usize>,
) -> std::result::Result<Layout, String> {
    let mut layers: Vec<u64> = entries.keys().map(|k| k.0).collect();
    layers.dedup();
    if layers.is_empty() {
        return Err("no tensors named layers.{l}.q / layers.{l}.k".into());
    }
    let mut got: Option<(usize, usize, usize, usize)> = None;
    for &l in &layers {
        let (q, k) = match (entries.get(&(l, true)), entries.get(&(l, false))) {
            (Some(q), Some(k)) => (q, k),
            (Some(_), None) => return Err(format!("layers.{l}.q has no layers.{l}.k")),
            _ => return Err(format!("layers.{l}.k has no layers.{l}.q")),
        };
        let split = |e: &Entry, what: &str| -> std::result::Result<(usize, usize, usize), String> {
            match *e.shape.as_slice() {
                [n, heads, d] => match head_dim {
                    Some(hd) if hd != d => Err(format!(
                        "layers.{l}.{what} is [{n}, {heads}, {d}] but the head dimension was given as {hd}"
                    )),
                    _ => Ok((n, heads, d)),
                },
                [n, w] => {
                    let d = head_dim.ok_or_else(|| {
                        format!("layers.{l}.{what} is 2-D [{n}, {w}]: give the head dimension (--head-dim, or __metadata__ head_dim)")
                    })?;
                    if d == 0 || w % d != 0 {
                        return Err(format!(
                            "layers.{l}.{what}: width {w} is not a multiple of head_dim {d}"
                        ));
                    }
                    Ok((n, w / d, d))
                }
                _ => Err(format!(
                    "layers.{l}.{what} has shape {:?}: expected [N, heads, d] or [N, heads·d]",
                    e.shape
                )),
            }
        };
        let (nq, h, dq) = split(q, "q")?;
        let (nk, g, dk) = split(k, "k")?;
        if nq != nk || dq != dk {
            return Err(format!(
                "layers.{l}: q is [{nq}, {h}, {dq}] but k is [{nk}, {g}, {dk}]"
            ));
        }
        if g == 0 || h == 0 || dq == 0 || h % g != 0 {
            return Err(format!(
                "layers.{l}: {h} query heads over {g} key heads of dimension {dq}"
            ));
        }
        let this = (nq, h, g, dq);
        if let Some(first) = got {
            if first != this {
                return Err(format!(
                    "layers.{l} is (N, H, G, d) = {this:?} but layers.{} is {first:?}",
                    layers[0]
                ));
            }
        }
        got = Some(this);
    }
    let (n, heads, kv_heads, head_dim) = got.unwrap_or_default();
    Ok(Layout {
        n,
        heads,
        kv_heads,
        head_dim,
        layers,
    })
}
