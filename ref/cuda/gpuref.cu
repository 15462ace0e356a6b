// ref/cuda/gpuref.cu — ref_gpu_reference: the GPU reference of one case (see
// ref/ref_gpu.h).  This file owns the call: validation, the memory plan and
// the allocations, and the loop over (batch, KV head) groups — copy the
// group's inputs up as bit patterns and widen them, run every query head's row
// blocks (gpuref_block.cu), finish the group and copy its outputs down into the
// caller's arrays in the problem's layout.
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <mutex>

#include "gpuref_run.cuh"

// ---- the device and the per-thread context -----------------------------------

int ref_gpu_available(ac_err *why)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess)
        return ac_fail(why, AC_ERR_ENV, "no CUDA device: cudaGetDeviceCount failed: %s", cudaGetErrorString(e));
    if (n == 0)
        return ac_fail(why, AC_ERR_ENV, "no CUDA device");
    int device = 0, major = 0, minor = 0;
    REFG_CUDA(why, cudaGetDevice(&device));
    REFG_CUDA(why, cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    REFG_CUDA(why, cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    if (major < 8)
        return ac_fail(why, AC_ERR_ENV,
                       "CUDA device %d has compute capability %d.%d; the GPU reference is "
                       "built for >= 8.0",
                       device, major, minor);
    return AC_OK;
}

namespace
{

// A context made by ref_gpu_warm_up, waiting for the first thread without one.
std::mutex spare_lock;
refg_ctx *spare = nullptr;

void destroy_context(refg_ctx *c)
{
    // Teardown after a failed creation: errors here add nothing to the one reported.
    for (int s = 0; s < 2; s++) {
        if (c->staged[s])
            (void)cudaEventDestroy(c->staged[s]);
        if (c->staging[s])
            (void)cudaFreeHost(c->staging[s]);
    }
    if (c->blas)
        (void)cublasDestroy(c->blas);
    if (c->stream)
        (void)cudaStreamDestroy(c->stream);
    delete c;
}

// The pinned slots; without them (cudaMallocHost refused) the downloads go
// through pageable copies, slower but the same bytes.
void make_staging(refg_ctx *c)
{
    for (int s = 0; s < 2; s++) {
        void *slot = nullptr;
        if (cudaMallocHost(&slot, REFG_STAGING_BYTES) != cudaSuccess ||
            cudaEventCreateWithFlags(&c->staged[s], cudaEventDisableTiming) != cudaSuccess) {
            (void)cudaGetLastError(); // not sticky: clear it
            if (slot)
                (void)cudaFreeHost(slot);
            for (int t = 0; t < s; t++) {
                (void)cudaEventDestroy(c->staged[t]);
                (void)cudaFreeHost(c->staging[t]);
            }
            c->staging[0] = c->staging[1] = nullptr;
            c->staged[0] = c->staged[1] = nullptr;
            return;
        }
        c->staging[s] = (double *)slot;
    }
}

int fill_context(refg_ctx *c, ac_err *err)
{
    REFG_TRY(ref_gpu_available(err));
    cudaDeviceProp prop;
    REFG_CUDA(err, cudaGetDevice(&c->device));
    REFG_CUDA(err, cudaGetDeviceProperties(&prop, c->device));
    snprintf(c->name, sizeof c->name, "%.100s (sm_%d%d)", prop.name, prop.major, prop.minor);
    REFG_CUDA(err, cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    REFG_CUBLAS(err, cublasCreate(&c->blas));
    REFG_CUBLAS(err, cublasSetStream(c->blas, c->stream));
    // Default math: DGEMM in IEEE fp64, SGEMM in FP32 FMAs; no TF32 and no
    // emulation (both opt-in modes), whatever a previous user set.
    REFG_CUBLAS(err, cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH));
    make_staging(c);
    return AC_OK;
}

int make_context(refg_ctx **out, ac_err *err)
{
    refg_ctx *c = new refg_ctx();
    int st = fill_context(c, err);
    if (st != AC_OK) {
        destroy_context(c);
        return st;
    }
    *out = c;
    return AC_OK;
}

} // namespace

int refg_context(refg_ctx **out, ac_err *err)
{
    static thread_local refg_ctx *mine = nullptr;
    if (!mine) {
        {
            std::lock_guard<std::mutex> hold(spare_lock);
            mine = spare;
            spare = nullptr;
        }
        if (!mine)
            REFG_TRY(make_context(&mine, err));
    }
    *out = mine;
    return AC_OK;
}

int ref_gpu_warm_up(ac_err *err)
{
    {
        std::lock_guard<std::mutex> hold(spare_lock);
        if (spare)
            return AC_OK; // one is waiting already
    }
    refg_ctx *c;
    REFG_TRY(make_context(&c, err));
    int st = refg_gemm_warm(c, err);
    std::lock_guard<std::mutex> hold(spare_lock);
    if (st != AC_OK || spare) { // failed, or another warm-up won the race
        destroy_context(c);
        return st;
    }
    spare = c;
    return AC_OK;
}

int refg_grid(size_t n)
{
    size_t blocks = (n + 255) / 256;
    return blocks < 65536 ? (int)(blocks ? blocks : 1) : 65536;
}

double refg_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int refg_stage(refg_run *r, int stage, ac_err *err)
{
    if (stage == r->stage)
        return AC_OK;
    if (r->timing) {
        REFG_CUDA(err, cudaStreamSynchronize(r->ctx->stream));
        double now = refg_now();
        if (r->stage >= 0)
            r->stats->seconds[r->stage] += now - r->stage_t0;
        r->stage_t0 = now;
    }
    r->stage = stage;
    return AC_OK;
}

// ---- allocations ----------------------------------------------------------------

namespace
{

template <typename P>
int dev_alloc(refg_run *r, P **ptr, size_t elems, size_t elem_bytes, const char *what, ac_err *err)
{
    *ptr = nullptr;
    size_t bytes = elems * elem_bytes;
    if (r->n_allocs == REFG_MAX_ALLOCS)
        return ac_fail(err, AC_ERR_ENV, "GPU reference: more than %d device buffers", REFG_MAX_ALLOCS);
    void *dev = nullptr;
    cudaError_t e = cudaMalloc(&dev, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); // an allocation failure is not sticky: clear it
        return ac_fail(err, AC_ERR_ENV,
                       "GPU reference: cudaMalloc(%zu bytes) for %s failed: %s (%.3g GiB "
                       "allocated before it)",
                       bytes, what, cudaGetErrorString(e), (double)r->bytes / (1 << 30));
    }
    r->allocs[r->n_allocs++] = dev;
    r->bytes += bytes;
    *ptr = (P *)dev;
    return AC_OK;
}

void free_all(refg_run *r)
{
    for (int a = 0; a < r->n_allocs; a++)
        (void)cudaFree(r->allocs[a]); // a failure here means a fault already reported
    r->n_allocs = 0;
}

// A buffer of the group when `want`, else NULL.
template <typename P> int maybe(refg_run *r, bool want, P **ptr, size_t elems, const char *what, ac_err *err)
{
    *ptr = nullptr;
    return want ? dev_alloc(r, ptr, elems, sizeof(P), what, err) : AC_OK;
}

int alloc_group(refg_run *r, ac_err *err)
{
    refg_group_bufs &g = r->gb;
    const bool bwd = r->backward, sc = r->scales, nv = r->naive;
    const size_t q = r->z.q_elems, kv = r->z.kv_elems, rows = r->z.rows;
    REFG_TRY(dev_alloc(r, &g.q, q, 8, "Q", err));
    REFG_TRY(dev_alloc(r, &g.o, q, 8, "O", err));
    REFG_TRY(maybe(r, bwd, &g.d_o, q, "dO", err));
    REFG_TRY(maybe(r, bwd, &g.dq, q, "dQ", err));
    REFG_TRY(maybe(r, sc, &g.q_abs, q, "|Q|", err));
    REFG_TRY(maybe(r, sc, &g.e_o, q, "E_O", err));
    REFG_TRY(maybe(r, sc && bwd, &g.d_o_abs, q, "|dO|", err));
    REFG_TRY(maybe(r, sc && bwd, &g.e_dq, q, "E_dQ", err));
    REFG_TRY(maybe(r, nv, &g.n_o, q, "naive O", err));
    REFG_TRY(maybe(r, nv && bwd, &g.n_dq, q, "naive dQ", err));
    REFG_TRY(maybe(r, nv, &g.q32, q, "f32 Q", err));
    REFG_TRY(maybe(r, nv && bwd, &g.d_o32, q, "f32 dO", err));
    REFG_TRY(dev_alloc(r, &g.k, kv, 8, "K", err));
    REFG_TRY(dev_alloc(r, &g.v, kv, 8, "V", err));
    REFG_TRY(maybe(r, bwd, &g.dk, kv, "dK", err));
    REFG_TRY(maybe(r, bwd, &g.dv, kv, "dV", err));
    REFG_TRY(maybe(r, sc, &g.k_abs, kv, "|K|", err));
    REFG_TRY(maybe(r, sc, &g.v_abs, kv, "|V|", err));
    REFG_TRY(maybe(r, sc && bwd, &g.e_dk, kv, "E_dK", err));
    REFG_TRY(maybe(r, sc && bwd, &g.e_dv, kv, "E_dV", err));
    REFG_TRY(maybe(r, nv && bwd, &g.n_dk, kv, "naive dK", err));
    REFG_TRY(maybe(r, nv && bwd, &g.n_dv, kv, "naive dV", err));
    REFG_TRY(maybe(r, nv, &g.k32, kv, "f32 K", err));
    REFG_TRY(maybe(r, nv, &g.v32, kv, "f32 V", err));
    REFG_TRY(maybe(r, nv && bwd, &g.n_dk_sum, kv, "naive dK sums", err));
    REFG_TRY(maybe(r, nv && bwd, &g.n_dv_sum, kv, "naive dV sums", err));
    REFG_TRY(dev_alloc(r, &g.lse, rows, 8, "LSE", err));
    REFG_TRY(maybe(r, bwd, &g.delta, rows, "D", err));
    REFG_TRY(maybe(r, sc, &g.e_lse, rows, "E_lse", err));
    REFG_TRY(maybe(r, nv, &g.n_lse, rows, "naive LSE", err));
    size_t largest = q > kv ? q : kv;
    REFG_TRY(dev_alloc(r, &g.staging, largest, ac_dtype_size(r->t), "input staging", err));
    return maybe(r, r->p->layout == AC_LAYOUT_BSHD, &g.perm, q, "BSHD staging", err);
}

int alloc_block(refg_run *r, ac_err *err)
{
    refg_block_bufs &bb = r->bb;
    const bool bwd = r->backward, sc = r->scales, nv = r->naive;
    const size_t rc = (size_t)r->block_rows * r->block_cols, rows = (size_t)r->block_rows;
    REFG_TRY(dev_alloc(r, &bb.s, rc, 8, "S block", err));
    REFG_TRY(maybe(r, sc, &bb.graw, rc, "|Q||K| block", err));
    REFG_TRY(maybe(r, sc, &bb.w, rc, "weights block", err));
    REFG_TRY(maybe(r, bwd, &bb.dp, rc, "dP block", err));
    REFG_TRY(maybe(r, bwd && sc, &bb.dph, rc, "|dO||V| block", err));
    REFG_TRY(maybe(r, nv, &bb.n_s, rc, "naive S block", err));
    REFG_TRY(maybe(r, nv && bwd, &bb.n_dp, rc, "naive dP block", err));
    REFG_TRY(maybe(r, nv, &bb.n_part, rows * r->p->head_dim, "naive O/dQ block", err));
    REFG_TRY(maybe(r, r->p->dense_mask != nullptr, &bb.mask, rc, "mask block", err));
    REFG_TRY(dev_alloc(r, &bb.g_row, rows, 8, "g_i", err));
    REFG_TRY(dev_alloc(r, &bb.dhat, rows, 8, "Dhat", err));
    REFG_TRY(dev_alloc(r, &bb.n_delta, rows, 4, "naive D", err));
    REFG_TRY(dev_alloc(r, &bb.n_max, rows, 4, "naive m", err));
    return dev_alloc(r, &bb.n_sum, rows, 4, "naive l", err);
}

} // namespace

// ---- validation and the call ------------------------------------------------------

namespace
{

int check_outputs(const ac_problem *p, ac_dtype t, const void *q, const void *k, const void *v, const void *d_o,
                  const ref_gpu_outputs *out, ac_err *err)
{
    REFG_TRY(ac_problem_validate(p, SIZE_MAX, err)); /* device memory is checked by the plan */
    REFG_TRY(ref_gpu_supports(p, err)); /* no variant yet: the CPU tier has them */
    if ((unsigned)t >= AC_DTYPE_COUNT)
        return ac_fail(err, AC_ERR_INPUT, "ref_gpu_reference: unknown dtype %d", (int)t);
    if (!q || !k || !v || !out || !out->o || !out->lse)
        return ac_fail(err, AC_ERR_INPUT, "ref_gpu_reference: NULL input or output (q, k, v, o and lse are required)");
    if (!out->e_o != !out->e_lse)
        return ac_fail(err, AC_ERR_INPUT, "ref_gpu_reference: e_o and e_lse go together (both or neither)");
    if (!out->naive_o != !out->naive_lse)
        return ac_fail(err, AC_ERR_INPUT, "ref_gpu_reference: naive_o and naive_lse go together (both or neither)");
    if (!d_o)
        return AC_OK;
    if (!out->dq || !out->dk || !out->dv || !out->delta)
        return ac_fail(err, AC_ERR_INPUT, "ref_gpu_reference: d_o given but dq, dk, dv or delta is NULL");
    if (out->e_o && !(out->e_dq && out->e_dk && out->e_dv))
        return ac_fail(err, AC_ERR_INPUT,
                       "ref_gpu_reference: the backward scales e_dq, e_dk, e_dv are needed with e_o");
    if (out->naive_o && !(out->naive_dq && out->naive_dk && out->naive_dv))
        return ac_fail(err, AC_ERR_INPUT, "ref_gpu_reference: naive_dq, naive_dk, naive_dv are needed with naive_o");
    return AC_OK;
}

int plan_call(refg_run *r, const ref_gpu_opts *opts, ac_err *err)
{
    size_t free_bytes = 0, total_bytes = 0;
    REFG_CUDA(err, cudaMemGetInfo(&free_bytes, &total_bytes));
    size_t margin = total_bytes / 32 > ((size_t)512 << 20) ? total_bytes / 32 : (size_t)512 << 20;
    size_t limit = free_bytes > margin ? free_bytes - margin : 1; /* 0 would read "no limit" */
    if (opts->device_mem_limit && opts->device_mem_limit < limit)
        limit = opts->device_mem_limit;
    ref_gpu_plan_t plan;
    REFG_TRY(ref_gpu_plan(r->p, r->t, r->backward, r->scales, r->naive, limit, opts->block_rows, &plan, err));
    r->block_rows = plan.block_rows;
    r->block_cols = plan.block_cols;
    r->z = refg_sizes_of(r->p, r->t, r->backward, r->scales, r->naive);
    return AC_OK;
}

void init_constants(refg_run *r)
{
    const ac_problem *p = r->p;
    r->scale = p->scale;
    r->scale_abs = fabs(p->scale);
    r->gscale = p->head_dim * r->scale_abs;
    r->tau = ac_min_subnormal(r->t) / (2.0 * ac_unit_roundoff(r->t));
    r->rho = ac_unit_roundoff(AC_F32) / ac_unit_roundoff(r->t);
    r->scale_f = (float)p->scale;
}

} // namespace

int ref_gpu_reference(const ac_problem *p, ac_dtype t, const void *q, const void *k, const void *v, const void *d_o,
                      const ref_gpu_opts *opts, const ref_gpu_outputs *out, ref_gpu_stats *stats, ac_err *err)
{
    double t0 = refg_now();
    ref_gpu_opts no_opts = {};
    ref_gpu_stats no_stats;
    if (!opts)
        opts = &no_opts;
    if (!stats)
        stats = &no_stats;
    memset(stats, 0, sizeof *stats);
    REFG_TRY(check_outputs(p, t, q, k, v, d_o, out, err));
    refg_run r = {};
    r.p = p;
    r.t = t;
    r.backward = d_o != nullptr;
    r.scales = out->e_o != nullptr;
    r.naive = out->naive_o != nullptr;
    r.timing = opts->timing;
    r.chunk_elems = REFG_STAGING_BYTES / sizeof(double);
    if (opts->download_chunk_elems && opts->download_chunk_elems < r.chunk_elems)
        r.chunk_elems = opts->download_chunk_elems;
    r.stats = stats;
    r.stage = -1;
    REFG_TRY(refg_context(&r.ctx, err));
    snprintf(stats->device, sizeof stats->device, "%s", r.ctx->name);
    init_constants(&r);
    REFG_TRY(plan_call(&r, opts, err));
    stats->block_rows = r.block_rows;
    int status = alloc_group(&r, err);
    if (status == AC_OK)
        status = alloc_block(&r, err);
    const void *in[4] = {q, k, v, d_o};
    if (status == AC_OK)
        status = refg_run_groups(&r, in, out, err);
    if (status == AC_OK)
        status = refg_stage(&r, -2, err); /* closes the last stage */
    stats->device_bytes = r.bytes;
    free_all(&r);
    stats->total_seconds = refg_now() - t0;
    return status;
}
