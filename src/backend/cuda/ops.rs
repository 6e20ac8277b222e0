//! The CUDA primitives: Gram blocks with kernel epilogues, greedy-selector steps and GP
//! posterior updates over device-resident state, and the self-test run before a device is
//! used. Every launch here passes arguments in the order and types of the kernel's
//! `extern "C"` signature in kernels/*.cu (checked by hand at each call; the self-test and
//! `ctxprune gpu-check` compare the results with the CPU path).

use super::{err, Device};
use crate::embeddings::Embeddings;
use crate::error::{Error, Result};
use crate::similarity::Kernel;
use cudarc::driver::{
    CudaSlice, DevicePtr, DevicePtrMut, DeviceRepr, LaunchConfig, PushKernelArg, ValidAsZeroBits,
};
use std::sync::Arc;

/// Threads per block of every launch.
const TPB: u32 = 256;

fn drv(what: &str) -> impl Fn(cudarc::driver::DriverError) -> Error + '_ {
    move |e| err(format!("{what}: {e}"))
}

/// One thread per element.
fn per_elem(n: usize) -> LaunchConfig {
    let blocks = n.div_ceil(TPB as usize).clamp(1, u32::MAX as usize) as u32;
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (TPB, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// One warp per row.
fn per_row(n: usize) -> LaunchConfig {
    per_elem(n.saturating_mul(32))
}

/// A `rows × cols` matrix: columns over x, rows over y (at most 65,535; kernels stride).
fn matrix(rows: usize, cols: usize) -> LaunchConfig {
    let bx = cols.div_ceil(TPB as usize).clamp(1, 65_535) as u32;
    let by = rows.clamp(1, 65_535) as u32;
    LaunchConfig {
        grid_dim: (bx, by, 1),
        block_dim: (TPB, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Launches `$name` on `$dev`'s stream with the given arguments.
macro_rules! launch {
    ($dev:expr, $name:expr, $cfg:expr, $($arg:expr),* $(,)?) => {{
        let f = $dev.func($name)?;
        let mut b = $dev.stream.launch_builder(f);
        $( b.arg($arg); )*
        // SAFETY: the arguments are pushed in the order and with the types of the
        // kernel's extern "C" signature in kernels/*.cu; every buffer is a live device
        // allocation at least as long as the ranges the kernel indexes (sizes checked by
        // the caller), and nullable pointers are passed as 0.
        unsafe { b.launch($cfg) }
            .map(|_| ())
            .map_err(|e| err(format!("launch {}: {e}", $name)))
    }};
}

/// Launches a greedy step kernel: its own arguments, then the tail every step kernel
/// shares (`alive, cost, remaining, pv, pi, ticket, out`; kernels/greedy.cu).
macro_rules! launch_step {
    ($dev:expr, $name:expr, $cfg:expr, [$($arg:expr),* $(,)?], $alive:expr, $cost:expr, $rem:expr, $am:expr) => {
        launch!(
            $dev, $name, $cfg, $($arg,)* $alive, $cost, $rem,
            &mut $am.pv, &mut $am.pi, &mut $am.ticket, &mut $am.out
        )
    };
}

impl Device {
    /// Copies a host slice to a new device buffer.
    pub fn upload<T: DeviceRepr>(&self, h: &[T]) -> Result<CudaSlice<T>> {
        self.stream.clone_htod(h).map_err(drv("host-to-device copy"))
    }

    /// Copies a device buffer to the host (waits for it).
    pub fn download<T: DeviceRepr>(&self, d: &CudaSlice<T>) -> Result<Vec<T>> {
        self.stream.clone_dtoh(d).map_err(drv("device-to-host copy"))
    }

    /// A zeroed device buffer.
    pub fn zeros<T: DeviceRepr + ValidAsZeroBits>(&self, n: usize) -> Result<CudaSlice<T>> {
        self.stream
            .alloc_zeros(n.max(1))
            .map_err(drv("device allocation"))
    }

    /// Fills a device buffer with a host value repeated (used to poison outputs).
    pub fn fill<T: DeviceRepr + Clone>(&self, d: &mut CudaSlice<T>, v: T) -> Result<()> {
        let h = vec![v; d.len()];
        self.stream.memcpy_htod(&h, d).map_err(drv("host-to-device copy"))
    }

    fn ptr<T>(&self, s: &CudaSlice<T>) -> u64 {
        let (p, _guard) = s.device_ptr(&self.stream);
        p
    }
}

/// `(kind, parameter)` of a kernel as the CUDA epilogue reads them (kernels/common.cuh).
fn kernel_code(k: Kernel) -> (i32, f32) {
    match k {
        Kernel::Cosine => (0, 0.0),
        Kernel::Vmf { kappa } => (1, kappa),
        Kernel::Rbf { l2 } => (2, 1.0 / l2),
        Kernel::Matern52 { l2 } => (3, 2.0 / l2),
    }
}

/// The epilogue code of plain dot products (no clamping, no kernel).
const RAW: (i32, f32) = (-1, 0.0);

/// Element type of a pool on the device (products always accumulate in f32).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Elem {
    /// f32.
    F32,
    /// IEEE binary16 (raw bits in `u16`).
    F16,
    /// bfloat16 (raw bits in `u16`).
    Bf16,
}

impl Elem {
    /// The kernel-name suffix and cuBLAS data type of this element type.
    fn parts(self) -> (&'static str, cudarc::cublas::sys::cudaDataType) {
        use cudarc::cublas::sys::cudaDataType as T;
        match self {
            Elem::F32 => ("f32", T::CUDA_R_32F),
            Elem::F16 => ("f16", T::CUDA_R_16F),
            Elem::Bf16 => ("bf16", T::CUDA_R_16BF),
        }
    }
}

/// A pool on the device: rows, row count and dimension, and `1 / ||row||` per row.
pub struct DevPool<T> {
    /// Row-major rows.
    pub x: CudaSlice<T>,
    /// Inverse row norms.
    pub inv: CudaSlice<f32>,
    /// Rows.
    pub n: usize,
    /// Dimension.
    pub d: usize,
    /// What the elements of `x` are.
    pub elem: Elem,
}

impl DevPool<f32> {
    /// Uploads `e` with its exact inverse norms (as the CPU Gram uses them).
    pub fn upload(dev: &Device, e: &Embeddings) -> Result<Self> {
        let inv: Vec<f32> = e.inv_norms()?.iter().map(|&v| v as f32).collect();
        Ok(DevPool {
            x: dev.upload(e.as_slice())?,
            inv: dev.upload(&inv)?,
            n: e.rows(),
            d: e.dim(),
            elem: Elem::F32,
        })
    }
}

impl DevPool<u16> {
    /// Uploads half-precision rows (`h` is [`Elem::F16`] or [`Elem::Bf16`]; raw bits,
    /// row-major `n × d`); the norms are computed on the device from the same half values
    /// the products use.
    pub fn upload_half(dev: &Device, bits: &[u16], n: usize, d: usize, h: Elem) -> Result<Self> {
        if bits.len() != n * d || n == 0 || d == 0 || h == Elem::F32 {
            return Err(Error::invalid(
                "half pool",
                format!("{} {h:?} values for {n} rows of dimension {d}", bits.len()),
            ));
        }
        let x = dev.upload(bits)?;
        let mut inv = dev.zeros::<f32>(n)?;
        let name = format!("row_inv_norms_{}", h.parts().0);
        let (nn, dd) = (n as i64, to_i32(d, "dim")?);
        launch!(dev, &name, per_row(n), &x, &nn, &dd, &mut inv)?;
        Ok(DevPool {
            x,
            inv,
            n,
            d,
            elem: h,
        })
    }
}

/// Applies the kernel epilogue in place to an `n × n` block of raw dot products.
fn epilogue(dev: &Device, g: &mut CudaSlice<f32>, inv: &CudaSlice<f32>, n: usize, k: Kernel) -> Result<()> {
    let (kind, p) = kernel_code(k);
    let (rows, cols, ld) = (n as i64, n as i64, n as i64);
    launch!(
        dev,
        "gram_epilogue_f32",
        matrix(n, n),
        g,
        &rows,
        &cols,
        &ld,
        inv,
        inv,
        &kind,
        &p
    )
}

/// Which code path computes a Gram block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GramPath {
    /// cuBLAS GEMM (tensor cores for half inputs), then the epilogue kernel.
    Cublas,
    /// The crate's tiled kernel with the epilogue fused.
    Tiled,
}

/// The Gram of a pool on the device, `n × n` row-major. `path` chooses cuBLAS or the tiled
/// kernel (`None`: cuBLAS when present and `n >= 512`).
pub fn gram_dev<T: DeviceRepr>(
    dev: &Device,
    pool: &DevPool<T>,
    k: Kernel,
    path: Option<GramPath>,
) -> Result<CudaSlice<f32>> {
    let mut g = dev.zeros::<f32>(pool.n * pool.n)?;
    gram_into(dev, pool, k, path, &mut g)?;
    Ok(g)
}

/// [`gram_dev`] into `g` (`n × n`; every element written).
pub fn gram_into<T: DeviceRepr>(
    dev: &Device,
    pool: &DevPool<T>,
    k: Kernel,
    path: Option<GramPath>,
    g: &mut CudaSlice<f32>,
) -> Result<()> {
    k.validate()?;
    let n = pool.n;
    if g.len() < n * n {
        return Err(err(format!("Gram output of {} values for {n} x {n}", g.len())));
    }
    match choose_path(dev, n, path)? {
        GramPath::Cublas => {
            gemm_raw(dev, pool, g)?;
            epilogue(dev, g, &pool.inv, n, k)
        }
        GramPath::Tiled => {
            let name = format!("gram_tiled_{}", pool.elem.parts().0);
            tiled(dev, &name, &pool.x, &pool.inv, &[n], pool.d, kernel_code(k), g)
        }
    }
}

/// `g = X X^T` (`n × n`): cuBLAS when present, else the tiled kernel with no epilogue.
fn dot_gram(dev: &Device, pool: &DevPool<f32>, g: &mut CudaSlice<f32>) -> Result<()> {
    if dev.blas.is_some() {
        gemm_raw(dev, pool, g)
    } else {
        let ones = dev.upload(&vec![1.0f32; pool.n])?;
        tiled(dev, "gram_tiled_f32", &pool.x, &ones, &[pool.n], pool.d, RAW, g)
    }
}

/// `g = X X^T` (raw dot products, `n × n`) by cuBLAS GemmEx in f32 compute: SGEMM for f32
/// rows, tensor cores for f16/bf16 rows (f32 accumulation and output). The GEMM rate the
/// Gram is measured against.
pub fn gemm_raw<T: DeviceRepr>(dev: &Device, pool: &DevPool<T>, g: &mut CudaSlice<f32>) -> Result<()> {
    use cudarc::cublas::sys::{cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t, cudaDataType};
    let n = pool.n;
    if g.len() < n * n || pool.x.len() < n * pool.d {
        return Err(err(format!("GEMM buffers too small for {n} x {}", pool.d)));
    }
    let blas = dev.blas.as_ref().ok_or_else(|| err("cuBLAS is not available"))?;
    // cuBLAS runs in the calling thread's current context: make it this device's.
    dev.ctx.bind_to_thread().map_err(drv("bind context"))?;
    let (ni, di) = (to_i32(n, "rows")?, to_i32(pool.d, "dim")?);
    let ty = pool.elem.parts().1;
    let (alpha, beta) = (1.0f32, 0.0f32);
    let (a, _ga) = pool.x.device_ptr(&dev.stream);
    let (c, _gc) = g.device_ptr_mut(&dev.stream);
    // SAFETY: the row-major n × d pool is a column-major d × n matrix X; C (n × n, f32)
    // = X^T X reads n·d elements of `pool.x` (of type `ty`, checked above) and writes n·n
    // floats of `g` (checked above); compute in f32, so alpha/beta are f32 locals.
    unsafe {
        cudarc::cublas::result::gemm_ex(
            *blas.handle(),
            cublasOperation_t::CUBLAS_OP_T,
            cublasOperation_t::CUBLAS_OP_N,
            ni,
            ni,
            di,
            (&alpha as *const f32).cast(),
            a as *const std::ffi::c_void,
            ty,
            di,
            a as *const std::ffi::c_void,
            ty,
            di,
            (&beta as *const f32).cast(),
            c as *mut std::ffi::c_void,
            cudaDataType::CUDA_R_32F,
            ni,
            cublasComputeType_t::CUBLAS_COMPUTE_32F,
            cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    }
    .map_err(|e| err(format!("cublasGemmEx: {e:?}")))
}

fn to_i32(v: usize, what: &str) -> Result<i32> {
    i32::try_from(v).map_err(|_| Error::invalid(what, format!("{v} is above the CUDA path's limit of 2^31")))
}

fn choose_path(dev: &Device, n: usize, path: Option<GramPath>) -> Result<GramPath> {
    match path {
        Some(GramPath::Cublas) if dev.blas.is_none() => Err(err(format!(
            "cuBLAS path asked for but unavailable: {}",
            dev.blas_missing.as_deref().unwrap_or("unknown")
        ))),
        Some(p) => Ok(p),
        None if dev.blas.is_some() && n >= 512 => Ok(GramPath::Cublas),
        None => Ok(GramPath::Tiled),
    }
}

/// The tiled Gram of pools of sizes `sizes` stored back to back in `x` (one launch).
#[allow(clippy::too_many_arguments)]
fn tiled<T: DeviceRepr>(
    dev: &Device,
    name: &str,
    x: &CudaSlice<T>,
    inv: &CudaSlice<f32>,
    sizes: &[usize],
    d: usize,
    (kind, p): (i32, f32),
    out: &mut CudaSlice<f32>,
) -> Result<()> {
    let mut np = Vec::with_capacity(sizes.len());
    let mut row0 = Vec::with_capacity(sizes.len());
    let mut out0 = Vec::with_capacity(sizes.len());
    let (mut r, mut o) = (0i64, 0i64);
    for &s in sizes {
        np.push(to_i32(s, "pool rows")?);
        row0.push(r);
        out0.push(o);
        r += s as i64;
        o += (s * s) as i64;
    }
    if out.len() < o as usize || x.len() < r as usize * d || inv.len() < r as usize {
        return Err(err("tiled Gram: buffers smaller than the pools"));
    }
    let max = sizes.iter().copied().max().unwrap_or(0);
    if max == 0 {
        return Ok(());
    }
    let tiles = max.div_ceil(64) as u32;
    let batches = u32::try_from(sizes.len())
        .ok()
        .filter(|&b| b <= 65_535)
        .ok_or_else(|| {
            Error::invalid(
                "pools",
                format!("{} pools in one launch (at most 65,535)", sizes.len()),
            )
        })?;
    let cfg = LaunchConfig {
        grid_dim: (tiles, tiles, batches),
        block_dim: (TPB, 1, 1),
        shared_mem_bytes: 0,
    };
    let (np, row0, out0) = (dev.upload(&np)?, dev.upload(&row0)?, dev.upload(&out0)?);
    let di = to_i32(d, "dim")?;
    launch!(dev, name, cfg, x, &np, &row0, &out0, &di, inv, &kind, &p, out)
}

/// The Gram of `e` (as [`crate::similarity::gram`] computes it on the CPU), on the device.
pub fn gram(dev: &Device, e: &Embeddings, k: Kernel) -> Result<Vec<f32>> {
    let pool = DevPool::upload(dev, e)?;
    let g = gram_dev(dev, &pool, k, None)?;
    dev.download(&g)
}

/// The Grams of many pools of one dimension in one launch of the tiled kernel.
pub fn gram_batched(dev: &Device, pools: &[&Embeddings], k: Kernel) -> Result<Vec<Vec<f32>>> {
    k.validate()?;
    let Some(first) = pools.first() else {
        return Ok(Vec::new());
    };
    let d = first.dim();
    let mut rows = Vec::new();
    let mut inv = Vec::new();
    let mut sizes = Vec::with_capacity(pools.len());
    for (b, e) in pools.iter().enumerate() {
        if e.dim() != d {
            return Err(Error::invalid(
                format!("pool {b}"),
                format!("dimension {} differs from pool 0's {d}", e.dim()),
            ));
        }
        rows.extend_from_slice(e.as_slice());
        inv.extend(e.inv_norms()?.iter().map(|&v| v as f32));
        sizes.push(e.rows());
    }
    let total: usize = sizes.iter().map(|s| s * s).sum();
    let x = dev.upload(&rows)?;
    let inv = dev.upload(&inv)?;
    let mut out = dev.zeros::<f32>(total)?;
    tiled(
        dev,
        "gram_tiled_f32",
        &x,
        &inv,
        &sizes,
        d,
        kernel_code(k),
        &mut out,
    )?;
    let all = dev.download(&out)?;
    let mut res = Vec::with_capacity(sizes.len());
    let mut at = 0;
    for s in sizes {
        res.push(all[at..at + s * s].to_vec());
        at += s * s;
    }
    Ok(res)
}

/// `out[i] = K(<x_i, y> inv[i] yinv)` for every pool row: a kernel row on the device.
pub fn kernel_row(
    dev: &Device,
    pool: &DevPool<f32>,
    y: &CudaSlice<f32>,
    yinv: f32,
    k: Kernel,
    out: &mut CudaSlice<f32>,
) -> Result<()> {
    checked_len("kernel row output", out.len(), pool.n)?;
    if y.len() != pool.d {
        return Err(Error::invalid(
            "kernel row",
            format!("vector of {} for dimension {}", y.len(), pool.d),
        ));
    }
    let (kind, p) = kernel_code(k);
    let (n, d) = (pool.n as i64, to_i32(pool.d, "dim")?);
    launch!(
        dev,
        "kernel_row_f32",
        per_row(pool.n),
        &pool.x,
        &n,
        &d,
        y,
        &pool.inv,
        &yinv,
        &kind,
        &p,
        out
    )
}

// --- greedy selectors ----------------------------------------------------------------

/// Which selector a [`GreedyDev`] runs (SPEC §1; the CPU scorers are the reference).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum DevKind {
    /// MMR with this lambda (needs relevance).
    Mmr {
        /// Relevance weight.
        lambda: f64,
    },
    /// Gram–Schmidt residual novelty with this residual floor.
    Grn {
        /// Residual below which an added row adds no basis vector.
        eps: f64,
    },
    /// DPP greedy MAP with this pivot floor.
    Dpp {
        /// Conditional variance below which an item is not added to the factor.
        eps: f64,
    },
    /// Centroid drift.
    Centroid,
    /// Dense facility location (`costs` divide the gains when given).
    Coverage,
}

enum State {
    Mmr {
        rel: CudaSlice<f64>,
        maxsim: CudaSlice<f64>,
        lambda: f64,
    },
    Grn {
        r: CudaSlice<f64>,
        u: CudaSlice<f64>,
        basis: Vec<Vec<f64>>,
        eps: f64,
    },
    Dpp {
        w: CudaSlice<f64>,
        s: CudaSlice<f64>,
        c: CudaSlice<f64>,
        d2: CudaSlice<f64>,
        cap: usize,
        t: usize,
        eps: f64,
    },
    Centroid {
        sd: CudaSlice<f64>,
        ss: CudaSlice<f64>,
    },
    Coverage {
        sim: CudaSlice<f32>,
        cur: CudaSlice<f32>,
        gcost: Option<CudaSlice<f64>>,
    },
}

/// The one-launch grid argmax's buffers (kernels/common.cuh `ctx_grid_argmax`): one
/// partial per block, the ticket the last block takes, and `{value, index}`.
struct ArgmaxBufs {
    pv: CudaSlice<f64>,
    pi: CudaSlice<i64>,
    ticket: CudaSlice<u32>,
    out: CudaSlice<f64>,
}

impl ArgmaxBufs {
    /// Buffers for launches of up to `per_row(n)` blocks (the largest grid a step uses).
    fn new(dev: &Device, n: usize) -> Result<Self> {
        let blocks = per_row(n).grid_dim.0 as usize;
        Ok(ArgmaxBufs {
            pv: dev.zeros::<f64>(blocks)?,
            pi: dev.zeros::<i64>(blocks)?,
            ticket: dev.zeros::<u32>(1)?,
            out: dev.zeros::<f64>(2)?,
        })
    }

    /// The last launch's `(index, value)`, `None` when no candidate was open.
    fn read(&self, dev: &Device) -> Result<Option<(usize, f64)>> {
        let mut r = [0.0f64; 2];
        dev.stream
            .memcpy_dtoh(&self.out, &mut r[..])
            .map_err(drv("device-to-host copy"))?;
        Ok((r[1] >= 0.0).then(|| (r[1] as usize, r[0])))
    }
}

fn checked_len(what: &str, got: usize, n: usize) -> Result<()> {
    if got == n {
        Ok(())
    } else {
        Err(Error::invalid(what, format!("{got} values for a pool of {n}")))
    }
}

/// A greedy selector's state on the device. [`add`](Self::add) queues a pick (retained
/// or selected); [`best`](Self::best) folds the queued pick into the state and returns the
/// best open candidate with its gain (f64, ties to the lower index), in one or two
/// launches and one 16-byte read back.
pub struct GreedyDev<'a> {
    dev: Arc<Device>,
    pool: DevPool<f32>,
    inv: CudaSlice<f64>,
    host: &'a [f32],
    inv_host: &'a [f64],
    alive: CudaSlice<u8>,
    cost: Option<CudaSlice<f64>>,
    am: ArgmaxBufs,
    pending: Option<usize>,
    state: State,
}

impl<'a> GreedyDev<'a> {
    /// State for `kind` over unit rows `rows` (`n × d`) with their exact inverse norms,
    /// relevance `rel` (cosine to the query: MMR's relevance, DPP's and coverage's weights
    /// `max(rel, 0)`), and token `costs` when a token budget applies. Coverage divides
    /// gains by `coverage_costs` when given.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        dev: Arc<Device>,
        kind: DevKind,
        rows: &'a [f32],
        d: usize,
        inv_host: &'a [f64],
        rel: Option<&[f64]>,
        costs: Option<&[f64]>,
        coverage_costs: Option<&[f64]>,
    ) -> Result<Self> {
        let n = inv_host.len();
        if rows.len() != n * d || n == 0 || d == 0 {
            return Err(Error::invalid(
                "pool",
                format!("{} values for {n} rows of dimension {d}", rows.len()),
            ));
        }
        for (what, v) in [
            ("relevance", rel),
            ("costs", costs),
            ("coverage costs", coverage_costs),
        ] {
            if let Some(v) = v {
                checked_len(what, v.len(), n)?;
            }
        }
        let inv32: Vec<f32> = inv_host.iter().map(|&v| v as f32).collect();
        let pool = DevPool {
            x: dev.upload(rows)?,
            inv: dev.upload(&inv32)?,
            n,
            d,
            elem: Elem::F32,
        };
        let inv = dev.upload(inv_host)?;
        let alive = dev.upload(&vec![1u8; n])?;
        let cost = costs.map(|c| dev.upload(c)).transpose()?;
        let am = ArgmaxBufs::new(&dev, n)?;
        let weights =
            || -> Vec<f64> { rel.map_or_else(|| vec![1.0; n], |r| r.iter().map(|&c| c.max(0.0)).collect()) };
        let state = match kind {
            DevKind::Mmr { lambda } => {
                let mut maxsim = dev.zeros::<f64>(n)?;
                dev.fill(&mut maxsim, f64::NEG_INFINITY)?;
                State::Mmr {
                    rel: dev.upload(&rel.map_or_else(|| vec![0.0; n], <[f64]>::to_vec))?,
                    maxsim,
                    lambda,
                }
            }
            DevKind::Grn { eps } => {
                let mut r = dev.zeros::<f64>(n)?;
                dev.fill(&mut r, 1.0)?;
                State::Grn {
                    r,
                    u: dev.zeros::<f64>(d)?,
                    basis: Vec::new(),
                    eps,
                }
            }
            DevKind::Dpp { eps } => {
                let w = weights();
                let d2: Vec<f64> = w.iter().map(|&v| v * v).collect();
                let cap = 64.min(n);
                State::Dpp {
                    w: dev.upload(&w)?,
                    s: dev.zeros::<f64>(n)?,
                    c: dev.zeros::<f64>(cap * n)?,
                    d2: dev.upload(&d2)?,
                    cap,
                    t: 0,
                    eps,
                }
            }
            DevKind::Centroid => State::Centroid {
                sd: dev.zeros::<f64>(n)?,
                ss: dev.zeros::<f64>(1)?,
            },
            DevKind::Coverage => {
                // The unit rows' dot products as computed (the CPU's
                // cosine_gram_computed_diag), then max(0, w_i s_ij).
                let mut sim = dev.zeros::<f32>(n * n)?;
                dot_gram(&dev, &pool, &mut sim)?;
                let w: Vec<f32> = weights().iter().map(|&v| v as f32).collect();
                let w = dev.upload(&w)?;
                let nn = n as i64;
                launch!(dev, "weight_rows_pos_f32", matrix(n, n), &mut sim, &nn, &w)?;
                State::Coverage {
                    sim,
                    cur: dev.zeros::<f32>(n)?,
                    gcost: coverage_costs.map(|c| dev.upload(c)).transpose()?,
                }
            }
        };
        Ok(GreedyDev {
            dev,
            pool,
            inv,
            host: rows,
            inv_host,
            alive,
            cost,
            am,
            pending: None,
            state,
        })
    }

    /// Queues `x` as picked. A retained item is checked first where the CPU scorer checks
    /// it (DPP: one with no conditional variance left is kept out of the factor).
    pub fn add(&mut self, x: usize, retained: bool) -> Result<()> {
        if x >= self.pool.n {
            return Err(Error::invalid(
                "pick",
                format!("index {x} outside the pool of {}", self.pool.n),
            ));
        }
        if self.pending.is_some() {
            self.step(None)?;
        }
        if retained {
            if let State::Dpp { d2, eps, .. } = &self.state {
                let v = self
                    .dev
                    .stream
                    .clone_dtoh(&d2.slice(x..x + 1))
                    .map_err(drv("device-to-host copy"))?;
                if v[0] < *eps {
                    let mut a = self.alive.slice_mut(x..x + 1);
                    self.dev
                        .stream
                        .memcpy_htod(&[0u8], &mut a)
                        .map_err(drv("host-to-device copy"))?;
                    return Ok(());
                }
            }
        }
        self.pending = Some(x);
        Ok(())
    }

    /// Folds the queued pick in and returns the best open candidate and its gain;
    /// `remaining` is the token budget left, when one applies.
    pub fn best(&mut self, remaining: Option<f64>) -> Result<Option<(usize, f64)>> {
        self.step(remaining)?;
        self.am.read(&self.dev)
    }

    /// One step: the pending pick (or none) folded in, the argmax of the gains into
    /// `am.out`.
    fn step(&mut self, remaining: Option<f64>) -> Result<()> {
        let dev = self.dev.clone();
        let p: i64 = self.pending.take().map_or(-1, |x| x as i64);
        let n = self.pool.n as i64;
        let d = to_i32(self.pool.d, "dim")?;
        let (cost, rem) = match (&self.cost, remaining) {
            (Some(c), Some(r)) => (dev.ptr(c), r),
            _ => (0u64, 0.0f64),
        };
        let rows = self.pool.n;
        let am = &mut self.am;
        match &mut self.state {
            State::Mmr { rel, maxsim, lambda } => launch_step!(
                dev,
                "mmr_step_f64",
                per_row(rows),
                [&self.pool.x, &n, &d, &p, &self.inv, &*rel, &*lambda, maxsim],
                &mut self.alive,
                &cost,
                &rem,
                am
            ),
            State::Grn { r, u, basis, eps } => {
                let mut uptr = 0u64;
                if p >= 0 {
                    let x = p as usize;
                    let dd = self.pool.d;
                    if let Some(v) = crate::select::orthonormal_extension(
                        &self.host[x * dd..(x + 1) * dd],
                        self.inv_host[x],
                        basis,
                        *eps,
                    ) {
                        dev.stream
                            .memcpy_htod(&v, u)
                            .map_err(drv("host-to-device copy"))?;
                        basis.push(v);
                        uptr = dev.ptr(u);
                    }
                }
                launch_step!(
                    dev,
                    "grn_step_f64",
                    per_row(rows),
                    [&self.pool.x, &n, &d, &p, &uptr, &self.inv, r],
                    &mut self.alive,
                    &cost,
                    &rem,
                    am
                )
            }
            State::Dpp {
                w, s, c, d2, cap, t, ..
            } => {
                let ti = to_i32(*t, "factor rank")?;
                if p >= 0 {
                    if *t == *cap {
                        let new_cap = (*cap * 2).min(rows);
                        let mut bigger = dev.zeros::<f64>(new_cap * rows)?;
                        dev.stream
                            .memcpy_dtod(c, &mut bigger.slice_mut(0..*cap * rows))
                            .map_err(drv("device copy"))?;
                        *c = bigger;
                        *cap = new_cap;
                    }
                    launch!(
                        dev,
                        "cos_to_row_f64",
                        per_row(rows),
                        &self.pool.x,
                        &n,
                        &d,
                        &p,
                        &self.inv,
                        &mut *s
                    )?;
                }
                launch_step!(
                    dev,
                    "dpp_step_f64",
                    per_elem(rows),
                    [&n, &p, &ti, &*s, &*w, c, d2],
                    &mut self.alive,
                    &cost,
                    &rem,
                    am
                )?;
                if p >= 0 {
                    *t += 1;
                }
                Ok(())
            }
            State::Centroid { sd, ss } => {
                launch!(dev, "centroid_pre_f64", per_elem(1), &*sd, &p, &mut *ss)?;
                launch_step!(
                    dev,
                    "centroid_step_f64",
                    per_row(rows),
                    [&self.pool.x, &n, &d, &p, &self.inv, sd, &*ss],
                    &mut self.alive,
                    &cost,
                    &rem,
                    am
                )
            }
            State::Coverage { sim, cur, gcost } => {
                launch!(
                    dev,
                    "cov_add_f32",
                    per_elem(rows),
                    &*sim,
                    &n,
                    &p,
                    &mut *cur,
                    &mut self.alive
                )?;
                let gptr = gcost.as_ref().map_or(0u64, |g| dev.ptr(g));
                launch_step!(
                    dev,
                    "cov_gains_f32",
                    per_row(rows),
                    [&*sim, &n, &*cur, &gptr],
                    &self.alive,
                    &cost,
                    &rem,
                    am
                )
            }
        }
    }
}

/// The largest open `g[i]` (alive, and costing at most `remaining` when `cost` is given),
/// ties to the lower index, by the one-launch grid argmax.
pub fn argmax_masked(
    dev: &Device,
    g: &CudaSlice<f64>,
    alive: &CudaSlice<u8>,
    cost: Option<(&CudaSlice<f64>, f64)>,
) -> Result<Option<(usize, f64)>> {
    let n = g.len();
    checked_len("alive", alive.len(), n)?;
    let (cp, rem) = match cost {
        Some((c, r)) => {
            checked_len("costs", c.len(), n)?;
            (dev.ptr(c), r)
        }
        None => (0u64, 0.0),
    };
    let mut am = ArgmaxBufs::new(dev, n)?;
    let nn = n as i64;
    launch!(
        dev,
        "argmax_masked_f64",
        per_elem(n),
        g,
        &nn,
        alive,
        &cp,
        &rem,
        &mut am.pv,
        &mut am.pi,
        &mut am.ticket,
        &mut am.out
    )?;
    am.read(dev)
}

impl crate::select::DevicePicker for GreedyDev<'_> {
    fn add(&mut self, x: usize, retained: bool) -> Result<()> {
        GreedyDev::add(self, x, retained)
    }
    fn best(&mut self, remaining: Option<f64>) -> Result<Option<(usize, f64)>> {
        GreedyDev::best(self, remaining)
    }
}

/// Decodes `ctx_pack(gain, index)` (kernels/common.cuh); 0 is "no candidate".
#[must_use]
pub fn unpack(key: u64) -> Option<(usize, f64)> {
    if key == 0 {
        return None;
    }
    let u = (key >> 32) as u32;
    let bits = if u & 0x8000_0000 != 0 { u & 0x7fff_ffff } else { !u };
    let idx = 0xffff_ffffu32 - (key as u32);
    Some((idx as usize, f64::from(f32::from_bits(bits))))
}

/// Greedy MMR over many pools of one size and dimension, every pool's step in one launch
/// (no threshold, `k` picks at most, stopping when the best gain is not positive, as
/// [`crate::select`] does). The pools are uploaded once; [`run`](Self::run) can repeat.
pub struct MmrBatched {
    dev: Arc<Device>,
    x: CudaSlice<f32>,
    inv: CudaSlice<f64>,
    rel: CudaSlice<f64>,
    pools: usize,
    n: usize,
    d: usize,
}

impl MmrBatched {
    /// `rows`: the pools' unit rows back to back (`pools × n × d`); `inv`: their exact
    /// inverse norms; `rel`: each row's cosine to its pool's query.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        dev: Arc<Device>,
        rows: &[f32],
        inv: &[f64],
        rel: &[f64],
        pools: usize,
        n: usize,
        d: usize,
    ) -> Result<Self> {
        if pools == 0
            || n == 0
            || rows.len() != pools * n * d
            || inv.len() != pools * n
            || rel.len() != pools * n
        {
            return Err(Error::invalid(
                "pools",
                format!(
                    "{} values, {} norms, {} relevances for {pools} pools of {n} x {d}",
                    rows.len(),
                    inv.len(),
                    rel.len()
                ),
            ));
        }
        Ok(MmrBatched {
            x: dev.upload(rows)?,
            inv: dev.upload(inv)?,
            rel: dev.upload(rel)?,
            dev,
            pools,
            n,
            d,
        })
    }

    /// Each pool's picks with their gains.
    pub fn run(&self, lambda: f64, k: usize) -> Result<Vec<Vec<(usize, f64)>>> {
        let (dev, pools, n) = (&self.dev, self.pools, self.n);
        let mut maxsim = dev.zeros::<f64>(pools * n)?;
        dev.fill(&mut maxsim, f64::NEG_INFINITY)?;
        let mut alive = dev.upload(&vec![1u8; pools * n])?;
        let keys = dev.zeros::<u64>(2 * pools)?;
        let mut p_host = vec![-1i64; pools];
        let mut p = dev.upload(&p_host)?;
        let mut out: Vec<Vec<(usize, f64)>> = vec![Vec::new(); pools];
        let (pi, nn, di, lam) = (to_i32(pools, "pools")?, n as i64, to_i32(self.d, "dim")?, lambda);
        let base = dev.ptr(&keys);
        for step in 0..k.min(n) {
            let slot = (step % 2) as u64;
            let (kp, kr) = (
                base + 8 * slot * pools as u64,
                base + 8 * (1 - slot) * pools as u64,
            );
            launch!(
                dev,
                "mmr_step_batched_f64",
                per_row(pools * n),
                &self.x,
                &pi,
                &nn,
                &di,
                &p,
                &self.inv,
                &self.rel,
                &lam,
                &mut maxsim,
                &mut alive,
                &kp,
                &kr
            )?;
            let s = slot as usize * pools;
            let got = dev
                .stream
                .clone_dtoh(&keys.slice(s..s + pools))
                .map_err(drv("device-to-host copy"))?;
            let mut open = false;
            for (b, &key) in got.iter().enumerate() {
                if p_host[b] == -2 {
                    continue;
                }
                match unpack(key) {
                    Some((i, g)) if g > 0.0 => {
                        out[b].push((i, g));
                        p_host[b] = i as i64;
                        open = true;
                    }
                    _ => p_host[b] = -2,
                }
            }
            if !open {
                break;
            }
            dev.stream
                .memcpy_htod(&p_host, &mut p)
                .map_err(drv("host-to-device copy"))?;
        }
        Ok(out)
    }
}

// --- GP posterior ----------------------------------------------------------------------

/// The GP's pool-sized state on the device (rerank/gp.rs keeps `L`, the observations and
/// the standardisation on the host): `V` (f32, `t × n`), `colsq`, `a`, `b` (f64).
pub struct GpDev {
    dev: Arc<Device>,
    n: usize,
    cap: usize,
    t: usize,
    v: CudaSlice<f32>,
    /// `colsq`, `a`, `b` back to back (one copy to the host per observation).
    sums: CudaSlice<f64>,
    host_sums: Vec<f64>,
    krow: CudaSlice<f32>,
    host_krow: Vec<f32>,
    l: CudaSlice<f64>,
    col: CudaSlice<f32>,
}

impl GpDev {
    /// Empty state for a pool of `n`.
    pub fn new(dev: Arc<Device>, n: usize) -> Result<Self> {
        let cap = 64.min(n.max(1));
        Ok(GpDev {
            v: dev.zeros::<f32>(cap * n)?,
            sums: dev.zeros::<f64>(3 * n)?,
            host_sums: vec![0.0; 3 * n],
            krow: dev.zeros::<f32>(n)?,
            host_krow: vec![0.0; n],
            l: dev.zeros::<f64>(cap)?,
            col: dev.zeros::<f32>(cap)?,
            dev,
            n,
            cap,
            t: 0,
        })
    }

    /// Clears every row (a refactorisation restarts from here).
    pub fn reset(&mut self) -> Result<()> {
        self.t = 0;
        self.dev
            .stream
            .memset_zeros(&mut self.sums)
            .map_err(drv("memset"))
    }

    /// Column `j` of `V` (the rows appended so far), widened to f64.
    pub fn column(&mut self, j: usize) -> Result<Vec<f64>> {
        if self.t == 0 {
            return Ok(Vec::new());
        }
        let (n, t, jj) = (self.n as i64, self.t as i32, j as i64);
        launch!(
            self.dev,
            "gp_col_f32",
            per_elem(self.t),
            &self.v,
            &n,
            &t,
            &jj,
            &mut self.col
        )?;
        let c = self
            .dev
            .stream
            .clone_dtoh(&self.col.slice(0..self.t))
            .map_err(drv("device-to-host copy"))?;
        Ok(c.into_iter().map(f64::from).collect())
    }

    /// Appends row `t` of `V` from the new observation's kernel row `krow` (`n` values of
    /// an f32 kernel, sent as f32), `l = L^{-1} k_A(new)`, pivot `lnn` and the scaled
    /// residual entries `urn`, `u1n`.
    pub fn append(&mut self, krow: &[f64], l: &[f64], lnn: f64, urn: f64, u1n: f64) -> Result<()> {
        if krow.len() != self.n || l.len() != self.t {
            return Err(err("GP append: kernel row or l of the wrong length"));
        }
        if self.t == self.cap {
            let new_cap = (self.cap * 2).max(1);
            let mut v = self.dev.zeros::<f32>(new_cap * self.n)?;
            self.dev
                .stream
                .memcpy_dtod(&self.v, &mut v.slice_mut(0..self.cap * self.n))
                .map_err(drv("device copy"))?;
            self.v = v;
            self.l = self.dev.zeros::<f64>(new_cap)?;
            self.col = self.dev.zeros::<f32>(new_cap)?;
            self.cap = new_cap;
        }
        self.host_krow
            .iter_mut()
            .zip(krow)
            .for_each(|(h, &v)| *h = v as f32);
        self.dev
            .stream
            .memcpy_htod(&self.host_krow, &mut self.krow)
            .map_err(drv("host-to-device copy"))?;
        if !l.is_empty() {
            self.dev
                .stream
                .memcpy_htod(l, &mut self.l.slice_mut(0..l.len()))
                .map_err(drv("host-to-device copy"))?;
        }
        let (n, t) = (self.n as i64, self.t as i32);
        launch!(
            self.dev,
            "gp_append_f32",
            per_elem(self.n),
            &mut self.v,
            &n,
            &t,
            &self.l,
            &self.krow,
            &lnn,
            &urn,
            &u1n,
            &mut self.sums
        )?;
        self.t += 1;
        Ok(())
    }

    /// `colsq`, `a`, `b` copied to the host (one copy), into slices of `n` each.
    pub fn sums_into(&mut self, colsq: &mut [f64], a: &mut [f64], b: &mut [f64]) -> Result<()> {
        let n = self.n;
        if colsq.len() != n || a.len() != n || b.len() != n {
            return Err(err("GP sums: output slices of the wrong length"));
        }
        self.dev
            .stream
            .memcpy_dtoh(&self.sums, &mut self.host_sums)
            .map_err(drv("device-to-host copy"))?;
        colsq.copy_from_slice(&self.host_sums[..n]);
        a.copy_from_slice(&self.host_sums[n..2 * n]);
        b.copy_from_slice(&self.host_sums[2 * n..]);
        Ok(())
    }
}

/// The GP posterior in oracle units on the device from the running sums (rerank/gp.rs
/// `Gp::posterior`): `mean = (mu0 + m) + (a - m b)`, `var = s² max(1 - colsq, 0)`.
#[allow(clippy::too_many_arguments)]
pub fn gp_posterior(
    dev: &Device,
    mu0: &[f64],
    a: &[f64],
    b: &[f64],
    colsq: &[f64],
    m: f64,
    s: f64,
) -> Result<(Vec<f64>, Vec<f64>)> {
    let n = mu0.len();
    for (what, v) in [("a", a), ("b", b), ("colsq", colsq)] {
        checked_len(what, v.len(), n)?;
    }
    let (mu0, a, b, colsq) = (
        dev.upload(mu0)?,
        dev.upload(a)?,
        dev.upload(b)?,
        dev.upload(colsq)?,
    );
    let mut mean = dev.zeros::<f64>(n)?;
    let mut var = dev.zeros::<f64>(n)?;
    dev.fill(&mut mean, f64::NAN)?;
    dev.fill(&mut var, f64::NAN)?;
    let nn = n as i64;
    launch!(
        dev,
        "gp_posterior_f64",
        per_elem(n),
        &mu0,
        &a,
        &b,
        &colsq,
        &m,
        &s,
        &nn,
        &mut mean,
        &mut var
    )?;
    Ok((dev.download(&mean)?, dev.download(&var)?))
}

/// GP-UCB's pick on the device (rerank `ucb_pick`): the unscored item with the largest
/// `mean + sqrt(beta) sqrt(var)`, ties to the lower index.
pub fn ucb_argmax(
    dev: &Device,
    mean: &[f64],
    var: &[f64],
    scored: &[bool],
    beta: f64,
) -> Result<Option<usize>> {
    let n = mean.len();
    checked_len("var", var.len(), n)?;
    checked_len("scored", scored.len(), n)?;
    let flags: Vec<u8> = scored.iter().map(|&s| u8::from(s)).collect();
    let (mean, var, flags) = (dev.upload(mean)?, dev.upload(var)?, dev.upload(&flags)?);
    let mut am = ArgmaxBufs::new(dev, n)?;
    let (sb, nn) = (beta.sqrt(), n as i64);
    launch!(
        dev,
        "ucb_argmax_f64",
        per_elem(n),
        &mean,
        &var,
        &flags,
        &sb,
        &nn,
        &mut am.pv,
        &mut am.pi,
        &mut am.ticket,
        &mut am.out
    )?;
    Ok(am.read(dev)?.map(|p| p.0))
}

// --- self-test -------------------------------------------------------------------------

/// Relative error `|a - b| / max(|b|, 1)`; NaN when either is NaN (so it never passes).
#[must_use]
pub fn rel_err(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        return f64::NAN;
    }
    (a - b).abs() / b.abs().max(1.0)
}

/// The largest [`rel_err`] over two slices, NaN if any element is NaN or lengths differ.
#[must_use]
pub fn max_rel_err(a: &[f32], b: &[f32]) -> f64 {
    if a.len() != b.len() {
        return f64::NAN;
    }
    let mut m = 0.0f64;
    for (&x, &y) in a.iter().zip(b) {
        let e = rel_err(f64::from(x), f64::from(y));
        if e.is_nan() {
            return f64::NAN;
        }
        m = m.max(e);
    }
    m
}

/// The check `open` runs before a device is used: Grams of a small odd-sized pool through
/// both paths and a greedy MMR selection, against the CPU path.
pub fn self_test(dev: &Arc<Device>) -> Result<()> {
    let mut rng = crate::rng::Rng::new(0x5e1f_7e57);
    let (n, d) = (37, 19);
    let data: Vec<f32> = (0..n * d).map(|_| rng.normal() as f32).collect();
    let e = Embeddings::new(n, d, data, "self-test")?;
    for (k, path) in [
        (Kernel::Cosine, GramPath::Tiled),
        (Kernel::Vmf { kappa: 3.0 }, GramPath::Tiled),
        (Kernel::Matern52 { l2: 0.7 }, GramPath::Cublas),
    ] {
        if path == GramPath::Cublas && dev.blas.is_none() {
            continue;
        }
        let pool = DevPool::upload(dev, &e)?;
        let g = dev.download(&gram_dev(dev, &pool, k, Some(path))?)?;
        let want = crate::similarity::gram(&e, k)?;
        let m = max_rel_err(&g, &want);
        if m.is_nan() || m > 1e-4 {
            return Err(err(format!(
                "self-test: {k:?} Gram ({path:?}) differs from the CPU by {m:e}"
            )));
        }
    }
    // Greedy MMR against the CPU selector.
    let u = e.normalized()?;
    let inv = u.inv_norms()?;
    let q = u.row(0).to_vec();
    let rel: Vec<f64> = (0..n)
        .map(|i| crate::backend::cpu::dot(u.row(i), &q) * inv[i] * inv[0])
        .collect();
    let mut g = GreedyDev::new(
        dev.clone(),
        DevKind::Mmr { lambda: 0.5 },
        u.as_slice(),
        d,
        &inv,
        Some(&rel),
        None,
        None,
    )?;
    let mut got = Vec::new();
    while got.len() < 8 {
        match g.best(None)? {
            Some((x, v)) if v > 0.0 => {
                g.add(x, false)?;
                got.push(x);
            }
            _ => break,
        }
    }
    let cfg = crate::select::SelectConfig::new(crate::select::Method::Mmr)
        .lambda(0.5)
        .k(8);
    let inp = crate::select::Inputs {
        embeddings: Some(&u),
        query: Some(&q),
        ..crate::select::Inputs::default()
    };
    let want = crate::select::select(&cfg, &inp)?.selected;
    if got != want {
        return Err(err(format!(
            "self-test: greedy MMR picked {got:?}, the CPU {want:?}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::unpack;

    /// kernels/common.cuh's `ctx_pack`, line for line.
    fn pack(v: f32, i: u32) -> u64 {
        let u = if v == 0.0 { 0 } else { v.to_bits() };
        let u = if u & 0x8000_0000 != 0 { !u } else { u | 0x8000_0000 };
        (u64::from(u) << 32) | u64::from(0xffff_ffff - i)
    }

    #[test]
    fn packed_keys_order_by_value_then_lower_index_and_decode() {
        let vals = [
            f32::NEG_INFINITY,
            -3.5,
            -1e-30,
            -0.0,
            0.0,
            1e-30,
            0.25,
            7.0,
            f32::INFINITY,
        ];
        let mut keys = Vec::new();
        for (a, &v) in vals.iter().enumerate() {
            for i in [0u32, 1, 9_999, 4_000_000_000] {
                let k = pack(v, i);
                let (j, g) = unpack(k).unwrap();
                assert_eq!(j, i as usize);
                assert!(g == f64::from(v), "{v} decoded as {g}");
                keys.push((k, a, i));
            }
        }
        // The largest key is the largest value (signed zeros equal), then the lower index.
        for &(k1, a1, i1) in &keys {
            for &(k2, a2, i2) in &keys {
                let (v1, v2) = (vals[a1], vals[a2]);
                let want = v1 > v2 || (v1 == v2 && i1 < i2);
                assert_eq!(k1 > k2, want, "{v1}@{i1} vs {v2}@{i2}");
            }
        }
        assert_eq!(unpack(0), None);
    }
}
