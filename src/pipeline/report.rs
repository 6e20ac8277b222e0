//! The accounting of a run (App. A.3, A.10) as JSON and as a text table: what
//! `ctxprune pipeline` prints.

use super::{Report, StageReport};
use std::fmt::Write as _;

/// The three stages in pipeline order, with the names the JSON and the table use.
fn stages(r: &Report) -> [(&'static str, &StageReport); 3] {
    [
        ("pre_retrieval", &r.pre_retrieval),
        ("post_retrieval", &r.post_retrieval),
        ("pre_synthesis", &r.pre_synthesis),
    ]
}

impl StageReport {
    /// Candidates removed (`candidates - kept`).
    #[must_use]
    pub fn pruned(&self) -> usize {
        self.candidates.saturating_sub(self.kept)
    }

    /// The stage as JSON: `candidates`, `kept`, `pruned`, `pruning_ratio` (a fraction in
    /// [0, 1]), `tokens_in`, `tokens_kept`, `token_reduction` (a fraction in [0, 1]).
    #[must_use]
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "candidates": self.candidates,
            "kept": self.kept,
            "pruned": self.pruned(),
            "pruning_ratio": self.pruning_ratio(),
            "tokens_in": self.tokens_in,
            "tokens_kept": self.tokens_kept,
            "token_reduction": self.token_reduction(),
        })
    }
}

impl Report {
    /// Tokens of the context handed to synthesis.
    #[must_use]
    pub fn context_tokens(&self) -> f64 {
        self.context.iter().map(|i| i.tokens).sum()
    }

    /// The accounting as one JSON object with stable field names:
    /// `nodes_explored`, `nodes_pruned`, `truncated`; `stages` with `pre_retrieval`,
    /// `post_retrieval` and `pre_synthesis`, each as [`StageReport::to_json`]; and
    /// `context` with `items`, `tokens` and `ids` (the items' ids in context order).
    #[must_use]
    pub fn to_json(&self) -> serde_json::Value {
        let mut st = serde_json::Map::new();
        for (name, s) in stages(self) {
            st.insert(name.into(), s.to_json());
        }
        serde_json::json!({
            "nodes_explored": self.nodes_explored,
            "nodes_pruned": self.nodes_pruned,
            "truncated": self.truncated,
            "stages": st,
            "context": {
                "items": self.context.len(),
                "tokens": self.context_tokens(),
                "ids": self.context.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(),
            },
        })
    }

    /// The accounting as a text table: one row per stage (candidates, kept, pruning ratio
    /// %, tokens in, tokens kept, token reduction %), then the nodes explored and pruned,
    /// whether `max_nodes` cut exploration short, and the final context.
    #[must_use]
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{:<15} {:>10} {:>6} {:>8} {:>10} {:>11} {:>12}",
            "stage", "candidates", "kept", "pruned %", "tokens in", "tokens kept", "token red. %"
        );
        for (name, s) in stages(self) {
            let _ = writeln!(
                out,
                "{:<15} {:>10} {:>6} {:>8.1} {:>10} {:>11} {:>12.1}",
                name,
                s.candidates,
                s.kept,
                100.0 * s.pruning_ratio(),
                tokens(s.tokens_in),
                tokens(s.tokens_kept),
                100.0 * s.token_reduction()
            );
        }
        let _ = writeln!(
            out,
            "nodes explored {}, pruned before retrieval {}, truncated by max_nodes: {}",
            self.nodes_explored,
            self.nodes_pruned,
            if self.truncated { "yes" } else { "no" }
        );
        let _ = writeln!(
            out,
            "final context: {} items, {} tokens",
            self.context.len(),
            tokens(self.context_tokens())
        );
        out
    }
}

/// A token count as people write it: whole numbers without decimals.
fn tokens(t: f64) -> String {
    if t.fract() == 0.0 && t.abs() < 1e15 {
        format!("{t:.0}")
    } else {
        format!("{t:.2}")
    }
}
