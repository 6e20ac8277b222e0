//! The page pool (observation-masking.txt §2; SPEC §2): pages an agent opened, kept
//! append-only behind stable integer cursors, de-duplicated on the normalised absolute
//! URL, with `open(cursor | url, loc, num_lines)` windows and `find(pattern, cursor)`
//! line spans. Masking never removes pages from the pool.

use crate::error::{Error, Result};
use std::collections::{HashMap, HashSet};

/// A URL in canonical form: parsed as absolute (the `url` crate lower-cases the scheme
/// and host, drops default ports and normalises percent-encoding), fragment removed.
pub fn normalize_url(s: &str) -> Result<String> {
    let mut u = url::Url::parse(s.trim())
        .map_err(|e| Error::invalid("url", format!("'{s}' is not an absolute URL: {e}")))?;
    u.set_fragment(None);
    Ok(u.to_string())
}

/// One page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page {
    /// Normalised URL, when the page has one.
    pub url: Option<String>,
    /// Its lines.
    pub lines: Vec<String>,
}

/// A page by cursor or by URL.
#[derive(Clone, Copy, Debug)]
pub enum PageRef<'a> {
    /// The cursor `add` returned.
    Cursor(usize),
    /// Any spelling of the page's URL.
    Url(&'a str),
}

/// A window onto a page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    /// The page's cursor.
    pub cursor: usize,
    /// First line shown (0-based).
    pub start: usize,
    /// One past the last line shown.
    pub end: usize,
    /// Total lines of the page.
    pub total: usize,
    /// The lines.
    pub lines: Vec<String>,
}

/// Append-only pages with stable cursors.
#[derive(Clone, Debug, Default)]
pub struct PagePool {
    pages: Vec<Page>,
    by_url: HashMap<String, usize>,
}

impl PagePool {
    /// An empty pool.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of pages.
    #[must_use]
    pub fn len(&self) -> usize {
        self.pages.len()
    }

    /// True when empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.pages.is_empty()
    }

    /// Adds a page and returns its cursor; a URL already in the pool (after
    /// normalisation) returns the existing cursor and keeps the first content.
    pub fn add(&mut self, url: Option<&str>, content: &str) -> Result<usize> {
        let url = url.map(normalize_url).transpose()?;
        if let Some(u) = &url {
            if let Some(&c) = self.by_url.get(u) {
                return Ok(c);
            }
        }
        let c = self.pages.len();
        self.pages.push(Page {
            url: url.clone(),
            lines: content.lines().map(str::to_string).collect(),
        });
        if let Some(u) = url {
            self.by_url.insert(u, c);
        }
        Ok(c)
    }

    /// The cursor of a page reference.
    pub fn cursor(&self, r: PageRef<'_>) -> Result<usize> {
        match r {
            PageRef::Cursor(c) if c < self.pages.len() => Ok(c),
            PageRef::Cursor(c) => Err(Error::invalid(
                "cursor",
                format!("{c} is not a page (the pool has {})", self.pages.len()),
            )),
            PageRef::Url(u) => {
                let n = normalize_url(u)?;
                self.by_url
                    .get(&n)
                    .copied()
                    .ok_or_else(|| Error::invalid("url", format!("{u} is not in the pool")))
            }
        }
    }

    /// The page at a cursor.
    pub fn page(&self, r: PageRef<'_>) -> Result<&Page> {
        Ok(&self.pages[self.cursor(r)?])
    }

    /// Lines `loc .. loc + num_lines` of a page (clipped at its end; `loc` past the end is
    /// an error naming the page's length).
    pub fn open(&self, r: PageRef<'_>, loc: usize, num_lines: usize) -> Result<Window> {
        let cursor = self.cursor(r)?;
        let p = &self.pages[cursor];
        let total = p.lines.len();
        if loc > total || (loc == total && total > 0) {
            return Err(Error::invalid(
                "loc",
                format!("line {loc} is past the end of page {cursor} ({total} lines)"),
            ));
        }
        let end = (loc + num_lines).min(total);
        Ok(Window {
            cursor,
            start: loc,
            end,
            total,
            lines: p.lines[loc..end].to_vec(),
        })
    }

    /// Every occurrence of `pattern` (case-insensitive) in a page: `(line, start byte, end
    /// byte)` in reading order.
    pub fn find(&self, pattern: &str, r: PageRef<'_>) -> Result<Vec<(usize, usize, usize)>> {
        if pattern.is_empty() {
            return Err(Error::invalid("pattern", "is empty"));
        }
        let p = self.page(r)?;
        let pat = pattern.to_lowercase();
        let mut out = Vec::new();
        for (i, line) in p.lines.iter().enumerate() {
            let low = line.to_lowercase();
            if low.len() != line.len() {
                // Lower-casing changed byte lengths: report line-level matches only.
                if low.contains(&pat) {
                    out.push((i, 0, line.len()));
                }
                continue;
            }
            let mut from = 0;
            while let Some(k) = low[from..].find(&pat) {
                out.push((i, from + k, from + k + pat.len()));
                from += k + pat.len().max(1);
            }
        }
        Ok(out)
    }
}

/// Evidence SNR `|U ∩ G| / (|U \ G| + 1)` for the unique pages `U` of a prefix and a gold
/// set `G`, both compared as normalised URLs.
pub fn evidence_snr(prefix: &[&str], gold: &[&str]) -> Result<f64> {
    let u: HashSet<String> = prefix.iter().map(|s| normalize_url(s)).collect::<Result<_>>()?;
    let g: HashSet<String> = gold.iter().map(|s| normalize_url(s)).collect::<Result<_>>()?;
    let hit = u.intersection(&g).count();
    Ok(hit as f64 / ((u.len() - hit) as f64 + 1.0))
}
