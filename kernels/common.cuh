// Shared definitions for ctxprune's CUDA kernels (compiled at run time by NVRTC).
// NVRTC has no INFINITY macro and no standard headers by default: constants are spelled
// out as bit patterns here, and f16/bf16 loads are written with PTX/bit operations so no
// CUDA header (and no include path) is needed at run time.
#pragma once

#define CTX_INF_F __int_as_float(0x7f800000)
#define CTX_NEG_INF_F __int_as_float(0xff800000)
#define CTX_NEG_INF_D __longlong_as_double(0xfff0000000000000LL)

// Ties go to the lower index on every backend (SPEC: deterministic selection).
__device__ __forceinline__ bool ctx_better(float a, int ia, float b, int ib) {
    return a > b || (a == b && ia < ib);
}
__device__ __forceinline__ bool ctx_better_d(double a, long long ia, double b, long long ib) {
    return a > b || (a == b && ia < ib);
}

// Element loaders: every input dtype is read as f32 and accumulated in f32.
struct LdF32 {
    typedef float T;
    static __device__ __forceinline__ float ld(const float* p, long long i) { return p[i]; }
};
struct LdF16 {
    typedef unsigned short T;
    static __device__ __forceinline__ float ld(const unsigned short* p, long long i) {
        unsigned short h = p[i];
#ifdef CTX_EMU
        // The emulator (kernels/emu) has no PTX: the same exact conversion in C++.
        return ctx_emu_half_to_float(h);
#else
        float f;
        asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
        return f;
#endif
    }
};
struct LdBF16 {
    typedef unsigned short T;
    static __device__ __forceinline__ float ld(const unsigned short* p, long long i) {
        return __uint_as_float(((unsigned int)p[i]) << 16);
    }
};

// exp(x) in f32 bit for bit as the CPU computes it (src/similarity.rs `exp_f32`): Cephes'
// range reduction by ln 2 and degree-5 polynomial with one fma per step, 0 below -87.33654,
// saturating at exp(88.72283). Kernel values then agree with the CPU exactly.
__device__ __forceinline__ float ctx_exp_f32(float x) {
    const float LOG2E = 1.44269504088896340736f;
    const float C1 = 0.6933594f;
    const float C2 = -2.1219444e-4f;
    bool under = x < -87.33654f;
    x = fminf(fmaxf(x, -87.33654f), 88.72283f);
    float n = roundf(x * LOG2E);
    float r = x - n * C1 - n * C2;
    float y = 1.9875691e-4f;
    y = fmaf(y, r, 1.3982e-3f);
    y = fmaf(y, r, 8.333452e-3f);
    y = fmaf(y, r, 4.1665796e-2f);
    y = fmaf(y, r, 1.6666665e-1f);
    y = fmaf(y, r, 0.5f);
    float q = fmaf(y, r * r, r) + 1.0f;
    float scale = __uint_as_float(((unsigned int)((int)n + 127)) << 23);
    return under ? 0.0f : q * scale;
}

// The similarity kernels of src/similarity.rs, on a cosine `c` (clamped to [-1, 1]), the
// same operations in the same order as the CPU's. A NaN stays NaN (never clamped into a
// value). kind 0 cosine; 1 vMF exp(p (c - 1)), p = kappa; 2 RBF exp(-(1 - c) p), p = 1 / l2;
// 3 Matern-5/2 with t = sqrt(5) sqrt((1 - c) p), p = 2 / l2: (1 + t + t^2 / 3) exp(-t).
// kind -1: the raw value, unclamped (plain dot products).
__device__ __forceinline__ float ctx_kernel(float c, int kind, float p) {
    if (kind < 0 || c != c) return c;
    c = fminf(fmaxf(c, -1.0f), 1.0f);
    if (kind == 1) return ctx_exp_f32(p * (c - 1.0f));
    if (kind == 2) return ctx_exp_f32(-(1.0f - c) * p);
    if (kind == 3) {
        float t = sqrtf(5.0f) * sqrtf((1.0f - c) * p);
        return (1.0f + t + t * t / 3.0f) * ctx_exp_f32(-t);
    }
    return c;
}

// A (value, index) pair packed so that one unsigned 64-bit atomicMax picks the largest
// value, ties to the lower index: the float's bits mapped to an order-preserving unsigned
// in the high word, the complement of the index in the low word. 0 means "none".
// -0 is packed as +0, so the two tie as they do on the CPU.
__device__ __forceinline__ unsigned long long ctx_pack(float v, unsigned int i) {
    unsigned int u = v == 0.0f ? 0u : __float_as_uint(v);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ((unsigned long long)u << 32) | (unsigned long long)(0xffffffffu - i);
}

// Warp-wide sum of a float.
__device__ __forceinline__ float ctx_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Dot products as the CPU computes them (src/backend/cpu/mod.rs `dot`, `dot_mixed`,
// `sum_pos_diff`), bit for bit, on the 16 lanes of a half-warp: lane l accumulates elements
// l, l + 16, l + 32, ... in f64 (one fma per product), then the lanes reduce pairwise in
// the CPU's order (l + 8, l + 4, l + 2, l + 1). Lane 0 of the half-warp holds the CPU's sum.
// Every lane of the warp must call them (a half-warp without a row passes d = 0).
__device__ __forceinline__ double ctx_hw_reduce(double acc) {
    for (int o = 8; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    return acc;
}
__device__ __forceinline__ double ctx_dot16(const float* x, const float* y, long long d) {
    double acc = 0.0;
    for (long long k = threadIdx.x & 15; k < d; k += 16) acc = fma((double)x[k], (double)y[k], acc);
    return ctx_hw_reduce(acc);
}
// <x, u> for an f64 vector u (a GRN basis vector).
__device__ __forceinline__ double ctx_dot16_fd(const float* x, const double* u, long long d) {
    double acc = 0.0;
    for (long long k = threadIdx.x & 15; k < d; k += 16) acc = fma((double)x[k], u[k], acc);
    return ctx_hw_reduce(acc);
}
// sum_k max(0, s[k] - cur[k]) (a facility-location gain).
__device__ __forceinline__ double ctx_sum16_pos_diff(const float* s, const float* cur, long long d) {
    double acc = 0.0;
    for (long long k = threadIdx.x & 15; k < d; k += 16) acc += fmax((double)s[k] - (double)cur[k], 0.0);
    return ctx_hw_reduce(acc);
}
// One half-warp per row: the row of this thread's half-warp, or -1 past the end; and
// whether this thread is its row's lane 0 (the one that writes).
__device__ __forceinline__ long long ctx_hw_row(long long n) {
    long long row = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 4;
    return row < n ? row : -1;
}
__device__ __forceinline__ bool ctx_hw_lead() { return (threadIdx.x & 15) == 0; }
// cos(i, p) of two rows of the row-major pool x (d columns) with inverse norms inv, in f64,
// as the CPU's `dot(x_i, x_p) * inv[i] * inv[p]`; i < 0: a half-warp without a row (0).
__device__ __forceinline__ double ctx_cos_rows(const float* x, int d, const double* inv, long long i,
                                               long long p) {
    double s = ctx_dot16(x + (i < 0 ? p : i) * d, x + p * d, i < 0 ? 0 : d);
    return i < 0 ? 0.0 : s * inv[i] * inv[p];
}

// Grid-wide argmax of (v, i) in one launch: every thread of every block calls this once
// (i < 0: no candidate; NaN values are never candidates). Each block reduces to one pair
// in pv/pi; the last block to finish (atomic ticket) reduces the partials, writes
// out[0] = value, out[1] = index (-1 when none) and re-arms the ticket. Largest value
// wins, ties to the lower index. Needs blockDim.x == CTX_TPB.
#define CTX_TPB 256
__device__ __forceinline__ void ctx_pick(double& bv, long long& bi, double v, long long i) {
    if (i >= 0 && v == v && (bi < 0 || v > bv || (v == bv && i < bi))) {
        bv = v;
        bi = i;
    }
}
// The best (v, i) of the block, returned to every thread.
__device__ __forceinline__ void ctx_block_best(double& v, long long& i) {
    __shared__ double sv[CTX_TPB];
    __shared__ long long si[CTX_TPB];
    int t = threadIdx.x;
    sv[t] = v;
    si[t] = i;
    __syncthreads();
    for (int o = CTX_TPB / 2; o > 0; o >>= 1) {
        if (t < o) {
            double v2 = sv[t];
            long long i2 = si[t];
            ctx_pick(v2, i2, sv[t + o], si[t + o]);
            sv[t] = v2;
            si[t] = i2;
        }
        __syncthreads();
    }
    v = sv[0];
    i = si[0];
    __syncthreads();
}
__device__ __forceinline__ void ctx_grid_argmax(double v, long long i, double* pv, long long* pi, unsigned int* ticket,
                                double* out) {
    __shared__ bool last;
    double bv = 0.0;
    long long bi = -1;
    ctx_pick(bv, bi, v, i);
    ctx_block_best(bv, bi);
    if (threadIdx.x == 0) {
        pv[blockIdx.x] = bv;
        pi[blockIdx.x] = bi;
        __threadfence();
        unsigned int k = atomicAdd(ticket, 1u);
        last = (k == gridDim.x - 1);
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    bv = 0.0;
    bi = -1;
    const volatile double* vpv = pv;
    const volatile long long* vpi = pi;
    for (unsigned int b = threadIdx.x; b < gridDim.x; b += CTX_TPB) ctx_pick(bv, bi, vpv[b], vpi[b]);
    ctx_block_best(bv, bi);
    if (threadIdx.x == 0) {
        out[0] = bv;
        out[1] = (double)bi;
        *ticket = 0u;
    }
}

// Is candidate i still selectable: alive, and within the remaining token budget
// (cost == 0 pointer: no budget).
__device__ __forceinline__ bool ctx_open(const unsigned char* alive, const double* cost, double remaining,
                                         long long i) {
    return alive[i] && (cost == 0 || cost[i] <= remaining);
}
