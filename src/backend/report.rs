//! Reports the backend hands to the CLI: `ctxprune gpu-check`'s comparisons against the
//! CPU (each passes or fails) and timing table, built by the device checks and the
//! selector checks above the backend; and `ctxprune kernels`' compile report.

use crate::embeddings::Embeddings;
use crate::error::Result;
use crate::rng::Rng;
use std::fmt::Write as _;

/// Relative error `|a - b| / max(|b|, 1)`; NaN when either is NaN (so it never passes).
#[must_use]
pub fn rel_err(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        return f64::NAN;
    }
    (a - b).abs() / b.abs().max(1.0)
}

/// The largest of several errors; NaN if any is NaN.
pub fn worst(errs: impl IntoIterator<Item = f64>) -> f64 {
    errs.into_iter().fold(0.0f64, |m, e| {
        if e.is_nan() || m.is_nan() {
            f64::NAN
        } else {
            m.max(e)
        }
    })
}

/// The largest [`rel_err`] over two slices, NaN if any element is NaN or lengths differ.
#[must_use]
pub fn max_rel_err(a: &[f32], b: &[f32]) -> f64 {
    if a.len() != b.len() {
        return f64::NAN;
    }
    worst(
        a.iter()
            .zip(b)
            .map(|(&x, &y)| rel_err(f64::from(x), f64::from(y))),
    )
}

/// `n × d` standard normal values from `rng` (the checks' fresh inputs).
pub fn random(n: usize, d: usize, rng: &mut Rng) -> Result<Embeddings> {
    let data: Vec<f32> = (0..n * d).map(|_| rng.normal() as f32).collect();
    Embeddings::new(n, d, data, "gpu-check")
}

/// One comparison.
#[derive(Clone, Debug, PartialEq)]
pub struct Comparison {
    /// What was compared.
    pub what: String,
    /// The measured error or the mismatch, as printed.
    pub detail: String,
    /// Whether it passed.
    pub pass: bool,
}

/// One timing row.
#[derive(Clone, Debug, PartialEq)]
pub struct Timing {
    /// The workload.
    pub what: String,
    /// Median milliseconds.
    pub ms: f64,
    /// The target, when there is one (e.g. `<= 2 ms`).
    pub target: String,
    /// Whether the target was met.
    pub met: Option<bool>,
    /// A note (a rate, what was compared).
    pub note: String,
}

/// What a check run found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CheckReport {
    /// The device, as opened.
    pub device: String,
    /// The seed of the random inputs (replay with `--seed`).
    pub seed: u64,
    /// Every comparison, in order.
    pub comparisons: Vec<Comparison>,
    /// One line on copy bandwidths, when timed.
    pub bandwidth: Option<String>,
    /// The timing table (empty without timing).
    pub timings: Vec<Timing>,
}

impl CheckReport {
    /// A relative-error comparison: passes when `err <= tol` (NaN never passes).
    pub fn check(&mut self, what: &str, err: f64, tol: f64) {
        self.comparisons.push(Comparison {
            what: what.to_string(),
            detail: format!("max rel err {err:>10.3e}  (<= {tol:.0e})"),
            pass: !err.is_nan() && err <= tol,
        });
    }

    /// An equality comparison; `detail` says what differed.
    pub fn same(&mut self, what: &str, ok: bool, detail: &str) {
        self.comparisons.push(Comparison {
            what: what.to_string(),
            detail: if ok { String::new() } else { detail.to_string() },
            pass: ok,
        });
    }

    /// A timing row.
    pub fn time(&mut self, what: &str, ms: f64, target: &str, met: Option<bool>, note: &str) {
        self.timings.push(Timing {
            what: what.to_string(),
            ms,
            target: target.to_string(),
            met,
            note: note.to_string(),
        });
    }

    /// The comparisons that failed.
    #[must_use]
    pub fn failures(&self) -> Vec<&Comparison> {
        self.comparisons.iter().filter(|c| !c.pass).collect()
    }
}

impl std::fmt::Display for CheckReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut s = String::new();
        let _ = writeln!(s, "device {}", self.device);
        let _ = writeln!(
            s,
            "random inputs from seed {} (replay with --seed {})\n\ncorrectness against the CPU path:",
            self.seed, self.seed
        );
        for c in &self.comparisons {
            let verdict = if c.pass { "ok" } else { "FAIL" };
            let _ = writeln!(s, "  {:<66} {} {verdict}", c.what, c.detail);
        }
        if let Some(b) = &self.bandwidth {
            let _ = writeln!(s, "\n{b}");
        }
        if !self.timings.is_empty() {
            let _ = writeln!(
                s,
                "\n{:<50} {:>10} {:>12} {:>7}  note",
                "workload", "GPU ms", "target", ""
            );
            for t in &self.timings {
                let m = match t.met {
                    Some(true) => "met",
                    Some(false) => "MISSED",
                    None => "",
                };
                let _ = writeln!(
                    s,
                    "{:<50} {:>10.3} {:>12} {m:>7}  {}",
                    t.what, t.ms, t.target, t.note
                );
            }
        }
        let fails = self.failures();
        if fails.is_empty() {
            let _ = writeln!(s, "\ngpu-check: every comparison passed");
        } else {
            let _ = writeln!(s, "\ngpu-check: {} comparison(s) FAILED", fails.len());
        }
        f.write_str(&s)
    }
}

/// One compiled kernel file.
#[derive(Clone, Debug)]
pub struct Compiled {
    /// The `.cu` file name.
    pub file: &'static str,
    /// The architecture (`compute_XY` for PTX, `sm_XY` for a CUBIN).
    pub arch: String,
    /// PTX text (empty for a CUBIN).
    pub ptx: String,
    /// The CUBIN, when compiled for a real architecture.
    pub cubin: Option<Vec<u8>>,
    /// NVRTC's program log (empty when the compile was clean).
    pub log: String,
}

impl Compiled {
    /// The `extern "C"` kernels (PTX `.entry` names) in this file.
    #[must_use]
    pub fn entries(&self) -> Vec<String> {
        self.ptx
            .lines()
            .filter_map(|l| {
                let rest = l.trim_start().strip_prefix(".visible .entry ")?;
                Some(rest.split('(').next()?.trim().to_string())
            })
            .collect()
    }
}

/// What `compile_kernels` compiled.
#[derive(Clone, Debug)]
pub struct KernelsReport {
    /// NVRTC's version.
    pub nvrtc: (i32, i32),
    /// The hash of the kernel sources.
    pub sources_hash: u64,
    /// Every file for every architecture, in order.
    pub compiled: Vec<Compiled>,
}

impl KernelsReport {
    /// The files (with their architecture) whose compile printed warnings.
    #[must_use]
    pub fn with_warnings(&self) -> Vec<String> {
        self.compiled
            .iter()
            .filter(|c| !c.log.is_empty())
            .map(|c| format!("{} ({})", c.file, c.arch))
            .collect()
    }
}
