// ref/cuda/gpuref_groups.cu — the (batch, KV head) groups of a GPU reference
// call: the group's inputs go up as bit patterns (one copy per tensor, strided
// for BSHD) and are widened exactly on the device into compact (G, Nq, d) and
// (Nk, d) buffers — f64, their absolute values, and f32 for the naive; every
// query head's row blocks run (gpuref_block.cu); the group's outputs come down
// into the caller's arrays in the problem's layout (BSHD through one device
// permutation; through two pinned slots that worker threads scatter into the
// host arrays: transfer.c).
#include "../parallel.h"
#include "gpuref_run.cuh"

namespace
{

// (G, Nq, d) element e of the compact buffer from staging that holds the
// group's rows as copied: (G, Nq, d) for BHSD, (Nq, G, d) for BSHD.
template <int T>
__global__ void widen(const void *bits, size_t n, int group, int seqlen, int d, int bshd, double *x64, double *x_abs,
                      float *x32)
{
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) {
        size_t src = e;
        if (bshd) {
            size_t c = e % d, rest = e / d, i = rest % seqlen, hl = rest / seqlen;
            src = (i * group + hl) * d + c;
        }
        double x = refg_widen<T>(bits, src);
        x64[e] = x;
        if (x_abs)
            x_abs[e] = fabs(x);
        if (x32)
            x32[e] = (float)x; // exact: every f16, bf16 and f32 value is a float
    }
}

// (G, Nq, d) -> (Nq, G, d): the BSHD order of the group's rows.
__global__ void to_bshd(const double *src, size_t n, int group, int seqlen, int d, double *dst)
{
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) {
        size_t c = e % d, rest = e / d, i = rest % seqlen, hl = rest / seqlen;
        dst[(i * group + hl) * d + c] = src[e];
    }
}

__global__ void fill(double *x, size_t n, double value)
{
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x)
        x[e] = value;
}

// Where a group's slab starts in a host tensor, and how it is strided: refg_slab
// (gpuref_internal.h), in elements.
using slab = refg_slab;

// The group's query heads [h0, h0 + G) of batch b: contiguous in BHSD; in BSHD
// one row of G d elements per position, Hq d apart.
slab q_slab(const refg_run *r)
{
    const ac_problem *p = r->p;
    size_t d = p->head_dim, G = r->group, h0 = (size_t)r->kv_head * G, nq = p->seqlen_q;
    if (p->layout == AC_LAYOUT_BSHD)
        return {((size_t)r->b * nq * p->heads_q + h0) * d, (size_t)p->heads_q * d, G * d, nq};
    return {((size_t)r->b * p->heads_q + h0) * nq * d, G * nq * d, G * nq * d, 1};
}

slab kv_slab(const refg_run *r)
{
    const ac_problem *p = r->p;
    size_t d = p->head_dim, nk = p->seqlen_k;
    if (p->layout == AC_LAYOUT_BSHD)
        return {((size_t)r->b * nk * p->heads_kv + r->kv_head) * d, (size_t)p->heads_kv * d, d, nk};
    return {((size_t)r->b * p->heads_kv + r->kv_head) * nk * d, nk * d, nk * d, 1};
}

// One slab row is one plain copy: cudaMemcpy2D's pitches stop below 2^31 bytes,
// and a contiguous slab of a long sequence can pass that.
int copy_up(refg_run *r, const void *host, const slab &s, ac_err *err)
{
    size_t es = ac_dtype_size(r->t);
    if (s.height == 1) {
        REFG_CUDA(err,
                  cudaMemcpyAsync(r->gb.staging, (const char *)host + s.offset * es, s.width * es,
                                  cudaMemcpyHostToDevice, r->ctx->stream));
        return AC_OK;
    }
    REFG_CUDA(err,
              cudaMemcpy2DAsync(r->gb.staging, s.width * es, (const char *)host + s.offset * es, s.pitch * es,
                                s.width * es, s.height, cudaMemcpyHostToDevice, r->ctx->stream));
    return AC_OK;
}

int widen_into(refg_run *r, size_t n, int group, int seqlen, bool bshd, double *x64, double *x_abs, float *x32,
               ac_err *err)
{
    cudaStream_t st = r->ctx->stream;
    int d = r->p->head_dim, grid = refg_grid(n);
    switch (r->t) {
    case AC_F16:
        widen<AC_F16><<<grid, 256, 0, st>>>(r->gb.staging, n, group, seqlen, d, bshd, x64, x_abs, x32);
        break;
    case AC_BF16:
        widen<AC_BF16><<<grid, 256, 0, st>>>(r->gb.staging, n, group, seqlen, d, bshd, x64, x_abs, x32);
        break;
    default:
        widen<AC_F32><<<grid, 256, 0, st>>>(r->gb.staging, n, group, seqlen, d, bshd, x64, x_abs, x32);
        break;
    }
    REFG_LAUNCH(err, "widen");
    return AC_OK;
}

// Inputs of the group, widened; outputs zeroed, LSE rows -inf (padding rows
// and rows without a visible key keep these, as on the CPU).
int upload_group(refg_run *r, const void *const in[4], ac_err *err)
{
    refg_group_bufs &g = r->gb;
    const bool bshd = r->p->layout == AC_LAYOUT_BSHD;
    const size_t nq = r->z.q_elems, nkv = r->z.kv_elems;
    REFG_TRY(copy_up(r, in[0], q_slab(r), err));
    REFG_TRY(widen_into(r, nq, r->group, r->p->seqlen_q, bshd, g.q, g.q_abs, g.q32, err));
    if (r->backward) {
        REFG_TRY(copy_up(r, in[3], q_slab(r), err));
        REFG_TRY(widen_into(r, nq, r->group, r->p->seqlen_q, bshd, g.d_o, g.d_o_abs, g.d_o32, err));
    }
    REFG_TRY(copy_up(r, in[1], kv_slab(r), err));
    REFG_TRY(widen_into(r, nkv, 1, r->p->seqlen_k, false, g.k, g.k_abs, g.k32, err));
    REFG_TRY(copy_up(r, in[2], kv_slab(r), err));
    REFG_TRY(widen_into(r, nkv, 1, r->p->seqlen_k, false, g.v, g.v_abs, g.v32, err));
    cudaStream_t st = r->ctx->stream;
    double *q_out[] = {g.o, g.dq, g.e_o, g.e_dq, g.n_o, g.n_dq};
    for (double *x : q_out)
        if (x)
            REFG_CUDA(err, cudaMemsetAsync(x, 0, nq * sizeof(double), st));
    double *kv_out[] = {g.dk, g.dv, g.e_dk, g.e_dv};
    for (double *x : kv_out)
        if (x)
            REFG_CUDA(err, cudaMemsetAsync(x, 0, nkv * sizeof(double), st));
    float *sums[] = {g.n_dk_sum, g.n_dv_sum};
    for (float *x : sums)
        if (x)
            REFG_CUDA(err, cudaMemsetAsync(x, 0, nkv * sizeof(float), st));
    double *rows_zero[] = {g.delta, g.e_lse};
    for (double *x : rows_zero)
        if (x)
            REFG_CUDA(err, cudaMemsetAsync(x, 0, r->z.rows * sizeof(double), st));
    double *rows_ninf[] = {g.lse, g.n_lse};
    for (double *x : rows_ninf)
        if (x) {
            fill<<<refg_grid(r->z.rows), 256, 0, st>>>(x, r->z.rows, -INFINITY);
            REFG_LAUNCH(err, "fill");
        }
    return AC_OK;
}

int copy_down(refg_run *r, double *host, const double *dev, const slab &s, ac_err *err)
{
    if (s.height == 1) {
        REFG_CUDA(
            err,
            cudaMemcpyAsync(host + s.offset, dev, s.width * sizeof(double), cudaMemcpyDeviceToHost, r->ctx->stream));
        return AC_OK;
    }
    REFG_CUDA(err,
              cudaMemcpy2DAsync(host + s.offset, s.pitch * sizeof(double), dev, s.width * sizeof(double),
                                s.width * sizeof(double), s.height, cudaMemcpyDeviceToHost, r->ctx->stream));
    return AC_OK;
}

// The group's outputs: where each comes from on the device and lands on the
// host.  BSHD Q-like outputs are permuted into g.perm before their first chunk
// leaves (stream order keeps the previous output's copies ahead of it).
struct group_downloads {
    refg_run *r;
    refg_xfer x[16];
    const double *dev[16];
    bool to_bshd[16];
    int n;
};

void add_download(group_downloads &d, double *host, const double *dev, const slab &s, bool permute)
{
    if (!dev)
        return;
    d.x[d.n] = {host, s};
    d.dev[d.n] = dev;
    d.to_bshd[d.n++] = permute;
}

group_downloads downloads_of(refg_run *r, const ref_gpu_outputs *out)
{
    refg_group_bufs &g = r->gb;
    const ac_problem *p = r->p;
    group_downloads d = {};
    d.r = r;
    bool bshd = p->layout == AC_LAYOUT_BSHD;
    double *q_host[] = {out->o, out->dq, out->e_o, out->e_dq, out->naive_o, out->naive_dq};
    const double *q_dev[] = {g.o, g.dq, g.e_o, g.e_dq, g.n_o, g.n_dq};
    for (int a = 0; a < 6; a++)
        add_download(d, q_host[a], q_dev[a], q_slab(r), bshd);
    double *kv_host[] = {out->dk, out->dv, out->e_dk, out->e_dv, out->naive_dk, out->naive_dv};
    const double *kv_dev[] = {g.dk, g.dv, g.e_dk, g.e_dv, g.n_dk, g.n_dv};
    for (int a = 0; a < 6; a++)
        add_download(d, kv_host[a], kv_dev[a], kv_slab(r), false);
    size_t row0 = ((size_t)r->b * p->heads_q + (size_t)r->kv_head * r->group) * p->seqlen_q;
    slab rows = {row0, r->z.rows, r->z.rows, 1};
    double *row_host[] = {out->lse, out->delta, out->e_lse, out->naive_lse};
    const double *row_dev[] = {g.lse, g.delta, g.e_lse, g.n_lse};
    for (int a = 0; a < 4; a++)
        add_download(d, row_host[a], row_dev[a], rows, false);
    return d;
}

int fetch_chunk(void *ctx, int slot, const refg_chunk *c, ac_err *err)
{
    group_downloads &d = *(group_downloads *)ctx;
    refg_run *r = d.r;
    cudaStream_t st = r->ctx->stream;
    const double *src = d.dev[c->xfer];
    if (d.to_bshd[c->xfer]) {
        const size_t nq = r->z.q_elems;
        if (c->e0 == 0) {
            to_bshd<<<refg_grid(nq), 256, 0, st>>>(src, nq, r->group, r->p->seqlen_q, r->p->head_dim, r->gb.perm);
            REFG_LAUNCH(err, "to_bshd");
        }
        src = r->gb.perm;
    }
    REFG_CUDA(err,
              cudaMemcpyAsync(r->ctx->staging[slot], src + c->e0, c->n * sizeof(double), cudaMemcpyDeviceToHost, st));
    REFG_CUDA(err, cudaEventRecord(r->ctx->staged[slot], st));
    return AC_OK;
}

int wait_chunk(void *ctx, int slot, ac_err *err)
{
    group_downloads &d = *(group_downloads *)ctx;
    REFG_CUDA(err, cudaEventSynchronize(d.r->ctx->staged[slot])); // a device fault of the group shows here
    return AC_OK;
}

// Without pinned staging: one pageable copy per output, straight into the host array.
int download_pageable(group_downloads &d, ac_err *err)
{
    refg_run *r = d.r;
    cudaStream_t st = r->ctx->stream;
    for (int a = 0; a < d.n; a++) {
        const double *src = d.dev[a];
        if (d.to_bshd[a]) {
            const size_t nq = r->z.q_elems;
            to_bshd<<<refg_grid(nq), 256, 0, st>>>(src, nq, r->group, r->p->seqlen_q, r->p->head_dim, r->gb.perm);
            REFG_LAUNCH(err, "to_bshd");
            src = r->gb.perm;
        }
        REFG_TRY(copy_down(r, d.x[a].host, src, d.x[a].s, err));
    }
    REFG_CUDA(err, cudaStreamSynchronize(st)); // a device fault of the group shows here
    return AC_OK;
}

// Through the two pinned slots, the host side scattered by every worker
// (transfer.c): the copies run at the link's rate and the first touch of the
// host arrays is spread over the cores.
int download_group(refg_run *r, const ref_gpu_outputs *out, ac_err *err)
{
    group_downloads d = downloads_of(r, out);
    if (!r->ctx->staging[0])
        return download_pageable(d, err);
    int workers = 1;
    if (ref_thread_count(&workers, nullptr) != AC_OK)
        workers = 1;
    refg_pipe pipe = {{r->ctx->staging[0], r->ctx->staging[1]}, r->chunk_elems, fetch_chunk, wait_chunk, &d};
    REFG_TRY(refg_download(d.x, d.n, &pipe, workers, err));
    REFG_CUDA(err, cudaStreamSynchronize(r->ctx->stream));
    return AC_OK;
}

// The dense mask's rows [i0, i0 + rows), keys [jlo, jlo + cols) of head h,
// packed (rows, cols) into the block's mask buffer.
int upload_mask(refg_run *r, int h, int i0, int rows, int jlo, int cols, ac_err *err)
{
    const ac_problem *p = r->p;
    size_t mb = p->mask_batch == 1 ? 0 : (size_t)r->b, mh = p->mask_heads == 1 ? 0 : (size_t)h;
    const uint8_t *src = p->dense_mask + ((mb * p->mask_heads + mh) * p->seqlen_q + i0) * p->seqlen_k + jlo;
    REFG_CUDA(err,
              cudaMemcpy2DAsync(r->bb.mask, (size_t)cols, src, (size_t)p->seqlen_k, (size_t)cols, (size_t)rows,
                                cudaMemcpyHostToDevice, r->ctx->stream));
    return AC_OK;
}

// Every row block of query head hl: the keys the block can see, from the
// same rule the CPU uses (ac_visible_range), and the block itself.
int run_head(refg_run *r, int hl, ac_err *err)
{
    const int nq = r->geom.nq, h = r->kv_head * r->group + hl;
    for (int i0 = 0; i0 < nq; i0 += r->block_rows) {
        int i1 = i0 + r->block_rows < nq ? i0 + r->block_rows : nq;
        int jlo = r->geom.nk, jhi = 0;
        for (int i = i0; i < i1; i++) {
            int lo, hi;
            refg_visible_range(r->geom, i, &lo, &hi);
            if (hi <= lo)
                continue;
            jlo = lo < jlo ? lo : jlo;
            jhi = hi > jhi ? hi : jhi;
        }
        if (jhi <= jlo)
            continue; // no row sees a key: the initial O = 0, LSE = -inf stand
        if (jhi - jlo > r->block_cols)
            return ac_fail(err, AC_ERR_ENV, "GPU reference: internal: block keys [%d, %d) exceed the plan's %d", jlo,
                           jhi, r->block_cols);
        if (r->p->dense_mask)
            REFG_TRY(upload_mask(r, h, i0, i1 - i0, jlo, jhi - jlo, err));
        REFG_TRY(refg_block(r, hl, i0, i1, jlo, jhi, err));
        r->stats->blocks++;
    }
    return AC_OK;
}

} // namespace

int refg_run_groups(refg_run *r, const void *const in[4], const ref_gpu_outputs *out, ac_err *err)
{
    const ac_problem *p = r->p;
    r->group = p->heads_q / p->heads_kv;
    for (int b = 0; b < p->batch; b++)
        for (int kv_head = 0; kv_head < p->heads_kv; kv_head++) {
            r->b = b;
            r->kv_head = kv_head;
            r->geom = {ac_seqlen_q_of(p, b),
                       ac_seqlen_k_of(p, b),
                       p->head_dim,
                       p->windowed ? 1 : 0,
                       p->window_left,
                       p->window_right,
                       p->align == AC_ALIGN_BOTTOM_RIGHT ? 1 : 0};
            REFG_TRY(refg_stage(r, REF_GPU_STAGE_UPLOAD, err));
            REFG_TRY(upload_group(r, in, err));
            for (int hl = 0; hl < r->group; hl++)
                REFG_TRY(run_head(r, hl, err));
            REFG_TRY(refg_stage(r, REF_GPU_STAGE_DOWNLOAD, err));
            REFG_TRY(refg_group_finish(r, err));
            REFG_TRY(download_group(r, out, err));
        }
    return AC_OK;
}
