//! The placeholder template: `{tool}`, `{args}`, `{tokens}` and `{lines}` are fields,
//! expanded in one pass (substituted text is never scanned again, so a tool named
//! `{args}` renders as itself); any other `{name}` of letters, digits and underscores is
//! an error; every other brace is literal. A template also recognises its own renderings,
//! so masking an already-masked trajectory leaves it as it is.

use crate::error::{Error, Result};

/// The known fields, as written in a template.
const FIELDS: &str = "{tool}, {args}, {tokens}, {lines}";

#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    Text(String),
    Tool,
    Args,
    Tokens,
    Lines,
}

/// A parsed placeholder template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Template {
    pieces: Vec<Piece>,
}

impl Template {
    /// Parses `s`; an unknown field is an error naming it (and the known ones).
    pub(crate) fn parse(s: &str) -> Result<Self> {
        let mut pieces = Vec::new();
        let mut text = String::new();
        let mut rest = s;
        while let Some(open) = rest.find('{') {
            text.push_str(&rest[..open]);
            let after = &rest[open + 1..];
            let n = after
                .bytes()
                .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
                .count();
            if n == 0 || after.as_bytes().get(n) != Some(&b'}') {
                text.push('{');
                rest = after;
                continue;
            }
            let field = match &after[..n] {
                "tool" => Piece::Tool,
                "args" => Piece::Args,
                "tokens" => Piece::Tokens,
                "lines" => Piece::Lines,
                name => {
                    return Err(Error::invalid(
                        "placeholder",
                        format!("unknown field {{{name}}} (known: {FIELDS}; other braces are literal)"),
                    ))
                }
            };
            if !text.is_empty() {
                pieces.push(Piece::Text(std::mem::take(&mut text)));
            }
            pieces.push(field);
            rest = &after[n + 1..];
        }
        text.push_str(rest);
        if !text.is_empty() {
            pieces.push(Piece::Text(text));
        }
        Ok(Template { pieces })
    }

    /// The placeholder for one observation.
    pub(crate) fn render(&self, tool: &str, args: &str, tokens: usize, lines: usize) -> String {
        let mut out = String::new();
        for p in &self.pieces {
            match p {
                Piece::Text(t) => out.push_str(t),
                Piece::Tool => out.push_str(tool),
                Piece::Args => out.push_str(args),
                Piece::Tokens => out.push_str(&tokens.to_string()),
                Piece::Lines => out.push_str(&lines.to_string()),
            }
        }
        out
    }

    /// Whether `text` is a rendering of this template for a call of `tool` with `args`:
    /// `{tool}` and `{args}` match those exactly, `{tokens}` and `{lines}` any run of
    /// digits. Runs in time linear in `text` per piece (the set of positions reachable
    /// after each piece, never a backtracking search); a text that does not start like
    /// the template is rejected at its first bytes.
    pub(crate) fn matches(&self, text: &str, tool: &str, args: &str) -> bool {
        let t = text.as_bytes();
        let fixed = |p| fixed(p, tool, args);
        // The fixed pieces before the first digit field, with one cursor (most texts fail
        // here, at their first bytes).
        let mut at = 0;
        let mut k = 0;
        while let Some(f) = self.pieces.get(k).and_then(fixed) {
            if !t.get(at..).is_some_and(|r| r.starts_with(f)) {
                return false;
            }
            at += f.len();
            k += 1;
        }
        let mut reach = vec![at];
        let mut next = Vec::new();
        for p in self.pieces.iter().skip(k) {
            next.clear();
            match fixed(p) {
                Some(f) => next.extend(
                    reach
                        .iter()
                        .filter(|&&i| t.get(i..).is_some_and(|r| r.starts_with(f)))
                        .map(|&i| i + f.len()),
                ),
                None => {
                    // Positions stay sorted: each start adds the ends of its digit run not
                    // added yet (a start inside an earlier run adds nothing new).
                    let mut done = 0;
                    for &i in &reach {
                        if i < done {
                            continue;
                        }
                        let run = t
                            .get(i..)
                            .map_or(0, |r| r.iter().take_while(|b| b.is_ascii_digit()).count());
                        next.extend(i + 1..=i + run);
                        done = i + run;
                    }
                }
            }
            std::mem::swap(&mut reach, &mut next);
            if reach.is_empty() {
                return false;
            }
        }
        reach.last() == Some(&t.len())
    }
}

/// The bytes piece `p` must match, or `None` for a digit field.
fn fixed<'a>(p: &'a Piece, tool: &'a str, args: &'a str) -> Option<&'a [u8]> {
    match p {
        Piece::Text(s) => Some(s.as_bytes()),
        Piece::Tool => Some(tool.as_bytes()),
        Piece::Args => Some(args.as_bytes()),
        Piece::Tokens | Piece::Lines => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_pass_expansion_and_literal_braces() {
        let t = Template::parse("[{tool}({args}) {tokens}/{lines} {} {x y} {{tool}}]").unwrap();
        assert_eq!(
            t.render("{args}{tokens}", "{lines}", 13, 2),
            "[{args}{tokens}({lines}) 13/2 {} {x y} {{args}{tokens}}]"
        );
        let e = Template::parse("a {tool} {result}").unwrap_err().to_string();
        assert!(e.contains("{result}") && e.contains("{tokens}"), "{e}");
        assert_eq!(Template::parse("").unwrap().render("t", "a", 1, 1), "");
    }

    #[test]
    fn recognises_its_renderings() {
        let t = Template::parse("[{tool}({args}) {tokens}{lines}7]").unwrap();
        let r = t.render("f", "{}", 120, 3);
        assert!(t.matches(&r, "f", "{}"));
        assert!(!t.matches(&r, "g", "{}"), "another tool");
        assert!(!t.matches(&r, "f", "{\"a\":1}"), "other arguments");
        assert!(
            !t.matches("[f({}) 7]", "f", "{}"),
            "each digit field needs a digit"
        );
        assert!(!t.matches(&format!("{r} "), "f", "{}"));
        assert!(!t.matches("plain text", "f", "{}"));
        let d = Template::parse("{tokens}{lines}").unwrap();
        assert!(d.matches(&"9".repeat(50_000), "f", ""));
        assert!(!d.matches("9", "f", ""));
        assert!(Template::parse("").unwrap().matches("", "f", ""));
    }
}
