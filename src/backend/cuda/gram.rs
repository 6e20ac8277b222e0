//! Gram blocks with kernel epilogues on the device (cuBLAS GemmEx then the epilogue
//! kernel, or the crate's tiled kernel with the epilogue fused), many pools in one launch,
//! kernel rows against a resident pool, and the resident pool itself ([`DevRows`]).

use super::raw::{self, Buf, GemmType, Lane};
use super::{checked_len, matrix, per_half_warp, per_row, to_i32, to_i64, Device, TPB};
use crate::embeddings::{Embeddings, Matrix};
use crate::error::{Error, Result};
use crate::similarity::Kernel;

/// `(kind, parameter)` of a kernel as the CUDA epilogue reads them (kernels/common.cuh).
pub(crate) fn kernel_code(k: Kernel) -> (i32, f32) {
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

/// A pool's rows on the device, by element type.
pub(crate) enum Data {
    F32(Buf<f32>),
    F16(Buf<u16>),
    Bf16(Buf<u16>),
}

/// Borrowed rows of some element type.
#[derive(Clone, Copy)]
pub(crate) enum DataRef<'a> {
    F32(&'a Buf<f32>),
    F16(&'a Buf<u16>),
    Bf16(&'a Buf<u16>),
}

/// A pool as the Gram reads it: rows, `1 / ||row||` (f32), rows and dimension.
#[derive(Clone, Copy)]
pub(crate) struct PoolRef<'a> {
    pub x: DataRef<'a>,
    pub inv: &'a Buf<f32>,
    pub n: usize,
    pub d: usize,
}

/// A pool on the device for Gram blocks (any element type).
pub struct DevPool {
    x: Data,
    inv: Buf<f32>,
    /// Rows.
    pub n: usize,
    /// Dimension.
    pub d: usize,
}

impl DevPool {
    /// Uploads `e` with its exact inverse norms (as the CPU Gram uses them).
    pub(crate) fn upload(lane: &Lane, e: &Embeddings) -> Result<Self> {
        let inv: Vec<f32> = e.inv_norms()?.iter().map(|&v| v as f32).collect();
        Ok(DevPool {
            x: Data::F32(lane.upload(e.as_slice())?),
            inv: lane.upload(&inv)?,
            n: e.rows(),
            d: e.dim(),
        })
    }

    /// Uploads half-precision rows (`h` is [`Elem::F16`] or [`Elem::Bf16`]; raw bits,
    /// row-major `n × d`); the norms are computed on the device from the same half values
    /// the products use.
    pub(crate) fn upload_half(lane: &Lane, bits: &[u16], n: usize, d: usize, h: Elem) -> Result<Self> {
        if bits.len() != n * d || n == 0 || d == 0 || h == Elem::F32 {
            return Err(Error::invalid(
                "half pool",
                format!("{} {h:?} values for {n} rows of dimension {d}", bits.len()),
            ));
        }
        // A row of zeros (either sign) has no direction: its inverse norm would be inf and
        // every kernel value of it NaN. The CPU refuses zero rows; so does this.
        if let Some(row) = bits
            .chunks_exact(d)
            .position(|r| r.iter().all(|&b| b & 0x7fff == 0))
        {
            return Err(Error::ZeroNorm {
                source_name: "half pool".into(),
                row,
            });
        }
        let x = lane.upload(bits)?;
        let mut inv = lane.zeros::<f32>(n)?;
        let (nn, dd) = (to_i64(n), to_i32(d, "dim")?);
        let g = per_row(n);
        let x = if h == Elem::F16 {
            raw::row_inv_norms_f16(lane, g, x.v(), nn, dd, inv.vm())?;
            Data::F16(x)
        } else {
            raw::row_inv_norms_bf16(lane, g, x.v(), nn, dd, inv.vm())?;
            Data::Bf16(x)
        };
        Ok(DevPool { x, inv, n, d })
    }

    pub(crate) fn r(&self) -> PoolRef<'_> {
        PoolRef {
            x: match &self.x {
                Data::F32(b) => DataRef::F32(b),
                Data::F16(b) => DataRef::F16(b),
                Data::Bf16(b) => DataRef::Bf16(b),
            },
            inv: &self.inv,
            n: self.n,
            d: self.d,
        }
    }
}

/// A pool resident on a device: its rows (f32), their inverse norms in f32 (the
/// Gram's epilogue) and f64 (the selectors' cosines, as on the CPU).
pub struct DevRows {
    pub(crate) x: Buf<f32>,
    pub(crate) inv32: Buf<f32>,
    pub(crate) inv64: Buf<f64>,
    pub(crate) n: usize,
    pub(crate) d: usize,
    pub(crate) ordinal: usize,
}

impl DevRows {
    /// Rows.
    #[must_use]
    pub fn rows(&self) -> usize {
        self.n
    }
    /// The device ordinal.
    #[must_use]
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }
    /// Bytes held on the device.
    #[must_use]
    pub fn device_bytes(&self) -> usize {
        self.n * (self.d * 4 + 4 + 8)
    }
    pub(crate) fn r(&self) -> PoolRef<'_> {
        PoolRef {
            x: DataRef::F32(&self.x),
            inv: &self.inv32,
            n: self.n,
            d: self.d,
        }
    }
}

/// Uploads a pool's rows `unit` with their exact inverse norms `inv` to `dev`, and waits,
/// so every lane may read them.
pub(crate) fn upload_rows(dev: &Device, unit: Matrix<'_>, inv: &[f64]) -> Result<DevRows> {
    checked_len("inverse norms", inv.len(), unit.rows())?;
    let lane = dev.lane()?;
    let inv32: Vec<f32> = inv.iter().map(|&v| v as f32).collect();
    let rows = DevRows {
        x: lane.upload(unit.as_slice())?,
        inv32: lane.upload(&inv32)?,
        inv64: lane.upload(inv)?,
        n: unit.rows(),
        d: unit.dim(),
        ordinal: dev.ordinal(),
    };
    lane.sync()?;
    Ok(rows)
}

/// A pool resident on a device in half precision (f16 or bf16), for the Gram.
pub struct HalfRows {
    pool: DevPool,
    storage: crate::backend::Storage,
    ordinal: usize,
}

impl HalfRows {
    /// How the rows are stored.
    #[must_use]
    pub fn storage(&self) -> crate::backend::Storage {
        self.storage
    }
}

/// Uploads a pool's rows (unit, or within 2^-8 of it) rounded to `storage` (f16 or bf16);
/// their norms are computed on the device from the half values the products use.
pub(crate) fn upload_half_rows(
    dev: &Device,
    unit: Matrix<'_>,
    storage: crate::backend::Storage,
) -> Result<HalfRows> {
    use crate::backend::Storage;
    let (elem, bits): (Elem, Vec<u16>) = match storage {
        Storage::F16 => (
            Elem::F16,
            unit.as_slice()
                .iter()
                .map(|&v| half::f16::from_f32(v).to_bits())
                .collect(),
        ),
        Storage::Bf16 => (
            Elem::Bf16,
            unit.as_slice()
                .iter()
                .map(|&v| half::bf16::from_f32(v).to_bits())
                .collect(),
        ),
        Storage::F32 => return Err(Error::invalid("storage", "f32 rows are uploaded by upload_rows")),
    };
    let lane = dev.lane()?;
    let pool = DevPool::upload_half(&lane, &bits, unit.rows(), unit.dim(), elem)?;
    lane.sync()?;
    Ok(HalfRows {
        pool,
        storage,
        ordinal: dev.ordinal(),
    })
}

/// The Gram of a half-precision resident pool (tensor cores through cuBLAS when present).
pub(crate) fn gram_half(dev: &Device, rows: &HalfRows, k: Kernel) -> Result<Vec<f32>> {
    if rows.ordinal != dev.ordinal() {
        return Err(Error::invalid(
            "pool",
            format!("resident on cuda:{}, not cuda:{}", rows.ordinal, dev.ordinal()),
        ));
    }
    let lane = dev.lane()?;
    let n = rows.pool.n;
    let mut g = lane.zeros::<f32>(n * n)?;
    gram_into(&lane, rows.pool.r(), k, None, &mut g)?;
    lane.download(g.v())
}

/// Which code path computes a Gram block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GramPath {
    /// cuBLAS GEMM (tensor cores for half inputs), then the epilogue kernel.
    Cublas,
    /// The crate's tiled kernel with the epilogue fused.
    Tiled,
}

fn choose_path(lane: &Lane, n: usize, path: Option<GramPath>) -> Result<GramPath> {
    match path {
        Some(GramPath::Cublas) if !lane.has_blas() => Err(Error::unsupported(
            format!("cuda:{}", lane.ordinal()),
            "the cuBLAS Gram path (cuBLAS was not found)",
        )),
        Some(p) => Ok(p),
        None if lane.has_blas() && n >= 512 => Ok(GramPath::Cublas),
        None => Ok(GramPath::Tiled),
    }
}

/// The Gram of `pool` into `g` (`n × n`, every element written). `path` chooses cuBLAS or
/// the tiled kernel (`None`: cuBLAS when present and `n >= 512`).
pub(crate) fn gram_into(
    lane: &Lane,
    pool: PoolRef<'_>,
    k: Kernel,
    path: Option<GramPath>,
    g: &mut Buf<f32>,
) -> Result<()> {
    k.validate()?;
    let n = pool.n;
    if g.len() < n * n {
        return Err(Error::invalid(
            "Gram output",
            format!("{} values for {n} x {n}", g.len()),
        ));
    }
    if n == 0 {
        return Ok(());
    }
    match choose_path(lane, n, path)? {
        GramPath::Cublas => {
            gemm_raw(lane, pool, g)?;
            let (kind, p) = kernel_code(k);
            let nn = to_i64(n);
            raw::gram_epilogue_f32(
                lane,
                matrix(n, n),
                g.vm(),
                nn,
                nn,
                nn,
                pool.inv.v(),
                pool.inv.v(),
                kind,
                p,
            )
        }
        GramPath::Tiled => tiled(lane, pool.x, pool.inv, &[n], pool.d, kernel_code(k), g),
    }
}

/// `g = X X^T` (raw dot products, `n × n`) by cuBLAS GemmEx (the GEMM rate the Gram is
/// measured against).
pub(crate) fn gemm_raw(lane: &Lane, pool: PoolRef<'_>, g: &mut Buf<f32>) -> Result<()> {
    let (n, d) = (pool.n, pool.d);
    match pool.x {
        DataRef::F32(x) => lane.gemm_xxt(x.v(), GemmType::F32, n, d, g.vm()),
        DataRef::F16(x) => lane.gemm_xxt(x.v(), GemmType::F16, n, d, g.vm()),
        DataRef::Bf16(x) => lane.gemm_xxt(x.v(), GemmType::Bf16, n, d, g.vm()),
    }
}

/// `g = X X^T` of a pool by the tiled kernel with no epilogue: each element summed by one
/// thread in one fixed order, so identical rows give bit-identical rows of `g` (a GEMM that
/// splits K may not), and a duplicate's facility-location gain is exactly 0, as on the
/// CPU.
pub(crate) fn dot_gram(lane: &Lane, pool: PoolRef<'_>, g: &mut Buf<f32>) -> Result<()> {
    let ones = lane.upload(&vec![1.0f32; pool.n])?;
    tiled(lane, pool.x, &ones, &[pool.n], pool.d, RAW, g)
}

/// The tiled Gram of pools of sizes `sizes` stored back to back in `x` (one launch).
#[allow(clippy::too_many_arguments)]
fn tiled(
    lane: &Lane,
    x: DataRef<'_>,
    inv: &Buf<f32>,
    sizes: &[usize],
    d: usize,
    (kind, p): (i32, f32),
    out: &mut Buf<f32>,
) -> Result<()> {
    let mut np = Vec::with_capacity(sizes.len());
    let mut row0 = Vec::with_capacity(sizes.len());
    let mut out0 = Vec::with_capacity(sizes.len());
    let (mut r, mut o) = (0usize, 0usize);
    for &s in sizes {
        np.push(to_i32(s, "pool rows")?);
        row0.push(to_i64(r));
        out0.push(to_i64(o));
        r += s;
        o += s * s;
    }
    let xlen = match x {
        DataRef::F32(b) => b.len(),
        DataRef::F16(b) | DataRef::Bf16(b) => b.len(),
    };
    if out.len() < o || xlen < r * d || inv.len() < r {
        return Err(Error::invalid("tiled Gram", "buffers smaller than the pools"));
    }
    let max = sizes.iter().copied().max().unwrap_or(0);
    if max == 0 {
        return Ok(());
    }
    let tiles = u32::try_from(max.div_ceil(64)).map_err(|_| Error::invalid("pool rows", "too many"))?;
    let batches = u32::try_from(sizes.len())
        .ok()
        .filter(|&b| b <= 65_535)
        .ok_or_else(|| {
            Error::invalid(
                "pools",
                format!("{} pools in one launch (at most 65,535)", sizes.len()),
            )
        })?;
    let grid = raw::Grid {
        blocks: (tiles, tiles, batches),
        threads: TPB,
    };
    let (np, row0, out0) = (lane.upload(&np)?, lane.upload(&row0)?, lane.upload(&out0)?);
    let di = to_i32(d, "dim")?;
    match x {
        DataRef::F32(x) => raw::gram_tiled_f32(
            lane,
            grid,
            x.v(),
            np.v(),
            row0.v(),
            out0.v(),
            di,
            inv.v(),
            kind,
            p,
            out.vm(),
        ),
        DataRef::F16(x) => raw::gram_tiled_f16(
            lane,
            grid,
            x.v(),
            np.v(),
            row0.v(),
            out0.v(),
            di,
            inv.v(),
            kind,
            p,
            out.vm(),
        ),
        DataRef::Bf16(x) => raw::gram_tiled_bf16(
            lane,
            grid,
            x.v(),
            np.v(),
            row0.v(),
            out0.v(),
            di,
            inv.v(),
            kind,
            p,
            out.vm(),
        ),
    }
}

/// The Gram of `e` (as [`crate::similarity::gram`] computes it on the CPU), on `dev`.
pub(crate) fn gram(dev: &Device, e: &Embeddings, k: Kernel) -> Result<Vec<f32>> {
    let lane = dev.lane()?;
    let pool = DevPool::upload(&lane, e)?;
    let mut g = lane.zeros::<f32>(pool.n * pool.n)?;
    gram_into(&lane, pool.r(), k, None, &mut g)?;
    lane.download(g.v())
}

/// The Gram of a resident pool, read back (no upload).
pub(crate) fn gram_rows(dev: &Device, rows: &DevRows, k: Kernel) -> Result<Vec<f32>> {
    if rows.ordinal != dev.ordinal() {
        return Err(Error::invalid(
            "pool",
            format!("resident on cuda:{}, not cuda:{}", rows.ordinal, dev.ordinal()),
        ));
    }
    let lane = dev.lane()?;
    let mut g = lane.zeros::<f32>(rows.n * rows.n)?;
    gram_into(&lane, rows.r(), k, None, &mut g)?;
    lane.download(g.v())
}

/// The Grams of many pools of one dimension in one launch of the tiled kernel.
pub(crate) fn gram_batched(dev: &Device, pools: &[&Embeddings], k: Kernel) -> Result<Vec<Vec<f32>>> {
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
    let lane = dev.lane()?;
    let x = lane.upload(&rows)?;
    let inv = lane.upload(&inv)?;
    let mut out = lane.zeros::<f32>(total)?;
    tiled(&lane, DataRef::F32(&x), &inv, &sizes, d, kernel_code(k), &mut out)?;
    let all = lane.download(out.v())?;
    let mut res = Vec::with_capacity(sizes.len());
    let mut at = 0;
    for s in sizes {
        res.push(all[at..at + s * s].to_vec());
        at += s * s;
    }
    Ok(res)
}

/// `out[i] = K(<x_i, y> (inv_i yinv))` for every row of the resident pool, products and
/// the cosine in f64, rounded to f32 before the kernel (as the CPU's pool kernel); the
/// entry of row `self_idx` (when `y` is that row) is `K(1)`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn kernel_row(
    lane: &Lane,
    rows: &DevRows,
    y: raw::View<'_, f32>,
    yinv: f64,
    k: Kernel,
    self_idx: Option<usize>,
    out: &mut Buf<f32>,
) -> Result<()> {
    checked_len("kernel row output", out.len(), rows.n)?;
    if y.len() != rows.d {
        return Err(Error::DimensionMismatch {
            what: "kernel row vector vs pool".into(),
            expected: rows.d,
            got: y.len(),
        });
    }
    let (kind, p) = kernel_code(k);
    let (n, d) = (to_i64(rows.n), to_i32(rows.d, "dim")?);
    let s = self_idx.map_or(-1, to_i64);
    raw::kernel_row_f32(
        lane,
        per_half_warp(rows.n),
        rows.x.v(),
        n,
        d,
        y,
        rows.inv64.v(),
        yinv,
        kind,
        p,
        s,
        out.vm(),
    )
}
