// The incremental GP posterior of src/rerank/gp.rs on the device: V = L^{-1} K(A, pool)
// stored f32 row-major (t x n), the running sums colsq, a, b, c in f64, and the UCB argmax.
#include "common.cuh"

// out[s] = V[s][j] for s < t: column j of V (the new observation's l = L^{-1} k_A(j)).
extern "C" __global__ void gp_col_f32(const float* v, long long n, int t, long long j, float* out) {
    int s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s < t) out[s] = v[(long long)s * n + j];
}

// Appends row t of V: x_i = (krow[i] - sum_s l[s] V[s][i]) / lnn, stored f32, and the
// running sums (f64, one buffer: colsq = sums[0, n), a = sums[n, 2n), b = sums[2n, 3n),
// c = sums[3n, 4n)) colsq[i] += x_i^2, a[i] += urn x_i, b[i] += u1n x_i, c[i] += upn x_i.
// One thread per column.
extern "C" __global__ void gp_append_f32(float* v, long long n, int t, const double* l, const float* krow,
                                         double lnn, double urn, double u1n, double upn, double* sums) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    // One fma per term in the CPU's order (its sub_ltv4 / axpy_mixed), so the row, and
    // colsq, a, b, c from it, equal the CPU's bit for bit.
    double acc = (double)krow[i];
    for (int s = 0; s < t; ++s) acc = fma(-l[s], (double)v[(long long)s * n + i], acc);
    double x = acc / lnn;
    v[(long long)t * n + i] = (float)x;
    sums[i] += x * x;
    sums[n + i] += urn * x;
    sums[2 * n + i] += u1n * x;
    sums[3 * n + i] += upn * x;
}

// a[i] += sum_s w[s] V[from + s][i] for s < count, in s order with one fma each (the CPU's
// order): the residuals of rows from..from+count changed (fantasised scores replaced by the
// oracle's).
extern "C" __global__ void gp_reweight_f32(const float* v, long long n, int from, int count, const double* w,
                                           double* a) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double acc = a[i];
    for (int s = 0; s < count; ++s) acc = fma(w[s], (double)v[(long long)(from + s) * n + i], acc);
    a[i] = acc;
}

// Posterior moments in oracle units: mean = ((mu0 + m) + (a - m b)) + delta (c - mu0),
// var = s^2 max(1 - colsq, 0). delta = 1 - alpha is the prior's fade (0: the prior as given).
extern "C" __global__ void gp_posterior_f64(const double* mu0, const double* a, const double* b,
                                        const double* c, const double* colsq, double m, double s,
                                        double delta, long long n, double* mean, double* var) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    mean[i] = ((mu0[i] + m) + (a[i] - m * b[i])) + delta * (c[i] - mu0[i]);
    var[i] = s * s * fmax(1.0 - colsq[i], 0.0);
}

// UCB argmax in one launch: the largest mean + sb sqrt(var) over unscored items
// (scored[i] == 0), ties to the lower index; out = {value, index or -1} (see
// ctx_grid_argmax for pv, pi, ticket).
extern "C" __global__ void ucb_argmax_f64(const double* mean, const double* var, const unsigned char* scored,
                                          double sb, long long n, double* pv, long long* pi, unsigned int* ticket,
                                          double* out) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    bool open = i < n && !scored[i];
    ctx_grid_argmax(open ? mean[i] + sb * sqrt(var[i]) : 0.0, open ? i : -1, pv, pi, ticket, out);
}
