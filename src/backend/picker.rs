//! The greedy driver's one interface to a backend (SPEC §1): a [`Picker`] holds a
//! selector's per-candidate state wherever it lives, takes picks one at a time and
//! answers "which open candidate has the best gain now". The CPU implementation is the
//! lazy heap over a scorer (`select`); the CUDA one keeps the state on the device and
//! does a step in one or two launches with a 16-byte read back.

use super::Resident;
use crate::embeddings::Matrix;
use crate::error::Result;

/// One greedy selector's state, stepped by the driver.
pub trait Picker {
    /// Takes `x` into the retained set `C` (`retained`: given by the caller before the
    /// first step; otherwise the driver's last pick).
    fn add(&mut self, x: usize, retained: bool) -> Result<()>;
    /// The best open candidate (not in `C`, and costing at most `remaining` tokens when a
    /// budget applies) with its gain `V(x | C)`, ties to the lower index; `None` when no
    /// candidate is open.
    fn best(&mut self, remaining: Option<f64>) -> Result<Option<(usize, f64)>>;
}

/// The greedy selectors a device may run (SPEC §1; the CPU scorers are the reference).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PickerKind {
    /// MMR with this lambda (needs relevance).
    Mmr {
        /// Relevance weight.
        lambda: f64,
    },
    /// Gram–Schmidt residual novelty with this residual floor.
    Grn {
        /// Residual below which an added row adds no basis vector.
        eps: f64,
    },
    /// DPP greedy MAP with this pivot floor.
    Dpp {
        /// Conditional variance below which an item is kept out of the factor.
        eps: f64,
    },
    /// Centroid drift.
    Centroid,
    /// Dense facility location (`gain_costs` divide the gains when given).
    Coverage,
}

/// A pool as the backends read it: its rows, their exact inverse norms (f64), and where
/// else they are resident.
pub(crate) struct Rows<'a> {
    /// The rows (as given, or unit-normalised: see [`crate::Pool::new`]).
    pub e: Matrix<'a>,
    /// `1 / ‖row‖` of the rows, in f64.
    pub inv: &'a [f64],
    /// Device residency.
    pub resident: &'a Resident,
    /// The rows quantised to 16 bits, for the `f32` screens of MMR's lazy heap over a
    /// resident pool ([`crate::Pool`] makes it once, when first asked).
    pub screen: Option<&'a crate::backend::cpu::Screen16>,
}

/// Per-request inputs of a picker, each one value per pool row.
#[derive(Clone, Copy, Debug, Default)]
pub struct PickerInputs<'a> {
    /// `cos(x, q)`: MMR's relevance; DPP's and coverage's weights are `max(rel, 0)`
    /// (`None`: weight 1).
    pub rel: Option<&'a [f64]>,
    /// Token costs when a token budget applies.
    pub budget_costs: Option<&'a [f64]>,
    /// Coverage's per-item divisor of the gain (its cost per token).
    pub gain_costs: Option<&'a [f64]>,
}
