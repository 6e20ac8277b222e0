//! CPU primitives: the reference every other backend is tested against.
//!
//! Dense inner products are written once here, with a fixed lane layout and reduction
//! order, and compiled for several instruction sets (AVX-512, AVX2+FMA, baseline) chosen
//! at run time. Every lane performs the same operations in the same order on every target
//! (fused multiply-adds in the `f64` lanes; a rounded product then a rounded sum in the
//! `f32` screens, `dot_f32*`), so a product gives the same bits whichever version runs;
//! the lazy and eager greedy paths both go through [`dot`], so they see identical
//! numbers. The kernels take slices of one length (a programming error otherwise: they
//! may panic), as every caller in the crate passes rows of one pool and a checked query.

pub mod attention;
pub mod gp;
pub(crate) mod screen;

pub(crate) use screen::Screen16;

use multiversion::multiversion;
use rayon::prelude::*;

/// Number of independent `f64` accumulators: enough to hide FMA latency on AVX-512/AVX2.
const LANES: usize = 16;

/// `<a, b>` for `f32` inputs, accumulated in `f64`: each product of two `f32` is exact in
/// `f64`, and the sum runs over `LANES` accumulators with a fixed pairwise reduction, so
/// the result is the same bits on every instruction set and accurate to ~1e-15 relative
/// (a residual of 1e-10, the DPP stopping threshold, stays resolvable).
#[multiversion(targets("x86_64+avx512f+avx512vl+fma", "x86_64+avx2+fma", "aarch64+neon"))]
#[must_use]
pub fn dot(a: &[f32], b: &[f32]) -> f64 {
    lane_dot(a, b, f64::from, f64::from)
}

/// Pools below this many rows are read (checked, normed, bounded, refreshed) on the
/// calling thread: waking the other threads costs more than the work.
pub(crate) const SMALL_POOL: usize = 2048;

/// [`dot`]`(a, a)`, the same bits, with each value widened once: the squared norm a pass
/// over rows takes.
#[multiversion(targets("x86_64+avx512f+avx512vl+fma", "x86_64+avx2+fma", "aarch64+neon"))]
#[must_use]
pub fn sum_sq(a: &[f32]) -> f64 {
    lane_fold(a, |acc, v| v.mul_add(v, acc))
}

/// Independent `f32` accumulators of [`dot_f32`]: four AVX-512 registers (eight AVX2),
/// so the adds of a row do not wait on one another.
const LANES_F32: usize = 64;

/// `<a, b>` in `f32` arithmetic (products and sums rounded to `f32`) over
/// 64 accumulators and a fixed pairwise reduction: a few times cheaper than
/// [`dot`], and within [`dot_f32_bound`]`(len) · ‖a‖ ‖b‖` of the exact inner product,
/// which makes it a screen: bounds from it decide which candidates need [`dot`] at all,
/// never a result.
#[multiversion(targets("x86_64+avx512f+avx512vl+fma", "x86_64+avx2+fma", "aarch64+neon"))]
#[must_use]
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    multiversion::target::match_target! {
        "x86_64+avx512f" => dot_f32_lanes(a, b),
        "x86_64+avx2" => dot_f32_blocks(a, b),
        _ => dot_f32_lanes(a, b),
    }
}

/// [`dot_f32`] of a row quantised to `i16` (a row of a pool's 16-bit copy, which MMR
/// screens from past the last-level cache; its scale left out) and
/// an `f32` row: each `a_i` converted to `f32` (exact), then [`dot_f32`]'s operations in
/// its order, so the bits of `dot_f32` on the converted row, within the same bound
/// ([`dot_f32_bound`]). Half the bytes of `a` to read.
#[multiversion(targets("x86_64+avx512f+avx512vl+fma", "x86_64+avx2+fma", "aarch64+neon"))]
#[must_use]
pub fn dot_i16_f32(a: &[i16], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    multiversion::target::match_target! {
        "x86_64+avx512f" => dot_f32_lanes(a, b),
        "x86_64+avx2" => dot_f32_blocks(a, b),
        _ => dot_f32_lanes(a, b),
    }
}

/// An element of the row the `f32` screens read once per step: `f32` as it is, or `i16`
/// (a row of a pool's 16-bit copy) converted exactly.
trait Lane: Copy + Default {
    fn f32(self) -> f32;
}

impl Lane for f32 {
    #[inline(always)]
    fn f32(self) -> f32 {
        self
    }
}

impl Lane for i16 {
    #[inline(always)]
    fn f32(self) -> f32 {
        f32::from(self)
    }
}

/// [`dot_f32`] as written: the 64 lanes as one array. The AVX-512 version holds it in
/// four registers; the AVX2 version spilled it to the stack after the loop and reduced
/// it in two-lane pieces (a third of the call at `d = 384`), hence [`dot_f32_blocks`].
#[inline(always)]
fn dot_f32_lanes<A: Lane>(a: &[A], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; LANES_F32];
    let ca = a.chunks_exact(LANES_F32);
    let cb = b.chunks_exact(LANES_F32);
    let (ta, tb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for l in 0..LANES_F32 {
            acc[l] += x[l].f32() * y[l];
        }
    }
    for l in 0..ta.len() {
        acc[l] += ta[l].f32() * tb[l];
    }
    reduce(acc)
}

/// [`dot_f32_lanes`] with its 64 lanes as eight 8-lane variables (lane `l` is element
/// `l % 8` of block `l / 8`), which the compiler keeps in registers through the
/// reduction: the same operations in the same order, so the same bits (AVX2 at
/// `d = 384`: 37 → 27 ns a call). A tail shorter than 64 goes to the lanes its elements
/// index, its last partial block padded with `+0 · +0`: an accumulator starts at `+0`
/// and a sum never turns it to `-0`, so adding `+0` leaves every lane's bits as they are.
#[inline(always)]
fn dot_f32_blocks<A: Lane>(a: &[A], b: &[f32]) -> f32 {
    let z = [0.0f32; 8];
    let (mut l0, mut l1, mut l2, mut l3, mut l4, mut l5, mut l6, mut l7) = (z, z, z, z, z, z, z, z);
    let ca = a.chunks_exact(LANES_F32);
    let cb = b.chunks_exact(LANES_F32);
    let (ta, tb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        mul_add8(&mut l0, &x[0..8], &y[0..8]);
        mul_add8(&mut l1, &x[8..16], &y[8..16]);
        mul_add8(&mut l2, &x[16..24], &y[16..24]);
        mul_add8(&mut l3, &x[24..32], &y[24..32]);
        mul_add8(&mut l4, &x[32..40], &y[32..40]);
        mul_add8(&mut l5, &x[40..48], &y[40..48]);
        mul_add8(&mut l6, &x[48..56], &y[48..56]);
        mul_add8(&mut l7, &x[56..64], &y[56..64]);
    }
    if !ta.is_empty() {
        let (full, part) = (ta.len() / 8, ta.len() % 8);
        // Block `i` of the tail into lanes `8i..8i + 8`; a variable per block keeps every
        // lane in its register.
        macro_rules! tail {
            ($acc:ident, $i:expr) => {
                if full > $i {
                    mul_add8(&mut $acc, &ta[8 * $i..8 * $i + 8], &tb[8 * $i..8 * $i + 8]);
                } else if full == $i && part > 0 {
                    let (mut x, mut y) = ([A::default(); 8], z);
                    x[..part].copy_from_slice(&ta[8 * $i..]);
                    y[..part].copy_from_slice(&tb[8 * $i..]);
                    mul_add8(&mut $acc, &x, &y);
                }
            };
        }
        tail!(l0, 0);
        tail!(l1, 1);
        tail!(l2, 2);
        tail!(l3, 3);
        tail!(l4, 4);
        tail!(l5, 5);
        tail!(l6, 6);
        tail!(l7, 7);
    }
    // reduce's order: lane l takes l + 32, then l + 16, l + 8 (whole blocks), then
    // l + 4, l + 2, l + 1 within block 0.
    fold8(add8(
        add8(add8(l0, l4), add8(l2, l6)),
        add8(add8(l1, l5), add8(l3, l7)),
    ))
}

/// `<a, b>` and `<a, c>` in one read of `a`, in `f32` arithmetic over 16 lanes each
/// (element `i` into lane `i % 16` in index order, each product and sum rounded to
/// `f32`; then lane `l` takes `l + 8`, `l + 4`, `l + 2`, `l + 1`), held as two 8-lane
/// variables a product: the pass that bounds the relevance of every row and its cosine
/// to a guessed first pick streams the rows once (AVX2, `d = 384`, 5,000 rows streamed:
/// 43 ns a row, against 62 for the pair as two 64-lane products and 30 for one
/// [`dot_f32`]). Within [`dot_f32_pair_bound`]; the same bits on every instruction set.
#[multiversion(targets("x86_64+avx512f+avx512vl+fma", "x86_64+avx2+fma", "aarch64+neon"))]
#[must_use]
pub fn dot_f32_pair(a: &[f32], b: &[f32], c: &[f32]) -> (f32, f32) {
    debug_assert!(a.len() == b.len() && a.len() == c.len());
    let z = [0.0f32; 8];
    let (mut b0, mut b1, mut c0, mut c1) = (z, z, z, z);
    let ca = a.chunks_exact(16);
    let ta = ca.remainder();
    for ((x, y), w) in ca.zip(b.chunks_exact(16)).zip(c.chunks_exact(16)) {
        let (x0, x1) = x.split_at(8);
        let (y0, y1) = y.split_at(8);
        let (w0, w1) = w.split_at(8);
        mul_add8(&mut b0, x0, y0);
        mul_add8(&mut c0, x0, w0);
        mul_add8(&mut b1, x1, y1);
        mul_add8(&mut c1, x1, w1);
    }
    // The tail into the lanes its elements index, padded with `+0 · +0` (see
    // `dot_f32_blocks`).
    if !ta.is_empty() {
        let at = a.len() - ta.len();
        let pad = |r: &[f32]| {
            let mut v = [0.0f32; 16];
            v[..ta.len()].copy_from_slice(&r[at..]);
            v
        };
        let (x, y, w) = (pad(a), pad(b), pad(c));
        mul_add8(&mut b0, &x[..8], &y[..8]);
        mul_add8(&mut b1, &x[8..], &y[8..]);
        mul_add8(&mut c0, &x[..8], &w[..8]);
        mul_add8(&mut c1, &x[8..], &w[8..]);
    }
    // Through `black_box`, the four sums leave the loop as the 8-lane variables they are
    // (else the compiler shuffled their lanes inside the loop to suit the reduction:
    // a third slower).
    let [b0, b1, c0, c1] = std::hint::black_box([b0, b1, c0, c1]);
    (fold8(add8(b0, b1)), fold8(add8(c0, c1)))
}

/// [`dot_f32_bound`] for [`dot_f32_pair`]: each lane sums at most `ceil(len / 16)`
/// products, then 4 levels of pairwise sums; two more roundings for margin.
#[must_use]
pub fn dot_f32_pair_bound(len: usize) -> f64 {
    gamma(len.div_ceil(16) + 7)
}

/// `γ_m = m u / (1 - m u)` for `f32` (`u = 2^-24`): the standard bound on `m` roundings.
fn gamma(m: usize) -> f64 {
    let (m, u) = (m as f64, f64::from(f32::EPSILON) / 2.0);
    m * u / (1.0 - m * u)
}

/// `acc[j] += x[j] * y[j]` for the 8 lanes of a block (`f32`, no fused multiply-add).
#[inline(always)]
fn mul_add8<A: Lane, B: Lane>(acc: &mut [f32; 8], x: &[A], y: &[B]) {
    for j in 0..8 {
        acc[j] += x[j].f32() * y[j].f32();
    }
}

/// Two 8-lane blocks added lane by lane.
#[inline(always)]
fn add8(mut a: [f32; 8], b: [f32; 8]) -> [f32; 8] {
    for j in 0..8 {
        a[j] += b[j];
    }
    a
}

/// An 8-lane block summed pairwise: lane `l` takes `l + 4`, `l + 2`, `l + 1`.
#[inline(always)]
fn fold8(mut v: [f32; 8]) -> f32 {
    for w in [4usize, 2, 1] {
        for l in 0..w {
            v[l] += v[l + w];
        }
    }
    v[0]
}

/// Products [`dot_f32_x8`] takes in one read of its row.
pub const X8: usize = 8;

/// `<a, b_j>` for eight rows `b_j` in one read of `a`, in `f32` arithmetic: element `i`
/// into lane `i % 8` of its product in index order (each product and sum rounded to
/// `f32`), then lane `l` takes `l + 4`, `l + 2`, `l + 1`. A screen, as [`dot_f32`], with
/// its own bound ([`dot_f32_x8_bound`]): a candidate's row is read once for eight picks,
/// each product in one 8-lane register, so a step is one load of `a` and eight of the
/// picks for eight multiply-adds where [`dot_f32`] loads two for one. The same bits on
/// every instruction set. Every `b_j` is `a`'s length.
#[multiversion(targets("x86_64+avx512f+avx512vl+fma", "x86_64+avx2+fma", "aarch64+neon"))]
#[must_use]
pub fn dot_f32_x8(a: &[f32], b: [&[f32]; X8]) -> [f32; X8] {
    x8(a, b)
}

/// [`dot_f32_x8`] of a row quantised to `i16` (a row of a pool's 16-bit copy, its scale
/// left out):
/// each `a_i` converted to `f32` (exact), then [`dot_f32_x8`]'s operations in its order,
/// so the bits of `dot_f32_x8` on the converted row, within [`dot_f32_x8_bound`].
#[multiversion(targets("x86_64+avx512f+avx512vl+fma", "x86_64+avx2+fma", "aarch64+neon"))]
#[must_use]
pub fn dot_i16_x8(a: &[i16], b: [&[f32]; X8]) -> [f32; X8] {
    x8(a, b)
}

/// [`dot_f32_x8`] of an `f32` row with eight rows quantised to `i16` (rows of a
/// pool's 16-bit copy, their scales left out): the bits of `dot_f32_x8` on the converted rows,
/// within [`dot_f32_x8_bound`]. A query's products with eight rows of a pool's copy in
/// one call.
#[multiversion(targets("x86_64+avx512f+avx512vl+fma", "x86_64+avx2+fma", "aarch64+neon"))]
#[must_use]
pub fn dot_f32_i16_x8(a: &[f32], b: [&[i16]; X8]) -> [f32; X8] {
    x8(a, b)
}

/// The body of [`dot_f32_x8`], [`dot_i16_x8`] and [`dot_f32_i16_x8`].
#[inline(always)]
fn x8<A: Lane, B: Lane>(a: &[A], b: [&[B]; X8]) -> [f32; X8] {
    // Eight named 8-lane variables, which the compiler keeps in registers (see
    // `dot_f32_blocks`).
    debug_assert!(b.iter().all(|r| r.len() == a.len()));
    let z = [0.0f32; 8];
    let (mut s0, mut s1, mut s2, mut s3, mut s4, mut s5, mut s6, mut s7) = (z, z, z, z, z, z, z, z);
    let [b0, b1, b2, b3, b4, b5, b6, b7] = b;
    let ca = a.chunks_exact(8);
    let ta = ca.remainder();
    let blocks = ca
        .zip(b0.chunks_exact(8))
        .zip(b1.chunks_exact(8))
        .zip(b2.chunks_exact(8))
        .zip(b3.chunks_exact(8))
        .zip(b4.chunks_exact(8))
        .zip(b5.chunks_exact(8))
        .zip(b6.chunks_exact(8))
        .zip(b7.chunks_exact(8));
    for ((((((((x, y0), y1), y2), y3), y4), y5), y6), y7) in blocks {
        mul_add8(&mut s0, x, y0);
        mul_add8(&mut s1, x, y1);
        mul_add8(&mut s2, x, y2);
        mul_add8(&mut s3, x, y3);
        mul_add8(&mut s4, x, y4);
        mul_add8(&mut s5, x, y5);
        mul_add8(&mut s6, x, y6);
        mul_add8(&mut s7, x, y7);
    }
    // The tail into the lanes its elements index, padded with `+0 · +0` (which leaves a
    // lane's bits as they are: see `dot_f32_blocks`).
    if !ta.is_empty() {
        let at = a.len() - ta.len();
        let mut x = [A::default(); 8];
        x[..ta.len()].copy_from_slice(ta);
        for (s, r) in [
            (&mut s0, b0),
            (&mut s1, b1),
            (&mut s2, b2),
            (&mut s3, b3),
            (&mut s4, b4),
            (&mut s5, b5),
            (&mut s6, b6),
            (&mut s7, b7),
        ] {
            let mut y = [B::default(); 8];
            y[..ta.len()].copy_from_slice(&r[at..]);
            mul_add8(s, &x, &y);
        }
    }
    [
        fold8(s0),
        fold8(s1),
        fold8(s2),
        fold8(s3),
        fold8(s4),
        fold8(s5),
        fold8(s6),
        fold8(s7),
    ]
}

/// [`dot_f32_bound`] for [`dot_f32_x8`]: each lane sums at most `ceil(len / 8)` products,
/// then 3 levels of pairwise sums, so `m = ceil(len / 8) + 4`, with two more roundings
/// allowed for margin.
#[must_use]
pub fn dot_f32_x8_bound(len: usize) -> f64 {
    gamma(len.div_ceil(8) + 6)
}

/// A bound on `|dot_f32(a, b) - <a, b>| / (‖a‖ ‖b‖)` for vectors of length `len`: each
/// accumulator sums at most `ceil(len / 64)` products, each product and each sum rounded
/// once, then 6 levels of pairwise sums, so the standard bound `γ_m Σ|a_i b_i|` holds
/// with `m = ceil(len / 64) + 7` and `γ_m = m u / (1 - m u)`, `u = 2^-24`
/// (`Σ|a_i b_i| <= ‖a‖ ‖b‖`); two more roundings are allowed for margin.
#[must_use]
pub fn dot_f32_bound(len: usize) -> f64 {
    gamma(len.div_ceil(LANES_F32) + 9)
}

/// `<a, b>` for an `f32` row and an `f64` vector (an orthonormal basis vector), in `f64`
/// with the same lane layout as [`dot`].
#[multiversion(targets("x86_64+avx512f+avx512vl+fma", "x86_64+avx2+fma", "aarch64+neon"))]
#[must_use]
pub fn dot_mixed(a: &[f32], b: &[f64]) -> f64 {
    lane_dot(a, b, f64::from, |y| y)
}

/// `<a, b>` for two `f64` vectors (the DPP's Cholesky rows), with the lane layout and
/// reduction of [`dot`]: the same bits on every instruction set, and no chain of
/// dependent adds the length of the vectors.
#[multiversion(targets("x86_64+avx512f+avx512vl+fma", "x86_64+avx2+fma", "aarch64+neon"))]
#[must_use]
pub fn dot_f64(a: &[f64], b: &[f64]) -> f64 {
    lane_dot(a, b, |x| x, |y| y)
}

/// A bfloat16 (raw bits) widened to `f32`: exact (bf16 is the top half of an `f32`).
#[inline(always)]
#[must_use]
pub fn bf16_to_f32(b: u16) -> f32 {
    f32::from_bits(u32::from(b) << 16)
}

/// A finite `f32` rounded to the nearest bfloat16 (ties to even), as raw bits: the
/// rounding of `half::bf16::from_f32` for finite values, in integer operations that
/// vectorise.
#[inline(always)]
#[must_use]
pub fn f32_to_bf16(x: f32) -> u16 {
    let b = x.to_bits();
    ((b + 0x7fff + ((b >> 16) & 1)) >> 16) as u16
}

/// An IEEE binary16 (raw bits) widened to `f32`, exactly, for every finite value
/// (subnormals included; infinities and NaNs never reach here: pools are checked finite).
/// Written with integer operations and one select so it vectorises in the dot kernels.
#[inline(always)]
#[must_use]
pub fn f16_to_f32(h: u16) -> f32 {
    let h = u32::from(h);
    let sign = (h & 0x8000) << 16;
    let em = h & 0x7fff;
    // A normal half: re-bias the exponent (15 -> 127) under the shifted mantissa.
    let normal = (em << 13) + (112 << 23);
    // A subnormal half (exponent field 0): mantissa · 2^-24, exact in f32.
    let sub = (em as f32 * (1.0 / 16_777_216.0)).to_bits();
    f32::from_bits(sign | if em < 0x400 { sub } else { normal })
}

/// `<a, b>` for a bfloat16 row (raw bits) and an `f64` vector, in `f64` with the lane
/// layout and reduction of [`dot`]: each element widens exactly, so the result is the
/// same bits on every instruction set (the half-precision copy's kernel rows).
#[multiversion(targets("x86_64+avx512f+avx512vl+fma", "x86_64+avx2+fma", "aarch64+neon"))]
#[must_use]
pub fn dot_bf16(a: &[u16], b: &[f64]) -> f64 {
    lane_dot(a, b, |x| f64::from(bf16_to_f32(x)), |y| y)
}

/// [`dot_bf16`] for an IEEE binary16 row.
#[multiversion(targets("x86_64+avx512f+avx512vl+fma", "x86_64+avx2+fma", "aarch64+neon"))]
#[must_use]
pub fn dot_f16(a: &[u16], b: &[f64]) -> f64 {
    lane_dot(a, b, |x| f64::from(f16_to_f32(x)), |y| y)
}

/// `sum_i a[i]` over `LANES` `f64` accumulators (the lane layout of [`dot`]): the plain
/// streaming read the benches compare the kernel-row passes with.
#[multiversion(targets("x86_64+avx512f+avx512vl+fma", "x86_64+avx2+fma", "aarch64+neon"))]
#[must_use]
pub fn sum(a: &[f32]) -> f64 {
    lane_fold(a, |acc, v| acc + v)
}

/// `sum_j max(0, s[j] - cur[j])` (a facility-location gain), each term exact in `f64`,
/// over `LANES` accumulators with the fixed reduction of [`dot`].
#[multiversion(targets("x86_64+avx512f+avx512vl+fma", "x86_64+avx2+fma", "aarch64+neon"))]
#[must_use]
pub fn sum_pos_diff(s: &[f32], cur: &[f32]) -> f64 {
    debug_assert_eq!(s.len(), cur.len());
    let mut acc = [0.0f64; LANES];
    let cs = s.chunks_exact(LANES);
    let cc = cur.chunks_exact(LANES);
    let (ts, tc) = (cs.remainder(), cc.remainder());
    for (x, y) in cs.zip(cc) {
        for l in 0..LANES {
            acc[l] += (f64::from(x[l]) - f64::from(y[l])).max(0.0);
        }
    }
    for l in 0..ts.len() {
        acc[l] += (f64::from(ts[l]) - f64::from(tc[l])).max(0.0);
    }
    reduce(acc)
}

/// `y[i] += alpha * x[i]` for an `f32` `x` (rows of the GP's stored `V`) into `f64`.
#[multiversion(targets("x86_64+avx512f+avx512vl+fma", "x86_64+avx2+fma", "aarch64+neon"))]
pub fn axpy_mixed(alpha: f64, x: &[f32], y: &mut [f64]) {
    debug_assert_eq!(x.len(), y.len());
    for (yi, &xi) in y.iter_mut().zip(x) {
        *yi = alpha.mul_add(f64::from(xi), *yi);
    }
}

/// `y[i] -= sum_s l[s] * rows[s][i]` over up to four `f32` rows at once (one load and
/// store of `y` per four rows: the GP update's `l^T V`).
#[multiversion(targets("x86_64+avx512f+avx512vl+fma", "x86_64+avx2+fma", "aarch64+neon"))]
pub fn sub_ltv4(l: [f64; 4], r0: &[f32], r1: &[f32], r2: &[f32], r3: &[f32], y: &mut [f64]) {
    let n = y.len();
    let (r0, r1, r2, r3) = (&r0[..n], &r1[..n], &r2[..n], &r3[..n]);
    for i in 0..n {
        let mut acc = y[i];
        acc = (-l[0]).mul_add(f64::from(r0[i]), acc);
        acc = (-l[1]).mul_add(f64::from(r1[i]), acc);
        acc = (-l[2]).mul_add(f64::from(r2[i]), acc);
        acc = (-l[3]).mul_add(f64::from(r3[i]), acc);
        y[i] = acc;
    }
}

/// `v[i] = (v[i] / n) as f32`, the quotient taken in `f64` and rounded once.
#[multiversion(targets("x86_64+avx512f+avx512vl+fma", "x86_64+avx2+fma", "aarch64+neon"))]
pub fn div_round(v: &mut [f32], n: f64) {
    for x in v.iter_mut() {
        *x = (f64::from(*x) / n) as f32;
    }
}

/// One row of a unit copy with what is read off it, in one loop: `out = (row / n) as f32`
/// (the bits of [`div_round`]), and `(<out, out>, <out, q>)` with the lane layout and
/// reduction of [`dot`] (its bits; `<out, q>` is 0 without `q`).
#[multiversion(targets("x86_64+avx512f+avx512vl+fma", "x86_64+avx2+fma", "aarch64+neon"))]
pub fn unit_row(row: &[f32], n: f64, out: &mut [f32], q: Option<&[f32]>) -> (f64, f64) {
    debug_assert_eq!(row.len(), out.len());
    let mut uu = [0.0f64; LANES];
    let mut uq = [0.0f64; LANES];
    let split = row.len() - row.len() % LANES;
    let (head, tail) = row.split_at(split);
    let (ohead, otail) = out.split_at_mut(split);
    match q {
        Some(q) => {
            let (qhead, qtail) = q.split_at(split);
            let chunks = head.chunks_exact(LANES).zip(ohead.chunks_exact_mut(LANES));
            for ((x, o), y) in chunks.zip(qhead.chunks_exact(LANES)) {
                for l in 0..LANES {
                    o[l] = (f64::from(x[l]) / n) as f32;
                    let u = f64::from(o[l]);
                    uu[l] = u.mul_add(u, uu[l]);
                    uq[l] = u.mul_add(f64::from(y[l]), uq[l]);
                }
            }
            for l in 0..tail.len() {
                otail[l] = (f64::from(tail[l]) / n) as f32;
                let u = f64::from(otail[l]);
                uu[l] = u.mul_add(u, uu[l]);
                uq[l] = u.mul_add(f64::from(qtail[l]), uq[l]);
            }
        }
        None => {
            for (x, o) in head.chunks_exact(LANES).zip(ohead.chunks_exact_mut(LANES)) {
                for l in 0..LANES {
                    o[l] = (f64::from(x[l]) / n) as f32;
                    let u = f64::from(o[l]);
                    uu[l] = u.mul_add(u, uu[l]);
                }
            }
            for l in 0..tail.len() {
                otail[l] = (f64::from(tail[l]) / n) as f32;
                let u = f64::from(otail[l]);
                uu[l] = u.mul_add(u, uu[l]);
            }
        }
    }
    (reduce(uu), reduce(uq))
}

/// The one lane loop of every dot product here: `sum_i wa(a[i]) * wb(b[i])` over
/// `LANES` `f64` accumulators (element `i` into lane `i % LANES`, fused multiply-adds in
/// index order), then [`reduce`]. Inlined into each instruction-set version of its
/// callers, so every one of them runs the same operations in the same order.
#[inline(always)]
fn lane_dot<A: Copy, B: Copy>(a: &[A], b: &[B], wa: impl Fn(A) -> f64, wb: impl Fn(B) -> f64) -> f64 {
    debug_assert_eq!(a.len(), b.len());
    let mut acc = [0.0f64; LANES];
    let ca = a.chunks_exact(LANES);
    let cb = b.chunks_exact(LANES);
    let (ta, tb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for l in 0..LANES {
            acc[l] = wa(x[l]).mul_add(wb(y[l]), acc[l]);
        }
    }
    for l in 0..ta.len() {
        acc[l] = wa(ta[l]).mul_add(wb(tb[l]), acc[l]);
    }
    reduce(acc)
}

/// [`lane_dot`] over one row: `acc[l] = f(acc[l], a[i] as f64)` for element `i` in lane
/// `i % LANES`, in index order, then [`reduce`]; each value widened once.
#[inline(always)]
fn lane_fold(a: &[f32], f: impl Fn(f64, f64) -> f64) -> f64 {
    let mut acc = [0.0f64; LANES];
    let ca = a.chunks_exact(LANES);
    let ta = ca.remainder();
    for x in ca {
        for l in 0..LANES {
            acc[l] = f(acc[l], f64::from(x[l]));
        }
    }
    for l in 0..ta.len() {
        acc[l] = f(acc[l], f64::from(ta[l]));
    }
    reduce(acc)
}

/// The fixed pairwise reduction of every lane loop here (`N` a power of two): lane `l`
/// takes lane `l + w` for `w = N/2, N/4, ..., 1`.
#[inline(always)]
fn reduce<T: Copy + std::ops::AddAssign, const N: usize>(mut acc: [T; N]) -> T {
    let mut w = N;
    while w > 1 {
        w /= 2;
        for l in 0..w {
            acc[l] += acc[l + w];
        }
    }
    acc[0]
}

/// `y[i] += alpha * x[i]` (for the `f64` bases and running sums of the selectors).
#[multiversion(targets("x86_64+avx512f+avx512vl+fma", "x86_64+avx2+fma", "aarch64+neon"))]
pub fn axpy(alpha: f64, x: &[f64], y: &mut [f64]) {
    debug_assert_eq!(x.len(), y.len());
    for (yi, &xi) in y.iter_mut().zip(x) {
        *yi = alpha.mul_add(xi, *yi);
    }
}

/// The unit vector `row · inv` orthogonalised against `basis` by modified Gram–Schmidt,
/// applied twice ("twice is enough"), normalised; `None` when its squared residual is at
/// most `eps` (a direction already in the span adds nothing). GRN's basis grows by it on
/// every backend.
#[must_use]
pub fn orthonormal_extension(row: &[f32], inv: f64, basis: &[Vec<f64>], eps: f64) -> Option<Vec<f64>> {
    let mut v: Vec<f64> = row.iter().map(|&a| f64::from(a) * inv).collect();
    for _ in 0..2 {
        for u in basis {
            let p: f64 = v.iter().zip(u).map(|(a, b)| a * b).sum();
            axpy(-p, u, &mut v);
        }
    }
    let nn: f64 = v.iter().map(|a| a * a).sum();
    if nn > eps {
        let s = 1.0 / nn.sqrt();
        v.iter_mut().for_each(|a| *a *= s);
        Some(v)
    } else {
        None
    }
}

/// Rows handled by one parallel task in [`matvec`]: large enough that scheduling costs
/// are small against a 1024-d dot, small enough to balance two to many cores.
const ROWS_PER_TASK: usize = 512;

/// `out[i] = <row_i(m), y>` for the row-major matrix `m` with `dim` columns, in parallel.
/// Every entry equals [`dot`]`(row_i, y)` bit for bit.
pub fn matvec(m: &[f32], dim: usize, y: &[f32], out: &mut [f64]) {
    debug_assert_eq!(m.len(), out.len() * dim);
    debug_assert_eq!(y.len(), dim);
    if out.len() * dim < 1 << 20 {
        for (r, v) in out.iter_mut().enumerate() {
            *v = dot(&m[r * dim..(r + 1) * dim], y);
        }
        return;
    }
    out.par_chunks_mut(ROWS_PER_TASK).enumerate().for_each(|(c, o)| {
        let base = c * ROWS_PER_TASK;
        for (k, v) in o.iter_mut().enumerate() {
            let r = base + k;
            *v = dot(&m[r * dim..(r + 1) * dim], y);
        }
    });
}

/// `[j][i] = <row_i(m), ys[j]>` for every vector `ys[j]`, in one read of `m`: each block
/// of rows is taken against every vector while it is in cache. Every entry equals
/// [`dot`]`(row_i, ys[j])` (and so [`matvec`]) bit for bit.
#[must_use]
pub fn matvec_many(m: &[f32], dim: usize, ys: &[&[f32]]) -> Vec<Vec<f64>> {
    let n = m.len() / dim;
    let mut out = vec![Vec::with_capacity(n); ys.len()];
    const BLOCK: usize = 32;
    let blocks: Vec<Vec<f64>> = (0..n.div_ceil(BLOCK))
        .into_par_iter()
        .map(|b| {
            let rows = b * BLOCK..((b + 1) * BLOCK).min(n);
            let mut v = Vec::with_capacity(rows.len() * ys.len());
            for y in ys {
                v.extend(rows.clone().map(|r| dot(&m[r * dim..(r + 1) * dim], y)));
            }
            v
        })
        .collect();
    for (b, v) in blocks.iter().enumerate() {
        let len = BLOCK.min(n - b * BLOCK);
        for (j, o) in out.iter_mut().enumerate() {
            o.extend_from_slice(&v[j * len..(j + 1) * len]);
        }
    }
    out
}

/// `C[i][j] = <a_i, b_j>` for row-major `a` (`m × d`) and `b` (`n × d`), written into the
/// row-major block `c` whose rows are `ldc` apart. Uses the blocked GEMM of `faer`.
pub fn gemm_abt(a: &[f32], b: &[f32], d: usize, c: &mut [f32], ldc: usize, parallel: bool) {
    use faer::{linalg::matmul::matmul, Accum, MatMut, MatRef, Par};
    let m = a.len() / d;
    let n = b.len() / d;
    if m == 0 || n == 0 {
        return;
    }
    let lhs = MatRef::from_row_major_slice(a, m, d);
    let rhs = MatRef::from_row_major_slice(b, n, d).transpose();
    let rows_needed = (m - 1) * ldc + n;
    // faer 0.24's `from_row_major_slice_with_stride_mut` builds a column-major view (and
    // writes out of bounds); the transpose of a column-major view is the row-major one.
    let dst =
        MatMut::from_column_major_slice_with_stride_mut(&mut c[..rows_needed], n, m, ldc).transpose_mut();
    let par = if parallel { Par::rayon(0) } else { Par::Seq };
    matmul(dst, Accum::Replace, lhs, rhs, 1.0f32, par);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    /// An `f32` product by its definition over `lanes` lanes: element `i` into lane
    /// `i % lanes` in index order, each product and sum rounded to `f32`, then lane `l`
    /// takes `l + lanes / 2`, ..., `l + 1`.
    fn lane_definition(a: &[f32], b: &[f32], lanes: usize) -> f32 {
        let mut acc = vec![0.0f32; lanes];
        for i in 0..a.len() {
            acc[i % lanes] += a[i] * b[i];
        }
        let mut w = lanes;
        while w > 1 {
            w /= 2;
            for l in 0..w {
                acc[l] += acc[l + w];
            }
        }
        acc[0]
    }

    /// A row of `d` values of the kind `case` names: Gaussian (0), of wide range (1),
    /// subnormal (2), zeros of both signs (3), with infinities (4), with one NaN (5).
    fn hostile_row(rng: &mut Rng, d: usize, case: usize) -> Vec<f32> {
        (0..d)
            .map(|i| match case {
                0 => rng.normal() as f32,
                1 => (rng.normal() * 10f64.powi((i % 9) as i32 * 8 - 32)) as f32,
                2 => (rng.normal() * 1e-41) as f32,
                3 if rng.normal() < 0.0 => -0.0,
                3 => 0.0,
                4 if i % 13 == 5 => f32::INFINITY,
                5 if i == d / 2 => f32::NAN,
                _ => rng.normal() as f32,
            })
            .collect()
    }

    /// The fused pair is its 16-lane definition (and within its bound of the exact
    /// products), `sum_sq(a)` is `dot(a, a)` and `sum(a)` is `dot(a, 1)`, bit for bit, on
    /// odd lengths (tails shorter than a lane block, several
    /// blocks) and on values of wide range.
    #[test]
    fn fused_products_are_their_definitions() {
        let mut rng = Rng::new(11);
        for &d in &[1usize, 5, 63, 64, 65, 191, 384, 1027] {
            for scale in [1e-3f64, 1.0, 1e4] {
                let v = |rng: &mut Rng| -> Vec<f32> {
                    (0..d)
                        .map(|i| (rng.normal() * scale * 10f64.powi((i % 5) as i32 - 2)) as f32)
                        .collect()
                };
                let (a, b, c) = (v(&mut rng), v(&mut rng), v(&mut rng));
                let (ab, ac) = dot_f32_pair(&a, &b, &c);
                let (wb, wc) = (lane_definition(&a, &b, 16), lane_definition(&a, &c, 16));
                assert_eq!(ab.to_bits(), wb.to_bits(), "d {d} scale {scale}");
                assert_eq!(ac.to_bits(), wc.to_bits(), "d {d} scale {scale}");
                for (got, r) in [(ab, &b), (ac, &c)] {
                    let exact: f64 = a.iter().zip(r).map(|(&x, &y)| f64::from(x) * f64::from(y)).sum();
                    let abs: f64 = a
                        .iter()
                        .zip(r)
                        .map(|(&x, &y)| (f64::from(x) * f64::from(y)).abs())
                        .sum();
                    let err = (f64::from(got) - exact).abs();
                    assert!(err <= dot_f32_pair_bound(d) * abs, "d {d}: error {err}");
                }
                assert_eq!(sum_sq(&a).to_bits(), dot(&a, &a).to_bits(), "d {d} scale {scale}");
                let ones = vec![1.0f32; d];
                assert_eq!(sum(&a).to_bits(), dot(&a, &ones).to_bits(), "d {d} scale {scale}");
            }
        }
    }

    /// `dot_f32` is its definition, evaluated directly: element `i` into lane `i % 64` in
    /// index order, each product and sum rounded to `f32`, then the lanes summed pairwise
    /// (lane `l` takes `l + 32`, `l + 16`, ..., `l + 1`). Its two written forms (the lane
    /// array, the 8-lane blocks) and the version this machine dispatches to give those
    /// bits, on lengths with and without a tail, values of wide range, subnormals, zeros
    /// of both signs and infinities (NaN where one goes in).
    #[test]
    fn dot_f32_is_its_lane_definition() {
        let def = |a: &[f32], b: &[f32]| lane_definition(a, b, 64);
        let mut rng = Rng::new(17);
        for &d in &[1usize, 7, 8, 9, 63, 64, 65, 100, 127, 129, 300, 384, 777, 1024] {
            for case in 0..6 {
                let v = |rng: &mut Rng| hostile_row(rng, d, case);
                let (a, b) = (v(&mut rng), v(&mut rng));
                let want = def(&a, &b);
                for (form, got) in [
                    ("dispatched", dot_f32(&a, &b)),
                    ("lanes", dot_f32_lanes(&a, &b)),
                    ("blocks", dot_f32_blocks(&a, &b)),
                ] {
                    if want.is_nan() {
                        assert!(got.is_nan(), "{form}, d {d}, case {case}: {got}");
                    } else {
                        assert_eq!(
                            got.to_bits(),
                            want.to_bits(),
                            "{form}, d {d}, case {case}: {got} vs {want}"
                        );
                    }
                }
            }
        }
    }

    /// `dot_f32_x8` is its definition, evaluated directly for each of its eight rows:
    /// element `i` into lane `i % 8` in index order, each product and sum rounded to
    /// `f32`, then lane `l` takes `l + 4`, `l + 2`, `l + 1`; on lengths with and without a
    /// tail and the values of `dot_f32_is_its_lane_definition`, rows repeated among the
    /// eight included. On Gaussian rows each product is within
    /// `dot_f32_x8_bound(len) · Σ|a_i b_i|` of the exact `f64` sum.
    #[test]
    fn dot_f32_x8_is_its_lane_definition_within_its_bound() {
        let def = |a: &[f32], b: &[f32]| lane_definition(a, b, 8);
        let mut rng = Rng::new(23);
        for &d in &[1usize, 3, 7, 8, 9, 15, 63, 64, 65, 100, 383, 384, 777, 1024] {
            for case in 0..6 {
                let v = |rng: &mut Rng| hostile_row(rng, d, case);
                let a = v(&mut rng);
                let rows: Vec<Vec<f32>> = (0..6).map(|_| v(&mut rng)).collect();
                // Eight rows, two of them repeats (a padded group).
                let b: [&[f32]; X8] = std::array::from_fn(|j| rows[j % 6].as_slice());
                let got = dot_f32_x8(&a, b);
                for j in 0..X8 {
                    let want = def(&a, b[j]);
                    if want.is_nan() {
                        assert!(got[j].is_nan(), "d {d}, case {case}, row {j}: {}", got[j]);
                    } else {
                        assert_eq!(got[j].to_bits(), want.to_bits(), "d {d}, case {case}, row {j}");
                    }
                    if case == 0 {
                        let exact: f64 = a
                            .iter()
                            .zip(b[j])
                            .map(|(&x, &y)| f64::from(x) * f64::from(y))
                            .sum();
                        let scale: f64 = a
                            .iter()
                            .zip(b[j])
                            .map(|(&x, &y)| (f64::from(x) * f64::from(y)).abs())
                            .sum();
                        let err = (f64::from(got[j]) - exact).abs();
                        assert!(
                            err <= dot_f32_x8_bound(d) * scale,
                            "d {d}, row {j}: error {err}, scale {scale}"
                        );
                    }
                }
            }
        }
    }

    /// The kernels that read a row quantised to `i16` give the bits of the `f32` kernels
    /// on the row converted (their bounds are those kernels' own), dispatched and in both
    /// written forms of the single product: every length from 1 to 70 and a few longer,
    /// `i16` rows with their extremes, the other rows hostile.
    #[test]
    fn the_i16_screens_are_the_f32_screens_of_the_converted_rows() {
        let mut rng = Rng::new(29);
        let same = |got: f32, want: f32, what: &str| {
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "{what}: {got} against {want}"
            );
        };
        let lens: Vec<usize> = (1..=70).chain([127, 383, 384, 385, 1024, 1031]).collect();
        for &d in &lens {
            for case in 0..6 {
                let q = |rng: &mut Rng| -> Vec<i16> {
                    (0..d)
                        .map(|i| match (i + case) % 7 {
                            0 => i16::MAX,
                            1 => i16::MIN,
                            2 => 0,
                            _ => (rng.normal() * 9000.0).clamp(-32767.0, 32767.0) as i16,
                        })
                        .collect()
                };
                let wide = |a: &[i16]| a.iter().map(|&v| f32::from(v)).collect::<Vec<f32>>();
                let a = q(&mut rng);
                let b = hostile_row(&mut rng, d, case);
                let what = format!("d {d}, case {case}");
                let want = dot_f32(&wide(&a), &b);
                same(dot_i16_f32(&a, &b), want, &format!("dot_i16_f32, {what}"));
                // Both written forms, whichever one this host dispatches to.
                same(dot_f32_lanes(&a, &b), want, &format!("lanes of i16, {what}"));
                same(dot_f32_blocks(&a, &b), want, &format!("blocks of i16, {what}"));
                let rows: Vec<Vec<f32>> = (0..X8).map(|_| hostile_row(&mut rng, d, case)).collect();
                let rb: [&[f32]; X8] = std::array::from_fn(|j| rows[j].as_slice());
                let got = dot_i16_x8(&a, rb);
                let want = dot_f32_x8(&wide(&a), rb);
                for j in 0..X8 {
                    same(got[j], want[j], &format!("dot_i16_x8, {what}, row {j}"));
                }
                let qs: Vec<Vec<i16>> = (0..X8).map(|_| q(&mut rng)).collect();
                let ws: Vec<Vec<f32>> = qs.iter().map(|r| wide(r)).collect();
                let got = dot_f32_i16_x8(&b, std::array::from_fn(|j| qs[j].as_slice()));
                let want = dot_f32_x8(&b, std::array::from_fn(|j| ws[j].as_slice()));
                for j in 0..X8 {
                    same(got[j], want[j], &format!("dot_f32_i16_x8, {what}, row {j}"));
                }
            }
        }
    }

    #[test]
    fn dot_and_matvec_match_f64_and_each_other() {
        let mut rng = Rng::new(3);
        for &d in &[1usize, 7, 31, 33, 100, 1027] {
            let n = 37;
            let m: Vec<f32> = (0..n * d).map(|_| rng.normal() as f32).collect();
            let y: Vec<f32> = (0..d).map(|_| rng.normal() as f32).collect();
            let mut out = vec![f64::NAN; n];
            matvec(&m, d, &y, &mut out);
            for i in 0..n {
                let row = &m[i * d..(i + 1) * d];
                let exact: f64 = row
                    .iter()
                    .zip(&y)
                    .map(|(&a, &b)| f64::from(a) * f64::from(b))
                    .sum();
                let scale: f64 = row
                    .iter()
                    .zip(&y)
                    .map(|(&a, &b)| (f64::from(a) * f64::from(b)).abs())
                    .sum();
                assert!(
                    (out[i] - exact).abs() <= 1e-13 * scale + 1e-300,
                    "d={d} row {i}: {} vs {exact}",
                    out[i]
                );
                assert_eq!(
                    out[i].to_bits(),
                    dot(row, &y).to_bits(),
                    "matvec and dot differ at row {i}"
                );
            }
            let mut c = vec![f32::NAN; n * (n + 3)];
            gemm_abt(&m, &m, d, &mut c, n + 3, true);
            for i in 0..n {
                for j in 0..n {
                    let exact: f64 = (0..d)
                        .map(|t| f64::from(m[i * d + t]) * f64::from(m[j * d + t]))
                        .sum();
                    let got = f64::from(c[i * (n + 3) + j]);
                    assert!(
                        (got - exact).abs() <= 1e-4 * (1.0 + exact.abs()) * (d as f64).sqrt(),
                        "gemm ({i},{j}) {got} vs {exact}"
                    );
                }
                assert!(c[i * (n + 3) + n].is_nan(), "gemm wrote outside its block");
            }
        }
    }
}
