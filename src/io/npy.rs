//! `.npy` reading: the preamble and header parsed here, strictly and in linear time, then
//! the data streamed through npyz with conversion on the fly.
//!
//! npyz never sees the file's own header text: its header parser (a PEG grammar over
//! Python literals) backtracks exponentially on crafted input (a 128-byte header of
//! nested braces hangs it; the fuzzer found this), and it multiplies the shape without
//! overflow checks. The header is parsed here instead, the shape checked against the
//! file's length, and npyz reads a canonical header rebuilt from the parsed fields.

use super::narrow;
use crate::error::{flatten_lines, Error, Result};
use std::io::Read;
use std::path::Path;

/// What a numeric `.npy` may hold.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Numbers {
    /// Floating point only (embeddings, queries).
    Floats,
    /// Floating point or integers (costs, scores).
    FloatsOrIntegers,
}

/// A `.npy` header's three fields.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Header {
    descr: String,
    fortran: bool,
    shape: Vec<u64>,
}

/// Parses the header dict numpy writes, `{'descr': '<f4', 'fortran_order': False,
/// 'shape': (2, 3), }`, in one left-to-right pass with no backtracking: quoted keys
/// (`'` or `"`), exactly the three fields once each, a simple dtype string, `True` or
/// `False`, a tuple of sizes (a trailing `L` allowed, as Python 2 wrote them); commas
/// and a trailing comma as numpy writes them, whitespace anywhere between tokens.
fn parse_header(text: &str) -> std::result::Result<Header, String> {
    let b = text.as_bytes();
    let mut i = 0usize;
    let ws = |i: &mut usize| {
        while *i < b.len() && b[*i].is_ascii_whitespace() {
            *i += 1;
        }
    };
    let expect = |i: &mut usize, c: u8, what: &str| -> std::result::Result<(), String> {
        ws(i);
        if b.get(*i) == Some(&c) {
            *i += 1;
            Ok(())
        } else {
            Err(format!("expected {what} at byte {}", *i))
        }
    };
    // A quoted string of printable ASCII without escapes.
    let string = |i: &mut usize| -> std::result::Result<String, String> {
        ws(i);
        let q = match b.get(*i) {
            Some(&q @ (b'\'' | b'"')) => q,
            _ => return Err(format!("expected a quoted string at byte {}", *i)),
        };
        let start = *i + 1;
        let end = b[start..]
            .iter()
            .position(|&c| c == q)
            .map(|p| start + p)
            .ok_or_else(|| format!("unterminated string at byte {}", *i))?;
        let s = &b[start..end];
        if s.len() > 64 || !s.iter().all(|&c| c.is_ascii_graphic() && c != b'\\') {
            return Err(format!("string at byte {} is not a plain name", *i));
        }
        *i = end + 1;
        Ok(String::from_utf8_lossy(s).into_owned())
    };
    expect(&mut i, b'{', "'{'")?;
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    loop {
        ws(&mut i);
        if b.get(i) == Some(&b'}') {
            i += 1;
            break;
        }
        let key = string(&mut i)?;
        expect(&mut i, b':', "':'")?;
        ws(&mut i);
        let dup = match key.as_str() {
            "descr" => descr.replace(string(&mut i)?).is_some(),
            "fortran_order" => {
                let v = if b[i..].starts_with(b"True") {
                    true
                } else if b[i..].starts_with(b"False") {
                    false
                } else {
                    return Err(format!("fortran_order is not True or False at byte {i}"));
                };
                i += if v { 4 } else { 5 };
                fortran.replace(v).is_some()
            }
            "shape" => {
                expect(&mut i, b'(', "'(' starting the shape")?;
                let mut dims = Vec::new();
                loop {
                    ws(&mut i);
                    if b.get(i) == Some(&b')') {
                        i += 1;
                        break;
                    }
                    let start = i;
                    while i < b.len() && b[i].is_ascii_digit() {
                        i += 1;
                    }
                    let n: u64 = text[start..i]
                        .parse()
                        .map_err(|_| format!("shape entry at byte {start} is not a size"))?;
                    if b.get(i) == Some(&b'L') {
                        i += 1;
                    }
                    if dims.len() == 32 {
                        return Err("shape has more than 32 dimensions".into());
                    }
                    dims.push(n);
                    ws(&mut i);
                    match b.get(i) {
                        Some(b',') => i += 1,
                        Some(b')') => {}
                        _ => return Err(format!("expected ',' or ')' in the shape at byte {i}")),
                    }
                }
                shape.replace(dims).is_some()
            }
            other => return Err(format!("unknown header field '{other}'")),
        };
        if dup {
            return Err(format!("header field '{key}' appears twice"));
        }
        ws(&mut i);
        match b.get(i) {
            Some(b',') => i += 1,
            Some(b'}') => {}
            _ => return Err(format!("expected ',' or '}}' at byte {i}")),
        }
    }
    ws(&mut i);
    if i != b.len() {
        return Err(format!("text after the header dict at byte {i}"));
    }
    match (descr, fortran, shape) {
        (Some(descr), Some(fortran), Some(shape)) => Ok(Header {
            descr,
            fortran,
            shape,
        }),
        _ => Err("the header lacks one of 'descr', 'fortran_order', 'shape'".into()),
    }
}

/// A canonical version-1 preamble and header for `h`: what npyz parses instead of the
/// file's own header text.
fn canonical(h: &Header) -> Vec<u8> {
    let shape = match h.shape.as_slice() {
        [n] => format!("({n},)"),
        s => format!(
            "({})",
            s.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
        ),
    };
    let mut text = format!(
        "{{'descr': '{}', 'fortran_order': {}, 'shape': {shape}, }}",
        h.descr,
        if h.fortran { "True" } else { "False" }
    );
    while (10 + text.len() + 1) % 64 != 0 {
        text.push(' ');
    }
    text.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    // At most 64 bytes of descr and 32 dimensions of 20 digits: well under 65,535.
    out.extend_from_slice(&(text.len() as u16).to_le_bytes());
    out.extend_from_slice(text.as_bytes());
    out
}

/// Reads the preamble and header from `r` (`len` bytes in all): the canonical preamble
/// to give npyz, the number of bytes before the data in the file, and the shape, whose
/// element count is checked against the file before anything is allocated for it.
fn npy_preamble<R: Read>(path: &Path, r: &mut R, len: u64) -> Result<(Vec<u8>, u64, Vec<u64>)> {
    let bad = |m: String| Error::format(path, format!("not a valid .npy file ({m})"));
    let mut head = [0u8; 12];
    r.read_exact(&mut head[..10])
        .map_err(|_| bad(format!("{len} bytes, shorter than the 10-byte preamble")))?;
    if &head[..6] != b"\x93NUMPY" {
        return Err(bad("no \\x93NUMPY magic".into()));
    }
    let (start, hlen) = match head[6] {
        1 => (10u64, u64::from(u16::from_le_bytes([head[8], head[9]]))),
        2 | 3 => {
            r.read_exact(&mut head[10..12])
                .map_err(|_| bad("truncated preamble".into()))?;
            (
                12u64,
                u64::from(u32::from_le_bytes([head[8], head[9], head[10], head[11]])),
            )
        }
        v => return Err(bad(format!("format version {v}; versions 1 to 3 are read"))),
    };
    if hlen > 1 << 16 || start + hlen > len {
        return Err(bad(format!("header of {hlen} bytes in a file of {len} bytes")));
    }
    let mut text = vec![0u8; hlen as usize];
    r.read_exact(&mut text)
        .map_err(|_| bad("truncated header".into()))?;
    let text = std::str::from_utf8(&text).map_err(|_| bad("header is not UTF-8".into()))?;
    let h = parse_header(text).map_err(|m| bad(format!("header: {m}")))?;
    let count = if h.shape.contains(&0) {
        Some(0)
    } else {
        h.shape.iter().try_fold(1u64, |a, &x| a.checked_mul(x))
    };
    if count.is_none_or(|c| c > len - (start + hlen)) {
        return Err(Error::format(
            path,
            format!(
                "header declares shape {:?}, more data than the file's {len} bytes",
                h.shape
            ),
        ));
    }
    // npyz multiplies the dimensions (its strides) without overflow checks, also past a
    // zero dimension: the product of the non-zero ones must fit too.
    let nonzero = h
        .shape
        .iter()
        .filter(|&&x| x != 0)
        .try_fold(1u64, |a, &x| a.checked_mul(x));
    if nonzero.is_none() {
        return Err(bad(format!(
            "shape {:?} has no data but its other dimensions overflow a 64-bit count",
            h.shape
        )));
    }
    Ok((canonical(&h), start + hlen, h.shape))
}

/// Opens a `.npy` from `r` for streaming reads: C order, a numeric dtype `numbers`
/// allows, and data that fills the rest of the `len` bytes exactly.
fn npy_open<R: Read>(
    path: &Path,
    mut r: R,
    len: u64,
    numbers: Numbers,
) -> Result<npyz::NpyFile<std::io::Chain<std::io::Cursor<Vec<u8>>, R>>> {
    let (head, header_len, _) = npy_preamble(path, &mut r, len)?;
    let f = npyz::NpyFile::new(std::io::Cursor::new(head).chain(r)).map_err(|e| {
        Error::format(
            path,
            format!("not a valid .npy file: {}", flatten_lines(&e.to_string())),
        )
    })?;
    if f.order() != npyz::Order::C {
        return Err(Error::format(
            path,
            "array is in Fortran order; save it in C order (np.ascontiguousarray)",
        ));
    }
    let descr = f.dtype().descr();
    let item = match f.dtype() {
        npyz::DType::Plain(t) => match t.type_char() {
            npyz::TypeChar::Float => t.num_bytes(),
            npyz::TypeChar::Int | npyz::TypeChar::Uint if numbers == Numbers::FloatsOrIntegers => {
                t.num_bytes()
            }
            npyz::TypeChar::Int | npyz::TypeChar::Uint => {
                return Err(Error::format(
                    path,
                    format!(
                        "dtype {descr} is an integer type; embeddings and queries must be floats (f2, f4 or f8): convert with .astype(np.float32)"
                    ),
                ))
            }
            _ => None,
        },
        _ => None,
    };
    let Some(item) = item.map(|b| b as u64) else {
        return Err(Error::format(
            path,
            format!(
                "unsupported dtype {descr}: expected {}",
                if numbers == Numbers::Floats {
                    "a float array (f2, f4 or f8)"
                } else {
                    "a float or integer array"
                }
            ),
        ));
    };
    // The data must fill the file exactly: refuse a header that promises more than the
    // file holds (before allocating for it), and trailing bytes a writer did not mean.
    let need = f.shape().iter().try_fold(item, |a, &s| a.checked_mul(s));
    let data_len = len.checked_sub(header_len);
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

/// Reads the values of `f` as `$out`, trying each element type in turn (npyz reads only
/// the exact dtype of the file) and converting while streaming, so no second full-size
/// copy exists. `$conv(index, value)` converts one element.
macro_rules! read_as {
    ($path:expr, $f:expr, $out:ty, $($t:ty => $conv:expr),*) => {{
        let path: &Path = $path;
        let f = $f;
        let dtype = f.dtype();
        $(
            let f = match f.try_data::<$t>() {
                Ok(r) => {
                    let mut v: Vec<$out> = Vec::with_capacity(r.len() as usize);
                    for (i, x) in r.enumerate() {
                        let x = x.map_err(|e| {
                            Error::format(path, format!("cannot read the data: {}", flatten_lines(&e.to_string())))
                        })?;
                        v.push($conv(i, x)?);
                    }
                    return Ok(v);
                }
                Err(f) => f,
            };
        )*
        drop(f);
        Err(Error::format(path, format!("unsupported dtype {}: expected a numeric array", dtype.descr())))
    }};
}

fn npy_values_f32<R: Read>(path: &Path, shape: &[usize], f: npyz::NpyFile<R>) -> Result<Vec<f32>> {
    let ok = |_: usize, x: f32| Ok::<f32, Error>(x);
    let wide = |i: usize, x: f64| narrow(path, shape, i, x);
    let int = |i: usize, x: f64| narrow(path, shape, i, x);
    read_as!(path, f, f32,
        f32 => ok, f64 => wide, half::f16 => |_, x: half::f16| Ok::<f32, Error>(x.to_f32()),
        i64 => |i, x: i64| int(i, x as f64), i32 => |i, x: i32| int(i, f64::from(x)),
        i16 => |_, x: i16| Ok::<f32, Error>(f32::from(x)), i8 => |_, x: i8| Ok::<f32, Error>(f32::from(x)),
        u64 => |i, x: u64| int(i, x as f64), u32 => |i, x: u32| int(i, f64::from(x)),
        u16 => |_, x: u16| Ok::<f32, Error>(f32::from(x)), u8 => |_, x: u8| Ok::<f32, Error>(f32::from(x)))
}

fn npy_values_f64<R: Read>(path: &Path, f: npyz::NpyFile<R>) -> Result<Vec<f64>> {
    let ok = |_: usize, x: f64| Ok::<f64, Error>(x);
    read_as!(path, f, f64,
        f32 => |i, x: f32| ok(i, f64::from(x)), f64 => ok, half::f16 => |i, x: half::f16| ok(i, x.to_f64()),
        i64 => |i, x: i64| ok(i, x as f64), i32 => |i, x: i32| ok(i, f64::from(x)),
        i16 => |i, x: i16| ok(i, f64::from(x)), i8 => |i, x: i8| ok(i, f64::from(x)),
        u64 => |i, x: u64| ok(i, x as f64), u32 => |i, x: u32| ok(i, f64::from(x)),
        u16 => |i, x: u16| ok(i, f64::from(x)), u8 => |i, x: u8| ok(i, f64::from(x)))
}

/// The shape of an open `.npy`, as sizes this machine can index.
fn npy_shape<R: Read>(path: &Path, f: &npyz::NpyFile<R>) -> Result<Vec<usize>> {
    f.shape()
        .iter()
        .map(|&s| {
            usize::try_from(s).map_err(|_| Error::format(path, format!("shape entry {s} is too large")))
        })
        .collect()
}

pub(super) fn npy_f32<R: Read>(
    path: &Path,
    r: R,
    len: u64,
    numbers: Numbers,
) -> Result<(Vec<usize>, Vec<f32>)> {
    let f = npy_open(path, r, len, numbers)?;
    let shape = npy_shape(path, &f)?;
    let v = npy_values_f32(path, &shape, f)?;
    Ok((shape, v))
}

pub(super) fn npy_f64<R: Read>(path: &Path, r: R, len: u64) -> Result<(Vec<usize>, Vec<f64>)> {
    let f = npy_open(path, r, len, Numbers::FloatsOrIntegers)?;
    let shape = npy_shape(path, &f)?;
    Ok((shape, npy_values_f64(path, f)?))
}

#[cfg(test)]
mod tests {
    use super::{canonical, parse_header, Header};

    #[test]
    fn headers_as_numpy_writes_them_parse_and_round_trip() {
        let h =
            parse_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }          \n").unwrap();
        assert_eq!(
            h,
            Header {
                descr: "<f4".into(),
                fortran: false,
                shape: vec![2, 3]
            }
        );
        let one = parse_header("{\"descr\":\"<i8\",\"fortran_order\":True,\"shape\":(7L,)}").unwrap();
        assert_eq!((one.fortran, one.shape.clone()), (true, vec![7]));
        assert_eq!(
            parse_header("{'shape': (), 'descr': '|u1', 'fortran_order': False}")
                .unwrap()
                .shape,
            Vec::<u64>::new()
        );
        let c = canonical(&one);
        assert_eq!(c.len() % 64, 0);
        let text = std::str::from_utf8(&c[10..]).unwrap();
        assert_eq!(parse_header(text).unwrap(), one);
    }

    #[test]
    fn hostile_headers_are_refused_in_linear_time() {
        for bad in [
            "",
            "{",
            "{'descr': '<f4', 'fortran_order': False}",
            "{'descr': '<f4', 'descr': '<f8', 'fortran_order': False, 'shape': (1,)}",
            "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (1,)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (1, x)}",
            "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'extra': 1}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} trailing",
            "{'descr': '<f\\4', 'fortran_order': False, 'shape': (1,)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999,)}",
        ] {
            assert!(parse_header(bad).is_err(), "{bad:?}");
        }
        // What hung npyz's grammar: nested braces, by the tens of thousands here.
        let t = std::time::Instant::now();
        assert!(parse_header(&"{".repeat(60_000)).is_err());
        assert!(parse_header(&"({[".repeat(20_000)).is_err());
        assert!(t.elapsed() < std::time::Duration::from_secs(1));
    }
}
