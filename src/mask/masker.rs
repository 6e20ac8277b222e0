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
use std::collections::HashMap;
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
    /// The boundary moves in steps of this many turns. By default 1.
    pub step: usize,
    /// Placeholder template: `{tool}`, `{args}`, `{tokens}` and `{lines}` are replaced
    /// once each (substituted text is not scanned again); another `{name}` is an error
    /// when the masker is made; other braces are literal.
    pub placeholder: String,
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
            cache: HashMap::new(),
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

    /// Turns `< boundary(t)` (0-based) are outside the window at time `t`.
    fn boundary(&self, t: usize) -> usize {
        let step = self.cfg.step; // at least 1 (checked in `new`)
        if t > self.cfg.window {
            (t - self.cfg.window) / step * step
        } else {
            0
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
/// Do not reuse a session across conversations: start a new one with
/// [`Masker::session`].
pub struct MaskSession {
    masker: Masker,
    cache: HashMap<(usize, Option<usize>, usize), usize>,
}

impl MaskSession {
    fn count(&mut self, key: (usize, Option<usize>), text: &str) -> usize {
        let c = &self.masker.counter;
        *self
            .cache
            .entry((key.0, key.1, text.len()))
            .or_insert_with(|| c.count(text))
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
        let turns = traj.turns();
        let msgs = traj.messages();
        let mut msg_tokens = Vec::with_capacity(msgs.len());
        for (m, v) in msgs.iter().enumerate() {
            let len = message_len(v);
            let c = &self.masker.counter;
            let n = *self
                .cache
                .entry((m, None, len))
                .or_insert_with(|| c.count(&message_text(v)));
            msg_tokens.push(n);
        }
        let t = turns.len();
        // Per turn: tokens of its eligible observations, and net savings of masking them.
        let mut raw = vec![0usize; t];
        let mut net = vec![0i64; t];
        let mut fates: Vec<Vec<Fate>> = Vec::with_capacity(t);
        for (i, tr) in turns.iter().enumerate() {
            let mut pt = Vec::with_capacity(tr.calls.len());
            for (k, c) in tr.calls.iter().enumerate() {
                if c.observation.is_some() && self.masker.template.matches(&c.text, &c.tool, &c.args) {
                    pt.push(Fate::Masked);
                    continue;
                }
                let n = c.observation.map_or(0, |l| {
                    self.count((l.message, Some(l.block.unwrap_or(usize::MAX))), &c.text)
                });
                if self.masker.eligible(turns, i, k) && !c.observation.is_some_and(|l| keep.contains(&l)) {
                    let ph = self.masker.template.render(&c.tool, &c.args, n, c.lines);
                    let loc = c.observation.map_or((0, None), |l| (l.message, l.block));
                    let pc = &self.masker.counter;
                    let key = (loc.0, Some(usize::MAX - 1 - loc.1.unwrap_or(0)), ph.len());
                    let pn = *self.cache.entry(key).or_insert_with(|| pc.count(&ph));
                    raw[i] += n;
                    net[i] += n as i64 - pn as i64;
                    pt.push(Fate::Mask(ph));
                } else {
                    pt.push(Fate::Keep);
                }
            }
            fates.push(pt);
        }
        let mut pre_raw = vec![0usize; t + 1];
        let mut pre_net = vec![0i64; t + 1];
        for i in 0..t {
            pre_raw[i + 1] = pre_raw[i] + raw[i];
            pre_net[i + 1] = pre_net[i] + net[i];
        }
        let mut prefix = vec![0usize; msgs.len() + 1];
        for (m, &x) in msg_tokens.iter().enumerate() {
            prefix[m + 1] = prefix[m] + x;
        }
        // Masking acts at time `i` when triggered and enough would be cleared.
        let acts = |b: usize, ctx: usize| {
            self.masker.cfg.trigger_tokens.is_none_or(|n| ctx > n)
                && pre_raw[b] >= self.masker.cfg.clear_at_least
                && b > 0
        };
        let total = prefix[msgs.len()];
        let mut stats = MaskStats {
            turns: t,
            tokens_before: total,
            ..MaskStats::default()
        };
        for (i, tr) in turns.iter().enumerate() {
            let ctx = prefix[tr.message];
            let b = self.masker.boundary(i);
            let saved = if acts(b, ctx) { pre_net[b] } else { 0 };
            stats.rolling_input_tokens += (ctx as i64 - saved).max(0) as usize;
            stats.rolling_input_tokens_unmasked += ctx;
        }
        let b = self.masker.boundary(t);
        let on = acts(b, total);
        let mut edits = Vec::new();
        for (i, tr) in turns.iter().enumerate() {
            for (k, c) in tr.calls.iter().enumerate() {
                let Some(loc) = c.observation else { continue };
                match (&fates[i][k], on && i < b) {
                    (Fate::Mask(ph), true) => {
                        edits.push((loc, ph.clone()));
                        stats.observations_masked += 1;
                    }
                    (Fate::Masked, _) => stats.observations_masked += 1,
                    _ => stats.observations_kept += 1,
                }
            }
        }
        let saved = if on { pre_net[b] } else { 0 };
        stats.tokens_after = (total as i64 - saved).max(0) as usize;
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
        for (loc, text) in edits {
            traj.replace(loc, &text)?;
        }
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
        for (loc, text) in edits {
            // The counts cached for this message and observation are keyed by length,
            // which the placeholder may share: forget them.
            if let Some(v) = traj.messages().get(loc.message) {
                self.cache.remove(&(loc.message, None, message_len(v)));
            }
            if let Some(c) = traj.call_at(loc) {
                let key = (loc.message, Some(loc.block.unwrap_or(usize::MAX)), c.text.len());
                self.cache.remove(&key);
            }
            let done = traj.replace(loc, &text);
            debug_assert!(done.is_ok(), "plan's edits are the trajectory's observations");
        }
        stats
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
    let calls = v.get("tool_calls").map_or(0, |c| c.to_string().len());
    content + calls
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
