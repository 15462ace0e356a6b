/* ref/variants.c — the attention variants: the table's lookups, which
 * variants a problem uses, the score modifiers' one definition
 * (ac_score_mod) and the checks of the variant fields (ac_problem_validate
 * calls ref_variants_validate). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "variants.h"
#include "variants_internal.h"

typedef struct {
    const char *name, *what;
    unsigned bit;
} variant_row;

static const variant_row rows[AC_VARIANT_COUNT] = {
#define AC_VARIANT_ROW_(id, vname, bit_no, description) [AC_VARIANT_##id] = {vname, description, 1u << (bit_no)},
    AC_VARIANTS(AC_VARIANT_ROW_)
#undef AC_VARIANT_ROW_
};

static bool variant_ok(ac_variant v) { return (unsigned)v < AC_VARIANT_COUNT; }
const char *ac_variant_name(ac_variant v) { return variant_ok(v) ? rows[v].name : "?"; }
const char *ac_variant_what(ac_variant v) { return variant_ok(v) ? rows[v].what : "?"; }
unsigned ac_variant_bit(ac_variant v) { return variant_ok(v) ? rows[v].bit : 0; }

const char *ac_variant_names(void)
{
#define AC_VARIANT_LIST_(id, vname, bit, what) ", " vname
    static const char list[] = AC_VARIANTS(AC_VARIANT_LIST_);
#undef AC_VARIANT_LIST_
    return list + 2; /* past the first ", " */
}

unsigned ac_problem_variants(const ac_problem *p)
{
    unsigned used = 0;
    if (p->softcap != 0.0)
        used |= AC_VAR_SOFTCAP;
    if (p->sinks)
        used |= AC_VAR_SINKS;
    if (p->head_dim_v > 0 && p->head_dim_v != p->head_dim)
        used |= AC_VAR_DV;
    if (p->alibi_slopes)
        used |= AC_VAR_ALIBI;
    if (p->bias)
        used |= AC_VAR_BIAS;
    if (p->sink_tokens > 0)
        used |= AC_VAR_SINK_TOKENS;
    if (p->dropout_p > 0.0)
        used |= AC_VAR_DROPOUT;
    if (p->page_size > 0)
        used |= AC_VAR_PAGED;
    if (p->num_splits >= 2)
        used |= AC_VAR_SPLIT;
    return used;
}

/* ---- the score modifiers ------------------------------------------------------- */

bool ac_problem_has_score_mods(const ac_problem *p) { return p->softcap != 0.0 || p->alibi_slopes || p->bias; }

static int bias_rows(int n) { return n > 1 ? n : 1; }

size_t ac_bias_elems(const ac_problem *p)
{
    if (!p->bias)
        return 0;
    return (size_t)bias_rows(p->bias_batch) * bias_rows(p->bias_heads) * p->seqlen_q * p->seqlen_k;
}

size_t ac_bias_index(const ac_problem *p, int mb, int mh, int i, int j)
{
    return (((size_t)mb * bias_rows(p->bias_heads) + mh) * p->seqlen_q + i) * p->seqlen_k + j;
}

double ac_bias_at(const ac_problem *p, int b, int h, int i, int j)
{
    if (!p->bias)
        return 0.0;
    size_t at = ac_bias_index(p, p->bias_batch > 1 ? b : 0, p->bias_heads > 1 ? h : 0, i, j);
    return ac_widen(p->bias_dtype, ac_bits_get(p->bias_dtype, p->bias, at));
}

double ac_alibi_bias(const ac_problem *p, int b, int h, int i, int j)
{
    if (!p->alibi_slopes)
        return 0.0;
    int row = p->alibi_batch > 1 ? b : 0;
    long dist = (long)i + ac_seqlen_k_of(p, b) - ac_seqlen_q_of(p, b) - j; /* bottom-right: 0 on the diagonal */
    return (double)p->alibi_slopes[(size_t)row * p->heads_q + h] * (double)labs(dist);
}

double ac_score_mod(const ac_problem *p, int b, int h, int i, int j, double s)
{
    if (p->softcap != 0.0)
        s = p->softcap * tanh(s / p->softcap);
    return s - ac_alibi_bias(p, b, h, i, j) + ac_bias_at(p, b, h, i, j);
}

double ac_score_mod_slope(const ac_problem *p, double s)
{
    if (p->softcap == 0.0)
        return 1.0;
    /* 1 - tanh^2 as 1 / cosh^2: no cancellation where tanh saturates (cosh
     * overflows to inf past |x| ~ 710, giving the exact limit 0). */
    double ch = cosh(s / p->softcap);
    return 1.0 / (ch * ch);
}

/* ---- dropout ------------------------------------------------------------------------- */

size_t ac_dropout_elems(const ac_problem *p) { return (size_t)p->batch * p->heads_q * p->seqlen_q * p->seqlen_k; }

size_t ac_dropout_index(const ac_problem *p, int b, int h, int i, int j)
{
    return (((size_t)b * p->heads_q + h) * p->seqlen_q + i) * p->seqlen_k + j;
}

double ac_dropout_factor(const ac_problem *p, int b, int h, int i, int j)
{
    if (p->dropout_p == 0.0)
        return 1.0;
    return p->dropout_keep[ac_dropout_index(p, b, h, i, j)] ? 1.0 / (1.0 - p->dropout_p) : 0.0;
}

int ref_dropout_check(const ac_problem *p, const char *who, ac_err *err)
{
    if (p->dropout_p > 0.0 && !p->dropout_keep)
        return ac_fail(err, AC_ERR_INPUT, "%s: dropout p = %g needs the keep mask the kernel drew (dropout_keep)", who,
                       p->dropout_p);
    return AC_OK;
}

/* ---- validation ------------------------------------------------------------------ */

/* The bias: a broadcast shape of (B, Hq), an f32 or 16-bit dtype, no NaN or +inf
 * (-inf hides a pair; +inf has no meaning). */
static int validate_bias(const ac_problem *p, ac_err *err)
{
    if (!p->bias)
        return AC_OK;
    if (p->bias_batch > 1 && p->bias_batch != p->batch)
        return ac_fail(err, AC_ERR_INPUT, "bias_batch: must be 1 or the batch %d, got %d", p->batch, p->bias_batch);
    if (p->bias_heads > 1 && p->bias_heads != p->heads_q)
        return ac_fail(err, AC_ERR_INPUT, "bias_heads: must be 1 or Hq = %d, got %d", p->heads_q, p->bias_heads);
    if (p->bias_batch < 0 || p->bias_heads < 0)
        return ac_fail(err, AC_ERR_INPUT, "bias_batch/bias_heads: negative (%d, %d)", p->bias_batch, p->bias_heads);
    if (p->bias_dtype != AC_F32 && p->bias_dtype != AC_F16 && p->bias_dtype != AC_BF16)
        return ac_fail(err, AC_ERR_INPUT, "bias_dtype: f32, f16 or bf16, got %d", (int)p->bias_dtype);
    for (size_t x = 0; x < ac_bias_elems(p); x++) {
        double v = ac_widen(p->bias_dtype, ac_bits_get(p->bias_dtype, p->bias, x));
        if (isnan(v) || v == INFINITY)
            return ac_fail(err, AC_ERR_INPUT, "bias[%zu]: %g (finite values, or -inf to hide a pair)", x, v);
    }
    return AC_OK;
}

int ref_variants_validate(const ac_problem *p, ac_err *err)
{
    if (p->head_dim_v < 0 || p->head_dim_v > AC_MAX_HEAD_DIM)
        return ac_fail(err, AC_ERR_INPUT, "head_dim_v: must be in 1..%d (0: head_dim), got %d", AC_MAX_HEAD_DIM,
                       p->head_dim_v);
    if (p->v_from_k && ac_head_dim_v(p) > p->head_dim)
        return ac_fail(err, AC_ERR_INPUT, "v_from_k: V is K's first d_v channels, so d_v (%d) must be at most d (%d)",
                       ac_head_dim_v(p), p->head_dim);
    if (p->v_from_k && ac_problem_is_fp8(p))
        return ac_fail(err, AC_ERR_INPUT, "v_from_k: not with fp8 inputs (V's codes would carry K's factors)");
    if (!(p->softcap >= 0.0) || !isfinite(p->softcap))
        return ac_fail(err, AC_ERR_INPUT, "softcap: must be a finite c > 0 (0 = off), got %g", p->softcap);
    if (p->alibi_slopes && p->alibi_batch != 0 && p->alibi_batch != 1 && p->alibi_batch != p->batch)
        return ac_fail(err, AC_ERR_INPUT, "alibi_batch: must be 1 or the batch %d, got %d", p->batch, p->alibi_batch);
    for (int x = 0; p->alibi_slopes && x < (p->alibi_batch > 1 ? p->alibi_batch : 1) * p->heads_q; x++)
        if (!isfinite(p->alibi_slopes[x]))
            return ac_fail(err, AC_ERR_INPUT, "alibi_slopes[%d]: must be finite, got %g", x,
                           (double)p->alibi_slopes[x]);
    if (p->sink_tokens < 0 || (p->sink_tokens > 0 && (!p->windowed || p->window_left == AC_WINDOW_INF)))
        return ac_fail(err, AC_ERR_INPUT, "sink_tokens: %d needs a window with a finite left edge (and >= 0)",
                       p->sink_tokens);
    if (!(p->dropout_p >= 0.0 && p->dropout_p < 1.0))
        return ac_fail(err, AC_ERR_INPUT, "dropout_p: must be in [0, 1), got %g", p->dropout_p);
    int st = validate_bias(p, err);
    if (st == AC_OK)
        st = ref_paged_validate(p, err);
    if (st != AC_OK)
        return st;
    for (int h = 0; p->sinks && h < p->heads_q; h++)
        if (!isfinite(p->sinks[h]))
            return ac_fail(err, AC_ERR_INPUT, "sinks[%d]: must be finite, got %g", h, (double)p->sinks[h]);
    return AC_OK;
}

double ref_sink_of(const ac_problem *p, int h) { return p->sinks ? (double)p->sinks[h] : -INFINITY; }
