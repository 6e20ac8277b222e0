//! A pool: embeddings checked and copied once with their exact inverse norms, resident
//! where the engine computes (on the device for a CUDA engine), and reused by any number
//! of selections and reranks from any thread.
//!
//! ```
//! use ctxprune::{Embeddings, Engine, Pool};
//! let engine = Engine::cpu();
//! let e = Embeddings::new(3, 2, vec![3.0, 0.0, 0.0, 2.0, 1.0, 1.0], "docs")?;
//! let pool = Pool::new(&engine, e)?; // rows unit-normalised (they are not unit), resident
//! assert_eq!((pool.len(), pool.dim()), (3, 2));
//! assert_eq!(pool.embeddings().row(0), &[1.0, 0.0]);
//! // Rows that are unit already (norms within 2^-8 of 1) are kept as given.
//! let u = Embeddings::new(2, 2, vec![0.6, 0.8, 1.0, 0.0], "unit")?;
//! assert_eq!(Pool::new(&engine, u.clone())?.embeddings().as_slice(), u.as_slice());
//! # Ok::<(), ctxprune::Error>(())
//! ```

use crate::backend::cpu::Screen16;
use crate::backend::picker::Rows;
use crate::backend::{Engine, Resident, Storage};
use crate::embeddings::{Embeddings, Norms};
use crate::error::{Error, Result};
use crate::similarity::Kernel;
use std::sync::{Arc, OnceLock};

struct Inner {
    engine: Engine,
    rows: Embeddings,
    inv: Vec<f64>,
    resident: Resident,
    storage: Storage,
    median: OnceLock<f64>,
    /// The rows quantised to 16 bits (MMR's screens on the CPU), made when first asked.
    screen: OnceLock<Screen16>,
}

/// Embeddings with their exact inverse norms, resident on an engine's device; clones share them.
///
/// A pool whose rows take 32 MiB or more also keeps, from its first MMR selection on the
/// CPU on, a copy of its rows quantised to 16 bits (half their bytes) that MMR's screens
/// read in place of the rows (a pool that size is past most last-level caches, where the
/// screens wait on memory; the copy costs half the rows' bytes again). The picks
/// and gains are the same bit for bit; the copy only decides which candidates need an
/// exact product.
#[derive(Clone)]
pub struct Pool {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("rows", &self.len())
            .field("dim", &self.dim())
            .field("engine", &self.inner.engine.describe())
            .finish()
    }
}

impl Pool {
    /// A pool of `e`'s rows on `engine`, with each row's exact `f64` inverse norm (every
    /// cosine divides by the two rows' norms), then uploaded when the engine has a device.
    /// Rows that are unit already (every norm within 2^-8 of 1, as embedding models return
    /// them) are kept as given; others are unit-normalised into the pool's copy (each
    /// divided by its `f64` norm and rounded once to `f32`, so rows equal up to scale
    /// become bit-identical: see [`Embeddings::unit_rows`]). A zero row is an error naming
    /// it; so is an empty matrix.
    pub fn new(engine: &Engine, e: Embeddings) -> Result<Pool> {
        Pool::with_storage(engine, e, Storage::F32)
    }

    /// [`Pool::new`] with the device copy stored as `storage` (see [`Storage`]): f16 or
    /// bf16 halve device memory and serve [`Pool::gram`] on tensor cores; greedy selection
    /// and the reranking GP need f32 rows on the device and say so; the CPU keeps f32
    /// rows, so half storage on a CPU engine is an error.
    pub fn with_storage(engine: &Engine, e: Embeddings, storage: Storage) -> Result<Pool> {
        if e.is_empty() {
            return Err(Error::Empty(format!("pool {}", e.source_name())));
        }
        if e.is_unit() {
            let inv = e.inv_norms()?;
            return Pool::resident(engine, e, inv, storage);
        }
        match Embeddings::kept_inv_norms(e.as_slice(), e.rows(), e.dim(), e.source_name(), None)? {
            Norms::Kept { inv, .. } => Pool::resident(engine, e, inv, storage),
            Norms::OutOfRange => {
                let u = Embeddings::unit_rows(e.as_slice(), e.rows(), e.dim(), e.source_name(), None)?;
                Pool::resident(engine, u.e, u.inv, storage)
            }
        }
    }

    /// A pool of a borrowed row-major matrix (`rows × dim` values, named `source` in
    /// errors): read once, checked, and copied (the same pool as [`Pool::with_storage`]
    /// of an owned copy, bit for bit; a one-shot [`Selector::select_rows`] of the same
    /// matrix selects as this pool does, bit for bit, without the copy).
    ///
    /// [`Selector::select_rows`]: crate::select::Selector::select_rows
    pub fn from_slice(
        engine: &Engine,
        data: &[f32],
        rows: usize,
        dim: usize,
        source: &str,
        storage: Storage,
    ) -> Result<Pool> {
        if rows == 0 {
            return Err(Error::Empty(format!("pool {source}")));
        }
        match Embeddings::kept_inv_norms(data, rows, dim, source, None)? {
            Norms::Kept { inv, .. } => {
                let e = Embeddings::new(rows, dim, data.to_vec(), source)?;
                Pool::resident(engine, e, inv, storage)
            }
            Norms::OutOfRange => {
                let u = Embeddings::unit_rows(data, rows, dim, source, None)?;
                Pool::resident(engine, u.e, u.inv, storage)
            }
        }
    }

    fn resident(engine: &Engine, e: Embeddings, inv: Vec<f64>, storage: Storage) -> Result<Pool> {
        let resident = engine.resident_as(e.view(), &inv, storage)?;
        Ok(Pool {
            inner: Arc::new(Inner {
                engine: engine.clone(),
                rows: e,
                inv,
                resident,
                storage,
                median: OnceLock::new(),
                screen: OnceLock::new(),
            }),
        })
    }

    /// How the device copy is stored.
    #[must_use]
    pub fn storage(&self) -> Storage {
        self.inner.storage
    }

    /// [`Pool::new`] from a borrowed matrix (one copy).
    pub fn from_embeddings(engine: &Engine, e: &Embeddings) -> Result<Pool> {
        if e.is_unit() || e.is_empty() {
            return Pool::new(engine, e.clone());
        }
        Pool::from_slice(
            engine,
            e.as_slice(),
            e.rows(),
            e.dim(),
            e.source_name(),
            Storage::F32,
        )
    }

    /// Rows.
    #[must_use]
    pub fn len(&self) -> usize {
        self.inner.rows.rows()
    }

    /// True for a pool without rows (never: [`Pool::new`] refuses them).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Dimension.
    #[must_use]
    pub fn dim(&self) -> usize {
        self.inner.rows.dim()
    }

    /// The engine the pool is resident on.
    #[must_use]
    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    /// The rows as the pool keeps them (host copy): as given, or unit-normalised when a
    /// norm was out of range ([`Pool::new`]). Cosines divide by [`inv_norms`](Self::inv_norms).
    #[must_use]
    pub fn embeddings(&self) -> &Embeddings {
        &self.inner.rows
    }

    /// `1 / ‖row‖` of the kept rows, in f64.
    #[must_use]
    pub fn inv_norms(&self) -> &[f64] {
        &self.inner.inv
    }

    /// True when the rows are also on a device.
    #[must_use]
    pub fn on_device(&self) -> bool {
        !matches!(self.inner.resident, Resident::Host)
    }

    /// The `N × N` Gram of the pool under `kernel`, computed on the pool's engine from its
    /// resident rows.
    pub fn gram(&self, kernel: Kernel) -> Result<Vec<f32>> {
        self.inner.engine.pool_gram(&self.rows(), kernel)
    }

    /// `1 - median_{i<j} cos(x_i, x_j)` (the median heuristic's statistic; exact up to
    /// 200,000 pairs, else a fixed-seed sample of that many pairs), computed once.
    pub fn median_one_minus_cos(&self) -> Result<f64> {
        if let Some(m) = self.inner.median.get() {
            return Ok(*m);
        }
        let m = crate::similarity::median_one_minus_cos(&self.inner.rows)?;
        Ok(*self.inner.median.get_or_init(|| m))
    }

    /// Checks that `user` (a selector's or reranker's engine) computes where this pool is
    /// resident.
    pub(crate) fn check_engine(&self, user: &Engine, what: &str) -> Result<()> {
        if self.inner.engine.same_device(user) {
            return Ok(());
        }
        Err(Error::invalid(
            "pool",
            format!(
                "resident on {}, but the {what} runs on {}: create the pool with the {what}'s engine",
                self.inner.engine.describe(),
                user.describe()
            ),
        ))
    }

    pub(crate) fn rows(&self) -> Rows<'_> {
        Rows {
            e: self.inner.rows.view(),
            inv: &self.inner.inv,
            resident: &self.inner.resident,
            screen: None,
        }
    }

    /// The 16-bit copy, if one was made.
    #[cfg(test)]
    pub(crate) fn inner_screen(&self) -> Option<&Screen16> {
        self.inner.screen.get()
    }

    /// [`rows`](Self::rows) with the rows quantised to 16 bits ([`Screen16`], half the
    /// bytes, made on the first call: one read of the rows, kept with the pool), for the
    /// screens of MMR's lazy heap: a pass of bounds over the pool then reads half as much.
    pub(crate) fn rows_screened(&self) -> Rows<'_> {
        // Made outside the lock, as the median is: the copy is made on every core, and a
        // thread waiting inside an initialiser could take up another selection of this
        // pool and wait on the lock it holds. Two first selections at once may both
        // make it; one is kept.
        let screen = match self.inner.screen.get() {
            Some(s) => s,
            None => {
                let s = Screen16::new(self.inner.rows.view(), &self.inner.inv);
                self.inner.screen.get_or_init(|| s)
            }
        };
        Rows {
            screen: Some(screen),
            ..self.rows()
        }
    }
}
