//! `method = "auto"`: BoundaryMORPH with the feedback prior ([`super::Prior::Feedback`]:
//! the score prior, re-shaped every 10 calls from the query moved by the scores, with
//! [`AUTO_NEIGHBOURS`] of it from the neighbourhoods of the documents scored relevant) and
//! the kernel's concentration doubled ([`AUTO_CONCENTRATION`]), which lead BoundaryMORPH's
//! defaults on real text, with one switch for the case a MIPS prior fails, measured on
//! `ctxprune eval`'s problems and on the real-text problem set (docs/rerank.md, "The
//! method chosen for you"):
//!
//! after [`EVIDENCE_FIRST`](super::EVIDENCE_FIRST) calls, when every score so far is
//! below [`AUTO_LOW_SCORE`], the first [`AUTO_CONFIRM`] documents in MIPS order not yet
//! scored are scored, one at a time, until one is not low (after the first
//! [`AUTO_CONFIRM_FIRST`], only while [`AUTO_RESERVE`] calls are left). The first calls
//! sit at the top-k's boundary, which holds nothing relevant on real text wherever fewer
//! than k documents are relevant; the MIPS top is where the prior is surest. If it is low too,
//! the prior is contradicted, and the run goes on with the zero prior and hyperparameters
//! by the evidence (warm-started from the concentrated kernel); otherwise the run goes on
//! as before, the top's calls kept out of the GP (the boundary rule, the final order and
//! the feedback prior see them as scored). With no low start the run is BoundaryMORPH's
//! with that prior and kernel, call for call; a first round past
//! [`EVIDENCE_MAX_OBSERVATIONS`](super::EVIDENCE_MAX_OBSERVATIONS) calls is not switched.
//!
//! The caller may still set what does not change the choice: `batch`, `token_capacity`,
//! `row_precision` and the kernel family. Everything the rule sets (`prior`,
//! `acquisition`, `beta0`, `hyperparameters`, `kappa`, `prior_probes`,
//! `feedback_neighbours`) and RGS's options are errors that name the option.

use super::options::RerankOptions;
use super::{KernelChoice, RerankConfig};
use crate::error::{Error, Result};
use crate::similarity::KernelKind;

/// Scores (in `[0, 1]`) below which the first calls say the MIPS prior is wrong.
pub const AUTO_LOW_SCORE: f64 = 0.5;

/// The kernel's concentration in auto's runs ([`RerankConfig::concentration`]): vMF's
/// median-heuristic `kappa` doubled, so the kernel at the median pairwise cosine is 1/4
/// rather than 1/2. Measured with the score prior on the real-text set and both generated
/// modes (docs/rerank.md).
pub const AUTO_CONCENTRATION: f32 = 2.0;

/// The feedback prior's share from the relevant documents' neighbourhoods in auto's runs
/// ([`RerankConfig::feedback_neighbours`]). Measured on the four real-text sets
/// (docs/rerank.md, "The relevant documents' neighbourhoods").
pub const AUTO_NEIGHBOURS: f64 = 0.3;

/// The MIPS top that confirms a low start: when the first calls are all low, the first
/// this many documents in MIPS order are scored (those not scored yet, one at a time,
/// while every score is low) before the prior is dropped, and the switch is made only if
/// they are low too. 3 were enough on the cargo registry's set; on the manual pages' set
/// a low top 3 with relevant documents just below was common, and 15 were needed
/// (docs/rerank.md).
pub const AUTO_CONFIRM: usize = 15;

/// The first confirming calls, made while the budget lasts; the rest are made while
/// [`AUTO_RESERVE`] calls are left.
pub const AUTO_CONFIRM_FIRST: usize = 3;

/// Calls the confirmation leaves to the search after its first [`AUTO_CONFIRM_FIRST`]
/// documents, so a switch has calls to spend.
pub const AUTO_RESERVE: usize = 5;

/// The configuration `o` (method `auto`) stands for, with a note of what was chosen.
pub(crate) fn config(o: &RerankOptions<'_>) -> Result<RerankConfig> {
    let set = [
        ("prior", o.prior.is_some()),
        ("acquisition", o.acquisition.is_some()),
        ("beta0", o.beta0.is_some()),
        ("hyperparameters", o.hyperparameters.is_some()),
        ("kappa", o.kappa.is_some()),
        ("prior_probes", o.prior_probes.is_some()),
        ("feedback_neighbours", o.feedback_neighbours.is_some()),
        ("graph_degree", o.graph_degree.is_some()),
        ("seed_div", o.seed_div.is_some()),
        ("frac", o.frac.is_some()),
    ];
    if let Some((name, _)) = set.iter().find(|(_, given)| *given) {
        return Err(Error::invalid(
            *name,
            "does not apply to auto, which chooses it (name a method to set it)",
        ));
    }
    let mut cfg = RerankOptions {
        method: "boundary-morph",
        ..*o
    }
    .config()?;
    cfg.prior = super::Prior::Feedback;
    cfg.feedback_neighbours = AUTO_NEIGHBOURS;
    // The cosine kernel has no concentration to sharpen.
    let sharpened = cfg.kernel != KernelChoice::Median(KernelKind::Cosine);
    if sharpened {
        cfg.concentration = AUTO_CONCENTRATION;
    }
    cfg.switch_below = Some(AUTO_LOW_SCORE);
    let kernel = if sharpened {
        format!(" and the kernel's concentration times {AUTO_CONCENTRATION}")
    } else {
        String::new()
    };
    cfg.chosen = Some(format!(
        "auto: boundary-morph with the feedback prior ({AUTO_NEIGHBOURS} of it from the relevant documents' neighbourhoods){kernel}; the zero prior and hyperparameters by the evidence if the first {} scores and the MIPS top (up to {AUTO_CONFIRM}) are all below {AUTO_LOW_SCORE}",
        super::EVIDENCE_FIRST
    ));
    Ok(cfg)
}
