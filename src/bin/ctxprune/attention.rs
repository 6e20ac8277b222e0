//! `ctxprune attention`: where an agent's attention goes (observation-masking.txt App. E).

use crate::{open_engine, print_out};
use ctxprune::attention::{self, figures, segment, tensors::TensorFile, Mass, Role, Segmentation};
use ctxprune::{limits, Error, Result};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

#[derive(clap::Subcommand)]
pub enum AttentionCmd {
    /// Cut a rendered prompt into (turn, role) token spans and find its reasoning steps,
    /// from the chat template's markers; prints the segmentation JSON.
    Segment(SegmentArgs),
    /// Attention mass by turn and role at every reasoning step, from Q/K tensors
    /// (safetensors) and a segmentation; prints a table, writes JSON and a heat map.
    Mass(MassArgs),
    /// The decay curves aggregated over many trajectories' masses (JSON from `attention
    /// mass --json`); prints a table, writes JSON and a PNG.
    Decay(DecayArgs),
    /// Time attention mass on seeded synthetic tensors (by default the benchmark shape:
    /// N = 32,768, 8 layers, 16 query heads over 4 key heads of 256, 50 steps); prints the
    /// median.
    Bench(BenchArgs),
}

#[derive(clap::Args)]
pub struct BenchArgs {
    /// Tokens.
    #[arg(long, default_value_t = 32_768)]
    n: usize,
    /// Hooked layers.
    #[arg(long, default_value_t = 8)]
    layers: usize,
    /// Query heads.
    #[arg(long, default_value_t = 16)]
    heads: usize,
    /// Key heads.
    #[arg(long, default_value_t = 4)]
    kv_heads: usize,
    /// Head dimension.
    #[arg(long, default_value_t = 256)]
    head_dim: usize,
    /// Reasoning steps (one per turn).
    #[arg(long, default_value_t = 50)]
    steps: usize,
    /// Timed runs (after one warm-up).
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Seed of the synthetic tensors.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// auto, cpu or cuda (the CTXPRUNE_BACKEND variable, cpu, cuda or auto, overrides auto).
    #[arg(long, default_value = "auto")]
    backend: String,
}

#[derive(clap::Args)]
pub struct SegmentArgs {
    /// The rendered prompt (UTF-8 text, as the chat template rendered it).
    #[arg(long)]
    prompt: PathBuf,
    /// The model's tokenizer.json.
    #[arg(long)]
    tokenizer: PathBuf,
    /// The chat template's markers: qwen.
    #[arg(long, default_value = "qwen")]
    template: String,
    /// Write the JSON here instead of stdout.
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct MassArgs {
    /// Q/K of the hooked layers: `layers.{l}.q` [N, H, d] and `layers.{l}.k` [N, G, d]
    /// (or 2-D with --head-dim), F32, F16 or BF16.
    #[arg(long)]
    tensors: PathBuf,
    /// The segmentation (JSON from `attention segment`).
    #[arg(long)]
    segments: PathBuf,
    /// Head dimension of 2-D tensors (else the file's __metadata__ head_dim).
    #[arg(long)]
    head_dim: Option<usize>,
    /// auto, cpu or cuda (the CTXPRUNE_BACKEND variable, cpu, cuda or auto, overrides auto).
    #[arg(long, default_value = "auto")]
    backend: String,
    /// Write every step's S^(r) (and span masses) as JSON here (the input of `attention decay`).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Draw the T × T heat map (App. E.4) as a PNG here.
    #[arg(long)]
    heatmap: Option<PathBuf>,
    /// The heat map's title.
    #[arg(
        long,
        default_value = "attention by turn: reasoning (lower), observations (upper)"
    )]
    title: String,
}

#[derive(clap::Args)]
pub struct DecayArgs {
    /// Masses (JSON from `attention mass --json`), one per trajectory.
    #[arg(required = true)]
    masses: Vec<PathBuf>,
    /// Write the curves as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Draw the curves (App. E.5) as a PNG here.
    #[arg(long)]
    png: Option<PathBuf>,
    /// The figure's title.
    #[arg(long, default_value = "attention by relative position of the past turn")]
    title: String,
}

pub fn run(cmd: AttentionCmd) -> Result<()> {
    match cmd {
        AttentionCmd::Segment(a) => run_segment(&a),
        AttentionCmd::Mass(a) => run_mass(&a),
        AttentionCmd::Decay(a) => run_decay(&a),
        AttentionCmd::Bench(a) => run_bench(&a),
    }
}

/// A text file through the file contract, at most `cap` bytes.
fn read(path: &Path, cap: u64) -> Result<String> {
    ctxprune::io::file::read_text(path, cap)
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })
}

fn json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

fn run_segment(a: &SegmentArgs) -> Result<()> {
    let template = segment::Template::by_name(&a.template)?;
    let prompt = read(&a.prompt, limits::CONFIG_FILE_BYTES)?;
    let tok = segment::load_tokenizer(&a.tokenizer)?;
    let seg = segment::segment(&prompt, &template, &tok).map_err(|e| Error::Format {
        path: a.prompt.clone(),
        msg: e.to_string(),
    })?;
    let text = json(&seg);
    match &a.out {
        Some(p) => write(p, &text)?,
        None => print_out(&format!("{text}\n"))?,
    }
    eprintln!(
        "{} tokens, {} turns, {} spans, {} reasoning steps",
        seg.n_tokens,
        seg.turns,
        seg.spans.len(),
        seg.steps.len()
    );
    Ok(())
}

fn run_mass(a: &MassArgs) -> Result<()> {
    let seg = Segmentation::from_json(&read(&a.segments, limits::CONFIG_FILE_BYTES)?, &a.segments)?;
    if seg.steps.is_empty() {
        return Err(Error::Format {
            path: a.segments.clone(),
            msg: "no reasoning steps (steps is empty)".into(),
        });
    }
    let mut file = TensorFile::open(&a.tensors, a.head_dim)?;
    let n = file.layout().n;
    if n != seg.n_tokens {
        return Err(Error::invalid(
            "--segments",
            format!(
                "{} segments {} tokens but {} holds {n} positions",
                a.segments.display(),
                seg.n_tokens,
                a.tensors.display()
            ),
        ));
    }
    let t0 = std::time::Instant::now();
    let qk = file.read(&seg.steps)?;
    let read_ms = t0.elapsed().as_secs_f64() * 1e3;
    let opened = open_engine(&a.backend)?;
    opened.print_note();
    let t1 = std::time::Instant::now();
    let mass = attention::mass(&opened.engine, &qk, &seg)?;
    let ms = t1.elapsed().as_secs_f64() * 1e3;
    print_out(&mass_table(&mass))?;
    eprintln!(
        "{} layers, {} heads over {} key heads of {}, {} keys, {} steps on {}: read {read_ms:.1} ms, mass {ms:.1} ms",
        qk.layers().len(),
        qk.heads(),
        qk.kv_heads(),
        qk.head_dim(),
        qk.n_keys(),
        qk.steps().len(),
        opened.engine.describe()
    );
    if let Some(p) = &a.json {
        write(p, &json(&mass))?;
    }
    if let Some(p) = &a.heatmap {
        figures::draw_heatmap(&mass, p, &a.title)?;
    }
    Ok(())
}

/// One line per step: its share per role summed over turns, split into its own turn and
/// the past.
fn mass_table(m: &Mass) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "step    pos  turn  reasoning(past/own)  observation(past/own)  tool_call  system   user  unassigned"
    );
    for (r, st) in m.steps.iter().enumerate() {
        let past = |role: Role| {
            st.s.iter()
                .take(st.turn)
                .map(|row| row[role.index()])
                .sum::<f64>()
        };
        let own = |role: Role| st.s.get(st.turn).map_or(0.0, |row| row[role.index()]);
        let all = |role: Role| st.s.iter().map(|row| row[role.index()]).sum::<f64>();
        let _ = writeln!(
            o,
            "{r:>4} {:>6} {:>5}  {:>8.4} / {:<8.4}   {:>8.4} / {:<8.4}    {:>8.4}  {:>6.4} {:>6.4}  {:>9.4}",
            st.pos,
            st.turn,
            past(Role::Reasoning),
            own(Role::Reasoning),
            past(Role::Observation),
            own(Role::Observation),
            all(Role::ToolCall),
            all(Role::System),
            all(Role::User),
            st.unassigned
        );
    }
    o
}

fn run_decay(a: &DecayArgs) -> Result<()> {
    let masses = a
        .masses
        .iter()
        .map(|p| {
            ctxprune::io::json::from_str::<Mass>(&read(p, limits::TEXT_FILE_BYTES)?).map_err(|e| {
                Error::Format {
                    path: p.clone(),
                    msg: format!("not a mass JSON (from `ctxprune attention mass --json`): {e}"),
                }
            })
        })
        .collect::<Result<Vec<_>>>()?;
    for (m, p) in masses.iter().zip(&a.masses) {
        m.check().map_err(|e| Error::Format {
            path: p.clone(),
            msg: e.to_string(),
        })?;
    }
    let d = figures::decay(&masses)?;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{} trajectories, {} steps with >= {} past turns ({} skipped), {} past-turn observations",
        masses.len(),
        d.steps,
        figures::MIN_PAST_TURNS,
        d.steps_skipped,
        d.observations
    );
    let _ = writeln!(
        o,
        "bin  rel_pos      n   reasoning(mean  cum%)   observation(mean  cum%)   tool_call(mean  cum%)"
    );
    let (re, ob, tc) = (
        &d.roles[Role::Reasoning.index()],
        &d.roles[Role::Observation.index()],
        &d.roles[Role::ToolCall.index()],
    );
    for b in 0..figures::BINS {
        let _ = writeln!(
            o,
            "{b:>3}  {:.2}-{:.2} {:>6}   {:>8.4} {:>6.1}     {:>8.4} {:>6.1}      {:>8.4} {:>6.1}",
            d.edges[b],
            d.edges[b + 1],
            re.count[b],
            re.mean[b],
            100.0 * re.cumulative[b],
            ob.mean[b],
            100.0 * ob.cumulative[b],
            tc.mean[b],
            100.0 * tc.cumulative[b]
        );
    }
    print_out(&o)?;
    if let Some(p) = &a.json {
        write(p, &json(&d))?;
    }
    if let Some(p) = &a.png {
        figures::draw_decay(&d, p, &a.title)?;
    }
    Ok(())
}

fn run_bench(a: &BenchArgs) -> Result<()> {
    // Every size through the size guard, and the tensors they make within the byte
    // budget, before anything is allocated.
    limits::size("--n", a.n, limits::MAX_TOKENS)?;
    limits::size("--layers", a.layers, limits::MAX_LAYERS)?;
    limits::size("--heads", a.heads, limits::MAX_WIDTH)?;
    limits::size("--kv-heads", a.kv_heads, limits::MAX_WIDTH)?;
    limits::size("--head-dim", a.head_dim, limits::MAX_WIDTH)?;
    limits::size("--steps", a.steps, limits::MAX_TOKENS)?;
    limits::size("--repeat", a.repeat, 1_000_000)?;
    limits::bytes(
        "--n",
        &[
            ("--layers", a.layers),
            ("--n", a.n),
            ("(--heads + --kv-heads)", a.heads + a.kv_heads),
            ("--head-dim", a.head_dim),
        ],
        4,
    )?;
    let opened = open_engine(&a.backend)?;
    opened.print_note();
    let t = std::time::Instant::now();
    let (qk, seg) = attention::synthetic(a.n, a.layers, a.heads, a.kv_heads, a.head_dim, a.steps, a.seed)?;
    eprintln!("synthetic tensors in {:.1} s", t.elapsed().as_secs_f64());
    let mut v = Vec::with_capacity(a.repeat);
    for i in 0..=a.repeat {
        let t = std::time::Instant::now();
        attention::mass(&opened.engine, &qk, &seg)?;
        if i > 0 {
            v.push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    v.sort_by(f64::total_cmp);
    print_out(&format!(
        "attention mass N={} L={} H={} G={} d={} steps={} keys={} on {}: median {:.1} ms over {} runs (min {:.1}, max {:.1})\n",
        a.n,
        a.layers,
        a.heads,
        a.kv_heads,
        a.head_dim,
        a.steps,
        qk.n_keys(),
        opened.engine.describe(),
        v[v.len() / 2],
        v.len(),
        v[0],
        v[v.len() - 1]
    ))
}
