//! A query's multimodal mass (boundarymorph-budgeted-reranking.txt §5.3, App. E.1): how
//! much of its relevance sits outside its tallest peak.
//!
//! The oracle's score is a height over the pool's embedding kNN graph. On the top-`M`
//! documents by score, with a `k_nn`-NN cosine graph made symmetric by OR, the documents
//! are swept in descending score (ties to the lower index), as persistence-based clustering
//! (ToMATo; Chazal et al., 2013) does: a document with no swept neighbour starts a peak;
//! otherwise it joins the cluster of its highest swept neighbour, and every other
//! neighbouring cluster meets that one at the document's height `h`. At the first such
//! meeting the lower of the two peaks dies, with prominence `height(peak) - h` (0-dim
//! persistence); with prominence below `tau` it merges into the taller (the simplification),
//! else it stays a peak of its own. A peak that never meets a taller one has prominence
//! `height(peak) - (lowest score in the top-M)`. Mass of a peak: its members' score over the
//! top-M's. Multimodal mass: `sum over surviving peaks but the tallest of prominence × mass`
//! (0 for a unimodal landscape).

use crate::error::{Error, Result};
use crate::pool::Pool;
use rayon::prelude::*;

/// The extraction's parameters (App. E.1's values by default).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PeakOptions {
    /// Documents considered, the top-`M` by score. By default 1,000.
    pub top_m: usize,
    /// Neighbours per document in the graph. By default 10.
    pub knn: usize,
    /// Simplification threshold on prominence. By default 0.20.
    pub tau: f64,
}

impl Default for PeakOptions {
    fn default() -> Self {
        PeakOptions {
            top_m: 1000,
            knn: 10,
            tau: 0.2,
        }
    }
}

/// A surviving peak.
#[derive(Clone, Debug, PartialEq)]
pub struct Peak {
    /// Its highest document (a pool row).
    pub top: usize,
    /// That document's score.
    pub height: f64,
    /// How far relevance falls before the peak meets a taller one.
    pub prominence: f64,
    /// Documents in its cluster.
    pub members: usize,
    /// Their share of the top-M's total score.
    pub mass: f64,
}

/// The peaks, tallest first, and the multimodal mass.
#[derive(Clone, Debug, PartialEq)]
pub struct Landscape {
    /// Surviving peaks, by height (ties to the lower row).
    pub peaks: Vec<Peak>,
    /// `sum` of prominence × mass over every peak but the first.
    pub multimodal_mass: f64,
}

/// The landscape of `scores` (one per pool row, finite) over `pool`'s rows.
pub fn landscape(pool: &Pool, scores: &[f64], opts: PeakOptions) -> Result<Landscape> {
    let n = pool.len();
    if scores.len() != n {
        return Err(Error::invalid(
            "scores",
            format!("{} scores for a pool of {n}", scores.len()),
        ));
    }
    if let Some(i) = scores.iter().position(|s| !s.is_finite()) {
        return Err(Error::invalid(format!("scores[{i}]"), "is not finite"));
    }
    if opts.top_m == 0 || opts.knn == 0 {
        return Err(Error::invalid("peaks", "top-M and k_nn must be at least 1"));
    }
    if !(opts.tau.is_finite() && opts.tau >= 0.0) {
        return Err(Error::invalid(
            "tau",
            format!("must be finite and >= 0, got {}", opts.tau),
        ));
    }
    let mut top: Vec<usize> = (0..n).collect();
    top.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    top.truncate(opts.top_m.min(n));
    let m = top.len();
    let rows = pool.rows();
    let e = rows.e;
    // The kNN graph over the top-M by cosine, OR-symmetrised.
    let knn = opts.knn.min(m.saturating_sub(1));
    let near: Vec<Vec<usize>> = (0..m)
        .into_par_iter()
        .map(|a| {
            let (xa, ia) = (e.row(top[a]), rows.inv[top[a]]);
            let cos: Vec<f64> = (0..m)
                .map(|b| crate::backend::cpu::dot(xa, e.row(top[b])) * (ia * rows.inv[top[b]]))
                .collect();
            let mut o: Vec<usize> = (0..m).filter(|&b| b != a).collect();
            o.sort_by(|&x, &y| cos[y].total_cmp(&cos[x]).then(x.cmp(&y)));
            o.truncate(knn);
            o
        })
        .collect();
    let mut adj: Vec<Vec<usize>> = near.clone();
    for (a, ns) in near.iter().enumerate() {
        for &b in ns {
            adj[b].push(a);
        }
    }
    // Sweep in rank order (top is sorted by score): position = rank.
    let h = |a: usize| scores[top[a]];
    let mut parent: Vec<usize> = (0..m).collect();
    fn find(p: &mut [usize], mut a: usize) -> usize {
        while p[a] != a {
            p[a] = p[p[a]];
            a = p[a];
        }
        a
    }
    // Per root: its peak is the root itself (a cluster's root is its highest member, the
    // first swept), and its prominence once it has died.
    let mut died: Vec<Option<f64>> = vec![None; m];
    for v in 0..m {
        let mut swept: Vec<usize> = adj[v].iter().copied().filter(|&b| b < v).collect();
        if swept.is_empty() {
            continue; // a new peak: v is its own root
        }
        swept.sort_unstable();
        swept.dedup();
        // Join the cluster of the highest swept neighbour (the lowest rank).
        let e0 = find(&mut parent, swept[0]);
        parent[v] = e0;
        for &b in &swept[1..] {
            let (ra, rb) = (find(&mut parent, v), find(&mut parent, b));
            if ra == rb {
                continue;
            }
            let (hi, lo) = if ra < rb { (ra, rb) } else { (rb, ra) };
            let prom = h(lo) - h(v);
            if died[lo].is_none() {
                died[lo] = Some(prom);
            }
            if prom < opts.tau {
                parent[lo] = hi;
            }
        }
    }
    let floor = h(m - 1);
    let total: f64 = (0..m).map(h).sum();
    let mut members = vec![0usize; m];
    let mut mass = vec![0.0f64; m];
    for a in 0..m {
        let r = find(&mut parent, a);
        members[r] += 1;
        mass[r] += h(a);
    }
    let peaks: Vec<Peak> = (0..m)
        .filter(|&a| parent[a] == a)
        .map(|a| Peak {
            top: top[a],
            height: h(a),
            prominence: died[a].unwrap_or(h(a) - floor),
            members: members[a],
            mass: if total > 0.0 { mass[a] / total } else { 0.0 },
        })
        .collect();
    let multimodal_mass = peaks.iter().skip(1).map(|p| p.prominence * p.mass).sum();
    Ok(Landscape {
        peaks,
        multimodal_mass,
    })
}
