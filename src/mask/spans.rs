//! Byte spans in JSON text, so a masked trajectory can be written as its input with only
//! the masked contents replaced (every other byte kept: big integers, number spellings,
//! escapes, whitespace, duplicate keys).
//!
//! The scanner reads text the one JSON reader ([`crate::io::json`]) has already accepted,
//! so no object in it repeats a key (a repeated key is refused there, naming it), but it is
//! total on its own: it never recurses on nesting depth (containers are tracked on an
//! explicit stack), every step consumes at least one byte, every read is bounds-checked,
//! and text that is not JSON is an error. Given text with a repeated key anyway, it keeps
//! the last one's span.

use std::ops::Range;

type R<T> = Result<T, String>;

/// An object in the text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Obj {
    /// Offset of its closing brace (where an absent member is inserted).
    pub close: usize,
    /// It has no members.
    pub empty: bool,
    /// The value of its last `"content"` member.
    pub content: Option<Range<usize>>,
    /// The value of its last `"input"` member (a `tool_use` block's arguments).
    pub input: Option<Range<usize>>,
    /// The value of its last `"tool_calls"` member.
    pub tool_calls: Option<Range<usize>>,
}

/// One message: the object (`None` when the message is not an object) and, when its
/// content is an array, each element's object (`None` for an element that is not one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Message {
    pub obj: Option<Obj>,
    pub blocks: Vec<Option<Obj>>,
    /// Per element of `"tool_calls"`, the value of its `"function"`'s `"arguments"`.
    pub arguments: Vec<Option<Range<usize>>>,
}

impl Message {
    /// The same spans `by` bytes further on.
    pub fn shift(&mut self, by: usize) {
        let shift = |r: &mut Range<usize>| *r = r.start + by..r.end + by;
        let objs = self.obj.iter_mut().chain(self.blocks.iter_mut().flatten());
        for o in objs {
            o.close += by;
            o.content
                .iter_mut()
                .chain(&mut o.input)
                .chain(&mut o.tool_calls)
                .for_each(shift);
        }
        self.arguments.iter_mut().flatten().for_each(shift);
    }
}

/// Where a document's messages are: the offset of the messages array's closing bracket
/// and each message's spans.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    pub close: usize,
    pub messages: Vec<Message>,
}

/// The layout of a document: an array of messages, or an object whose last `"messages"`
/// member is one.
pub(crate) fn layout(text: &str) -> R<Layout> {
    let s = text.as_bytes();
    let start = ws(s, 0);
    let array = match byte(s, start)? {
        b'[' => start,
        b'{' => {
            let mut found = None;
            members(s, start, |key, value| {
                if key_is(s, key, "messages")? {
                    found = Some(value.start);
                }
                Ok(())
            })?;
            found.ok_or("the object has no \"messages\"")?
        }
        _ => return Err(format!("byte {start}: expected an array or an object")),
    };
    if byte(s, array)? != b'[' {
        return Err(format!("byte {array}: \"messages\" is not an array"));
    }
    let mut messages = Vec::new();
    let close = elements(s, array, |v| {
        messages.push(message_at(s, v.start)?);
        Ok(())
    })?;
    let end = value_end(s, start)?;
    if ws(s, end) != s.len() {
        return Err(format!("byte {}: trailing characters", ws(s, end)));
    }
    Ok(Layout { close, messages })
}

/// The spans of one message written alone as `text`.
pub(crate) fn message(text: &str) -> R<Message> {
    let s = text.as_bytes();
    let start = ws(s, 0);
    let m = message_at(s, start)?;
    let end = value_end(s, start)?;
    if ws(s, end) != s.len() {
        return Err(format!("byte {}: trailing characters", ws(s, end)));
    }
    Ok(m)
}

fn message_at(s: &[u8], i: usize) -> R<Message> {
    let Some(obj) = object(s, i)? else {
        return Ok(Message {
            obj: None,
            blocks: Vec::new(),
            arguments: Vec::new(),
        });
    };
    let mut blocks = Vec::new();
    if let Some(c) = &obj.content {
        if byte(s, c.start)? == b'[' {
            elements(s, c.start, |v| {
                blocks.push(object(s, v.start)?);
                Ok(())
            })?;
        }
    }
    let mut arguments = Vec::new();
    if let Some(c) = &obj.tool_calls {
        if byte(s, c.start)? == b'[' {
            elements(s, c.start, |v| {
                arguments.push(
                    member(s, v.start, "function")?.map_or(Ok(None), |f| member(s, f.start, "arguments"))?,
                );
                Ok(())
            })?;
        }
    }
    Ok(Message {
        obj: Some(obj),
        blocks,
        arguments,
    })
}

/// The object at `i`, or `None` when the value there is not an object.
fn object(s: &[u8], i: usize) -> R<Option<Obj>> {
    if byte(s, i)? != b'{' {
        return Ok(None);
    }
    let (mut content, mut input, mut tool_calls) = (None, None, None);
    let mut empty = true;
    let close = members(s, i, |key, value| {
        empty = false;
        if key_is(s, key.clone(), "content")? {
            content = Some(value);
        } else if key_is(s, key.clone(), "input")? {
            input = Some(value);
        } else if key_is(s, key, "tool_calls")? {
            tool_calls = Some(value);
        }
        Ok(())
    })?;
    Ok(Some(Obj {
        close,
        empty,
        content,
        input,
        tool_calls,
    }))
}

/// The value of the last member `name` of the object at `i`; `None` when the value there
/// is not an object or has no such member.
fn member(s: &[u8], i: usize, name: &str) -> R<Option<Range<usize>>> {
    if byte(s, i)? != b'{' {
        return Ok(None);
    }
    let mut found = None;
    members(s, i, |key, value| {
        if key_is(s, key, name)? {
            found = Some(value);
        }
        Ok(())
    })?;
    Ok(found)
}

/// Calls `f(key, value)` for each member of the object at `i` (the key's span includes its
/// quotes); returns the offset of the closing brace.
fn members(s: &[u8], i: usize, mut f: impl FnMut(Range<usize>, Range<usize>) -> R<()>) -> R<usize> {
    let mut j = ws(s, i + 1);
    if byte(s, j)? == b'}' {
        return Ok(j);
    }
    loop {
        if byte(s, j)? != b'"' {
            return Err(format!("byte {j}: expected a key"));
        }
        let key_end = string_end(s, j)?;
        let colon = ws(s, key_end);
        if byte(s, colon)? != b':' {
            return Err(format!("byte {colon}: expected ':'"));
        }
        let v = ws(s, colon + 1);
        let v_end = value_end(s, v)?;
        f(j..key_end, v..v_end)?;
        let k = ws(s, v_end);
        match byte(s, k)? {
            b',' => j = ws(s, k + 1),
            b'}' => return Ok(k),
            _ => return Err(format!("byte {k}: expected ',' or '}}'")),
        }
    }
}

/// Calls `f(value)` for each element of the array at `i`; returns the offset of the
/// closing bracket.
fn elements(s: &[u8], i: usize, mut f: impl FnMut(Range<usize>) -> R<()>) -> R<usize> {
    let mut j = ws(s, i + 1);
    if byte(s, j)? == b']' {
        return Ok(j);
    }
    loop {
        let end = value_end(s, j)?;
        f(j..end)?;
        let k = ws(s, end);
        match byte(s, k)? {
            b',' => j = ws(s, k + 1),
            b']' => return Ok(k),
            _ => return Err(format!("byte {k}: expected ',' or ']'")),
        }
    }
}

/// Whether the key spanning `key` (quotes included) is `name`, escapes decoded.
fn key_is(s: &[u8], key: Range<usize>, name: &str) -> R<bool> {
    let raw = s.get(key.clone()).ok_or("key out of range")?;
    let inner = raw.get(1..raw.len().saturating_sub(1)).unwrap_or_default();
    if !inner.contains(&b'\\') {
        return Ok(inner == name.as_bytes());
    }
    let k: String = crate::io::json::from_slice(raw).map_err(|e| format!("byte {}: {e}", key.start))?;
    Ok(k == name)
}

/// One past the end of the value starting at `i` (no recursion: an explicit stack of
/// open containers).
fn value_end(s: &[u8], i: usize) -> R<usize> {
    let mut open: Vec<u8> = Vec::new();
    let mut j = i;
    loop {
        j = ws(s, j);
        let c = byte(s, j)?;
        match c {
            b'"' => j = string_end(s, j)?,
            b'{' => {
                open.push(b'}');
                j += 1;
            }
            b'[' => {
                open.push(b']');
                j += 1;
            }
            b'}' | b']' => {
                if open.pop() != Some(c) {
                    return Err(format!("byte {j}: unexpected '{}'", c as char));
                }
                j += 1;
            }
            b',' | b':' if !open.is_empty() => j += 1,
            b',' | b':' => return Err(format!("byte {j}: unexpected '{}'", c as char)),
            _ => {
                // A number or a literal: up to the next delimiter (at least this byte).
                j += 1;
                while s.get(j).is_some_and(|b| !is_delimiter(*b)) {
                    j += 1;
                }
            }
        }
        if open.is_empty() {
            return Ok(j);
        }
    }
}

fn is_delimiter(b: u8) -> bool {
    matches!(
        b,
        b',' | b':' | b'"' | b'{' | b'}' | b'[' | b']' | b' ' | b'\t' | b'\n' | b'\r'
    )
}

/// One past the closing quote of the string starting at `i`.
fn string_end(s: &[u8], i: usize) -> R<usize> {
    let mut j = i + 1;
    loop {
        let k = s
            .get(j..)
            .and_then(|r| r.iter().position(|&b| b == b'"' || b == b'\\'))
            .ok_or_else(|| format!("byte {i}: unterminated string"))?;
        j += k;
        if s.get(j) == Some(&b'"') {
            return Ok(j + 1);
        }
        j += 2; // a backslash and the byte it escapes
    }
}

fn ws(s: &[u8], mut i: usize) -> usize {
    while matches!(s.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

fn byte(s: &[u8], i: usize) -> R<u8> {
    s.get(i)
        .copied()
        .ok_or_else(|| format!("byte {i}: unexpected end of input"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn spans_of_contents_blocks_and_duplicate_keys() {
        let t = r#" { "messages" : [1, {"content":"a" , "x":{"content":2}} ,
            {"role":"u","content":[{"content":[3]},7,{}], "c\u006fntent" : "last"} ], "z": 1e5 } "#;
        let l = layout(t).unwrap();
        assert_eq!(l.close, t.rfind(']').unwrap(), "{t}");
        assert_eq!(&t[l.close..l.close + 1], "]");
        assert_eq!(l.messages.len(), 3);
        assert_eq!(l.messages[0].obj, None);
        let m1 = l.messages[1].obj.as_ref().unwrap();
        assert_eq!(&t[m1.content.clone().unwrap()], "\"a\"");
        assert_eq!(&t[m1.close..m1.close + 1], "}");
        // The escaped duplicate key is the last "content" (the trajectory parser refuses
        // such text before it gets here; the scanner alone keeps the last).
        let m2 = &l.messages[2];
        assert_eq!(&t[m2.obj.as_ref().unwrap().content.clone().unwrap()], "\"last\"");
        let v: serde_json::Value = serde_json::from_str(t).unwrap();
        assert_eq!(v["messages"][2]["content"], "last");
        // Blocks come from the value that was scanned (the first content, an array).
        assert!(m2.blocks.is_empty());
        let m = message(r#"{"content":[{"content":[3]},7,{}]}"#).unwrap();
        assert_eq!(m.blocks.len(), 3);
        assert!(m.blocks[1].is_none());
        assert!(m.blocks[2].as_ref().unwrap().empty);
        assert!(layout(r#"{"messages": 3}"#).is_err());
        assert!(layout(r#"{"m": []}"#).is_err());
        assert!(layout("[[}]").is_err());
        assert!(layout("[] x").is_err());
    }

    #[test]
    fn deep_nesting_does_not_recurse() {
        let deep = format!("[{}{}]", "[".repeat(200_000), "]".repeat(200_000));
        assert_eq!(layout(&deep).unwrap().messages.len(), 1);
        let open = "[".repeat(200_000);
        assert!(layout(&open).is_err());
    }

    /// Text made of JSON's pieces, so a fair share of it is JSON with "content" keys.
    fn pieces() -> impl Strategy<Value = String> {
        let p = prop::sample::select(vec![
            "{",
            "}",
            "[",
            "]",
            ",",
            ":",
            " ",
            "\n",
            "\"content\"",
            "\"c\\u006fntent\"",
            "\"a\\\"\"",
            "\"\"",
            "1",
            "-0.5e3",
            "true",
            "null",
            "\"é\"",
            "\\",
        ]);
        prop::collection::vec(p, 0..24).prop_map(|v| v.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        /// Any text: an answer, never a panic or a loop.
        #[test]
        fn total_on_any_text(t in pieces(), u in "\\PC{0,20}") {
            let _ = layout(&t);
            let _ = message(&t);
            let _ = layout(&u);
        }

        /// On JSON, the scanner finds what serde_json finds.
        #[test]
        fn agrees_with_serde_json(t in pieces()) {
            let wrapped = format!("[{t}]");
            if let Ok(serde_json::Value::Array(msgs)) = serde_json::from_str::<serde_json::Value>(&wrapped) {
                let l = layout(&wrapped).unwrap();
                prop_assert_eq!(l.messages.len(), msgs.len());
                for (m, v) in l.messages.iter().zip(&msgs) {
                    prop_assert_eq!(m.obj.is_some(), v.is_object());
                    let c = m.obj.as_ref().and_then(|o| o.content.clone());
                    let got = c.map(|c| serde_json::from_str::<serde_json::Value>(&wrapped[c]).unwrap());
                    prop_assert_eq!(got.as_ref(), v.get("content"));
                }
            }
        }
    }
}
