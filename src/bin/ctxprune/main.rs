//! The `ctxprune` command-line tool. See `ctxprune --help`. One file per subcommand; this
//! one parses, opens the engine and reports errors in one line.
//!
//! The CLI, not the library, reads the environment: `CTXPRUNE_BACKEND=cpu|cuda|auto`
//! overrides `--backend auto`; `CTXPRUNE_CACHE_DIR` (else `$XDG_CACHE_HOME/ctxprune`,
//! else `$HOME/.cache/ctxprune`) holds compiled kernels; `CUDA_HOME` and `CUDA_PATH` are
//! searched for NVRTC and cuBLAS.

mod attention;
mod cost;
mod device;
#[cfg(feature = "embed")]
mod embed;
mod eval;
mod mask;
mod paths;
mod pipeline;
mod probe;
mod rerank;
mod select;
#[cfg(feature = "serve")]
mod serve;
mod tokens;
#[cfg(feature = "embed")]
mod train;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use ctxprune::{BackendChoice, Engine, EngineOptions, Error, Result};
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
    Select(Box<select::SelectArgs>),
    /// Choose the k documents for a generator's context with at most B oracle calls;
    /// prints one JSON object.
    Rerank(Box<rerank::RerankArgs>),
    /// Run every budgeted top-k method on built-in seeded problems and print mean
    /// CE-nCG@k / nCG@k per method, budget and capacity.
    Eval(eval::EvalArgs),
    /// Mask stale tool observations in a trajectory read from stdin; writes the masked
    /// messages to stdout.
    Mask(mask::MaskArgs),
    /// Cost accounting: FLOPs per token, effective token cost, listwise window plans.
    #[command(subcommand)]
    Cost(cost::CostCmd),
    /// Replay a logged research run (JSON lines) under per-stage policies (a TOML file) and
    /// print the accounting: nodes explored, items and tokens before and after each stage.
    Pipeline(pipeline::PipelineArgs),
    /// The SNR regression probe (observation-masking.txt §5.2): which queries does context
    /// management rescue? Trace features of No-CM trajectories, a ridge fit of the
    /// evidence SNR, PCA1, and the AUC of a balanced logistic probe on the two.
    Probe(probe::ProbeArgs),
    /// Where an agent's attention goes (observation-masking.txt App. E): segment a rendered
    /// prompt, measure attention mass by turn and role from Q/K tensors, draw the heat map
    /// and the decay curves.
    #[command(subcommand)]
    Attention(attention::AttentionCmd),
    /// Run every capability on a built-in seeded synthetic pool and print a table.
    Demo(DemoArgs),
    /// Compile every CUDA kernel to PTX with NVRTC (no GPU needed) and write the PTX;
    /// fails on any compiler error or warning.
    Kernels(device::KernelsArgs),
    /// On a machine with an NVIDIA GPU: compare every CUDA primitive and selector with the
    /// CPU path on fresh random inputs, then print the timing table.
    GpuCheck(device::GpuCheckArgs),
    /// Embed texts (JSON lines) with a sentence-transformers model: an .npy on stdout, or
    /// --out FILE.npy / FILE.safetensors.
    #[cfg(feature = "embed")]
    Embed(embed::EmbedArgs),
    /// Count each text's tokens (JSON lines with "text", or --text) as a token budget
    /// counts them; prints {"tokenizer", "texts", "total", "tokens"}.
    CountTokens(tokens::CountTokensArgs),
    /// Write a seeded synthetic pool as .npy files (emb, query, costs, oracle scores).
    MakePool(MakePoolArgs),
    /// Serve select, rerank, mask, embed and cost over HTTP (JSON), with named resident
    /// pools and the sentence encoders given by --model.
    #[cfg(feature = "serve")]
    Serve(Box<serve::ServeArgs>),
}

#[derive(clap::Args)]
struct MakePoolArgs {
    /// Rows.
    #[arg(long, default_value_t = 10_000)]
    n: usize,
    /// Dimension.
    #[arg(long, default_value_t = 1024)]
    d: usize,
    /// Seed.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Output directory.
    #[arg(long)]
    out: PathBuf,
}

#[derive(clap::Args)]
struct DemoArgs {
    /// auto, cpu or cuda (the CTXPRUNE_BACKEND variable, cpu, cuda or auto, overrides auto).
    #[arg(long, default_value = "auto")]
    backend: String,
}

fn main() -> ExitCode {
    let parsed = Cli::command()
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m).map(|c| (c, m)));
    let cli = match parsed {
        Ok((c, m)) => {
            // Every path flag through the one check before the command runs: inputs that
            // are not what they are named as (a FIFO, a device), outputs that cannot be
            // written.
            if let Err(e) = paths::check(&m) {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
            c
        }
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
        Cmd::Select(a) => select::run(*a),
        Cmd::Rerank(a) => rerank::run(*a),
        Cmd::Eval(a) => eval::run(a),
        Cmd::Cost(c) => cost::run(c),
        Cmd::Mask(a) => mask::run(a),
        Cmd::Pipeline(a) => pipeline::run(a),
        Cmd::Probe(a) => probe::run(a),
        Cmd::Attention(c) => attention::run(c),
        Cmd::Demo(a) => open_engine(&a.backend).and_then(|o| {
            o.print_note();
            ctxprune::demo::run(&o.engine).and_then(|t| print_out(&t))
        }),
        Cmd::Kernels(a) => device::kernels(a),
        Cmd::GpuCheck(a) => device::gpu_check(a),
        Cmd::MakePool(a) => make_pool(&a),
        Cmd::CountTokens(a) => tokens::run(a),
        #[cfg(feature = "embed")]
        Cmd::Embed(a) => embed::run(a),
        #[cfg(feature = "serve")]
        Cmd::Serve(a) => match serve::run(*a) {
            Ok(true) => Ok(()),
            Ok(false) => return ExitCode::from(serve::EXIT_ABANDONED),
            Err(e) => Err(e),
        },
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", e.render(ctxprune::Surface::Cli));
            ExitCode::FAILURE
        }
    }
}

fn make_pool(a: &MakePoolArgs) -> Result<()> {
    if a.n == 0 || a.d == 0 || a.n.checked_mul(a.d).is_none_or(|v| v > 1 << 31) {
        return Err(Error::invalid(
            "--n",
            format!(
                "{} x {} is not a pool this tool writes (both >= 1, at most 2^31 values)",
                a.n, a.d
            ),
        ));
    }
    ctxprune::demo::data::write_pool(&a.out, a.n, a.d, a.seed)?;
    print_out(&format!("wrote {} x {} to {}\n", a.n, a.d, a.out.display()))
}

/// Writes `text` to stdout and flushes it; a failed write (a closed pipe, a full disk) is
/// an error naming stdout, not a panic inside `println!`.
pub(crate) fn print_out(text: &str) -> Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| Error::io("stdout", e))
}

/// A comma-separated list of numbers; an error names `flag` and the element.
pub(crate) fn parse_list<T: std::str::FromStr>(s: &str, flag: &str) -> Result<Vec<T>> {
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

/// The engine options from the environment: the kernel cache directory and CUDA roots.
pub(crate) fn engine_options() -> EngineOptions {
    EngineOptions::from_env()
}

/// An engine and, when `auto` ran on the CPU, why.
pub(crate) struct Opened {
    pub engine: Engine,
    pub note: Option<String>,
}

impl Opened {
    /// Prints the fallback note on stderr, if any.
    pub fn print_note(&self) {
        if let Some(n) = &self.note {
            eprintln!("note: {n}");
        }
    }
}

/// Opens what `--backend` asks for; `CTXPRUNE_BACKEND` overrides `auto`.
pub(crate) fn open_engine(flag: &str) -> Result<Opened> {
    let choice: BackendChoice = flag
        .parse()
        .map_err(|_| Error::invalid("--backend", format!("unknown backend '{flag}' (auto, cpu, cuda)")))?;
    let opts = engine_options();
    // The variable is checked whether or not it applies: a typo is an error, not ignored.
    let env = match std::env::var("CTXPRUNE_BACKEND") {
        Ok(v) if v.is_empty() => None,
        Ok(v) => {
            let c: BackendChoice = v.parse().map_err(|_| {
                Error::invalid(
                    "CTXPRUNE_BACKEND",
                    format!("unknown backend '{v}' (auto, cpu, cuda)"),
                )
            })?;
            Some((c, v))
        }
        Err(std::env::VarError::NotPresent) => None,
        Err(std::env::VarError::NotUnicode(_)) => {
            return Err(Error::invalid("CTXPRUNE_BACKEND", "is not valid UTF-8"))
        }
    };
    // It overrides only `auto`; an explicit --backend wins.
    let (choice, why) = match (choice, env) {
        (BackendChoice::Auto, Some((c, v))) => (c, Some(format!("CTXPRUNE_BACKEND={v}"))),
        (c, _) => (c, None),
    };
    let fallback = |reason: String| Opened {
        engine: Engine::cpu(),
        note: Some(format!("backend auto: running on the CPU ({reason})")),
    };
    Ok(match (choice, why) {
        // An explicit --backend cuda fails when CUDA cannot be used.
        (BackendChoice::Cuda, None) => Opened {
            engine: Engine::open(BackendChoice::Cuda, &opts)?,
            note: None,
        },
        (BackendChoice::Cuda, Some(w)) => match Engine::open(BackendChoice::Cuda, &opts) {
            Ok(engine) => Opened { engine, note: None },
            Err(e) => fallback(format!("{w} but {e}")),
        },
        (BackendChoice::Cpu, Some(w)) => fallback(w),
        (BackendChoice::Cpu, None) => Opened {
            engine: Engine::cpu(),
            note: None,
        },
        (BackendChoice::Auto, _) => {
            let engine = Engine::auto_with(&opts);
            let note = engine
                .fallback_reason()
                .map(|r| format!("backend auto: running on the CPU ({r})"));
            Opened { engine, note }
        }
    })
}

#[cfg(test)]
mod tests {
    /// `--help` of every subcommand says what each of its inputs is: no argument, flag or
    /// positional, without a help line.
    #[test]
    fn every_input_of_every_subcommand_has_help() {
        fn walk(c: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for a in c.get_arguments() {
                let id = a.get_id().as_str();
                if matches!(id, "help" | "version") {
                    continue;
                }
                if a.get_help().is_none_or(|h| h.to_string().trim().is_empty()) {
                    missing.push(format!("{path} {id}"));
                }
            }
            for s in c.get_subcommands() {
                if s.get_about().is_none() {
                    missing.push(format!("{path} {} (no about)", s.get_name()));
                }
                walk(s, &format!("{path} {}", s.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(
            &<super::Cli as clap::CommandFactory>::command(),
            "ctxprune",
            &mut missing,
        );
        assert!(missing.is_empty(), "inputs without help: {missing:?}");
    }
}
