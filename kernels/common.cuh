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

// The similarity kernels of src/similarity.rs, on a cosine `c` (clamped to [-1, 1]).
// kind 0 cosine; 1 vMF exp(p (c - 1)), p = kappa; 2 RBF exp(-(1 - c) p), p = 1 / l2;
// 3 Matern-5/2 with t = sqrt(5 (1 - c) p), p = 2 / l2: (1 + t + t^2 / 3) exp(-t).
// kind -1: the raw value, unclamped (plain dot products).
__device__ __forceinline__ float ctx_kernel(float c, int kind, float p) {
    if (kind < 0) return c;
    c = fminf(fmaxf(c, -1.0f), 1.0f);
    if (kind == 1) return expf(p * (c - 1.0f));
    if (kind == 2) return expf(-(1.0f - c) * p);
    if (kind == 3) {
        float t = 2.2360679775f * sqrtf((1.0f - c) * p);
        return (1.0f + t + t * t / 3.0f) * expf(-t);
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
__device__ __forceinline__ double ctx_warp_sum_d(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// <x_row, y> with the products and the sum in f64 (the CPU reference accumulates in f64;
// greedy residuals are compared with floors of 1e-10 and below). Every lane gets the sum.
__device__ __forceinline__ double ctx_warp_dot_d(const float* x, const float* y, int d) {
    double acc = 0.0;
    for (int k = threadIdx.x & 31; k < d; k += 32) acc = fma((double)x[k], (double)y[k], acc);
    return ctx_warp_sum_d(acc);
}
// cos(i, p) of two rows of the row-major pool x (d columns) with inverse norms inv, in f64.
__device__ __forceinline__ double ctx_cos_rows(const float* x, int d, const double* inv, long long i,
                                               long long p) {
    return ctx_warp_dot_d(x + i * d, x + p * d, d) * inv[i] * inv[p];
}
// <x_row, u> for an f64 vector u (a GRN basis vector), in f64.
__device__ __forceinline__ double ctx_warp_dot_fd(const float* x, const double* u, int d) {
    double acc = 0.0;
    for (int k = threadIdx.x & 31; k < d; k += 32) acc = fma((double)x[k], u[k], acc);
    return ctx_warp_sum_d(acc);
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
