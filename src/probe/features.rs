//! Trace features of a No-CM trajectory (observation-masking.txt App. D.2, D.3) and the
//! prefix targets (§5.2, App. D.6).
//!
//! A trajectory is read with [`Trajectory::parse`]; each of its [`Turn`]s (an assistant
//! message making tool calls) with **at least one answered call** is one
//! tool-observation turn. A turn none of whose calls was answered (typically the last
//! one of a trajectory cut off while waiting for a tool) observed nothing, so it is not
//! counted: counting it would make the always-kept last prefix `T` a prefix without an
//! observation. It is not dropped silently either: [`Trace::unanswered`] lists it, and
//! the probe's report names it. Per counted turn [`trace`] keeps the normalised URLs it
//! observed (those in its observation texts, and those in the arguments of its open-type
//! calls), its observation tokens and whether it made a search call and an open call.
//! Prefix `t` (1-based) is counted turns `1..=t`; [`prefix_features`] gives the ten
//! features named in [`FEATURES`], [`sample_prefixes`] the prefixes D.2 keeps.

use crate::error::Result;
use crate::mask::pages::normalize_url;
use crate::mask::{Trajectory, Turn};
use crate::rng::Rng;
use crate::tokens::TokenCounter;
use serde_json::Value;
use std::collections::HashSet;

/// The feature names, in the order of [`prefix_features`]'s vector (App. D.3).
pub const FEATURES: [&str; 10] = [
    "current_turn",
    "log_cum_urls",
    "log_new_urls",
    "log_cum_obs_tokens",
    "log_turn_obs_tokens",
    "url_growth_rate",
    "search_call",
    "open_call",
    "log_final_url_budget",
    "log_turns",
];

/// Index in [`FEATURES`] of `log_cum_obs_tokens`, the feature PCA1's sign is aligned with.
pub const CUM_TOKENS: usize = 3;

/// The tool names that count as search calls and as open calls.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolKinds {
    /// Search tools.
    pub search: Vec<String>,
    /// Open (page-fetching) tools: URLs in their arguments count as observed.
    pub open: Vec<String>,
}

/// Default search tools.
pub const DEFAULT_SEARCH_TOOLS: &str = "search,web_search,search_web,browser.search";
/// Default open tools.
pub const DEFAULT_OPEN_TOOLS: &str = "open,open_page,fetch,browse,visit,browser.open,get_document";

impl Default for ToolKinds {
    fn default() -> Self {
        let split = |s: &str| s.split(',').map(str::to_string).collect();
        ToolKinds {
            search: split(DEFAULT_SEARCH_TOOLS),
            open: split(DEFAULT_OPEN_TOOLS),
        }
    }
}

/// One tool-observation turn as the probe sees it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TurnTrace {
    /// Normalised URLs observed in this turn, each once, in order of first appearance.
    pub urls: Vec<String>,
    /// Tokens of this turn's observations (all its calls' observation texts).
    pub tokens: usize,
    /// Whether a call of this turn is a search call.
    pub search: bool,
    /// Whether a call of this turn is an open call.
    pub open: bool,
}

/// A URL-like string the scan found that [`normalize_url`] refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unparsed {
    /// Tool-observation turn (1-based, as prefixes count them); 0 for the final answer.
    pub turn: usize,
    /// The string as found.
    pub url: String,
    /// Why it was refused.
    pub why: String,
}

/// A tool-call turn none of whose calls was answered: not a tool-observation turn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unanswered {
    /// Index of its assistant message in the trajectory's message list (0-based).
    pub message: usize,
    /// Its calls' tool names, in order.
    pub tools: Vec<String>,
    /// Whether it is the trajectory's last tool-call turn.
    pub last: bool,
}

/// The probe's view of one trajectory.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Trace {
    /// The tool-observation turns (tool-call turns with at least one answered call), in
    /// order.
    pub turns: Vec<TurnTrace>,
    /// Tool-call turns with no answered call, in order: not counted as turns (reported).
    pub unanswered: Vec<Unanswered>,
    /// Normalised URLs cited in the final assistant message's text, each once.
    pub answer_urls: Vec<String>,
    /// URL-like strings skipped because they do not parse (they are reported, never
    /// silently dropped).
    pub bad_urls: Vec<Unparsed>,
}

/// The URL-like substrings of `text`: from `http://` or `https://` (scheme matched
/// without regard to case) up to whitespace or one of `"'<>()[]{}`, with trailing
/// `.,;:` removed. No regex: one left-to-right scan.
#[must_use]
pub fn scan_urls(text: &str) -> Vec<&str> {
    let bytes = text.as_bytes();
    let lower_at = |i: usize, pat: &[u8]| {
        bytes.len() >= i + pat.len() && bytes[i..i + pat.len()].eq_ignore_ascii_case(pat)
    };
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let scheme = if lower_at(i, b"https://") {
            8
        } else if lower_at(i, b"http://") {
            7
        } else {
            i += 1;
            continue;
        };
        // The end: the first stop character after the scheme (ASCII, so a char boundary).
        let mut end = i + scheme;
        for (k, c) in text[i + scheme..].char_indices() {
            if c.is_whitespace() || "\"'<>()[]{}".contains(c) {
                end = i + scheme + k;
                break;
            }
            end = i + scheme + k + c.len_utf8();
        }
        let found = text[i..end].trim_end_matches(['.', ',', ';', ':']);
        out.push(found);
        i = end.max(i + 1);
    }
    out
}

/// Every string value inside a JSON value (object values and array elements, recursively).
fn json_strings<'v>(v: &'v Value, out: &mut Vec<&'v str>) {
    match v {
        Value::String(s) => out.push(s),
        Value::Array(a) => a.iter().for_each(|x| json_strings(x, out)),
        Value::Object(o) => o.values().for_each(|x| json_strings(x, out)),
        _ => {}
    }
}

/// Adds the normalised URLs of `text` to `urls` (once each, `seen` tracking them); the
/// ones that do not parse go to `bad`.
fn collect(
    text: &str,
    turn: usize,
    seen: &mut HashSet<String>,
    urls: &mut Vec<String>,
    bad: &mut Vec<Unparsed>,
) {
    for raw in scan_urls(text) {
        match normalize_url(raw) {
            Ok(u) => {
                if seen.insert(u.clone()) {
                    urls.push(u);
                }
            }
            Err(e) => bad.push(Unparsed {
                turn,
                url: raw.to_string(),
                why: e.to_string(),
            }),
        }
    }
}

/// The text of a message's content: a string, or the `text` of its parts / blocks.
fn message_text(msg: &Value) -> String {
    match msg.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter(|p| p.get("type").and_then(Value::as_str).is_none_or(|t| t == "text"))
            .filter_map(|p| p.get("text").and_then(Value::as_str).or_else(|| p.as_str()))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The text content of the last assistant message (the final answer), `None` when the
/// trajectory has no assistant message.
#[must_use]
pub fn final_answer(traj: &Trajectory) -> Option<String> {
    traj.messages()
        .iter()
        .rev()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
        .map(message_text)
}

/// One turn's trace: URLs from its observation texts and from the arguments of its open
/// calls (parsed as JSON when they are: every string value is scanned; else the raw text).
fn turn_trace(
    turn: &Turn,
    t: usize,
    kinds: &ToolKinds,
    counter: &dyn TokenCounter,
    bad: &mut Vec<Unparsed>,
) -> TurnTrace {
    let mut seen = HashSet::new();
    let mut tt = TurnTrace::default();
    for c in &turn.calls {
        let is_open = kinds.open.contains(&c.tool);
        tt.search |= kinds.search.contains(&c.tool);
        tt.open |= is_open;
        if is_open {
            match crate::io::json::value_str(&c.args) {
                Ok(v) => {
                    let mut strings = Vec::new();
                    json_strings(&v, &mut strings);
                    for s in strings {
                        collect(s, t, &mut seen, &mut tt.urls, bad);
                    }
                }
                Err(_) => collect(&c.args, t, &mut seen, &mut tt.urls, bad),
            }
        }
        if c.observation.is_some() {
            tt.tokens += counter.count(&c.text);
            collect(&c.text, t, &mut seen, &mut tt.urls, bad);
        }
    }
    tt
}

/// The probe's trace of a parsed trajectory: one [`TurnTrace`] per tool-observation turn
/// (a tool-call turn with at least one answered call), the tool-call turns with none
/// ([`Trace::unanswered`]: not scanned, not counted), and the URLs of the final assistant
/// message's text ([`final_answer`]).
#[must_use]
pub fn trace(traj: &Trajectory, kinds: &ToolKinds, counter: &dyn TokenCounter) -> Trace {
    let mut bad = Vec::new();
    let mut turns = Vec::new();
    let mut unanswered = Vec::new();
    let all = traj.turns();
    for (i, turn) in all.iter().enumerate() {
        if turn.calls.iter().any(|c| c.observation.is_some()) {
            let t = turns.len() + 1;
            turns.push(turn_trace(turn, t, kinds, counter, &mut bad));
        } else {
            unanswered.push(Unanswered {
                message: turn.message,
                tools: turn.calls.iter().map(|c| c.tool.clone()).collect(),
                last: i + 1 == all.len(),
            });
        }
    }
    let mut answer_urls = Vec::new();
    if let Some(text) = final_answer(traj) {
        collect(&text, 0, &mut HashSet::new(), &mut answer_urls, &mut bad);
    }
    Trace {
        turns,
        unanswered,
        answer_urls,
        bad_urls: bad,
    }
}

/// Parses `text` (OpenAI or Anthropic messages, detected) and traces it.
pub fn trace_text(text: &str, kinds: &ToolKinds, counter: &dyn TokenCounter) -> Result<Trace> {
    Ok(trace(&Trajectory::parse(text, None)?, kinds, counter))
}

impl Trace {
    /// Number of tool-observation turns `T`.
    #[must_use]
    pub fn len(&self) -> usize {
        self.turns.len()
    }

    /// True when the trajectory has no tool-observation turn (no tool call, or none
    /// answered).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.turns.is_empty()
    }

    /// The unique URLs observed by prefix `t` (turns `1..=t`), in order of first
    /// appearance.
    #[must_use]
    pub fn cumulative_urls(&self, t: usize) -> Vec<&str> {
        let mut seen = HashSet::new();
        self.turns[..t.min(self.turns.len())]
            .iter()
            .flat_map(|tt| tt.urls.iter())
            .filter(|u| seen.insert(u.as_str()))
            .map(String::as_str)
            .collect()
    }
}

/// `ln(1 + v)`.
fn ln1p(v: usize) -> f64 {
    (v as f64).ln_1p()
}

/// The features of every prefix `1..=T`, in the order of [`FEATURES`]:
/// `t/T`, `ln(1+cumulative unique URLs)`, `ln(1+new URLs this turn)`,
/// `ln(1+cumulative observation tokens)`, `ln(1+this turn's observation tokens)`,
/// `new / max(cumulative, 1)` (cumulative after the turn), search indicator, open
/// indicator, `ln(1+unique URLs of the whole trajectory)`, `ln(1+T)`.
#[must_use]
pub fn all_prefix_features(tr: &Trace) -> Vec<[f64; 10]> {
    let big_t = tr.len();
    let budget = tr.cumulative_urls(big_t).len();
    let mut seen: HashSet<&str> = HashSet::new();
    let mut cum_tokens = 0usize;
    let mut out = Vec::with_capacity(big_t);
    for (i, tt) in tr.turns.iter().enumerate() {
        let new = tt.urls.iter().filter(|u| seen.insert(u.as_str())).count();
        cum_tokens += tt.tokens;
        let cum = seen.len();
        out.push([
            (i + 1) as f64 / big_t as f64,
            ln1p(cum),
            ln1p(new),
            ln1p(cum_tokens),
            ln1p(tt.tokens),
            new as f64 / cum.max(1) as f64,
            f64::from(u8::from(tt.search)),
            f64::from(u8::from(tt.open)),
            ln1p(budget),
            ln1p(big_t),
        ]);
    }
    out
}

/// The features of prefix `t` (1-based, at most `T`); see [`all_prefix_features`].
#[must_use]
pub fn prefix_features(tr: &Trace, t: usize) -> Option<[f64; 10]> {
    t.checked_sub(1)
        .and_then(|i| all_prefix_features(tr).get(i).copied())
}

/// The seed of query `id`'s prefix sample: `seed` mixed with the FNV-1a hash of the id, so
/// a query's sample depends on its id and the seed, not on where it is in the labels.
#[must_use]
pub fn query_seed(seed: u64, id: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^ seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// The prefixes D.2 keeps of a trajectory with `t` turns, sorted: all of `1..=t` when
/// `t <= k`; else `k - 1` drawn uniformly without replacement from `1..=t-1` (a partial
/// Fisher–Yates shuffle on `rng`) and `t` itself. `k = 0` keeps none.
#[must_use]
pub fn sample_prefixes(t: usize, k: usize, rng: &mut Rng) -> Vec<usize> {
    if k == 0 {
        return Vec::new();
    }
    if t <= k {
        return (1..=t).collect();
    }
    let mut pool: Vec<usize> = (1..t).collect();
    for i in 0..k - 1 {
        let j = i + rng.below(pool.len() - i);
        pool.swap(i, j);
    }
    let mut out: Vec<usize> = pool[..k - 1].to_vec();
    out.push(t);
    out.sort_unstable();
    out
}

/// Evidence SNR of prefix `t` against normalised gold URLs:
/// `|U ∩ G| / (|U \ G| + 1)` with `U` the unique URLs observed by `t`
/// ([`crate::mask::pages::evidence_snr`]).
pub fn snr_target(tr: &Trace, t: usize, gold: &[String]) -> Result<f64> {
    let g: Vec<&str> = gold.iter().map(String::as_str).collect();
    crate::mask::pages::evidence_snr(&tr.cumulative_urls(t), &g)
}

/// The citation proxy of App. D.6 at prefix `t`: `|L ∩ C| / max(|L|, 1)` with `L` the
/// unique URLs observed by `t` and `C` the cited URLs (normalised).
#[must_use]
pub fn citation_target(tr: &Trace, t: usize, cited: &[String]) -> f64 {
    let c: HashSet<&str> = cited.iter().map(String::as_str).collect();
    let l = tr.cumulative_urls(t);
    let hit = l.iter().filter(|u| c.contains(*u)).count();
    hit as f64 / l.len().max(1) as f64
}
