// Shared definitions for ctxprune's CUDA kernels (compiled at run time by NVRTC).
// NVRTC has no INFINITY macro and no standard headers by default: constants are spelled
// out as bit patterns here.
#pragma once

#define CTX_INF_F __int_as_float(0x7f800000)
#define CTX_NEG_INF_F __int_as_float(0xff800000)

// Ties go to the lower index on every backend (SPEC: deterministic selection).
__device__ __forceinline__ bool ctx_better(float a, int ia, float b, int ib) {
    return a > b || (a == b && ia < ib);
}
