//! `ctxprune mask`: mask stale tool observations in a trajectory read from stdin.

use ctxprune::{Error, Result};
use std::path::PathBuf;

// Numeric flags take negative numbers as values, so `--window -1` is refused by the
// value parser, naming the flag, not taken for an unknown flag.
#[derive(clap::Args)]
pub struct MaskArgs {
    /// auto (from the document), openai or anthropic.
    #[arg(long)]
    pub format: String,
    /// A named policy: paper (the default), swe-agent (SWE-agent's LastNObservations:
    /// --window observations, --step as its polling, the first kept) or anthropic
    /// (clear_tool_uses_20250919's defaults). Flags given override it.
    #[arg(long)]
    pub preset: Option<String>,
    /// Anthropic's clear_tool_uses_20250919 edit, as its API takes it: JSON text (starting
    /// with '{') or a file holding it. Cannot be combined with the flags it sets.
    #[arg(long, allow_hyphen_values = true)]
    pub edit: Option<String>,
    /// Units (turns, or tool uses with --unit tool_uses) whose observations are kept.
    /// By default 5.
    #[arg(long, allow_negative_numbers = true)]
    pub window: Option<usize>,
    /// What --window and --step count: turns (default) or tool_uses.
    #[arg(long)]
    pub unit: Option<String>,
    /// Where --step's steps are counted from: window (default) or start (SWE-agent).
    #[arg(long)]
    pub anchor: Option<String>,
    /// Cache-aware: the boundary moves only when the masked context exceeds
    /// --trigger-tokens and the move clears at least --clear-at-least more tokens.
    #[arg(long)]
    pub hold: bool,
    /// Also clear the arguments of masked calls (to {}).
    #[arg(long)]
    pub clear_tool_inputs: bool,
    /// Keep error observations (true or false).
    #[arg(long)]
    pub keep_errors: Option<String>,
    /// Keep the first observation.
    #[arg(long)]
    pub keep_first: bool,
    /// Tools never masked, comma-separated.
    #[arg(long)]
    pub tools_keep: Option<String>,
    /// When given, the only tools masked, comma-separated.
    #[arg(long)]
    pub tools_mask: Option<String>,
    /// Mask only when the context exceeds this many tokens.
    #[arg(long, allow_negative_numbers = true)]
    pub trigger_tokens: Option<usize>,
    /// Mask only when at least this many tokens would be cleared. By default 0.
    #[arg(long, allow_negative_numbers = true)]
    pub clear_at_least: Option<usize>,
    /// Move the masking boundary in steps of this many units. By default 1.
    #[arg(long, allow_negative_numbers = true)]
    pub step: Option<usize>,
    /// Placeholder template ({tool}, {args}, {tokens}, {lines}; other braces are literal).
    #[arg(long, allow_hyphen_values = true)]
    pub placeholder: Option<String>,
    /// o200k_base, cl100k_base or approx.
    #[arg(long, default_value = "o200k_base", value_hint = clap::ValueHint::FilePath)]
    pub tokenizer: String,
    /// Write the accounting as JSON to this file.
    #[arg(long)]
    pub stats: Option<PathBuf>,
    /// Semantic masking: a sentence-transformers directory that embeds every observation;
    /// a stale observation that still adds marginal value against the kept ones (gate of
    /// --semantic-method at --semantic-tau) is kept back.
    #[cfg(feature = "embed")]
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// The gate of semantic masking: grn (default), mmr, centroid, dpp or coverage.
    #[cfg(feature = "embed")]
    #[arg(long)]
    pub semantic_method: Option<String>,
    /// Its threshold tau. By default the method's paper threshold.
    #[cfg(feature = "embed")]
    #[arg(long, allow_hyphen_values = true)]
    pub semantic_tau: Option<f64>,
    /// The task, embedded as the query of methods that read one (mmr, dpp, coverage).
    #[cfg(feature = "embed")]
    #[arg(long)]
    pub query_text: Option<String>,
}

/// The library names an option (`step`, `placeholder`, `edit.keep.value`); the CLI names
/// its flag (`--step`, `--edit: keep.value`).
fn flag(e: Error) -> Error {
    const FLAGS: [&str; 13] = [
        "step",
        "placeholder",
        "format",
        "window",
        "preset",
        "unit",
        "anchor",
        "trigger_tokens",
        "clear_at_least",
        "tools_keep",
        "clear_tool_inputs",
        "keep_errors",
        "edit",
    ];
    match e {
        Error::InvalidArgument { name, msg } if FLAGS.contains(&name.as_str()) => {
            Error::invalid(format!("--{}", name.replace('_', "-")), msg)
        }
        Error::InvalidArgument { name, msg } if name.starts_with("edit.") => {
            Error::invalid(format!("--edit: {}", &name[5..]), msg)
        }
        e => e,
    }
}

/// `--edit`: JSON text, or the path of a file holding it (read by the one JSON reader, so
/// a repeated key is an error naming it).
fn read_edit(v: &str) -> Result<serde_json::Value> {
    let (text, what) = if v.trim_start().starts_with('{') {
        (v.to_string(), "--edit".to_string())
    } else {
        let t = std::fs::read_to_string(v)
            .map_err(|e| Error::invalid("--edit", format!("cannot read {v}: {e}")))?;
        (t, format!("--edit {v}"))
    };
    ctxprune::io::json::value_str(&text).map_err(|m| Error::invalid(what, m))
}

/// Runs `ctxprune mask`.
pub fn run(a: MaskArgs) -> Result<()> {
    use ctxprune::mask::masker::Masker;
    use ctxprune::mask::{Format, Trajectory};
    let format: Option<Format> = match a.format.as_str() {
        "auto" => None,
        f => Some(f.parse().map_err(|_| {
            Error::invalid(
                "--format",
                format!("unknown format '{f}' (auto, openai, anthropic)"),
            )
        })?),
    };
    let keep_errors = match a.keep_errors.as_deref() {
        None => None,
        Some("true") => Some(true),
        Some("false") => Some(false),
        Some(v) => {
            return Err(Error::invalid(
                "--keep-errors",
                format!("'{v}' is not true or false"),
            ))
        }
    };
    let list = |s: &Option<String>| -> Option<Vec<String>> {
        s.as_deref().map(|s| {
            s.split(',')
                .map(|t| t.trim().to_string())
                .filter(|t| !t.is_empty())
                .collect()
        })
    };
    let edit = a.edit.as_deref().map(read_edit).transpose()?;
    let cfg = ctxprune::mask::policy::MaskOptions {
        preset: a.preset.clone(),
        edit,
        window: a.window,
        keep_errors,
        keep_first: a.keep_first.then_some(true),
        tools_keep: list(&a.tools_keep),
        tools_mask: list(&a.tools_mask),
        trigger_tokens: a.trigger_tokens,
        clear_at_least: a.clear_at_least,
        step: a.step,
        unit: a.unit.clone(),
        anchor: a.anchor.clone(),
        hold: a.hold.then_some(true),
        clear_tool_inputs: a.clear_tool_inputs.then_some(true),
        placeholder: a.placeholder.clone(),
    }
    .config()
    .map_err(flag)?;
    #[cfg(feature = "embed")]
    let semantic = semantic_options(&a)?;
    let counter = ctxprune::tokens::counter(&a.tokenizer)?;
    let masker = Masker::new(cfg, counter).map_err(flag)?;
    let input = read_stdin()?;
    // A UTF-8 byte order mark is not JSON: parse after it, and give it back on output.
    let (bom, body) = match input.strip_prefix('\u{feff}') {
        Some(rest) => ("\u{feff}", rest),
        None => ("", input.as_str()),
    };
    let mut traj = Trajectory::parse(body, format).map_err(flag)?;
    #[cfg(feature = "embed")]
    let (stats, kept_back) = match semantic {
        Some((enc, method, tau)) => {
            let texts = traj.observation_texts();
            if texts.is_empty() {
                (masker.mask(&mut traj), Some(0))
            } else {
                let e = super::embed::encode(&enc, &texts, 32, false)?;
                let q = match &a.query_text {
                    Some(t) => Some(enc.encode(&[t.as_str()], &Default::default())?.row(0).to_vec()),
                    None => None,
                };
                let (s, n) = masker.mask_semantic(&mut traj, &e, method, tau, q.as_deref())?;
                (s, Some(n))
            }
        }
        None => (masker.mask(&mut traj), None),
    };
    #[cfg(not(feature = "embed"))]
    let (stats, kept_back): (_, Option<usize>) = (masker.mask(&mut traj), None);
    // Everything is computed before anything is written: bad input never half-writes.
    let out = traj.to_json();
    if let Some(p) = &a.stats {
        let mut v = serde_json::to_value(&stats).map_err(|e| Error::invalid("stats", e.to_string()))?;
        if let Some(n) = kept_back {
            v["semantic_kept_back"] = serde_json::json!(n);
        }
        let s = v.to_string();
        std::fs::write(p, s).map_err(|e| Error::io(p, e))?;
    }
    // The input's bytes, its final newline (or none) included.
    let mut stdout = std::io::stdout().lock();
    std::io::Write::write_all(&mut stdout, bom.as_bytes())
        .and_then(|()| std::io::Write::write_all(&mut stdout, out.as_bytes()))
        .and_then(|()| std::io::Write::flush(&mut stdout))
        .map_err(|e| Error::io("<stdout>", e))
}

/// The encoder, gate method and tau of semantic masking, when `--model` is given; the
/// semantic flags without it are errors.
#[cfg(feature = "embed")]
fn semantic_options(
    a: &MaskArgs,
) -> Result<Option<(ctxprune::embed::SentenceEncoder, ctxprune::select::Method, f64)>> {
    let Some(dir) = &a.model else {
        for (given, f) in [
            (a.semantic_method.is_some(), "--semantic-method"),
            (a.semantic_tau.is_some(), "--semantic-tau"),
            (a.query_text.is_some(), "--query-text"),
        ] {
            if given {
                return Err(Error::invalid(f, "applies to semantic masking (--model DIR)"));
            }
        }
        return Ok(None);
    };
    let (method, tau) = super::cost::flags(
        ctxprune::mask::policy::semantic_gate(
            a.semantic_method.as_deref(),
            a.semantic_tau,
            a.query_text.is_some(),
        ),
        &["semantic_method", "semantic_tau", "query_text"],
    )?;
    Ok(Some((super::embed::load(dir)?, method, tau)))
}

/// The most stdin may hold: a trajectory of 1 GiB is far beyond any context window.
const STDIN_MAX: usize = 1 << 30;

/// Reads stdin as UTF-8 text, refusing early what cannot be a trajectory: invalid UTF-8
/// (at its first bad byte, so `< /dev/urandom` fails at once), a first character that
/// cannot begin a JSON document (`< /dev/zero`), or more than [`STDIN_MAX`] bytes.
fn read_stdin() -> Result<String> {
    use std::io::Read;
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 1 << 16];
    let mut stdin = std::io::stdin().lock();
    let mut checked = 0usize; // bytes known to be valid UTF-8
    loop {
        let got = match stdin.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::io("<stdin>", e)),
        };
        if buf.len() + got > STDIN_MAX {
            return Err(Error::format(
                "<stdin>",
                format!("more than {STDIN_MAX} bytes; a trajectory is far smaller"),
            ));
        }
        buf.extend_from_slice(&chunk[..got]);
        match std::str::from_utf8(&buf[checked..]) {
            Ok(_) => checked = buf.len(),
            // An incomplete sequence at the end may complete with the next read.
            Err(e) if e.error_len().is_none() => checked += e.valid_up_to(),
            Err(e) => {
                return Err(Error::format(
                    "<stdin>",
                    format!("not UTF-8 (byte {})", checked + e.valid_up_to()),
                ))
            }
        }
        let text = std::str::from_utf8(&buf[..checked]).unwrap_or("");
        let first = text
            .trim_start_matches(['\u{feff}', ' ', '\t', '\r', '\n'])
            .chars()
            .next();
        if let Some(c) = first.filter(|c| !matches!(c, '[' | '{' | '"' | '-' | '0'..='9' | 't' | 'f' | 'n')) {
            return Err(Error::format(
                "<stdin>",
                format!("starts with {c:?}, which cannot begin a JSON document"),
            ));
        }
    }
    String::from_utf8(buf).map_err(|e| {
        Error::format(
            "<stdin>",
            format!("not UTF-8 (byte {})", e.utf8_error().valid_up_to()),
        )
    })
}
