//! Attention mass (App. E.3) against a direct f64 evaluation of its definition, on every
//! available engine (the CUDA body is the same; it skips without a device), a planted
//! structure with known shares, and the figures' numbers.

use crate::backend::available;
use ctxprune::attention::{self, Qk, QkLayer, Role, Segmentation, Span};
use ctxprune::rng::Rng;
use ctxprune::Engine;

/// A random segmentation of `n` tokens: spans of random roles and lengths with gaps, turns
/// advancing at reasoning spans, and steps at random positions inside reasoning spans.
fn random_segmentation(n: usize, rng: &mut Rng) -> Segmentation {
    let mut spans = Vec::new();
    let mut at = 0;
    let mut turn = 0;
    let mut seen_reasoning = false;
    while at < n {
        at += rng.below(3); // a gap of 0–2 unassigned tokens
        if at >= n {
            break;
        }
        let len = (1 + rng.below(9)).min(n - at);
        let role = Role::ALL[rng.below(5)];
        if role == Role::Reasoning {
            if seen_reasoning {
                turn += 1;
            }
            seen_reasoning = true;
        }
        spans.push(Span {
            start: at,
            end: at + len,
            turn,
            role,
        });
        at += len;
    }
    let mut steps = Vec::new();
    for s in &spans {
        if s.role == Role::Reasoning && rng.uniform() < 0.7 {
            steps.push(s.start + rng.below(s.end - s.start));
        }
    }
    if steps.is_empty() {
        // At least one step: make the last span reasoning.
        let last = spans.last_mut().unwrap();
        last.role = Role::Reasoning;
        steps.push(last.end - 1);
    }
    Segmentation::new(n, turn + 1, steps, spans).unwrap()
}

fn random_qk(seg: &Segmentation, layers: usize, h: usize, g: usize, d: usize, rng: &mut Rng) -> Qk {
    let rn = seg.steps.len();
    let nk = seg.steps[rn - 1] + 1;
    // Scaled so the softmax is neither flat nor one-hot.
    let mut gauss = |len: usize| (0..len).map(|_| (1.5 * rng.normal()) as f32).collect::<Vec<_>>();
    let layers = (0..layers)
        .map(|_| QkLayer {
            q: gauss(rn * h * d),
            k: gauss(nk * g * d),
        })
        .collect();
    Qk::new(h, g, d, seg.steps.clone(), layers).unwrap()
}

/// The definition, directly: every softmax row in f64 (explicit max, sum and division),
/// averaged over layers and heads, summed by (turn, role); plus the unassigned mass.
fn direct(qk: &Qk, seg: &Segmentation) -> Vec<(Vec<[f64; 5]>, f64)> {
    let (h, g, d) = (qk.heads(), qk.kv_heads(), qk.head_dim());
    let lh = (qk.layers().len() * h) as f64;
    qk.steps()
        .iter()
        .enumerate()
        .map(|(r, &t)| {
            let mut s = vec![[0.0f64; 5]; seg.turns];
            let mut un = 0.0;
            for layer in qk.layers() {
                for head in 0..h {
                    let kg = head / (h / g);
                    let q = &layer.q[r * h * d + head * d..][..d];
                    let logits: Vec<f64> = (0..=t)
                        .map(|j| {
                            let k = &layer.k[j * g * d + kg * d..][..d];
                            q.iter().zip(k).map(|(&a, &b)| a as f64 * b as f64).sum::<f64>()
                                / (d as f64).sqrt()
                        })
                        .collect();
                    let m = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let z: f64 = logits.iter().map(|&x| (x - m).exp()).sum();
                    for (j, &x) in logits.iter().enumerate() {
                        let a = (x - m).exp() / z / lh;
                        match seg.span_at(j) {
                            Some(sp) => s[sp.turn][sp.role.index()] += a,
                            None => un += a,
                        }
                    }
                }
            }
            (s, un)
        })
        .collect()
}

fn rel_close(what: &str, got: f64, want: f64) {
    assert!(
        (got - want).abs() <= 1e-6 * want.abs() + 1e-15,
        "{what}: got {got}, direct f64 {want} (relative {:.3e})",
        (got - want).abs() / want.abs().max(1e-300)
    );
}

#[test]
fn mass_equals_direct_softmax_rows_on_every_engine() {
    let engines = available();
    // Odd sizes: N, H, G, d, layers.
    for (case, &(n, layers, h, g, d)) in [
        (97usize, 3usize, 6usize, 3usize, 37usize),
        (211, 1, 5, 1, 19),
        (75, 2, 9, 9, 67),
    ]
    .iter()
    .enumerate()
    {
        let mut rng = Rng::new(100 + case as u64);
        let seg = random_segmentation(n, &mut rng);
        let qk = random_qk(&seg, layers, h, g, d, &mut rng);
        let want = direct(&qk, &seg);
        for engine in &engines {
            let m = attention::mass(engine, &qk, &seg).unwrap();
            assert_eq!(m.steps.len(), want.len());
            for (r, (step, (ws, wu))) in m.steps.iter().zip(&want).enumerate() {
                for (k, wk) in ws.iter().enumerate() {
                    for role in Role::ALL {
                        let w = wk[role.index()];
                        rel_close(
                            &format!("{} case {case} step {r} turn {k} {}", engine.name(), role.name()),
                            step.s[k][role.index()],
                            w,
                        );
                    }
                }
                rel_close(
                    &format!("{} case {case} step {r} unassigned", engine.name()),
                    step.unassigned,
                    *wu,
                );
                let total: f64 = step.spans.iter().sum::<f64>() + step.unassigned;
                assert!(
                    (total - 1.0).abs() < 1e-9,
                    "{} step {r}: mass sums to {total}",
                    engine.name()
                );
                assert_eq!(step.pos, seg.steps[r]);
                assert_eq!(Some(step.turn), seg.step_turn(r));
            }
        }
    }
}

#[test]
fn more_steps_than_a_chunk_match_the_direct_evaluation() {
    // 67 steps: two chunks of steps on both backends (64 + 3), against the definition.
    let (qk, seg) = attention::synthetic(1427, 1, 4, 2, 33, 67, 21).unwrap();
    let want = direct(&qk, &seg);
    for engine in available() {
        let m = attention::mass(&engine, &qk, &seg).unwrap();
        for (r, (step, (ws, wu))) in m.steps.iter().zip(&want).enumerate() {
            for (k, wk) in ws.iter().enumerate() {
                for role in Role::ALL {
                    let what = format!("{} step {r} turn {k} {}", engine.name(), role.name());
                    rel_close(&what, step.s[k][role.index()], wk[role.index()]);
                }
            }
            rel_close(
                &format!("{} step {r} unassigned", engine.name()),
                step.unassigned,
                *wu,
            );
        }
    }
}

#[test]
fn hostile_sizes_are_errors() {
    // A turn count the spans do not support (it would size per-step matrices).
    let spans = vec![Span {
        start: 0,
        end: 5,
        turn: 0,
        role: Role::Reasoning,
    }];
    let e = Segmentation::new(10, 1_000_000_000_000_000, vec![2], spans.clone())
        .unwrap_err()
        .to_string();
    assert!(e.contains("turns"), "{e}");
    assert!(Segmentation::new(10, 1, vec![2], spans).is_ok());
    // Scores that overflow f32.
    let big = QkLayer {
        q: vec![1e20; 8],
        k: vec![1e20; 8],
    };
    let e = Qk::new(2, 1, 4, vec![1], vec![big]).unwrap_err().to_string();
    assert!(e.contains("overflow"), "{e}");
    // A mass read from JSON with a turn past `turns`, or short rows: refused by decay.
    let mut m = hand_mass(6, &[(5, vec![(0.1, 0.1); 6])]);
    m.steps[0].turn = 1_000_000_000_000;
    let e = attention::figures::decay(&[m]).unwrap_err().to_string();
    assert!(e.contains("masses[0]") && e.contains("steps[0].turn"), "{e}");
    let mut m = hand_mass(6, &[(5, vec![(0.1, 0.1); 6])]);
    m.steps[0].s.pop();
    let e = attention::figures::decay(&[m]).unwrap_err().to_string();
    assert!(e.contains("steps[0].s"), "{e}");
}

#[test]
fn planted_shares_are_measured() {
    // Four spans of 20 tokens; each query's logits are 0 on every key except span 1 (the
    // second), where they are ln(c) for every key: the share of span 1 is
    // 20c / (20c + (t + 1 - 20)) exactly, whatever the layer or head.
    let n = 80;
    let spans = vec![
        Span {
            start: 0,
            end: 20,
            turn: 0,
            role: Role::User,
        },
        Span {
            start: 20,
            end: 40,
            turn: 0,
            role: Role::Observation,
        },
        Span {
            start: 40,
            end: 60,
            turn: 1,
            role: Role::Reasoning,
        },
        Span {
            start: 60,
            end: 80,
            turn: 2,
            role: Role::Reasoning,
        },
    ];
    let steps = vec![45, 79];
    let seg = Segmentation::new(n, 3, steps.clone(), spans).unwrap();
    let (h, g, d) = (4, 2, 6);
    let c = 9.0f64;
    // q = (s, 0, ...) and k_j = (x_j, 0, ...) with s x_j / sqrt(d) = ln(c) on span 1, 0 elsewhere.
    let s = 2.0f32;
    let x = (c.ln() * (d as f64).sqrt() / s as f64) as f32;
    let mut layers = Vec::new();
    for _ in 0..2 {
        let mut q = vec![0.0f32; steps.len() * h * d];
        for r in 0..steps.len() {
            for head in 0..h {
                q[r * h * d + head * d] = s;
            }
        }
        let mut k = vec![0.0f32; 80 * g * d];
        for j in 20..40 {
            for kg in 0..g {
                k[j * g * d + kg * d] = x;
            }
        }
        layers.push(QkLayer { q, k });
    }
    let qk = Qk::new(h, g, d, steps.clone(), layers).unwrap();
    for engine in available() {
        let m = attention::mass(&engine, &qk, &seg).unwrap();
        for (r, &t) in steps.iter().enumerate() {
            let other = (t + 1 - 20) as f64;
            let planted = 20.0 * c / (20.0 * c + other);
            let got = m.steps[r].s[0][Role::Observation.index()];
            assert!(
                (got - planted).abs() < 1e-6,
                "{} step {r}: share {got}, planted {planted}",
                engine.name()
            );
            // The rest is uniform over the other visible tokens.
            let user = m.steps[r].s[0][Role::User.index()];
            assert!((user - 20.0 / (20.0 * c + other)).abs() < 1e-6);
        }
        // The second step sees its own turn's 20 tokens; the first does not see turn 2.
        assert_eq!(m.steps[0].s[2][Role::Reasoning.index()], 0.0);
        assert!(m.steps[1].s[2][Role::Reasoning.index()] > 0.0);
    }
}

#[test]
fn mismatched_inputs_are_errors_not_panics() {
    let (qk, seg) = attention::synthetic(200, 1, 2, 1, 4, 3, 1).unwrap();
    let mut other = seg.clone();
    other.steps.pop();
    let e = attention::mass(&Engine::cpu(), &qk, &other)
        .unwrap_err()
        .to_string();
    assert!(e.contains("steps"), "{e}");
    let e = Qk::new(3, 2, 4, vec![1], vec![]).unwrap_err().to_string();
    assert!(e.contains("not a multiple"), "{e}");
    let bad = QkLayer {
        q: vec![f32::NAN; 8],
        k: vec![0.0; 8],
    };
    let e = Qk::new(2, 1, 4, vec![1], vec![bad]).unwrap_err().to_string();
    assert!(e.contains("layers[0].q"), "{e}");
    let e = Qk::new(
        2,
        1,
        4,
        vec![1],
        vec![QkLayer {
            q: vec![0.0; 7],
            k: vec![0.0; 8],
        }],
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("layers[0].q"), "{e}");
    let spans = vec![Span {
        start: 0,
        end: 5,
        turn: 0,
        role: Role::User,
    }];
    let e = Segmentation::new(10, 1, vec![2], spans.clone())
        .unwrap_err()
        .to_string();
    assert!(e.contains("steps[0]") && e.contains("reasoning"), "{e}");
    let e = Segmentation::new(4, 1, vec![], spans).unwrap_err().to_string();
    assert!(e.contains("spans[0]"), "{e}");
}

/// Writes `layers.{l}.q` / `layers.{l}.k` with full-length Q (every position) in `dtype`,
/// 3-D or 2-D; returns the f32 values the file holds (after rounding to the dtype).
pub(crate) fn write_tensors(
    path: &std::path::Path,
    n: usize,
    layers: &[u64],
    (h, g, d): (usize, usize, usize),
    dtype: safetensors::Dtype,
    three_d: bool,
    seed: u64,
) -> Vec<(Vec<f32>, Vec<f32>)> {
    use safetensors::tensor::TensorView;
    let mut rng = Rng::new(seed);
    let round = |x: f32| match dtype {
        safetensors::Dtype::F16 => half::f16::from_f32(x).to_f32(),
        safetensors::Dtype::BF16 => half::bf16::from_f32(x).to_f32(),
        _ => x,
    };
    let bytes = |v: &[f32]| -> Vec<u8> {
        match dtype {
            safetensors::Dtype::F16 => v
                .iter()
                .flat_map(|&x| half::f16::from_f32(x).to_bits().to_le_bytes())
                .collect(),
            safetensors::Dtype::BF16 => v
                .iter()
                .flat_map(|&x| half::bf16::from_f32(x).to_bits().to_le_bytes())
                .collect(),
            _ => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    };
    let mut vals = Vec::new();
    let mut raw = Vec::new();
    for _ in layers {
        let q: Vec<f32> = (0..n * h * d).map(|_| round(rng.normal() as f32)).collect();
        let k: Vec<f32> = (0..n * g * d).map(|_| round(rng.normal() as f32)).collect();
        raw.push((bytes(&q), bytes(&k)));
        vals.push((q, k));
    }
    let shape = |heads: usize| {
        if three_d {
            vec![n, heads, d]
        } else {
            vec![n, heads * d]
        }
    };
    let mut views = Vec::new();
    for (l, (qb, kb)) in layers.iter().zip(&raw) {
        views.push((
            format!("layers.{l}.q"),
            TensorView::new(dtype, shape(h), qb).unwrap(),
        ));
        views.push((
            format!("layers.{l}.k"),
            TensorView::new(dtype, shape(g), kb).unwrap(),
        ));
    }
    let meta = (!three_d).then(|| std::collections::HashMap::from([("head_dim".to_string(), d.to_string())]));
    safetensors::tensor::serialize_to_file(views, meta, path).unwrap();
    vals
}

#[test]
fn tensors_file_reads_the_step_rows_and_keys_in_every_dtype() {
    use ctxprune::attention::tensors::TensorFile;
    let dir = tempfile::tempdir().unwrap();
    let (n, h, g, d) = (41, 6, 2, 5);
    let steps = vec![3, 17, 30];
    for (i, (dtype, three_d)) in [
        (safetensors::Dtype::F32, true),
        (safetensors::Dtype::F16, false),
        (safetensors::Dtype::BF16, true),
    ]
    .into_iter()
    .enumerate()
    {
        let path = dir.path().join(format!("qk{i}.safetensors"));
        // Layer indices out of order and sparse, as hooks on layers 3, 7, 11 write them.
        let vals = write_tensors(&path, n, &[11, 3, 7], (h, g, d), dtype, three_d, 9 + i as u64);
        let mut f = TensorFile::open(&path, None).unwrap();
        assert_eq!(f.layout().layers, vec![3, 7, 11]);
        assert_eq!(
            (
                f.layout().n,
                f.layout().heads,
                f.layout().kv_heads,
                f.layout().head_dim
            ),
            (n, h, g, d)
        );
        let qk = f.read(&steps).unwrap();
        assert_eq!(qk.n_keys(), 31);
        // Layer 3 was written second.
        let (q, k) = &vals[1];
        let l0 = &qk.layers()[0];
        for (r, &t) in steps.iter().enumerate() {
            assert_eq!(
                &l0.q[r * h * d..(r + 1) * h * d],
                &q[t * h * d..(t + 1) * h * d],
                "{dtype:?} step {r}"
            );
        }
        assert_eq!(&l0.k[..], &k[..31 * g * d], "{dtype:?} keys");
    }
}

#[test]
fn tensors_file_errors_name_the_problem() {
    use ctxprune::attention::tensors::TensorFile;
    use safetensors::tensor::TensorView;
    let dir = tempfile::tempdir().unwrap();
    let b = [0u8; 4 * 8 * 6];
    let write = |name: &str, views: Vec<(&str, Vec<usize>)>| {
        let p = dir.path().join(name);
        let v: Vec<(String, TensorView)> = views
            .into_iter()
            .map(|(n, s)| {
                let len = s.iter().product::<usize>() * 4;
                (
                    n.to_string(),
                    TensorView::new(safetensors::Dtype::F32, s, &b[..len]).unwrap(),
                )
            })
            .collect();
        safetensors::tensor::serialize_to_file(v, None, &p).unwrap();
        p
    };
    let cases = [
        (
            write("a", vec![("layers.0.q", vec![8, 2, 3])]),
            "has no layers.0.k",
        ),
        (
            write(
                "b",
                vec![
                    ("layers.0.q", vec![8, 2, 3]),
                    ("layers.0.k", vec![8, 1, 3]),
                    ("lm_head", vec![2]),
                ],
            ),
            "lm_head",
        ),
        (
            write("c", vec![("layers.0.q", vec![8, 6]), ("layers.0.k", vec![8, 3])]),
            "--head-dim",
        ),
        (
            write(
                "d",
                vec![("layers.0.q", vec![8, 3, 2]), ("layers.0.k", vec![8, 2, 2])],
            ),
            "3 query heads over 2",
        ),
        (
            write(
                "e",
                vec![("layers.0.q", vec![8, 2, 3]), ("layers.0.k", vec![7, 1, 3])],
            ),
            "layers.0: q is",
        ),
    ];
    for (p, want) in cases {
        let e = TensorFile::open(&p, None).err().expect("an error").to_string();
        assert!(e.contains(want) && e.contains(&p.display().to_string()), "{e}");
    }
    let p = write(
        "f",
        vec![("layers.0.q", vec![8, 2, 3]), ("layers.0.k", vec![8, 1, 3])],
    );
    let e = TensorFile::open(&p, None)
        .unwrap()
        .read(&[2, 8])
        .unwrap_err()
        .to_string();
    assert!(e.contains("steps[1]") && e.contains("past"), "{e}");
    // Truncated: the header promises more bytes than the file has.
    let full = std::fs::read(&p).unwrap();
    let cut = dir.path().join("cut");
    std::fs::write(&cut, &full[..full.len() - 5]).unwrap();
    let e = TensorFile::open(&cut, None).err().expect("an error").to_string();
    assert!(e.contains("data_offsets"), "{e}");
    std::fs::write(&cut, [1u8, 2, 3]).unwrap();
    let e = TensorFile::open(&cut, None).err().expect("an error").to_string();
    assert!(e.contains("header"), "{e}");
}

/// A mass with the given per-step rows (only reasoning and observation set).
fn hand_mass(turns: usize, steps: &[(usize, Vec<(f64, f64)>)]) -> attention::Mass {
    attention::Mass {
        turns,
        layers: 1,
        heads: 1,
        backend: "cpu".into(),
        steps: steps
            .iter()
            .map(|(turn, rows)| attention::StepMass {
                pos: 0,
                turn: *turn,
                s: (0..turns)
                    .map(|k| {
                        let mut a = [0.0; 5];
                        if let Some(&(r, o)) = rows.get(k) {
                            a[Role::Reasoning.index()] = r;
                            a[Role::Observation.index()] = o;
                        }
                        a
                    })
                    .collect(),
                unassigned: 0.0,
                spans: vec![],
            })
            .collect(),
    }
}

#[test]
fn decay_bins_and_cumulative_shares_by_hand() {
    use attention::figures::{decay, BINS};
    // Step in turn 5 (T_r = 5): past turns 4, 3, 2, 1, 0 at relative positions 0, .25, .5,
    // .75, 1 → bins 0, 5, 10, 15, 19. Step in turn 3 (T_r = 3 < 5) is skipped.
    let rows: Vec<(f64, f64)> = (0..6)
        .map(|k| (0.01 * (k + 1) as f64, 0.1 * (k + 1) as f64))
        .collect();
    let m1 = hand_mass(6, &[(5, rows.clone()), (3, rows.clone())]);
    // A second trajectory, step in turn 5 with other numbers: same bins.
    let rows2: Vec<(f64, f64)> = (0..6).map(|k| (0.02, 0.001 * k as f64)).collect();
    let m2 = hand_mass(6, &[(5, rows2)]);
    let d = decay(&[m1, m2]).unwrap();
    assert_eq!((d.steps, d.steps_skipped, d.observations), (2, 1, 10));
    let re = &d.roles[Role::Reasoning.index()];
    let ob = &d.roles[Role::Observation.index()];
    // Bin 0 holds past turn 4 of both steps: reasoning (0.05 + 0.02) / 2, obs (0.5 + 0.004) / 2.
    assert_eq!(re.count[0], 2);
    assert!((re.mean[0] - 0.035).abs() < 1e-15);
    assert!((ob.mean[0] - 0.252).abs() < 1e-15);
    // Bin 19 holds past turn 0: reasoning (0.01 + 0.02) / 2.
    assert!((re.mean[BINS - 1] - 0.015).abs() < 1e-15);
    assert_eq!(re.count[1], 0);
    assert_eq!(re.mean[1], 0.0);
    // Cumulative: all of both steps' past reasoning over 2 steps.
    let total_r = (0.05 + 0.04 + 0.03 + 0.02 + 0.01) + 5.0 * 0.02;
    assert!((re.cumulative[BINS - 1] - total_r / 2.0).abs() < 1e-15);
    assert!((re.cumulative[0] - 0.07 / 2.0).abs() < 1e-15);
    assert!(re.cumulative.windows(2).all(|w| w[1] >= w[0]));
}

#[test]
fn heatmap_matrices_and_pngs() {
    use attention::figures::{decay, draw_decay, draw_heatmap, heatmap_matrices};
    let rows: Vec<(f64, f64)> = (0..4)
        .map(|k| (0.1 * (k + 1) as f64, 0.01 * (k + 1) as f64))
        .collect();
    // Steps in turns 0, 1, 3 (turn 2 has none).
    let m = hand_mass(4, &[(0, rows.clone()), (1, rows.clone()), (3, rows.clone())]);
    let (r, o) = heatmap_matrices(&m);
    assert_eq!(r[4], 0.1); // R[1][0]
    assert_eq!(o[3 * 4 + 2], 0.03); // O[3][2]
    assert_eq!(r[1], 0.0); // causality: R[0][1] = 0
    assert!(r[2 * 4].is_nan()); // turn 2 has no step
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("heat.png");
    draw_heatmap(&m, &png, "test").unwrap();
    let dec = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&png).unwrap()));
    let info = dec.read_info().unwrap();
    assert_eq!((info.info().width, info.info().height), (900, 760));
    // Decay figure from trajectories with enough past turns; an empty pool is an error.
    let (qk, seg) = attention::synthetic(400, 1, 2, 1, 8, 8, 3).unwrap();
    let mass = attention::mass(&Engine::cpu(), &qk, &seg).unwrap();
    let d = decay(&[mass]).unwrap();
    assert_eq!(d.steps, 3); // turns 5, 6, 7
    let png2 = dir.path().join("decay.png");
    draw_decay(&d, &png2, "test").unwrap();
    assert!(std::fs::metadata(&png2).unwrap().len() > 1000);
    let e = draw_decay(&decay(&[]).unwrap(), &png2, "x")
        .unwrap_err()
        .to_string();
    assert!(e.contains("past turns"), "{e}");
}

#[cfg(feature = "cli")]
#[test]
fn cli_mass_and_decay_end_to_end() {
    use std::process::Command;
    let exe = env!("CARGO_BIN_EXE_ctxprune");
    let dir = tempfile::tempdir().unwrap();
    let n = 300;
    let (_, seg) = attention::synthetic(n, 1, 2, 1, 4, 7, 5).unwrap();
    let seg_path = dir.path().join("seg.json");
    std::fs::write(&seg_path, serde_json::to_string(&seg).unwrap()).unwrap();
    let qk_path = dir.path().join("qk.safetensors");
    write_tensors(&qk_path, n, &[3, 7], (4, 2, 6), safetensors::Dtype::BF16, true, 2);
    let (json, heat) = (dir.path().join("m.json"), dir.path().join("h.png"));
    let out = Command::new(exe)
        .args(["attention", "mass", "--backend", "cpu", "--tensors"])
        .arg(&qk_path)
        .arg("--segments")
        .arg(&seg_path)
        .arg("--json")
        .arg(&json)
        .arg("--heatmap")
        .arg(&heat)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.lines().count(), 1 + seg.steps.len(), "{stdout}");
    // The JSON is the library's answer on the same file.
    let got: attention::Mass = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let qk = attention::tensors::TensorFile::open(&qk_path, None)
        .unwrap()
        .read(&seg.steps)
        .unwrap();
    let want = attention::mass(&Engine::cpu(), &qk, &seg).unwrap();
    assert_eq!(got, want);
    assert!(std::fs::metadata(&heat).unwrap().len() > 1000);
    // Decay over two copies of it.
    let (dj, dp) = (dir.path().join("d.json"), dir.path().join("d.png"));
    let out = Command::new(exe)
        .args(["attention", "decay"])
        .arg(&json)
        .arg(&json)
        .arg("--json")
        .arg(&dj)
        .arg("--png")
        .arg(&dp)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("2 trajectories, 4 steps"), "{stdout}");
    assert!(std::fs::metadata(&dp).unwrap().len() > 1000);
    // Bad inputs: one line naming the file.
    let out = Command::new(exe)
        .args(["attention", "mass", "--tensors"])
        .arg(&seg_path)
        .arg("--segments")
        .arg(&seg_path)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("seg.json") && err.lines().count() == 1, "{err}");
    let out = Command::new(exe)
        .args(["attention", "decay"])
        .arg(&qk_path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("qk.safetensors"), "{err}");
}
