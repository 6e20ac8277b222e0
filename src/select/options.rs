//! A selection configured by name, as a command line, a Python caller or an HTTP request
//! gives it: every option checked once, and an option or input the method does not read
//! is an error naming it, never ignored.

use super::{Method, Mode, SelectConfig};
use crate::error::{Error, Result};

/// Options by name; `None` takes the default. Errors name the option as written here
/// (`preset`, `weights`, `query-text`); a front end renames them to its flags or
/// arguments.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SelectOptions<'a> {
    /// `mmr`, `grn`, `centroid`, `dpp`, `coverage`, `hybrid` or `lexical`.
    pub method: &'a str,
    /// `greedy` (default) or `gate`.
    pub mode: Option<&'a str>,
    /// `paper`: the paper's operating point for every option not given.
    pub preset: Option<&'a str>,
    /// Item budget.
    pub k: Option<usize>,
    /// Token budget over the selected items' costs.
    pub token_budget: Option<f64>,
    /// Keep threshold tau.
    pub threshold: Option<f64>,
    /// MMR / lexical lambda in [0, 1].
    pub lambda: Option<f64>,
    /// Hybrid `(alpha, beta, gamma)` or lexical `(w_tfidf, w_jaccard)`.
    pub weights: Option<&'a [f64]>,
}

impl SelectOptions<'_> {
    /// The configuration, every option checked against the method (ranges are checked
    /// by [`super::Selector::new`]).
    pub fn config(&self) -> Result<SelectConfig> {
        let method: Method = self.method.parse()?;
        let mode: Mode = self.mode.unwrap_or("greedy").parse()?;
        let mut cfg = SelectConfig::new(method).mode(mode);
        match self.preset {
            None => {}
            Some("paper") => cfg = cfg.paper_preset(true),
            Some(p) => return Err(Error::invalid("preset", format!("unknown preset '{p}' (paper)"))),
        }
        if let Some(k) = self.k {
            cfg = cfg.k(k);
        }
        if let Some(t) = self.token_budget {
            cfg = cfg.token_budget(t);
        }
        if let Some(t) = self.threshold {
            cfg = cfg.threshold(t);
        }
        if let Some(l) = self.lambda {
            cfg = cfg.lambda(l);
        }
        if let Some(w) = self.weights {
            cfg = match (method, w) {
                (Method::Lexical, &[t, j]) => cfg.lexical_weights([t, j]),
                (Method::Hybrid, &[x, y, z]) => cfg.weights([x, y, z]),
                (Method::Lexical, _) => {
                    return Err(Error::invalid(
                        "weights",
                        "lexical takes two weights: w_tfidf,w_jaccard",
                    ))
                }
                (Method::Hybrid, _) => {
                    return Err(Error::invalid(
                        "weights",
                        "hybrid takes three weights: alpha,beta,gamma",
                    ))
                }
                _ => {
                    return Err(Error::invalid(
                        "weights",
                        format!("{} takes no weights", method.name()),
                    ))
                }
            };
        }
        Ok(cfg)
    }
}

/// Refuses inputs `method` does not read: a query embedding (grn, centroid, lexical),
/// texts and a query text (all but lexical). Errors name `query`, `query-text` or `texts`.
pub fn check_reads(method: Method, query: bool, query_text: bool, texts: bool) -> Result<()> {
    for (given, name, reads) in [
        (query, "query", method.reads_query()),
        (query_text, "query_text", method == Method::Lexical),
        (texts, "texts", method == Method::Lexical),
    ] {
        if given && !reads {
            return Err(Error::invalid(
                name,
                format!("does not apply to {} (it does not read it)", method.name()),
            ));
        }
    }
    Ok(())
}
