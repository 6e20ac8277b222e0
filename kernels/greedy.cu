// Per-step updates of the greedy selectors (SPEC §1) over device-resident state, each
// fused with the masked argmax of the new gains: one launch per greedy step (two for DPP,
// centroid drift and coverage), one 16-byte result read back. Pool rows are f32,
// row-major, unit length or within 2^-8 of it; `inv` holds their exact inverse norms
// (the CPU path's `Dense::inv`, f64). Products and sums are f64, in the CPU's order (one
// half-warp per row with common.cuh's ctx_dot16): gains equal the CPU's bit for bit.
//
// Every step kernel takes the previous pick `p` (-1 for none), marks it taken
// (alive[p] = 0), updates the state of every row, and reduces the gains of the open rows
// (alive, and within the remaining token budget when `cost` is given) to
// out = {best gain, its index or -1} with ctx_grid_argmax (pv/pi: one slot per block;
// `ticket` zero between launches). No thread returns before that reduction.
#include "common.cuh"

// A kernel row against the pool (GP observations, read on demand): out[i] =
// K((float)(<x_i, y> (inv[i] yinv))), the dot product in f64 as the CPU computes it, rounded
// to f32 before the kernel as the CPU's pool kernel does; out[self_idx] = K(1) when y is
// pool row self_idx (-1: y is the query). One half-warp per row.
extern "C" __global__ void kernel_row_f32(const float* x, long long n, int d, const float* y, const double* inv,
                                          double yinv, int kind, float p, long long self_idx, float* out) {
    long long i = ctx_hw_row(n);
    double s = ctx_dot16(x + (i < 0 ? 0 : i) * d, y, i < 0 ? 0 : d);
    if (i >= 0 && ctx_hw_lead()) {
        float c = i == self_idx ? 1.0f : (float)(s * (inv[i] * yinv));
        out[i] = ctx_kernel(c, kind, p);
    }
}

// out[i] = cos(i, p) = <x_i, x_p> inv[i] inv[p], in f64. One half-warp per row.
extern "C" __global__ void cos_to_row_f64(const float* x, long long n, int d, long long p, const double* inv,
                                          double* out) {
    long long i = ctx_hw_row(n);
    double s = ctx_cos_rows(x, d, inv, i, p);
    if (i >= 0 && ctx_hw_lead()) out[i] = s;
}

// MMR: maxsim[i] = max(maxsim[i], cos(i, p)); gain = lam rel[i] - (1 - lam) maxsim[i]
// (the max term is 0 while nothing is picked: maxsim starts at -inf).
extern "C" __global__ void mmr_step_f64(const float* x, long long n, int d, long long p, const double* inv,
                                        const double* rel, double lam, double* maxsim, unsigned char* alive,
                                        const double* cost, double remaining, double* pv, long long* pi,
                                        unsigned int* ticket, double* out) {
    long long i = ctx_hw_row(n);
    double g = 0.0;
    long long cand = -1;
    double c = p >= 0 ? ctx_cos_rows(x, d, inv, i, p) : 0.0;
    if (i >= 0 && ctx_hw_lead()) {
        double m = maxsim[i];
        if (p >= 0) m = fmax(m, c);
        maxsim[i] = m;
        if (i == p) alive[i] = 0;
        if (ctx_open(alive, cost, remaining, i)) {
            double red = m > CTX_NEG_INF_D ? m : 0.0;
            g = lam * rel[i] - (1.0 - lam) * red;
            cand = i;
        }
    }
    ctx_grid_argmax(g, cand, pv, pi, ticket, out);
}

// GRN: r[i] -= (<x_i, u> inv[i])^2 for a new orthonormal basis vector u (f64; none: 0);
// gain = max(r[i], 0).
extern "C" __global__ void grn_step_f64(const float* x, long long n, int d, long long p, const double* u,
                                        const double* inv, double* r, unsigned char* alive, const double* cost,
                                        double remaining, double* pv, long long* pi, unsigned int* ticket,
                                        double* out) {
    long long i = ctx_hw_row(n);
    double g = 0.0;
    long long cand = -1;
    double q = u != 0 ? ctx_dot16_fd(x + (i < 0 ? 0 : i) * d, u, i < 0 ? 0 : d) : 0.0;
    if (i >= 0 && ctx_hw_lead()) {
        double ri = r[i];
        if (u != 0) {
            q *= inv[i];
            ri -= q * q;
        }
        r[i] = ri;
        if (i == p) alive[i] = 0;
        if (ctx_open(alive, cost, remaining, i)) {
            g = fmax(ri, 0.0);
            cand = i;
        }
    }
    ctx_grid_argmax(g, cand, pv, pi, ticket, out);
}

// DPP (Chen et al. 2018), second launch of a step; `s` holds cos(i, p) from
// cos_to_row_f64. e_i = (w_i w_p s_i - <c_p, c_i>) / sqrt(d2[p]); c_i[t] = e_i;
// d2[i] -= e_i^2; gain = max(d2[i], 0). The factor is stored by pick: C[u * n + i].
// Row p's d2 is left as it is (p is taken), so every thread reads the same pivot.
// p < 0: only the argmax of the current gains. One thread per row.
extern "C" __global__ void dpp_step_f64(long long n, long long p, int t, const double* s, const double* w,
                                        double* c, double* d2, unsigned char* alive, const double* cost,
                                        double remaining, double* pv, long long* pi, unsigned int* ticket,
                                        double* out) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    double g = 0.0;
    long long cand = -1;
    if (i < n) {
        double di = d2[i];
        if (p >= 0) {
            double piv = sqrt(d2[p]);
            double lxp = w[i] == 0.0 ? 0.0 : w[i] * w[p] * s[i];
            double proj = 0.0;
            for (int k = 0; k < t; ++k) proj += c[(long long)k * n + p] * c[(long long)k * n + i];
            double e = (lxp - proj) / piv;
            c[(long long)t * n + i] = e;
            if (i != p) {
                di -= e * e;
                d2[i] = di;
            } else {
                alive[i] = 0;
            }
        }
        if (ctx_open(alive, cost, remaining, i)) {
            g = fmax(di, 0.0);
            cand = i;
        }
    }
    ctx_grid_argmax(g, cand, pv, pi, ticket, out);
}

// Centroid drift, first launch of a step: ss += 2 sd[p] + 1 (S = sum of the picked unit
// rows; sd[i] = <S, x_i> before p's own row is added).
extern "C" __global__ void centroid_pre_f64(const double* sd, long long p, double* ss) {
    if (blockIdx.x == 0 && threadIdx.x == 0 && p >= 0) ss[0] += 2.0 * sd[p] + 1.0;
}

// Centroid drift, second launch: sd[i] += cos(i, p); gain = 1 - cos(S, S + x_i)
// = 1 - (ss + sd) / (sqrt(ss) sqrt(ss + 2 sd + 1)); 1 when a norm is 0, in particular
// while nothing is picked (SPEC §1: a cosine with a zero vector counts as 0).
extern "C" __global__ void centroid_step_f64(const float* x, long long n, int d, long long p, const double* inv,
                                             double* sd, const double* ss, unsigned char* alive,
                                             const double* cost, double remaining, double* pv, long long* pi,
                                             unsigned int* ticket, double* out) {
    long long i = ctx_hw_row(n);
    double g = 0.0;
    long long cand = -1;
    double c = p >= 0 ? ctx_cos_rows(x, d, inv, i, p) : 0.0;
    if (i >= 0 && ctx_hw_lead()) {
        double sdi = sd[i];
        if (p >= 0) sdi += c;
        sd[i] = sdi;
        if (i == p) alive[i] = 0;
        if (ctx_open(alive, cost, remaining, i)) {
            double s = ss[0];
            double ns = sqrt(fmax(s, 0.0));
            double nsx = sqrt(fmax(s + 2.0 * sdi + 1.0, 0.0));
            g = (ns != 0.0 && nsx != 0.0) ? 1.0 - (s + sdi) / (ns * nsx) : 1.0;
            cand = i;
        }
    }
    ctx_grid_argmax(g, cand, pv, pi, ticket, out);
}

// Facility location, first launch of a step: cur[j] = max(cur[j], s[p][j]); alive[p] = 0.
extern "C" __global__ void cov_add_f32(const float* s, long long n, long long p, float* cur,
                                       unsigned char* alive) {
    long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n || p < 0) return;
    cur[j] = fmaxf(cur[j], s[p * n + j]);
    if (j == p) alive[p] = 0;
}

// Facility location, second launch: gain of row x = sum_j max(0, s[x][j] - cur[j]) / cost
// (differences and sum in f64, as the CPU's sum_pos_diff), one half-warp per row. Every
// half-warp runs the sum (a closed or missing row over 0 elements) so the shuffles see the
// whole warp.
extern "C" __global__ void cov_gains_f32(const float* s, long long n, const float* cur, const double* gcost,
                                         const unsigned char* alive, const double* cost, double remaining,
                                         double* pv, long long* pi, unsigned int* ticket, double* out) {
    long long x = ctx_hw_row(n);
    bool open = x >= 0 && ctx_open(alive, cost, remaining, x);
    double acc = ctx_sum16_pos_diff(s + (open ? x : 0) * n, cur, open ? n : 0);
    double g = 0.0;
    long long cand = -1;
    if (open && ctx_hw_lead()) {
        g = gcost == 0 ? acc : acc / gcost[x];
        cand = x;
    }
    ctx_grid_argmax(g, cand, pv, pi, ticket, out);
}

// Masked argmax of a gain vector: the largest open g[i], ties to the lower index.
extern "C" __global__ void argmax_masked_f64(const double* g, long long n, const unsigned char* alive,
                                             const double* cost, double remaining, double* pv, long long* pi,
                                             unsigned int* ticket, double* out) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    bool open = i < n && ctx_open(alive, cost, remaining, i);
    ctx_grid_argmax(open ? g[i] : 0.0, open ? i : -1, pv, pi, ticket, out);
}

// MMR over many pools of n rows each, one launch per step for all of them: pool b owns
// rows [b n, (b + 1) n) and keys[b]; p[b] is its previous pick (-1 none yet, -2 done:
// the pool is skipped). Products and gains in f64 as in mmr_step_f64; the argmax packs
// each gain rounded to f32 with its index into one 64-bit atomicMax per pool (a NaN gain
// is never a candidate). One half-warp per row.
extern "C" __global__ void mmr_step_batched_f64(const float* x, int pools, long long n, int d, const long long* p,
                                                const double* inv, const double* rel, double lam,
                                                double* maxsim, unsigned char* alive, unsigned long long* keys,
                                                unsigned long long* keys_reset) {
    long long g = ctx_hw_row((long long)pools * n);
    long long b = g < 0 ? 0 : g / n, i = g < 0 ? -1 : g - b * n;
    long long pb = g < 0 ? -2 : p[b];
    // Every half-warp runs the dot product (pools in one warp may differ in pb).
    bool act = pb >= 0;
    double c = ctx_cos_rows(x, d, inv, act ? g : -1, act ? b * n + pb : 0);
    if (g < 0 || !ctx_hw_lead()) return;
    if (i == 0) keys_reset[b] = 0ull;
    if (pb == -2) return;
    double m = maxsim[g];
    if (pb >= 0) m = fmax(m, c);
    maxsim[g] = m;
    if (i == pb) alive[g] = 0;
    if (!alive[g]) return;
    double red = m > CTX_NEG_INF_D ? m : 0.0;
    double gain = lam * rel[g] - (1.0 - lam) * red;
    if (gain != gain) return;
    atomicMax(keys + b, ctx_pack((float)gain, (unsigned int)i));
}
