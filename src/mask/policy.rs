//! Masking policies as users already state them: the options one by one, a named preset
//! (the paper's window, SWE-agent's polling, Anthropic's default edit), or Anthropic's
//! `clear_tool_uses_20250919` context edit, accepted as is. Every surface (library, CLI,
//! Python, HTTP) builds its [`MaskConfig`] here, so they agree on defaults and errors.

use super::masker::{Anchor, MaskConfig, Unit};
use crate::error::{Error, Result};
use serde_json::Value;

/// The type of the one Anthropic edit accepted.
pub const ANTHROPIC_EDIT: &str = "clear_tool_uses_20250919";

/// The named presets.
pub const PRESETS: [&str; 3] = ["paper", "swe-agent", "anthropic"];

/// Masking options as given: `None` is "not given" (the preset's or edit's value, else
/// [`MaskConfig::default`]'s).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MaskOptions {
    /// A named preset ([`PRESETS`]): the policy's shape; options given override it.
    pub preset: Option<String>,
    /// Anthropic's `clear_tool_uses_20250919` edit (see [`MaskConfig::from_edit`]).
    pub edit: Option<Value>,
    /// [`MaskConfig::window`].
    pub window: Option<usize>,
    /// [`MaskConfig::keep_errors`].
    pub keep_errors: Option<bool>,
    /// [`MaskConfig::keep_first`].
    pub keep_first: Option<bool>,
    /// [`MaskConfig::tools_keep`].
    pub tools_keep: Option<Vec<String>>,
    /// [`MaskConfig::tools_mask`].
    pub tools_mask: Option<Vec<String>>,
    /// [`MaskConfig::trigger_tokens`].
    pub trigger_tokens: Option<usize>,
    /// [`MaskConfig::clear_at_least`].
    pub clear_at_least: Option<usize>,
    /// [`MaskConfig::step`].
    pub step: Option<usize>,
    /// [`MaskConfig::unit`]: "turns" or "tool_uses".
    pub unit: Option<String>,
    /// [`MaskConfig::anchor`]: "window" or "start".
    pub anchor: Option<String>,
    /// [`MaskConfig::hold`].
    pub hold: Option<bool>,
    /// [`MaskConfig::clear_tool_inputs`].
    pub clear_tool_inputs: Option<bool>,
    /// [`MaskConfig::placeholder`].
    pub placeholder: Option<String>,
}

/// The gate of semantic masking ([`crate::mask::masker::Masker::mask_semantic`]) as
/// every surface takes it: `semantic_method` (default grn; one that gates on embeddings
/// alone: grn, mmr, centroid, dpp, coverage), `semantic_tau` (default the method's paper
/// threshold), and whether the task is given as a query (`query_text`: read by mmr, dpp
/// and coverage, needed by mmr and dpp). Errors name those options.
pub fn semantic_gate(
    method: Option<&str>,
    tau: Option<f64>,
    has_query: bool,
) -> Result<(crate::select::Method, f64)> {
    use crate::select::Method;
    let name = method.unwrap_or("grn");
    let m: Method = name
        .parse()
        .map_err(|_| Error::invalid("semantic_method", format!("unknown method '{name}'")))?;
    if matches!(m, Method::Lexical | Method::Hybrid) {
        return Err(Error::invalid(
            "semantic_method",
            format!("{name} does not gate on embeddings alone (grn, mmr, centroid, dpp, coverage)"),
        ));
    }
    if has_query && !m.reads_query() {
        return Err(Error::invalid(
            "query_text",
            format!("does not apply to {name} (it does not read a query)"),
        ));
    }
    if m.needs_query() && !has_query {
        return Err(Error::invalid(
            "query_text",
            format!("{name} needs the task as the query"),
        ));
    }
    let Some(tau) = tau.or(m.preset().tau) else {
        return Err(Error::invalid(
            "semantic_tau",
            format!("the paper gives no threshold for {name}: give one"),
        ));
    };
    if !tau.is_finite() {
        return Err(Error::invalid(
            "semantic_tau",
            format!("must be finite, got {tau}"),
        ));
    }
    Ok((m, tau))
}

impl MaskOptions {
    /// The configuration: the preset or the edit first, then each option given. An option
    /// the edit also sets is an error naming both (say it once), as are a preset and an
    /// edit together and an unknown preset, unit or anchor.
    pub fn config(self) -> Result<MaskConfig> {
        let mut cfg = match (&self.preset, &self.edit) {
            (Some(_), Some(_)) => return Err(Error::invalid("preset", "give a preset or an edit, not both")),
            (Some(p), None) => MaskConfig::preset(p)?,
            (None, Some(e)) => {
                let by_edit = [
                    ("window", self.window.is_some(), "keep"),
                    ("unit", self.unit.is_some(), "keep"),
                    ("trigger_tokens", self.trigger_tokens.is_some(), "trigger"),
                    ("clear_at_least", self.clear_at_least.is_some(), "clear_at_least"),
                    ("tools_keep", self.tools_keep.is_some(), "exclude_tools"),
                    (
                        "clear_tool_inputs",
                        self.clear_tool_inputs.is_some(),
                        "clear_tool_inputs",
                    ),
                ];
                if let Some((name, _, field)) = by_edit.iter().find(|o| o.1) {
                    return Err(Error::invalid(
                        *name,
                        format!("the edit decides it (edit.{field}, Anthropic's default when absent): give it once"),
                    ));
                }
                MaskConfig::from_edit(e)?
            }
            (None, None) => MaskConfig::default(),
        };
        macro_rules! set {
            ($($f:ident),*) => { $( if let Some(v) = self.$f { cfg.$f = v; } )* };
        }
        set!(
            window,
            keep_errors,
            keep_first,
            tools_keep,
            tools_mask,
            step,
            hold,
            clear_tool_inputs,
            placeholder
        );
        if let Some(n) = self.clear_at_least {
            cfg.clear_at_least = n;
        }
        if self.trigger_tokens.is_some() {
            cfg.trigger_tokens = self.trigger_tokens;
        }
        if let Some(u) = &self.unit {
            cfg.unit = match u.as_str() {
                "turns" => Unit::Turns,
                "tool_uses" => Unit::ToolUses,
                _ => {
                    return Err(Error::invalid(
                        "unit",
                        format!("unknown unit '{u}' (turns, tool_uses)"),
                    ))
                }
            };
        }
        if let Some(a) = &self.anchor {
            cfg.anchor = match a.as_str() {
                "window" => Anchor::Window,
                "start" => Anchor::Start,
                _ => {
                    return Err(Error::invalid(
                        "anchor",
                        format!("unknown anchor '{a}' (window, start)"),
                    ))
                }
            };
        }
        Ok(cfg)
    }
}

impl MaskConfig {
    /// A named preset:
    /// - `paper`: observation-masking.txt's rule, the default (the last 5 turns kept,
    ///   errors kept, the boundary moving every turn);
    /// - `swe-agent`: SWE-agent's `LastNObservations(n, polling)`: `window` counts
    ///   observations (tool uses), errors are masked like any other, and with
    ///   `step = polling` the boundary moves every `polling` observations counted as
    ///   SWE-agent counts them, the task (its instance template, which it never masks)
    ///   first: with u tool results, those before `⌊(u + 1)/P⌋·P − n − 1` are masked;
    /// - `anthropic`: Anthropic's `clear_tool_uses_20250919` with its defaults (trigger at
    ///   100,000 input tokens, keep 3 tool uses).
    pub fn preset(name: &str) -> Result<MaskConfig> {
        let d = MaskConfig::default();
        match name {
            "paper" => Ok(d),
            "swe-agent" => Ok(MaskConfig {
                unit: Unit::ToolUses,
                anchor: Anchor::Start,
                keep_errors: false,
                ..d
            }),
            "anthropic" => MaskConfig::from_edit(&serde_json::json!({"type": ANTHROPIC_EDIT})),
            _ => Err(Error::invalid(
                "preset",
                format!("unknown preset '{name}' ({})", PRESETS.join(", ")),
            )),
        }
    }

    /// Anthropic's context edit, as its API takes it: `{"type": "clear_tool_uses_20250919",
    /// "trigger": {"type": "input_tokens", "value": N}, "keep": {"type": "tool_uses",
    /// "value": K}, "clear_at_least": {"type": "input_tokens", "value": M},
    /// "exclude_tools": [...], "clear_tool_inputs": bool}`, with Anthropic's defaults for
    /// what is absent (trigger 100,000 input tokens, keep 3 tool uses, clear_at_least 0).
    /// Each request is masked from scratch, as the API does. Other options keep their
    /// defaults (errors kept, the crate's placeholder). An unknown field, a wrong type or
    /// a negative or fractional count is an error naming the field (`edit.keep.value`).
    pub fn from_edit(edit: &Value) -> Result<MaskConfig> {
        let obj = edit
            .as_object()
            .ok_or_else(|| Error::invalid("edit", "must be an object"))?;
        let mut cfg = MaskConfig {
            unit: Unit::ToolUses,
            window: 3,
            trigger_tokens: Some(100_000),
            ..MaskConfig::default()
        };
        match obj.get("type").and_then(Value::as_str) {
            Some(ANTHROPIC_EDIT) => {}
            Some(t) => {
                return Err(Error::invalid(
                    "edit.type",
                    format!("'{t}' is not supported (only {ANTHROPIC_EDIT})"),
                ))
            }
            None => {
                return Err(Error::invalid(
                    "edit.type",
                    format!("required: \"{ANTHROPIC_EDIT}\""),
                ))
            }
        }
        for (k, v) in obj {
            match k.as_str() {
                "type" => {}
                "trigger" => cfg.trigger_tokens = Some(amount(v, "edit.trigger", "input_tokens")?),
                "keep" => cfg.window = amount(v, "edit.keep", "tool_uses")?,
                "clear_at_least" => cfg.clear_at_least = amount(v, "edit.clear_at_least", "input_tokens")?,
                "exclude_tools" => {
                    let list = v.as_array().ok_or_else(|| {
                        Error::invalid("edit.exclude_tools", "must be a list of tool names")
                    })?;
                    cfg.tools_keep = list
                        .iter()
                        .enumerate()
                        .map(|(i, t)| {
                            t.as_str().map(str::to_string).ok_or_else(|| {
                                Error::invalid(
                                    format!("edit.exclude_tools[{i}]"),
                                    "must be a tool name (a string)",
                                )
                            })
                        })
                        .collect::<Result<_>>()?;
                }
                "clear_tool_inputs" => {
                    cfg.clear_tool_inputs = v.as_bool().ok_or_else(|| {
                        Error::invalid(
                            "edit.clear_tool_inputs",
                            "must be true or false (a list of tools is not supported)",
                        )
                    })?
                }
                _ => {
                    return Err(Error::invalid(
                        format!("edit.{k}"),
                        "unknown field (trigger, keep, clear_at_least, exclude_tools, clear_tool_inputs)",
                    ))
                }
            }
        }
        Ok(cfg)
    }
}

/// `{"type": ty, "value": n}`: n, a whole non-negative count.
fn amount(v: &Value, at: &str, ty: &str) -> Result<usize> {
    let o = v
        .as_object()
        .ok_or_else(|| Error::invalid(at, format!("must be {{\"type\": \"{ty}\", \"value\": N}}")))?;
    for k in o.keys() {
        if k != "type" && k != "value" {
            return Err(Error::invalid(format!("{at}.{k}"), "unknown field (type, value)"));
        }
    }
    match o.get("type").and_then(Value::as_str) {
        Some(t) if t == ty => {}
        Some(t) => {
            return Err(Error::invalid(
                format!("{at}.type"),
                format!("'{t}' is not supported (only {ty})"),
            ))
        }
        None => {
            return Err(Error::invalid(
                format!("{at}.type"),
                format!("required: \"{ty}\""),
            ))
        }
    }
    let n = o
        .get("value")
        .ok_or_else(|| Error::invalid(format!("{at}.value"), "required"))?;
    n.as_u64().and_then(|n| usize::try_from(n).ok()).ok_or_else(|| {
        Error::invalid(
            format!("{at}.value"),
            format!("{n} is not a whole count of at least 0"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_edit_maps_field_by_field_with_anthropics_defaults() {
        let c = MaskConfig::from_edit(&json!({"type": ANTHROPIC_EDIT})).unwrap();
        assert_eq!(
            (c.unit, c.window, c.trigger_tokens, c.clear_at_least),
            (Unit::ToolUses, 3, Some(100_000), 0)
        );
        let c = MaskConfig::from_edit(&json!({"type": ANTHROPIC_EDIT,
            "trigger": {"type": "input_tokens", "value": 30000}, "keep": {"type": "tool_uses", "value": 4},
            "clear_at_least": {"type": "input_tokens", "value": 5000}, "exclude_tools": ["web_search"],
            "clear_tool_inputs": true}))
        .unwrap();
        assert_eq!(c.trigger_tokens, Some(30_000));
        assert_eq!((c.window, c.clear_at_least, c.clear_tool_inputs), (4, 5000, true));
        assert_eq!(c.tools_keep, vec!["web_search".to_string()]);
        assert!(!c.hold);
    }

    #[test]
    fn a_bad_edit_names_its_field() {
        let bad = [
            (json!([]), "edit"),
            (json!({}), "edit.type"),
            (json!({"type": "clear_thinking_20251015"}), "edit.type"),
            (json!({"type": ANTHROPIC_EDIT, "keep": 3}), "edit.keep"),
            (
                json!({"type": ANTHROPIC_EDIT, "keep": {"type": "input_tokens", "value": 3}}),
                "edit.keep.type",
            ),
            (
                json!({"type": ANTHROPIC_EDIT, "keep": {"type": "tool_uses", "value": -1}}),
                "edit.keep.value",
            ),
            (
                json!({"type": ANTHROPIC_EDIT, "keep": {"type": "tool_uses", "value": 2.5}}),
                "edit.keep.value",
            ),
            (
                json!({"type": ANTHROPIC_EDIT, "keep": {"type": "tool_uses"}}),
                "edit.keep.value",
            ),
            (
                json!({"type": ANTHROPIC_EDIT, "keep": {"type": "tool_uses", "value": 1, "x": 0}}),
                "edit.keep.x",
            ),
            (
                json!({"type": ANTHROPIC_EDIT, "exclude_tools": ["a", 3]}),
                "edit.exclude_tools[1]",
            ),
            (
                json!({"type": ANTHROPIC_EDIT, "clear_tool_inputs": ["a"]}),
                "edit.clear_tool_inputs",
            ),
            (json!({"type": ANTHROPIC_EDIT, "keeps": {}}), "edit.keeps"),
        ];
        for (e, name) in bad {
            match MaskConfig::from_edit(&e) {
                Err(Error::InvalidArgument { name: n, .. }) => assert_eq!(n, name, "{e}"),
                other => panic!("{e}: {other:?}"),
            }
        }
    }

    #[test]
    fn options_given_twice_are_refused_and_presets_are_named() {
        let edit = Some(json!({"type": ANTHROPIC_EDIT}));
        let o = MaskOptions {
            edit: edit.clone(),
            window: Some(2),
            ..MaskOptions::default()
        };
        assert!(matches!(o.config(), Err(Error::InvalidArgument { name, .. }) if name == "window"));
        let o = MaskOptions {
            edit,
            preset: Some("paper".into()),
            ..MaskOptions::default()
        };
        assert!(matches!(o.config(), Err(Error::InvalidArgument { name, .. }) if name == "preset"));
        let o = MaskOptions {
            preset: Some("swe".into()),
            ..MaskOptions::default()
        };
        assert!(matches!(o.config(), Err(Error::InvalidArgument { name, .. }) if name == "preset"));
        let o = MaskOptions {
            preset: Some("swe-agent".into()),
            window: Some(4),
            step: Some(2),
            ..MaskOptions::default()
        };
        let c = o.config().unwrap();
        assert_eq!(
            (c.unit, c.anchor, c.window, c.step, c.keep_first, c.keep_errors),
            (Unit::ToolUses, Anchor::Start, 4, 2, false, false)
        );
        assert_eq!(MaskOptions::default().config().unwrap(), MaskConfig::default());
    }
}
