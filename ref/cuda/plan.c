/* ref/cuda/plan.c — the GPU reference tier's memory plan: how many query rows
 * a block holds and how many bytes a (batch, KV head) group and a block need.
 * Pure arithmetic, built with or without CUDA (the harness can size cases by
 * it on any machine); gpuref.cu allocates exactly these buffers. */
#include <limits.h>
#include <stdio.h>

#include "../variants.h"
#include "gpuref_internal.h"

const char *ref_gpu_stage_name(ref_gpu_stage s)
{
    static const char *const names[REF_GPU_STAGE_COUNT] = {
        "upload", "forward", "backward", "scales", "naive-fwd", "naive-bwd", "download",
    };
    return (unsigned)s < REF_GPU_STAGE_COUNT ? names[s] : "?";
}

refg_sizes refg_sizes_of(const ac_problem *p, ac_dtype t, bool backward, bool scales, bool naive)
{
    refg_sizes z = {0};
    size_t group = (size_t)(p->heads_q / p->heads_kv);
    z.q_elems = group * (size_t)p->seqlen_q * (size_t)p->head_dim;
    z.kv_elems = (size_t)p->seqlen_k * (size_t)p->head_dim;
    z.rows = group * (size_t)p->seqlen_q;
    /* Q-like f64: Q, O; dO, dQ; |Q|, E_O; |dO|, E_dQ; naive O, dQ. */
    z.q64 = 2 + (backward ? 2 : 0) + (scales ? 2 : 0) + (backward && scales ? 2 : 0) + (naive ? 1 : 0) +
        (naive && backward ? 1 : 0);
    z.q32 = naive ? 1 + (backward ? 1 : 0) : 0; /* f32 Q, dO */
    /* K-like f64: K, V; dK, dV; |K|, |V|; E_dK, E_dV; naive dK, dV. */
    z.kv64 = 2 + (backward ? 2 : 0) + (scales ? 2 : 0) + (backward && scales ? 2 : 0) + (naive && backward ? 2 : 0);
    z.kv32 = naive ? 2 + (backward ? 2 : 0) : 0; /* f32 K, V; naive dK, dV sums */
    /* LSE-like f64: LSE; D; E_lse; naive LSE. */
    z.rows64 = 1 + (backward ? 1 : 0) + (scales ? 1 : 0) + (naive ? 1 : 0);
    /* One staging buffer for the bit patterns (the largest tensor), one for the
     * layout permutation of BSHD downloads. */
    size_t largest = z.q_elems > z.kv_elems ? z.q_elems : z.kv_elems;
    z.staging_bytes = largest * ac_dtype_size(t);
    if (p->layout == AC_LAYOUT_BSHD)
        z.staging_bytes += z.q_elems * sizeof(double);
    /* Block, per entry of R x C: S/P; |Q||K|^T and the weights (scales); dP/dS;
     * |dO||V|^T / the gradient weights (backward and scales). */
    z.blk64 = 1 + (scales ? 2 : 0) + (backward ? 1 : 0) + (backward && scales ? 1 : 0);
    z.blk32 = naive ? 1 + (backward ? 1 : 0) : 0;
    z.blk_mask = p->dense_mask != NULL;
    return z;
}

size_t refg_group_bytes(const refg_sizes *z)
{
    return z->q_elems * (8 * z->q64 + 4 * z->q32) + z->kv_elems * (8 * z->kv64 + 4 * z->kv32) +
        z->rows * 8 * z->rows64 + z->staging_bytes;
}

size_t refg_block_bytes(const refg_sizes *z, size_t rows, size_t cols, int head_dim)
{
    size_t per_entry = 8 * z->blk64 + 4 * z->blk32 + z->blk_mask;
    /* per row: the naive's f32 partials of O and dQ (R x d) and REFG_ROW_SCRATCH doubles */
    size_t per_row = (size_t)head_dim * 4 + 8 * REFG_ROW_SCRATCH;
    return rows * cols * per_entry + rows * per_row;
}

/* The widest key range a block of `rows` consecutive query rows can see. */
static size_t block_cols(const ac_problem *p, size_t rows)
{
    size_t cols = (size_t)p->seqlen_k;
    if (p->windowed && p->window_left != AC_WINDOW_INF && p->window_right != AC_WINDOW_INF) {
        size_t span = rows + (size_t)p->window_left + (size_t)p->window_right;
        if (span < cols)
            cols = span;
    }
    return cols;
}

/* The block height wanted before memory limits: as tall as REFG_BLOCK_ELEMS
 * allows (fewer, larger GEMMs), but a masked problem's blocks compute the
 * rectangle over their key range, so causal and window blocks stay at about a
 * sixteenth of the rows (the wasted triangle is then ~1/16 of the work). */
static size_t wanted_rows(const ac_problem *p)
{
    size_t nq = (size_t)p->seqlen_q;
    size_t rows = REFG_BLOCK_ELEMS / (size_t)p->seqlen_k;
    if (p->windowed) {
        size_t sixteenth = (nq + 15) / 16;
        size_t cap = sixteenth > REFG_MIN_ROWS ? sixteenth : REFG_MIN_ROWS;
        if (rows > cap)
            rows = cap;
    }
    if (rows < REFG_MIN_ROWS)
        rows = REFG_MIN_ROWS;
    return rows < nq ? rows : nq;
}

int ref_gpu_supports(const ac_problem *p, ac_err *why)
{
    if (p->layout == AC_LAYOUT_THD)
        return ac_fail(why, AC_ERR_INPUT,
                       "the GPU reference tier does not implement the packed THD layout (thd); "
                       "the CPU tier computes it");
    if (ac_problem_is_fp8(p)) /* its inputs are code * descale; the device path reads 16/32-bit bits */
        return ac_fail(why, AC_ERR_INPUT,
                       "the GPU reference tier does not implement fp8 inputs; the CPU tier "
                       "computes them");
    unsigned used = ac_problem_variants(p);
    for (int v = 0; v < AC_VARIANT_COUNT; v++)
        if (used & ac_variant_bit((ac_variant)v))
            return ac_fail(why, AC_ERR_INPUT,
                           "the GPU reference tier does not implement %s (%s); the CPU tier "
                           "computes it",
                           ac_variant_what((ac_variant)v), ac_variant_name((ac_variant)v));
    return AC_OK;
}

int ref_gpu_plan(const ac_problem *p, ac_dtype t, bool backward, bool scales, bool naive, size_t mem_limit,
                 int block_rows, ref_gpu_plan_t *plan, ac_err *err)
{
    int supported = ref_gpu_supports(p, err);
    if (supported != AC_OK)
        return supported;
    refg_sizes z = refg_sizes_of(p, t, backward, scales, naive);
    size_t group = refg_group_bytes(&z);
    size_t rows = block_rows > 0 ? (size_t)block_rows : wanted_rows(p);
    if (rows > (size_t)p->seqlen_q)
        rows = (size_t)p->seqlen_q;
    size_t limit = mem_limit ? mem_limit : SIZE_MAX;
    size_t one_row = refg_block_bytes(&z, 1, block_cols(p, 1), p->head_dim);
    if (group > limit || limit - group < one_row)
        return ac_fail(err, AC_ERR_ENV,
                       "device memory: the GPU reference needs %.3g GiB for one (batch, KV head) "
                       "group and a one-row block, %.3g GiB available (hq=%d hkv=%d nq=%d nk=%d d=%d)",
                       (double)(group + one_row) / (1 << 30), (double)limit / (1 << 30), p->heads_q, p->heads_kv,
                       p->seqlen_q, p->seqlen_k, p->head_dim);
    if (block_rows <= 0) /* shrink an automatic block until it fits */
        while (rows > 1 && refg_block_bytes(&z, rows, block_cols(p, rows), p->head_dim) > limit - group)
            rows = rows > 2 * REFG_MIN_ROWS ? rows / 2 : rows - rows / 4 - 1;
    plan->block_rows = (int)rows;
    plan->block_cols = (int)block_cols(p, rows);
    plan->group_bytes = group;
    plan->block_bytes = refg_block_bytes(&z, rows, (size_t)plan->block_cols, p->head_dim);
    plan->total_bytes = plan->group_bytes + plan->block_bytes;
    return AC_OK;
}
