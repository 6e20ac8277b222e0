// Attention mass by turn and role (src/attention, App. E.3) on the device, one layer per
// pass, with no N x N (or R x N) score matrix: keys stream through in tiles of 32, and the
// softmax is online (a maximum and a sum per tile, combined per head and step).
//
// Layout (one layer): q is R x (H d) (row r: the query at step r, heads back to back), k is
// n_keys x (G d); query head h reads key head h / (H / G). A block serves a tile of 32 keys
// for 8 steps: blockIdx.x = tile * sblocks + step block, so the blocks sharing a tile of keys
// run next to each other (the tile is read from L2, not HBM, after the first). Warp w is
// step 8 (step block) + w, lane l is key 32 tile + l. Key j counts for step r when
// j <= steps[r] (causal); a block whose tile starts after its last step returns at once,
// and the combine reads only the tiles a step sees.
//
// 1. attn_stats_f32: per head, step and tile, m = max score and l = sum exp((s - m) / sqrt d)
//    (f64), written to stats indexed ((h R + r) tiles + tile).
// 2. attn_combine_f64: per head and step, M = max m and Z = sum_tiles l exp((m - M) / sqrt d)
//    in tile order.
// 3. attn_weights_f32: per step and key, the sum over heads (in head order, f64) of
//    exp((s - M) / sqrt d) / Z, added into acc[r][j] (one writer per element per launch).
// 4. attn_range_sums_f64: per step and range of keys (a span, or a run of unassigned
//    tokens), the sum of acc over the range up to the step, in a fixed order.
// Scores are f32 dot products accumulated in d order with one fma each; everything after
// them is f64. Every sum has a fixed order, so results do not depend on scheduling.
#include "common.cuh"

#define ATT_TK 32   // keys per tile (the lanes of a warp)
#define ATT_RB 8    // steps per block (its warps)
#define ATT_DC 64   // head-dimension chunk staged in shared memory
#define ATT_HB 4    // query heads of one key head scored together

// Scores of up to ATT_HB query heads h0..h0+nh-1 (all reading key head kg) for this
// thread's step r and key j: s[i] = q_r^{h0+i} . k_j^{kg}. Every thread of the block calls
// it (the tile is staged cooperatively); r or j out of range score 0.
__device__ __forceinline__ void att_scores(const float* q, const float* k, int rn, long long nk, int h, int g,
                                           int d, int h0, int nh, int kg, float* s) {
    __shared__ float ks[ATT_TK][ATT_DC + 1];
    __shared__ float qs[ATT_HB][ATT_RB][ATT_DC];
    int t = threadIdx.x;
    int lane = t & 31, w = t >> 5;
    int sblocks = (rn + ATT_RB - 1) / ATT_RB;
    long long j0 = (long long)(blockIdx.x / sblocks) * ATT_TK;
    int r0 = (blockIdx.x % sblocks) * ATT_RB;
#pragma unroll
    for (int i = 0; i < ATT_HB; ++i) s[i] = 0.0f;
    for (int c0 = 0; c0 < d; c0 += ATT_DC) {
        int dc = d - c0 < ATT_DC ? d - c0 : ATT_DC;
        for (int e = t; e < ATT_TK * ATT_DC; e += blockDim.x) {
            int kk = e / ATT_DC, c = e % ATT_DC;
            long long j = j0 + kk;
            ks[kk][c] = (c < dc && j < nk) ? k[j * ((long long)g * d) + (long long)kg * d + c0 + c] : 0.0f;
        }
        for (int e = t; e < ATT_HB * ATT_RB * ATT_DC; e += blockDim.x) {
            int i = e / (ATT_RB * ATT_DC), rr = (e / ATT_DC) % ATT_RB, c = e % ATT_DC;
            int r = r0 + rr;
            qs[i][rr][c] = (i < nh && c < dc && r < rn) ? q[(long long)r * h * d + (long long)(h0 + i) * d + c0 + c] : 0.0f;
        }
        __syncthreads();
        for (int c = 0; c < dc; ++c) {
            float kv = ks[lane][c];
#pragma unroll
            for (int i = 0; i < ATT_HB; ++i) s[i] = fmaf(qs[i][w][c], kv, s[i]);
        }
        __syncthreads();
    }
}

// This block's first step, tile and this thread's step r and key j; false when the whole
// block lies after its last step (uniform over the block: it returns before any barrier).
__device__ __forceinline__ bool att_block(const long long* steps, int rn, int& r, long long& j) {
    int sblocks = (rn + ATT_RB - 1) / ATT_RB;
    long long tile = blockIdx.x / sblocks;
    int r0 = (blockIdx.x % sblocks) * ATT_RB;
    int rlast = r0 + ATT_RB - 1 < rn - 1 ? r0 + ATT_RB - 1 : rn - 1;
    r = r0 + (threadIdx.x >> 5);
    j = tile * ATT_TK + (threadIdx.x & 31);
    return tile * ATT_TK <= steps[rlast];
}

// Warp-wide max and sum (every lane gets the result).
__device__ __forceinline__ float att_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ double att_warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

extern "C" __global__ void attn_stats_f32(const float* q, const float* k, const long long* steps, int rn,
                                          long long nk, int h, int g, int d, double isd, int tiles, float* m,
                                          double* l) {
    int lane = threadIdx.x & 31;
    int r;
    long long j;
    if (!att_block(steps, rn, r, j)) return;
    bool ok = r < rn && j <= (r < rn ? steps[r] : -1);
    int hpg = h / g;
    float s[ATT_HB];
    long long tile = j / ATT_TK;
    for (int kg = 0; kg < g; ++kg) {
        for (int hl = 0; hl < hpg; hl += ATT_HB) {
            int nh = hpg - hl < ATT_HB ? hpg - hl : ATT_HB;
            int h0 = kg * hpg + hl;
            att_scores(q, k, rn, nk, h, g, d, h0, nh, kg, s);
#pragma unroll
            for (int i = 0; i < ATT_HB; ++i) {
                if (i >= nh) continue;  // uniform over the block
                float mx = att_warp_max(ok ? s[i] : CTX_NEG_INF_F);
                double e = (ok && mx > CTX_NEG_INF_F) ? exp(((double)s[i] - (double)mx) * isd) : 0.0;
                double sum = att_warp_sum(e);
                if (lane == 0 && r < rn) {
                    long long at = ((long long)(h0 + i) * rn + r) * tiles + tile;
                    m[at] = mx;
                    l[at] = sum;
                }
            }
        }
    }
}

// Row v = h R + r; only the tiles step r sees (0..steps[r] / 32) were written this layer.
extern "C" __global__ void attn_combine_f64(const float* m, const double* l, const long long* steps, int rn,
                                            int rows, int tiles, double isd, float* mm, double* z) {
    int v = blockIdx.x * blockDim.x + threadIdx.x;
    if (v >= rows) return;
    const float* mv = m + (long long)v * tiles;
    const double* lv = l + (long long)v * tiles;
    int seen = (int)(steps[v % rn] / ATT_TK) + 1;
    float mx = CTX_NEG_INF_F;
    for (int t = 0; t < seen; ++t) mx = fmaxf(mx, mv[t]);
    double acc = 0.0;
    for (int t = 0; t < seen; ++t)
        if (mv[t] > CTX_NEG_INF_F) acc += lv[t] * exp(((double)mv[t] - (double)mx) * isd);
    mm[v] = mx;
    z[v] = acc;
}

extern "C" __global__ void attn_weights_f32(const float* q, const float* k, const long long* steps, int rn,
                                            long long nk, int h, int g, int d, double isd, const float* mm,
                                            const double* z, double* acc) {
    int r;
    long long j;
    if (!att_block(steps, rn, r, j)) return;
    bool ok = r < rn && j <= (r < rn ? steps[r] : -1);
    int hpg = h / g;
    float s[ATT_HB];
    double sum = 0.0;
    for (int kg = 0; kg < g; ++kg) {
        for (int hl = 0; hl < hpg; hl += ATT_HB) {
            int nh = hpg - hl < ATT_HB ? hpg - hl : ATT_HB;
            int h0 = kg * hpg + hl;
            att_scores(q, k, rn, nk, h, g, d, h0, nh, kg, s);
            if (ok)
#pragma unroll
                for (int i = 0; i < ATT_HB; ++i) {
                    if (i >= nh) continue;
                    long long v = (long long)(h0 + i) * rn + r;
                    sum += exp(((double)s[i] - (double)mm[v]) * isd) / z[v];
                }
        }
    }
    if (ok) acc[(long long)r * nk + j] += sum;
}

// Block (range x, step y): the sum of acc[r][j] over lo[x] <= j < min(hi[x], steps[r] + 1),
// each thread over a stride in order, then the block's tree in a fixed order; out[r][x].
extern "C" __global__ void attn_range_sums_f64(const double* acc, long long nk, const long long* steps, int rn,
                                               const long long* lo, const long long* hi, int nr, double* out) {
    __shared__ double part[CTX_TPB];
    int x = blockIdx.x, r = blockIdx.y, t = threadIdx.x;
    double v = 0.0;
    if (x < nr && r < rn) {
        long long end = hi[x] < steps[r] + 1 ? hi[x] : steps[r] + 1;
        for (long long j = lo[x] + t; j < end; j += CTX_TPB) v += acc[(long long)r * nk + j];
    }
    part[t] = v;
    __syncthreads();
    for (int o = CTX_TPB / 2; o > 0; o >>= 1) {
        if (t < o) part[t] += part[t + o];
        __syncthreads();
    }
    if (t == 0 && x < nr && r < rn) out[(long long)r * nr + x] = part[0];
}
