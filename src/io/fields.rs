//! Request bodies (`ctxprune serve`'s, and any service's built on the crate): one JSON
//! object whose fields are read once each, with errors that name the field (and the
//! element: `costs[3]`, `embeddings[2][7]`).
//!
//! The whole body is checked first by the crate's one JSON reader ([`crate::io::json`]):
//! not JSON, a repeated key at any depth, or nesting past the limit is a 400 naming the
//! problem. Then each field is read from its own text, straight into its type: arrays of
//! numbers into `Vec<f64>`, embeddings (arrays of rows, or base64 little-endian f32/f16
//! with a shape) into one `Vec<f32>`, never through a tree of JSON values, so a body's
//! parse takes a few bytes per number however it is written. A field that must become a
//! JSON tree (the masked messages, a model config) is handed over as text, and its
//! caller bounds the tree's memory from [`Fields::scan`] first.

use crate::error::{Error, Result};
use crate::io::json;
use crate::Embeddings;
use base64::Engine as _;
use serde::de::{DeserializeSeed, IgnoredAny, SeqAccess, Visitor};
use serde_json::value::RawValue;
use std::collections::BTreeMap;
use std::fmt;

/// A JSON object's fields, each read once; what is left over is an error naming it.
pub struct Fields<'a> {
    map: BTreeMap<String, &'a RawValue>,
    scan: json::Scan,
}

/// A body-level error: a 400 (the body is not one well-formed JSON object).
fn malformed(msg: String) -> Error {
    Error::invalid("body", msg)
}

impl<'a> Fields<'a> {
    /// The body's fields; the body must be one JSON object, with no key repeated anywhere.
    pub fn parse(body: &'a [u8]) -> Result<Fields<'a>> {
        let scan = json::scan(body).map_err(|e| {
            malformed(
                if e.starts_with("duplicate key")
                    || e.starts_with("recursion limit")
                    || e.starts_with("reserved key")
                {
                    e
                } else {
                    format!("not JSON ({e})")
                },
            )
        })?;
        let text = std::str::from_utf8(body).map_err(|e| malformed(format!("not UTF-8 ({e})")))?;
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        match serde_json::from_str::<BTreeMap<String, &'a RawValue>>(text) {
            Ok(map) => Ok(Fields { map, scan }),
            Err(_) => Err(malformed(format!(
                "must be a JSON object, got {}",
                kind(text.trim_start())
            ))),
        }
    }

    /// The whole body's counts (what reading its fields will take is bounded from them).
    pub fn body_scan(&self) -> &json::Scan {
        &self.scan
    }

    /// Takes `name`'s JSON text as sent (absent or null: `None`).
    pub fn raw(&mut self, name: &str) -> Option<&'a str> {
        self.map.remove(name).map(RawValue::get).filter(|t| *t != "null")
    }

    /// The counts of `text` (a field's text from [`Fields::raw`]), to bound the memory of
    /// parsing it into a tree.
    pub fn scan(text: &str) -> json::Scan {
        // The body was scanned whole: its fields are well-formed.
        json::scan(text.as_bytes()).unwrap_or_default()
    }

    /// A scalar field read from its text by `read`, or an error naming it.
    fn scalar<T>(
        &mut self,
        name: &str,
        want: &str,
        read: impl FnOnce(&serde_json::Value) -> Option<T>,
    ) -> Result<Option<T>> {
        let Some(text) = self.raw(name) else {
            return Ok(None);
        };
        // A scalar's text is short: anything long is the wrong type, said without a parse.
        let v = (text.len() <= 128).then(|| json::value_str(text).ok()).flatten();
        v.as_ref()
            .and_then(read)
            .map(Some)
            .ok_or_else(|| Error::invalid(name, format!("must be {want}, got {}", shown(text))))
    }

    /// A string field.
    pub fn str(&mut self, name: &str) -> Result<Option<String>> {
        let Some(text) = self.raw(name) else {
            return Ok(None);
        };
        if !text.starts_with('"') {
            return Err(Error::invalid(
                name,
                format!("must be a string, got {}", shown(text)),
            ));
        }
        serde_json::from_str(text)
            .map(Some)
            .map_err(|e| Error::invalid(name, format!("not a string ({e})")))
    }

    /// A non-negative integer field.
    pub fn count(&mut self, name: &str) -> Result<Option<usize>> {
        self.scalar(name, "a non-negative integer", |v| {
            v.as_u64().and_then(|x| usize::try_from(x).ok())
        })
    }

    /// A finite number field.
    pub fn num(&mut self, name: &str) -> Result<Option<f64>> {
        self.scalar(name, "a finite number", |v| v.as_f64().filter(|x| x.is_finite()))
    }

    /// A boolean field.
    pub fn bool(&mut self, name: &str) -> Result<Option<bool>> {
        self.scalar(name, "true or false", serde_json::Value::as_bool)
    }

    /// An array read element by element by `conv`, naming `name[i]` (wanting `want`) at
    /// the first element it refuses (and hands back).
    fn array<T>(
        &mut self,
        name: &str,
        want: &str,
        conv: impl Fn(Elem) -> std::result::Result<T, Elem>,
    ) -> Result<Option<Vec<T>>> {
        let Some(text) = self.raw(name) else {
            return Ok(None);
        };
        if !text.starts_with('[') {
            return Err(Error::invalid(
                name,
                format!("must be an array, got {}", shown(text)),
            ));
        }
        let mut out = Vec::new();
        let mut bad = None;
        let seed = Each {
            f: &mut |i: usize, e: Elem| match conv(e) {
                Ok(v) => {
                    out.push(v);
                    true
                }
                Err(e) => {
                    bad = Some((i, e));
                    false
                }
            },
        };
        let mut de = serde_json::Deserializer::from_str(text);
        let r = seed.deserialize(&mut de);
        if let Some((i, e)) = bad {
            return Err(Error::invalid(
                format!("{name}[{i}]"),
                format!("must be {want}, got {}", e.describe()),
            ));
        }
        r.map_err(|e| Error::invalid(name, format!("not an array ({e})")))?;
        Ok(Some(out))
    }

    /// An array of finite numbers.
    pub fn nums(&mut self, name: &str) -> Result<Option<Vec<f64>>> {
        self.array(name, "a finite number", |e| e.num().ok_or(e))
    }

    /// An array of non-negative integers.
    pub fn counts(&mut self, name: &str) -> Result<Option<Vec<usize>>> {
        self.array(name, "a non-negative integer", |e| match e {
            Elem::U64(x) => usize::try_from(x).map_err(|_| e),
            e => Err(e),
        })
    }

    /// An array of strings.
    pub fn strs(&mut self, name: &str) -> Result<Option<Vec<String>>> {
        self.array(name, "a string", |e| match e {
            Elem::Str(s) => Ok(s),
            e => Err(e),
        })
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
        let Some(text) = self.raw(name) else {
            return Ok(None);
        };
        matrix(name, text).map(Some)
    }

    /// Fails naming the first field no one read.
    pub fn done(self) -> Result<()> {
        match self.map.keys().next() {
            None => Ok(()),
            Some(k) => Err(Error::invalid(k, "unknown field")),
        }
    }
}

/// A JSON text's kind in words, from its first character.
fn kind(text: &str) -> &'static str {
    match text.as_bytes().first() {
        Some(b'{') => "an object",
        Some(b'[') => "an array",
        Some(b'"') => "a string",
        Some(b't' | b'f') => "a boolean",
        Some(b'n') => "null",
        Some(_) => "a number",
        None => "nothing",
    }
}

/// A field's kind and, when short, its text, for messages.
fn shown(text: &str) -> String {
    if text.len() <= 40 {
        format!("{} ({text})", kind(text))
    } else {
        kind(text).to_string()
    }
}

/// An array element, as far as a reader needs it: nested arrays and objects are skipped,
/// not built.
#[derive(Debug)]
enum Elem {
    U64(u64),
    I64(i64),
    F64(f64),
    Str(String),
    Bool(bool),
    Null,
    Array,
    Object,
}

impl Elem {
    fn num(&self) -> Option<f64> {
        match *self {
            Elem::U64(x) => Some(x as f64),
            Elem::I64(x) => Some(x as f64),
            Elem::F64(x) => Some(x),
            _ => None,
        }
        .filter(|x| x.is_finite())
    }

    fn describe(&self) -> String {
        match self {
            Elem::U64(x) => format!("a number ({x})"),
            Elem::I64(x) => format!("a number ({x})"),
            Elem::F64(x) => format!("a number ({x})"),
            Elem::Str(s) if s.len() <= 38 => format!("a string ({})", serde_json::Value::String(s.clone())),
            Elem::Str(_) => "a string".into(),
            Elem::Bool(b) => format!("a boolean ({b})"),
            Elem::Null => "null".into(),
            Elem::Array => "an array".into(),
            Elem::Object => "an object".into(),
        }
    }
}

struct ElemSeed;

impl<'de> DeserializeSeed<'de> for ElemSeed {
    type Value = Elem;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> std::result::Result<Elem, D::Error> {
        d.deserialize_any(ElemSeed)
    }
}

impl<'de> Visitor<'de> for ElemSeed {
    type Value = Elem;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_u64<E>(self, v: u64) -> std::result::Result<Elem, E> {
        Ok(Elem::U64(v))
    }
    fn visit_i64<E>(self, v: i64) -> std::result::Result<Elem, E> {
        Ok(Elem::I64(v))
    }
    fn visit_f64<E>(self, v: f64) -> std::result::Result<Elem, E> {
        Ok(Elem::F64(v))
    }
    fn visit_str<E>(self, v: &str) -> std::result::Result<Elem, E> {
        Ok(Elem::Str(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> std::result::Result<Elem, E> {
        Ok(Elem::Str(v))
    }
    fn visit_bool<E>(self, v: bool) -> std::result::Result<Elem, E> {
        Ok(Elem::Bool(v))
    }
    fn visit_unit<E>(self) -> std::result::Result<Elem, E> {
        Ok(Elem::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> std::result::Result<Elem, A::Error> {
        while a.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Elem::Array)
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> std::result::Result<Elem, A::Error> {
        while m.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Elem::Object)
    }
}

/// Walks a JSON array, handing each element (and its index) to `f` until it says stop.
struct Each<'f> {
    f: &'f mut dyn FnMut(usize, Elem) -> bool,
}

impl<'de> DeserializeSeed<'de> for Each<'_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Each<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> std::result::Result<(), A::Error> {
        let mut i = 0;
        while let Some(e) = a.next_element_seed(ElemSeed)? {
            if !(self.f)(i, e) {
                // Stop reading: the caller reports the element.
                return Err(serde::de::Error::custom("stopped"));
            }
            i += 1;
        }
        Ok(())
    }
}

/// `x` as f32, naming `at` when it does not fit; JSON has no NaN or infinity.
fn narrow(at: &str, x: f64) -> Result<f32> {
    crate::embeddings::narrow_f32(x).map_err(|m| Error::invalid(at, m))
}

/// Rows of numbers read straight into one flat `Vec<f32>`.
struct Rows<'e> {
    data: Vec<f32>,
    dim: Option<usize>,
    rows: usize,
    err: &'e mut Option<Error>,
    name: &'e str,
}

impl<'de> Visitor<'de> for &mut Rows<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of rows")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> std::result::Result<(), A::Error> {
        let stop = || serde::de::Error::custom("stopped");
        loop {
            let r = self.rows;
            let mut row_len = 0usize;
            let mut failed = None;
            let name = self.name;
            let data = &mut self.data;
            let seen = a.next_element_seed(Each {
                f: &mut |c: usize, e: Elem| {
                    let at = || format!("{name}[{r}][{c}]");
                    let v = match e.num() {
                        Some(x) => narrow(&at(), x),
                        None => Err(Error::invalid(
                            at(),
                            format!("must be a number, got {}", e.describe()),
                        )),
                    };
                    match v {
                        Ok(v) => {
                            data.push(v);
                            row_len += 1;
                            true
                        }
                        Err(err) => {
                            failed = Some(err);
                            false
                        }
                    }
                },
            });
            match (seen, failed) {
                (_, Some(e)) => {
                    *self.err = Some(e);
                    return Err(stop());
                }
                (Ok(Some(())), None) => {}
                (Ok(None), None) => return Ok(()),
                // The body is well-formed JSON: an error here is a row that is no array.
                (Err(_), None) => {
                    *self.err = Some(Error::invalid(
                        format!("{}[{r}]", self.name),
                        "must be an array of numbers",
                    ));
                    return Err(stop());
                }
            }
            match self.dim {
                None => self.dim = Some(row_len),
                Some(d) if d != row_len => {
                    *self.err = Some(Error::invalid(
                        format!("{}[{r}]", self.name),
                        format!("has {row_len} values; row 0 has {d}"),
                    ));
                    return Err(stop());
                }
                Some(_) => {}
            }
            self.rows += 1;
        }
    }
}

/// The embeddings in `text` (a field's JSON text), named `name` in errors.
pub fn matrix(name: &str, text: &str) -> Result<Embeddings> {
    match text.as_bytes().first() {
        Some(b'[') => {
            let mut err = None;
            let mut rows = Rows {
                data: Vec::new(),
                dim: None,
                rows: 0,
                err: &mut err,
                name,
            };
            let mut de = serde_json::Deserializer::from_str(text);
            let r = serde::Deserializer::deserialize_seq(&mut de, &mut rows);
            let (n, d, data) = (rows.rows, rows.dim.unwrap_or(0), rows.data);
            if let Some(e) = err {
                return Err(e);
            }
            r.map_err(|e| Error::invalid(name, format!("not an array of rows ({e})")))?;
            Embeddings::new(n, d, data, name)
        }
        Some(b'{') => {
            // The object's own fields, read as a body's are; errors name `name.field`.
            let sub = |k: &str| format!("{name}.{k}");
            let inner = |e: Error| match e {
                Error::InvalidArgument { name: k, msg } => Error::invalid(sub(&k), msg),
                e => e,
            };
            let mut f = Fields::parse(text.as_bytes()).map_err(inner)?;
            let b64 = f
                .str("base64")
                .map_err(inner)?
                .ok_or_else(|| Error::invalid(sub("base64"), "required"))?;
            let dtype = f.str("dtype").map_err(inner)?.unwrap_or_else(|| "f32".into());
            let shape = f
                .counts("shape")
                .map_err(inner)?
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
            let want = n.checked_mul(d).and_then(|c| c.checked_mul(width));
            // base64 holds 3 bytes in every 4 characters: a shape it cannot hold is refused
            // before decoding.
            if want.is_none_or(|w| w / 3 > b64.len() / 4 + 1) {
                return Err(Error::invalid(
                    sub("base64"),
                    format!(
                        "{} characters cannot hold shape [{n}, {d}] of {dtype} (it needs {} bytes)",
                        b64.len(),
                        want.map_or("more than 2^64".into(), |w| w.to_string())
                    ),
                ));
            }
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(b64.as_bytes())
                .map_err(|e| Error::invalid(sub("base64"), format!("not base64 ({e})")))?;
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
        _ => Err(Error::invalid(
            name,
            format!(
                "must be an array of rows or {{base64, dtype, shape}}, got {}",
                shown(text)
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(r: Result<impl std::fmt::Debug>) -> String {
        r.unwrap_err().to_string()
    }

    #[test]
    fn fields_read_once_with_named_errors() {
        let body = br#"{"k": 3, "s": "x", "b": true, "xs": [1, 2.5, -3], "ids": [0, 7], "t": ["a", "b"], "n": null}"#;
        let mut f = Fields::parse(body).unwrap();
        assert_eq!(f.count("k").unwrap(), Some(3));
        assert_eq!(f.str("s").unwrap().as_deref(), Some("x"));
        assert_eq!(f.bool("b").unwrap(), Some(true));
        assert_eq!(f.nums("xs").unwrap(), Some(vec![1.0, 2.5, -3.0]));
        assert_eq!(f.counts("ids").unwrap(), Some(vec![0, 7]));
        assert_eq!(f.strs("t").unwrap(), Some(vec!["a".to_string(), "b".to_string()]));
        assert_eq!(f.num("n").unwrap(), None);
        assert_eq!(f.count("absent").unwrap(), None);
        f.done().unwrap();

        let mut f =
            Fields::parse(br#"{"xs": [1, "two", 3], "ids": [1, -1], "k": -2, "s": 5, "z": 0}"#).unwrap();
        assert_eq!(
            err(f.nums("xs")),
            "invalid xs[1]: must be a finite number, got a string (\"two\")"
        );
        assert_eq!(
            err(f.counts("ids")),
            "invalid ids[1]: must be a non-negative integer, got a number (-1)"
        );
        assert_eq!(
            err(f.count("k")),
            "invalid k: must be a non-negative integer, got a number (-2)"
        );
        assert_eq!(err(f.str("s")), "invalid s: must be a string, got a number (5)");
        assert_eq!(err(f.done()), "invalid z: unknown field");
        let mut f = Fields::parse(br#"{"xs": [[1, 2]], "k": [1, 2, 3]}"#).unwrap();
        assert_eq!(
            err(f.nums("xs")),
            "invalid xs[0]: must be a finite number, got an array"
        );
        assert_eq!(
            err(f.count("k")),
            "invalid k: must be a non-negative integer, got an array ([1, 2, 3])"
        );
    }

    #[test]
    fn the_body_is_one_object_without_repeated_keys() {
        for (body, want) in [
            (&br#"{"k": 1, "k": 2}"#[..], "duplicate key \"k\""),
            (br#"{"q": {"a": [{"x": 1, "x": 1}]}}"#, "duplicate key \"x\""),
            (b"[1, 2]", "must be a JSON object, got an array"),
            (b"{\"a\": 1", "not JSON"),
            (b"", "not JSON"),
        ] {
            let e = Fields::parse(body).err().expect("an error");
            assert!(
                matches!(&e, Error::InvalidArgument { name, .. } if name == "body"),
                "{e}"
            );
            assert!(e.to_string().contains(want), "{e}");
        }
        let deep = format!("{{\"a\": {}1{}}}", "[".repeat(200), "]".repeat(200));
        let e = Fields::parse(deep.as_bytes()).err().expect("an error");
        assert!(e.to_string().contains("recursion limit"), "{e}");
    }

    #[test]
    fn embeddings_as_rows_and_as_base64() {
        let rows = matrix("e", "[[1, 2, 3], [4, 5.5, -6]]").unwrap();
        assert_eq!((rows.rows(), rows.dim()), (2, 3));
        assert_eq!(rows.as_slice(), &[1.0, 2.0, 3.0, 4.0, 5.5, -6.0]);
        let b: Vec<u8> = rows.as_slice().iter().flat_map(|x| x.to_le_bytes()).collect();
        let b64 = base64::engine::general_purpose::STANDARD.encode(&b);
        let again = matrix("e", &format!(r#"{{"base64": "{b64}", "shape": [2, 3]}}"#)).unwrap();
        assert_eq!(again.as_slice(), rows.as_slice());
        for (text, want) in [
            ("[[1, 2], [3]]", "invalid e[1]: has 1 values; row 0 has 2"),
            ("[[1, 2], 3]", "invalid e[1]: must be an array of numbers"),
            (
                "[[1, \"x\"]]",
                "invalid e[0][1]: must be a number, got a string (\"x\")",
            ),
            ("[[1e39]]", "invalid e[0][0]"),
            (
                "7",
                "must be an array of rows or {base64, dtype, shape}, got a number (7)",
            ),
            (
                r#"{"base64": "AAAA", "shape": [1, 1], "x": 1}"#,
                "invalid e.x: unknown field",
            ),
            (
                r#"{"base64": "AAAA", "shape": [4294967296, 4294967296]}"#,
                "cannot hold shape",
            ),
            (
                r#"{"base64": "AAAA", "shape": [1, 2]}"#,
                "3 bytes, but shape [1, 2] of f32 needs 8",
            ),
            (r#"{"base64": "AAAA", "shape": [1, -2]}"#, "invalid e.shape[1]"),
        ] {
            let e = err(matrix("e", text));
            assert!(e.contains(want), "{text}: {e}");
        }
    }
}
