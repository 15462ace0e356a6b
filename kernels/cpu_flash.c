/* kernels/cpu_flash.c — cpu-flash: the FlashAttention-2 algorithm exactly as the
 * fused GPU kernel runs it, on the CPU, so CI (which has no GPU) gates on the
 * fused algorithm and the planted bugs have a host.
 *
 * Forward, per (batch, head, Q tile of Br rows): K/V tiles of Bc keys streamed
 * over the tile range the mask allows (tiles entirely masked by causal/window
 * are never visited, as the GPU skips them); S = Q K^T accumulated in f32 and
 * multiplied by the scale in f32; running max m and denominator l; the
 * un-normalised accumulator rescaled by exp(m_old - m_new); P rounded to the
 * input dtype before the PV product (the tensor-core operand), PV accumulated
 * in f32; one division by l at the end; O rounded to the dtype, LSE = m + log l
 * in f32.
 * Backward, per (batch, kv head, K/V tile), over the query heads of its GQA
 * group and their Q tiles: P = exp(S - LSE) recomputed, D = rowsum(dO * O)
 * from the stored O, dV += P^T dO, dP = dO V^T, dS = P (dP - D), dK += dS^T Q,
 * dQ += dS K, the scale applied to dK and dQ at the end (as FlashAttention-2
 * does); P and dS rounded to the dtype before their products, all sums f32.
 *
 * The planted bugs (cpu_flash_mutants.c) live here as `cp->mut == CF_MUT_X`
 * tests at the line where each bug sits. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_flash_internal.h"

/* The tile loops are written to vectorise across independent elements (never
 * reassociating a sum), which GCC does at -O3 only: same bits, ~10x faster, and
 * CI fuzzes thousands of cases. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

#define LOG2_E 1.4426950408889634f

/* ---- dtype conversions in float ------------------------------------------ */

static inline float bits_to_float(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static inline uint32_t float_to_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

float cf_round_to(ac_dtype t, float x)
{
    if (t == AC_F32 || x != x)
        return x;
    uint32_t u = float_to_bits(x);
    if (t == AC_BF16) /* keep 8 significant bits, ties to even; overflow carries into Inf */
        return bits_to_float((u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u);
    if (fabsf(x) < 0x1p-14f) /* f16 subnormals: a fixed spacing of 2^-24 */
        return nearbyintf(x * 0x1p24f) * 0x1p-24f;
    float r = bits_to_float((u + 0xFFFu + ((u >> 13) & 1u)) & ~0x1FFFu); /* 11 significant bits */
    return fabsf(r) > 65504.0f ? copysignf(INFINITY, x) : r;
}

/* Exact: the f16 exponent and significand moved into float position, then
 * rebased by 2^(127-15); subnormal halves come out right from the multiply. */
static inline float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, mag = (uint32_t)(h & 0x7FFFu) << 13;
    if ((h & 0x7C00u) == 0x7C00u) /* Inf, NaN */
        return bits_to_float(sign | 0x7F800000u | mag);
    return bits_to_float(sign | float_to_bits(bits_to_float(mag) * 0x1p112f));
}

uint32_t cf_narrow_bits(ac_dtype t, float x)
{
    if (t == AC_F32)
        return float_to_bits(x);
    if (x != x)
        return t == AC_BF16 ? 0x7FC0u : 0x7E00u;
    uint32_t u = float_to_bits(cf_round_to(t, x)), sign = (u >> 16) & 0x8000u;
    if (t == AC_BF16)
        return u >> 16;
    float mag = fabsf(bits_to_float(u)); /* now a value of f16 */
    if (mag == INFINITY)
        return sign | 0x7C00u;
    if (mag < 0x1p-14f) /* subnormal: a multiple of 2^-24 */
        return sign | (uint32_t)(mag * 0x1p24f);
    uint32_t m = float_to_bits(mag);
    return sign | ((((m >> 23) - 112u) << 10) | ((m >> 13) & 0x3FFu));
}

void cf_store_elem(ac_dtype t, void *buf, size_t at, float x)
{
    if (t == AC_F32)
        ((uint32_t *)buf)[at] = cf_narrow_bits(t, x);
    else
        ((uint16_t *)buf)[at] = (uint16_t)cf_narrow_bits(t, x);
}

/* Rows [first, first + n_rows) of head h of a Q-like (heads_q, seqlen_q) or K-like tensor,
 * widened to float, d per row; the channel index is innermost in both layouts. */
void cf_load_rows(const ac_problem *p, ac_dtype t, const void *buf, int heads, int seqlen, int b, int h, int first,
                  int n_rows, float *out)
{
    int d = p->head_dim;
    for (int s = 0; s < n_rows; s++) {
        size_t base = ac_index(p, heads, seqlen, b, h, first + s, 0);
        float *o = out + (size_t)s * d;
        if (t == AC_F32) {
            memcpy(o, (const uint32_t *)buf + base, (size_t)d * sizeof(float));
            continue;
        }
        const uint16_t *in = (const uint16_t *)buf + base;
        if (t == AC_BF16)
            for (int c = 0; c < d; c++)
                o[c] = bits_to_float((uint32_t)in[c] << 16);
        else
            for (int c = 0; c < d; c++)
                o[c] = half_to_float(in[c]);
    }
}

/* ---- the mask, as the fused kernel evaluates it ------------------------------ */

int cf_kv_head_of(const cpu_flash_params *cp, const ac_problem *p, int h)
{
    if (cp->mut == CF_MUT_GQA_HEAD_MOD)
        return h % p->heads_kv;
    return h / (p->heads_q / p->heads_kv);
}

/* Visible keys of row i (before the dense mask): [lo, hi), clamped to
 * [0, key_cap]; key_cap is nk, the sequence end the last K/V tile masks at. */
static void row_range(const cpu_flash_params *cp, const ac_problem *p, int nq, int nk, int key_cap, int i, int *lo,
                      int *hi)
{
    long long lo_key = 0, hi_key = key_cap;
    if (p->windowed) {
        long long c = i;
        if (p->align == AC_ALIGN_BOTTOM_RIGHT && cp->mut != CF_MUT_CAUSAL_TL_FOR_BR)
            c += nk - nq;
        if (p->window_left != AC_WINDOW_INF)
            lo_key = c - p->window_left + (cp->mut == CF_MUT_WINDOW_EDGE);
        if (p->window_right != AC_WINDOW_INF)
            hi_key = c + p->window_right + 1 + (cp->mut == CF_MUT_CAUSAL_OFF_BY_ONE);
    }
    *lo = (int)(lo_key < 0 ? 0 : lo_key > key_cap ? key_cap : lo_key);
    *hi = (int)(hi_key < 0 ? 0 : hi_key > key_cap ? key_cap : hi_key);
}

/* Per-row ranges of rows [0, nq) of batch b: lo/hi are nondecreasing in i, so a
 * (Q tile, K/V tile) block is entirely masked iff its first row's lo and last
 * row's hi miss the keys [j0, j1) — the test the GPU's tile range encodes. */
void cf_row_ranges(const cpu_flash_params *cp, const ac_problem *p, int b, int *lo, int *hi)
{
    int nq = ac_seqlen_q_of(p, b), nk = ac_seqlen_k_of(p, b);
    int nk_tiles_end = (nk + cp->block_k - 1) / cp->block_k * cp->block_k;
    int key_cap = cp->mut == CF_MUT_LAST_KV_UNMASKED ? nk_tiles_end : nk;
    for (int i = 0; i < nq; i++)
        row_range(cp, p, nq, nk, key_cap, i, &lo[i], &hi[i]);
}

bool cf_block_masked(const int *lo, const int *hi, int i0, int i1, int j0, int j1)
{
    return hi[i1 - 1] <= lo[i0] || hi[i1 - 1] <= j0 || lo[i0] >= j1;
}

const uint8_t *cf_dense_row(const ac_problem *p, int b, int h, int i)
{
    if (!p->dense_mask)
        return NULL;
    size_t mb = p->mask_batch == 1 ? 0 : (size_t)b, mh = p->mask_heads == 1 ? 0 : (size_t)h;
    return p->dense_mask + ((mb * p->mask_heads + mh) * p->seqlen_q + i) * p->seqlen_k;
}

/* Mask the scores of rows [i0, i0+rows) x keys [j0, j0+cols): -inf where hidden. */
void cf_mask_tile(const ac_problem *p, int b, int h, int i0, int rows, int j0, int cols, const int *lo, const int *hi,
                  float *s)
{
    for (int r = 0; r < rows; r++) {
        int i = i0 + r;
        float *sr = s + (size_t)r * cols;
        const uint8_t *dense = cf_dense_row(p, b, h, i);
        for (int c = 0; c < cols; c++) {
            int j = j0 + c;
            /* j >= seqlen_k only when the last tile is left unmasked: no mask entry there */
            if (j < lo[i] || j >= hi[i] || (dense && j < p->seqlen_k && !dense[j]))
                sr[c] = -INFINITY;
        }
    }
}

/* ---- tile products, f32 accumulation --------------------------------------- */

/* acc[c] += sum_t coef[t * coef_stride] * x[t * x_stride + c] for c < n, each
 * element summed in order over t (a zero coefficient adds nothing and is
 * skipped).  Columns go in blocks of 16 held in registers across t. */
#define CHUNK 16
void cf_combine_rows(float *restrict acc, const float *restrict coef, int coef_stride, const float *restrict x,
                     int x_stride, int n_terms, int n)
{
    int c0 = 0;
    for (; c0 + CHUNK <= n; c0 += CHUNK) {
        float part[CHUNK];
        memcpy(part, acc + c0, sizeof part);
        for (int t = 0; t < n_terms; t++) {
            float w = coef[(size_t)t * coef_stride];
            if (w == 0.0f)
                continue;
            const float *xt = x + (size_t)t * x_stride + c0;
            for (int c = 0; c < CHUNK; c++)
                part[c] += w * xt[c];
        }
        memcpy(acc + c0, part, sizeof part);
    }
    for (int t = 0; t < n_terms && c0 < n; t++) {
        float w = coef[(size_t)t * coef_stride];
        if (w == 0.0f)
            continue;
        const float *xt = x + (size_t)t * x_stride;
        for (int c = c0; c < n; c++)
            acc[c] += w * xt[c];
    }
}

/* out (rows x cols) = a (rows x n) times b_t (n x cols). */
void cf_gemm_nt(const float *restrict a, const float *restrict b_t, int rows, int cols, int n, float *restrict out)
{
    memset(out, 0, (size_t)rows * cols * sizeof(float));
    for (int r = 0; r < rows; r++)
        cf_combine_rows(out + (size_t)r * cols, a + (size_t)r * n, 1, b_t, cols, n, cols);
}

/* acc (n_out x d) += w^T x: w (n_in x n_out, row stride w_stride), x (n_in x d). */
void cf_gemm_tn_acc(const float *restrict w, int w_stride, const float *restrict x, int n_in, int n_out, int d,
                    float *restrict acc)
{
    for (int o = 0; o < n_out; o++)
        cf_combine_rows(acc + (size_t)o * d, w + o, w_stride, x, d, n_in, d);
}

/* Rows [j0, j0+cols) of rows (n x d) transposed into out (d x cols). */
void cf_transpose_tile(const float *rows, int j0, int cols, int d, float *out)
{
    for (int c = 0; c < cols; c++)
        for (int k = 0; k < d; k++)
            out[(size_t)k * cols + c] = rows[(size_t)(j0 + c) * d + k];
}

/* ---- forward ------------------------------------------------------------------- */

float cf_online_softmax_step(const cpu_flash_params *cp, float *m, float *l, float *s, int n)
{
    float m_old = *m, tile_max = -INFINITY;
    for (int c = 0; c < n; c++)
        tile_max = fmaxf(tile_max, s[c]);
    float m_new = cp->mut == CF_MUT_NO_MAX_SUBTRACTION ? 0.0f : fmaxf(m_old, tile_max);
    /* exp(-inf - -inf) is NaN: a row with nothing visible yet uses 0 as the reference */
    float m_ref = (m_new == -INFINITY && cp->mut != CF_MUT_MASKED_ROW_NAN) ? 0.0f : m_new;
    float tile_sum = 0.0f;
    for (int c = 0; c < n; c++) {
        s[c] = expf(s[c] - m_ref);
        tile_sum += s[c];
    }
    float alpha = expf(m_old - m_ref);
    *l = (cp->mut == CF_MUT_NO_RESCALE_L ? *l : alpha * *l) + tile_sum;
    *m = m_new;
    return alpha;
}

typedef struct {
    float *k_rows, *v_rows; /* (keys_alloc x d) of one kv head, zero past seqlen_k */
    float *q_tile, *k_t, *s, *acc, *m, *l;
    int *lo, *hi; /* (seqlen_q) */
    int keys_alloc, kv_head_loaded, kv_batch_loaded;
} fwd_work;

static void fwd_work_free(fwd_work *w)
{
    free(w->k_rows);
    free(w->v_rows);
    free(w->q_tile);
    free(w->k_t);
    free(w->s);
    free(w->acc);
    free(w->m);
    free(w->l);
    free(w->lo);
    free(w->hi);
}

static int fwd_work_alloc(const cpu_flash_params *cp, const ac_problem *p, fwd_work *w)
{
    size_t d = (size_t)p->head_dim, br = (size_t)cp->block_q, bc = (size_t)cp->block_k;
    memset(w, 0, sizeof *w);
    w->keys_alloc = (p->seqlen_k + cp->block_k - 1) / cp->block_k * cp->block_k;
    w->kv_head_loaded = w->kv_batch_loaded = -1;
    w->k_rows = calloc((size_t)w->keys_alloc * d, sizeof(float));
    w->v_rows = calloc((size_t)w->keys_alloc * d, sizeof(float));
    w->q_tile = malloc(br * d * sizeof(float));
    w->k_t = malloc(d * bc * sizeof(float));
    w->s = malloc(br * bc * sizeof(float));
    w->acc = malloc(br * d * sizeof(float));
    w->m = malloc(br * sizeof(float));
    w->l = malloc(br * sizeof(float));
    w->lo = malloc((size_t)p->seqlen_q * sizeof(int));
    w->hi = malloc((size_t)p->seqlen_q * sizeof(int));
    return w->k_rows && w->v_rows && w->q_tile && w->k_t && w->s && w->acc && w->m && w->l && w->lo && w->hi;
}

/* P of one row (already exp'd) times the V tile into acc; in f32, or (a planted
 * bug) with every partial sum rounded to the input dtype. */
static void pv_row(const cpu_flash_params *cp, ac_dtype t, const float *p_row, const float *v_tile, int cols, int d,
                   float *acc)
{
    if (cp->mut != CF_MUT_O_ACCUM_IN_DTYPE) {
        cf_combine_rows(acc, p_row, 1, v_tile, d, cols, d);
        return;
    }
    for (int j = 0; j < cols; j++) {
        float pj = p_row[j];
        if (pj == 0.0f)
            continue;
        const float *vj = v_tile + (size_t)j * d;
        for (int c = 0; c < d; c++) /* every partial sum rounded: an accumulator in the input dtype */
            acc[c] = cf_round_to(t, acc[c] + pj * vj[c]);
    }
}

/* One K/V tile [j0, j0+Bc) against the resident Q tile.  Only its first cols
 * keys are computed: the rest are hidden from every row of the tile (P = 0
 * exactly), so leaving them out changes no bit and saves the CPU the work. */
static void fwd_kv_tile(const cpu_flash_params *cp, const ac_problem *p, ac_dtype t, int b, int h, int i0, int rows,
                        int j0, int cols, fwd_work *w)
{
    int d = p->head_dim;
    cf_transpose_tile(w->k_rows, j0, cols, d, w->k_t);
    cf_gemm_nt(w->q_tile, w->k_t, rows, cols, d, w->s);
    float scale = (float)p->scale;
    for (int x = 0; x < rows * cols; x++)
        w->s[x] *= scale;
    cf_mask_tile(p, b, h, i0, rows, j0, cols, w->lo, w->hi, w->s);
    for (int r = 0; r < rows; r++) {
        float *pr = w->s + (size_t)r * cols, *acc = w->acc + (size_t)r * d;
        float alpha = cf_online_softmax_step(cp, &w->m[r], &w->l[r], pr, cols);
        for (int c = 0; c < cols; c++) /* the PV product's operand is in the input dtype */
            pr[c] = cf_round_to(t, pr[c]);
        if (cp->mut != CF_MUT_NO_RESCALE_O && alpha != 1.0f)
            for (int c = 0; c < d; c++)
                acc[c] *= alpha;
        pv_row(cp, t, pr, w->v_rows + (size_t)j0 * d, cols, d, acc);
        if (cp->mut == CF_MUT_PER_TILE_NORMALISE && w->l[r] > 0.0f)
            for (int c = 0; c < d; c++)
                acc[c] /= w->l[r];
    }
}

static void fwd_write_rows(const cpu_flash_params *cp, const ac_problem *p, ac_dtype t, int b, int h, int i0, int rows,
                           const fwd_work *w, const ac_fwd_args *a)
{
    int d = p->head_dim;
    for (int r = 0; r < rows; r++) {
        float l = w->l[r], m = w->m[r];
        const float *acc = w->acc + (size_t)r * d;
        size_t at = ac_q_index(p, b, h, i0 + r, 0);
        float denom = cp->mut == CF_MUT_PER_TILE_NORMALISE ? 1.0f : l;
        bool twice = cp->mut == CF_PREC_O_ROUNDED_TWICE && t == AC_F16; /* the f16 numerator stored first */
        for (int c = 0; c < d; c++) /* a row with no visible key: O = 0 */
            cf_store_elem(t, a->o, at + c, l == 0.0f ? 0.0f : (twice ? cf_round_if_finite(t, acc[c]) : acc[c]) / denom);
        float lse = l == 0.0f ? -INFINITY : m + logf(l);
        if (cp->mut == CF_MUT_LSE_LOG2)
            lse = m * LOG2_E + log2f(l);
        if (cp->mut == CF_MUT_LSE_WITHOUT_MAX)
            lse = logf(l);
        a->lse[ac_lse_index(p, b, h, i0 + r)] = lse;
    }
}

static void fwd_q_tile(const cpu_flash_params *cp, const ac_problem *p, ac_dtype t, int b, int h, int i0, int rows,
                       const int *lo, const int *hi, fwd_work *w, const ac_fwd_args *a)
{
    int d = p->head_dim, bc = cp->block_k;
    cf_load_rows(p, t, a->q, p->heads_q, p->seqlen_q, b, h, i0, rows, w->q_tile);
    for (int r = 0; r < rows; r++) {
        w->m[r] = -INFINITY;
        w->l[r] = 0.0f;
    }
    memset(w->acc, 0, (size_t)rows * d * sizeof(float));
    /* the tile range: K/V tiles the mask leaves entirely hidden are never loaded */
    int jt_lo = lo[i0] / bc, jt_hi = (hi[i0 + rows - 1] + bc - 1) / bc;
    int hi_last = hi[i0 + rows - 1];
    for (int jt = jt_lo; jt < jt_hi; jt++)
        if (!cf_block_masked(lo, hi, i0, i0 + rows, jt * bc, (jt + 1) * bc))
            fwd_kv_tile(cp, p, t, b, h, i0, rows, jt * bc, hi_last - jt * bc < bc ? hi_last - jt * bc : bc, w);
    fwd_write_rows(cp, p, t, b, h, i0, rows, w, a);
}

static void fwd_head(const cpu_flash_params *cp, const ac_problem *p, ac_dtype t, int b, int h, fwd_work *w,
                     const ac_fwd_args *a)
{
    int hk = cf_kv_head_of(cp, p, h), nq = ac_seqlen_q_of(p, b);
    if (w->kv_head_loaded != hk || w->kv_batch_loaded != b) {
        cf_load_rows(p, t, a->k, p->heads_kv, p->seqlen_k, b, hk, 0, p->seqlen_k, w->k_rows);
        cf_load_rows(p, t, a->v, p->heads_kv, p->seqlen_k, b, hk, 0, p->seqlen_k, w->v_rows);
        w->kv_head_loaded = hk;
        w->kv_batch_loaded = b;
    }
    /* the launch grid: ceil(nq / Br) Q tiles (floor drops the partial last one) */
    int n_qtiles = cp->mut == CF_MUT_LAST_Q_UNWRITTEN ? nq / cp->block_q : (nq + cp->block_q - 1) / cp->block_q;
    for (int qt = 0; qt < n_qtiles; qt++) {
        int i0 = qt * cp->block_q, rows = nq - i0 < cp->block_q ? nq - i0 : cp->block_q;
        fwd_q_tile(cp, p, t, b, h, i0, rows, w->lo, w->hi, w, a);
    }
}

int cf_check_call(const ac_kernel *self, const ac_problem *p, ac_dtype t, bool backward, ac_err *err)
{
    int st = ac_problem_validate(p, SIZE_MAX, err);
    if (st == AC_OK)
        st = ac_kernel_supports(self, p, t, backward, err);
    return st;
}

int cf_forward(const ac_kernel *self, const ac_problem *p, ac_dtype t, const ac_fwd_args *a, ac_err *err)
{
    const cpu_flash_params *cp = self->ctx;
    int st = cf_check_call(self, p, t, false, err);
    if (st != AC_OK)
        return st;
    if (cf_decode_path(p)) /* cpu_flash_decode.c: a paged KV cache, split-KV */
        return cf_forward_decode(self, p, t, a, err);
    if (cf_variant_path(p)) /* cpu_flash_var.c */
        return cf_forward_variants(self, p, t, a, err);
    fwd_work w;
    if (!fwd_work_alloc(cp, p, &w)) {
        fwd_work_free(&w);
        return ac_fail(err, AC_ERR_ENV, "%s: out of memory", self->name);
    }
    for (int b = 0; b < p->batch; b++) {
        cf_row_ranges(cp, p, b, w.lo, w.hi);
        for (int h = 0; h < p->heads_q; h++)
            fwd_head(cp, p, t, b, h, &w, a);
    }
    fwd_work_free(&w);
    return AC_OK;
}

/* ---- the kernels --------------------------------------------------------------- */

static const cpu_flash_params tiles_64x64 = {.block_q = 64, .block_k = 64, .mut = CF_MUT_NONE};
static const cpu_flash_params tiles_128x64 = {.block_q = 128, .block_k = 64, .mut = CF_MUT_NONE};

static const ac_kernel cpu_flash_64 = {
    .name = "cpu-flash",
    .description = "FlashAttention-2 emulated on the CPU, 64x64 tiles: S and PV in f32, P rounded to dtype, "
                   "one division by l; backward by recomputation from LSE",
    .caps = CF_CAPS,
    .device = AC_DEV_CPU,
    .memory = AC_MEM_HOST,
    .available = NULL,
    .forward = cf_forward,
    .backward = cf_backward,
    .ctx = &tiles_64x64,
};

static const ac_kernel cpu_flash_128 = {
    .name = "cpu-flash-128x64",
    .description = "cpu-flash with 128x64 tiles (Br = 128 query rows per K/V tile of 64 keys)",
    .caps = CF_CAPS,
    .device = AC_DEV_CPU,
    .memory = AC_MEM_HOST,
    .available = NULL,
    .forward = cf_forward,
    .backward = cf_backward,
    .ctx = &tiles_128x64,
};

size_t ac_cpu_flash_kernels(const ac_kernel **out, size_t max)
{
    size_t n = 0;
    if (n < max)
        out[n++] = &cpu_flash_64;
    if (n < max)
        out[n++] = &cpu_flash_128;
    n += cf_mutant_kernels(out + n, max - n);
    return n + cf_precision_kernels(out + n, max - n);
}
