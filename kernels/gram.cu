// Gram blocks: row norms, the kernel epilogue over a GEMM output (cuBLAS does the
// product for large pools), and a tiled Gram with the epilogue fused for many pools in
// one launch (blockIdx.z = pool). Inputs f32, f16 or bf16; accumulation in f32.
#include "common.cuh"

// inv[i] = 1 / ||x_i|| (one warp per row).
template <class L>
__device__ void row_inv_norms(const typename L::T* x, long long n, int d, float* inv) {
    long long row = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (row >= n) return;
    int lane = threadIdx.x & 31;
    float acc = 0.0f;
    for (int k = lane; k < d; k += 32) {
        float v = L::ld(x, row * d + k);
        acc = fmaf(v, v, acc);
    }
    acc = ctx_warp_sum(acc);
    if (lane == 0) inv[row] = rsqrtf(acc);
}
extern "C" __global__ void row_inv_norms_f32(const float* x, long long n, int d, float* inv) {
    row_inv_norms<LdF32>(x, n, d, inv);
}
extern "C" __global__ void row_inv_norms_f16(const unsigned short* x, long long n, int d, float* inv) {
    row_inv_norms<LdF16>(x, n, d, inv);
}
extern "C" __global__ void row_inv_norms_bf16(const unsigned short* x, long long n, int d, float* inv) {
    row_inv_norms<LdBF16>(x, n, d, inv);
}

// The kernel epilogue of a square Gram of raw dot products (rows == cols): for j >= i,
// v = K(g[i * ld + j] * (rinv[i] * cinv[j])) is written to (i, j) and to (j, i), so the
// result is exactly symmetric whatever order the GEMM summed the two triangles in; the
// diagonal is exactly K(1), as on the CPU. Only the upper triangle is read. Rows over
// blockIdx.y (strided), columns over x: no 64-bit division per element.
extern "C" __global__ void gram_epilogue_f32(float* g, long long rows, long long cols, long long ld,
                                             const float* rinv, const float* cinv, int kind, float p) {
    float one = ctx_kernel(1.0f, kind, p);
    for (long long i = blockIdx.y; i < rows; i += gridDim.y) {
        float ri = rinv[i];
        float* gi = g + i * ld;
        for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < cols;
             j += (long long)gridDim.x * blockDim.x) {
            if (j < i) continue;
            float v = (kind >= 0 && i == j) ? one : ctx_kernel(gi[j] * (ri * cinv[j]), kind, p);
            gi[j] = v;
            if (j != i && j < rows) g[j * ld + i] = v;
        }
    }
}

// Tiled Gram of many pools. Pool b has rows [row0[b], row0[b] + np[b]) of x (row-major,
// d columns); its np x np output starts at out + out0[b]. 64 x 64 output tile per block,
// 256 threads, 4 x 4 outputs each, k in chunks of 16 through shared memory.
#define GT 64
#define GK 16
template <class L>
__device__ void gram_tiled(const typename L::T* x, const int* np, const long long* row0,
                           const long long* out0, int d, const float* inv, int kind, float p, float* out) {
    __shared__ float as[GK][GT + 1];
    __shared__ float bs[GK][GT + 1];
    int b = blockIdx.z;
    int n = np[b];
    int ti = blockIdx.y * GT, tj = blockIdx.x * GT;
    if (ti >= n || tj >= n) return;
    long long r0 = row0[b];
    int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    // Loader: thread t fills rows t / 4 and k-slots (t % 4) * 4 .. + 4 of both tiles.
    int lr = threadIdx.x >> 2, lk = (threadIdx.x & 3) * 4;
    float acc[4][4];
    for (int a = 0; a < 4; ++a)
        for (int c = 0; c < 4; ++c) acc[a][c] = 0.0f;
    for (int k0 = 0; k0 < d; k0 += GK) {
        for (int u = 0; u < 4; ++u) {
            int k = k0 + lk + u;
            int ri = ti + lr, rj = tj + lr;
            as[lk + u][lr] = (ri < n && k < d) ? L::ld(x, (r0 + ri) * d + k) : 0.0f;
            bs[lk + u][lr] = (rj < n && k < d) ? L::ld(x, (r0 + rj) * d + k) : 0.0f;
        }
        __syncthreads();
        for (int kk = 0; kk < GK; ++kk) {
            float av[4], bv[4];
            for (int a = 0; a < 4; ++a) av[a] = as[kk][ty + 16 * a];
            for (int c = 0; c < 4; ++c) bv[c] = bs[kk][tx + 16 * c];
            for (int a = 0; a < 4; ++a)
                for (int c = 0; c < 4; ++c) acc[a][c] = fmaf(av[a], bv[c], acc[a][c]);
        }
        __syncthreads();
    }
    float* o = out + out0[b];
    float one = ctx_kernel(1.0f, kind, p);
    for (int a = 0; a < 4; ++a) {
        int i = ti + ty + 16 * a;
        if (i >= n) continue;
        float ri = inv[r0 + i];
        for (int c = 0; c < 4; ++c) {
            int j = tj + tx + 16 * c;
            if (j >= n) continue;
            // As the epilogue kernel: the norms' product first; with a kernel, K(1) on the
            // diagonal.
            o[(long long)i * n + j] =
                (kind >= 0 && i == j) ? one : ctx_kernel(acc[a][c] * (ri * inv[r0 + j]), kind, p);
        }
    }
}
extern "C" __global__ void gram_tiled_f32(const float* x, const int* np, const long long* row0,
                                          const long long* out0, int d, const float* inv, int kind, float p,
                                          float* out) {
    gram_tiled<LdF32>(x, np, row0, out0, d, inv, kind, p, out);
}
extern "C" __global__ void gram_tiled_f16(const unsigned short* x, const int* np, const long long* row0,
                                          const long long* out0, int d, const float* inv, int kind, float p,
                                          float* out) {
    gram_tiled<LdF16>(x, np, row0, out0, d, inv, kind, p, out);
}
extern "C" __global__ void gram_tiled_bf16(const unsigned short* x, const int* np, const long long* row0,
                                           const long long* out0, int d, const float* inv, int kind, float p,
                                           float* out) {
    gram_tiled<LdBF16>(x, np, row0, out0, d, inv, kind, p, out);
}

// Facility-location similarity from the raw dot products of unit rows, as the CPU builds
// it: the cosine clamped to [-1, 1] (a self-product may round to 1 + ulp), then
// s[i][j] = max(0, w[i] * cos). Rows over blockIdx.y (strided), columns over x.
extern "C" __global__ void weight_rows_pos_f32(float* s, long long n, const float* w) {
    for (long long i = blockIdx.y; i < n; i += gridDim.y) {
        float wi = w[i];
        float* si = s + i * n;
        for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < n;
             j += (long long)gridDim.x * blockDim.x)
            si[j] = fmaxf(wi * fminf(fmaxf(si[j], -1.0f), 1.0f), 0.0f);
    }
}
