//! The `ctxprune` command-line tool. See `ctxprune --help`.

use clap::{Parser, Subcommand};
use ctxprune::select::{select, Inputs, Method, Mode, SelectConfig};
use ctxprune::{io, Backend, BackendChoice, Error, Result};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "ctxprune",
    version,
    about = "Decide what enters an LLM research agent's context."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Score and select candidates by marginal value; prints one JSON object.
    Select(Box<SelectArgs>),
    /// Choose the k documents for a generator's context with at most B oracle calls;
    /// prints one JSON object.
    Rerank(Box<RerankArgs>),
    /// Run every budgeted top-k method on built-in seeded problems and print mean
    /// CE-nCG@k / nCG@k per method, budget and capacity.
    Eval(EvalArgs),
    /// Mask stale tool observations in a trajectory read from stdin; writes the masked
    /// messages to stdout.
    Mask(MaskArgs),
    /// Cost accounting: FLOPs per token, effective token cost, listwise window plans.
    #[command(subcommand)]
    Cost(CostCmd),
    /// Run every capability on a built-in seeded synthetic pool and print a table.
    Demo,
    /// Compile every CUDA kernel to PTX with NVRTC (no GPU needed) and write the PTX;
    /// fails on any compiler error or warning.
    Kernels(KernelsArgs),
    /// On a machine with an NVIDIA GPU: compare every CUDA primitive and selector with the
    /// CPU path on fresh random inputs, then print the timing table.
    GpuCheck(GpuCheckArgs),
}

#[derive(clap::Args)]
struct KernelsArgs {
    /// Target architectures, comma-separated (sm_XY or compute_XY).
    #[arg(long, default_value = "sm_80,sm_90")]
    arch: String,
    /// Directory the PTX files are written to (FILE.ARCH.ptx).
    #[arg(long)]
    out: Option<std::path::PathBuf>,
}

#[derive(clap::Args)]
struct GpuCheckArgs {
    /// Device ordinal.
    #[arg(long, default_value_t = 0)]
    device: usize,
    /// Skip the timing table (correctness checks only).
    #[arg(long)]
    no_timing: bool,
    /// Seed of the random inputs (default: fresh from the clock, printed for replay).
    #[arg(long)]
    seed: Option<u64>,
}

#[derive(clap::Args)]
struct MaskArgs {
    /// openai or anthropic.
    #[arg(long)]
    format: String,
    /// Turns whose observations are kept.
    #[arg(long, default_value_t = 5)]
    window: usize,
    /// Keep error observations (true or false).
    #[arg(long, default_value = "true")]
    keep_errors: String,
    /// Keep the first observation.
    #[arg(long)]
    keep_first: bool,
    /// Tools never masked, comma-separated.
    #[arg(long)]
    tools_keep: Option<String>,
    /// When given, the only tools masked, comma-separated.
    #[arg(long)]
    tools_mask: Option<String>,
    /// Mask only when the context exceeds this many tokens.
    #[arg(long)]
    trigger_tokens: Option<usize>,
    /// Mask only when at least this many tokens would be cleared.
    #[arg(long, default_value_t = 0)]
    clear_at_least: usize,
    /// Move the masking boundary in steps of this many turns.
    #[arg(long, default_value_t = 1)]
    step: usize,
    /// Placeholder template ({tool}, {args}, {tokens}, {lines}).
    #[arg(long)]
    placeholder: Option<String>,
    /// o200k_base, cl100k_base or approx.
    #[arg(long, default_value = "o200k_base")]
    tokenizer: String,
    /// Write the accounting as JSON to this file.
    #[arg(long)]
    stats: Option<PathBuf>,
}

#[derive(Subcommand)]
enum CostCmd {
    /// GFLOPs per decoded token from a model's shape (App. G).
    Flops(FlopsArgs),
    /// Effective token cost: input_noncached + alpha input_cached + beta output.
    Etc {
        /// Non-cached input tokens.
        #[arg(long)]
        input_noncached: f64,
        /// Cached input tokens.
        #[arg(long)]
        input_cached: f64,
        /// Output tokens.
        #[arg(long)]
        output: f64,
        /// Weight of cached input.
        #[arg(long, default_value_t = 0.3)]
        alpha: f64,
        /// Weight of output.
        #[arg(long, default_value_t = 5.0)]
        beta: f64,
    },
    /// The sliding-window listwise reranking plan over the top `depth`.
    Plan {
        /// Reranking depth.
        #[arg(long)]
        depth: usize,
        /// Window size.
        #[arg(long, default_value_t = 20)]
        window: usize,
        /// Stride.
        #[arg(long, default_value_t = 10)]
        stride: usize,
    },
}

#[derive(clap::Args)]
struct FlopsArgs {
    /// A HuggingFace config.json (otherwise give the shape flags).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Layers.
    #[arg(long)]
    layers: Option<usize>,
    /// Hidden size d.
    #[arg(long)]
    hidden: Option<usize>,
    /// FFN / expert size d_ff.
    #[arg(long)]
    ffn: Option<usize>,
    /// Query heads.
    #[arg(long)]
    q_heads: Option<usize>,
    /// Key/value heads.
    #[arg(long)]
    kv_heads: Option<usize>,
    /// Active experts per token (1 for dense).
    #[arg(long)]
    experts_active: Option<usize>,
    /// swiglu or gelu.
    #[arg(long)]
    activation: Option<String>,
    /// Context length T.
    #[arg(long, default_value_t = 32_768)]
    context: usize,
    /// Number of sliding-window layers (where they sit in the stack does not change the count).
    #[arg(long)]
    sliding_layers: Option<usize>,
    /// Sliding window W.
    #[arg(long)]
    window: Option<usize>,
}

#[derive(clap::Args)]
struct EvalArgs {
    /// Number of generated problems (each a pool of 10,000 documents).
    #[arg(long, default_value_t = 10)]
    problems: usize,
    /// Seed of the first problem.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Oracle budgets, comma-separated.
    #[arg(long, default_value = "25,50,100")]
    budgets: String,
    /// Capacities, comma-separated.
    #[arg(long, default_value = "50,100")]
    capacities: String,
    /// Draw CE-nCG@k against budget to this PNG.
    #[arg(long)]
    plot: Option<PathBuf>,
}

#[derive(clap::Args)]
struct RerankArgs {
    /// boundary-morph, bagel, single-stage or rgs.
    #[arg(long)]
    method: String,
    /// The pool, rows in MIPS order (row 0 = MIPS top-1): .npy, .safetensors[:NAME] or .jsonl.
    #[arg(long)]
    embeddings: String,
    /// Query embedding: .npy of shape (d,) or (1, d), or a JSON array.
    #[arg(long)]
    query: PathBuf,
    /// Precomputed oracle scores in [0, 1], one per pool row (1-D .npy or JSON array).
    #[arg(long)]
    oracle_scores: Option<PathBuf>,
    /// A rerank server (TEI or Cohere API).
    #[arg(long)]
    oracle_url: Option<String>,
    /// tei or cohere.
    #[arg(long, default_value = "tei")]
    oracle_api: String,
    /// Pool texts as JSON lines with "text" (for --oracle-url).
    #[arg(long)]
    texts: Option<PathBuf>,
    /// The query text (for --oracle-url).
    #[arg(long)]
    query_text: Option<String>,
    /// Oracle calls allowed, B.
    #[arg(long)]
    budget: usize,
    /// Documents returned, k.
    #[arg(long)]
    capacity: usize,
    /// vmf, rbf or matern52.
    #[arg(long, default_value = "vmf")]
    kernel: String,
    /// vMF concentration (default: the median heuristic).
    #[arg(long)]
    kappa: Option<f32>,
    /// boundary-morph's prior: mips (default) or zero.
    #[arg(long)]
    prior: Option<String>,
    /// boundary-morph's acquisition: boundary (default) or ucb.
    #[arg(long)]
    acquisition: Option<String>,
    /// UCB beta0 (bagel, or boundary-morph with --acquisition ucb). By default 1.
    #[arg(long)]
    beta0: Option<f64>,
    /// RGS k-NN graph degree. By default 16.
    #[arg(long)]
    graph_degree: Option<usize>,
    /// auto, cpu or cuda.
    #[arg(long, default_value = "auto")]
    backend: String,
}

#[derive(clap::Args)]
struct SelectArgs {
    /// Scorer: mmr, grn, centroid, dpp, coverage, hybrid or lexical.
    #[arg(long)]
    method: String,
    /// Pool embeddings: .npy (2-D), .safetensors[:NAME] or .jsonl ({"embedding", "tokens", "text"}).
    /// Not needed by lexical when --texts is given.
    #[arg(long)]
    embeddings: Option<String>,
    /// Query embedding: .npy of shape (d,) or (1, d), or a JSON array.
    #[arg(long)]
    query: Option<PathBuf>,
    /// Pool texts as JSON lines with "text" (and optionally "tokens"), one per row.
    #[arg(long)]
    texts: Option<PathBuf>,
    /// Query text (lexical).
    #[arg(long)]
    query_text: Option<String>,
    /// Token cost per row: 1-D .npy or a JSON array. By default the "tokens" field of the
    /// JSON-lines input when every row has one.
    #[arg(long)]
    costs: Option<PathBuf>,
    /// Item budget.
    #[arg(long, allow_hyphen_values = true)]
    k: Option<usize>,
    /// Token budget over the selected items.
    #[arg(long, allow_hyphen_values = true)]
    token_budget: Option<f64>,
    /// greedy (budgeted selection) or gate (keep if V >= threshold against --retained).
    #[arg(long, default_value = "greedy")]
    mode: String,
    /// Keep threshold tau (gate default: the paper's).
    #[arg(long, allow_hyphen_values = true)]
    threshold: Option<f64>,
    /// Rows already in the context, comma-separated, in the order they were added.
    #[arg(long)]
    retained: Option<String>,
    /// MMR / lexical lambda in [0, 1].
    #[arg(long, allow_hyphen_values = true)]
    lambda: Option<f64>,
    /// Hybrid alpha,beta,gamma (signed) or lexical w_tfidf,w_jaccard.
    #[arg(long, allow_hyphen_values = true)]
    weights: Option<String>,
    /// Use the paper's operating point (App. B Table 5) for every option not given.
    #[arg(long)]
    preset: Option<String>,
    /// auto, cpu or cuda.
    #[arg(long, default_value = "auto")]
    backend: String,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(
                e.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) {
                let _ = e.print();
                return if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                    ExitCode::from(2)
                } else {
                    ExitCode::SUCCESS
                };
            }
            // One line, as for every other bad input (clap's usage block follows on --help).
            let msg = e.to_string();
            eprintln!("{}", msg.lines().next().unwrap_or("error: invalid arguments"));
            return ExitCode::from(2);
        }
    };
    let r = match cli.cmd {
        Cmd::Select(a) => run_select(*a),
        Cmd::Rerank(a) => run_rerank(*a),
        Cmd::Eval(a) => run_eval(a),
        Cmd::Cost(c) => run_cost(c),
        Cmd::Mask(a) => run_mask(a),
        Cmd::Demo => ctxprune::demo::run().map(|t| print!("{t}")),
        Cmd::Kernels(a) => run_kernels(a),
        Cmd::GpuCheck(a) => run_gpu_check(a),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn parse_list<T: std::str::FromStr>(s: &str, flag: &str) -> Result<Vec<T>> {
    s.split(',')
        .enumerate()
        .map(|(i, x)| {
            x.trim().parse().map_err(|_| {
                Error::invalid(
                    flag,
                    format!("element {i} ('{}') is not a valid number", x.trim()),
                )
            })
        })
        .collect()
}

fn run_select(a: SelectArgs) -> Result<()> {
    let method: Method = a.method.parse()?;
    let mode: Mode = a.mode.parse()?;
    let choice: BackendChoice = a.backend.parse()?;
    let backend = Backend::choose(choice)?;
    let mut cfg = SelectConfig::new(method)
        .mode(mode)
        .backend(backend.backend.clone());
    match a.preset.as_deref() {
        None => {}
        Some("paper") => cfg = cfg.paper_preset(true),
        Some(p) => {
            return Err(Error::invalid(
                "--preset",
                format!("unknown preset '{p}' (paper)"),
            ))
        }
    }
    if let Some(k) = a.k {
        cfg = cfg.k(k);
    }
    if let Some(t) = a.token_budget {
        cfg = cfg.token_budget(t);
    }
    if let Some(t) = a.threshold {
        cfg = cfg.threshold(t);
    }
    if let Some(l) = a.lambda {
        cfg = cfg.lambda(l);
    }
    if let Some(w) = &a.weights {
        let w: Vec<f64> = parse_list(w, "--weights")?;
        cfg = match (method, w.as_slice()) {
            (Method::Lexical, &[t, j]) => cfg.lexical_weights([t, j]),
            (Method::Hybrid, &[x, y, z]) => cfg.weights([x, y, z]),
            (Method::Lexical, _) => {
                return Err(Error::invalid(
                    "--weights",
                    "lexical takes two weights: w_tfidf,w_jaccard",
                ))
            }
            (Method::Hybrid, _) => {
                return Err(Error::invalid(
                    "--weights",
                    "hybrid takes three weights: alpha,beta,gamma",
                ))
            }
            _ => {
                return Err(Error::invalid(
                    "--weights",
                    format!("{} takes no weights", method.name()),
                ))
            }
        };
    }
    let retained: Vec<usize> = match &a.retained {
        Some(r) if !r.trim().is_empty() => parse_list(r, "--retained")?,
        _ => Vec::new(),
    };

    // ---- file I/O ----
    let mut loaded = match &a.embeddings {
        Some(p) => Some(io::load_embeddings(p)?),
        None if method == Method::Lexical => None,
        None => {
            return Err(Error::invalid(
                "--embeddings",
                format!("{} needs --embeddings", method.name()),
            ))
        }
    };
    let query = a.query.as_deref().map(io::load_query).transpose()?;
    let (text_file_texts, text_file_tokens) = match &a.texts {
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
    if method == Method::Lexical && texts.is_none() {
        return Err(Error::invalid(
            "--texts",
            "lexical needs texts (--texts FILE.jsonl, or \"text\" in the embeddings JSON lines)",
        ));
    }
    if method.needs_query() && query.is_none() {
        return Err(Error::invalid(
            "--query",
            format!("{} needs --query FILE.npy", method.name()),
        ));
    }
    // ---- selection (timed: unit-normalising in place is selection work, not I/O) ----
    let t = std::time::Instant::now();
    if method != Method::Lexical {
        if let Some(l) = loaded.as_mut() {
            l.embeddings.normalize()?;
        }
    }
    let inp = Inputs {
        embeddings: loaded.as_ref().map(|l| &l.embeddings),
        query: query.as_deref(),
        texts: texts.as_deref(),
        query_text: a.query_text.as_deref(),
        costs: costs.as_deref(),
        retained: &retained,
    };

    let sel = select(&cfg, &inp)?;
    let elapsed_ms = t.elapsed().as_secs_f64() * 1e3;
    if let Some(r) = &backend.reason {
        eprintln!("note: backend auto: running on the CPU ({r})");
    }
    for n in &sel.notes {
        eprintln!("note: {n}");
    }
    let mut out = serde_json::json!({
        "method": method.name(),
        "mode": mode.name(),
        "selected": sel.selected,
        "gains": sel.gains,
        "backend": sel.backend.name(),
        "elapsed_ms": elapsed_ms,
    });
    if let Some(s) = sel.stop {
        out["stopped_by"] = s.as_str().into();
    }
    if let Some(t) = sel.threshold {
        out["threshold"] = t.into();
    }
    if costs.is_some() {
        out["tokens"] = sel.tokens_selected.into();
    }
    println!("{out}");
    Ok(())
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

fn run_rerank(a: RerankArgs) -> Result<()> {
    use ctxprune::rerank::{rerank, Acquisition, DenseKernel, Precomputed, Prior, RerankConfig};
    use ctxprune::similarity::{Kernel, KernelKind};
    let method: ctxprune::rerank::Method = a.method.parse()?;
    let backend = Backend::choose(a.backend.parse::<BackendChoice>()?)?;
    if backend.backend != Backend::Cpu {
        return Err(Error::Backend {
            backend: "cuda".into(),
            msg: "rerank has no CUDA kernels in this version".into(),
        });
    }
    let kind: KernelKind = a.kernel.parse()?;
    use ctxprune::rerank::Method as M;
    // Options a method does not use are errors, never silently ignored.
    let only = |given: bool, flag: &str, ok: &[M]| -> Result<()> {
        if given && !ok.contains(&method) {
            return Err(Error::invalid(
                flag,
                format!("does not apply to {}", method.name()),
            ));
        }
        Ok(())
    };
    only(a.prior.is_some(), "--prior", &[M::BoundaryMorph])?;
    only(a.acquisition.is_some(), "--acquisition", &[M::BoundaryMorph])?;
    only(a.beta0.is_some(), "--beta0", &[M::BoundaryMorph, M::Bagel])?;
    only(a.graph_degree.is_some(), "--graph-degree", &[M::Rgs])?;
    if a.graph_degree == Some(0) {
        return Err(Error::invalid("--graph-degree", "must be at least 1"));
    }
    let prior = match a.prior.as_deref().unwrap_or("mips") {
        "mips" => Prior::Mips,
        "zero" => Prior::Zero,
        p => {
            return Err(Error::invalid(
                "--prior",
                format!("unknown prior '{p}' (mips, zero)"),
            ))
        }
    };
    let acquisition = match a.acquisition.as_deref().unwrap_or("boundary") {
        "boundary" => Acquisition::Boundary,
        "ucb" => Acquisition::Ucb,
        p => {
            return Err(Error::invalid(
                "--acquisition",
                format!("unknown acquisition '{p}' (boundary, ucb)"),
            ))
        }
    };
    if a.beta0.is_some() && method == M::BoundaryMorph && acquisition != Acquisition::Ucb {
        return Err(Error::invalid("--beta0", "applies to the ucb acquisition"));
    }
    if a.kappa.is_some() && kind != KernelKind::Vmf {
        return Err(Error::invalid("--kappa", "applies to the vmf kernel"));
    }
    let mut pool = io::load_embeddings(&a.embeddings)?.embeddings;
    let query = io::load_query(&a.query)?;
    let n = pool.rows();
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
            let cfg = ctxprune::rerank::http::HttpConfig::new(url, a.oracle_api.parse()?);
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
    pool.normalize()?;
    let kernel = match (kind, a.kappa) {
        (KernelKind::Vmf, Some(k)) => Kernel::Vmf { kappa: k },
        _ => Kernel::with_median_heuristic(kind, &pool)?,
    };
    let dk = DenseKernel::build_on(&pool, &query, kernel, &backend.backend)?;
    let mut cfg = RerankConfig::new(method, a.budget, a.capacity);
    cfg.backend = backend.backend.clone();
    cfg.prior = prior;
    cfg.acquisition = acquisition;
    cfg.beta0 = a.beta0.unwrap_or(1.0);
    cfg.graph_degree = a.graph_degree.unwrap_or(16);
    let mut timed = Timed {
        inner: oracle.as_mut(),
        spent: std::time::Duration::ZERO,
    };
    let r = rerank(&cfg, &dk, &mut timed)?;
    let oracle_ms = timed.spent.as_secs_f64() * 1e3;
    let elapsed_ms = t.elapsed().as_secs_f64() * 1e3 - oracle_ms;
    if let Some(reason) = &backend.reason {
        eprintln!("note: backend auto: running on the CPU ({reason})");
    }
    for n in &r.notes {
        eprintln!("note: {n}");
    }
    let kappa = match kernel {
        Kernel::Vmf { kappa } => serde_json::json!(kappa),
        _ => serde_json::Value::Null,
    };
    let out = serde_json::json!({
        "method": method.name(),
        "selected": r.selected,
        "scored": r.scored,
        "oracle_calls": r.scored.len(),
        "scores": r.scores,
        "notes": r.notes,
        "kappa": kappa,
        "backend": backend.backend.name(),
        "elapsed_ms": elapsed_ms,
        "oracle_ms": oracle_ms,
    });
    println!("{out}");
    Ok(())
}

fn run_eval(a: EvalArgs) -> Result<()> {
    let budgets: Vec<usize> = parse_list(&a.budgets, "--budgets")?;
    let capacities: Vec<usize> = parse_list(&a.capacities, "--capacities")?;
    if a.problems == 0 {
        return Err(Error::invalid("--problems", "must be at least 1"));
    }
    if let Some(k) = capacities.iter().find(|&&k| k == 0 || k > 10_000) {
        return Err(Error::invalid(
            "--capacities",
            format!("{k} is outside 1..=10000 (the pool)"),
        ));
    }
    let t = std::time::Instant::now();
    let cells =
        ctxprune::rerank::eval::run(a.problems, a.seed, 10_000, &budgets, &capacities, &mut |p, n| {
            eprintln!("problem {p}/{n} ({:.1} s)", t.elapsed().as_secs_f64());
        })?;
    println!(
        "{} problems, N = 10,000, seeds {}..{}",
        a.problems,
        a.seed,
        a.seed + a.problems as u64 - 1
    );
    println!(
        "{:<20} {:>6} {:>6} {:>10} {:>10}",
        "method", "B", "k", "CE-nCG@k", "nCG@k"
    );
    for &b in &budgets {
        for &k in &capacities {
            let cell: Vec<_> = cells
                .iter()
                .filter(|c| c.budget == b && c.capacity == k)
                .collect();
            for c in &cell {
                println!(
                    "{:<20} {:>6} {:>6} {:>10.4} {:>10.4}",
                    c.method, b, k, c.ce_ncg, c.ncg
                );
            }
            if let Some(best) = cell
                .iter()
                .filter(|c| c.method.starts_with("bagel"))
                .max_by(|x, y| x.ce_ncg.total_cmp(&y.ce_ncg))
            {
                println!(
                    "{:<20} {:>6} {:>6} {:>10.4} {:>10.4}",
                    "bagel(best b0)", b, k, best.ce_ncg, best.ncg
                );
            }
        }
    }
    if let Some(p) = &a.plot {
        ctxprune::rerank::plot::plot(&cells, p)?;
        eprintln!("wrote {}", p.display());
    }
    Ok(())
}

fn run_cost(c: CostCmd) -> Result<()> {
    use ctxprune::cost;
    let out = match c {
        CostCmd::Flops(a) => {
            let mut shape = match &a.config {
                Some(p) => cost::ModelShape::from_config(p)?,
                None => {
                    let need = |v: Option<usize>, f: &str| {
                        v.ok_or_else(|| Error::invalid(f, "required without --config"))
                    };
                    let layers = need(a.layers, "--layers")?;
                    let q = need(a.q_heads, "--q-heads")?;
                    cost::ModelShape {
                        hidden: need(a.hidden, "--hidden")?,
                        ffn: need(a.ffn, "--ffn")?,
                        q_heads: q,
                        kv_heads: a.kv_heads.unwrap_or(q),
                        experts_active: 1,
                        activation: cost::Activation::SwiGlu,
                        layers: vec![None; layers],
                    }
                }
            };
            if let Some(k) = a.experts_active {
                shape.experts_active = k;
            }
            if let Some(act) = &a.activation {
                shape.activation = act.parse()?;
            }
            match (a.sliding_layers, a.window) {
                (Some(n), Some(w)) => {
                    if n > shape.layers.len() {
                        return Err(Error::invalid(
                            "--sliding-layers",
                            format!("{n} exceeds the {} layers", shape.layers.len()),
                        ));
                    }
                    let l = shape.layers.len();
                    shape
                        .layers
                        .iter_mut()
                        .enumerate()
                        .for_each(|(i, x)| *x = if i >= l - n { Some(w) } else { None });
                }
                (None, None) => {}
                _ => {
                    return Err(Error::invalid(
                        "--sliding-layers",
                        "give --sliding-layers and --window together",
                    ))
                }
            }
            shape.validate()?;
            let per: Vec<f64> = shape.flops_per_layer(a.context).iter().map(|f| f / 1e9).collect();
            serde_json::json!({"gflops_per_token": shape.gflops_per_token(a.context), "per_layer": per})
        }
        CostCmd::Etc {
            input_noncached,
            input_cached,
            output,
            alpha,
            beta,
        } => {
            for (n, v) in [
                ("--input-noncached", input_noncached),
                ("--input-cached", input_cached),
                ("--output", output),
                ("--alpha", alpha),
                ("--beta", beta),
            ] {
                if !(v.is_finite() && v >= 0.0) {
                    return Err(Error::invalid(n, format!("must be finite and >= 0, got {v}")));
                }
            }
            serde_json::json!({"etc": cost::effective_token_cost(input_noncached, input_cached, output, alpha, beta)})
        }
        CostCmd::Plan {
            depth,
            window,
            stride,
        } => {
            let (w, dup) = cost::window_plan(depth, window, stride)?;
            let w: Vec<[usize; 2]> = w.into_iter().map(|(s, e)| [s, e]).collect();
            serde_json::json!({"windows": w, "duplication": dup})
        }
    };
    println!("{out}");
    Ok(())
}

fn run_mask(a: MaskArgs) -> Result<()> {
    use ctxprune::mask::masker::{MaskConfig, Masker};
    use ctxprune::mask::{Format, Trajectory};
    let format: Format = a.format.parse()?;
    let keep_errors = match a.keep_errors.as_str() {
        "true" => true,
        "false" => false,
        v => {
            return Err(Error::invalid(
                "--keep-errors",
                format!("'{v}' is not true or false"),
            ))
        }
    };
    if a.step == 0 {
        return Err(Error::invalid("--step", "must be at least 1"));
    }
    let list = |s: &Option<String>| -> Vec<String> {
        s.as_deref().map_or_else(Vec::new, |s| {
            s.split(',')
                .map(|t| t.trim().to_string())
                .filter(|t| !t.is_empty())
                .collect()
        })
    };
    let mut cfg = MaskConfig {
        window: a.window,
        keep_errors,
        keep_first: a.keep_first,
        tools_keep: list(&a.tools_keep),
        tools_mask: list(&a.tools_mask),
        trigger_tokens: a.trigger_tokens,
        clear_at_least: a.clear_at_least,
        step: a.step,
        ..MaskConfig::default()
    };
    if let Some(p) = a.placeholder {
        cfg.placeholder = p;
    }
    let counter = ctxprune::tokens::counter(&a.tokenizer)?;
    let mut input = String::new();
    std::io::Read::read_to_string(&mut std::io::stdin(), &mut input).map_err(|e| Error::io("<stdin>", e))?;
    let mut traj = Trajectory::parse(&input, format)?;
    let stats = Masker::new(cfg, counter.as_ref()).mask(&mut traj);
    // Everything is computed before anything is written: bad input never half-writes.
    let out = traj.to_json();
    if let Some(p) = &a.stats {
        let s = serde_json::to_string(&stats).map_err(|e| Error::invalid("stats", e.to_string()))?;
        std::fs::write(p, s).map_err(|e| Error::io(p, e))?;
    }
    println!("{out}");
    Ok(())
}

#[cfg(feature = "cuda")]
fn run_kernels(a: KernelsArgs) -> Result<()> {
    use ctxprune::backend::cuda::compile;
    use std::io::Write as _;
    let mut archs = Vec::new();
    for arch in a.arch.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let num = arch
            .strip_prefix("sm_")
            .or_else(|| arch.strip_prefix("compute_"))
            .filter(|n| {
                let digits = n.chars().take_while(char::is_ascii_digit).count();
                digits >= 2 && n[digits..].chars().all(|c| c.is_ascii_lowercase())
            })
            .ok_or_else(|| Error::invalid("--arch", format!("'{arch}' is not sm_XY or compute_XY")))?;
        archs.push(num.to_string());
    }
    if archs.is_empty() {
        return Err(Error::invalid("--arch", "no architecture given"));
    }
    let mut so = std::io::stdout().lock();
    let (maj, min) = compile::nvrtc_version()?;
    let _ = writeln!(
        so,
        "NVRTC {maj}.{min}; kernel sources hash {:016x}",
        ctxprune::backend::cuda::sources::SOURCES_HASH
    );
    if let Some(d) = &a.out {
        std::fs::create_dir_all(d).map_err(|e| Error::io(d.display().to_string(), e))?;
    }
    let mut dirty = Vec::new();
    for num in &archs {
        let target = format!("compute_{num}");
        for c in compile::compile_all(&target)? {
            let entries = c.entries();
            let _ = writeln!(
                so,
                "{:<12} {target:<12} {:>3} kernels  {}",
                c.file,
                entries.len(),
                entries.join(" ")
            );
            if !c.log.is_empty() {
                eprintln!("{} ({target}):\n{}", c.file, c.log);
                dirty.push(format!("{} ({target})", c.file));
            }
            if let Some(d) = &a.out {
                let p = d.join(format!("{}.sm_{num}.ptx", c.file.trim_end_matches(".cu")));
                std::fs::write(&p, &c.ptx).map_err(|e| Error::io(p.display().to_string(), e))?;
            }
        }
    }
    if dirty.is_empty() {
        Ok(())
    } else {
        Err(Error::Backend {
            backend: "nvrtc".into(),
            msg: format!("warnings in {}", dirty.join(", ")),
        })
    }
}

#[cfg(feature = "cuda")]
fn run_gpu_check(a: GpuCheckArgs) -> Result<()> {
    ctxprune::backend::cuda::check::run(a.device, a.seed, !a.no_timing)
}

#[cfg(not(feature = "cuda"))]
fn run_kernels(_: KernelsArgs) -> Result<()> {
    Err(Error::Backend {
        backend: "cuda".into(),
        msg: "this build has no CUDA support (built without the `cuda` feature)".into(),
    })
}

#[cfg(not(feature = "cuda"))]
fn run_gpu_check(_: GpuCheckArgs) -> Result<()> {
    run_kernels(KernelsArgs {
        arch: String::new(),
        out: None,
    })
}
