// The CUDA execution model on the CPU, for ctxprune's own kernels (feature `cuda-emu`,
// tests and CI only). Included before each kernels/*.cu, which then compiles as C++:
// - the built-ins threadIdx, blockIdx, blockDim, gridDim (per emulated thread);
// - __shared__ memory, private to the block (one block runs at a time, so a static);
// - __syncthreads and the warp shuffles, with their real meaning: a thread waits there
//   until every live thread of its block (or warp) has arrived;
// - atomicAdd, atomicMax (32- and 64-bit), __threadfence; the bit casts; f16 conversion;
//   the math functions the kernels call (libm: results may differ from CUDA's in the
//   last bits, as the GPU check's tolerances allow).
// kernels/emu/runtime.cpp runs a launch block by block, each block's threads as fibers
// (default) or as OS threads (the race check), see there.
#pragma once
#include <math.h>
#include <cstdint>
#include <cstring>

#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static

struct uint3 {
    unsigned int x, y, z;
};
struct dim3 {
    unsigned int x, y, z;
};

extern thread_local uint3 threadIdx;
extern thread_local uint3 blockIdx;
extern thread_local dim3 blockDim;
extern thread_local dim3 gridDim;

// Runtime entry points (runtime.cpp).
void ctx_emu_syncthreads();
unsigned long long ctx_emu_shfl_xor(unsigned long long bits, int lane_mask);

inline void __syncthreads() { ctx_emu_syncthreads(); }

template <class T>
inline T ctx_emu_from_bits(unsigned long long b) {
    T v;
    std::memcpy(&v, &b, sizeof(T));
    return v;
}
template <class T>
inline unsigned long long ctx_emu_to_bits(T v) {
    unsigned long long b = 0;
    std::memcpy(&b, &v, sizeof(T));
    return b;
}
// Every lane of the warp must call it (mask 0xffffffff, as the kernels do).
template <class T>
inline T __shfl_xor_sync(unsigned int /*mask*/, T v, int lane_mask) {
    return ctx_emu_from_bits<T>(ctx_emu_shfl_xor(ctx_emu_to_bits(v), lane_mask));
}

inline unsigned int atomicAdd(unsigned int* p, unsigned int v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline unsigned long long atomicMax(unsigned long long* p, unsigned long long v) {
    unsigned long long old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
    while (old < v && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
    }
    return old;
}
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

inline float __int_as_float(int i) { return ctx_emu_from_bits<float>((unsigned int)i); }
inline float __uint_as_float(unsigned int u) { return ctx_emu_from_bits<float>(u); }
inline unsigned int __float_as_uint(float f) { return (unsigned int)ctx_emu_to_bits(f); }
inline double __longlong_as_double(long long i) { return ctx_emu_from_bits<double>((unsigned long long)i); }

inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }

// IEEE binary16 to binary32, exactly (PTX cvt.f32.f16).
inline float ctx_emu_half_to_float(unsigned short h) {
    unsigned int sign = (unsigned int)(h & 0x8000u) << 16;
    unsigned int exp = (h >> 10) & 0x1fu;
    unsigned int man = h & 0x3ffu;
    unsigned int bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else {
            // Subnormal: normalise.
            int e = -1;
            do {
                ++e;
                man <<= 1;
            } while ((man & 0x400u) == 0);
            bits = sign | ((unsigned int)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + (127 - 15)) << 23) | (man << 13);
    }
    return ctx_emu_from_bits<float>(bits);
}

// A launch as the Rust raw layer describes it (raw/emu.rs `EmuGrid`).
struct ctx_emu_grid {
    unsigned int gx, gy, gz;
    unsigned int threads;
    // 0: fibers; 1: OS threads.
    unsigned int mode;
};

// Runs `body` for every thread of every block of the grid; 0 on success, else an error
// code (runtime.cpp `ctx_emu_error`).
int ctx_emu_launch(const ctx_emu_grid* g, void (*call)(void*), void* body);

template <class F>
void ctx_emu_invoke(void* f) {
    (*static_cast<F*>(f))();
}
template <class F>
int ctx_emu_run(const ctx_emu_grid* g, void (*call)(void*), F* body) {
    return ctx_emu_launch(g, call, static_cast<void*>(body));
}
