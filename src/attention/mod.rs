//! Where an agent's attention goes (observation-masking.txt §5.3.1, App. E.3–E.5).
//!
//! From the query and key tensors of a model's full-attention layers over one rendered
//! trajectory, and a segmentation of that prompt into spans of tokens labelled with an
//! interaction turn and a role, [`mass`] measures for every reasoning step `r` (the first
//! token after the `r`-th `<think>`, position `t_r`)
//!
//! `A[t_r, j] = 1/(L H) Σ_l Σ_h softmax_j(Q_l^h[t_r] · K_l^{g(h)}[j] / √d)`, `j ≤ t_r`,
//!
//! and `S^(r)[k, ρ]`, the sum of `A[t_r, ·]` over the tokens of role `ρ` in turn `k`.
//! Query head `h` reads key head `g(h) = h / (H / G)` (grouped-query attention).
//!
//! - [`segment`]: the segmentation from a rendered prompt and a tokenizer (the Qwen chat
//!   template);
//! - [`tensors`]: Q and K from a safetensors file;
//! - [`figures`]: the per-trajectory heat map and the aggregated decay curves.
//!
//! The numeric work runs on the engine's backend ([`Engine::attention_mass`]): the CPU
//! path (`backend::cpu::attention`: one GEMM per layer and key head, softmax sums in f64)
//! or the CUDA kernels (`kernels/attention.cu`: key tiles with an online softmax, no
//! `N × N` matrix). Both give, per step, the mass of every span and of the unassigned
//! tokens; the capability here turns those into `S^(r)`.
//!
//! ```
//! use ctxprune::attention::{mass, synthetic};
//! use ctxprune::Engine;
//! // 3 turns of 40 tokens, 2 layers, 4 query heads over 2 key heads of dimension 8.
//! let (qk, seg) = synthetic(120, 2, 4, 2, 8, 3, 7)?;
//! let m = mass(&Engine::cpu(), &qk, &seg)?;
//! let step = &m.steps[2];
//! let total: f64 = step.s.iter().flatten().sum::<f64>() + step.unassigned;
//! assert!((total - 1.0).abs() < 1e-9);   // every step's softmax mass is accounted for
//! # Ok::<(), ctxprune::Error>(())
//! ```

pub mod figures;
pub mod segment;
pub mod tensors;

use crate::backend::Engine;
pub use crate::qk::{Qk, QkLayer};

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

/// The five roles of App. E.3.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The system prompt.
    System,
    /// A user message (not a tool response).
    User,
    /// The model's own text: `<think>…</think>` blocks (and any assistant text outside a
    /// tool call).
    Reasoning,
    /// A tool call (`<tool_call>…</tool_call>`).
    ToolCall,
    /// A tool's answer (`<tool_response>…</tool_response>`).
    Observation,
}

impl Role {
    /// Every role, in the order of [`Role::index`].
    pub const ALL: [Role; 5] = [
        Role::System,
        Role::User,
        Role::Reasoning,
        Role::ToolCall,
        Role::Observation,
    ];

    /// Column of this role in a mass matrix.
    #[must_use]
    pub fn index(self) -> usize {
        self as usize
    }

    /// `"system"`, `"user"`, `"reasoning"`, `"tool_call"` or `"observation"`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Reasoning => "reasoning",
            Role::ToolCall => "tool_call",
            Role::Observation => "observation",
        }
    }
}

/// Tokens `start..end` of the rendered prompt, in interaction turn `turn` (0-based), of
/// one role.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Span {
    /// First token.
    pub start: usize,
    /// One past the last token.
    pub end: usize,
    /// Interaction turn (0-based; turn 0 also holds the leading system and user spans).
    pub turn: usize,
    /// Role.
    pub role: Role,
}

/// A rendered prompt cut into labelled spans, with its reasoning steps.
///
/// JSON: `{"n_tokens": N, "turns": T, "steps": [t_0, t_1, ...], "spans": [{"start": 0,
/// "end": 12, "turn": 0, "role": "system"}, ...]}`. Spans are sorted, do not overlap and
/// lie in `0..N`; tokens in no span (template markers between blocks) are *unassigned*,
/// and their attention is reported as such. Step `r` is the query position `t_r` (the
/// first token after the `r`-th `<think>`), strictly increasing, inside a reasoning span;
/// its turn is that span's.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segmentation {
    /// Tokens in the prompt.
    pub n_tokens: usize,
    /// Interaction turns.
    pub turns: usize,
    /// The query position of every reasoning step.
    pub steps: Vec<usize>,
    /// The spans.
    pub spans: Vec<Span>,
}

impl Segmentation {
    /// A checked segmentation; errors name the span or step.
    pub fn new(n_tokens: usize, turns: usize, steps: Vec<usize>, spans: Vec<Span>) -> Result<Self> {
        let s = Segmentation {
            n_tokens,
            turns,
            steps,
            spans,
        };
        s.check()?;
        Ok(s)
    }

    /// Checks the invariants of the type (for one read from JSON).
    pub fn check(&self) -> Result<()> {
        // turns = the last span's turn + 1, and no more turns than spans: a count from a
        // file sizes per-step matrices, so it is bounded by what the spans say.
        let want_turns = self.spans.iter().map(|s| s.turn + 1).max().unwrap_or(1);
        if self.turns != want_turns {
            return Err(Error::invalid(
                "turns",
                format!(
                    "{} but the spans' turns say {want_turns} (the last span's turn + 1)",
                    self.turns
                ),
            ));
        }
        if self.turns > self.spans.len().max(1) {
            return Err(Error::invalid(
                "turns",
                format!(
                    "{} turns but only {} spans (every turn holds at least one span)",
                    self.turns,
                    self.spans.len()
                ),
            ));
        }
        let mut prev_end = 0;
        for (i, sp) in self.spans.iter().enumerate() {
            let bad = |msg: String| Err(Error::invalid(format!("spans[{i}]"), msg));
            if sp.start >= sp.end {
                return bad(format!("empty or reversed range {}..{}", sp.start, sp.end));
            }
            if sp.end > self.n_tokens {
                return bad(format!("ends at {} past n_tokens = {}", sp.end, self.n_tokens));
            }
            if sp.start < prev_end {
                return bad(format!(
                    "starts at {} inside the span before it (which ends at {prev_end})",
                    sp.start
                ));
            }
            if sp.turn >= self.turns {
                return bad(format!("turn {} but turns = {}", sp.turn, self.turns));
            }
            prev_end = sp.end;
        }
        for (r, &t) in self.steps.iter().enumerate() {
            if r > 0 && t <= self.steps[r - 1] {
                return Err(Error::invalid(
                    format!("steps[{r}]"),
                    format!(
                        "position {t} is not after steps[{}] = {}",
                        r - 1,
                        self.steps[r - 1]
                    ),
                ));
            }
            match self.span_at(t) {
                Some(sp) if sp.role == Role::Reasoning => {}
                _ => {
                    return Err(Error::invalid(
                        format!("steps[{r}]"),
                        format!("position {t} is not inside a reasoning span"),
                    ))
                }
            }
        }
        Ok(())
    }

    /// The span holding token `t`.
    #[must_use]
    pub fn span_at(&self, t: usize) -> Option<&Span> {
        let i = self.spans.partition_point(|s| s.end <= t);
        self.spans.get(i).filter(|s| s.start <= t)
    }

    /// The turn of reasoning step `r`.
    #[must_use]
    pub fn step_turn(&self, r: usize) -> Option<usize> {
        self.steps.get(r).and_then(|&t| self.span_at(t)).map(|s| s.turn)
    }

    /// Reads the JSON form (through the one JSON reader: a repeated key is an error naming
    /// it); errors name the file and the field.
    pub fn from_json(text: &str, path: &std::path::Path) -> Result<Self> {
        let s: Segmentation = crate::io::json::from_str(text).map_err(|e| Error::Format {
            path: path.to_path_buf(),
            msg: e,
        })?;
        s.check().map_err(|e| Error::Format {
            path: path.to_path_buf(),
            msg: e.to_string(),
        })?;
        Ok(s)
    }
}

/// Which piece every key position falls in: span `i` is piece `i`, a token in no span is
/// piece `spans.len()` (unassigned). Pieces are what the backends sum over.
#[must_use]
pub fn pieces(seg: &Segmentation, n_keys: usize) -> Vec<u32> {
    let none = seg.spans.len() as u32;
    let mut p = vec![none; n_keys];
    for (i, sp) in seg.spans.iter().enumerate() {
        for x in p.iter_mut().take(sp.end.min(n_keys)).skip(sp.start) {
            *x = i as u32;
        }
    }
    p
}

/// The attention of one reasoning step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepMass {
    /// The query position `t_r`.
    pub pos: usize,
    /// The turn the step belongs to.
    pub turn: usize,
    /// `S^(r)[k][role]`: rows are turns `0..turns`, columns the roles in [`Role::ALL`]'s
    /// order.
    pub s: Vec<[f64; 5]>,
    /// The mass on tokens in no span (template markers).
    pub unassigned: f64,
    /// The mass of every span, in the segmentation's order.
    pub spans: Vec<f64>,
}

/// [`mass`]'s answer: one entry per reasoning step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Mass {
    /// Interaction turns of the trajectory.
    pub turns: usize,
    /// Hooked layers averaged over.
    pub layers: usize,
    /// Query heads averaged over.
    pub heads: usize,
    /// The backend that computed it (`"cpu"` or `"cuda"`).
    pub backend: String,
    /// Per step.
    pub steps: Vec<StepMass>,
}

impl Mass {
    /// Checks what [`figures`] relies on (for a mass read from JSON): every step's turn is
    /// below `turns`, it has `turns` rows, and every value is a share of the step's
    /// attention, in `[0, 1]` (so no sum over steps can overflow). Errors name the step,
    /// the field and the value.
    pub fn check(&self) -> Result<()> {
        // A share computed in floating point may pass 1 by rounding, never by more.
        const MAX_SHARE: f64 = 1.0 + 1e-6;
        for (r, st) in self.steps.iter().enumerate() {
            let bad = |field: &str, msg: String| Err(Error::invalid(format!("steps[{r}].{field}"), msg));
            if st.turn >= self.turns {
                return bad("turn", format!("{} but turns = {}", st.turn, self.turns));
            }
            if st.s.len() != self.turns {
                return bad("s", format!("{} rows but turns = {}", st.s.len(), self.turns));
            }
            let ok = |v: f64| v.is_finite() && (0.0..=MAX_SHARE).contains(&v);
            let share = "a share of one step's attention is a number in [0, 1]";
            for (k, row) in st.s.iter().enumerate() {
                if let Some(v) = row.iter().find(|&&v| !ok(v)) {
                    return bad("s", format!("row {k} holds {v:e}; {share}"));
                }
            }
            if !ok(st.unassigned) {
                return bad("unassigned", format!("is {:e}; {share}", st.unassigned));
            }
            if let Some((i, v)) = st.spans.iter().enumerate().find(|(_, &v)| !ok(v)) {
                return bad("spans", format!("element {i} is {v:e}; {share}"));
            }
        }
        Ok(())
    }
}

/// The attention mass of every reasoning step by turn and role (App. E.3), on `engine`.
/// `seg` must describe the same prompt: its steps are `qk`'s and its spans lie in the
/// prompt's `n_tokens`, which must cover the keys.
pub fn mass(engine: &Engine, qk: &Qk, seg: &Segmentation) -> Result<Mass> {
    seg.check()?;
    if seg.steps != qk.steps() {
        return Err(Error::invalid(
            "steps",
            format!(
                "the segmentation's {} reasoning steps {:?} are not the tensors' {:?}",
                seg.steps.len(),
                Short(&seg.steps),
                Short(qk.steps())
            ),
        ));
    }
    let n_keys = qk.n_keys();
    if n_keys > seg.n_tokens {
        return Err(Error::invalid(
            "steps",
            format!(
                "the last step is at token {} but the prompt has {} tokens",
                n_keys - 1,
                seg.n_tokens
            ),
        ));
    }
    let np = seg.spans.len() + 1;
    // Per step: the span sums and the turn x role matrix, bounded before they are made.
    let r = qk.steps().len();
    crate::limits::bytes("steps", &[("steps", r), ("spans + 1", np)], 8)?;
    crate::limits::bytes("turns", &[("steps", r), ("turns", seg.turns), ("roles", 5)], 8)?;
    let piece = pieces(seg, n_keys);
    let sums = engine.attention_mass(qk, &piece, np)?;
    let steps = (0..qk.steps().len())
        .map(|r| {
            let row = &sums[r * np..(r + 1) * np];
            let mut s = vec![[0.0f64; 5]; seg.turns];
            for (sp, &m) in seg.spans.iter().zip(row) {
                s[sp.turn][sp.role.index()] += m;
            }
            StepMass {
                pos: qk.steps()[r],
                turn: seg.step_turn(r).unwrap_or(0),
                s,
                unassigned: row[np - 1],
                spans: row[..np - 1].to_vec(),
            }
        })
        .collect();
    Ok(Mass {
        turns: seg.turns,
        layers: qk.layers().len(),
        heads: qk.heads(),
        backend: engine.name().to_string(),
        steps,
    })
}

/// At most 8 positions of a list, for error messages.
struct Short<'a>(&'a [usize]);
impl std::fmt::Debug for Short<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.len() <= 8 {
            write!(f, "{:?}", self.0)
        } else {
            write!(f, "{:?}…", &self.0[..8])
        }
    }
}

/// A seeded synthetic trajectory: `turns` turns over `n` tokens, each a reasoning span
/// (its step at its first token after a one-token `<think>`), a tool call and an
/// observation taking about 15%, 5% and 75% of the turn (turn 0 starts with a system and
/// a user span), and Gaussian Q and K with `layers` layers, `heads` query heads over
/// `kv_heads` key heads of dimension `head_dim`. For tests, benchmarks and `gpu-check`.
pub fn synthetic(
    n: usize,
    layers: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    turns: usize,
    seed: u64,
) -> Result<(Qk, Segmentation)> {
    use crate::limits::{size, MAX_LAYERS, MAX_TOKENS, MAX_WIDTH};
    size("n", n, MAX_TOKENS)?;
    size("layers", layers, MAX_LAYERS)?;
    size("heads", heads, MAX_WIDTH)?;
    size("kv_heads", kv_heads, MAX_WIDTH)?;
    size("head_dim", head_dim, MAX_WIDTH)?;
    // The queries and keys of every layer are at most this many f32s.
    crate::limits::bytes(
        "synthetic",
        &[
            ("layers", layers),
            ("n", n),
            ("heads + kv_heads", heads + kv_heads),
            ("head_dim", head_dim),
        ],
        4,
    )?;
    if turns == 0 || n / 16 < turns {
        return Err(Error::invalid(
            "synthetic",
            format!("{n} tokens cannot hold {turns} turns of at least 16 tokens"),
        ));
    }
    let mut spans = Vec::new();
    let mut steps = Vec::new();
    let per = n / turns;
    for k in 0..turns {
        let a = k * per;
        let b = if k + 1 == turns { n } else { a + per };
        let len = b - a;
        let mut at = a;
        let mut push = |len: usize, role: Role, at: &mut usize| {
            spans.push(Span {
                start: *at,
                end: *at + len,
                turn: k,
                role,
            });
            *at += len;
        };
        if k == 0 {
            push(len / 20 + 1, Role::System, &mut at);
            push(len / 20 + 1, Role::User, &mut at);
        }
        at += 1; // a marker token
        let think = (len * 15 / 100).max(3);
        steps.push(at + 1);
        push(think, Role::Reasoning, &mut at);
        push((len * 5 / 100).max(1), Role::ToolCall, &mut at);
        at += 1;
        let obs = b - at - 1;
        push(obs.max(1), Role::Observation, &mut at);
    }
    let seg = Segmentation::new(n, turns, steps.clone(), spans)?;
    Ok((Qk::gaussian(layers, heads, kv_heads, head_dim, steps, seed)?, seg))
}
