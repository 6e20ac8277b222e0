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

use super::{Trajectory, Turn};
use crate::tokens::TokenCounter;
use std::collections::HashMap;

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
    /// Placeholder template.
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

/// What masking did, and what the context costs.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct MaskStats {
    /// Turns (assistant messages with tool calls).
    pub turns: usize,
    /// Observations replaced by a placeholder.
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

/// A masker with a token counter and a cache of earlier counts (keyed by message, block
/// and text length: agents append, so earlier entries are counted once).
pub struct Masker<'c> {
    /// Options.
    pub cfg: MaskConfig,
    counter: &'c dyn TokenCounter,
    cache: HashMap<(usize, Option<usize>, usize), usize>,
}

impl<'c> Masker<'c> {
    /// A masker counting with `counter`.
    pub fn new(cfg: MaskConfig, counter: &'c dyn TokenCounter) -> Self {
        Masker {
            cfg,
            counter,
            cache: HashMap::new(),
        }
    }

    fn count(&mut self, key: (usize, Option<usize>), text: &str) -> usize {
        let c = self.counter;
        *self
            .cache
            .entry((key.0, key.1, text.len()))
            .or_insert_with(|| c.count(text))
    }

    /// Which calls are masked when `t` turns have happened: `[turn][call]`.
    fn decide(
        &self,
        turns: &[Turn],
        t: usize,
        obs_tokens: &[Vec<usize>],
        context_tokens: usize,
    ) -> Vec<Vec<bool>> {
        let cfg = &self.cfg;
        let step = cfg.step.max(1);
        let boundary = if t > cfg.window {
            (t - cfg.window) / step * step
        } else {
            0
        };
        let mut out: Vec<Vec<bool>> = turns.iter().map(|tr| vec![false; tr.calls.len()]).collect();
        let mut cleared = 0usize;
        for (i, tr) in turns.iter().enumerate().take(boundary.min(turns.len())) {
            for (k, c) in tr.calls.iter().enumerate() {
                let eligible = c.observation.is_some()
                    && !(cfg.keep_errors && c.is_error)
                    && !(cfg.keep_first && i == 0 && k == 0)
                    && !cfg.tools_keep.iter().any(|t| t == &c.tool)
                    && (cfg.tools_mask.is_empty() || cfg.tools_mask.iter().any(|t| t == &c.tool));
                if eligible {
                    out[i][k] = true;
                    cleared += obs_tokens[i][k];
                }
            }
        }
        let triggered = cfg.trigger_tokens.is_none_or(|n| context_tokens > n);
        if !triggered || cleared < cfg.clear_at_least {
            out.iter_mut().for_each(|v| v.iter_mut().for_each(|m| *m = false));
        }
        out
    }

    fn placeholder(&self, tool: &str, args: &str, tokens: usize, lines: usize) -> String {
        self.cfg
            .placeholder
            .replace("{tool}", tool)
            .replace("{args}", args)
            .replace("{tokens}", &tokens.to_string())
            .replace("{lines}", &lines.to_string())
    }

    /// Masks `traj` in place (as at its latest turn) and returns the accounting.
    pub fn mask(&mut self, traj: &mut Trajectory) -> MaskStats {
        let turns = traj.turns.clone();
        let msgs = traj.messages().to_vec();
        // Tokens of every message as given, and of each observation.
        let msg_tokens: Vec<usize> = msgs
            .iter()
            .enumerate()
            .map(|(m, v)| self.count((m, None), &v.to_string()))
            .collect();
        let obs_tokens: Vec<Vec<usize>> = turns
            .iter()
            .map(|tr| {
                tr.calls
                    .iter()
                    .map(|c| {
                        c.observation.map_or(0, |l| {
                            self.count((l.message, Some(l.block.unwrap_or(usize::MAX))), &c.text)
                        })
                    })
                    .collect()
            })
            .collect();
        // Placeholder tokens of every call, so savings are net of what replaces them.
        let ph_tokens: Vec<Vec<usize>> = turns
            .iter()
            .map(|tr| {
                tr.calls
                    .iter()
                    .map(|c| {
                        self.counter
                            .count(&self.placeholder(&c.tool, &c.args, 0, c.text.lines().count()))
                    })
                    .collect()
            })
            .collect();
        let total: usize = msg_tokens.iter().sum();
        let t = turns.len();
        let mut stats = MaskStats {
            turns: t,
            tokens_before: total,
            ..MaskStats::default()
        };
        // Rolling input: the context before each turn's assistant message, masked as the
        // rule would have masked it then.
        let mut prefix = vec![0usize; msgs.len() + 1];
        for (m, &x) in msg_tokens.iter().enumerate() {
            prefix[m + 1] = prefix[m] + x;
        }
        for (i, tr) in turns.iter().enumerate() {
            let ctx = prefix[tr.message];
            let d = self.decide(&turns[..i], i, &obs_tokens[..i], ctx);
            let mut masked_ctx = ctx as i64;
            for (j, v) in d.iter().enumerate() {
                for (k, &m) in v.iter().enumerate() {
                    if m {
                        masked_ctx += ph_tokens[j][k] as i64 - obs_tokens[j][k] as i64;
                    }
                }
            }
            stats.rolling_input_tokens += masked_ctx.max(0) as usize;
            stats.rolling_input_tokens_unmasked += ctx;
        }
        let d = self.decide(&turns, t, &obs_tokens, total);
        // Signed: a placeholder longer than a short observation makes the context longer.
        let mut after = total as i64;
        for (i, tr) in turns.iter().enumerate() {
            for (k, c) in tr.calls.iter().enumerate() {
                let Some(loc) = c.observation else { continue };
                if d[i][k] {
                    let ph = self.placeholder(&c.tool, &c.args, obs_tokens[i][k], c.text.lines().count());
                    after += self.counter.count(&ph) as i64 - obs_tokens[i][k] as i64;
                    traj.replace(loc, &ph);
                    stats.observations_masked += 1;
                } else {
                    stats.observations_kept += 1;
                }
            }
        }
        stats.tokens_after = after.max(0) as usize;
        stats
    }
}
