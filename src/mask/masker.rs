//! The maskers (observation-masking.txt §2, App. C–D; SPEC §2) and their accounting.
//!
//! The paper's rule: at turn `t`, mask observation `o_i` iff it is not an error and
//! `i <= t - K` (the K most recent turns keep their observations; SPEC fixes the paper's
//! off-by-one). Options users of other maskers rely on: keep the first observation;
//! tools never masked (`tools_keep`) and, when given, the only tools masked
//! (`tools_mask`); act only once the context exceeds `trigger_tokens` and then only if at
//! least `clear_at_least` tokens would be cleared; move the masking boundary in steps of
//! `P` turns so the prompt prefix stays cacheable; a placeholder template with `{tool}`,
//! `{args}`, `{tokens}` and `{lines}`.
//!
//! Masking is idempotent: an observation whose content is already a rendering of the
//! template (for its call's tool and arguments, any digits for `{tokens}` and `{lines}`)
//! is left as it is and counted as masked, so an agent loop can re-mask its masked
//! history every turn.

use super::template::Template;
use super::{Trajectory, Turn};
use crate::error::{Error, Result};
use crate::tokens::TokenCounter;
use std::sync::Arc;

/// Masking options; [`MaskConfig::default`] is the paper's rule (K = 5, errors kept).
#[derive(Clone, Debug, PartialEq)]
pub struct MaskConfig {
    /// Turns whose observations are kept, counting back from the latest. By default 5.
    pub window: usize,
    /// Keep error observations. By default true.
    pub keep_errors: bool,
    /// Keep the trajectory's first observation. By default false.
    pub keep_first: bool,
    /// Tools whose observations are never masked.
    pub tools_keep: Vec<String>,
    /// When non-empty, only these tools' observations are masked.
    pub tools_mask: Vec<String>,
    /// Mask only when the context holds more than this many tokens.
    pub trigger_tokens: Option<usize>,
    /// Mask only when at least this many tokens would be cleared. By default 0.
    pub clear_at_least: usize,
    /// The boundary moves in steps of this many units (turns, or tool uses). By default 1.
    pub step: usize,
    /// What `window` and `step` count: turns (the paper's rule; by default) or tool uses
    /// (Anthropic's `keep`, SWE-agent's observations).
    pub unit: Unit,
    /// Where the steps of `step` are counted from (SWE-agent's polling counts from the
    /// task, the default from the window's edge).
    pub anchor: Anchor,
    /// Cache-aware hold: the boundary moves only when the context *as masked* exceeds
    /// `trigger_tokens` (when given) and the move clears at least `clear_at_least` more
    /// tokens; otherwise the prefix the provider cached stays as it was. By default
    /// false: each request is masked from scratch, as Anthropic's context editing does.
    pub hold: bool,
    /// Also clear the arguments of masked calls (`{}`; Anthropic's `clear_tool_inputs`).
    /// The call and its id stay, so the pairing every provider checks still holds.
    pub clear_tool_inputs: bool,
    /// Placeholder template: `{tool}`, `{args}`, `{tokens}` and `{lines}` are replaced
    /// once each (substituted text is not scanned again); another `{name}` is an error
    /// when the masker is made; other braces are literal.
    pub placeholder: String,
}

/// What a masking window counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Unit {
    /// Turns: assistant messages with tool calls; a turn's calls are masked together.
    #[default]
    Turns,
    /// Tool uses: calls, one by one, in order (parallel calls count one each).
    ToolUses,
}

/// Where the steps of [`MaskConfig::step`] are counted from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Anchor {
    /// From the window's edge: the boundary at `u` units is `⌊(u − K)/P⌋·P`.
    #[default]
    Window,
    /// From the task, as SWE-agent's `LastNObservations(n, polling)` counts: its history's
    /// observations are the task (the instance template) and then the `u` tool results,
    /// so the boundary is `⌊(u + 1)/P⌋·P − K − 1` tool results.
    Start,
}

/// The default placeholder: keeps which tool ran with which arguments, drops the content.
pub const DEFAULT_PLACEHOLDER: &str =
    "[observation omitted: {tool}({args}) returned {tokens} tokens, {lines} lines]";

impl Default for MaskConfig {
    fn default() -> Self {
        MaskConfig {
            window: 5,
            keep_errors: true,
            keep_first: false,
            tools_keep: Vec::new(),
            tools_mask: Vec::new(),
            trigger_tokens: None,
            clear_at_least: 0,
            step: 1,
            unit: Unit::Turns,
            anchor: Anchor::Window,
            hold: false,
            clear_tool_inputs: false,
            placeholder: DEFAULT_PLACEHOLDER.into(),
        }
    }
}

/// What masking did, and what the context costs. An observation that was already a
/// placeholder (masked by an earlier pass) counts in `observations_masked`; its tokens
/// are the placeholder's in every count (its original size is gone), so
/// `tokens_before - tokens_after` is what this pass saves.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct MaskStats {
    /// Turns (assistant messages with tool calls).
    pub turns: usize,
    /// Observations replaced by a placeholder, by this pass or an earlier one.
    pub observations_masked: usize,
    /// Observations kept.
    pub observations_kept: usize,
    /// Context tokens before masking.
    pub tokens_before: usize,
    /// Context tokens after masking.
    pub tokens_after: usize,
    /// Sum over turns of the context length the agent saw at that turn, masking applied
    /// as it would have been at each turn.
    pub rolling_input_tokens: usize,
    /// The same sum without masking.
    pub rolling_input_tokens_unmasked: usize,
    /// Tool uses this pass cleared (Anthropic's `cleared_tool_uses`).
    pub cleared_tool_uses: usize,
    /// Tokens this pass cleared: `tokens_before - tokens_after` (Anthropic's
    /// `cleared_input_tokens`).
    pub cleared_input_tokens: usize,
}

/// A masker: the options and a shared token counter (`Clone + Send + Sync`; one per
/// service). Each conversation gets its own [`MaskSession`], which caches token counts.
#[derive(Clone)]
pub struct Masker {
    cfg: MaskConfig,
    template: Template,
    counter: Arc<dyn TokenCounter>,
}

impl std::fmt::Debug for Masker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Masker")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

impl Masker {
    /// A masker counting with `counter`. Errors name the option at fault: a `step` of 0,
    /// an unknown `{field}` in the placeholder.
    pub fn new(cfg: MaskConfig, counter: Arc<dyn TokenCounter>) -> Result<Self> {
        if cfg.step == 0 {
            return Err(Error::invalid("step", "must be at least 1"));
        }
        let template = Template::parse(&cfg.placeholder)?;
        Ok(Masker {
            cfg,
            template,
            counter,
        })
    }

    /// The options.
    #[must_use]
    pub fn cfg(&self) -> &MaskConfig {
        &self.cfg
    }

    /// A session for one conversation (an append-only trajectory): its token counts are
    /// cached by message, so re-planning after each turn pays only for what is new.
    #[must_use]
    pub fn session(&self) -> MaskSession {
        MaskSession {
            masker: self.clone(),
            cache: rustc_hash::FxHashMap::default(),
            seen: None,
        }
    }

    /// [`MaskSession::plan`] on a fresh session.
    #[must_use]
    pub fn plan(&self, traj: &Trajectory) -> (Vec<(super::Loc, String)>, MaskStats) {
        self.session().plan(traj)
    }

    /// [`MaskSession::mask`] on a fresh session.
    pub fn mask(&self, traj: &mut Trajectory) -> MaskStats {
        self.session().mask(traj)
    }

    /// [`MaskSession::plan_semantic`] on a fresh session.
    pub fn plan_semantic(
        &self,
        traj: &Trajectory,
        embeddings: &crate::embeddings::Embeddings,
        method: crate::select::Method,
        tau: f64,
        query: Option<&[f32]>,
    ) -> Result<(Vec<(super::Loc, String)>, usize)> {
        self.session().plan_semantic(traj, embeddings, method, tau, query)
    }

    /// [`MaskSession::mask_semantic`] on a fresh session.
    pub fn mask_semantic(
        &self,
        traj: &mut Trajectory,
        embeddings: &crate::embeddings::Embeddings,
        method: crate::select::Method,
        tau: f64,
        query: Option<&[f32]>,
    ) -> Result<(MaskStats, usize)> {
        self.session().mask_semantic(traj, embeddings, method, tau, query)
    }

    /// Whether call `(i, k)` may be masked at all (errors, first observation, tool lists).
    fn eligible(&self, turns: &[Turn], i: usize, k: usize) -> bool {
        let cfg = &self.cfg;
        let c = &turns[i].calls[k];
        c.observation.is_some()
            && !(cfg.keep_errors && c.is_error)
            && !(cfg.keep_first && i == 0 && k == 0)
            && !cfg.tools_keep.iter().any(|t| t == &c.tool)
            && (cfg.tools_mask.is_empty() || cfg.tools_mask.iter().any(|t| t == &c.tool))
    }

    /// Units `< boundary(u)` (0-based) are outside the window when `u` units are in the
    /// context.
    fn boundary(&self, u: usize) -> usize {
        let (k, step) = (self.cfg.window, self.cfg.step); // step >= 1 (checked in `new`)
        match self.cfg.anchor {
            Anchor::Window if u > k => (u - k) / step * step,
            Anchor::Window => 0,
            Anchor::Start => ((u + 1) / step * step).saturating_sub(k + 1),
        }
    }
}

/// What becomes of one observation.
enum Fate {
    /// Kept (not eligible, or inside the window).
    Keep,
    /// Masked with this placeholder when outside the window.
    Mask(String),
    /// Already a placeholder: left as it is, counted as masked.
    Masked,
}

/// One conversation's masking state: the masker and the token counts seen so far (keyed by
/// message, block and text length: agents append, so earlier entries are counted once).
/// The counts are reused only while each trajectory extends the one seen before (the same
/// trajectory, or the earlier text with messages appended, compared byte for byte); any
/// other trajectory (another conversation, a rewritten or masked history) starts the
/// counts afresh, so a session shared across conversations is slower, never wrong. What a
/// trajectory rewrote in place is counted afresh each time.
pub struct MaskSession {
    masker: Masker,
    cache: rustc_hash::FxHashMap<(usize, Option<usize>, usize), usize>,
    /// The trajectory the counts were taken from.
    seen: Option<super::TextMark>,
}

impl MaskSession {
    /// The count of an observation's `text` (`key`: its message and block, `usize::MAX`
    /// for a whole message), from the cache unless `traj` rewrote it in place.
    fn count(&mut self, traj: &Trajectory, key: (usize, Option<usize>), text: &str) -> usize {
        let c = &self.masker.counter;
        if traj.touched(key.0, key.1.filter(|&b| b != usize::MAX)) {
            return c.count(text);
        }
        *self
            .cache
            .entry((key.0, key.1, text.len()))
            .or_insert_with(|| c.count(text))
    }

    /// Keeps the counts when `traj` extends the trajectory they were taken from.
    /// (Counts are keyed by message index first: those of messages past what `traj`
    /// shares with the trajectory seen before are dropped.)
    fn sync(&mut self, traj: &Trajectory) {
        let kept = self.seen.as_ref().map_or(0, |m| traj.kept_from(m));
        match kept {
            usize::MAX => {}
            0 => self.cache.clear(),
            n => self.cache.retain(|k, _| k.0 < n),
        }
        self.seen = Some(traj.mark());
    }

    /// Decides what to mask in `traj` (as at its latest turn) without changing it:
    /// the placeholders to write and the accounting. Token counts of messages and
    /// observations seen before are reused, so an agent loop re-planning after each turn
    /// pays only for what is new.
    pub fn plan(&mut self, traj: &Trajectory) -> (Vec<(super::Loc, String)>, MaskStats) {
        self.plan_keeping(traj, &std::collections::HashSet::new())
    }

    /// [`MaskSession::plan`] with the observations at `keep` never masked (as if their
    /// tools were in `tools_keep`); the accounting counts them as kept.
    fn plan_keeping(
        &mut self,
        traj: &Trajectory,
        keep: &std::collections::HashSet<super::Loc>,
    ) -> (Vec<(super::Loc, String)>, MaskStats) {
        self.sync(traj);
        let turns = traj.turns();
        let msgs = traj.messages();
        let mut msg_tokens = Vec::with_capacity(msgs.len());
        for (m, v) in msgs.iter().enumerate() {
            let len = message_len(v);
            let c = &self.masker.counter;
            let n = if traj.touched(m, None) {
                c.count(&message_text(v))
            } else {
                *self
                    .cache
                    .entry((m, None, len))
                    .or_insert_with(|| c.count(&message_text(v)))
            };
            msg_tokens.push(n);
        }
        let t = turns.len();
        let cfg = self.masker.cfg.clone();
        // Units: one per turn, or one per call (tool uses); `first[i]` = units before turn i.
        let per_call = cfg.unit == Unit::ToolUses;
        let mut first = Vec::with_capacity(t + 1);
        let mut units = 0;
        for tr in turns {
            first.push(units);
            units += if per_call { tr.calls.len() } else { 1 };
        }
        first.push(units);
        let unit = |i: usize, k: usize| if per_call { first[i] + k } else { i };
        let empty_args = if cfg.clear_tool_inputs {
            self.masker.counter.count("{}")
        } else {
            0
        };
        // Per unit: tokens of its eligible observations, and net savings of masking them.
        let mut raw = vec![0usize; units];
        let mut net = vec![0i64; units];
        let mut fates: Vec<Vec<Fate>> = Vec::with_capacity(t);
        for (i, tr) in turns.iter().enumerate() {
            let mut pt = Vec::with_capacity(tr.calls.len());
            for (k, c) in tr.calls.iter().enumerate() {
                if c.observation.is_some() && self.masker.template.matches(&c.text, &c.tool, &c.args) {
                    pt.push(Fate::Masked);
                    continue;
                }
                let n = c.observation.map_or(0, |l| {
                    self.count(traj, (l.message, Some(l.block.unwrap_or(usize::MAX))), &c.text)
                });
                if self.masker.eligible(turns, i, k) && !c.observation.is_some_and(|l| keep.contains(&l)) {
                    // Cleared arguments are not shown either (and a re-mask recognises it).
                    let shown = if cfg.clear_tool_inputs && !c.args.is_empty() {
                        "{}"
                    } else {
                        c.args.as_str()
                    };
                    let ph = self.masker.template.render(&c.tool, shown, n, c.lines);
                    let loc = c.observation.map_or((0, None), |l| (l.message, l.block));
                    let pc = &self.masker.counter;
                    let key = (loc.0, Some(usize::MAX - 1 - loc.1.unwrap_or(0)), ph.len());
                    let pn = *self.cache.entry(key).or_insert_with(|| pc.count(&ph));
                    raw[unit(i, k)] += n;
                    net[unit(i, k)] += n as i64 - pn as i64;
                    if cfg.clear_tool_inputs && c.args != "{}" && !c.args.is_empty() {
                        // The arguments' tokens, less the "{}" left in their place.
                        let pc = &self.masker.counter;
                        let key = (tr.message, Some(usize::MAX / 2 + k), c.args.len());
                        let an = *self.cache.entry(key).or_insert_with(|| pc.count(&c.args));
                        net[unit(i, k)] += an as i64 - empty_args as i64;
                    }
                    pt.push(Fate::Mask(ph));
                } else {
                    pt.push(Fate::Keep);
                }
            }
            fates.push(pt);
        }
        let mut pre_raw = vec![0usize; units + 1];
        let mut pre_net = vec![0i64; units + 1];
        for u in 0..units {
            pre_raw[u + 1] = pre_raw[u] + raw[u];
            pre_net[u + 1] = pre_net[u] + net[u];
        }
        let mut prefix = vec![0usize; msgs.len() + 1];
        for (m, &x) in msg_tokens.iter().enumerate() {
            prefix[m + 1] = prefix[m] + x;
        }
        // The boundary when `u` units are in a context of `ctx` tokens (unmasked), the
        // previous request's boundary being `b`: from scratch (each request masked alone:
        // triggered by the context's size, acting when enough would be cleared), or held
        // (moving only when the context as masked is over the trigger and the move clears
        // enough more).
        let next = |u: usize, ctx: usize, b: usize| -> usize {
            let cand = self.masker.boundary(u);
            if cfg.hold {
                let masked = (ctx as i64 - pre_net[b]).max(0) as usize;
                let go = cand > b
                    && cfg.trigger_tokens.is_none_or(|n| masked > n)
                    && pre_raw[cand] - pre_raw[b] >= cfg.clear_at_least;
                if go {
                    cand
                } else {
                    b
                }
            } else {
                let go = cand > 0
                    && cfg.trigger_tokens.is_none_or(|n| ctx > n)
                    && pre_raw[cand] >= cfg.clear_at_least;
                if go {
                    cand
                } else {
                    0
                }
            }
        };
        let total = prefix[msgs.len()];
        let mut stats = MaskStats {
            turns: t,
            tokens_before: total,
            ..MaskStats::default()
        };
        let mut b = 0;
        for (i, tr) in turns.iter().enumerate() {
            let ctx = prefix[tr.message];
            b = next(first[i], ctx, b);
            stats.rolling_input_tokens += (ctx as i64 - pre_net[b]).max(0) as usize;
            stats.rolling_input_tokens_unmasked += ctx;
        }
        let b = next(units, total, b);
        let mut edits = Vec::new();
        for (i, tr) in turns.iter().enumerate() {
            for (k, c) in tr.calls.iter().enumerate() {
                let Some(loc) = c.observation else { continue };
                match (&fates[i][k], unit(i, k) < b) {
                    (Fate::Mask(ph), true) => {
                        edits.push((loc, ph.clone()));
                        stats.observations_masked += 1;
                    }
                    (Fate::Masked, _) => stats.observations_masked += 1,
                    _ => stats.observations_kept += 1,
                }
            }
        }
        stats.tokens_after = (total as i64 - pre_net[b]).max(0) as usize;
        stats.cleared_tool_uses = edits.len();
        stats.cleared_input_tokens = total.saturating_sub(stats.tokens_after);
        (edits, stats)
    }

    /// The semantic-adaptive masker (the paper's future work): among the observations
    /// the rule would mask, keep those whose marginal value against the live context is
    /// at least `tau`, scored by a marginal-value selector in gate mode (e.g. GRN: keep a
    /// stale observation that still adds a new direction). `embeddings` holds one row per
    /// answered observation, in trajectory order (turn by turn, call by call); the live
    /// context is every observation the rule keeps. Returns the edits still to apply
    /// and how many stale observations were kept back.
    pub fn plan_semantic(
        &mut self,
        traj: &Trajectory,
        embeddings: &crate::embeddings::Embeddings,
        method: crate::select::Method,
        tau: f64,
        query: Option<&[f32]>,
    ) -> Result<(Vec<(super::Loc, String)>, usize)> {
        let keep = self.kept_back(traj, embeddings, method, tau, query)?;
        let (edits, _) = self.plan(traj);
        let n = keep.len();
        Ok((edits.into_iter().filter(|e| !keep.contains(&e.0)).collect(), n))
    }

    /// [`MaskSession::plan_semantic`], applied: masks `traj` in place and returns the
    /// accounting, in which the observations kept back count as kept (the rolling totals
    /// too, as if they had been kept at every turn), and how many were kept back.
    pub fn mask_semantic(
        &mut self,
        traj: &mut Trajectory,
        embeddings: &crate::embeddings::Embeddings,
        method: crate::select::Method,
        tau: f64,
        query: Option<&[f32]>,
    ) -> Result<(MaskStats, usize)> {
        let keep = self.kept_back(traj, embeddings, method, tau, query)?;
        let (edits, stats) = self.plan_keeping(traj, &keep);
        self.apply(traj, edits);
        Ok((stats, keep.len()))
    }

    /// The observations the rule would mask that the gate keeps back.
    fn kept_back(
        &mut self,
        traj: &Trajectory,
        embeddings: &crate::embeddings::Embeddings,
        method: crate::select::Method,
        tau: f64,
        query: Option<&[f32]>,
    ) -> Result<std::collections::HashSet<super::Loc>> {
        use crate::select::{select, Inputs, Mode, SelectConfig};
        let locs: Vec<super::Loc> = traj
            .turns()
            .iter()
            .flat_map(|t| t.calls.iter().filter_map(|c| c.observation))
            .collect();
        if embeddings.rows() != locs.len() {
            return Err(Error::invalid(
                "embeddings",
                format!("{} rows for {} observations", embeddings.rows(), locs.len()),
            ));
        }
        let (edits, _) = self.plan(traj);
        if edits.is_empty() {
            return Ok(std::collections::HashSet::new());
        }
        let stale: std::collections::HashSet<super::Loc> = edits.iter().map(|e| e.0).collect();
        let live: Vec<usize> = (0..locs.len()).filter(|i| !stale.contains(&locs[*i])).collect();
        let cfg = SelectConfig::new(method).mode(Mode::Gate).threshold(tau);
        let sel = select(
            &cfg,
            &Inputs {
                embeddings: Some(embeddings),
                query,
                retained: &live,
                ..Inputs::default()
            },
        )?;
        Ok(sel
            .selected
            .iter()
            .map(|&i| locs[i])
            .filter(|l| stale.contains(l))
            .collect())
    }

    /// Masks `traj` in place (as at its latest turn) and returns the accounting.
    /// Masking a masked trajectory again changes nothing.
    pub fn mask(&mut self, traj: &mut Trajectory) -> MaskStats {
        let (edits, stats) = self.plan(traj);
        self.apply(traj, edits);
        stats
    }

    /// Writes `edits` (a plan's, for this `traj`) into `traj`, clearing the masked calls'
    /// arguments too when the masker says so. The trajectory records what it rewrote, so
    /// those counts are taken afresh.
    fn apply(&mut self, traj: &mut Trajectory, edits: Vec<(super::Loc, String)>) {
        let clear = self.masker.cfg.clear_tool_inputs;
        for (loc, text) in edits {
            if clear {
                let done = traj.clear_input(loc);
                debug_assert!(done.is_ok(), "plan's edits are the trajectory's observations");
            }
            let done = traj.replace(loc, &text);
            debug_assert!(done.is_ok(), "plan's edits are the trajectory's observations");
        }
    }
}

/// Length of a message's text without building it (the cache key).
fn message_len(v: &serde_json::Value) -> usize {
    use serde_json::Value;
    let content = match v.get("content") {
        Some(Value::String(s)) => s.len(),
        Some(Value::Array(parts)) => parts
            .iter()
            .map(|p| {
                p.get("text").and_then(Value::as_str).map_or(0, str::len)
                    + p.get("content").map_or(0, |c| match c {
                        Value::String(s) => s.len(),
                        other => other.to_string().len(),
                    })
                    + p.get("input").map_or(0, |i| i.to_string().len())
            })
            .sum(),
        _ => 0,
    };
    let calls = v.get("tool_calls").map_or(0, json_len);
    content + calls
}

/// A cheap size of a JSON value (its strings' bytes and its numbers' and keys' count):
/// the cache key's length part, without serialising it.
fn json_len(v: &serde_json::Value) -> usize {
    use serde_json::Value;
    match v {
        Value::String(s) => s.len() + 2,
        Value::Array(a) => a.iter().map(json_len).sum::<usize>() + 2,
        Value::Object(o) => o.iter().map(|(k, v)| k.len() + json_len(v)).sum::<usize>() + 2,
        _ => 1,
    }
}

/// A message's text for counting: its content (text parts, tool inputs and results) and
/// its tool calls.
fn message_text(v: &serde_json::Value) -> String {
    use serde_json::Value;
    let mut s = match v.get("content") {
        Some(Value::String(t)) => t.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .map(|p| {
                let mut x = p.get("text").and_then(Value::as_str).unwrap_or("").to_string();
                if let Some(c) = p.get("content") {
                    x.push_str(&match c {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    });
                }
                if let Some(i) = p.get("input") {
                    x.push_str(&i.to_string());
                }
                x
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    };
    if let Some(c) = v.get("tool_calls") {
        s.push_str(&c.to_string());
    }
    s
}
