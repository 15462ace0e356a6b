// ref/cuda/gpuref_block.cu — one block of query rows of the GPU reference: the
// fp64 forward and backward, the error-scale weights and products, and the
// naive baseline, for rows [i0, i1) of one query head and the keys [jlo, jhi)
// they can see.  Every row of a block sees all its visible keys, so a row's
// LSE and O are final when its forward is done and its backward follows at
// once from the same P: S is computed once per block, never recomputed.
//
// fp64 (ref/forward.c, backward.c, scales.c):
//   S = scale Q K^T, Graw = |Q||K|^T                       (DGEMM)
//   fwd_rows: mask, online max/sum, LSE = m + log l, P = exp(S - LSE),
//             g_i = sum_j P G (G = d |scale| Graw), e_lse, the E_O weights
//   O = P V, E_O = W |V|                                    (DGEMM)
//   delta_rows: D = sum dO O, Dhat = sum |dO||O|
//   dP = dO V^T, dPhat = |dO||V|^T                          (DGEMM)
//   bwd_rows: R_i, dS = P (dP - D), the dV and dQ/dK weights
//   dQ = scale dS K, dK += scale dS^T Q, dV += P^T dO, E_dV += W^T |dO|,
//   E_dQ = |scale| W' |K|, E_dK += |scale| W'^T |Q|         (DGEMM)
// The naive baseline of the same block: gpuref_naive.cu.
#include "gpuref_run.cuh"

namespace
{

// ---- fp64 rows ------------------------------------------------------------

struct fwd_args {
    refg_geom g;
    int i0, jlo, cols;
    const uint8_t *mask; // (R, C) or NULL
    double *s; // in S, out P
    const double *graw; // NULL without scales
    double *w; // E_O weights, NULL without scales
    double *lse, *e_lse, *g_row; // per row of the block
    double gscale, scale_abs, rho, tau;
};

// One CTA per row.  The max and the sums in one pass (online softmax: each
// thread rescales its partial sums when its maximum grows), then P and W.
__global__ void fwd_rows(fwd_args a)
{
    __shared__ double red[32];
    const int r = blockIdx.x;
    int c_lo, c_hi;
    refg_row_cols(a.g, a.i0, a.jlo, a.cols, r, &c_lo, &c_hi);
    double *srow = a.s + (size_t)r * a.cols;
    const double *grow = a.graw ? a.graw + (size_t)r * a.cols : nullptr;
    const uint8_t *mrow = a.mask ? a.mask + (size_t)r * a.cols : nullptr;
    double m = -INFINITY, l = 0.0, lg = 0.0, gmax = -1.0;
    for (int c = c_lo + threadIdx.x; c < c_hi; c += blockDim.x) {
        if (mrow && !mrow[c])
            continue;
        double s = srow[c], gr = grow ? grow[c] : 0.0;
        if (s > m) {
            double shrink = exp(m - s); // 0 while m is -inf
            l *= shrink;
            lg *= shrink;
            m = s;
        }
        double e = exp(s - m);
        l += e;
        lg += e * gr;
        gmax = gr > gmax ? gr : gmax;
    }
    const double m_row = refg_block_max(m, red);
    const double shrink = m == -INFINITY ? 0.0 : exp(m - m_row);
    const double l_row = refg_block_sum(l * shrink, red);
    const double lg_row = refg_block_sum(lg * shrink, red);
    const double gmax_row = refg_block_max(gmax, red);
    const bool any = m_row != -INFINITY;
    const double lse = any ? m_row + log(l_row) : -INFINITY;
    const double g_i = any ? a.gscale * lg_row / l_row : 0.0;
    if (threadIdx.x == 0) {
        a.lse[r] = lse;
        a.g_row[r] = g_i;
        if (a.e_lse)
            a.e_lse[r] = any && isfinite(lse) ? 1.0 + fabs(lse) + (a.g.head_dim + 2.0) * a.scale_abs * gmax_row : 0.0;
    }
    double *wrow = a.w ? a.w + (size_t)r * a.cols : nullptr;
    for (int c = threadIdx.x; c < a.cols; c += blockDim.x) {
        bool vis = any && c >= c_lo && c < c_hi && (!mrow || mrow[c]);
        double p = vis ? exp(srow[c] - lse) : 0.0;
        srow[c] = p;
        if (wrow)
            wrow[c] = vis ? p * (1.0 + a.rho * (a.gscale * grow[c] + g_i)) + a.tau : 0.0;
    }
}

// One warp per row: D_i = sum_c dO O and Dhat_i = sum_c |dO||O|.
__global__ void delta_rows(const double *o, const double *d_o, int rows, int d, double *delta, double *dhat)
{
    const int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (r >= rows)
        return;
    double sum = 0.0, sum_abs = 0.0;
    for (int c = threadIdx.x % 32; c < d; c += 32) {
        double x = d_o[(size_t)r * d + c] * o[(size_t)r * d + c];
        sum += x;
        sum_abs += fabs(x);
    }
    sum = refg_warp_sum(sum);
    sum_abs = refg_warp_sum(sum_abs);
    if (threadIdx.x % 32 == 0) {
        delta[r] = sum;
        dhat[r] = sum_abs;
    }
}

struct bwd_args {
    refg_geom g;
    int i0, jlo, cols;
    const uint8_t *mask;
    const double *p, *graw;
    double *dp; // in dP, out dS
    double *dph; // in dPhat, out the dQ/dK weights (NULL without scales)
    double *wv; // out the dV weights (NULL without scales)
    const double *lse, *delta, *dhat, *g_row;
    double gscale, rho, tau;
};

// One CTA per row: dS, and with the scales R_i = sum_j P r dPhat, then the
// dV weights P (1 + r) + tau and the dQ/dK weights P ((1 + r)(dPhat + Dhat) + R) + tau,
// r = rho (G + g_i + |LSE_i|).
__global__ void bwd_rows(bwd_args a)
{
    __shared__ double red[32];
    const int r = blockIdx.x;
    int c_lo, c_hi;
    refg_row_cols(a.g, a.i0, a.jlo, a.cols, r, &c_lo, &c_hi);
    const size_t at = (size_t)r * a.cols;
    const uint8_t *mrow = a.mask ? a.mask + at : nullptr;
    const double lse = a.lse[r], d_i = a.delta[r], dhat = a.dhat[r], g_i = a.g_row[r];
    const bool any = lse != -INFINITY;
    const double lse_mag = isfinite(lse) ? fabs(lse) : 0.0;
    double r_row = 0.0;
    if (a.dph && any) {
        double part = 0.0;
        for (int c = c_lo + threadIdx.x; c < c_hi; c += blockDim.x)
            if (!mrow || mrow[c])
                part += a.p[at + c] * a.rho * (a.gscale * a.graw[at + c] + g_i + lse_mag) * a.dph[at + c];
        r_row = refg_block_sum(part, red);
    }
    for (int c = threadIdx.x; c < a.cols; c += blockDim.x) {
        const double p = a.p[at + c];
        a.dp[at + c] = p != 0.0 ? p * (a.dp[at + c] - d_i) : 0.0; // masked: an exact 0
        if (!a.dph)
            continue;
        const bool vis = any && c >= c_lo && c < c_hi && (!mrow || mrow[c]);
        const double rel = a.rho * (a.gscale * a.graw[at + c] + g_i + lse_mag);
        a.wv[at + c] = vis ? p * (1.0 + rel) + a.tau : 0.0;
        a.dph[at + c] = vis ? p * ((1.0 + rel) * (a.dph[at + c] + dhat) + r_row) + a.tau : 0.0;
    }
}

// E's rounding floor: tau on every element that is not an exact zero (scales.c).
__global__ void add_floor(double *e, size_t n, double tau)
{
    for (size_t x = blockIdx.x * (size_t)blockDim.x + threadIdx.x; x < n; x += (size_t)gridDim.x * blockDim.x)
        if (e[x] > 0.0)
            e[x] += tau;
}

// ---- the stages of a block ---------------------------------------------------

int block_forward(refg_run *r, const refg_block_view &v, ac_err *err)
{
    refg_group_bufs &g = r->gb;
    refg_block_bufs &bb = r->bb;
    ref_gpu_stats *st = r->stats;
    const int d = v.d;
    REFG_TRY(refg_stage(r, REF_GPU_STAGE_FORWARD, err));
    REFG_TRY(refg_dgemm(r, false, true, v.rows, v.cols, d, r->scale, g.q + v.q_at, d, g.k + v.kv_at, d, 0.0, bb.s,
                        v.cols, &st->flops_attention, err));
    if (r->scales) {
        REFG_TRY(refg_stage(r, REF_GPU_STAGE_SCALES, err));
        REFG_TRY(refg_dgemm(r, false, true, v.rows, v.cols, d, 1.0, g.q_abs + v.q_at, d, g.k_abs + v.kv_at, d, 0.0,
                            bb.graw, v.cols, &st->flops_scales, err));
        REFG_TRY(refg_stage(r, REF_GPU_STAGE_FORWARD, err));
    }
    const size_t row_at = (size_t)v.hl * r->p->seqlen_q + v.i0;
    fwd_args a = {r->geom,
                  v.i0,
                  v.jlo,
                  v.cols,
                  r->p->dense_mask ? bb.mask : nullptr,
                  bb.s,
                  r->scales ? bb.graw : nullptr,
                  r->scales ? bb.w : nullptr,
                  g.lse + row_at,
                  r->scales ? g.e_lse + row_at : nullptr,
                  bb.g_row,
                  r->gscale,
                  r->scale_abs,
                  r->rho,
                  r->tau};
    fwd_rows<<<v.rows, refg_row_threads(v.cols), 0, r->ctx->stream>>>(a);
    REFG_LAUNCH(err, "fwd_rows");
    REFG_TRY(refg_dgemm(r, false, false, v.rows, d, v.cols, 1.0, bb.s, v.cols, g.v + v.kv_at, d, 0.0, g.o + v.q_at, d,
                        &st->flops_attention, err));
    if (r->scales) {
        REFG_TRY(refg_stage(r, REF_GPU_STAGE_SCALES, err));
        REFG_TRY(refg_dgemm(r, false, false, v.rows, d, v.cols, 1.0, bb.w, v.cols, g.v_abs + v.kv_at, d, 0.0,
                            g.e_o + v.q_at, d, &st->flops_scales, err));
    }
    return AC_OK;
}

int block_backward(refg_run *r, const refg_block_view &v, ac_err *err)
{
    refg_group_bufs &g = r->gb;
    refg_block_bufs &bb = r->bb;
    ref_gpu_stats *st = r->stats;
    const int d = v.d;
    const size_t row_at = (size_t)v.hl * r->p->seqlen_q + v.i0;
    REFG_TRY(refg_stage(r, REF_GPU_STAGE_BACKWARD, err));
    delta_rows<<<(v.rows + 7) / 8, 256, 0, r->ctx->stream>>>(g.o + v.q_at, g.d_o + v.q_at, v.rows, d, g.delta + row_at,
                                                             bb.dhat);
    REFG_LAUNCH(err, "delta_rows");
    REFG_TRY(refg_dgemm(r, false, true, v.rows, v.cols, d, 1.0, g.d_o + v.q_at, d, g.v + v.kv_at, d, 0.0, bb.dp, v.cols,
                        &st->flops_attention, err));
    if (r->scales) {
        REFG_TRY(refg_stage(r, REF_GPU_STAGE_SCALES, err));
        REFG_TRY(refg_dgemm(r, false, true, v.rows, v.cols, d, 1.0, g.d_o_abs + v.q_at, d, g.v_abs + v.kv_at, d, 0.0,
                            bb.dph, v.cols, &st->flops_scales, err));
        REFG_TRY(refg_stage(r, REF_GPU_STAGE_BACKWARD, err));
    }
    bwd_args a = {r->geom,
                  v.i0,
                  v.jlo,
                  v.cols,
                  r->p->dense_mask ? bb.mask : nullptr,
                  bb.s,
                  r->scales ? bb.graw : nullptr,
                  bb.dp,
                  r->scales ? bb.dph : nullptr,
                  r->scales ? bb.w : nullptr,
                  g.lse + row_at,
                  g.delta + row_at,
                  bb.dhat,
                  bb.g_row,
                  r->gscale,
                  r->rho,
                  r->tau};
    bwd_rows<<<v.rows, refg_row_threads(v.cols), 0, r->ctx->stream>>>(a);
    REFG_LAUNCH(err, "bwd_rows");
    REFG_TRY(refg_dgemm(r, false, false, v.rows, d, v.cols, r->scale, bb.dp, v.cols, g.k + v.kv_at, d, 0.0,
                        g.dq + v.q_at, d, &st->flops_attention, err));
    REFG_TRY(refg_dgemm(r, true, false, v.cols, d, v.rows, r->scale, bb.dp, v.cols, g.q + v.q_at, d, 1.0,
                        g.dk + v.kv_at, d, &st->flops_attention, err));
    REFG_TRY(refg_dgemm(r, true, false, v.cols, d, v.rows, 1.0, bb.s, v.cols, g.d_o + v.q_at, d, 1.0, g.dv + v.kv_at, d,
                        &st->flops_attention, err));
    if (!r->scales)
        return AC_OK;
    REFG_TRY(refg_stage(r, REF_GPU_STAGE_SCALES, err));
    REFG_TRY(refg_dgemm(r, true, false, v.cols, d, v.rows, 1.0, bb.w, v.cols, g.d_o_abs + v.q_at, d, 1.0,
                        g.e_dv + v.kv_at, d, &st->flops_scales, err));
    REFG_TRY(refg_dgemm(r, false, false, v.rows, d, v.cols, r->scale_abs, bb.dph, v.cols, g.k_abs + v.kv_at, d, 0.0,
                        g.e_dq + v.q_at, d, &st->flops_scales, err));
    REFG_TRY(refg_dgemm(r, true, false, v.cols, d, v.rows, r->scale_abs, bb.dph, v.cols, g.q_abs + v.q_at, d, 1.0,
                        g.e_dk + v.kv_at, d, &st->flops_scales, err));
    return AC_OK;
}

} // namespace

int refg_block(refg_run *r, int hl, int i0, int i1, int jlo, int jhi, ac_err *err)
{
    refg_block_view v = {hl,
                         i0,
                         i1 - i0,
                         jlo,
                         jhi - jlo,
                         r->p->head_dim,
                         ((size_t)hl * r->p->seqlen_q + i0) * r->p->head_dim,
                         (size_t)jlo * r->p->head_dim};
    REFG_TRY(block_forward(r, v, err));
    if (r->backward)
        REFG_TRY(block_backward(r, v, err));
    return r->naive ? refg_block_naive(r, v, err) : AC_OK;
}

int refg_group_finish(refg_run *r, ac_err *err)
{
    refg_group_bufs &g = r->gb;
    cudaStream_t stream = r->ctx->stream;
    if (r->scales) {
        double *q_like[] = {g.e_o, r->backward ? g.e_dq : nullptr};
        double *kv_like[] = {r->backward ? g.e_dk : nullptr, r->backward ? g.e_dv : nullptr};
        for (double *e : q_like)
            if (e) {
                add_floor<<<refg_grid(r->z.q_elems), 256, 0, stream>>>(e, r->z.q_elems, r->tau);
                REFG_LAUNCH(err, "add_floor");
            }
        for (double *e : kv_like)
            if (e) {
                add_floor<<<refg_grid(r->z.kv_elems), 256, 0, stream>>>(e, r->z.kv_elems, r->tau);
                REFG_LAUNCH(err, "add_floor");
            }
    }
    return r->naive && r->backward ? refg_group_finish_naive(r, err) : AC_OK;
}
