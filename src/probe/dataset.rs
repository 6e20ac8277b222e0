//! The probe's dataset: every labelled trajectory traced, its prefixes sampled, their
//! features and targets computed (App. D.2, D.3), from a directory of files ([`build`])
//! or from trajectories already in memory ([`build_from`]).

use super::features;
use super::labels::Label;
use super::Options;
use super::Trace;
use crate::error::{Error, Result};
use crate::rng::Rng;
use crate::tokens::TokenCounter;
use serde::Serialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// What a query's target is computed against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TargetKind {
    /// Evidence SNR against the label's gold URLs.
    GoldSnr,
    /// Citation proxy against the label's `cited` list.
    CitedList,
    /// Citation proxy against the URLs of the final assistant message.
    FinalAnswer,
}

/// One query with its sampled prefixes.
#[derive(Clone, Debug)]
pub struct Query {
    /// The id.
    pub id: String,
    /// The rescue label.
    pub rescued: bool,
    /// The target's kind.
    pub target: TargetKind,
    /// The size of `C` for a citation proxy (0 for the gold SNR).
    pub cited: usize,
    /// The trace.
    pub trace: Trace,
    /// Sampled prefixes (sorted, 1-based).
    pub prefixes: Vec<usize>,
    /// Their features.
    pub features: Vec<[f64; 10]>,
    /// Their targets.
    pub y: Vec<f64>,
}

/// A query left out, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Skipped {
    /// The id.
    pub id: String,
    /// Why.
    pub reason: String,
}

/// A tool-call turn with no answered call: not counted as a turn.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct UnansweredTurn {
    /// The query.
    pub id: String,
    /// Index of its assistant message in the trajectory's message list (0-based).
    pub message: usize,
    /// Its calls' tool names.
    pub tools: Vec<String>,
    /// Whether it is the trajectory's last tool-call turn.
    pub last: bool,
}

/// A URL-like string that did not parse.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BadUrl {
    /// The query.
    pub id: String,
    /// Tool-observation turn (1-based, as prefixes count them), 0 for the final answer.
    pub turn: usize,
    /// The string.
    pub url: String,
    /// Why it was refused.
    pub why: String,
}

/// The queries, before any fit.
#[derive(Clone, Debug)]
pub struct Dataset {
    /// Queries with at least one turn, in label order.
    pub queries: Vec<Query>,
    /// Queries left out (no tool-observation turns).
    pub skipped: Vec<Skipped>,
    /// Tool-call turns with no answered call (not counted as turns), of every query,
    /// skipped or not.
    pub unanswered: Vec<UnansweredTurn>,
    /// `.json` files under the trajectories directory that no label names.
    pub unlabelled: Vec<String>,
    /// Unparsable URL-like strings, skipped.
    pub bad_urls: Vec<BadUrl>,
}

/// `.json` files under `dir` (up to 8 levels, symbolic links to directories not
/// followed), as paths.
fn json_files(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) -> Result<()> {
    let rd = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    for entry in rd {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let p = entry.path();
        let ft = entry.file_type().map_err(|e| Error::io(&p, e))?;
        if ft.is_dir() {
            if depth < 8 {
                json_files(&p, depth + 1, out)?;
            }
        } else if p.extension().is_some_and(|e| e.eq_ignore_ascii_case("json")) {
            out.push(p);
        }
    }
    Ok(())
}

impl Dataset {
    fn empty() -> Dataset {
        Dataset {
            queries: Vec::new(),
            skipped: Vec::new(),
            unanswered: Vec::new(),
            unlabelled: Vec::new(),
            bad_urls: Vec::new(),
        }
    }

    /// Traces one labelled trajectory, samples its prefixes and computes their features
    /// and targets; a trajectory with no tool-observation turns is skipped (reported).
    fn add(
        &mut self,
        l: &Label,
        traj: &crate::mask::Trajectory,
        opts: &Options,
        kinds: &features::ToolKinds,
        counter: &dyn TokenCounter,
    ) -> Result<()> {
        let trace = features::trace(traj, kinds, counter);
        self.bad_urls.extend(trace.bad_urls.iter().map(|b| BadUrl {
            id: l.id.clone(),
            turn: b.turn,
            url: b.url.clone(),
            why: b.why.clone(),
        }));
        self.unanswered
            .extend(trace.unanswered.iter().map(|u| UnansweredTurn {
                id: l.id.clone(),
                message: u.message,
                tools: u.tools.clone(),
                last: u.last,
            }));
        if trace.is_empty() {
            let reason = match trace.unanswered.len() {
                0 => "no tool-observation turns".to_string(),
                1 => "no tool-observation turns (its one tool-call turn was never answered)".to_string(),
                m => format!("no tool-observation turns (none of its {m} tool-call turns was answered)"),
            };
            self.skipped.push(Skipped {
                id: l.id.clone(),
                reason,
            });
            return Ok(());
        }
        let mut rng = Rng::new(features::query_seed(opts.seed, &l.id));
        let prefixes = features::sample_prefixes(trace.len(), opts.prefixes, &mut rng);
        let all = features::all_prefix_features(&trace);
        let feats: Vec<[f64; 10]> = prefixes.iter().map(|&t| all[t - 1]).collect();
        let (target, cited_urls) = match (&l.gold, &l.cited) {
            (Some(_), _) => (TargetKind::GoldSnr, Vec::new()),
            (None, Some(c)) => (TargetKind::CitedList, c.clone()),
            (None, None) => (TargetKind::FinalAnswer, trace.answer_urls.clone()),
        };
        let y = prefixes
            .iter()
            .map(|&t| match &l.gold {
                Some(g) => features::snr_target(&trace, t, g),
                None => Ok(features::citation_target(&trace, t, &cited_urls)),
            })
            .collect::<Result<Vec<f64>>>()?;
        self.queries.push(Query {
            id: l.id.clone(),
            rescued: l.rescued,
            target,
            cited: cited_urls.len(),
            trace,
            prefixes,
            features: feats,
            y,
        });
        Ok(())
    }
}

/// Reads every labelled trajectory under `dir`, traces it, samples its prefixes and
/// computes their features and targets. `labels_path` names the labels in errors: a
/// label naming a file that does not exist, or the same file as another label, is an
/// error naming its line and the field `trajectory`; a trajectory that does not parse is
/// an error naming the trajectory file. A trajectory with no tool-observation turns is
/// skipped (reported); tool-call turns with no answered call are not counted (reported);
/// `.json` files no label names are reported.
pub fn build(
    dir: &Path,
    labels_path: &Path,
    labels: &[Label],
    opts: &Options,
    counter: &dyn TokenCounter,
) -> Result<Dataset> {
    opts.check()?;
    // The directory contract: a FIFO or a device given as the directory is refused by
    // what it is; the trajectories inside go through the file contract.
    crate::io::file::dir(dir).map_err(|e| match e {
        Error::Format { .. } => Error::invalid("trajectories", e.to_string()),
        e => e,
    })?;
    let kinds = opts.tools();
    let mut named: HashMap<PathBuf, usize> = HashMap::new();
    let mut ds = Dataset::empty();
    for l in labels {
        let at = |msg: String| {
            Error::format(
                labels_path,
                format!("line {}: field \"trajectory\": {msg}", l.line),
            )
        };
        let path = dir.join(&l.trajectory);
        if !crate::io::file::exists(&path).unwrap_or(false) {
            return Err(at(format!(
                "{} does not exist (the path is relative to the trajectories directory {})",
                path.display(),
                dir.display()
            )));
        }
        let canon = std::fs::canonicalize(&path).map_err(|e| Error::io(&path, e))?;
        if let Some(first) = named.insert(canon, l.line) {
            return Err(at(format!(
                "'{}' is also the trajectory of line {first}",
                l.trajectory
            )));
        }
        let text = crate::io::file::read_text(&path, crate::limits::TEXT_FILE_BYTES)?;
        let traj =
            crate::mask::Trajectory::parse(&text, None).map_err(|e| Error::format(&path, e.to_string()))?;
        ds.add(l, &traj, opts, &kinds, counter)?;
    }
    let mut files = Vec::new();
    json_files(dir, 0, &mut files)?;
    let labels_canon = std::fs::canonicalize(labels_path).ok();
    let mut unlabelled: Vec<String> = files
        .into_iter()
        .filter(|p| {
            let c = std::fs::canonicalize(p).ok();
            c.as_ref()
                .is_none_or(|c| !named.contains_key(c) && Some(c) != labels_canon.as_ref())
        })
        .map(|p| p.strip_prefix(dir).unwrap_or(&p).display().to_string())
        .collect();
    unlabelled.sort();
    ds.unlabelled = unlabelled;
    Ok(ds)
}

/// [`build`] over labelled trajectories already in memory ([`super::labels::parse_inline`]):
/// the same traces, prefixes, features and targets, in the given order; nothing is
/// unlabelled.
pub fn build_from(
    items: &[(Label, crate::mask::Trajectory)],
    opts: &Options,
    counter: &dyn TokenCounter,
) -> Result<Dataset> {
    opts.check()?;
    let kinds = opts.tools();
    let mut ds = Dataset::empty();
    for (l, traj) in items {
        ds.add(l, traj, opts, &kinds, counter)?;
    }
    Ok(ds)
}
