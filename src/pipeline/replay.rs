//! Replaying a logged research run through the driver: the subqueries an agent issued,
//! what it retrieved for each and which subqueries each one spawned, re-run under other
//! per-stage policies to see what they would have kept and what they would have saved
//! (`ctxprune pipeline`).
//!
//! ## The log: `run.jsonl`
//!
//! One JSON object per line (blank lines are skipped; lines are counted from 1), each
//! with a `"type"`:
//!
//! - `{"type":"query","text":"...","embedding":[...]}`: the root query, exactly once.
//! - `{"type":"subquery","id":"s1","parent":null,"depth":0,"text":"...","tokens":12,"embedding":[...]}`:
//!   a subquery. `parent` is `null` for the subqueries the query was decomposed into, or
//!   the id of the subquery that spawned it; `depth` is 0 for `parent: null` and the
//!   parent's depth + 1 otherwise. Ids are unique; a parent may be written before or
//!   after its children, but the chain of parents must end at `null` (no cycles).
//!   `tokens` is what issuing the subquery costs (the Pre-Retrieval accounting).
//! - `{"type":"item","subquery":"s1","text":"...","tokens":250,"embedding":[...]}`: an
//!   item retrieved for subquery `s1`; a subquery's items are in retrieval order (file
//!   order). Its id is `s1#0`, `s1#1`, ... (its position among `s1`'s items).
//!
//! `tokens` is a number > 0 and at most [`crate::limits::MAX_TOKEN_COUNT`] (2^53).
//! Every line is one JSON object read by the one JSON reader: a repeated key is an error
//! naming it and the line. `embedding` is optional on every record, but every
//! record needs one: those without it are embedded by the caller's text encoder (an
//! [`Encoder`]), and without an encoder a missing embedding is an error. All embeddings
//! (given or encoded) share one dimension; none may be all zeros or hold a value that is
//! not finite or does not fit in `f32`. Every field but `embedding` is required, and a
//! field the record's type does not have is an error: nothing is ignored. Every error
//! names the file and the line.
//!
//! ## The replay ([`Replay`], a [`Research`])
//!
//! - `decompose`: the subqueries with `parent: null`, in file order.
//! - `retrieve(s)`: `s`'s logged items.
//! - `expand(s, kept)`: `s`'s logged children in file order, but only when Post-Retrieval
//!   kept at least one of `s`'s items: pruning every item a subquery retrieved stops its
//!   branch (Post-Retrieval "stops low-value recursive expansion", App. B.4). A subquery
//!   with no logged items still expands: there was nothing to prune.
//!
//! A subquery pruned at Pre-Retrieval is never retrieved, so none of its subtree is
//! explored; [`Trace`] says which subqueries and items each policy kept.
//!
//! ```
//! use ctxprune::pipeline::{replay::RunLog, Pipeline, Policy};
//! use ctxprune::select::{Method, Mode, SelectConfig};
//! let log = RunLog::parse(concat!(
//!     r#"{"type":"query","text":"q","embedding":[1,1]}"#, "\n",
//!     r#"{"type":"subquery","id":"a","parent":null,"depth":0,"text":"a","tokens":5,"embedding":[1,0]}"#, "\n",
//!     r#"{"type":"item","subquery":"a","text":"x","tokens":100,"embedding":[1,0]}"#, "\n",
//!     r#"{"type":"subquery","id":"b","parent":"a","depth":1,"text":"b","tokens":5,"embedding":[0,1]}"#, "\n",
//!     r#"{"type":"item","subquery":"b","text":"y","tokens":50,"embedding":[0,1]}"#, "\n",
//!     r#"{"type":"item","subquery":"b","text":"x again","tokens":80,"embedding":[1,0]}"#, "\n",
//! ), "run.jsonl".as_ref(), None)?;
//! // Post-Retrieval: keep an item when its squared residual off the context is >= 0.5.
//! let gate = SelectConfig::new(Method::Grn).mode(Mode::Gate).threshold(0.5);
//! let out = log.replay(Pipeline { post_retrieval: Policy::Scorer(gate), ..Pipeline::default() })?;
//! assert_eq!(out.trace.explored, ["a", "b"]);
//! assert_eq!(out.trace.items_kept, ["a#0", "b#0"]);
//! assert_eq!(out.trace.items_pruned, ["b#1"]);       // "x again" repeats a#0
//! assert_eq!(out.report.post_retrieval.tokens_kept, 150.0);
//! # Ok::<(), ctxprune::Error>(())
//! ```

use super::{run, Item, Node, Pipeline, Query, Report, Research};
use crate::embeddings::Embeddings;
use crate::error::{Error, Result};
use crate::io::json_type;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// A text encoder: one embedding row per text, in the texts' order. The replay calls it
/// once, with the texts of every record that has no `embedding`.
pub type Encoder<'a> = &'a dyn Fn(&[&str]) -> Result<Embeddings>;

/// A subquery of the log.
#[derive(Clone, Debug, PartialEq)]
pub struct Subquery {
    /// Its id (unique in the log).
    pub id: String,
    /// The subquery that spawned it; `None` for the query's decomposition.
    pub parent: Option<String>,
    /// Depth in the tree (0 for `parent: None`).
    pub depth: usize,
    /// Its text.
    pub text: String,
    /// Tokens it costs to issue.
    pub tokens: f64,
    /// Its embedding (given, or from the encoder).
    pub embedding: Vec<f32>,
    /// The line of the log it is on (from 1).
    pub line: usize,
}

/// A retrieved item of the log.
#[derive(Clone, Debug, PartialEq)]
pub struct LoggedItem {
    /// `SUBQUERY#K`: its subquery's id and its position among that subquery's items.
    pub id: String,
    /// The id of the subquery it was retrieved for.
    pub subquery: String,
    /// Its text.
    pub text: String,
    /// Its token count (> 0).
    pub tokens: f64,
    /// Its embedding (given, or from the encoder).
    pub embedding: Vec<f32>,
    /// The line of the log it is on (from 1).
    pub line: usize,
}

/// A logged research run, checked: the query, the tree of subqueries and their items.
#[derive(Clone, Debug)]
pub struct RunLog {
    source: PathBuf,
    query: Query,
    subqueries: Vec<Subquery>,
    items: Vec<LoggedItem>,
    dim: usize,
    roots: Vec<usize>,
    children: Vec<Vec<usize>>,
    items_of: Vec<Vec<usize>>,
    by_id: HashMap<String, usize>,
    item_by_id: HashMap<String, usize>,
}

/// What a replay kept and pruned, by id.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Trace {
    /// Subqueries retrieved, in the order the driver retrieved them.
    pub explored: Vec<String>,
    /// Subqueries pruned at Pre-Retrieval, in the order they were judged.
    pub pruned: Vec<String>,
    /// Subqueries kept at Pre-Retrieval but never retrieved because `max_nodes` stopped
    /// exploration, in the order they were generated.
    pub queued: Vec<String>,
    /// Explored subqueries with logged children that did not expand because
    /// Post-Retrieval pruned every one of their items.
    pub stopped: Vec<String>,
    /// Subqueries never generated (an ancestor was pruned, stopped or not explored), in
    /// file order.
    pub not_reached: Vec<String>,
    /// Items kept at Post-Retrieval, in the order they entered the context.
    pub items_kept: Vec<String>,
    /// Items pruned at Post-Retrieval, in retrieval order.
    pub items_pruned: Vec<String>,
}

impl Trace {
    /// The trace as JSON, one array of ids per field, under the field names.
    #[must_use]
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "explored": self.explored,
            "pruned": self.pruned,
            "queued": self.queued,
            "stopped": self.stopped,
            "not_reached": self.not_reached,
            "items_kept": self.items_kept,
            "items_pruned": self.items_pruned,
        })
    }
}

/// The outcome of [`RunLog::replay`].
#[derive(Clone, Debug)]
pub struct Replayed {
    /// The driver's accounting; its context items carry the log's item ids.
    pub report: Report,
    /// Which subqueries and items were kept and pruned.
    pub trace: Trace,
}

/// One record's fields, with errors that name the file, the line and the field.
struct Fields<'a> {
    obj: &'a Map<String, Value>,
    source: &'a Path,
    line: usize,
}

impl Fields<'_> {
    fn err(&self, msg: impl std::fmt::Display) -> Error {
        Error::format(self.source, format!("line {}: {msg}", self.line))
    }

    /// Refuses a field the record's type does not have.
    fn only(&self, kind: &str, allowed: &[&str]) -> Result<()> {
        match self.obj.keys().find(|k| !allowed.contains(&k.as_str())) {
            Some(k) => Err(self.err(format!(
                "unknown field \"{k}\" (\"{kind}\" records have {})",
                allowed.join(", ")
            ))),
            None => Ok(()),
        }
    }

    fn get(&self, key: &str) -> Result<&Value> {
        self.obj
            .get(key)
            .ok_or_else(|| self.err(format!("missing \"{key}\"")))
    }

    fn string(&self, key: &str) -> Result<String> {
        match self.get(key)? {
            Value::String(s) => Ok(s.clone()),
            v => Err(self.err(format!("\"{key}\" is {}, not a string", json_type(v)))),
        }
    }

    /// A token count: finite, `> 0` and at most [`crate::limits::MAX_TOKEN_COUNT`], so the
    /// run's sums of tokens stay finite (an overflow there could not name the line).
    fn tokens(&self) -> Result<f64> {
        const MAX: u64 = crate::limits::MAX_TOKEN_COUNT;
        match self.get("tokens")? {
            Value::Number(n) => match n.as_f64() {
                Some(x) if x.is_finite() && x > MAX as f64 => Err(self.err(format!(
                    "\"tokens\" is {x:e}, above the largest accepted token count {MAX}"
                ))),
                Some(x) if x.is_finite() && x > 0.0 => Ok(x),
                _ => Err(self.err(format!("\"tokens\" must be a finite number > 0, got {n}"))),
            },
            v => Err(self.err(format!("\"tokens\" is {}, not a number", json_type(v)))),
        }
    }

    /// The embedding if the record has one: non-empty, every value finite and an `f32`,
    /// not all zeros.
    fn embedding(&self) -> Result<Option<Vec<f32>>> {
        let Some(v) = self.obj.get("embedding") else {
            return Ok(None);
        };
        let out = crate::io::json_f32_array(v).map_err(|m| self.err(format!("\"embedding\" {m}")))?;
        check_nonzero(&out).map_err(|m| self.err(m))?;
        Ok(Some(out))
    }
}

fn check_nonzero(v: &[f32]) -> std::result::Result<(), String> {
    if v.iter().all(|&x| x == 0.0) {
        Err("embedding is all zeros (zero norm: it has no direction to compare)".into())
    } else {
        Ok(())
    }
}

/// Where a record without an embedding waits for the encoder.
enum Slot {
    Query,
    Subquery(usize),
    Item(usize),
}

impl RunLog {
    /// Reads and checks a log (format in the module docs); `encoder` embeds the records
    /// that have no `embedding`.
    pub fn load(path: &Path, encoder: Option<Encoder<'_>>) -> Result<RunLog> {
        let text = crate::io::file::read_text(path, crate::limits::TEXT_FILE_BYTES)?;
        Self::parse(&text, path, encoder)
    }

    /// Checks a log's text; `source` names it in errors.
    pub fn parse(text: &str, source: &Path, encoder: Option<Encoder<'_>>) -> Result<RunLog> {
        let mut query: Option<(Query, usize)> = None;
        let mut subqueries: Vec<Subquery> = Vec::new();
        let mut items: Vec<LoggedItem> = Vec::new();
        let mut by_id: HashMap<String, usize> = HashMap::new();
        let mut missing: Vec<(usize, Slot)> = Vec::new();
        // The first given embedding fixes the dimension: (dim, line).
        let mut dim: Option<(usize, usize)> = None;
        for (ln, raw) in text.lines().enumerate() {
            let line = ln + 1;
            let raw = raw.trim();
            if raw.is_empty() {
                continue;
            }
            let at = |msg: String| Error::format(source, format!("line {line}: {msg}"));
            let v = crate::io::json::value_str(raw).map_err(|e| at(format!("invalid JSON: {e}")))?;
            let Value::Object(obj) = &v else {
                return Err(at(format!("expected a JSON object, got {}", json_type(&v))));
            };
            let f = Fields { obj, source, line };
            let kind = f.string("type")?;
            let embedding = f.embedding()?;
            if let Some(e) = &embedding {
                match dim {
                    None => dim = Some((e.len(), line)),
                    Some((d, l)) if d != e.len() => {
                        return Err(at(format!(
                        "embedding has {} values, but line {l}'s has {d} (one dimension for the whole run)",
                        e.len()
                    )))
                    }
                    Some(_) => {}
                }
            }
            match kind.as_str() {
                "query" => {
                    f.only("query", &["type", "text", "embedding"])?;
                    if let Some((_, first)) = &query {
                        return Err(at(format!(
                            "a second \"query\" record (the first is on line {first}; a run has one)"
                        )));
                    }
                    let text = f.string("text")?;
                    if embedding.is_none() {
                        missing.push((line, Slot::Query));
                    }
                    query = Some((Query::new(&text, embedding.unwrap_or_default()), line));
                }
                "subquery" => {
                    f.only(
                        "subquery",
                        &["type", "id", "parent", "depth", "text", "tokens", "embedding"],
                    )?;
                    let id = f.string("id")?;
                    if id.is_empty() {
                        return Err(at("\"id\" is empty".into()));
                    }
                    let parent = match f.get("parent")? {
                        Value::Null => None,
                        Value::String(p) => Some(p.clone()),
                        v => {
                            return Err(at(format!(
                                "\"parent\" is {}, not null or a subquery id",
                                json_type(v)
                            )))
                        }
                    };
                    let depth = match f.get("depth")? {
                        Value::Number(n) => n
                            .as_u64()
                            .and_then(|d| usize::try_from(d).ok())
                            .ok_or_else(|| at(format!("\"depth\" must be an integer >= 0, got {n}")))?,
                        v => return Err(at(format!("\"depth\" is {}, not an integer", json_type(v)))),
                    };
                    let text = f.string("text")?;
                    let tokens = f.tokens()?;
                    if let Some(&first) = by_id.get(&id) {
                        return Err(at(format!(
                            "duplicate subquery id \"{id}\" (first on line {})",
                            subqueries[first].line
                        )));
                    }
                    by_id.insert(id.clone(), subqueries.len());
                    if embedding.is_none() {
                        missing.push((line, Slot::Subquery(subqueries.len())));
                    }
                    subqueries.push(Subquery {
                        id,
                        parent,
                        depth,
                        text,
                        tokens,
                        embedding: embedding.unwrap_or_default(),
                        line,
                    });
                }
                "item" => {
                    f.only("item", &["type", "subquery", "text", "tokens", "embedding"])?;
                    let subquery = f.string("subquery")?;
                    let text = f.string("text")?;
                    let tokens = f.tokens()?;
                    if embedding.is_none() {
                        missing.push((line, Slot::Item(items.len())));
                    }
                    items.push(LoggedItem {
                        id: String::new(),
                        subquery,
                        text,
                        tokens,
                        embedding: embedding.unwrap_or_default(),
                        line,
                    });
                }
                other => return Err(at(format!("\"type\" is \"{other}\" (query, subquery or item)"))),
            }
        }
        let (mut query, _) = query.ok_or_else(|| {
            Error::format(
                source,
                "no \"query\" record (a run has one line {\"type\":\"query\",\"text\":...})",
            )
        })?;

        // Records without an embedding: the encoder's, in one call.
        let dim = if missing.is_empty() {
            // The query has an embedding, so some record fixed the dimension.
            dim.map_or(query.embedding.len(), |(d, _)| d)
        } else {
            let Some(enc) = encoder else {
                return Err(Error::format(
                    source,
                    format!(
                        "line {}: no \"embedding\", and no text encoder was given to compute one (give \"embedding\" on every record, or a text encoder: ctxprune pipeline --model DIR)",
                        missing[0].0
                    ),
                ));
            };
            let texts: Vec<&str> = missing
                .iter()
                .map(|(_, s)| match s {
                    Slot::Query => query.text.as_str(),
                    Slot::Subquery(i) => subqueries[*i].text.as_str(),
                    Slot::Item(i) => items[*i].text.as_str(),
                })
                .collect();
            let e = enc(&texts)?;
            if e.rows() != texts.len() {
                return Err(Error::format(
                    source,
                    format!(
                        "the text encoder returned {} embeddings for {} texts",
                        e.rows(),
                        texts.len()
                    ),
                ));
            }
            let d = dim.map_or(e.dim(), |(d, _)| d);
            for (k, (line, slot)) in missing.iter().enumerate() {
                let at = |msg: String| Error::format(source, format!("line {line}: {msg}"));
                let row = e.row(k).to_vec();
                if row.len() != d {
                    let (_, l) = dim.unwrap_or((d, *line));
                    return Err(at(format!(
                        "the text encoder's embedding has {} values, but line {l}'s has {d} (one dimension for the whole run)",
                        row.len()
                    )));
                }
                if let Some(j) = row.iter().position(|x| !x.is_finite()) {
                    return Err(at(format!(
                        "the text encoder's embedding[{j}] is {} (not finite)",
                        row[j]
                    )));
                }
                check_nonzero(&row).map_err(|m| at(format!("the text encoder's {m}")))?;
                match slot {
                    Slot::Query => query.embedding = row,
                    Slot::Subquery(i) => subqueries[*i].embedding = row,
                    Slot::Item(i) => items[*i].embedding = row,
                }
            }
            d
        };

        // The tree: parents exist, no cycles, depths agree.
        let n = subqueries.len();
        let parent_of: Vec<Option<usize>> = subqueries
            .iter()
            .map(|s| match &s.parent {
                None => Ok(None),
                Some(p) => by_id.get(p).copied().map(Some).ok_or_else(|| {
                    Error::format(
                        source,
                        format!(
                            "line {}: parent \"{p}\" is not the id of any subquery in this file",
                            s.line
                        ),
                    )
                }),
            })
            .collect::<Result<_>>()?;
        // Cycles, in one pass: walk up from each subquery not yet seen until a root, a
        // subquery already cleared, or one on the current walk (a cycle).
        let (unseen, walking, cleared) = (0u8, 1u8, 2u8);
        let mut state = vec![unseen; n];
        for i in 0..n {
            let mut path = Vec::new();
            let mut at = Some(i);
            while let Some(j) = at {
                if state[j] == cleared {
                    break;
                }
                if state[j] == walking {
                    // The cycle is the path from j on; name it from its first line.
                    let cycle = &path[path.iter().position(|&p| p == j).unwrap_or(0)..];
                    let k = cycle
                        .iter()
                        .position(|&c| c == *cycle.iter().min().unwrap_or(&j))
                        .unwrap_or(0);
                    let mut names: Vec<&str> = cycle[k..]
                        .iter()
                        .chain(&cycle[..k])
                        .map(|&c| subqueries[c].id.as_str())
                        .collect();
                    let first = &subqueries[cycle[k]];
                    let len = names.len();
                    if len > 8 {
                        names.truncate(4);
                        names.push("...");
                    }
                    names.push(first.id.as_str());
                    return Err(Error::format(
                        source,
                        format!(
                            "line {}: subquery \"{}\" is its own ancestor (parents {}: a cycle of {len})",
                            first.line,
                            first.id,
                            names.join(" -> ")
                        ),
                    ));
                }
                state[j] = walking;
                path.push(j);
                at = parent_of[j];
            }
            path.into_iter().for_each(|j| state[j] = cleared);
        }
        for (i, s) in subqueries.iter().enumerate() {
            let want = parent_of[i].map_or(0, |p| subqueries[p].depth + 1);
            if s.depth != want {
                let why = match parent_of[i] {
                    None => "a subquery with parent null has depth 0".to_string(),
                    Some(p) => format!(
                        "its parent \"{}\" (line {}) has depth {}",
                        subqueries[p].id, subqueries[p].line, subqueries[p].depth
                    ),
                };
                return Err(Error::format(
                    source,
                    format!(
                        "line {}: \"depth\" is {}, but {why}, so it must be {want}",
                        s.line, s.depth
                    ),
                ));
            }
        }
        let mut roots = Vec::new();
        let mut children = vec![Vec::new(); n];
        for (i, p) in parent_of.iter().enumerate() {
            match p {
                None => roots.push(i),
                Some(p) => children[*p].push(i),
            }
        }
        let mut items_of = vec![Vec::new(); n];
        let mut item_by_id = HashMap::new();
        for (k, it) in items.iter_mut().enumerate() {
            let &s = by_id.get(&it.subquery).ok_or_else(|| {
                Error::format(
                    source,
                    format!(
                        "line {}: subquery \"{}\" is not the id of any subquery in this file",
                        it.line, it.subquery
                    ),
                )
            })?;
            it.id = format!("{}#{}", it.subquery, items_of[s].len());
            items_of[s].push(k);
            item_by_id.insert(it.id.clone(), k);
        }
        Ok(RunLog {
            source: source.to_path_buf(),
            query,
            subqueries,
            items,
            dim,
            roots,
            children,
            items_of,
            by_id,
            item_by_id,
        })
    }

    /// The file the log was read from (or the name given to [`RunLog::parse`]).
    #[must_use]
    pub fn source(&self) -> &Path {
        &self.source
    }

    /// The root query.
    #[must_use]
    pub fn query(&self) -> &Query {
        &self.query
    }

    /// The subqueries, in file order.
    #[must_use]
    pub fn subqueries(&self) -> &[Subquery] {
        &self.subqueries
    }

    /// The items, in file order.
    #[must_use]
    pub fn items(&self) -> &[LoggedItem] {
        &self.items
    }

    /// The dimension of every embedding of the run.
    #[must_use]
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Runs the driver over the log with `p`'s policies.
    pub fn replay(&self, p: Pipeline) -> Result<Replayed> {
        let mut r = Replay::new(self);
        let report = run(&mut r, &self.query, p)?;
        Ok(Replayed {
            report,
            trace: r.trace(),
        })
    }
}

/// The log as the driver's [`Research`] callbacks (rules in the module docs), recording
/// what the driver asked for.
#[derive(Debug)]
pub struct Replay<'a> {
    log: &'a RunLog,
    generated: Vec<usize>,
    is_generated: Vec<bool>,
    explored: Vec<usize>,
    is_explored: Vec<bool>,
    pruned: Vec<usize>,
    is_pruned: Vec<bool>,
    stopped: Vec<usize>,
    kept: Vec<usize>,
    is_kept: Vec<bool>,
}

impl<'a> Replay<'a> {
    /// A replay of `log` that has not started.
    #[must_use]
    pub fn new(log: &'a RunLog) -> Self {
        let n = log.subqueries.len();
        Replay {
            log,
            generated: Vec::new(),
            is_generated: vec![false; n],
            explored: Vec::new(),
            is_explored: vec![false; n],
            pruned: Vec::new(),
            is_pruned: vec![false; n],
            stopped: Vec::new(),
            kept: Vec::new(),
            is_kept: vec![false; log.items.len()],
        }
    }

    /// What happened so far, by id.
    #[must_use]
    pub fn trace(&self) -> Trace {
        let ids =
            |v: &[usize]| -> Vec<String> { v.iter().map(|&i| self.log.subqueries[i].id.clone()).collect() };
        let queued: Vec<usize> = self
            .generated
            .iter()
            .copied()
            .filter(|&i| !self.is_explored[i] && !self.is_pruned[i])
            .collect();
        let not_reached: Vec<usize> = (0..self.log.subqueries.len())
            .filter(|&i| !self.is_generated[i])
            .collect();
        Trace {
            explored: ids(&self.explored),
            pruned: ids(&self.pruned),
            queued: ids(&queued),
            stopped: ids(&self.stopped),
            not_reached: ids(&not_reached),
            items_kept: self.kept.iter().map(|&k| self.log.items[k].id.clone()).collect(),
            items_pruned: self
                .explored
                .iter()
                .flat_map(|&s| self.log.items_of[s].iter())
                .filter(|&&k| !self.is_kept[k])
                .map(|&k| self.log.items[k].id.clone())
                .collect(),
        }
    }

    fn index(&self, n: &Node) -> Result<usize> {
        self.log.by_id.get(&n.id).copied().ok_or_else(|| {
            Error::invalid(
                "node",
                format!("\"{}\" is not a subquery of {}", n.id, self.log.source.display()),
            )
        })
    }

    fn nodes(&mut self, idx: &[usize]) -> Vec<Node> {
        idx.iter()
            .map(|&i| {
                self.generated.push(i);
                self.is_generated[i] = true;
                let s = &self.log.subqueries[i];
                Node {
                    id: s.id.clone(),
                    text: s.text.clone(),
                    embedding: s.embedding.clone(),
                    tokens: s.tokens,
                    depth: s.depth,
                }
            })
            .collect()
    }
}

impl Research for Replay<'_> {
    fn decompose(&mut self, _: &Query) -> Result<Vec<Node>> {
        let roots = self.log.roots.clone();
        Ok(self.nodes(&roots))
    }

    fn retrieve(&mut self, node: &Node) -> Result<Vec<Item>> {
        let i = self.index(node)?;
        self.explored.push(i);
        self.is_explored[i] = true;
        Ok(self.log.items_of[i]
            .iter()
            .map(|&k| {
                let it = &self.log.items[k];
                Item {
                    id: it.id.clone(),
                    text: it.text.clone(),
                    embedding: it.embedding.clone(),
                    tokens: it.tokens,
                }
            })
            .collect())
    }

    fn expand(&mut self, node: &Node, kept: &[Item]) -> Result<Vec<Node>> {
        let i = self.index(node)?;
        for it in kept {
            let k = self
                .log
                .item_by_id
                .get(&it.id)
                .copied()
                .filter(|&k| self.log.items[k].subquery == node.id)
                .ok_or_else(|| {
                    Error::invalid(
                        "item",
                        format!("\"{}\" is not an item of subquery \"{}\"", it.id, node.id),
                    )
                })?;
            self.kept.push(k);
            self.is_kept[k] = true;
        }
        let children = self.log.children[i].clone();
        if self.log.items_of[i].is_empty() || !kept.is_empty() {
            Ok(self.nodes(&children))
        } else {
            if !children.is_empty() {
                self.stopped.push(i);
            }
            Ok(Vec::new())
        }
    }

    fn pruned(&mut self, node: &Node) {
        if let Ok(i) = self.index(node) {
            self.pruned.push(i);
            self.is_pruned[i] = true;
        }
    }
}
