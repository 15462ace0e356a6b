// ref/cuda/gpuref_naive.cu — the same-dtype naive baseline of one block of
// query rows, in ref/naive.c's contract and in its summation order:
//   S_ij = round(fl(acc * scale)), acc = sum_c fl(Q_ic K_jc) in order over c;
//   m = max_j S_ij; e_j = expf(S_ij - m); l = sum_j e_j in order over j;
//   P_ij = round(e_j / l); O_ic = round(sum_j fl(P_ij V_jc)), in order over j;
//   LSE = m + logf(l) where l > 0, else -inf (no visible key; scores that overflowed);
//   D_i = sum_c fl(dO_ic O_ic); dP_ij = round(sum_c fl(dO_ic V_jc));
//   dS_ij = round(P_ij (dP_ij - D_i)); dQ = round(fl(scale sum_j fl(dS_ij K_jc)));
//   dK, dV: f32 sums over the rows of every block and head of the group in
//   order, rounded once at the group's end (dK times scale).
// Every product is rounded before it is added (no FMA), every sum runs in the
// CPU's order, and expf/logf are taken as the f32 rounding of the fp64 exp/log
// (glibc's are correctly rounded but for rare ties), so the device reproduces
// the scalar CPU naive bit for bit except where those roundings part.  The
// price is GEMMs without split-K: seq_gemm below is a plain tiled kernel.
#include "gpuref_run.cuh"

namespace
{

// C(m x n) = [C +] A(m x k) B(k x n), row-major (A stored (k x m) when TA, B
// stored (n x k) when TB), each output summed in order over k with every
// product rounded: fl(acc + fl(a b)).  32 x 32 outputs a CTA, 2 x 2 a thread.
template <bool TA, bool TB>
__global__ void __launch_bounds__(256)
    seq_gemm(int m, int n, int k, const float *__restrict__ a, int lda, const float *__restrict__ b, int ldb,
             float *__restrict__ c, int ldc, int accumulate)
{
    __shared__ float as[32][33], bs[32][33]; // [kk][mm], [kk][nn]
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int m0 = blockIdx.y * 32, n0 = blockIdx.x * 32;
    float acc[2][2];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) {
            int row = m0 + ty + 16 * i, col = n0 + tx + 16 * j;
            acc[i][j] = accumulate && row < m && col < n ? c[(size_t)row * ldc + col] : 0.0f;
        }
    for (int k0 = 0; k0 < k; k0 += 32) {
        for (int e = threadIdx.x; e < 1024; e += 256) { // loads run along the stored rows
            int mm = TA ? e % 32 : e / 32, ka = TA ? e / 32 : e % 32;
            int gm = m0 + mm, gka = k0 + ka;
            as[ka][mm] = gm < m && gka < k ? (TA ? a[(size_t)gka * lda + gm] : a[(size_t)gm * lda + gka]) : 0.0f;
            int nn = TB ? e / 32 : e % 32, kb = TB ? e % 32 : e / 32;
            int gn = n0 + nn, gkb = k0 + kb;
            bs[kb][nn] = gn < n && gkb < k ? (TB ? b[(size_t)gn * ldb + gkb] : b[(size_t)gkb * ldb + gn]) : 0.0f;
        }
        __syncthreads();
        const int kend = k - k0 < 32 ? k - k0 : 32; // no padding term enters a sum
        for (int kk = 0; kk < kend; kk++) {
            const float a0 = as[kk][ty], a1 = as[kk][ty + 16], b0 = bs[kk][tx], b1 = bs[kk][tx + 16];
            acc[0][0] = __fadd_rn(acc[0][0], __fmul_rn(a0, b0));
            acc[0][1] = __fadd_rn(acc[0][1], __fmul_rn(a0, b1));
            acc[1][0] = __fadd_rn(acc[1][0], __fmul_rn(a1, b0));
            acc[1][1] = __fadd_rn(acc[1][1], __fmul_rn(a1, b1));
        }
        __syncthreads();
    }
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) {
            int row = m0 + ty + 16 * i, col = n0 + tx + 16 * j;
            if (row < m && col < n)
                c[(size_t)row * ldc + col] = acc[i][j];
        }
}

int gemm(refg_run *r, bool trans_a, bool trans_b, int m, int n, int k, const float *a, int lda, const float *b, int ldb,
         bool accumulate, float *c, int ldc, ac_err *err)
{
    dim3 grid((n + 31) / 32, (m + 31) / 32);
    cudaStream_t st = r->ctx->stream;
    if (!trans_a && trans_b)
        seq_gemm<false, true><<<grid, 256, 0, st>>>(m, n, k, a, lda, b, ldb, c, ldc, accumulate);
    else if (!trans_a && !trans_b)
        seq_gemm<false, false><<<grid, 256, 0, st>>>(m, n, k, a, lda, b, ldb, c, ldc, accumulate);
    else
        seq_gemm<true, false><<<grid, 256, 0, st>>>(m, n, k, a, lda, b, ldb, c, ldc, accumulate);
    REFG_LAUNCH(err, "seq_gemm");
    r->stats->flops_naive += 2.0 * m * n * k;
    return AC_OK;
}

__device__ inline float exp_f32(float x) { return (float)exp((double)x); }
__device__ inline float log_f32(float x) { return (float)log((double)x); }

struct rows_args {
    refg_geom g;
    int i0, jlo, cols;
    const uint8_t *mask;
    float *s; // the f32 sums of Q K^T; then S, then e, then P
    float scale_f;
    float *row_max; // (R) m, or NaN for a row without a visible key
};

// One CTA per row: S = round(fl(acc scale)) where visible (NaN marks a hidden pair),
// m = max_j S, then e_j = expf(S_j - m) in place (0 where S is -inf, -0 where hidden).
template <int T> __global__ void naive_scores(rows_args a)
{
    __shared__ float red[32];
    const int r = blockIdx.x;
    int c_lo, c_hi;
    refg_row_cols(a.g, a.i0, a.jlo, a.cols, r, &c_lo, &c_hi);
    float *srow = a.s + (size_t)r * a.cols;
    const uint8_t *mrow = a.mask ? a.mask + (size_t)r * a.cols : nullptr;
    float m = -INFINITY, seen = 0.0f;
    for (int c = threadIdx.x; c < a.cols; c += blockDim.x) {
        bool vis = c >= c_lo && c < c_hi && (!mrow || mrow[c]);
        // NaN marks a hidden pair (a score is never NaN: finite inputs, f32 sums);
        // a visible score may be -inf (f16 overflow): then l = 0 and P NaN, as on the CPU
        float s = vis ? refg_round<T>(__fmul_rn(srow[c], a.scale_f)) : NAN;
        srow[c] = s;
        m = s > m ? s : m;
        seen = vis ? 1.0f : seen;
    }
    const float m_row = refg_block_max(m, red);
    const bool any = refg_block_max(seen, red) != 0.0f;
    for (int c = threadIdx.x; c < a.cols; c += blockDim.x)
        srow[c] = isnan(srow[c]) ? -0.0f : srow[c] == -INFINITY ? 0.0f : exp_f32(__fsub_rn(srow[c], m_row));
    if (threadIdx.x == 0)
        a.row_max[r] = any ? m_row : NAN;
}

// One thread per row: l = sum_j e_j in order, LSE = m + logf(l) where l > 0.
__global__ void naive_row_sums(const float *e, int rows, int cols, const float *row_max, float *row_sum, double *lse)
{
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows)
        return;
    const float *erow = e + (size_t)r * cols;
    float l = 0.0f;
    for (int c = 0; c < cols; c++)
        l = __fadd_rn(l, erow[c]);
    row_sum[r] = l;
    const float m = row_max[r];
    // As the CPU's naive (ref/naive.c): l > 0 or LSE = -inf.  That covers a row without a visible key (m
    // NaN, l 0) and one whose scores overflowed (m = +inf, l NaN: -inf there too, not m + log l = NaN).
    lse[r] = l > 0.0f ? (double)__fadd_rn(m, log_f32(l)) : -INFINITY;
}

// P = round(e / l); a row without a visible key stays 0, and so does a hidden
// pair (e = -0, which exp never gives): the CPU skips hidden pairs, so one must
// not become NaN when l is 0 or NaN and reach dV = P^T dO.
template <int T> __global__ void naive_probs(float *e, int rows, int cols, const float *row_max, const float *row_sum)
{
    const size_t n = (size_t)rows * cols;
    for (size_t x = blockIdx.x * (size_t)blockDim.x + threadIdx.x; x < n; x += (size_t)gridDim.x * blockDim.x) {
        const int r = (int)(x / cols);
        const bool hidden = e[x] == 0.0f && signbit(e[x]);
        e[x] = isnan(row_max[r]) || hidden ? 0.0f : refg_round<T>(__fdiv_rn(e[x], row_sum[r]));
    }
}

// One thread per row: O = round(sum) into the f64 output; with the backward
// D = sum_c fl(dO O) in order from the rounded O.
template <int T>
__global__ void naive_out_rows(const float *sums, int rows, int d, double *o, const float *d_o, float *delta)
{
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows)
        return;
    float dsum = 0.0f;
    for (int c = 0; c < d; c++) {
        float x = refg_round<T>(sums[(size_t)r * d + c]);
        o[(size_t)r * d + c] = x;
        if (d_o)
            dsum = __fadd_rn(dsum, __fmul_rn(d_o[(size_t)r * d + c], x));
    }
    if (delta)
        delta[r] = dsum;
}

// dS = round(P (round(dP) - D)) on visible pairs, 0 elsewhere, in place of dP.
template <int T>
__global__ void naive_ds(refg_geom g, int i0, int jlo, int rows, int cols, const uint8_t *mask, const float *p,
                         float *dp, const float *delta)
{
    const size_t n = (size_t)rows * cols;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) {
        int r = (int)(e / cols), c = (int)(e % cols), c_lo, c_hi;
        refg_row_cols(g, i0, jlo, cols, r, &c_lo, &c_hi);
        bool vis = c >= c_lo && c < c_hi && (!mask || mask[e]);
        dp[e] = vis ? refg_round<T>(__fmul_rn(p[e], __fsub_rn(refg_round<T>(dp[e]), delta[r]))) : 0.0f;
    }
}

// out = round(fl(mul * sum)), widened: the naive dQ, dK (mul = scale) and dV (1).
template <int T> __global__ void naive_round(const float *sums, size_t n, float mul, double *out)
{
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x)
        out[e] = refg_round<T>(__fmul_rn(mul, sums[e]));
}

template <int T> int naive_forward(refg_run *r, const refg_block_view &v, ac_err *err)
{
    refg_group_bufs &g = r->gb;
    refg_block_bufs &bb = r->bb;
    cudaStream_t st = r->ctx->stream;
    const int d = v.d, rows = v.rows, cols = v.cols;
    const size_t row_at = (size_t)v.hl * r->p->seqlen_q + v.i0;
    REFG_TRY(gemm(r, false, true, rows, cols, d, g.q32 + v.q_at, d, g.k32 + v.kv_at, d, false, bb.n_s, cols, err));
    rows_args a = {r->geom, v.i0, v.jlo, cols, r->p->dense_mask ? bb.mask : nullptr, bb.n_s, r->scale_f, bb.n_max};
    naive_scores<T><<<rows, refg_row_threads(cols), 0, st>>>(a);
    REFG_LAUNCH(err, "naive_scores");
    // One warp a CTA: the rows' sequential sums spread over as many SMs as there are warps.
    naive_row_sums<<<(rows + 31) / 32, 32, 0, st>>>(bb.n_s, rows, cols, bb.n_max, bb.n_sum, g.n_lse + row_at);
    REFG_LAUNCH(err, "naive_row_sums");
    naive_probs<T><<<refg_grid((size_t)rows * cols), 256, 0, st>>>(bb.n_s, rows, cols, bb.n_max, bb.n_sum);
    REFG_LAUNCH(err, "naive_probs");
    REFG_TRY(gemm(r, false, false, rows, d, cols, bb.n_s, cols, g.v32 + v.kv_at, d, false, bb.n_part, d, err));
    naive_out_rows<T><<<(rows + 31) / 32, 32, 0, st>>>(bb.n_part, rows, d, g.n_o + v.q_at,
                                                       r->backward ? g.d_o32 + v.q_at : nullptr,
                                                       r->backward ? bb.n_delta : nullptr);
    REFG_LAUNCH(err, "naive_out_rows");
    return AC_OK;
}

template <int T> int naive_backward(refg_run *r, const refg_block_view &v, ac_err *err)
{
    refg_group_bufs &g = r->gb;
    refg_block_bufs &bb = r->bb;
    cudaStream_t st = r->ctx->stream;
    const int d = v.d, rows = v.rows, cols = v.cols;
    REFG_TRY(gemm(r, false, true, rows, cols, d, g.d_o32 + v.q_at, d, g.v32 + v.kv_at, d, false, bb.n_dp, cols, err));
    naive_ds<T><<<refg_grid((size_t)rows * cols), 256, 0, st>>>(
        r->geom, v.i0, v.jlo, rows, cols, r->p->dense_mask ? bb.mask : nullptr, bb.n_s, bb.n_dp, bb.n_delta);
    REFG_LAUNCH(err, "naive_ds");
    REFG_TRY(gemm(r, false, false, rows, d, cols, bb.n_dp, cols, g.k32 + v.kv_at, d, false, bb.n_part, d, err));
    naive_round<T>
        <<<refg_grid((size_t)rows * d), 256, 0, st>>>(bb.n_part, (size_t)rows * d, r->scale_f, g.n_dq + v.q_at);
    REFG_LAUNCH(err, "naive_round(dQ)");
    REFG_TRY(gemm(r, true, false, cols, d, rows, bb.n_dp, cols, g.q32 + v.q_at, d, true, g.n_dk_sum + v.kv_at, d, err));
    REFG_TRY(
        gemm(r, true, false, cols, d, rows, bb.n_s, cols, g.d_o32 + v.q_at, d, true, g.n_dv_sum + v.kv_at, d, err));
    return AC_OK;
}

template <int T> int naive_block(refg_run *r, const refg_block_view &v, ac_err *err)
{
    REFG_TRY(refg_stage(r, REF_GPU_STAGE_NAIVE_FWD, err));
    REFG_TRY(naive_forward<T>(r, v, err));
    if (!r->backward)
        return AC_OK;
    REFG_TRY(refg_stage(r, REF_GPU_STAGE_NAIVE_BWD, err));
    return naive_backward<T>(r, v, err);
}

template <int T> int naive_finish(refg_run *r, ac_err *err)
{
    size_t n = r->z.kv_elems;
    naive_round<T><<<refg_grid(n), 256, 0, r->ctx->stream>>>(r->gb.n_dk_sum, n, r->scale_f, r->gb.n_dk);
    REFG_LAUNCH(err, "naive_round(dK)");
    naive_round<T><<<refg_grid(n), 256, 0, r->ctx->stream>>>(r->gb.n_dv_sum, n, 1.0f, r->gb.n_dv);
    REFG_LAUNCH(err, "naive_round(dV)");
    return AC_OK;
}

} // namespace

int refg_block_naive(refg_run *r, const refg_block_view &v, ac_err *err)
{
    switch (r->t) {
    case AC_F16:
        return naive_block<AC_F16>(r, v, err);
    case AC_BF16:
        return naive_block<AC_BF16>(r, v, err);
    default:
        return naive_block<AC_F32>(r, v, err);
    }
}

int refg_group_finish_naive(refg_run *r, ac_err *err)
{
    switch (r->t) {
    case AC_F16:
        return naive_finish<AC_F16>(r, err);
    case AC_BF16:
        return naive_finish<AC_BF16>(r, err);
    default:
        return naive_finish<AC_F32>(r, err);
    }
}
