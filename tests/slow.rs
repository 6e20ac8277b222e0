#![allow(clippy::needless_range_loop)] // textbook elimination reads best with indices
//! Slow, direct evaluations of the SPEC §1 definitions, in f64, recomputed from scratch
//! for every candidate at every step: explicit determinants, explicit projections, F(C).

use ctxprune::Embeddings;

pub fn cos(a: &[f32], b: &[f32]) -> f64 {
    let ab: f64 = a.iter().zip(b).map(|(&x, &y)| f64::from(x) * f64::from(y)).sum();
    let aa: f64 = a.iter().map(|&x| f64::from(x).powi(2)).sum();
    let bb: f64 = b.iter().map(|&x| f64::from(x).powi(2)).sum();
    if aa == 0.0 || bb == 0.0 {
        return 0.0;
    }
    ab / (aa.sqrt() * bb.sqrt())
}

fn unit(a: &[f32]) -> Vec<f64> {
    let n = a.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
    a.iter().map(|&x| f64::from(x) / n).collect()
}

/// Determinant by Gaussian elimination with partial pivoting.
pub fn det(mut m: Vec<Vec<f64>>) -> f64 {
    let n = m.len();
    let mut d = 1.0;
    for c in 0..n {
        let p = (c..n)
            .max_by(|&a, &b| m[a][c].abs().total_cmp(&m[b][c].abs()))
            .unwrap();
        if m[p][c] == 0.0 {
            return 0.0;
        }
        if p != c {
            m.swap(p, c);
            d = -d;
        }
        d *= m[c][c];
        for r in c + 1..n {
            let f = m[r][c] / m[c][c];
            for k in c..n {
                m[r][k] -= f * m[c][k];
            }
        }
    }
    d
}

/// Solves `g y = b` (g symmetric positive definite, small) by elimination.
pub fn solve(g: &[Vec<f64>], b: &[f64]) -> Vec<f64> {
    let n = b.len();
    let mut a: Vec<Vec<f64>> = g
        .iter()
        .zip(b)
        .map(|(r, &v)| r.iter().copied().chain([v]).collect())
        .collect();
    for c in 0..n {
        let p = (c..n)
            .max_by(|&x, &y| a[x][c].abs().total_cmp(&a[y][c].abs()))
            .unwrap();
        a.swap(p, c);
        for r in 0..n {
            if r != c {
                let f = a[r][c] / a[c][c];
                for k in c..=n {
                    a[r][k] -= f * a[c][k];
                }
            }
        }
    }
    (0..n).map(|i| a[i][n] / a[i][i]).collect()
}

pub struct Problem<'a> {
    pub e: &'a Embeddings,
    pub q: Option<&'a [f32]>,
    pub costs: Option<&'a [f64]>,
}

impl Problem<'_> {
    fn w(&self, i: usize) -> f64 {
        self.q.map_or(1.0, |q| cos(self.e.row(i), q).max(0.0))
    }
    fn c(&self, i: usize, j: usize) -> f64 {
        if i == j {
            1.0
        } else {
            cos(self.e.row(i), self.e.row(j))
        }
    }
    fn cost(&self, i: usize) -> f64 {
        self.costs.map_or(1.0, |c| c[i])
    }

    pub fn mmr(&self, lam: f64, x: usize, c: &[usize]) -> f64 {
        let rel = cos(self.e.row(x), self.q.unwrap());
        let red = c.iter().map(|&j| self.c(x, j)).fold(f64::NEG_INFINITY, f64::max);
        lam * rel - (1.0 - lam) * if c.is_empty() { 0.0 } else { red }
    }

    /// ‖x~ - P_C x~‖²: the projection on span(C) from the normal equations of a basis of
    /// C's unit vectors (dependent ones, which add nothing to the span, dropped first).
    pub fn grn(&self, x: usize, c: &[usize]) -> f64 {
        // A basis subset of C: keep a vector when its Gram determinant with the kept ones
        // stays clearly positive.
        let mut basis: Vec<usize> = vec![];
        for &a in c {
            let mut t = basis.clone();
            t.push(a);
            let g: Vec<Vec<f64>> = t
                .iter()
                .map(|&i| t.iter().map(|&j| self.c(i, j)).collect())
                .collect();
            let gb: Vec<Vec<f64>> = basis
                .iter()
                .map(|&i| basis.iter().map(|&j| self.c(i, j)).collect())
                .collect();
            let prev = if basis.is_empty() { 1.0 } else { det(gb) };
            if det(g) / prev > 1e-9 {
                basis.push(a);
            }
        }
        if basis.is_empty() {
            return 1.0;
        }
        let g: Vec<Vec<f64>> = basis
            .iter()
            .map(|&a| basis.iter().map(|&b| self.c(a, b)).collect())
            .collect();
        let b: Vec<f64> = basis.iter().map(|&a| self.c(a, x)).collect();
        let y = solve(&g, &b);
        let xu = unit(self.e.row(x));
        let mut p = vec![0.0; xu.len()];
        for (k, &a) in basis.iter().enumerate() {
            for (pi, ai) in p.iter_mut().zip(unit(self.e.row(a))) {
                *pi += y[k] * ai;
            }
        }
        xu.iter().zip(&p).map(|(a, b)| (a - b).powi(2)).sum()
    }

    pub fn centroid(&self, x: usize, c: &[usize]) -> f64 {
        if c.is_empty() {
            return 1.0;
        }
        if c.contains(&x) {
            return 0.0;
        }
        let d = self.e.dim();
        let mean = |set: &[usize]| {
            let mut m = vec![0.0; d];
            for &i in set {
                m.iter_mut()
                    .zip(unit(self.e.row(i)))
                    .for_each(|(a, b)| *a += b / set.len() as f64);
            }
            m
        };
        let (a, mut cx) = (mean(c), c.to_vec());
        cx.push(x);
        let b = mean(&cx);
        let ab: f64 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        let na = a.iter().map(|v| v * v).sum::<f64>().sqrt();
        let nb = b.iter().map(|v| v * v).sum::<f64>().sqrt();
        if na == 0.0 || nb == 0.0 {
            return 1.0;
        }
        1.0 - ab / (na * nb)
    }

    fn l(&self, i: usize, j: usize) -> f64 {
        self.w(i) * self.w(j) * self.c(i, j)
    }

    /// det(L_{C+x}) / det(L_C), both determinants explicit.
    pub fn dpp(&self, x: usize, c: &[usize]) -> f64 {
        let mk = |s: &[usize]| -> Vec<Vec<f64>> {
            s.iter()
                .map(|&a| s.iter().map(|&b| self.l(a, b)).collect())
                .collect()
        };
        let mut cx = c.to_vec();
        cx.push(x);
        let den = if c.is_empty() { 1.0 } else { det(mk(c)) };
        det(mk(&cx)) / den
    }

    pub fn f(&self, c: &[usize]) -> f64 {
        (0..self.e.rows())
            .map(|j| c.iter().map(|&i| self.w(i) * self.c(i, j)).fold(0.0f64, f64::max))
            .sum()
    }

    pub fn coverage(&self, x: usize, c: &[usize]) -> f64 {
        let mut cx = c.to_vec();
        cx.push(x);
        (self.f(&cx) - self.f(c)) / self.cost(x)
    }
}

/// How a greedy run stops besides budgets (SPEC §1).
#[derive(Clone, Copy)]
pub enum StopRule {
    /// Only budgets and the threshold: coverage, and the ranking scores MMR, lexical and
    /// hybrid, which run to `k` (SPEC §1, revised).
    None,
    /// Also when the best value is below this (DPP/GRN eps, centroid noise floor).
    Floor(f64),
}

/// Plain greedy from the definition: best value among candidates that fit (ties to the
/// lower index); stop on k, budget, threshold or the stop rule.
#[allow(clippy::too_many_arguments)]
pub fn greedy(
    n: usize,
    value: &dyn Fn(usize, &[usize]) -> f64,
    retained: &[usize],
    k: Option<usize>,
    budget: Option<f64>,
    costs: Option<&[f64]>,
    tau: Option<f64>,
    rule: StopRule,
) -> (Vec<usize>, Vec<f64>) {
    let mut c = retained.to_vec();
    let (mut picks, mut gains) = (vec![], vec![]);
    let mut left = budget.unwrap_or(f64::INFINITY);
    let cost = |x: usize| costs.map_or(1.0, |c| c[x]);
    loop {
        if k.is_some_and(|k| picks.len() >= k) {
            break;
        }
        let mut best: Option<(usize, f64)> = None;
        for x in 0..n {
            if c.contains(&x) || cost(x) > left {
                continue;
            }
            let v = value(x, &c);
            if best.is_none_or(|(_, b)| v > b) {
                best = Some((x, v));
            }
        }
        let Some((x, v)) = best else { break };
        let stop = match rule {
            StopRule::None => false,
            StopRule::Floor(f) => v < f,
        };
        if tau.is_some_and(|t| v < t) || stop {
            break;
        }
        c.push(x);
        left -= cost(x);
        picks.push(x);
        gains.push(v);
    }
    (picks, gains)
}

/// LexSim from its definition (SPEC §1), written without the crate's lexical module:
/// lower-cased alphanumeric tokens, TF-IDF with raw counts and idf ln((1+n)/(1+df)) + 1
/// over pool + query, l2-normalised cosine; Jaccard of word-bigram sets (0 when both are
/// empty); weights 0.5 / 0.5. Document `n` (the pool size) is the query.
pub struct LexSim {
    docs: Vec<Vec<String>>,
    idf: std::collections::HashMap<String, f64>,
}

impl LexSim {
    pub fn new(pool: &[String], query: &str) -> Self {
        let tok = |t: &str| -> Vec<String> {
            let mut out = vec![];
            let mut cur = String::new();
            for ch in t.chars() {
                if ch.is_alphanumeric() {
                    cur.extend(ch.to_lowercase());
                } else if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            if !cur.is_empty() {
                out.push(cur);
            }
            out
        };
        let docs: Vec<Vec<String>> = pool.iter().map(|t| tok(t)).chain([tok(query)]).collect();
        let n = docs.len() as f64;
        let mut idf = std::collections::HashMap::new();
        for d in &docs {
            let set: std::collections::BTreeSet<&String> = d.iter().collect();
            for w in set {
                *idf.entry(w.clone()).or_insert(0.0) += 1.0;
            }
        }
        for v in idf.values_mut() {
            *v = ((1.0 + n) / (1.0 + *v)).ln() + 1.0;
        }
        LexSim { docs, idf }
    }

    fn tfidf(&self, d: usize) -> std::collections::HashMap<&str, f64> {
        let mut v = std::collections::HashMap::new();
        for w in &self.docs[d] {
            *v.entry(w.as_str()).or_insert(0.0) += self.idf[w];
        }
        let norm = v.values().map(|x| x * x).sum::<f64>().sqrt();
        if norm > 0.0 {
            v.values_mut().for_each(|x| *x /= norm);
        }
        v
    }

    pub fn sim(&self, a: usize, b: usize) -> f64 {
        let (va, vb) = (self.tfidf(a), self.tfidf(b));
        let cos: f64 = va
            .iter()
            .map(|(w, x)| x * vb.get(w).copied().unwrap_or(0.0))
            .sum();
        let bi = |d: usize| -> std::collections::BTreeSet<(String, String)> {
            self.docs[d]
                .windows(2)
                .map(|w| (w[0].clone(), w[1].clone()))
                .collect()
        };
        let (ba, bb) = (bi(a), bi(b));
        let union = ba.union(&bb).count();
        let jac = if union == 0 {
            0.0
        } else {
            ba.intersection(&bb).count() as f64 / union as f64
        };
        0.5 * cos + 0.5 * jac
    }
}
