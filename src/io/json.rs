//! The crate's one JSON reader: every JSON the crate parses (files, JSON lines, request
//! bodies, safetensors headers, model configs) goes through here, so one contract holds
//! everywhere:
//! - a repeated key in any object, at any depth, is an error naming the key and where it
//!   is (serde_json on its own keeps the last value and silently drops the others);
//! - nesting deeper than serde_json's limit (128) is an error, never a stack overflow;
//! - a key serde_json keeps for itself (`$serde_json::private::RawValue` and its kin) is
//!   an error: serde_json would read such an object as the JSON text in its string, so
//!   a typed read could see a value (and a repeated key) the check never saw;
//! - the error is one line: what is wrong, then `at line L column C`.
//!
//! [`value`] builds a [`serde_json::Value`] in one pass. [`from_slice`] reads any
//! `Deserialize` type: a first pass ([`scan`]) checks the keys (and counts the values, so
//! a caller can bound the memory of a parse before it makes one), a second deserialises.
//! A caller wraps the message with the file and line it read ([`crate::Error::Format`]) or
//! the field it was given (a request body).

use serde::de::{DeserializeOwned, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;

/// What a [`scan`] saw: enough to bound the memory of a parse before it is made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Scan {
    /// JSON values in the text (every scalar, array and object counts one).
    pub values: usize,
    /// Strings among the values (object keys not counted).
    pub strings: usize,
    /// Bytes of object keys and strings (their decoded lengths).
    pub string_bytes: usize,
    /// The deepest nesting (a top-level scalar is 1).
    pub depth: usize,
}

/// Checks `bytes` (one JSON text, optionally after a UTF-8 byte order mark): the syntax,
/// and that no object repeats a key. Nothing is kept but the counts.
pub fn scan(bytes: &[u8]) -> Result<Scan, String> {
    let mut s = Scan::default();
    run(
        bytes,
        Scanner {
            scan: &mut s,
            depth: 1,
        },
    )?;
    Ok(s)
}

/// Parses one JSON text into a [`Value`], refusing repeated keys at any depth.
pub fn value(bytes: &[u8]) -> Result<Value, String> {
    run(bytes, Build)
}

/// [`value`] over text.
pub fn value_str(text: &str) -> Result<Value, String> {
    value(text.as_bytes())
}

/// Deserialises `T` from one JSON text after [`scan`] has checked it: a repeated key
/// anywhere is an error, whatever `T`'s own `Deserialize` would make of it.
pub fn from_slice<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    scan(bytes)?;
    let bytes = strip_bom(bytes);
    serde_json::from_slice(bytes).map_err(|e| e.to_string())
}

/// [`from_slice`] over text.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, String> {
    from_slice(text.as_bytes())
}

/// `bytes` without a leading UTF-8 byte order mark (Python's `utf-8-sig`).
fn strip_bom(bytes: &[u8]) -> &[u8] {
    bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes)
}

/// Runs `seed` over the whole of `bytes`, trailing whitespace allowed, nothing else after.
fn run<'de, S: DeserializeSeed<'de>>(bytes: &'de [u8], seed: S) -> Result<S::Value, String> {
    let mut de = serde_json::Deserializer::from_slice(strip_bom(bytes));
    let v = seed.deserialize(&mut de).map_err(|e| e.to_string())?;
    de.end().map_err(|e| e.to_string())?;
    Ok(v)
}

/// The message of a repeated key.
fn duplicate<E: serde::de::Error>(key: &str) -> E {
    let mut shown: String = key.chars().take(60).collect();
    if shown.len() < key.len() {
        shown.push_str("...");
    }
    E::custom(format!(
        "duplicate key {} (a repeated key is an error, not the last value)",
        Value::String(shown)
    ))
}

/// The prefix of the keys serde_json treats as its own (a raw value, an exact number).
const RESERVED: &str = "$serde_json::private::";

/// Refuses `key` when it is a key this reader would read otherwise than serde_json does.
fn check_reserved<E: serde::de::Error>(key: &str) -> Result<(), E> {
    if key.starts_with(RESERVED) {
        let shown: String = key.chars().take(60).collect();
        return Err(E::custom(format!(
            "reserved key {} (serde_json reads an object with this key as raw JSON)",
            Value::String(shown)
        )));
    }
    Ok(())
}

/// Builds a [`Value`], refusing repeated keys.
#[derive(Clone, Copy)]
struct Build;

impl<'de> DeserializeSeed<'de> for Build {
    type Value = Value;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Build {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        // The parser yields finite numbers only (JSON has no NaN or infinity).
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom(format!("{v} is not a finite number")))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Value, A::Error> {
        let mut out = Vec::with_capacity(a.size_hint().unwrap_or(0).min(4096));
        while let Some(v) = a.next_element_seed(Build)? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(k) = m.next_key::<String>()? {
            check_reserved(&k)?;
            if out.contains_key(&k) {
                return Err(duplicate(&k));
            }
            let v = m.next_value_seed(Build)?;
            out.insert(k, v);
        }
        Ok(Value::Object(out))
    }
}

/// An object key, borrowed from the text when it has no escapes.
struct Key;

impl<'de> DeserializeSeed<'de> for Key {
    type Value = Cow<'de, str>;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Cow<'de, str>, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key {
    type Value = Cow<'de, str>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a key")
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Borrowed(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Owned(v.to_owned()))
    }
}

/// Walks a JSON text keeping only the counts and each open object's keys.
struct Scanner<'s> {
    scan: &'s mut Scan,
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for Scanner<'_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl Scanner<'_> {
    fn count(&mut self) {
        self.scan.values += 1;
        self.scan.depth = self.scan.depth.max(self.depth);
    }
    fn child(&mut self) -> Scanner<'_> {
        Scanner {
            depth: self.depth + 1,
            scan: self.scan,
        }
    }
}

impl<'de> Visitor<'de> for Scanner<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(mut self, _: bool) -> Result<(), E> {
        self.count();
        Ok(())
    }
    fn visit_i64<E>(mut self, _: i64) -> Result<(), E> {
        self.count();
        Ok(())
    }
    fn visit_u64<E>(mut self, _: u64) -> Result<(), E> {
        self.count();
        Ok(())
    }
    fn visit_f64<E>(mut self, _: f64) -> Result<(), E> {
        self.count();
        Ok(())
    }
    fn visit_str<E>(mut self, v: &str) -> Result<(), E> {
        self.count();
        self.scan.strings += 1;
        self.scan.string_bytes += v.len();
        Ok(())
    }
    fn visit_unit<E>(mut self) -> Result<(), E> {
        self.count();
        Ok(())
    }
    fn visit_none<E>(mut self) -> Result<(), E> {
        self.count();
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(mut self, mut a: A) -> Result<(), A::Error> {
        self.count();
        while a.next_element_seed(self.child())?.is_some() {}
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(mut self, mut m: A) -> Result<(), A::Error> {
        self.count();
        // Keys without escapes borrow the text: the check costs a few words a key.
        let mut seen: HashSet<Cow<'de, str>> = HashSet::new();
        while let Some(k) = m.next_key_seed(Key)? {
            self.scan.string_bytes += k.len();
            check_reserved(&k)?;
            if seen.contains(k.as_ref()) {
                return Err(duplicate(&k));
            }
            seen.insert(k);
            m.next_value_seed(self.child())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_keys_are_errors_at_every_depth() {
        for text in [
            r#"{"k": 1, "k": 2}"#,
            r#"{"a": {"b": [1, {"k": 1, "x": 0, "k": 1}]}}"#,
            r#"[{"z": null, "z": null}]"#,
            // The same key spelled with an escape is the same key.
            r#"{"k": 1, "\u006b": 2}"#,
        ] {
            let e = value(text.as_bytes()).unwrap_err();
            assert!(e.starts_with("duplicate key"), "{text}: {e}");
            assert!(e.contains("line 1 column"), "{e}");
            let e = scan(text.as_bytes()).unwrap_err();
            assert!(e.starts_with("duplicate key"), "{text}: {e}");
            let e = from_slice::<Value>(text.as_bytes()).unwrap_err();
            assert!(e.starts_with("duplicate key"), "{text}: {e}");
        }
        // The same key in two sibling objects is fine.
        let v = value(br#"[{"k": 1}, {"k": 2}]"#).unwrap();
        assert_eq!(v[1]["k"], 2);
    }

    #[test]
    fn values_equal_serde_json_on_good_input_and_counts_are_exact() {
        let text =
            "\u{feff} {\"a\": [1, -2, 3.5, \"s\", null, true, {\"b\": {}}], \"c\": 18446744073709551615} ";
        let ours = value(text.as_bytes()).unwrap();
        let theirs: Value = serde_json::from_str(text.trim_start_matches('\u{feff}')).unwrap();
        assert_eq!(ours, theirs);
        let s = scan(text.as_bytes()).unwrap();
        // {}, [...], 1, -2, 3.5, "s", null, true, {"b"}, {}, the big integer.
        assert_eq!(s.values, 11);
        assert_eq!(s.depth, 4);
        assert_eq!(s.strings, 1);
        assert_eq!(s.string_bytes, "a".len() + "s".len() + "b".len() + "c".len());
    }

    #[test]
    fn deep_nesting_and_trailing_text_are_errors_not_crashes() {
        let deep = "[".repeat(100_000);
        assert!(value(deep.as_bytes()).unwrap_err().starts_with("recursion limit"));
        assert!(scan(deep.as_bytes()).unwrap_err().starts_with("recursion limit"));
        let e = value(b"{} {}").unwrap_err();
        assert!(e.starts_with("trailing"), "{e}");
        for bad in ["", "{", "[1,]", "{\"a\" 1}", "nul", "\"\\ud800\""] {
            let e = value(bad.as_bytes()).unwrap_err();
            assert!(e.contains("line 1 column"), "{bad:?}: {e}");
            assert!(scan(bad.as_bytes()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn serde_json_private_keys_are_refused_not_read_as_raw_json() {
        // serde_json would read the first as the number 1 and the second as an object
        // holding a repeated key that no check saw.
        for text in [
            r#"{"$serde_json::private::RawValue": "1"}"#,
            r#"[{"$serde_json::private::RawValue": "{\"k\": 1, \"k\": 2}"}]"#,
            r#"{"a": {"$serde_json::private::Number": "1"}}"#,
        ] {
            for e in [
                value(text.as_bytes()).unwrap_err(),
                scan(text.as_bytes()).unwrap_err(),
                from_slice::<Value>(text.as_bytes()).unwrap_err(),
            ] {
                assert!(
                    e.starts_with("reserved key \"$serde_json::private::"),
                    "{text}: {e}"
                );
                assert!(e.contains("line 1 column"), "{e}");
            }
        }
        // The same text as a string value, or a key that only resembles it, is fine.
        let v = value(br#"{"k": "$serde_json::private::RawValue", "$serde_json": 1}"#).unwrap();
        assert_eq!(v["$serde_json"], 1);
    }

    #[test]
    fn typed_reads_see_the_check() {
        #[derive(serde::Deserialize, Debug)]
        struct T {
            #[allow(dead_code)]
            m: std::collections::HashMap<String, u32>,
        }
        // A map field of a struct would silently keep the last value without the scan.
        let e = from_slice::<T>(br#"{"m": {"x": 1, "x": 2}}"#).unwrap_err();
        assert!(e.starts_with("duplicate key \"x\""), "{e}");
        assert!(from_slice::<T>(br#"{"m": {"x": 1, "y": 2}}"#).is_ok());
    }
}
