//! The backend boundary: the only place that knows devices.
//!
//! An [`Engine`] is opened once and shared (`Clone + Send + Sync`, an `Arc` inside). It
//! holds where numeric work runs: the CPU, or a CUDA device with its context, its
//! compiled kernels, cuBLAS and a pool of streams ("lanes", one per concurrent request).
//! [`Engine::auto`] opens CUDA only when the driver library is present (looked for before
//! cudarc is touched: creating a context without it panics inside cudarc), a device
//! exists, the kernels compile and a small self-test agrees with the CPU; otherwise it
//! returns the CPU engine and keeps the reason ([`Engine::fallback_reason`]).
//! [`Engine::cuda`] returns that reason as an error instead. Nothing is remembered across
//! opens: an engine that failed can be opened again ([`Engine::reopen`]). The library
//! reads no environment variable; [`EngineOptions`] carries the kernel cache directory
//! and CUDA library directories (the CLI maps `CTXPRUNE_BACKEND`, `CTXPRUNE_CACHE_DIR`,
//! `CUDA_HOME` and friends onto them).
//!
//! The capabilities above reach a backend through two traits and a few engine methods:
//! - [`picker::Picker`]: one greedy step at a time (the greedy driver's only interface to
//!   a backend; the CPU lazy heap in `select` is one implementation, [`cuda`]'s
//!   device-resident step kernels another);
//! - [`gp::GpStore`]: the GP's pool-sized state (append, posterior, UCB acquisition);
//! - [`Engine::gram`], [`Engine::gram_batched`] and pool residency.
//!
//! Every match on the device is here and exhaustive. Builds without the `cuda` feature
//! get a stub `cuda` module whose device type has no values, so the same matches compile
//! and a CUDA request says the build has no CUDA support.

pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
#[cfg(not(feature = "cuda"))]
#[path = "cuda_stub.rs"]
pub mod cuda;
pub mod gp;
pub mod picker;
pub mod report;

use crate::embeddings::{Embeddings, Matrix};
use crate::error::{Error, Result};
use crate::similarity::Kernel;
use std::path::PathBuf;
use std::sync::Arc;

/// The kind of device an engine runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BackendKind {
    /// The CPU reference path (multithreaded).
    Cpu,
    /// An NVIDIA GPU.
    Cuda,
}

impl BackendKind {
    /// The name reported in outputs: `"cpu"` or `"cuda"`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Cpu => "cpu",
            BackendKind::Cuda => "cuda",
        }
    }
}

/// The backend asked for on the command line or in a config.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendChoice {
    /// CUDA when usable, else the CPU.
    Auto,
    /// The CPU.
    Cpu,
    /// CUDA or an error.
    Cuda,
}

impl std::str::FromStr for BackendChoice {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "auto" => Ok(BackendChoice::Auto),
            "cpu" => Ok(BackendChoice::Cpu),
            "cuda" => Ok(BackendChoice::Cuda),
            _ => Err(Error::invalid(
                "backend",
                format!("unknown backend '{s}' (auto, cpu, cuda)"),
            )),
        }
    }
}

/// How a pool's rows are stored where the engine computes. Half precision halves device
/// memory and runs the Gram on tensor cores (f32 accumulation); the greedy step kernels
/// and the GP store read f32 rows, so they refuse a half pool ([`Error::Unsupported`]),
/// while `Pool::gram` and the paths that run on the host copy (gating, hybrid, lexical,
/// single-stage, and RGS, whose kernel rows are then read on the host) serve it. The CPU
/// keeps f32 rows: half storage there is an error.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Storage {
    /// f32 (every capability).
    #[default]
    F32,
    /// IEEE binary16 (device Gram only).
    F16,
    /// bfloat16 (device Gram only).
    Bf16,
}

impl Storage {
    /// `"f32"`, `"f16"` or `"bf16"`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Storage::F32 => "f32",
            Storage::F16 => "f16",
            Storage::Bf16 => "bf16",
        }
    }
}

/// How an engine finds what a device needs. By default: no on-disk kernel cache (NVRTC
/// compiles the kernels once per engine), CUDA libraries from the loader path, then
/// `/usr/local/cuda`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EngineOptions {
    /// Directory of the compiled-kernel cache (kernel sources hash, NVRTC version and
    /// architecture key each entry). By default, none.
    pub cache_dir: Option<PathBuf>,
    /// CUDA installation roots searched for NVRTC and cuBLAS after the loader path (each
    /// root's `lib64`, `lib` and `targets/x86_64-linux/lib`), before `/usr/local/cuda`.
    /// By default, none.
    pub cuda_roots: Vec<PathBuf>,
}

impl EngineOptions {
    /// Sets [`cache_dir`](Self::cache_dir).
    #[must_use]
    pub fn cache_dir(mut self, d: impl Into<PathBuf>) -> Self {
        self.cache_dir = Some(d.into());
        self
    }
    /// Adds a CUDA installation root to [`cuda_roots`](Self::cuda_roots).
    #[must_use]
    pub fn cuda_root(mut self, d: impl Into<PathBuf>) -> Self {
        self.cuda_roots.push(d.into());
        self
    }
    /// The options a front end (the CLI, the Python package) takes from the environment:
    /// the cache in `CTXPRUNE_CACHE_DIR`, else `XDG_CACHE_HOME/ctxprune`, else
    /// `HOME/.cache/ctxprune`; CUDA roots `CUDA_HOME` and `CUDA_PATH` (empty values are
    /// unset). The library itself reads no environment variable: only this does, when
    /// called.
    #[must_use]
    pub fn from_env() -> Self {
        let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
        let cache = var("CTXPRUNE_CACHE_DIR")
            .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("ctxprune")))
            .or_else(|| var("HOME").map(|h| h.join(".cache").join("ctxprune")));
        EngineOptions {
            cache_dir: cache,
            cuda_roots: ["CUDA_HOME", "CUDA_PATH"].iter().filter_map(|k| var(k)).collect(),
        }
    }
}

/// Where an engine's work runs. The one match over backends (exhaustive: a new backend
/// is a new variant here and one implementation per trait).
pub(crate) enum Device {
    Cpu,
    Cuda(cuda::Device),
}

struct Inner {
    device: Device,
    choice: BackendChoice,
    ordinal: usize,
    opts: EngineOptions,
    fallback: Option<String>,
}

/// A backend opened once and shared by every selection, rerank and pool: clone it freely
/// (an `Arc` inside) and use it from any thread.
///
/// ```
/// use ctxprune::Engine;
/// let engine = Engine::auto(); // CUDA when usable, else the CPU with the reason kept
/// if let Some(why) = engine.fallback_reason() {
///     eprintln!("running on the CPU: {why}");
/// }
/// assert!(matches!(engine.name(), "cpu" | "cuda"));
/// ```
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("backend", &self.describe())
            .field("fallback", &self.inner.fallback)
            .finish()
    }
}

impl Engine {
    fn make(
        device: Device,
        choice: BackendChoice,
        ordinal: usize,
        opts: &EngineOptions,
        fallback: Option<String>,
    ) -> Self {
        Engine {
            inner: Arc::new(Inner {
                device,
                choice,
                ordinal,
                opts: opts.clone(),
                fallback,
            }),
        }
    }

    /// The CPU engine.
    #[must_use]
    pub fn cpu() -> Engine {
        Engine::make(
            Device::Cpu,
            BackendChoice::Cpu,
            0,
            &EngineOptions::default(),
            None,
        )
    }

    /// The GPU with this ordinal, its kernels compiled and self-tested, or an error
    /// ([`Error::DeviceUnavailable`]) saying why it cannot be used.
    pub fn cuda(ordinal: usize) -> Result<Engine> {
        Engine::cuda_with(ordinal, &EngineOptions::default())
    }

    /// [`Engine::cuda`] with options.
    pub fn cuda_with(ordinal: usize, opts: &EngineOptions) -> Result<Engine> {
        let dev = cuda::Device::open(ordinal, opts)?;
        Ok(Engine::make(
            Device::Cuda(dev),
            BackendChoice::Cuda,
            ordinal,
            opts,
            None,
        ))
    }

    /// CUDA device 0 when the driver, a device and the kernels are all there; else the
    /// CPU, with the reason in [`fallback_reason`](Self::fallback_reason). Never panics,
    /// with or without a driver.
    #[must_use]
    pub fn auto() -> Engine {
        Engine::auto_with(&EngineOptions::default())
    }

    /// [`Engine::auto`] with options.
    #[must_use]
    pub fn auto_with(opts: &EngineOptions) -> Engine {
        match cuda::Device::open(0, opts) {
            Ok(dev) => Engine::make(Device::Cuda(dev), BackendChoice::Auto, 0, opts, None),
            Err(e) => Engine::make(Device::Cpu, BackendChoice::Auto, 0, opts, Some(e.to_string())),
        }
    }

    /// Opens what `choice` asks for: `Auto` never fails, `Cuda` fails with the reason.
    pub fn open(choice: BackendChoice, opts: &EngineOptions) -> Result<Engine> {
        match choice {
            BackendChoice::Auto => Ok(Engine::auto_with(opts)),
            BackendChoice::Cpu => Ok(Engine::cpu()),
            BackendChoice::Cuda => Engine::cuda_with(0, opts),
        }
    }

    /// Opens the same choice again, from scratch (after a device failure, or to retry a
    /// fallback).
    pub fn reopen(&self) -> Result<Engine> {
        let i = &self.inner;
        match i.choice {
            BackendChoice::Cuda => Engine::cuda_with(i.ordinal, &i.opts),
            c => Engine::open(c, &i.opts),
        }
    }

    /// Which kind of device runs the work.
    #[must_use]
    pub fn kind(&self) -> BackendKind {
        match &self.inner.device {
            Device::Cpu => BackendKind::Cpu,
            Device::Cuda(_) => BackendKind::Cuda,
        }
    }

    /// `"cpu"` or `"cuda"`.
    #[must_use]
    pub fn name(&self) -> &'static str {
        self.kind().name()
    }

    /// The device ordinal (`None` on the CPU).
    #[must_use]
    pub fn ordinal(&self) -> Option<usize> {
        match &self.inner.device {
            Device::Cpu => None,
            Device::Cuda(d) => Some(d.ordinal()),
        }
    }

    /// Why [`Engine::auto`] fell back to the CPU (`None` when nothing was refused).
    #[must_use]
    pub fn fallback_reason(&self) -> Option<&str> {
        self.inner.fallback.as_deref()
    }

    /// One line naming the device (`cpu (8 threads)`, `cuda:0 NVIDIA H200 (sm_90), ...`).
    #[must_use]
    pub fn describe(&self) -> String {
        match &self.inner.device {
            Device::Cpu => format!("cpu ({} threads)", rayon::current_num_threads()),
            Device::Cuda(d) => d.describe(),
        }
    }

    /// True when `other` computes on the same device (pools are resident per device).
    #[must_use]
    pub fn same_device(&self, other: &Engine) -> bool {
        self.kind() == other.kind() && self.ordinal() == other.ordinal()
    }

    pub(crate) fn device(&self) -> &Device {
        &self.inner.device
    }

    /// The `N × N` Gram `K[i][j] = kernel(cos(e_i, e_j))` of `e` (as
    /// [`crate::similarity::gram`] on the CPU; on a GPU through cuBLAS or the crate's tiled
    /// kernel, f32 agreement within 1e-4 relative).
    pub fn gram(&self, e: &Embeddings, kernel: Kernel) -> Result<Vec<f32>> {
        match &self.inner.device {
            Device::Cpu => crate::similarity::gram(e, kernel),
            Device::Cuda(d) => cuda::gram(d, e, kernel),
        }
    }

    /// The Grams of many pools (each as [`Engine::gram`]); on a GPU in one launch.
    pub fn gram_batched(&self, pools: &[&Embeddings], kernel: Kernel) -> Result<Vec<Vec<f32>>> {
        match &self.inner.device {
            Device::Cpu => crate::similarity::gram_batched(pools, kernel),
            Device::Cuda(d) => cuda::gram_batched(d, pools, kernel),
        }
    }

    /// Attention mass per reasoning step and piece (`attention::mass`'s numeric work):
    /// for step `r` and piece `p`, `1/(L H) Σ_l Σ_h Σ_{j ≤ t_r, piece[j] = p}
    /// softmax_j(Q·K/√d)`, an `R × np` row-major matrix. On a GPU the keys stream through
    /// in tiles with an online softmax (no `N × N` matrix); agreement with the CPU within
    /// 1e-6 relative.
    pub fn attention_mass(&self, qk: &crate::qk::Qk, piece: &[u32], np: usize) -> Result<Vec<f64>> {
        if piece.len() != qk.n_keys() {
            return Err(Error::DimensionMismatch {
                what: "pieces vs keys".into(),
                expected: qk.n_keys(),
                got: piece.len(),
            });
        }
        if let Some(j) = piece.iter().position(|&p| p as usize >= np) {
            return Err(Error::invalid(
                format!("piece[{j}]"),
                format!("{} is not below {np}", piece[j]),
            ));
        }
        match &self.inner.device {
            Device::Cpu => cpu::attention::attention_mass(qk, piece, np),
            Device::Cuda(d) => cuda::attention_mass(d, qk, piece, np),
        }
    }

    /// The Gram of a pool's rows, from their resident copy.
    pub(crate) fn pool_gram(&self, rows: &picker::Rows<'_>, kernel: Kernel) -> Result<Vec<f32>> {
        match (&self.inner.device, rows.resident) {
            (Device::Cpu, _) => crate::similarity::gram_rows(rows.e, rows.inv, kernel),
            (Device::Cuda(d), Resident::Cuda(dev_rows)) => cuda::gram_rows(d, dev_rows, kernel),
            (Device::Cuda(d), Resident::CudaHalf(h)) => cuda::gram_half(d, h, kernel),
            (Device::Cuda(_), Resident::Host) => Err(not_resident(self)),
        }
    }

    /// Makes a pool's rows (with their exact inverse norms) resident where this engine
    /// computes: nothing to do on the CPU, an upload on a GPU.
    pub(crate) fn resident(&self, unit: Matrix<'_>, inv: &[f64]) -> Result<Resident> {
        self.resident_as(unit, inv, Storage::F32)
    }

    /// [`resident`](Self::resident) with the rows stored as `storage`.
    pub(crate) fn resident_as(&self, unit: Matrix<'_>, inv: &[f64], storage: Storage) -> Result<Resident> {
        match (&self.inner.device, storage) {
            (Device::Cpu, Storage::F32) => Ok(Resident::Host),
            (Device::Cpu, s) => Err(Error::unsupported(
                "cpu",
                format!("{} pool storage (the CPU keeps f32 rows)", s.name()),
            )),
            (Device::Cuda(d), Storage::F32) => {
                cuda::upload_rows(d, unit, inv).map(|r| Resident::Cuda(Box::new(r)))
            }
            (Device::Cuda(d), s) => {
                cuda::upload_half_rows(d, unit, s).map(|r| Resident::CudaHalf(Box::new(r)))
            }
        }
    }

    /// The device picker for greedy `kind` over `rows`, or `None` when this engine runs
    /// greedy steps on the CPU's lazy heap (the caller builds that one).
    pub(crate) fn greedy_picker<'a>(
        &self,
        kind: picker::PickerKind,
        rows: &picker::Rows<'a>,
        inputs: &picker::PickerInputs<'_>,
    ) -> Result<Option<Box<dyn picker::Picker + 'a>>> {
        match (&self.inner.device, rows.resident) {
            (Device::Cpu, _) => Ok(None),
            (Device::Cuda(d), Resident::Cuda(dev_rows)) => {
                cuda::greedy_picker(d, dev_rows, rows, kind, inputs).map(Some)
            }
            (Device::Cuda(_), Resident::CudaHalf(h)) => Err(half_only(self, h.storage(), "greedy selection")),
            (Device::Cuda(_), Resident::Host) => Err(not_resident(self)),
        }
    }

    /// The GP's pool-sized state for the pool kernel `src` with prior means `mu0`.
    pub(crate) fn gp_store<'a>(
        &self,
        src: &'a gp::PoolKernel<'a>,
        mu0: Vec<f64>,
    ) -> Result<Box<dyn gp::GpStore + 'a>> {
        // A half-precision row copy lives on the host: its kernel rows are read there, and
        // the store beside them (the device store computes rows from its f32 copy).
        if src.precision() != gp::RowPrecision::F32 {
            return Ok(Box::new(cpu::gp::CpuStore::new(src, mu0)));
        }
        match (&self.inner.device, src.rows.resident) {
            (Device::Cpu, _) => Ok(Box::new(cpu::gp::CpuStore::new(src, mu0))),
            (Device::Cuda(d), Resident::Cuda(dev_rows)) => cuda::gp_store(d, dev_rows, src, &mu0),
            (Device::Cuda(_), Resident::CudaHalf(h)) => Err(half_only(self, h.storage(), "the reranking GP")),
            (Device::Cuda(_), Resident::Host) => Err(not_resident(self)),
        }
    }

    /// A reader of the pool kernel `src`'s rows, one at a time, where the pool lives (the
    /// neighbours RGS expands). A half-precision copy's rows (`src`'s, or the device's) are
    /// read on the host, from the f32 rows there.
    pub(crate) fn kernel_row_reader<'a>(
        &self,
        src: &'a gp::PoolKernel<'a>,
    ) -> Result<Box<dyn gp::RowReader + 'a>> {
        let f32_rows = src.precision() == gp::RowPrecision::F32;
        match (&self.inner.device, src.rows.resident) {
            (Device::Cuda(d), Resident::Cuda(dev_rows)) if f32_rows => {
                cuda::kernel_row_reader(d, dev_rows, src)
            }
            (Device::Cuda(_), Resident::Host) if f32_rows => Err(not_resident(self)),
            _ => Ok(Box::new(gp::HostRowReader(src))),
        }
    }
}

fn half_only(e: &Engine, s: Storage, what: &str) -> Error {
    Error::unsupported(
        e.describe(),
        format!(
            "{what} on a pool stored as {} (it serves the Gram; store it as f32)",
            s.name()
        ),
    )
}

fn not_resident(e: &Engine) -> Error {
    Error::invalid(
        "pool",
        format!(
            "the pool is not resident on {}: create it with the engine that uses it",
            e.describe()
        ),
    )
}

/// Where a pool's rows live besides the host.
pub(crate) enum Resident {
    /// Only on the host (CPU engines, and borrowed rows of the free functions).
    Host,
    /// Also on a CUDA device.
    Cuda(Box<cuda::DevRows>),
    /// On a CUDA device in half precision (the Gram only).
    CudaHalf(Box<cuda::HalfRows>),
}

/// Compiles every CUDA kernel for each architecture in `archs` (`"sm_80"` or
/// `"compute_80"`), without a GPU: the proof `ctxprune kernels` prints. Fails on any
/// compile error; warnings are in the report (the CLI fails on them).
pub fn compile_kernels(archs: &[String], opts: &EngineOptions) -> Result<report::KernelsReport> {
    cuda::compile_kernels(archs, opts)
}

fn no_device(engine: &Engine) -> Error {
    Error::DeviceUnavailable {
        backend: "cuda".into(),
        msg: format!(
            "gpu-check needs a CUDA device; this engine runs on the CPU{}",
            engine
                .fallback_reason()
                .map_or(String::new(), |r| format!(" ({r})"))
        ),
    }
}

/// The device half of `ctxprune gpu-check` on `engine`: every device primitive against
/// the CPU on random inputs from `rng`, into `rep`. A CPU engine has no device to check:
/// an error.
pub fn device_checks(
    engine: &Engine,
    rng: &mut crate::rng::Rng,
    rep: &mut report::CheckReport,
) -> Result<()> {
    match engine.device() {
        Device::Cpu => Err(no_device(engine)),
        Device::Cuda(d) => {
            rep.device = cuda::check::header(d);
            cuda::check::primitives(d, rng, rep)
        }
    }
}

/// The device-level timing rows of `ctxprune gpu-check` (copy bandwidth, GEMM rates, the
/// Gram, greedy steps on a resident pool, batched MMR), into `rep`.
pub fn device_timings(
    engine: &Engine,
    rng: &mut crate::rng::Rng,
    rep: &mut report::CheckReport,
) -> Result<()> {
    match engine.device() {
        Device::Cpu => Err(no_device(engine)),
        Device::Cuda(d) => cuda::check::timings(d, rng, rep),
    }
}
