//! The greedy selectors on the device (SPEC §1; the CPU scorers are the reference): the
//! per-candidate state of MMR, GRN, DPP, centroid drift and dense facility location stays
//! on the device, and each greedy step folds the last pick in and takes the masked argmax
//! of the new gains in one or two launches, with one 16-byte read back
//! ([`GreedyDev`], a [`Picker`]).

use super::gram::{dot_gram, DevPool, DevRows};
use super::raw::{self, Buf, Lane, NullPtr};
use super::{checked_len, matrix, per_elem, per_half_warp, to_i32, to_i64, Device, Poison};
use crate::backend::cpu::orthonormal_extension;
use crate::backend::picker::{Picker, PickerInputs, PickerKind, Rows};
use crate::embeddings::Matrix;
use crate::error::{Error, Result};

/// The one-launch grid argmax's buffers (kernels/common.cuh `ctx_grid_argmax`): one
/// partial per block, the ticket the last block takes, and `{value, index}`.
pub(crate) struct ArgmaxBufs {
    pub pv: Buf<f64>,
    pub pi: Buf<i64>,
    pub ticket: Buf<u32>,
    pub out: Buf<f64>,
}

impl ArgmaxBufs {
    /// Buffers for launches of up to `per_half_warp(n)` blocks (the largest grid a step
    /// uses).
    pub(crate) fn new(lane: &Lane, n: usize) -> Result<Self> {
        let blocks = per_half_warp(n).blocks.0.max(per_elem(n).blocks.0) as usize;
        Ok(ArgmaxBufs {
            pv: lane.zeros(blocks)?,
            pi: lane.zeros(blocks)?,
            ticket: lane.zeros(1)?,
            out: lane.zeros(2)?,
        })
    }

    /// The last launch's `(index, value)`, `None` when no candidate was open.
    pub(crate) fn read(&self, lane: &Lane) -> Result<Option<(usize, f64)>> {
        let mut r = [0.0f64; 2];
        lane.read(self.out.v(), &mut r)?;
        Ok((r[1] >= 0.0).then(|| (r[1] as usize, r[0])))
    }
}

enum State {
    Mmr {
        rel: Buf<f64>,
        maxsim: Buf<f64>,
        lambda: f64,
    },
    Grn {
        r: Buf<f64>,
        u: Buf<f64>,
        basis: Vec<Vec<f64>>,
        eps: f64,
    },
    Dpp {
        w: Buf<f64>,
        s: Buf<f64>,
        c: Buf<f64>,
        d2: Buf<f64>,
        cap: usize,
        t: usize,
        eps: f64,
    },
    Centroid {
        sd: Buf<f64>,
        ss: Buf<f64>,
    },
    Coverage {
        sim: Buf<f32>,
        cur: Buf<f32>,
        gcost: Option<Buf<f64>>,
    },
}

/// A greedy selector's state on the device over a resident pool. [`add`](Picker::add)
/// queues a pick (retained or selected); [`best`](Picker::best) folds the queued pick into
/// the state and returns the best open candidate with its gain (f64, ties to the lower
/// index), in one or two launches and one 16-byte read back.
pub struct GreedyDev<'a> {
    lane: Lane,
    rows: &'a DevRows,
    host: &'a [f32],
    inv_host: &'a [f64],
    alive: Buf<u8>,
    cost: Option<Buf<f64>>,
    am: ArgmaxBufs,
    pending: Option<usize>,
    state: State,
    poison: Poison,
}

/// The device picker for `kind` over the resident pool `dev_rows` (host rows in `rows`).
pub(crate) fn greedy_picker<'a>(
    dev: &Device,
    dev_rows: &'a DevRows,
    rows: &Rows<'a>,
    kind: PickerKind,
    inputs: &PickerInputs<'_>,
) -> Result<Box<dyn Picker + 'a>> {
    Ok(Box::new(GreedyDev::new(
        dev, dev_rows, rows.e, rows.inv, kind, inputs,
    )?))
}

impl<'a> GreedyDev<'a> {
    /// State for `kind` over the resident pool `rows` (host copy `host`, inverse norms
    /// `inv_host`), with the request's relevance and costs.
    pub(crate) fn new(
        dev: &Device,
        rows: &'a DevRows,
        host: Matrix<'a>,
        inv_host: &'a [f64],
        kind: PickerKind,
        inputs: &PickerInputs<'_>,
    ) -> Result<Self> {
        let (n, d) = (rows.n, rows.d);
        let host_rows = host;
        let host = host.as_slice();
        if dev.ordinal() != rows.ordinal {
            return Err(Error::invalid(
                "pool",
                format!("resident on cuda:{}, not cuda:{}", rows.ordinal, dev.ordinal()),
            ));
        }
        if host.len() != n * d || inv_host.len() != n || n == 0 || d == 0 {
            return Err(Error::invalid(
                "pool",
                format!(
                    "{} values and {} norms for {n} rows of dimension {d}",
                    host.len(),
                    inv_host.len()
                ),
            ));
        }
        for (what, v) in [
            ("relevance", inputs.rel),
            ("costs", inputs.budget_costs),
            ("coverage costs", inputs.gain_costs),
        ] {
            if let Some(v) = v {
                checked_len(what, v.len(), n)?;
            }
        }
        let lane = dev.lane()?;
        let alive = lane.filled(n, 1u8)?;
        let cost = inputs.budget_costs.map(|c| lane.upload(c)).transpose()?;
        let am = ArgmaxBufs::new(&lane, n)?;
        let weights = || -> Vec<f64> {
            inputs
                .rel
                .map_or_else(|| vec![1.0; n], |r| r.iter().map(|&c| c.max(0.0)).collect())
        };
        let state = match kind {
            PickerKind::Mmr { lambda } => State::Mmr {
                rel: lane.upload(&inputs.rel.map_or_else(|| vec![0.0; n], <[f64]>::to_vec))?,
                maxsim: lane.filled(n, f64::NEG_INFINITY)?,
                lambda,
            },
            PickerKind::Grn { eps } => State::Grn {
                r: lane.filled(n, 1.0)?,
                u: lane.zeros(d)?,
                basis: Vec::new(),
                eps,
            },
            PickerKind::Dpp { eps } => {
                let w = weights();
                let d2: Vec<f64> = w.iter().map(|&v| v * v).collect();
                let cap = 64.min(n);
                State::Dpp {
                    w: lane.upload(&w)?,
                    s: lane.zeros(n)?,
                    c: lane.zeros(cap * n)?,
                    d2: lane.upload(&d2)?,
                    cap,
                    t: 0,
                    eps,
                }
            }
            PickerKind::Centroid => State::Centroid {
                sd: lane.zeros(n)?,
                ss: lane.zeros(1)?,
            },
            PickerKind::Coverage => {
                // The unit rows' dot products as computed (the CPU's
                // cosine_gram_computed_diag), then max(0, w_i s_ij). Rows kept as given
                // are unit-normalised into a copy for it, as the CPU's coverage does.
                let mut sim = lane.zeros::<f32>(n * n)?;
                match host_rows.unit_copy()? {
                    None => dot_gram(&lane, rows.r(), &mut sim)?,
                    Some(u) => dot_gram(&lane, DevPool::upload(&lane, &u.e)?.r(), &mut sim)?,
                }
                let w: Vec<f32> = weights().iter().map(|&v| v as f32).collect();
                let w = lane.upload(&w)?;
                raw::weight_rows_pos_f32(&lane, matrix(n, n), sim.vm(), to_i64(n), w.v())?;
                State::Coverage {
                    sim,
                    cur: lane.zeros(n)?,
                    gcost: inputs.gain_costs.map(|c| lane.upload(c)).transpose()?,
                }
            }
        };
        Ok(GreedyDev {
            lane,
            rows,
            host,
            inv_host,
            alive,
            cost,
            am,
            pending: None,
            state,
            poison: Poison::default(),
        })
    }

    /// Waits for the picker's queued work (its uploads; a timing starts after this).
    pub(crate) fn sync(&self) -> Result<()> {
        self.lane.sync()
    }

    /// One step, refused after an earlier failure (which may have left the state half
    /// updated), and remembered when it fails.
    fn step(&mut self, remaining: Option<f64>) -> Result<()> {
        self.poison.check(self.rows.ordinal)?;
        let r = self.step_inner(remaining);
        self.poison.guard(r)
    }

    /// One step: the pending pick (or none) folded in, the argmax of the gains into
    /// `am.out`.
    fn step_inner(&mut self, remaining: Option<f64>) -> Result<()> {
        let lane = &self.lane;
        let p: i64 = self.pending.take().map_or(-1, to_i64);
        let rows = self.rows;
        let (n, nn, d) = (rows.n, to_i64(rows.n), to_i32(rows.d, "dim")?);
        let (cost, rem) = match (&self.cost, remaining) {
            (Some(c), Some(r)) => (NullPtr::of(Some(c)), r),
            _ => (NullPtr::null(), 0.0f64),
        };
        let am = &mut self.am;
        let x = rows.x.v();
        let inv = rows.inv64.v();
        match &mut self.state {
            State::Mmr { rel, maxsim, lambda } => raw::mmr_step_f64(
                lane,
                per_half_warp(n),
                x,
                nn,
                d,
                p,
                inv,
                rel.v(),
                *lambda,
                maxsim.vm(),
                self.alive.vm(),
                cost,
                rem,
                am.pv.vm(),
                am.pi.vm(),
                am.ticket.vm(),
                am.out.vm(),
            ),
            State::Grn { r, u, basis, eps } => {
                let mut has_u = false;
                if p >= 0 {
                    let xi = p as usize;
                    let dd = rows.d;
                    if let Some(v) = orthonormal_extension(
                        &self.host[xi * dd..(xi + 1) * dd],
                        self.inv_host[xi],
                        basis,
                        *eps,
                    ) {
                        lane.write(&v, u.vm())?;
                        basis.push(v);
                        has_u = true;
                    }
                }
                let uptr = NullPtr::of(has_u.then_some(&*u));
                raw::grn_step_f64(
                    lane,
                    per_half_warp(n),
                    x,
                    nn,
                    d,
                    p,
                    uptr,
                    inv,
                    r.vm(),
                    self.alive.vm(),
                    cost,
                    rem,
                    am.pv.vm(),
                    am.pi.vm(),
                    am.ticket.vm(),
                    am.out.vm(),
                )
            }
            State::Dpp {
                w, s, c, d2, cap, t, ..
            } => {
                let ti = to_i32(*t, "factor rank")?;
                if p >= 0 {
                    if *t == *cap {
                        let new_cap = (*cap * 2).min(n);
                        let mut bigger = lane.zeros::<f64>(new_cap * n)?;
                        lane.copy(c.slice(0..*cap * n), bigger.vm())?;
                        *c = bigger;
                        *cap = new_cap;
                    }
                    raw::cos_to_row_f64(
                        lane,
                        per_half_warp(n),
                        rows.x.v(),
                        nn,
                        d,
                        p,
                        rows.inv64.v(),
                        s.vm(),
                    )?;
                }
                raw::dpp_step_f64(
                    lane,
                    per_elem(n),
                    nn,
                    p,
                    ti,
                    s.v(),
                    w.v(),
                    c.vm(),
                    d2.vm(),
                    self.alive.vm(),
                    cost,
                    rem,
                    am.pv.vm(),
                    am.pi.vm(),
                    am.ticket.vm(),
                    am.out.vm(),
                )?;
                if p >= 0 {
                    *t += 1;
                }
                Ok(())
            }
            State::Centroid { sd, ss } => {
                raw::centroid_pre_f64(lane, per_elem(1), sd.v(), p, ss.vm())?;
                raw::centroid_step_f64(
                    lane,
                    per_half_warp(n),
                    x,
                    nn,
                    d,
                    p,
                    inv,
                    sd.vm(),
                    ss.v(),
                    self.alive.vm(),
                    cost,
                    rem,
                    am.pv.vm(),
                    am.pi.vm(),
                    am.ticket.vm(),
                    am.out.vm(),
                )
            }
            State::Coverage { sim, cur, gcost } => {
                raw::cov_add_f32(lane, per_elem(n), sim.v(), nn, p, cur.vm(), self.alive.vm())?;
                raw::cov_gains_f32(
                    lane,
                    per_half_warp(n),
                    sim.v(),
                    nn,
                    cur.v(),
                    NullPtr::of(gcost.as_ref()),
                    self.alive.v(),
                    cost,
                    rem,
                    am.pv.vm(),
                    am.pi.vm(),
                    am.ticket.vm(),
                    am.out.vm(),
                )
            }
        }
    }
}

impl Picker for GreedyDev<'_> {
    /// Queues `x` as picked. A retained item is checked first where the CPU scorer checks
    /// it (DPP: one with no conditional variance left is kept out of the factor).
    fn add(&mut self, x: usize, retained: bool) -> Result<()> {
        self.poison.check(self.rows.ordinal)?;
        if x >= self.rows.n {
            return Err(Error::invalid(
                "pick",
                format!("index {x} outside the pool of {}", self.rows.n),
            ));
        }
        if self.pending.is_some() {
            self.step(None)?;
        }
        if retained {
            if let State::Dpp { d2, eps, .. } = &self.state {
                let mut v = [0.0f64];
                self.lane.read(d2.slice(x..x + 1), &mut v)?;
                if v[0] < *eps {
                    self.lane.write(&[0u8], self.alive.slice_mut(x..x + 1))?;
                    return Ok(());
                }
            }
        }
        self.pending = Some(x);
        Ok(())
    }

    fn best(&mut self, remaining: Option<f64>) -> Result<Option<(usize, f64)>> {
        self.step(remaining)?;
        let r = self.am.read(&self.lane);
        self.poison.guard(r)
    }
}

/// The largest open `g[i]` (alive, and costing at most `remaining` when `cost` is given),
/// ties to the lower index, by the one-launch grid argmax.
pub(crate) fn argmax_masked(
    lane: &Lane,
    g: &Buf<f64>,
    alive: &Buf<u8>,
    cost: Option<(&Buf<f64>, f64)>,
) -> Result<Option<(usize, f64)>> {
    let n = g.len();
    checked_len("alive", alive.len(), n)?;
    let (cp, rem) = match cost {
        Some((c, r)) => {
            checked_len("costs", c.len(), n)?;
            (NullPtr::of(Some(c)), r)
        }
        None => (NullPtr::null(), 0.0),
    };
    let mut am = ArgmaxBufs::new(lane, n)?;
    raw::argmax_masked_f64(
        lane,
        per_elem(n),
        g.v(),
        to_i64(n),
        alive.v(),
        cp,
        rem,
        am.pv.vm(),
        am.pi.vm(),
        am.ticket.vm(),
        am.out.vm(),
    )?;
    am.read(lane)
}
