//! The opt-in half-precision row copy (`row_precision`): the same bits on every thread
//! count, f32 as before, and the option's errors.

use ctxprune::rerank::gp::{Gp, KernelRows};
use ctxprune::rerank::{
    kernel_rows_in, Method, Precomputed, RerankConfig, RerankOptions, Reranked, RowPrecision,
};
use ctxprune::similarity::{Kernel, KernelKind};
use ctxprune::{Engine, Pool};

fn in_threads<T: Send>(threads: usize, f: impl FnOnce() -> T + Send) -> T {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
        .install(f)
}

/// One run's outcome and the GP's posterior after a few observations, as bits.
fn run(
    p: &Pool,
    q: &[f32],
    kernel: Kernel,
    scores: &[f64],
    prec: RowPrecision,
    method: Method,
) -> (Reranked, Vec<u64>) {
    let mut cfg = RerankConfig::new(method, 40, 25);
    cfg.kernel = ctxprune::rerank::KernelChoice::Fixed(kernel);
    cfg.row_precision = prec;
    let r =
        ctxprune::rerank::rerank(&cfg, p, q, &mut Precomputed::new(scores.to_vec(), 40).unwrap()).unwrap();
    let rows = kernel_rows_in(p, q, kernel, prec).unwrap();
    let n = rows.len();
    let mu0: Vec<f64> = (0..n).map(|i| (n - 1 - i) as f64 / (n - 1) as f64).collect();
    let mut gp = Gp::new(&rows, mu0, 1.0).unwrap();
    for &j in &r.scored[..12] {
        gp.observe(j, scores[j]).unwrap();
    }
    let (mut mean, mut var) = (vec![0.0; n], vec![0.0; n]);
    gp.posterior(&mut mean, &mut var).unwrap();
    let mut row = vec![0.0; n];
    rows.row(r.scored[0], &mut row);
    let bits = mean.iter().chain(&var).chain(&row).map(|x| x.to_bits()).collect();
    (r, bits)
}

#[test]
fn half_rows_give_the_same_bits_on_one_and_two_threads() {
    // Odd sizes: a pool that is not a multiple of the row block or the lane count.
    let (e, q, _) = crate::problem(3001, 67, 17);
    let kernel = Kernel::with_median_heuristic(KernelKind::Vmf, &e).unwrap();
    let p = Pool::new(&Engine::cpu(), e).unwrap();
    let mut rng = ctxprune::rng::Rng::new(5);
    let scores: Vec<f64> = (0..3001).map(|_| rng.uniform()).collect();
    for prec in RowPrecision::ALL {
        for method in [Method::BoundaryMorph, Method::Bagel, Method::Rgs] {
            let one = in_threads(1, || run(&p, &q, kernel, &scores, prec, method));
            let two = in_threads(2, || run(&p, &q, kernel, &scores, prec, method));
            assert_eq!(one.0, two.0, "{} {}", prec.name(), method.name());
            assert!(
                one.1 == two.1,
                "{} {}: posterior bits differ",
                prec.name(),
                method.name()
            );
            assert_eq!(one.0.scored.len(), 40);
        }
    }
}

#[test]
fn half_rows_stay_close_to_f32_and_f32_is_the_default() {
    let (e, q, _) = crate::problem(800, 33, 23);
    let kernel = Kernel::with_median_heuristic(KernelKind::Vmf, &e).unwrap();
    let p = Pool::new(&Engine::cpu(), e).unwrap();
    assert_eq!(
        RerankConfig::new(Method::BoundaryMorph, 5, 3).row_precision,
        RowPrecision::F32
    );
    assert_eq!(
        RerankOptions::new("boundary-morph", 5, 3).config().unwrap(),
        RerankConfig::new(Method::BoundaryMorph, 5, 3)
    );
    let f = kernel_rows_in(&p, &q, kernel, RowPrecision::F32).unwrap();
    let plain = ctxprune::rerank::kernel_rows(&p, &q, kernel).unwrap();
    let (mut a, mut b) = (vec![0.0; 800], vec![0.0; 800]);
    for j in [0, 399, 799] {
        f.row(j, &mut a);
        plain.row(j, &mut b);
        assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()));
        for (prec, tol) in [(RowPrecision::Bf16, 0.05), (RowPrecision::F16, 0.01)] {
            let h = kernel_rows_in(&p, &q, kernel, prec).unwrap();
            h.row(j, &mut b);
            let worst = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max);
            assert!(worst <= tol, "{} row {j}: {worst}", prec.name());
        }
    }
}

#[test]
fn row_precision_errors_name_the_option() {
    let mut o = RerankOptions::new("boundary-morph", 5, 3);
    o.row_precision = Some("fp8");
    let e = o.config().unwrap_err().to_string();
    assert!(
        e.contains("row_precision") && e.contains("unknown row precision 'fp8' (f32, bf16, f16)"),
        "{e}"
    );
    let mut o = RerankOptions::new("single-stage", 5, 3);
    o.row_precision = Some("bf16");
    let e = o.config().unwrap_err().to_string();
    assert!(e.contains("row_precision") && e.contains("single-stage"), "{e}");
    let mut cfg = RerankConfig::new(Method::SingleStage, 5, 3);
    cfg.row_precision = RowPrecision::F16;
    let e = ctxprune::rerank::Reranker::new(&Engine::cpu(), cfg)
        .unwrap_err()
        .to_string();
    assert!(e.contains("row_precision") && e.contains("single-stage"), "{e}");
    for (name, p) in [
        ("f32", RowPrecision::F32),
        ("bf16", RowPrecision::Bf16),
        ("f16", RowPrecision::F16),
    ] {
        let mut o = RerankOptions::new("rgs", 5, 3);
        o.row_precision = Some(name);
        assert_eq!(o.config().unwrap().row_precision, p);
    }
}
