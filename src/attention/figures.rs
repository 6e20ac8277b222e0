//! The paper's pictures from attention masses: the per-trajectory heat map (App. E.4) and
//! the decay curves aggregated over many trajectories (App. E.5), as numbers and as PNGs.

use super::{Mass, Role};
use crate::error::{Error, Result};
use plotters::prelude::*;
use serde::Serialize;
use std::path::Path;

/// `R[i][j] = S^(i)[j, reasoning]` and `O[i][j] = S^(i)[j, observation]` for `j ≤ i`, rows
/// indexed by the turn of a reasoning step (the first step of that turn; a turn with no
/// step is a row of NaN), `T × T` row-major with `T = mass.turns`. Cells `j > i` are 0
/// (causality).
#[must_use]
pub fn heatmap_matrices(mass: &Mass) -> (Vec<f64>, Vec<f64>) {
    let t = mass.turns;
    let mut r = vec![f64::NAN; t * t];
    let mut o = vec![f64::NAN; t * t];
    let mut seen = vec![false; t];
    for step in &mass.steps {
        let i = step.turn;
        if i >= t || seen[i] {
            continue;
        }
        seen[i] = true;
        for j in 0..t {
            let (rv, ov) = match step.s.get(j) {
                Some(row) if j <= i => (row[Role::Reasoning.index()], row[Role::Observation.index()]),
                _ => (0.0, 0.0),
            };
            r[i * t + j] = rv;
            o[i * t + j] = ov;
        }
    }
    (r, o)
}

/// The largest off-diagonal value below the diagonal (NaN skipped; 0 when none): the
/// colour limit, set without self-attention.
fn off_diagonal_max(m: &[f64], t: usize) -> f64 {
    let mut mx = 0.0f64;
    for i in 0..t {
        for j in 0..i {
            let v = m[i * t + j];
            if v.is_finite() {
                mx = mx.max(v);
            }
        }
    }
    mx
}

/// White to `to` by `x` in [0, 1].
fn ramp(to: (u8, u8, u8), x: f64) -> RGBColor {
    let x = x.clamp(0.0, 1.0);
    let mix = |c: u8| (255.0 + (f64::from(c) - 255.0) * x).round() as u8;
    RGBColor(mix(to.0), mix(to.1), mix(to.2))
}

const BLUE: (u8, u8, u8) = (8, 48, 107);
const ORANGE: (u8, u8, u8) = (166, 54, 3);

/// The heat map of App. E.4 as a PNG: `R` in the lower triangle (blue), `Oᵀ` in the upper
/// (orange), the diagonal white; each colour scale runs from 0 to its matrix's largest
/// off-diagonal value (self-attention excluded), shown in two colour bars. Row `i` (from
/// the top) is the reasoning step of turn `i`, column `j` the attended turn.
pub fn draw_heatmap(mass: &Mass, path: &Path, title: &str) -> Result<()> {
    let t = mass.turns;
    if t == 0 {
        return Err(Error::Empty("turns (nothing to draw)".into()));
    }
    let (r, o) = heatmap_matrices(mass);
    let (rmax, omax) = (off_diagonal_max(&r, t), off_diagonal_max(&o, t));
    let tf = t as f64;
    crate::plot::png(path, 900, 760, |root| {
        let (main, bars) = root.split_horizontally(760);
        // Cell (i, j) is centred on (j, -i): integer ticks fall on cell centres, and row 0 is
        // at the top as in a matrix.
        let mut chart = ChartBuilder::on(&main)
            .caption(title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(55)
            .build_cartesian_2d(-0.5..tf - 0.5, -(tf - 0.5)..0.5)?;
        let ticks = t.min(11);
        chart
            .configure_mesh()
            .disable_mesh()
            .x_desc("attended turn j (lower: reasoning R; upper: observation Oᵀ)")
            .y_desc("reasoning step i")
            .x_labels(ticks)
            .y_labels(ticks)
            .x_label_formatter(&|x| format!("{}", x.round() as i64))
            .y_label_formatter(&|y| format!("{}", -(y.round() as i64)))
            .label_style(("sans-serif", 14))
            .draw()?;
        let cells = (0..t).flat_map(|i| (0..t).map(move |j| (i, j))).map(|(i, j)| {
            let colour = if i == j {
                WHITE
            } else if j < i {
                scaled(r[i * t + j], rmax, BLUE)
            } else {
                // Upper triangle: Oᵀ, cell (i, j) shows O[j][i].
                scaled(o[j * t + i], omax, ORANGE)
            };
            let (x, y) = (j as f64, -(i as f64));
            Rectangle::new([(x - 0.5, y - 0.5), (x + 0.5, y + 0.5)], colour.filled())
        });
        chart.draw_series(cells)?;
        // Two colour bars: R (blue) and O (orange), 0 at the bottom.
        let bar_areas = bars.margin(60, 60, 8, 8).split_evenly((1, 2));
        for (area, (to, max, name)) in bar_areas.iter().zip([(BLUE, rmax, "R"), (ORANGE, omax, "O")]) {
            let mut c = ChartBuilder::on(area)
                .caption(name, ("sans-serif", 16))
                .y_label_area_size(0)
                .right_y_label_area_size(45)
                .build_cartesian_2d(0.0..1.0, 0.0..max.max(f64::MIN_POSITIVE))?;
            c.configure_mesh()
                .disable_mesh()
                .disable_x_axis()
                .y_labels(5)
                .y_label_formatter(&|v| format!("{v:.3}"))
                .label_style(("sans-serif", 12))
                .draw()?;
            let steps = 64;
            c.draw_series((0..steps).map(|s| {
                let a = max * s as f64 / steps as f64;
                let b = max * (s + 1) as f64 / steps as f64;
                Rectangle::new(
                    [(0.0, a), (1.0, b)],
                    ramp(to, (s as f64 + 0.5) / steps as f64).filled(),
                )
            }))?;
        }
        Ok(())
    })
}

/// A value on a colour scale from 0 to `max` (NaN: a turn with no step, light grey).
fn scaled(v: f64, max: f64, to: (u8, u8, u8)) -> RGBColor {
    if !v.is_finite() {
        return RGBColor(235, 235, 235);
    }
    ramp(to, if max > 0.0 { v / max } else { 0.0 })
}

/// Relative-position bins of App. E.5.
pub const BINS: usize = 20;
/// Steps need at least this many past turns to be aggregated (App. E.5).
pub const MIN_PAST_TURNS: usize = 5;

/// One role's curve.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RoleCurve {
    /// The role.
    pub role: Role,
    /// Per bin: the mean over (step, past turn) observations in the bin of the role's mass
    /// on that past turn (NaN-free: 0 for an empty bin, see `count`).
    pub mean: Vec<f64>,
    /// Per bin: how many (step, past turn) observations fell in it.
    pub count: Vec<usize>,
    /// Per bin: the running sum over bins up to it of the role's total mass in the bin
    /// divided by the number of steps: the share of a step's attention the role has taken
    /// by that relative position.
    pub cumulative: Vec<f64>,
}

/// The aggregated decay curves of App. E.5.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Decay {
    /// Bin edges on [0, 1] (`BINS + 1` values); relative position 0 is the most recent
    /// past turn, 1 the oldest.
    pub edges: Vec<f64>,
    /// Reasoning steps aggregated (those with at least [`MIN_PAST_TURNS`] past turns).
    pub steps: usize,
    /// Steps left out for having fewer past turns.
    pub steps_skipped: usize,
    /// (step, past turn) observations aggregated.
    pub observations: usize,
    /// One curve per role, in [`Role::ALL`]'s order.
    pub roles: Vec<RoleCurve>,
}

/// The decay curves over many trajectories' masses. For a step in turn `k` the past turns
/// are `0..k`, `T_r = k`; past turn `k - d` (d = 1 the most recent) sits at relative
/// position `(d - 1) / (T_r - 1)` and falls in bin `min(floor(20 · pos), 19)`. Steps with
/// `T_r < 5` are skipped (counted in `steps_skipped`).
/// Each mass is checked first ([`Mass::check`]); an error names the mass by index.
pub fn decay(masses: &[Mass]) -> Result<Decay> {
    for (i, m) in masses.iter().enumerate() {
        m.check()
            .map_err(|e| Error::invalid(format!("masses[{i}]"), e.to_string()))?;
    }
    let mut sum = vec![[0.0f64; 5]; BINS];
    let mut count = vec![0usize; BINS];
    let (mut steps, mut skipped, mut obs) = (0, 0, 0);
    for m in masses {
        for st in &m.steps {
            let tr = st.turn;
            if tr < MIN_PAST_TURNS {
                skipped += 1;
                continue;
            }
            steps += 1;
            for d in 1..=tr {
                let pos = (d - 1) as f64 / (tr - 1) as f64;
                let b = ((pos * BINS as f64).floor() as usize).min(BINS - 1);
                count[b] += 1;
                obs += 1;
                for (acc, v) in sum[b].iter_mut().zip(&st.s[tr - d]) {
                    *acc += v;
                }
            }
        }
    }
    let roles = Role::ALL
        .iter()
        .map(|&role| {
            let ri = role.index();
            let mut run = 0.0;
            RoleCurve {
                role,
                mean: (0..BINS)
                    .map(|b| {
                        if count[b] > 0 {
                            sum[b][ri] / count[b] as f64
                        } else {
                            0.0
                        }
                    })
                    .collect(),
                count: count.clone(),
                cumulative: (0..BINS)
                    .map(|b| {
                        if steps > 0 {
                            run += sum[b][ri] / steps as f64;
                        }
                        run
                    })
                    .collect(),
            }
        })
        .collect();
    Ok(Decay {
        edges: (0..=BINS).map(|b| b as f64 / BINS as f64).collect(),
        steps,
        steps_skipped: skipped,
        observations: obs,
        roles,
    })
}

/// The decay figure as a PNG: per role (reasoning blue, observation orange, tool call
/// grey), the mean attention per bin as lines (left axis) and the cumulative share as bars
/// (right axis, percent).
pub fn draw_decay(d: &Decay, path: &Path, title: &str) -> Result<()> {
    if d.steps == 0 {
        return Err(Error::Empty(format!(
            "reasoning steps with at least {MIN_PAST_TURNS} past turns (nothing to draw; {} skipped)",
            d.steps_skipped
        )));
    }
    let shown = [
        (Role::Reasoning, BLUE),
        (Role::Observation, ORANGE),
        (Role::ToolCall, (110, 110, 110)),
    ];
    let ymax = shown
        .iter()
        .flat_map(|(r, _)| d.roles[r.index()].mean.iter().copied())
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.1;
    let cmax = shown
        .iter()
        .filter_map(|(r, _)| d.roles[r.index()].cumulative.last().copied())
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 110.0;
    let w = 1.0 / BINS as f64;
    crate::plot::png(path, 960, 600, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(65)
            .right_y_label_area_size(65)
            .build_cartesian_2d(0.0..1.0, 0.0..ymax)?
            .set_secondary_coord(0.0..1.0, 0.0..cmax);
        chart
            .configure_mesh()
            .x_desc("relative position of the past turn (0 = most recent, 1 = oldest)")
            .y_desc("mean attention per past turn")
            .label_style(("sans-serif", 14))
            .draw()?;
        chart
            .configure_secondary_axes()
            .y_desc("cumulative share of the step's attention (%)")
            .label_style(("sans-serif", 14))
            .draw()?;
        let nshown = shown.len() as f64;
        for (k, &(role, col)) in shown.iter().enumerate() {
            let c = &d.roles[role.index()];
            let colour = RGBColor(col.0, col.1, col.2);
            chart.draw_secondary_series((0..BINS).map(|b| {
                let x0 = b as f64 * w + w * k as f64 / nshown;
                Rectangle::new(
                    [(x0, 0.0), (x0 + w / nshown, 100.0 * c.cumulative[b])],
                    colour.mix(0.25).filled(),
                )
            }))?;
            chart
                .draw_series(LineSeries::new(
                    (0..BINS).map(|b| ((b as f64 + 0.5) * w, c.mean[b])),
                    colour.stroke_width(3),
                ))?
                .label(format!(
                    "{} (total {:.1}%)",
                    role.name(),
                    100.0 * c.cumulative[BINS - 1]
                ))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(3)));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .label_font(("sans-serif", 14))
            .draw()?;
        Ok(())
    })
}
