//! `ctxprune rerank`: the k documents for a generator's context with at most B oracle
//! calls; one JSON object on stdout.

use super::open_engine;
use ctxprune::{io, Error, Result};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct RerankArgs {
    /// boundary-morph, bagel, single-stage, rgs (App. C.2), rgs-simple, or auto
    /// (boundary-morph with the feedback prior, 0.3 of it from the relevant documents'
    /// neighbourhoods, and the kernel's concentration doubled; if its
    /// first 10 scores and the MIPS top (up to 15) are all below 0.5, the zero prior and
    /// hyperparameters by the evidence from there on).
    #[arg(long)]
    pub method: String,
    /// The pool, rows in MIPS order (row 0 = MIPS top-1): .npy, .safetensors[:NAME] or .jsonl.
    #[arg(long, value_hint = clap::ValueHint::FilePath)]
    pub embeddings: Option<String>,
    /// Query embedding: .npy of shape (d,) or (1, d), or a JSON array.
    #[arg(long)]
    pub query: Option<PathBuf>,
    /// A sentence-transformers directory: the pool is --texts embedded with it and the
    /// query is --query-text embedded with it (instead of --embeddings and --query). The
    /// rows stay in the order of --texts, which must be MIPS order.
    #[cfg(feature = "embed")]
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Precomputed oracle scores in [0, 1], one per pool row (1-D .npy or JSON array).
    #[arg(long)]
    pub oracle_scores: Option<PathBuf>,
    /// A rerank server (TEI or Cohere API).
    #[arg(long)]
    pub oracle_url: Option<String>,
    /// The server's API: tei (default) or cohere (with --oracle-url).
    #[arg(long)]
    pub oracle_api: Option<String>,
    /// Seconds before one oracle request is abandoned (with --oracle-url). By default 30.
    #[arg(long, allow_hyphen_values = true)]
    pub oracle_timeout: Option<f64>,
    /// Retries of a request that failed (transport errors, HTTP 429 and 5xx; with
    /// --oracle-url). By default 2.
    #[arg(long, allow_hyphen_values = true)]
    pub oracle_retries: Option<u32>,
    /// Pool texts as JSON lines with "text" (for --oracle-url or --model).
    #[arg(long)]
    pub texts: Option<PathBuf>,
    /// The query text (for --oracle-url or --model).
    #[arg(long)]
    pub query_text: Option<String>,
    /// Oracle calls allowed, B.
    #[arg(long, allow_hyphen_values = true)]
    pub budget: usize,
    /// Documents returned, k.
    #[arg(long, allow_hyphen_values = true)]
    pub capacity: usize,
    /// vmf, rbf or matern52.
    #[arg(long, default_value = "vmf")]
    pub kernel: String,
    /// vMF concentration (default: the median heuristic).
    #[arg(long, allow_hyphen_values = true)]
    pub kappa: Option<f32>,
    /// boundary-morph's prior: mips (default), zero, adaptive (the MIPS prior's scale
    /// re-fitted to the scores after every call, fading to zero when they contradict it),
    /// score (the square root of the query cosine after min-max scaling over the pool), or
    /// feedback (the score prior from the query moved toward the documents scored at least
    /// 0.5 and away from the rest, Rocchio's relevance feedback, every 10 calls).
    #[arg(long)]
    pub prior: Option<String>,
    /// boundary-morph's acquisition: boundary (default) or ucb.
    #[arg(long)]
    pub acquisition: Option<String>,
    /// UCB beta0 (bagel, or boundary-morph with --acquisition ucb). By default 1.
    #[arg(long, allow_hyphen_values = true)]
    pub beta0: Option<f64>,
    /// RGS k-NN graph degree. By default 10 (rgs) or 16 (rgs-simple).
    #[arg(long, allow_hyphen_values = true)]
    pub graph_degree: Option<usize>,
    /// rgs: seeds = round(B / seed-div) MIPS-top documents. By default 2.
    #[arg(long, allow_hyphen_values = true)]
    pub seed_div: Option<f64>,
    /// rgs: heap cap max(seeds, round(frac B)). By default 1.
    #[arg(long, allow_hyphen_values = true)]
    pub frac: Option<f64>,
    /// With --prior adaptive: documents scored first, in one call, spread evenly over the
    /// MIPS ranks below the top, so the prior's fit sees its shape. By default 0.
    #[arg(long, allow_hyphen_values = true)]
    pub prior_probes: Option<usize>,
    /// Documents per oracle call, q (boundary-morph and bagel): each round picks q
    /// documents (kriging believer) and scores them in one call. By default 1.
    #[arg(long, allow_hyphen_values = true)]
    pub batch: Option<usize>,
    /// Token capacity T: the selected set holds at most T tokens (and --capacity
    /// documents), filled greedily by value per token. Token counts from --tokens, or from
    /// the "tokens" field of --texts, else --texts counted by --tokenizer.
    #[arg(long, allow_hyphen_values = true)]
    pub token_capacity: Option<u64>,
    /// Token counts, one per pool row (a JSON array or 1-D .npy of whole numbers >= 1),
    /// for --token-capacity.
    #[arg(long)]
    pub tokens: Option<PathBuf>,
    /// Counts the tokens of --texts for --token-capacity when they have no "tokens":
    /// o200k_base (default), cl100k_base, approx, or a tokenizer.json.
    #[arg(long, value_hint = clap::ValueHint::FilePath)]
    pub tokenizer: Option<String>,
    /// The precision of the pool copy kernel rows are read from: f32 (default, the
    /// paper's computation), bf16 or f16 (a half-precision copy: half the bytes per row;
    /// boundary-morph, bagel, rgs, rgs-simple).
    #[arg(long)]
    pub row_precision: Option<String>,
    /// How the GP's hyperparameters are set (boundary-morph): paper (default, the paper's
    /// heuristics) or evidence (type-II maximum likelihood of the scores seen, refitted after
    /// 10 calls and whenever the calls have doubled, up to 160; with --prior mips, zero or
    /// score).
    #[arg(long)]
    pub hyperparameters: Option<String>,
    /// With --prior feedback: the share of the prior taken from the neighbourhoods of the
    /// documents scored at least 0.5 (the shape of every document's largest cosine with
    /// one of them), in [0, 1]. By default 0; auto uses 0.3.
    #[arg(long, allow_hyphen_values = true)]
    pub feedback_neighbours: Option<f64>,
    /// auto, cpu or cuda (the CTXPRUNE_BACKEND variable, cpu, cuda or auto, overrides auto).
    #[arg(long, default_value = "auto")]
    pub backend: String,
}

/// Times the oracle so `elapsed_ms` can exclude it.
struct Timed<'a> {
    inner: &'a mut dyn ctxprune::rerank::Oracle,
    spent: std::time::Duration,
}

impl ctxprune::rerank::Oracle for Timed<'_> {
    fn score(&mut self, items: &[usize]) -> Result<Vec<f64>> {
        let t = std::time::Instant::now();
        let r = self.inner.score(items);
        self.spent += t.elapsed();
        r
    }
}

/// Runs `ctxprune rerank`.
pub fn run(a: RerankArgs) -> Result<()> {
    use ctxprune::rerank::{Precomputed, RerankOptions, Reranker};
    let opts = RerankOptions {
        kernel: Some(&a.kernel),
        kappa: a.kappa,
        prior: a.prior.as_deref(),
        acquisition: a.acquisition.as_deref(),
        beta0: a.beta0,
        graph_degree: a.graph_degree,
        seed_div: a.seed_div,
        frac: a.frac,
        batch: a.batch,
        token_capacity: a.token_capacity,
        prior_probes: a.prior_probes,
        row_precision: a.row_precision.as_deref(),
        hyperparameters: a.hyperparameters.as_deref(),
        feedback_neighbours: a.feedback_neighbours,
        ..RerankOptions::new(&a.method, a.budget, a.capacity)
    };
    let names = [
        "method",
        "kernel",
        "kappa",
        "prior",
        "acquisition",
        "beta0",
        "graph-degree",
        "seed-div",
        "frac",
        "batch",
        "token-capacity",
        "tokens",
        "capacity",
        "prior-probes",
        "row-precision",
        "hyperparameters",
        "feedback-neighbours",
    ];
    let cfg = super::cost::flags(opts.config(), &names)?;
    let method = cfg.method;
    #[cfg(feature = "embed")]
    let model = a.model.as_deref();
    #[cfg(not(feature = "embed"))]
    let model: Option<&std::path::Path> = None;
    // The HTTP oracle's options apply only to it; the texts and query text feed it (and
    // the model).
    for (given, flag, also_model) in [
        (a.oracle_api.is_some(), "--oracle-api", false),
        (a.oracle_timeout.is_some(), "--oracle-timeout", false),
        (a.oracle_retries.is_some(), "--oracle-retries", false),
        (a.texts.is_some(), "--texts", true),
        (a.query_text.is_some(), "--query-text", true),
    ] {
        if given && a.oracle_url.is_none() && !(also_model && model.is_some()) {
            return Err(Error::invalid(flag, "applies to --oracle-url or --model"));
        }
    }
    if model.is_some() {
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
    }
    if a.tokens.is_some() && a.token_capacity.is_none() {
        return Err(Error::invalid("--tokens", "applies to --token-capacity"));
    }
    let opened = open_engine(&a.backend)?;
    let reranker = super::cost::flags(Reranker::new(&opened.engine, cfg), &names)?;
    let (pool_rows, query) = match model {
        #[cfg(feature = "embed")]
        Some(dir) => {
            let tp = a.texts.as_ref().ok_or_else(|| {
                Error::invalid("--texts", "--model needs the pool's texts (--texts FILE.jsonl)")
            })?;
            let qt = a
                .query_text
                .as_deref()
                .ok_or_else(|| Error::invalid("--query-text", "--model needs the query text"))?;
            let enc = super::embed::load(dir)?;
            let texts = io::load_texts(tp)?.0;
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            let rows = super::embed::encode(&enc, &refs, 32, false)?;
            let q = enc.encode(&[qt], &Default::default())?.row(0).to_vec();
            (rows, q)
        }
        _ => {
            let e = a.embeddings.as_deref().ok_or_else(|| {
                Error::invalid(
                    "--embeddings",
                    "give the pool (--embeddings FILE, or --model DIR with --texts)",
                )
            })?;
            let q = a.query.as_deref().ok_or_else(|| {
                Error::invalid(
                    "--query",
                    "give the query (--query FILE, or --model DIR with --query-text)",
                )
            })?;
            (io::load_embeddings(e)?.embeddings, io::load_query(q)?)
        }
    };
    let n = pool_rows.rows();
    let tokens = match (a.token_capacity, &a.tokens, &a.texts) {
        (None, _, _) => None,
        (Some(_), Some(p), _) => Some(ctxprune::rerank::options::token_counts(
            &io::load_vector(p, "tokens")?,
            "--tokens",
        )?),
        (Some(_), None, Some(p)) => {
            let (texts, given) = io::load_texts(p)?;
            match given {
                Some(t) => Some(ctxprune::rerank::options::token_counts(&t, "--texts")?),
                // Counted here, by --tokenizer.
                None => {
                    let c = super::tokens::counter(a.tokenizer.as_deref())?;
                    Some(ctxprune::tokens::costs(c.as_ref(), &texts).into_iter().map(|v| v as u64).collect())
                }
            }
        }
        (Some(_), None, None) => {
            return Err(Error::invalid(
                "--token-capacity",
                "needs token counts: --tokens FILE, or --texts (their \"tokens\" field, else counted by --tokenizer)",
            ))
        }
    };
    let counted = a.token_capacity.is_some() && a.tokens.is_none() && a.texts.is_some();
    if a.tokenizer.is_some() && !counted {
        return Err(Error::invalid(
            "--tokenizer",
            "applies where --token-capacity counts the tokens of --texts (no --tokens given)",
        ));
    }
    if let Some(t) = &tokens {
        if t.len() != n {
            return Err(Error::invalid(
                if a.tokens.is_some() { "--tokens" } else { "--texts" },
                format!("{} token counts for a pool of {n}", t.len()),
            ));
        }
    }
    let mut oracle: Box<dyn ctxprune::rerank::Oracle> = match (&a.oracle_scores, &a.oracle_url) {
        (Some(p), None) => {
            let scores = io::load_vector(p, "oracle scores")?;
            if scores.len() != n {
                return Err(Error::invalid(
                    "--oracle-scores",
                    format!("{} scores for a pool of {n}", scores.len()),
                ));
            }
            Box::new(Precomputed::new(scores, a.budget.min(n))?)
        }
        (None, Some(url)) => {
            let texts = match &a.texts {
                Some(p) => io::load_texts(p)?.0,
                None => {
                    return Err(Error::invalid(
                        "--texts",
                        "--oracle-url needs the pool's texts (--texts FILE.jsonl)",
                    ))
                }
            };
            if texts.len() != n {
                return Err(Error::invalid(
                    "--texts",
                    format!("{} texts for a pool of {n}", texts.len()),
                ));
            }
            let qt = a
                .query_text
                .as_deref()
                .ok_or_else(|| Error::invalid("--query-text", "--oracle-url needs the query text"))?;
            let names = ["oracle-api", "oracle-timeout"];
            let api = super::cost::flags(a.oracle_api.as_deref().unwrap_or("tei").parse(), &names)?;
            let mut cfg = ctxprune::rerank::http::HttpConfig::new(url, api);
            if let Some(t) = a.oracle_timeout {
                cfg = super::cost::flags(cfg.timeout_secs(t), &names)?;
            }
            if let Some(r) = a.oracle_retries {
                cfg.retries = r;
            }
            Box::new(ctxprune::rerank::http::HttpOracle::new(
                cfg,
                qt,
                texts,
                a.budget.min(n),
            )?)
        }
        _ => {
            return Err(Error::invalid(
                "--oracle-scores",
                "give exactly one of --oracle-scores and --oracle-url",
            ))
        }
    };
    let t = std::time::Instant::now();
    let pool = ctxprune::Pool::new(&opened.engine, pool_rows)?;
    let mut timed = Timed {
        inner: oracle.as_mut(),
        spent: std::time::Duration::ZERO,
    };
    let r = super::cost::flags(
        reranker.rerank_tokens(&pool, &query, tokens.as_deref(), &mut timed),
        &names,
    )?;
    let oracle_ms = timed.spent.as_secs_f64() * 1e3;
    let elapsed_ms = t.elapsed().as_secs_f64() * 1e3 - oracle_ms;
    opened.print_note();
    for n in &r.notes {
        eprintln!("note: {n}");
    }
    let mut out = r.to_json(method, elapsed_ms, oracle_ms);
    if opened.note.is_some() {
        out["notes"] = serde_json::json!(opened.note.iter().chain(&r.notes).collect::<Vec<_>>());
    }
    super::print_out(&format!("{out}\n"))
}
