/* harness/run/inputs.c — a case made concrete: the problem, the mask and lengths,
 * and Q, K, V, dO drawn in the case's dtype with their exact widenings.
 *
 * Reproducibility: every tensor has its own random stream, derived from the
 * case seed by splitmix64, and elements are drawn in logical order
 * (b, h, s, c) whatever the layout, so one case line gives byte-identical
 * tensors on every machine (no libm in the draws: the normal deviates are
 * Irwin-Hall sums of 12 uniforms, exact in double) and bhsd/bshd give the
 * same logical values.  What each distribution draws is documented in
 * harness.h beside ac_dist_kind. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness/run/inputs.h"
#include "ref/rng.h"

/* ---- random streams -------------------------------------------------------- */

typedef struct {
    uint64_t state;
} rng;

enum { STREAM_Q = 1, STREAM_K, STREAM_V, STREAM_DO, STREAM_MASK, STREAM_MODE, STREAM_SIGNS, STREAM_DOMINANT };

static rng stream(uint64_t seed, uint64_t id)
{
    uint64_t s = seed;
    uint64_t a = ac_splitmix64(&s);
    s = a ^ (id * 0xD1B54A32D192ED03ull);
    rng r = {ac_splitmix64(&s)};
    return r;
}

static uint64_t next_u64(rng *r) { return ac_splitmix64(&r->state); }
static double unif(rng *r) { return (double)(next_u64(r) >> 11) * 0x1p-53; } /* [0, 1) */
static double sign(rng *r) { return (next_u64(r) >> 63) ? -1.0 : 1.0; }

/* Irwin-Hall: the sum of 12 uniforms (16-bit each, four per 64-bit draw) less
 * 6: mean 0, variance 1 (to 2^-32), tails cut at +-6; exact arithmetic, so the
 * same bits everywhere. */
static double gauss(rng *r)
{
    uint64_t sum = 0;
    for (int i = 0; i < 3; i++) {
        uint64_t x = next_u64(r);
        sum += (x & 0xFFFF) + ((x >> 16) & 0xFFFF) + ((x >> 32) & 0xFFFF) + (x >> 48);
    }
    return ((double)sum + 6.0) * 0x1p-16 - 6.0; /* +0.5 per chunk: centred uniforms */
}

int ac_dist_mode(const ac_case *c)
{
    rng r = stream(c->seed, STREAM_MODE);
    return (int)(next_u64(&r) >> 63);
}

/* ---- the value of one element --------------------------------------------- */

typedef enum { ROLE_Q, ROLE_K, ROLE_V, ROLE_DO } role;

typedef struct {
    const ac_case *c;
    const ac_problem *p;
    role r;
    int mode;            /* ac_dist_mode */
    const double *signs; /* (B, Hkv, d) of +-1: increasing's w, huge values' column signs */
    double row_val;      /* per-row draw (increasing's a_i) */
    double *vec;         /* (d): equal's shared K row */
} draw_ctx;

static double top_scores(ac_dtype t) { return t == AC_F16 ? ac_max_finite(t) : 0x1p56; }
static double top_values(ac_dtype t) { return t == AC_F16 ? ac_max_finite(t) : ac_max_finite(t) * 0x1p-17; }
static double min_normal(ac_dtype t) { return ac_min_subnormal(t) / (2.0 * ac_unit_roundoff(t)); }

static double draw_plain(const ac_case *c, rng *r)
{
    switch (c->dist) {
    case AC_DIST_UNIFORM: return c->dist_a + (c->dist_b - c->dist_a) * unif(r);
    case AC_DIST_OUTLIERS: {
        double x = c->dist_a * gauss(r);
        return unif(r) < c->dist_b ? x * AC_OUTLIER_FACTOR : x;
    }
    case AC_DIST_NORMAL: return c->dist_a + c->dist_b * gauss(r);
    default: return gauss(r);
    }
}

/* huge/tiny: is this role the one the mode makes extreme? */
static bool extreme_role(const draw_ctx *x)
{
    return x->mode == 0 ? (x->r == ROLE_Q || x->r == ROLE_K) : x->r == ROLE_V;
}

static double draw_special(draw_ctx *x, rng *r, int b, int h, int s, int ch)
{
    const ac_case *c = x->c;
    const ac_problem *p = x->p;
    int d = p->head_dim, hk = x->r == ROLE_Q ? ac_kv_head_of(p, h) : h;
    double w = x->signs ? x->signs[((size_t)b * p->heads_kv + hk) * d + ch] : 1.0;
    switch (c->dist) {
    case AC_DIST_INCREASING:
        if (x->r == ROLE_Q) {
            if (ch == 0)
                x->row_val = (0.5 + 0.5 * unif(r)) / (p->scale * d);
            return w * x->row_val;
        }
        return w * c->dist_a * (s + 1) / p->seqlen_k;
    case AC_DIST_EQUAL:
        if (s == 0)
            x->vec[ch] = gauss(r);
        return x->vec[ch];
    case AC_DIST_DOMINANT:
        return ch == 0 ? (p->scale > 0 ? 1.0 : -1.0) : gauss(r);
    case AC_DIST_HUGE:
        if (x->mode == 0)
            return sign(r) * c->dist_a * top_scores(c->dtype) * (0.5 + 0.5 * unif(r));
        return w * c->dist_a * top_values(c->dtype) * (1.0 - 0x1p-9 * unif(r));
    case AC_DIST_TINY:
        /* [2, 128) x the smallest normal; ldexp is exact, so no libm rounding enters */
        return sign(r) * min_normal(c->dtype) * ldexp(1.0 + unif(r), 1 + (int)(next_u64(r) % 6));
    default: return draw_plain(c, r);
    }
}

static bool special_applies(const draw_ctx *x)
{
    switch (x->c->dist) {
    case AC_DIST_INCREASING: return x->r == ROLE_Q || x->r == ROLE_K;
    case AC_DIST_EQUAL: return x->r == ROLE_K;
    case AC_DIST_DOMINANT: return x->r == ROLE_Q;
    case AC_DIST_HUGE: case AC_DIST_TINY: return extreme_role(x);
    default: return false;
    }
}

static double draw_value(draw_ctx *x, rng *r, int b, int h, int s, int ch)
{
    if (x->r == ROLE_DO)
        return gauss(r);
    if (special_applies(x))
        return draw_special(x, r, b, h, s, ch);
    switch (x->c->dist) {
    case AC_DIST_OUTLIERS:
        /* outliers in Q and K (heavy-tailed scores, as LLM activations have); V
         * with a heavy tail too would push dQ = scale dS K past f16's range */
        return x->r == ROLE_V ? x->c->dist_a * gauss(r) : draw_plain(x->c, r);
    case AC_DIST_NORMAL: case AC_DIST_UNIFORM: return draw_plain(x->c, r);
    default: return gauss(r);
    }
}

/* ---- tensors ---------------------------------------------------------------- */

/* Fills one Q-like or K-like tensor in logical order; false if it is all zeros. */
static bool fill_tensor(draw_ctx *x, uint64_t stream_id, void *bits, double *wide)
{
    const ac_problem *p = x->p;
    ac_dtype t = x->c->dtype;
    bool q_like = x->r == ROLE_Q || x->r == ROLE_DO;
    int heads = q_like ? p->heads_q : p->heads_kv, seqlen = q_like ? p->seqlen_q : p->seqlen_k;
    rng r = stream(x->c->seed, stream_id);
    bool nonzero = false;
    for (int b = 0; b < p->batch; b++)
        for (int h = 0; h < heads; h++)
            for (int s = 0; s < seqlen; s++)
                for (int ch = 0; ch < p->head_dim; ch++) {
                    size_t at = ac_index(p, heads, seqlen, b, h, s, ch);
                    uint32_t v = ac_narrow(t, draw_value(x, &r, b, h, s, ch));
                    ac_bits_put(t, bits, at, v);
                    wide[at] = ac_widen(t, v);
                    nonzero |= wide[at] != 0.0;
                }
    return nonzero;
}

/* +-1 per (b, kv head, channel). */
static double *draw_signs(const ac_case *c, const ac_problem *p)
{
    size_t n = (size_t)p->batch * p->heads_kv * p->head_dim;
    double *signs = malloc(n * sizeof *signs);
    if (!signs)
        return NULL;
    rng r = stream(c->seed, STREAM_SIGNS);
    for (size_t i = 0; i < n; i++)
        signs[i] = sign(&r);
    return signs;
}

/* ---- dominant: one key per (b, kv head) beats the others by the margin ------ */

/* The next dtype value above x's (bits of a finite value). */
static uint32_t next_up(ac_dtype t, uint32_t bits)
{
    uint32_t sign_bit = ac_narrow(t, -0.0); /* -0 is the sign bit alone, whatever the width */
    if (bits == sign_bit)
        return 1; /* -0 -> smallest positive subnormal */
    return (bits & sign_bit) ? bits - 1 : bits + 1;
}

static double max_other_score(const ac_inputs *in, int b, int hk, int jstar)
{
    const ac_problem *p = &in->p;
    int group = p->heads_q / p->heads_kv, nq = ac_seqlen_q_of(p, b), nk = ac_seqlen_k_of(p, b);
    double best = 0.0;
    for (int h = hk * group; h < (hk + 1) * group; h++)
        for (int i = 0; i < nq; i++) {
            const double *q = in->qd + ac_q_index(p, b, h, i, 0); /* channels are contiguous in both layouts */
            for (int j = 0; j < nk; j++) {
                if (j == jstar)
                    continue;
                const double *k = in->kd + ac_kv_index(p, b, hk, j, 0);
                double s = 0.0;
                for (int ch = 0; ch < p->head_dim; ch++)
                    s += q[ch] * k[ch];
                best = fmax(best, p->scale * s);
            }
        }
    return best;
}

static int plant_dominant(ac_inputs *in, ac_err *err)
{
    const ac_problem *p = &in->p;
    ac_dtype t = in->c.dtype;
    rng r = stream(in->c.seed, STREAM_DOMINANT);
    for (int b = 0; b < p->batch; b++)
        for (int hk = 0; hk < p->heads_kv; hk++) {
            int nk = ac_seqlen_k_of(p, b);
            if (nk == 0)
                continue;
            int jstar = (int)(next_u64(&r) % (uint64_t)nk);
            /* S_ij* = scale * Q_i0 * beta = |scale| * beta, since Q_i0 = sign(scale). */
            double beta = (max_other_score(in, b, hk, jstar) + in->c.dist_a) / fabs(p->scale);
            uint32_t bits = ac_narrow(t, beta);
            if (ac_widen(t, bits) < beta)
                bits = next_up(t, bits);
            if (!isfinite(ac_widen(t, bits)))
                return ac_fail(err, AC_ERR_INPUT, "dist: dominant(%g) needs a key of %g, beyond %s's range",
                               in->c.dist_a, beta, ac_dtype_name(t));
            for (int ch = 0; ch < p->head_dim; ch++) {
                size_t at = ac_kv_index(p, b, hk, jstar, ch);
                uint32_t v = ch == 0 ? bits : ac_narrow(t, 0.0);
                ac_bits_put(t, in->k, at, v);
                in->kd[at] = ac_widen(t, v);
            }
        }
    return AC_OK;
}

/* ---- problem, lengths, mask -------------------------------------------------- */

static ac_problem problem_of(const ac_case *c)
{
    ac_problem p = ac_problem_dense(c->batch, c->heads_q, c->heads_kv, c->seqlen_q, c->seqlen_k, c->head_dim);
    p.layout = c->layout;
    /* The scale is the f32 the kernel multiplies by; the reference uses the same value. */
    p.scale = (double)(float)(c->scale_auto ? 1.0 / sqrt((double)c->head_dim) : c->scale);
    ac_case_mask_to_problem(c, &p);
    return p;
}

static int *copy_lens(const int *lens, int n)
{
    if (n == 0)
        return NULL;
    int *out = malloc(sizeof(int) * (size_t)n);
    if (out)
        memcpy(out, lens, sizeof(int) * (size_t)n);
    return out;
}

/* Dense (1, 1, Nq, Nk): each pair kept with probability keep, then
 * round(maskrows * Nq) rows (at least one when maskrows > 0) fully masked. */
static uint8_t *draw_dense_mask(const ac_case *c)
{
    size_t nq = (size_t)c->seqlen_q, nk = (size_t)c->seqlen_k;
    uint8_t *mask = malloc(nq * nk);
    int *rows = malloc(sizeof(int) * nq);
    if (!mask || !rows) {
        free(mask);
        free(rows);
        return NULL;
    }
    rng r = stream(c->seed, STREAM_MASK);
    for (size_t e = 0; e < nq * nk; e++)
        mask[e] = unif(&r) < c->dense_keep;
    size_t n_masked = (size_t)llround(c->masked_rows * (double)nq);
    if (c->masked_rows > 0 && n_masked == 0)
        n_masked = 1;
    for (size_t i = 0; i < nq; i++)
        rows[i] = (int)i;
    for (size_t m = 0; m < n_masked; m++) { /* partial Fisher-Yates: rows[0..n_masked) */
        size_t pick = m + (size_t)(next_u64(&r) % (nq - m));
        int tmp = rows[m];
        rows[m] = rows[pick];
        rows[pick] = tmp;
        memset(mask + (size_t)rows[m] * nk, 0, nk);
    }
    free(rows);
    return mask;
}

/* ---- make / free -------------------------------------------------------------- */

void ac_inputs_free(ac_inputs *in)
{
    if (!in)
        return;
    free(in->q), free(in->k), free(in->v), free(in->d_o);
    free(in->qd), free(in->kd), free(in->vd), free(in->d_od);
    free(in->seqlens_q), free(in->seqlens_k), free(in->dense_mask);
    memset(in, 0, sizeof *in);
}

static int alloc_storage(ac_inputs *in, ac_err *err)
{
    const ac_case *c = &in->c;
    size_t nq = ac_q_elems(&in->p), nkv = ac_kv_elems(&in->p), es = ac_dtype_size(c->dtype);
    in->q = malloc(nq * es), in->d_o = malloc(nq * es);
    in->k = malloc(nkv * es), in->v = malloc(nkv * es);
    in->qd = malloc(nq * sizeof(double)), in->d_od = malloc(nq * sizeof(double));
    in->kd = malloc(nkv * sizeof(double)), in->vd = malloc(nkv * sizeof(double));
    bool ok = in->q && in->d_o && in->k && in->v && in->qd && in->d_od && in->kd && in->vd;
    in->seqlens_q = copy_lens(c->seqlens_q, c->n_seqlens_q);
    in->seqlens_k = copy_lens(c->seqlens_k, c->n_seqlens_k);
    ok = ok && (c->n_seqlens_q == 0 || in->seqlens_q) && (c->n_seqlens_k == 0 || in->seqlens_k);
    if (ok && c->mask == AC_MASK_DENSE)
        ok = (in->dense_mask = draw_dense_mask(c)) != NULL;
    if (!ok)
        return ac_fail(err, AC_ERR_ENV, "inputs: out of memory for b=%d hq=%d hkv=%d nq=%d nk=%d d=%d",
                       c->batch, c->heads_q, c->heads_kv, c->seqlen_q, c->seqlen_k, c->head_dim);
    in->p.seqlens_q = in->seqlens_q;
    in->p.seqlens_k = in->seqlens_k;
    in->p.dense_mask = in->dense_mask;
    return AC_OK;
}

static int draw_all(ac_inputs *in, ac_err *err)
{
    const ac_case *c = &in->c;
    bool need_signs = c->dist == AC_DIST_INCREASING || (c->dist == AC_DIST_HUGE && ac_dist_mode(c) == 1);
    double *signs = need_signs ? draw_signs(c, &in->p) : NULL;
    double *vec = malloc(sizeof(double) * (size_t)c->head_dim);
    if ((need_signs && !signs) || !vec) {
        free(signs), free(vec);
        return ac_fail(err, AC_ERR_ENV, "inputs: out of memory");
    }
    draw_ctx x = {.c = c, .p = &in->p, .mode = ac_dist_mode(c), .signs = signs, .vec = vec};
    const char *zero = NULL;
    x.r = ROLE_Q;
    if (!fill_tensor(&x, STREAM_Q, in->q, in->qd))
        zero = "Q";
    x.r = ROLE_K;
    if (!fill_tensor(&x, STREAM_K, in->k, in->kd) && !zero)
        zero = "K";
    x.r = ROLE_V;
    if (!fill_tensor(&x, STREAM_V, in->v, in->vd) && !zero)
        zero = "V";
    x.r = ROLE_DO;
    fill_tensor(&x, STREAM_DO, in->d_o, in->d_od);
    free(signs), free(vec);
    if (zero)
        return ac_fail(err, AC_ERR_INPUT, "dist: every element of %s rounds to zero in %s; pick larger values",
                       zero, ac_dtype_name(c->dtype));
    return c->dist == AC_DIST_DOMINANT ? plant_dominant(in, err) : AC_OK;
}

ac_dtype ac_inputs_out_dtype(const ac_inputs *in) { return ac_case_out_dtype(&in->c); }

/* ---- varlen padding: NaN ------------------------------------------------------ */

/* Rows s >= valid (of every head of batch b) of one Q-like or K-like tensor
 * become NaN, in the dtype's bits and in the widening alike. */
static void nan_rows(const ac_inputs *in, int heads, int seqlen, int b, int valid, void *bits, double *wide)
{
    const ac_problem *p = &in->p;
    ac_dtype t = in->c.dtype;
    uint32_t nan_bits = ac_narrow(t, NAN);
    for (int h = 0; h < heads; h++)
        for (int s = valid; s < seqlen; s++)
            for (int ch = 0; ch < p->head_dim; ch++) {
                size_t at = ac_index(p, heads, seqlen, b, h, s, ch);
                ac_bits_put(t, bits, at, nan_bits);
                wide[at] = NAN;
            }
}

void ac_inputs_nan_padding(ac_inputs *in)
{
    const ac_problem *p = &in->p;
    for (int b = 0; b < p->batch; b++) {
        int nq = ac_seqlen_q_of(p, b), nk = ac_seqlen_k_of(p, b);
        if (in->q && in->qd)
            nan_rows(in, p->heads_q, p->seqlen_q, b, nq, in->q, in->qd);
        if (in->d_o && in->d_od)
            nan_rows(in, p->heads_q, p->seqlen_q, b, nq, in->d_o, in->d_od);
        if (in->k && in->kd)
            nan_rows(in, p->heads_kv, p->seqlen_k, b, nk, in->k, in->kd);
        if (in->v && in->vd)
            nan_rows(in, p->heads_kv, p->seqlen_k, b, nk, in->v, in->vd);
    }
}

int ac_inputs_make(const ac_case *c, ac_inputs *in, ac_err *err)
{
    memset(in, 0, sizeof *in);
    int st = ac_case_validate(c, err);
    if (st != AC_OK)
        return st;
    in->c = *c;
    in->p = problem_of(c);
    in->p.seqlens_q = c->n_seqlens_q ? c->seqlens_q : NULL; /* checked before anything is allocated */
    in->p.seqlens_k = c->n_seqlens_k ? c->seqlens_k : NULL;
    if ((st = ac_problem_validate(&in->p, 0, err)) != AC_OK)
        return st;
    if (c->mask == AC_MASK_DENSE && (double)c->seqlen_q * c->seqlen_k > (double)AC_DEFAULT_MEM_BUDGET / 4)
        return ac_fail(err, AC_ERR_INPUT, "shape too big: a dense mask of nq=%d x nk=%d", c->seqlen_q, c->seqlen_k);
    in->p.seqlens_q = in->p.seqlens_k = NULL;
    st = alloc_storage(in, err);
    if (st == AC_OK)
        st = draw_all(in, err);
    if (st != AC_OK)
        ac_inputs_free(in);
    else /* after every draw, so the values inside the lengths are those of any earlier attncheck */
        ac_inputs_nan_padding(in);
    return st;
}
