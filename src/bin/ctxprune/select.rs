//! `ctxprune select`: score and select candidates by marginal value; one JSON object on
//! stdout.

use super::cost::flags;
use super::{open_engine, parse_list};
use ctxprune::select::{check_reads, Method, Request, SelectOptions, Selector};
use ctxprune::{io, Error, Pool, Result};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct SelectArgs {
    /// Scorer: mmr, grn, centroid, dpp, coverage, hybrid or lexical.
    #[arg(long)]
    pub method: String,
    /// Pool embeddings: .npy (2-D), .safetensors[:NAME] or .jsonl ({"embedding", "tokens", "text"}).
    /// Not needed by lexical when --texts is given.
    #[arg(long, value_hint = clap::ValueHint::FilePath)]
    pub embeddings: Option<String>,
    /// Query embedding: .npy of shape (d,) or (1, d), or a JSON array.
    #[arg(long)]
    pub query: Option<PathBuf>,
    /// Pool texts as JSON lines with "text" (and optionally "tokens"), one per row.
    #[arg(long)]
    pub texts: Option<PathBuf>,
    /// The query as text: what lexical reads, or, with --model, the text embedded as the
    /// query.
    #[arg(long)]
    pub query_text: Option<String>,
    /// Token cost per row: 1-D .npy or a JSON array. By default the "tokens" field of the
    /// JSON-lines input when every row has one, else, with --token-budget, the texts
    /// counted by --tokenizer.
    #[arg(long)]
    pub costs: Option<PathBuf>,
    /// Counts the texts' tokens for --token-budget when no costs are given: o200k_base
    /// (default), cl100k_base, approx, or a tokenizer.json.
    #[arg(long, value_hint = clap::ValueHint::FilePath)]
    pub tokenizer: Option<String>,
    /// Item budget.
    #[arg(long, allow_hyphen_values = true)]
    pub k: Option<usize>,
    /// Token budget over the selected items.
    #[arg(long, allow_hyphen_values = true)]
    pub token_budget: Option<f64>,
    /// greedy (budgeted selection) or gate (keep if V >= threshold against --retained).
    #[arg(long, default_value = "greedy")]
    pub mode: String,
    /// Keep threshold tau. Gate defaults, measured on real text (docs/selection.md): mmr
    /// 0.185, grn 0.679, centroid 0.0332, dpp 0.138, coverage 0.0902, lexical -0.0178;
    /// hybrid has none. Greedy: none (k and the token budget stop it).
    #[arg(long, allow_hyphen_values = true)]
    pub threshold: Option<f64>,
    /// Rows already in the context, comma-separated, in the order they were added.
    #[arg(long, allow_hyphen_values = true)]
    pub retained: Option<String>,
    /// MMR / lexical lambda in [0, 1]: the weight of relevance against novelty. Default
    /// 0.75 for MMR (measured on real text; the paper's 0.35 drifts off the query), 0.6
    /// for lexical.
    #[arg(long, allow_hyphen_values = true)]
    pub lambda: Option<f64>,
    /// Hybrid alpha,beta,gamma (signed) or lexical w_tfidf,w_jaccard.
    #[arg(long, allow_hyphen_values = true)]
    pub weights: Option<String>,
    /// paper: the paper's operating point (App. B Table 5) for every option not given
    /// (MMR lambda 0.35 and its thresholds and item caps, also in greedy mode).
    #[arg(long)]
    pub preset: Option<String>,
    /// A sentence-transformers directory: the pool is --texts embedded with it, and the
    /// query is --query-text embedded with it (instead of --embeddings and --query).
    #[cfg(feature = "embed")]
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// auto, cpu or cuda (the CTXPRUNE_BACKEND variable, cpu, cuda or auto, overrides auto).
    #[arg(long, default_value = "auto")]
    pub backend: String,
}

/// Runs `ctxprune select`.
pub fn run(a: SelectArgs) -> Result<()> {
    let weights: Option<Vec<f64>> = a
        .weights
        .as_deref()
        .map(|w| parse_list(w, "--weights"))
        .transpose()?;
    let opts = SelectOptions {
        method: &a.method,
        mode: Some(&a.mode),
        preset: a.preset.as_deref(),
        k: a.k,
        token_budget: a.token_budget,
        threshold: a.threshold,
        lambda: a.lambda,
        weights: weights.as_deref(),
    };
    // The library's names of this command's inputs (as flags): its errors name them.
    const NAMES: &[&str] = &[
        "method",
        "mode",
        "preset",
        "weights",
        "query",
        "query-text",
        "texts",
        "k",
        "token-budget",
        "threshold",
        "lambda",
        "retained",
        "costs",
    ];
    let cfg = flags(opts.config(), NAMES)?;
    let method = cfg.method_kind();
    #[cfg(feature = "embed")]
    let model = a.model.as_deref();
    #[cfg(not(feature = "embed"))]
    let model: Option<&std::path::Path> = None;
    if model.is_some() {
        // With a model the texts are the pool and the query text is the query.
        if method == Method::Lexical {
            return Err(Error::invalid(
                "--model",
                "does not apply to lexical (it reads the texts themselves)",
            ));
        }
        for (given, flag) in [
            (a.embeddings.is_some(), "--embeddings"),
            (a.query.is_some(), "--query"),
        ] {
            if given {
                return Err(Error::invalid(
                    flag,
                    "does not apply with --model (the model embeds --texts and --query-text)",
                ));
            }
        }
        if a.texts.is_none() {
            return Err(Error::invalid(
                "--texts",
                "--model needs the pool's texts (--texts FILE.jsonl)",
            ));
        }
    }
    flags(
        check_reads(
            method,
            a.query.is_some() || (model.is_some() && a.query_text.is_some()),
            a.query_text.is_some() && model.is_none(),
            a.texts.is_some() && model.is_none() && !(a.token_budget.is_some() && a.costs.is_none()),
        ),
        NAMES,
    )?;
    let opened = open_engine(&a.backend)?;
    let selector = flags(Selector::new(&opened.engine, cfg), NAMES)?;
    let retained: Vec<usize> = match &a.retained {
        Some(r) if !r.trim().is_empty() => parse_list(r, "--retained")?,
        _ => Vec::new(),
    };

    // ---- file I/O (and the encoder) ----
    #[cfg(feature = "embed")]
    let (loaded, embedded_query) = match (model, &a.texts) {
        (Some(dir), Some(tp)) => {
            let enc = super::embed::load(dir)?;
            let (texts, tokens) = io::load_texts(tp)?;
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            let embeddings = super::embed::encode(&enc, &refs, 32, false)?;
            let q = match &a.query_text {
                Some(t) => Some(enc.encode(&[t.as_str()], &Default::default())?.row(0).to_vec()),
                None => None,
            };
            let l = io::Loaded {
                embeddings,
                tokens,
                texts: Some(texts),
            };
            (Some(l), q)
        }
        _ => (None, None),
    };
    #[cfg(not(feature = "embed"))]
    let (loaded, embedded_query): (Option<io::Loaded>, Option<Vec<f32>>) = (None, None);
    let loaded = match (loaded, &a.embeddings) {
        (Some(l), _) => Some(l),
        (None, Some(p)) => Some(io::load_embeddings(p)?),
        (None, None) if method == Method::Lexical => None,
        (None, None) => {
            return Err(Error::invalid(
                "--embeddings",
                format!("{} needs --embeddings (or --model with --texts)", method.name()),
            ))
        }
    };
    let query = match embedded_query {
        Some(q) => Some(q),
        None => a.query.as_deref().map(io::load_query).transpose()?,
    };
    let (text_file_texts, text_file_tokens) = match &a.texts {
        Some(_) if model.is_some() => (None, None),
        Some(p) => {
            let (t, k) = io::load_texts(p)?;
            (Some(t), k)
        }
        None => (None, None),
    };
    let texts = text_file_texts.or_else(|| loaded.as_ref().and_then(|l| l.texts.clone()));
    let costs = match &a.costs {
        Some(p) => Some(io::load_costs(p)?),
        None => text_file_tokens.or_else(|| loaded.as_ref().and_then(|l| l.tokens.clone())),
    };
    // A token budget without costs: the texts counted by --tokenizer.
    let counted = a.token_budget.is_some() && costs.is_none() && texts.is_some();
    if a.tokenizer.is_some() && !counted {
        return Err(Error::invalid(
            "--tokenizer",
            "applies where --token-budget counts the texts' tokens (texts, and no --costs or \"tokens\")",
        ));
    }
    let costs = match (&texts, counted) {
        (Some(t), true) => {
            let c = super::tokens::counter(a.tokenizer.as_deref())?;
            Some(ctxprune::tokens::costs(c.as_ref(), t))
        }
        _ => costs,
    };
    if method == Method::Lexical && texts.is_none() {
        return Err(Error::invalid(
            "--texts",
            "lexical needs texts (--texts FILE.jsonl, or \"text\" in the embeddings JSON lines)",
        ));
    }
    if method.needs_query() && query.is_none() {
        return Err(if model.is_some() {
            Error::invalid(
                "--query-text",
                format!("{} needs the query (--query-text with --model)", method.name()),
            )
        } else {
            Error::invalid("--query", format!("{} needs --query FILE.npy", method.name()))
        });
    }
    // Lengths that must agree, named by their files.
    if let (Some(q), Some(l), Some(qp), Some(ep)) = (&query, &loaded, &a.query, &a.embeddings) {
        if q.len() != l.embeddings.dim() {
            return Err(Error::invalid(
                "--query",
                format!(
                    "{} has {} values, but the rows of {ep} have {}",
                    qp.display(),
                    q.len(),
                    l.embeddings.dim()
                ),
            ));
        }
    }
    let rows = loaded
        .as_ref()
        .map(|l| l.embeddings.rows())
        .or(texts.as_ref().map(Vec::len));
    if let (Some(n), Some(t)) = (rows, &texts) {
        if t.len() != n {
            let from = a
                .texts
                .as_ref()
                .map_or("the embeddings' \"text\"".to_string(), |p| {
                    p.display().to_string()
                });
            return Err(Error::invalid(
                "--texts",
                format!("{from} has {} texts for a pool of {n} rows", t.len()),
            ));
        }
    }
    if let (Some(n), Some(c)) = (rows, &costs) {
        if c.len() != n {
            let from = a
                .costs
                .as_ref()
                .map_or("the \"tokens\" field".to_string(), |p| p.display().to_string());
            return Err(Error::invalid(
                "--costs",
                format!("{from} has {} costs for a pool of {n} rows", c.len()),
            ));
        }
    }
    // ---- selection (timed: normalising the rows in place and making them resident is
    // selection work, not I/O) ----
    let t = std::time::Instant::now();
    // With --model the texts and the query text were used: embedded into the pool and
    // the query. The selector is not handed them again (it would note them as unread).
    let (req_texts, req_query_text) = if model.is_some() {
        (None, None)
    } else {
        (texts.as_deref(), a.query_text.as_deref())
    };
    let req = Request {
        query: query.as_deref(),
        texts: req_texts,
        query_text: req_query_text,
        costs: costs.as_deref(),
        retained: &retained,
        cancel: None,
    };
    let pool = match loaded {
        Some(l) if method != Method::Lexical => Some(Pool::new(&opened.engine, l.embeddings)?),
        _ => None,
    };
    let sel = flags(selector.select_maybe_pool(pool.as_ref(), &req), NAMES)?;
    let elapsed_ms = t.elapsed().as_secs_f64() * 1e3;
    opened.print_note();
    for n in &sel.notes {
        eprintln!("note: {n}");
    }
    let out = sel.to_json(elapsed_ms, costs.is_some());
    super::print_out(&format!("{out}\n"))
}
