//! The GP's evidence (issue 30) against a slow, direct evaluation: `Sigma` built entry by
//! entry from the textbook kernels, its determinant by elimination with pivoting, the
//! quadratic form by Gauss-Jordan (no Cholesky anywhere), on seeded problems of odd
//! sizes; the gradient against central finite differences of that evaluation; the
//! profiled scale and offset against the normal equations; the fit against a grid.

use crate::rerank::{bp, full_refit, overlay, pool, rerank, P};
use crate::slow;
use ctxprune::backend::cpu::gp::CpuStore;
use ctxprune::rerank::auto::{AUTO_CONFIRM, AUTO_CONFIRM_FIRST, AUTO_RESERVE};
use ctxprune::rerank::evidence::{
    evidence, fit, kernel_and_slope, Evidence, FitOptions, Hyper, Observed, BANDWIDTH, NOISE, OFFSET, SCALE,
    SIGNAL,
};
use ctxprune::rerank::gp::{Fitted, Gp, KernelRows, PoolKernel};
use ctxprune::rerank::{
    kernel_rows_in, Hyperparameters, Method, Precomputed, Prior, RerankConfig, RerankOptions, RowPrecision,
};
use ctxprune::rng::Rng;
use ctxprune::similarity::{Kernel, KernelKind};

const FAMILIES: [KernelKind; 4] = [
    KernelKind::Vmf,
    KernelKind::Rbf,
    KernelKind::Matern52,
    KernelKind::Cosine,
];

/// The kernel at cosine `c`, written as the textbooks write it: vMF `exp(kappa (c - 1))`;
/// on unit vectors `|x - y|² = 2 (1 - c)`, so RBF `exp(-|x - y|² / (2 l²))` and Matérn-5/2
/// `(1 + sqrt5 r / l + 5 r² / (3 l²)) exp(-sqrt5 r / l)` with `r = |x - y|`.
fn textbook(family: KernelKind, log_bw: f64, c: f64) -> f64 {
    let bw = log_bw.exp();
    let r2 = 2.0 * (1.0 - c);
    match family {
        KernelKind::Cosine => c,
        KernelKind::Vmf => (bw * (c - 1.0)).exp(),
        KernelKind::Rbf => (-r2 / (2.0 * bw)).exp(),
        KernelKind::Matern52 => {
            let s = (5.0 * r2 / bw).sqrt();
            (1.0 + s + 5.0 * r2 / (3.0 * bw)) * (-s).exp()
        }
    }
}

/// A problem: `t` observations of unit vectors in `d` dimensions (cosines in f64), scores
/// and prior means in [0, 1].
struct Problem {
    t: usize,
    cos: Vec<f64>,
    y: Vec<f64>,
    mu0: Vec<f64>,
}

impl Problem {
    fn new(rng: &mut Rng, t: usize, d: usize) -> Problem {
        let x: Vec<Vec<f32>> = (0..t)
            .map(|_| (0..d).map(|_| rng.normal() as f32).collect())
            .collect();
        let mut cos = vec![0.0; t * t];
        for i in 0..t {
            for j in 0..t {
                cos[i * t + j] = if i == j { 1.0 } else { slow::cos(&x[i], &x[j]) };
            }
        }
        // slow::cos is symmetric in its arguments up to rounding; make it exact.
        for i in 0..t {
            for j in 0..i {
                cos[j * t + i] = cos[i * t + j];
            }
        }
        Problem {
            t,
            cos,
            y: (0..t).map(|_| rng.uniform()).collect(),
            mu0: (0..t).map(|_| rng.uniform()).collect(),
        }
    }

    fn obs(&self) -> Observed<'_> {
        Observed {
            cos: &self.cos,
            y: &self.y,
            mu0: &self.mu0,
        }
    }

    /// `signal K + noise I`, entry by entry.
    fn sigma(&self, family: KernelKind, h: &Hyper) -> Vec<Vec<f64>> {
        let t = self.t;
        (0..t)
            .map(|i| {
                (0..t)
                    .map(|j| {
                        let c = if i == j { 1.0 } else { self.cos[i * t + j] };
                        h.log_signal.exp() * textbook(family, h.log_bandwidth, c)
                            + if i == j { h.log_noise.exp() } else { 0.0 }
                    })
                    .collect()
            })
            .collect()
    }

    /// `log p(y)` by the definition: Gaussian density of `y - scale mu0 - offset` under
    /// `signal K + noise I`.
    fn log_evidence(&self, family: KernelKind, h: &Hyper) -> f64 {
        let t = self.t;
        let sigma = self.sigma(family, h);
        let r: Vec<f64> = (0..t)
            .map(|i| self.y[i] - h.scale * self.mu0[i] - h.offset)
            .collect();
        let w = slow::solve(&sigma, &r);
        let quad: f64 = r.iter().zip(&w).map(|(a, b)| a * b).sum();
        let det = slow::det(sigma);
        assert!(det > 0.0, "Sigma not positive definite in the reference");
        -0.5 * quad - 0.5 * det.ln() - 0.5 * t as f64 * (2.0 * std::f64::consts::PI).ln()
    }
}

fn random_hyper(rng: &mut Rng) -> Hyper {
    let span = |rng: &mut Rng, lo: f64, hi: f64| lo + (hi - lo) * rng.uniform();
    Hyper {
        log_bandwidth: span(rng, 0.5f64.ln(), 20f64.ln()),
        log_signal: span(rng, 0.01f64.ln(), 1f64.ln()),
        log_noise: span(rng, 1e-3f64.ln(), 0.1f64.ln()),
        scale: span(rng, -0.5, 1.5),
        offset: span(rng, -0.5, 0.5),
    }
}

fn with(h: &Hyper, k: usize, v: f64) -> Hyper {
    let mut h = *h;
    match k {
        BANDWIDTH => h.log_bandwidth = v,
        SIGNAL => h.log_signal = v,
        NOISE => h.log_noise = v,
        SCALE => h.scale = v,
        OFFSET => h.offset = v,
        _ => unreachable!(),
    }
    h
}

fn get(h: &Hyper, k: usize) -> f64 {
    [h.log_bandwidth, h.log_signal, h.log_noise, h.scale, h.offset][k]
}

#[test]
fn kernel_values_and_slopes_match_the_textbook_forms() {
    let mut rng = Rng::new(11);
    for family in FAMILIES {
        for _ in 0..200 {
            let c = 2.0 * rng.uniform() - 1.0;
            let lb = (0.1f64).ln() + rng.uniform() * (100f64).ln();
            let (k, s) = kernel_and_slope(family, lb, c);
            let want = textbook(family, lb, c);
            assert!((k - want).abs() <= 1e-13, "{family:?} at c={c}: {k} vs {want}");
            let h = 1e-6;
            let fd = (textbook(family, lb + h, c) - textbook(family, lb - h, c)) / (2.0 * h);
            assert!(
                (s - fd).abs() <= 1e-7 * (1.0 + fd.abs()),
                "{family:?} slope at c={c}: {s} vs {fd}"
            );
        }
        // The diagonal: every kernel is 1 at c = 1 and flat in the bandwidth there.
        assert_eq!(kernel_and_slope(family, 0.3, 1.0), (1.0, 0.0), "{family:?}");
    }
}

#[test]
fn evidence_equals_the_dense_definition_on_odd_sizes() {
    let mut rng = Rng::new(0xe71de);
    for family in FAMILIES {
        for (t, d) in [(1, 3), (2, 5), (3, 7), (7, 5), (13, 9), (31, 11)] {
            let p = Problem::new(&mut rng, t, d);
            for _ in 0..3 {
                let h = random_hyper(&mut rng);
                let ours = evidence(family, &p.obs(), &h).unwrap();
                let want = p.log_evidence(family, &h);
                assert!(
                    (ours.value - want).abs() <= 1e-9 * (1.0 + want.abs()),
                    "{family:?} t={t}: {} vs {want}",
                    ours.value
                );
            }
        }
    }
}

#[test]
fn gradient_equals_central_differences_of_the_definition() {
    let mut rng = Rng::new(0x9ad);
    for family in FAMILIES {
        for (t, d) in [(1, 3), (3, 5), (7, 7), (13, 5), (29, 9)] {
            let p = Problem::new(&mut rng, t, d);
            let h = random_hyper(&mut rng);
            let Evidence { grad, .. } = evidence(family, &p.obs(), &h).unwrap();
            for (k, &g) in grad.iter().enumerate() {
                let step = 1e-5;
                let x = get(&h, k);
                let up = p.log_evidence(family, &with(&h, k, x + step));
                let down = p.log_evidence(family, &with(&h, k, x - step));
                let fd = (up - down) / (2.0 * step);
                let tol = 1e-6 * (1.0 + fd.abs() + up.abs().max(down.abs()) * 1e-3);
                assert!(
                    (g - fd).abs() <= tol,
                    "{family:?} t={t} d/d{k}: {g} vs {fd} (tol {tol:e})"
                );
            }
            if family == KernelKind::Cosine {
                assert_eq!(grad[BANDWIDTH], 0.0, "the cosine kernel has no bandwidth");
            }
        }
    }
}

#[test]
fn paper_point_is_the_standardised_gp_of_spec_3() {
    // With scale 1, offset m, signal s² and noise 1e-4 s², the density of y in oracle units
    // is the standardised GP's density of z = (y - mu0 - m) / s (unit kernel, jitter 1e-4)
    // times the Jacobian s^-t.
    let mut rng = Rng::new(5);
    let p = Problem::new(&mut rng, 9, 7);
    let kernel = Kernel::Vmf { kappa: 3.5 };
    let h = Hyper::paper(kernel, &p.obs(), 1e-4).unwrap();
    let t = p.t;
    let r: Vec<f64> = (0..t).map(|i| p.y[i] - p.mu0[i]).collect();
    let m = r.iter().sum::<f64>() / t as f64;
    let s = (r.iter().map(|x| (x - m).powi(2)).sum::<f64>() / t as f64).sqrt();
    assert_eq!(h.offset, m);
    assert_eq!(h.scale, 1.0);
    assert!((h.log_bandwidth - 3.5f64.ln()).abs() < 1e-7);
    let z: Vec<f64> = r.iter().map(|x| (x - m) / s).collect();
    let kz: Vec<Vec<f64>> = (0..t)
        .map(|i| {
            (0..t)
                .map(|j| {
                    let c = if i == j { 1.0 } else { p.cos[i * t + j] };
                    textbook(KernelKind::Vmf, h.log_bandwidth, c) + if i == j { 1e-4 } else { 0.0 }
                })
                .collect()
        })
        .collect();
    let w = slow::solve(&kz, &z);
    let quad: f64 = z.iter().zip(&w).map(|(a, b)| a * b).sum();
    let want = -0.5 * quad
        - 0.5 * slow::det(kz).ln()
        - 0.5 * t as f64 * (2.0 * std::f64::consts::PI).ln()
        - t as f64 * s.ln();
    let got = evidence(KernelKind::Vmf, &p.obs(), &h).unwrap().value;
    assert!((got - want).abs() <= 1e-9 * (1.0 + want.abs()), "{got} vs {want}");
    // One observation: std := 1, as the standardisation takes it.
    let one = Observed {
        cos: &[1.0],
        y: &[1.0],
        mu0: &[1.0],
    };
    let h1 = Hyper::paper(kernel, &one, 1e-4).unwrap();
    assert_eq!((h1.log_signal, h1.offset), (0.0, 0.0));
}

/// The fit's scale and offset are the generalised least-squares solution (from the
/// reference's own solve), and the evidence's gradient in them vanishes there.
#[test]
fn profiled_scale_and_offset_solve_the_normal_equations() {
    let mut rng = Rng::new(77);
    for (t, d) in [(5, 3), (11, 7), (23, 5)] {
        let p = Problem::new(&mut rng, t, d);
        let start = random_hyper(&mut rng);
        let opts = FitOptions {
            max_iter: 0,
            scale: (-1e3, 1e3),
            ..FitOptions::default()
        };
        let got = fit(KernelKind::Vmf, &p.obs(), &start, &opts).unwrap();
        assert_eq!(got.iterations, 0);
        let h = got.hyper;
        let sigma: Vec<Vec<f64>> = (0..t)
            .map(|i| {
                (0..t)
                    .map(|j| {
                        let c = if i == j { 1.0 } else { p.cos[i * t + j] };
                        h.log_signal.exp() * textbook(KernelKind::Vmf, h.log_bandwidth, c)
                            + if i == j { h.log_noise.exp() } else { 0.0 }
                    })
                    .collect()
            })
            .collect();
        let wp = slow::solve(&sigma, &p.mu0);
        let w1 = slow::solve(&sigma, &vec![1.0; t]);
        let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
        let g = vec![
            vec![dot(&p.mu0, &wp), dot(&p.mu0, &w1)],
            vec![dot(&w1, &p.mu0), dot(&w1, &vec![1.0; t])],
        ];
        let want = slow::solve(&g, &[dot(&wp, &p.y), dot(&w1, &p.y)]);
        assert!(
            (h.scale - want[0]).abs() <= 1e-8 * (1.0 + want[0].abs()),
            "{} vs {}",
            h.scale,
            want[0]
        );
        assert!(
            (h.offset - want[1]).abs() <= 1e-8 * (1.0 + want[1].abs()),
            "{} vs {}",
            h.offset,
            want[1]
        );
        assert!(got.evidence.grad[SCALE].abs() <= 1e-8, "{:?}", got.evidence.grad);
        assert!(got.evidence.grad[OFFSET].abs() <= 1e-8, "{:?}", got.evidence.grad);
    }
}

/// The scale's box binds (scores that fall with the prior want a negative scale: it is
/// clamped to 0, and the offset is the best one for scale 0), and a held scale or offset
/// leaves the other to its own normal equation.
#[test]
fn profile_clamps_or_holds_what_the_options_say() {
    let mut rng = Rng::new(404);
    let mut p = Problem::new(&mut rng, 17, 6);
    for i in 0..p.t {
        p.y[i] = 0.9 - 0.6 * p.mu0[i] + 0.05 * rng.normal();
    }
    let start = Hyper {
        log_bandwidth: 1.0,
        log_signal: (0.05f64).ln(),
        log_noise: (0.004f64).ln(),
        scale: 0.4,
        offset: 0.1,
    };
    let w = |v: &[f64]| slow::solve(&p.sigma(KernelKind::Vmf, &start), v);
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
    let ones = vec![1.0; p.t];
    let (w1, wp) = (w(&ones), w(&p.mu0));
    let offset_given = |a: f64| {
        let r: Vec<f64> = (0..p.t).map(|i| p.y[i] - a * p.mu0[i]).collect();
        dot(&w1, &r) / dot(&w1, &ones)
    };
    let scale_given = |b: f64| {
        let r: Vec<f64> = p.y.iter().map(|y| y - b).collect();
        dot(&wp, &r) / dot(&wp, &p.mu0)
    };
    let probe = |opts: FitOptions| {
        fit(
            KernelKind::Vmf,
            &p.obs(),
            &start,
            &FitOptions { max_iter: 0, ..opts },
        )
        .unwrap()
        .hyper
    };
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * (1.0 + b.abs());
    // Both fitted, in [0, 1]: the unconstrained scale is negative, so 0.
    let h = probe(FitOptions::default());
    let free = probe(FitOptions {
        scale: (-10.0, 10.0),
        ..FitOptions::default()
    });
    assert!(
        free.scale < -0.2,
        "the scores fall with the prior: {}",
        free.scale
    );
    assert_eq!(h.scale, 0.0);
    assert!(
        close(h.offset, offset_given(0.0)),
        "{} vs {}",
        h.offset,
        offset_given(0.0)
    );
    // The scale held at the start's.
    let h = probe(FitOptions {
        fit_scale: false,
        ..FitOptions::default()
    });
    assert_eq!(h.scale, 0.4);
    assert!(close(h.offset, offset_given(0.4)));
    // The offset held: the scale from its own equation (in its box).
    let h = probe(FitOptions {
        fit_offset: false,
        scale: (-10.0, 10.0),
        ..FitOptions::default()
    });
    assert_eq!(h.offset, 0.1);
    assert!(
        close(h.scale, scale_given(0.1)),
        "{} vs {}",
        h.scale,
        scale_given(0.1)
    );
    // Both held.
    let h = probe(FitOptions {
        fit_offset: false,
        fit_scale: false,
        ..FitOptions::default()
    });
    assert_eq!((h.scale, h.offset), (0.4, 0.1));
}

#[test]
fn fit_climbs_to_a_stationary_point_and_repeats_bit_for_bit() {
    let mut rng = Rng::new(0xf17);
    for family in [KernelKind::Vmf, KernelKind::Matern52, KernelKind::Rbf] {
        for (t, d) in [(9, 5), (25, 7), (41, 11)] {
            // Scores from a smooth function of the vectors plus noise, so the evidence has
            // an interior optimum to find.
            let mut p = Problem::new(&mut rng, t, d);
            for i in 0..t {
                let c0 = p.cos[i * t];
                p.y[i] = 0.5 + 0.3 * c0 + 0.5 * p.mu0[i] + 0.05 * rng.normal();
            }
            let start = Hyper::paper(Kernel::Vmf { kappa: 2.0 }, &p.obs(), 1e-4).unwrap();
            let opts = FitOptions {
                max_iter: 200,
                ..FitOptions::default()
            };
            let a = fit(family, &p.obs(), &start, &opts).unwrap();
            let b = fit(family, &p.obs(), &start, &opts).unwrap();
            assert_eq!(
                format!("{:?}", a),
                format!("{:?}", b),
                "the fit repeats bit for bit"
            );
            let at_start = evidence(family, &p.obs(), &start).unwrap().value;
            assert!(
                a.evidence.value >= at_start,
                "{family:?} t={t}: fell below the start"
            );
            // The evidence reported is the evidence at the point reported.
            let again = evidence(family, &p.obs(), &a.hyper).unwrap();
            assert_eq!(again, a.evidence);
            let want = p.log_evidence(family, &a.hyper);
            assert!((a.evidence.value - want).abs() <= 1e-9 * (1.0 + want.abs()));
            // Stationary in every free coordinate of the box: ln bandwidth, ln signal and
            // ln (noise / signal), where ln noise = ln signal + ln ratio.
            let opts_box = [opts.log_bandwidth, opts.log_signal, opts.log_noise_ratio];
            let h = a.hyper;
            let coords = [h.log_bandwidth, h.log_signal, h.log_noise - h.log_signal];
            let gr = a.evidence.grad;
            let grads = [gr[BANDWIDTH], gr[SIGNAL] + gr[NOISE], gr[NOISE]];
            for k in 0..3 {
                let (x, g) = (coords[k], grads[k]);
                let (lo, hi) = opts_box[k];
                let held = (x <= lo + 1e-12 && g < 0.0) || (x >= hi - 1e-12 && g > 0.0);
                assert!(
                    held || g.abs() <= 1e-4 * (1.0 + a.evidence.value.abs()),
                    "{family:?} t={t}: d/d{k} = {g} at {x} after {} iterations",
                    a.iterations
                );
            }
        }
    }
}

/// No point of a grid over the three log coordinates (scale and offset profiled at each)
/// has more evidence than the fit started from the best of them.
#[test]
fn fit_from_the_best_grid_point_is_no_worse_than_the_grid() {
    let mut rng = Rng::new(31);
    let p = Problem::new(&mut rng, 15, 5);
    let opts = FitOptions {
        max_iter: 100,
        ..FitOptions::default()
    };
    let probe = FitOptions { max_iter: 0, ..opts };
    let base = Hyper::paper(Kernel::Vmf { kappa: 1.0 }, &p.obs(), 1e-4).unwrap();
    let mut best: Option<(f64, Hyper)> = None;
    for a in 0..9 {
        for b in 0..9 {
            for c in 0..9 {
                let h = Hyper {
                    log_bandwidth: -2.0 + 0.9 * f64::from(a),
                    log_signal: -6.0 + 0.75 * f64::from(b),
                    log_noise: -9.0 + 1.1 * f64::from(c),
                    ..base
                };
                let e = fit(KernelKind::Vmf, &p.obs(), &h, &probe).unwrap();
                let want = p.log_evidence(KernelKind::Vmf, &e.hyper);
                assert!((e.evidence.value - want).abs() <= 1e-8 * (1.0 + want.abs()));
                if best.is_none_or(|(v, _)| e.evidence.value > v) {
                    best = Some((e.evidence.value, e.hyper));
                }
            }
        }
    }
    let (v, h) = best.unwrap();
    let got = fit(KernelKind::Vmf, &p.obs(), &h, &opts).unwrap();
    assert!(got.evidence.value >= v, "{} < grid best {v}", got.evidence.value);
}

#[test]
fn bad_inputs_are_errors_naming_them() {
    let cos = [1.0, 0.5, 0.5, 1.0];
    let h = Hyper {
        log_bandwidth: 0.0,
        log_signal: 0.0,
        log_noise: -4.0,
        scale: 1.0,
        offset: 0.0,
    };
    let ok = Observed {
        cos: &cos,
        y: &[0.5, 0.2],
        mu0: &[1.0, 0.0],
    };
    let cases: Vec<(Observed, Hyper, &str)> = vec![
        (
            Observed {
                y: &[],
                mu0: &[],
                cos: &[],
            },
            h,
            "observations",
        ),
        (Observed { mu0: &[1.0], ..ok }, h, "mu0"),
        (Observed { cos: &cos[..3], ..ok }, h, "cos"),
        (
            Observed {
                y: &[0.5, f64::NAN],
                ..ok
            },
            h,
            "y",
        ),
        (
            Observed {
                cos: &[1.0, 0.5, 0.4, 1.0],
                ..ok
            },
            h,
            "cos",
        ),
        (
            ok,
            Hyper {
                log_noise: f64::INFINITY,
                ..h
            },
            "log_noise",
        ),
        (
            ok,
            Hyper {
                offset: f64::NAN,
                ..h
            },
            "offset",
        ),
    ];
    for (obs, h, name) in cases {
        let e = evidence(KernelKind::Vmf, &obs, &h).unwrap_err().to_string();
        assert!(e.contains(name), "{name}: {e}");
        assert!(!e.contains('\n'), "{e}");
        let e = fit(KernelKind::Vmf, &obs, &h, &FitOptions::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains(name), "{name}: {e}");
    }
    for (opts, name) in [
        (
            FitOptions {
                log_noise_ratio: (1.0, 0.0),
                ..FitOptions::default()
            },
            "log_noise_ratio",
        ),
        (
            FitOptions {
                scale: (0.0, f64::INFINITY),
                ..FitOptions::default()
            },
            "scale",
        ),
        (
            FitOptions {
                gtol: f64::NAN,
                ..FitOptions::default()
            },
            "gtol",
        ),
    ] {
        let e = fit(KernelKind::Vmf, &ok, &h, &opts).unwrap_err().to_string();
        assert!(e.contains(name), "{name}: {e}");
    }
    let e = Hyper::paper(Kernel::Vmf { kappa: 1.0 }, &ok, 0.0)
        .unwrap_err()
        .to_string();
    assert!(e.contains("jitter"), "{e}");
    // Identical observations with no noise do not factor: an error, not a panic.
    let same = Observed {
        cos: &[1.0, 1.0, 1.0, 1.0],
        y: &[0.5, 0.5],
        mu0: &[0.0, 0.0],
    };
    let tiny = Hyper {
        log_noise: -800.0,
        ..h
    };
    let e = evidence(KernelKind::Vmf, &same, &tiny).unwrap_err().to_string();
    assert!(e.contains("hyperparameters"), "{e}");
}

/// The posterior of the evidence's model from scratch: `scale mu0 + offset + k' (K_AA +
/// rho I)^{-1} (y - scale mu0 - offset)` and `signal (1 - k' (K_AA + rho I)^{-1} k)`, by
/// elimination, with `rho = noise / signal` (the GP's jitter).
fn dense_fitted(
    k: &PoolKernel<'_>,
    mu0: &[f64],
    obs: &[(Option<usize>, f64, f64)],
    h: &Hyper,
) -> (Vec<f64>, Vec<f64>) {
    let n = k.len();
    let mut qrow = vec![0.0; n];
    k.query_row(&mut qrow);
    let kv = |a: Option<usize>, b: Option<usize>| match (a, b) {
        (None, None) => 1.0,
        (Some(i), Some(j)) => k.get(i, j).unwrap(),
        (Some(i), None) | (None, Some(i)) => qrow[i],
    };
    let rho = (h.log_noise - h.log_signal).exp();
    let t = obs.len();
    let kaa: Vec<Vec<f64>> = (0..t)
        .map(|a| {
            (0..t)
                .map(|b| kv(obs[a].0, obs[b].0) + if a == b { rho } else { 0.0 })
                .collect()
        })
        .collect();
    let r: Vec<f64> = obs.iter().map(|o| o.1 - h.scale * o.2 - h.offset).collect();
    let w = slow::solve(&kaa, &r);
    let signal = h.log_signal.exp();
    let (mut mean, mut var) = (vec![0.0; n], vec![0.0; n]);
    for i in 0..n {
        let ki: Vec<f64> = obs.iter().map(|o| kv(o.0, Some(i))).collect();
        let u = slow::solve(&kaa, &ki);
        mean[i] = h.scale * mu0[i] + h.offset + ki.iter().zip(&w).map(|(a, b)| a * b).sum::<f64>();
        var[i] = signal * (1.0 - ki.iter().zip(&u).map(|(a, b)| a * b).sum::<f64>()).max(0.0);
    }
    (mean, var)
}

#[test]
fn fitted_gp_equals_the_dense_posterior_of_its_hyperparameters() {
    for &(n, d, seed) in &[(41usize, 7usize, 4u64), (29, 11, 5)] {
        let (p, scores) = pool(n, d, seed);
        let k = p.rows();
        let mu0: Vec<f64> = (0..n).map(|i| (n - 1 - i) as f64 / (n - 1) as f64).collect();
        let mut rng = Rng::new(seed);
        let h = Hyper {
            log_bandwidth: 0.0,
            log_signal: (0.04f64).ln(),
            log_noise: (0.002f64).ln(),
            scale: 0.37,
            offset: 0.21,
        };
        let rho = (h.log_noise - h.log_signal).exp();
        let store = Box::new(CpuStore::new(&k, mu0.clone()));
        let mut gp = Gp::with_jitter(&k, store, mu0.clone(), 1.0, rho).unwrap();
        gp.set_fitted(Some(h.fitted())).unwrap();
        assert_eq!(gp.jitter(), Some(rho));
        let mut obs = vec![(None, 1.0, 1.0)];
        let (mut mean, mut var) = (vec![0.0; n], vec![0.0; n]);
        for step in 0..11 {
            let j = rng.below(n);
            gp.observe(j, scores[j]).unwrap();
            obs.push((Some(j), scores[j], mu0[j]));
            gp.posterior(&mut mean, &mut var).unwrap();
            let (m2, v2) = dense_fitted(&k, &mu0, &obs, &h);
            // V is stored in f32 (documented): 1e-5 against the f64 refit.
            crate::assert_close(&format!("mean n={n} step {step}"), &mean, &m2, 1e-5);
            crate::assert_close(&format!("var n={n} step {step}"), &var, &v2, 1e-5);
        }
        // Back to the standardisation: the paper's read-out again.
        gp.set_fitted(None).unwrap();
        assert!(gp
            .set_fitted(Some(Fitted {
                signal: 0.0,
                ..h.fitted()
            }))
            .is_err());
        assert!(gp
            .set_fitted(Some(Fitted {
                offset: f64::NAN,
                ..h.fitted()
            }))
            .is_err());
    }
}

#[test]
fn pool_cosines_are_what_the_kernel_rows_apply_the_kernel_to() {
    let (p, _) = pool(33, 9, 8);
    let k = p.rows();
    let n = k.len();
    let mut qrow = vec![0.0; n];
    k.query_row(&mut qrow);
    let e = p.pool.embeddings();
    for (i, &kq) in qrow.iter().enumerate() {
        for j in [0, 5, 17, 32] {
            let c = k.cosine(Some(i), Some(j)).unwrap();
            assert_eq!(c, k.cosine(Some(j), Some(i)).unwrap(), "symmetric");
            assert_eq!(
                f64::from(p.kernel.apply(c as f32)),
                k.get(i, j).unwrap(),
                "K({i}, {j})"
            );
            if i != j {
                assert!((c - slow::cos(e.row(i), e.row(j))).abs() < 1e-6);
            }
        }
        let c = k.cosine(None, Some(i)).unwrap();
        assert_eq!(f64::from(p.kernel.apply(c as f32)), kq, "K(query, {i})");
        assert!((c - slow::cos(e.row(i), &p.q)).abs() < 1e-6);
    }
    assert_eq!(k.cosine(None, None).unwrap(), 1.0);
    let e = k.cosine(Some(33), None).unwrap_err().to_string();
    assert!(e.contains("index 33 outside the pool of 33"), "{e}");
    for (i, j) in [(33, 0), (0, 33), (33, 33), (usize::MAX, 1)] {
        let e = k.get(i, j).unwrap_err().to_string();
        assert!(
            e.starts_with("invalid get: index ") && e.contains("outside the pool of 33"),
            "{e}"
        );
    }
}

/// Which run [`evidence_replay`] replays.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Replay {
    /// `hyperparameters = evidence` with this prior.
    Evidence(Prior),
    /// `method = auto`.
    Auto,
}

/// What BoundaryMORPH with `hyperparameters = evidence` must do, from scratch: the paper's
/// dense posterior until the first fit; at 10 calls and whenever the calls have doubled, a
/// fit of the evidence over the query and the calls (warm-started), then the dense
/// posterior of the fitted model on the fitted kernel; the boundary rule at every step.
/// [`Replay::Auto`] (`method = auto`: the feedback prior with its neighbour share, the
/// kernel's concentration doubled, the paper's hyperparameters): no fit, unless at 10 calls every score is below
/// its switch; then the zero prior and the fits from there on; else the feedback prior
/// re-shaped every 10 calls.
pub(crate) fn evidence_replay(
    p: &P,
    scores: &[f64],
    budget: usize,
    cap: usize,
    prec: RowPrecision,
    how: Replay,
) -> (Vec<usize>, Option<Hyper>) {
    use ctxprune::rerank::auto::{AUTO_CONCENTRATION, AUTO_LOW_SCORE};
    let n = scores.len();
    let (prior, mut switch, concentration, neighbours) = match how {
        Replay::Evidence(prior) => (prior, None, 1.0, 0.0),
        Replay::Auto => (
            Prior::Feedback,
            Some(AUTO_LOW_SCORE),
            AUTO_CONCENTRATION,
            ctxprune::rerank::auto::AUTO_NEIGHBOURS,
        ),
    };
    // The feedback prior's next re-shaping (auto's, until a switch drops the prior).
    let mut feedback = (prior == Prior::Feedback).then_some(ctxprune::rerank::FEEDBACK_EVERY);
    let mut evidence_on = switch.is_none();
    let mut kernel = p.kernel.concentrated(concentration);
    // The prior's values are pinned against their definition in rerank_beyond.
    let mut mu0 = ctxprune::rerank::prior_mean(prior, &kernel_rows_in(&p.pool, &p.q, kernel, prec).unwrap());
    let mut mu0_q = if prior == Prior::Zero { 0.0 } else { 1.0 };
    let mut fitted: Option<Hyper> = None;
    let mut next = 10;
    assert_eq!(next, ctxprune::rerank::EVIDENCE_FIRST);
    let mut y = vec![None; n];
    let mut calls: Vec<usize> = vec![];
    // The MIPS top's confirming calls, kept out of the GP while the prior stands.
    let mut unseen: Vec<usize> = vec![];
    while calls.len() < budget {
        let k = kernel_rows_in(&p.pool, &p.q, kernel, prec).unwrap();
        let obs: Vec<(Option<usize>, f64, f64)> = std::iter::once((None, 1.0, mu0_q))
            .chain(
                calls
                    .iter()
                    .filter(|j| !unseen.contains(j))
                    .map(|&j| (Some(j), scores[j], mu0[j])),
            )
            .collect();
        let (mut m, mut v) = match &fitted {
            None => {
                let r: Vec<(Option<usize>, f64)> = obs.iter().map(|o| (o.0, o.1 - o.2)).collect();
                full_refit(&k, &mu0, &r, 1e-4)
            }
            Some(h) => dense_fitted(&k, &mu0, &obs, h),
        };
        overlay(&mut m, &mut v, &y);
        let Some(j) = bp(&m, &v, &y, cap) else {
            break;
        };
        calls.push(j);
        y[j] = Some(scores[j]);
        if calls.len() >= next && calls.len() < budget {
            if let Some(t) = switch.take() {
                let low = |calls: &[usize]| calls.iter().all(|&j| scores[j] < t);
                // The MIPS top confirms: its first AUTO_CONFIRM documents, those not
                // scored yet, in MIPS order, one at a time while every score is low and
                // the budget lasts (AUTO_RESERVE calls left after the first
                // AUTO_CONFIRM_FIRST).
                let mut confirmed = 0;
                for j in 0..n.min(AUTO_CONFIRM) {
                    let keep = if confirmed < AUTO_CONFIRM_FIRST {
                        0
                    } else {
                        AUTO_RESERVE
                    };
                    if y[j].is_none()
                        && low(&calls)
                        && calls.len() + keep < budget
                        && calls.len() + 1 < ctxprune::rerank::EVIDENCE_MAX_OBSERVATIONS
                    {
                        confirmed += 1;
                        calls.push(j);
                        unseen.push(j);
                        y[j] = Some(scores[j]);
                    }
                }
                if low(&calls) && calls.len() < budget {
                    unseen.clear();
                    mu0 = vec![0.0; n];
                    mu0_q = 0.0;
                    evidence_on = true;
                    feedback = None;
                }
            }
        }
        // The feedback prior from every score so far, the confirming calls' included (its
        // values are pinned against their definition in rerank_feedback).
        if feedback.is_some_and(|due| calls.len() >= due && calls.len() < budget) {
            let k = kernel_rows_in(&p.pool, &p.q, kernel, prec).unwrap();
            let seen: Vec<(usize, f64)> = calls.iter().map(|&j| (j, scores[j])).collect();
            mu0 = ctxprune::rerank::feedback_mean_with(&k, &seen, neighbours).unwrap();
            feedback = Some(calls.len() + ctxprune::rerank::FEEDBACK_EVERY);
        }
        if evidence_on && calls.len() >= next && calls.len() < budget {
            let k = kernel_rows_in(&p.pool, &p.q, kernel, prec).unwrap();
            let idx: Vec<Option<usize>> = std::iter::once(None)
                .chain(calls.iter().map(|&j| Some(j)))
                .collect();
            let t = idx.len();
            let cos: Vec<f64> = (0..t * t)
                .map(|c| k.cosine(idx[c / t], idx[c % t]).unwrap())
                .collect();
            let yy: Vec<f64> = idx.iter().map(|i| i.map_or(1.0, |j| scores[j])).collect();
            let pp: Vec<f64> = idx.iter().map(|i| i.map_or(mu0_q, |j| mu0[j])).collect();
            let o = Observed {
                cos: &cos,
                y: &yy,
                mu0: &pp,
            };
            let start = fitted.unwrap_or_else(|| Hyper::paper(kernel, &o, 1e-4).unwrap());
            let f = fit(KernelKind::Vmf, &o, &start, &FitOptions::default()).unwrap();
            kernel = Kernel::Vmf {
                kappa: f.hyper.log_bandwidth.exp() as f32,
            };
            fitted = Some(f.hyper);
            next = 2 * calls.len();
        }
    }
    (calls, fitted)
}

#[test]
fn boundary_morph_by_the_evidence_follows_a_dense_replay_call_for_call() {
    for (n, d, seed, budget, prior, prec) in [
        (48usize, 7usize, 21u64, 23usize, Prior::Mips, RowPrecision::F32),
        (37, 5, 22, 12, Prior::Zero, RowPrecision::F32),
        (40, 9, 23, 10, Prior::Mips, RowPrecision::F32),
        (43, 7, 25, 19, Prior::Score, RowPrecision::F32),
        // Every epoch reads the half-precision copy, the first and the refitted ones.
        (45, 11, 24, 21, Prior::Zero, RowPrecision::Bf16),
    ] {
        let (p, noise) = pool(n, d, seed);
        // Scores that are a smooth function of the rows (a bump around row n/2) and of the
        // MIPS rank, so the evidence has a kernel and a prior to find. (On scores with no
        // structure the fit flattens the posterior, and a dense replay can only follow the
        // run up to the first of its many exact ties.)
        let e = p.pool.embeddings();
        let centre = e.row(n / 2).to_vec();
        let scores: Vec<f64> = (0..n)
            .map(|j| {
                let bump = (4.0 * (slow::cos(e.row(j), &centre) - 1.0)).exp();
                let rank = (n - 1 - j) as f64 / (n - 1) as f64;
                (0.1 + 0.6 * bump + 0.2 * rank + 0.05 * noise[j]).clamp(0.0, 1.0)
            })
            .collect();
        let cap = 5;
        let mut cfg = RerankConfig::new(Method::BoundaryMorph, budget, cap);
        cfg.prior = prior;
        cfg.hyperparameters = Hyperparameters::Evidence;
        cfg.row_precision = prec;
        let mut o = Precomputed::new(scores.clone(), budget).unwrap();
        let got = rerank(&cfg, &p, &mut o).unwrap();
        let (calls, fitted) = evidence_replay(&p, &scores, budget, cap, prec, Replay::Evidence(prior));
        assert_eq!(got.scored, calls, "n={n} prior {prior:?}");
        assert_eq!(got.hyperparameters, fitted, "n={n}");
        // Fits at 10 and 20 calls (before the budget ends); none below 10.
        assert_eq!(got.hyperparameters.is_some(), budget > 10, "n={n}");
        // A fit on half-precision rows says they do not resolve its kernels; no other run does.
        let half_note = got
            .notes
            .iter()
            .any(|s| s.contains("the evidence's kernels read bf16 rows"));
        assert_eq!(
            half_note,
            prec == RowPrecision::Bf16 && budget > 10,
            "n={n}: {:?}",
            got.notes
        );
        if let Some(h) = got.hyperparameters {
            assert_eq!(
                got.kernel,
                Kernel::Vmf {
                    kappa: h.log_bandwidth.exp() as f32
                }
            );
            let json = got.to_json(Method::BoundaryMorph, 0.0, 0.0);
            assert_eq!(json["hyperparameters"]["scale"], h.scale);
            assert_eq!(json["hyperparameters"]["signal"], h.log_signal.exp());
        } else {
            // Before the first fit the run is the paper's, call for call.
            let mut o = Precomputed::new(scores.clone(), budget).unwrap();
            let paper = rerank(
                &RerankConfig {
                    prior,
                    ..RerankConfig::new(Method::BoundaryMorph, budget, cap)
                },
                &p,
                &mut o,
            )
            .unwrap();
            assert_eq!(got.scored, paper.scored);
            assert_eq!(got.selected, paper.selected);
        }
    }
}

/// On scores with no structure the run is still the same on every repeat.
#[test]
fn boundary_morph_by_the_evidence_repeats_on_unstructured_scores() {
    let (p, scores) = pool(48, 7, 21);
    let mut cfg = RerankConfig::new(Method::BoundaryMorph, 23, 5);
    cfg.hyperparameters = Hyperparameters::Evidence;
    let run = || rerank(&cfg, &p, &mut Precomputed::new(scores.clone(), 23).unwrap()).unwrap();
    let (a, b) = (run(), run());
    assert_eq!(
        (a.scored, a.selected, a.hyperparameters),
        (b.scored, b.selected, b.hyperparameters)
    );
}

#[test]
fn evidence_options_are_checked_by_name() {
    let cfg = |m: &str, prior: Option<&str>, h: &str| {
        RerankOptions {
            prior,
            hyperparameters: Some(h),
            ..RerankOptions::new(m, 10, 3)
        }
        .config()
    };
    assert_eq!(
        cfg("boundary-morph", None, "evidence").unwrap().hyperparameters,
        Hyperparameters::Evidence
    );
    assert_eq!(
        cfg("boundary-morph", Some("zero"), "paper")
            .unwrap()
            .hyperparameters,
        Hyperparameters::Paper
    );
    for (m, prior, h, want) in [
        (
            "boundary-morph",
            None,
            "ml",
            "unknown hyperparameters 'ml' (paper, evidence)",
        ),
        ("bagel", None, "evidence", "does not apply to bagel"),
        ("rgs", None, "paper", "does not apply to rgs"),
        (
            "boundary-morph",
            Some("adaptive"),
            "evidence",
            "use it with the mips, zero or score prior",
        ),
    ] {
        let e = cfg(m, prior, h).unwrap_err().to_string();
        assert!(e.starts_with("invalid hyperparameters: "), "{e}");
        assert!(e.contains(want), "{e}");
    }
    // The configuration, built by hand, is checked again by the reranker.
    let engine = ctxprune::Engine::cpu();
    let mut c = RerankConfig::new(Method::Bagel, 10, 3);
    c.hyperparameters = Hyperparameters::Evidence;
    let e = ctxprune::rerank::Reranker::new(&engine, c)
        .unwrap_err()
        .to_string();
    assert!(e.contains("hyperparameters"), "{e}");
}
