/* harness/run/inputs_variants.c — a case's variants made concrete: the
 * problem's variant fields from the case line, and the arrays the variants
 * need drawn from the case seed (docs/DESIGN.md, "Variants").  Each array has
 * its own stream (ids apart from run/inputs.c's), so adding one moves no
 * tensor: a case line gives the same bytes on every machine. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness/run/inputs_variants.h"
#include "ref/rng.h"

enum { STREAM_SINKS = 0x101, STREAM_ALIBI = 0x102, STREAM_BIAS = 0x103, STREAM_DROPOUT = 0x104 };

static uint64_t stream(uint64_t seed, uint64_t id)
{
    uint64_t s = seed;
    uint64_t a = ac_splitmix64(&s);
    s = a ^ (id * 0xD1B54A32D192ED03ull);
    return ac_splitmix64(&s);
}

/* Irwin-Hall normal, as run/inputs.c draws: exact, the same bits everywhere. */
static double gauss(uint64_t *state)
{
    uint64_t sum = 0;
    for (int i = 0; i < 3; i++) {
        uint64_t x = ac_splitmix64(state);
        sum += (x & 0xFFFF) + ((x >> 16) & 0xFFFF) + ((x >> 32) & 0xFFFF) + (x >> 48);
    }
    return ((double)sum + 6.0) * 0x1p-16 - 6.0;
}

void inputs_variants_problem(const ac_case *c, ac_problem *p)
{
    p->head_dim_v = c->head_dim_v;
    p->v_from_k = c->v_from_k;
    p->softcap = c->softcap;
    p->sink_tokens = c->sink_tokens;
    p->dropout_p = c->dropout;
    if (c->dropout > 0.0) /* the kernel's seed, from the case seed (a stream of its own) */
        p->dropout_seed = stream(c->seed, STREAM_DROPOUT);
    if (c->mask == AC_MASK_DENSE) /* maskdims: the mask's own (B, Hq) dimensions */
        p->mask_batch = c->mask_per_batch ? c->batch : 1, p->mask_heads = c->mask_per_head ? c->heads_q : 1;
}

/* ---- the packed THD layout ------------------------------------------------------------ */

/* cu[b + 1] = cu[b] + sequence b's length: the case's seqlens, or every
 * sequence the full extent when the case gives none. */
static int *cu_of(const int *lens, int n_lens, int batch, int extent)
{
    int *cu = malloc(sizeof(int) * ((size_t)batch + 1));
    if (!cu)
        return NULL;
    cu[0] = 0;
    for (int b = 0; b < batch; b++) /* validated lengths: 0..extent each, no overflow for the case's sizes */
        cu[b + 1] = cu[b] + (n_lens ? lens[b] : extent);
    return cu;
}

int inputs_variants_layout(ac_inputs *in, ac_err *err)
{
    const ac_case *c = &in->c;
    if (c->layout != AC_LAYOUT_THD)
        return AC_OK;
    in->cu_seqlens_q = cu_of(c->seqlens_q, c->n_seqlens_q, c->batch, c->seqlen_q);
    in->cu_seqlens_k = cu_of(c->seqlens_k, c->n_seqlens_k, c->batch, c->seqlen_k);
    if (!in->cu_seqlens_q || !in->cu_seqlens_k)
        return ac_fail(err, AC_ERR_ENV, "inputs: out of memory for cu_seqlens");
    in->p.cu_seqlens_q = in->cu_seqlens_q;
    in->p.cu_seqlens_k = in->cu_seqlens_k;
    return AC_OK;
}

/* ---- sinks ------------------------------------------------------------------------ */

/* The largest visible S'_ij of head h over every batch and row, -inf if none. */
static double max_score(const ac_inputs *in, int h)
{
    const ac_problem *p = &in->p;
    int hk = ac_kv_head_of(p, h);
    double best = -INFINITY;
    for (int b = 0; b < p->batch; b++)
        for (int i = 0; i < ac_seqlen_q_of(p, b); i++)
            for (int j = 0; j < ac_seqlen_k_of(p, b); j++) {
                if (!ac_visible(p, b, h, i, j))
                    continue;
                double s = 0.0;
                for (int c = 0; c < p->head_dim; c++)
                    s += in->qd[ac_q_index(p, b, h, i, c)] * in->kd[ac_kv_index(p, b, hk, j, c)];
                best = fmax(best, ac_score_mod(p, b, h, i, j, s * p->scale));
            }
    return best;
}

/* x rounded up to an f32 value */
static float f32_up(double x)
{
    float f = (float)x;
    return (double)f < x ? nextafterf(f, INFINITY) : f;
}

static int draw_sinks(ac_inputs *in, ac_err *err)
{
    const ac_case *c = &in->c;
    int hq = in->p.heads_q;
    in->sinks = malloc((size_t)hq * sizeof(float));
    if (!in->sinks)
        return ac_fail(err, AC_ERR_ENV, "inputs: out of memory for the sinks");
    uint64_t st = stream(c->seed, STREAM_SINKS);
    for (int h = 0; h < hq; h++) {
        if (c->sinks == AC_SINKS_NORMAL) {
            in->sinks[h] = (float)(c->sinks_a + c->sinks_b * gauss(&st));
            continue;
        }
        double top = max_score(in, h);
        in->sinks[h] = f32_up((isfinite(top) ? top : 0.0) + c->sinks_a);
    }
    in->p.sinks = in->sinks;
    return AC_OK;
}

/* ---- ALiBi ------------------------------------------------------------------------ */

/* The ALiBi paper's slope of head h of n: 2^(-8 (h + 1) / n) for n a power of
 * two; otherwise the slopes of the power of two p below n, then every other
 * slope of 2p (its odd-numbered ones), as the paper's get_slopes does. */
static double paper_slope(int h, int n)
{
    int p = 1;
    while (p * 2 <= n)
        p *= 2;
    if (h < p)
        return exp2(-8.0 * (h + 1) / p);
    return exp2(-8.0 * (2 * (h - p) + 1) / (2 * p));
}

static int draw_alibi(ac_inputs *in, ac_err *err)
{
    const ac_case *c = &in->c;
    int hq = in->p.heads_q, rows = c->alibi_bh ? in->p.batch : 1;
    in->alibi = malloc((size_t)rows * hq * sizeof(float));
    if (!in->alibi)
        return ac_fail(err, AC_ERR_ENV, "inputs: out of memory for the ALiBi slopes");
    uint64_t st = stream(c->seed, STREAM_ALIBI);
    for (int b = 0; b < rows; b++)
        for (int h = 0; h < hq; h++) {
            double u = (double)(ac_splitmix64(&st) >> 11) * 0x1p-53;
            double slope =
                c->alibi == AC_ALIBI_PAPER ? ldexp(paper_slope(h, hq), -b) : c->alibi_a + (c->alibi_b - c->alibi_a) * u;
            in->alibi[(size_t)b * hq + h] = (float)slope;
        }
    in->p.alibi_slopes = in->alibi;
    in->p.alibi_batch = rows;
    return AC_OK;
}

/* ---- the additive bias --------------------------------------------------------------- */

/* Every entry M + S g in the bias dtype, then -inf with probability F (the
 * entry's own draw decides, so F moves no finite value). */
static int draw_bias(ac_inputs *in, ac_err *err)
{
    const ac_case *c = &in->c;
    ac_problem *p = &in->p;
    p->bias_dtype = c->bias_f32 ? AC_F32 : c->dtype;
    p->bias_batch = c->bias_per_batch ? p->batch : 1, p->bias_heads = c->bias_per_head ? p->heads_q : 1;
    double n = (double)p->bias_batch * p->bias_heads * p->seqlen_q * p->seqlen_k;
    if (n > (double)AC_DEFAULT_MEM_BUDGET / 16)
        return ac_fail(err, AC_ERR_INPUT, "shape too big: a bias of %.0f entries", n);
    in->bias = malloc((size_t)n * ac_dtype_size(p->bias_dtype) + 1);
    if (!in->bias)
        return ac_fail(err, AC_ERR_ENV, "inputs: out of memory for the bias (%.0f entries)", n);
    uint64_t st = stream(c->seed, STREAM_BIAS);
    for (size_t x = 0; x < (size_t)n; x++) {
        double v = c->bias_a + c->bias_b * gauss(&st), u = (double)(ac_splitmix64(&st) >> 11) * 0x1p-53;
        ac_bits_put(p->bias_dtype, in->bias, x, ac_narrow(p->bias_dtype, u < c->bias_inf ? -INFINITY : v));
    }
    p->bias = in->bias;
    return AC_OK;
}

int inputs_variants_draw(ac_inputs *in, ac_err *err)
{
    int st = AC_OK;
    if (in->c.bias != AC_BIAS_NONE) /* before the sinks too: over(M) measures the scores the bias moves */
        st = draw_bias(in, err);
    if (st == AC_OK && in->c.alibi != AC_ALIBI_NONE) /* before the sinks: over(M) measures the scores ALiBi moves */
        st = draw_alibi(in, err);
    if (st == AC_OK && in->c.sinks != AC_SINKS_NONE)
        st = draw_sinks(in, err);
    return st;
}

void inputs_variants_free(ac_inputs *in)
{
    free(in->sinks), free(in->cu_seqlens_q), free(in->cu_seqlens_k), free(in->alibi), free(in->bias);
    free(in->dropout_keep);
    in->dropout_keep = NULL;
    in->sinks = in->alibi = NULL;
    in->bias = NULL;
    in->cu_seqlens_q = in->cu_seqlens_k = NULL;
}

/* v=k: every stored row of V is its K row's first d_v channels, bits and widening alike
 * (before the padding's NaN and the paging, which then treat V as they treat K). */
void inputs_v_from_k(ac_inputs *in)
{
    if (!in->p.v_from_k)
        return;
    ac_copy_k_channels_to_v(&in->p, ac_dtype_size(in->c.dtype), in->k, in->v, 0);
    ac_copy_k_channels_to_v(&in->p, sizeof(double), in->kd, in->vd, 0);
}
