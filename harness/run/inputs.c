/* harness/run/inputs.c — a case made concrete: the problem, the mask and lengths,
 * and Q, K, V, dO drawn in the case's dtype with their exact widenings.
 *
 * Reproducibility: every tensor has its own random stream, derived from the
 * case seed by splitmix64, and elements are drawn in logical order
 * (b, h, s, c) whatever the layout, so one case line gives byte-identical
 * tensors on every machine (no libm in the draws: the normal deviates are
 * Irwin-Hall sums of 12 uniforms, exact in double) and bhsd/bshd give the
 * same logical values.  What each distribution draws is documented in
 * harness.h beside ac_dist_kind.
 *
 * Parallel, with the same bytes: a draw consumes a number of 64-bit words
 * that depends on the distribution, the role (Q, K, V, dO), the row and the
 * channel, never on the batch or the head, so every (b, h) slice of a tensor
 * advances its stream by the same amount.  splitmix64's state moves by a
 * fixed increment per word, so slice k starts at state_0 + k * (the advance
 * of slice 0): slice 0 of each tensor runs first and measures it, then every
 * other slice of every tensor runs as its own task from its own start
 * (ref/parallel.h).  What a slice remembers between draws (equal's shared K
 * row, increasing's row value) lives in the task.  workers = 0 keeps the
 * definition itself, one running stream per tensor slice after slice: the
 * tests' oracle (inputs_internal.h).  The variants' tensors keep this: V and
 * dO with d_v columns are slices of their own width, and THD draws every row
 * of the padded grid (so its values are its bshd twin's) and stores the rows
 * its sequences have.  A dense mask of several (b, h) slices (maskdims) draws
 * them one after the other from one stream, each a fixed number of words. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "harness/run/inputs.h"
#include "harness/run/inputs_internal.h"
#include "harness/run/inputs_variants.h"
#include "ref/parallel.h"
#include "ref/rng.h"

/* ---- random streams -------------------------------------------------------- */

typedef struct {
    uint64_t state;
} rng;

uint64_t inputs_stream(uint64_t seed, uint64_t id)
{
    uint64_t s = seed;
    uint64_t a = ac_splitmix64(&s);
    s = a ^ (id * 0xD1B54A32D192ED03ull);
    return ac_splitmix64(&s);
}

static rng stream(uint64_t seed, uint64_t id)
{
    rng r = {inputs_stream(seed, id)};
    return r;
}

static uint64_t next_u64(rng *r) { return ac_splitmix64(&r->state); }

/* How far the state moves over n draws: n times splitmix64's increment (read
 * off the generator itself, so the two cannot disagree), mod 2^64. */
static uint64_t advance_of(uint64_t n_draws)
{
    uint64_t s = 0;
    ac_splitmix64(&s);
    return s * n_draws;
}
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
    rng r = stream(c->seed, INPUTS_STREAM_MODE);
    return (int)(next_u64(&r) >> 63);
}

/* ---- the value of one element --------------------------------------------- */

typedef enum { ROLE_Q, ROLE_K, ROLE_V, ROLE_DO } role;

/* What every draw of one tensor reads (shared by the tasks, never written). */
typedef struct {
    const ac_case *c;
    const ac_problem *p;
    role r;
    int mode; /* ac_dist_mode */
    const double *signs; /* (B, Hkv, max(d, d_v)) of +-1: increasing's w, huge values' column signs */
} draw_ctx;

/* What a (b, h) slice remembers between its own draws; one per task. */
typedef struct {
    double row_val; /* per-row draw (increasing's a_i), set at channel 0 */
    double vec[AC_MAX_HEAD_DIM]; /* equal's shared K row, set by row 0 */
} slice_state;

static double top_scores(ac_dtype t) { return t == AC_F16 ? ac_max_finite(t) : 0x1p56; }
static double top_values(ac_dtype t) { return t == AC_F16 ? ac_max_finite(t) : ac_max_finite(t) * 0x1p-17; }
static double min_normal(ac_dtype t) { return ac_min_subnormal(t) / (2.0 * ac_unit_roundoff(t)); }

static double draw_plain(const ac_case *c, rng *r)
{
    switch (c->dist) {
    case AC_DIST_UNIFORM:
        return c->dist_a + (c->dist_b - c->dist_a) * unif(r);
    case AC_DIST_OUTLIERS: {
        double x = c->dist_a * gauss(r);
        return unif(r) < c->dist_b ? x * AC_OUTLIER_FACTOR : x;
    }
    case AC_DIST_NORMAL:
        return c->dist_a + c->dist_b * gauss(r);
    case AC_DIST_FA3: { /* the outlier's draw only when it happens: P of the elements */
        double x = gauss(r);
        return unif(r) < c->dist_a ? x + c->dist_b * gauss(r) : x;
    }
    default:
        return gauss(r);
    }
}

/* huge/tiny: is this role the one the mode makes extreme? */
static bool extreme_role(const draw_ctx *x)
{
    return x->mode == 0 ? (x->r == ROLE_Q || x->r == ROLE_K) : x->r == ROLE_V;
}

/* Columns of the sign array (B, Hkv, .): every column a Q, K or V row has. */
static int signs_dim(const ac_problem *p) { return p->head_dim > ac_head_dim_v(p) ? p->head_dim : ac_head_dim_v(p); }

static double draw_special(const draw_ctx *x, slice_state *ss, rng *r, int b, int h, int s, int ch)
{
    const ac_case *c = x->c;
    const ac_problem *p = x->p;
    int d = signs_dim(p), hk = x->r == ROLE_Q ? ac_kv_head_of(p, h) : h;
    double w = x->signs ? x->signs[((size_t)b * p->heads_kv + hk) * d + ch] : 1.0;
    switch (c->dist) {
    case AC_DIST_INCREASING:
        if (x->r == ROLE_Q) {
            if (ch == 0)
                ss->row_val = (0.5 + 0.5 * unif(r)) / (p->scale * d);
            return w * ss->row_val;
        }
        return w * c->dist_a * (s + 1) / p->seqlen_k;
    case AC_DIST_EQUAL:
        if (s == 0)
            ss->vec[ch] = gauss(r);
        return ss->vec[ch];
    case AC_DIST_DOMINANT:
        return ch == 0 ? (p->scale > 0 ? 1.0 : -1.0) : gauss(r);
    /* Two draws of one value are made in statements of their own: C leaves the
     * order of a single expression's operands open, and clang and gcc differed on
     * tiny's.  The order is gcc's, which every earlier case line was drawn with. */
    case AC_DIST_HUGE:
        if (x->mode == 0) {
            double sg = sign(r);
            return sg * c->dist_a * top_scores(c->dtype) * (0.5 + 0.5 * unif(r));
        }
        return w * c->dist_a * top_values(c->dtype) * (1.0 - 0x1p-9 * unif(r));
    case AC_DIST_TINY: {
        /* [2, 128) x the smallest normal; ldexp is exact, so no libm rounding enters */
        double sg = sign(r);
        int binade = 1 + (int)(next_u64(r) % 6);
        return sg * min_normal(c->dtype) * ldexp(1.0 + unif(r), binade);
    }
    default:
        return draw_plain(c, r);
    }
}

static bool special_applies(const draw_ctx *x)
{
    switch (x->c->dist) {
    case AC_DIST_INCREASING:
        return x->r == ROLE_Q || x->r == ROLE_K;
    case AC_DIST_EQUAL:
        return x->r == ROLE_K;
    case AC_DIST_DOMINANT:
        return x->r == ROLE_Q;
    case AC_DIST_HUGE:
    case AC_DIST_TINY:
        return extreme_role(x);
    default:
        return false;
    }
}

static double draw_value(const draw_ctx *x, slice_state *ss, rng *r, int b, int h, int s, int ch)
{
    if (x->r == ROLE_DO)
        return gauss(r);
    if (special_applies(x))
        return draw_special(x, ss, r, b, h, s, ch);
    switch (x->c->dist) {
    case AC_DIST_OUTLIERS:
        /* outliers in Q and K (heavy-tailed scores, as LLM activations have); V
         * with a heavy tail too would push dQ = scale dS K past f16's range */
        return x->r == ROLE_V ? x->c->dist_a * gauss(r) : draw_plain(x->c, r);
    case AC_DIST_NORMAL:
    case AC_DIST_UNIFORM:
    case AC_DIST_FA3:
        return draw_plain(x->c, r);
    default:
        return gauss(r);
    }
}

/* ---- tensors ---------------------------------------------------------------- */

/* One tensor being filled: its draws, its storage, and where its slices'
 * streams start. */
typedef struct {
    draw_ctx x;
    void *bits;
    double *wide;
    ac_tensor_kind kind; /* Q, K, V (d_v columns) or O (dO: d_v columns) */
    int heads, seqlen, slices; /* slices = B x heads, (b, h) in logical order */
    uint64_t first_state; /* the stream's state before its first draw */
    uint64_t slice_advance; /* how far one slice moves it (from slice 0) */
    atomic_bool nonzero; /* some element is not zero */
    bool raw; /* fp8's Q, K, V: the draws as they are, quantised later (inputs_fp8.c) */
} tensor_fill;

/* Draws slice k = b * heads + h of f from r, in logical order (s, c). */
static void fill_slice(tensor_fill *f, int slice, rng *r)
{
    const ac_problem *p = f->x.p;
    ac_dtype t = f->x.c->dtype;
    int b = slice / f->heads, h = slice % f->heads, cols = ac_tensor_dim(p, f->kind);
    int stored = ac_stored_rows(p, b, f->kind == AC_TENSOR_Q || f->kind == AC_TENSOR_O);
    slice_state ss = {0};
    bool nonzero = false;
    for (int s = 0; s < f->seqlen; s++) {
        if (s >= stored) { /* THD stores no padding: drawn anyway, so values match the padded layouts' */
            for (int ch = 0; ch < cols; ch++)
                (void)draw_value(&f->x, &ss, r, b, h, s, ch);
            continue;
        }
        size_t row = ac_tensor_index(p, f->kind, b, h, s, 0); /* channels are contiguous in every layout */
        for (int ch = 0; ch < cols; ch++) {
            if (f->raw) {
                f->wide[row + ch] = draw_value(&f->x, &ss, r, b, h, s, ch);
                nonzero |= f->wide[row + ch] != 0.0;
                continue;
            }
            uint32_t v = ac_narrow(t, draw_value(&f->x, &ss, r, b, h, s, ch));
            ac_bits_put(t, f->bits, row + ch, v);
            f->wide[row + ch] = ac_widen(t, v);
            nonzero |= f->wide[row + ch] != 0.0;
        }
    }
    if (nonzero)
        atomic_store_explicit(&f->nonzero, true, memory_order_relaxed);
}

/* The definition: one running stream per tensor, slice after slice. */
static void fill_serial(tensor_fill *f)
{
    rng r = {f->first_state};
    for (int k = 0; k < f->slices; k++)
        fill_slice(f, k, &r);
}

/* Phase 1: slice 0 of tensor `task`, measuring its advance. */
static void fill_first_slice(void *ctx, size_t task, int worker)
{
    (void)worker;
    tensor_fill *f = (tensor_fill *)ctx + task;
    rng r = {f->first_state};
    fill_slice(f, 0, &r);
    f->slice_advance = r.state - f->first_state;
}

/* Phase 2: the other slices of the four tensors; task t is slice
 * 1 + t' of the tensor whose range t falls in (t' counted from its start). */
static void fill_other_slice(void *ctx, size_t task, int worker)
{
    (void)worker;
    tensor_fill *f = ctx;
    while (task >= (size_t)(f->slices - 1))
        task -= (size_t)(f->slices - 1), f++;
    int slice = (int)task + 1;
    rng r = {f->first_state + (uint64_t)slice * f->slice_advance};
    fill_slice(f, slice, &r);
}

static void fill_tensors(tensor_fill f[4], int workers)
{
    if (workers == 0) {
        for (int a = 0; a < 4; a++)
            fill_serial(&f[a]);
        return;
    }
    size_t others = 0;
    for (int a = 0; a < 4; a++)
        others += (size_t)f[a].slices - 1;
    ref_parallel_for(workers, 4, fill_first_slice, f);
    ref_parallel_for(workers, others, fill_other_slice, f);
}

/* +-1 per (b, kv head, channel). */
static double *draw_signs(const ac_case *c, const ac_problem *p)
{
    size_t n = (size_t)p->batch * p->heads_kv * (size_t)signs_dim(p);
    double *signs = malloc(n * sizeof *signs);
    if (!signs)
        return NULL;
    rng r = stream(c->seed, INPUTS_STREAM_SIGNS);
    for (size_t i = 0; i < n; i++)
        signs[i] = sign(&r);
    return signs;
}

/* ---- problem, lengths, mask -------------------------------------------------- */

static ac_problem problem_of(const ac_case *c)
{
    ac_problem p = ac_problem_dense(c->batch, c->heads_q, c->heads_kv, c->seqlen_q, c->seqlen_k, c->head_dim);
    p.layout = c->layout;
    /* The scale is the f32 the kernel multiplies by; the reference uses the same value. */
    p.scale = (double)(float)(c->scale_auto ? 1.0 / sqrt((double)c->head_dim) : c->scale);
    ac_case_mask_to_problem(c, &p);
    inputs_variants_problem(c, &p); /* inputs_variants.c: dv, softcap, dropout, maskdims, ... */
    inputs_fp8_problem(c, &p); /* inputs_fp8.c: out, p, descale */
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

/* The keep draws of a dense mask: each (Nq, Nk) slice is Nq Nk keep draws
 * then n_masked row picks, so slice s starts s (Nq Nk + n_masked) draws into
 * the mask stream and its row i i Nk draws further; tasks are blocks of
 * MASK_ROWS rows of one slice. */
#define MASK_ROWS 64
typedef struct {
    uint8_t *mask;
    size_t nq, nk, blocks; /* blocks: tasks per slice */
    uint64_t first_state;
    uint64_t slice_draws; /* Nq Nk + n_masked */
    double keep;
} mask_job;

static void mask_task(void *ctx, size_t task, int worker)
{
    (void)worker;
    mask_job *j = ctx;
    size_t slice = task / j->blocks, i0 = task % j->blocks * MASK_ROWS;
    size_t i1 = i0 + MASK_ROWS < j->nq ? i0 + MASK_ROWS : j->nq;
    uint8_t *mask = j->mask + slice * j->nq * j->nk;
    rng r = {j->first_state + advance_of(slice * j->slice_draws + i0 * j->nk)};
    for (size_t e = i0 * j->nk; e < i1 * j->nk; e++)
        mask[e] = unif(&r) < j->keep;
}

/* The rows of one slice fully masked: a partial Fisher-Yates, rows[0..n_masked). */
static void mask_rows(rng *r, size_t nq, size_t nk, size_t n_masked, int *rows, uint8_t *mask)
{
    for (size_t i = 0; i < nq; i++)
        rows[i] = (int)i;
    for (size_t m = 0; m < n_masked; m++) {
        size_t pick = m + (size_t)(next_u64(r) % (nq - m));
        int tmp = rows[m];
        rows[m] = rows[pick];
        rows[pick] = tmp;
        memset(mask + (size_t)rows[m] * nk, 0, nk);
    }
}

/* Slices of a case's dense mask: one per (b, h) its maskdims keep. */
static size_t mask_slices(const ac_case *c)
{
    return (size_t)(c->mask_per_batch ? c->batch : 1) * (size_t)(c->mask_per_head ? c->heads_q : 1);
}

/* Dense (mask_batch, mask_heads, Nq, Nk), one (Nq, Nk) slice after the other
 * from the same stream (a (1, 1) mask is the slice it always was): each pair
 * kept with probability keep, then round(maskrows * Nq) rows (at least one
 * when maskrows > 0) fully masked. */
static uint8_t *draw_dense_mask(const ac_case *c, int workers)
{
    size_t nq = (size_t)c->seqlen_q, nk = (size_t)c->seqlen_k, slices = mask_slices(c);
    uint8_t *mask = malloc(slices * nq * nk);
    int *rows = malloc(sizeof(int) * nq);
    if (!mask || !rows) {
        free(mask);
        free(rows);
        return NULL;
    }
    size_t n_masked = (size_t)llround(c->masked_rows * (double)nq);
    if (c->masked_rows > 0 && n_masked == 0)
        n_masked = 1;
    rng r = stream(c->seed, INPUTS_STREAM_MASK);
    mask_job job = {mask, nq, nk, (nq + MASK_ROWS - 1) / MASK_ROWS, r.state, nq * nk + n_masked, c->dense_keep};
    if (workers > 0)
        ref_parallel_for(workers, slices * job.blocks, mask_task, &job);
    for (size_t s = 0; s < slices; s++) {
        uint8_t *slice = mask + s * nq * nk;
        if (workers == 0) /* the definition: one running stream */
            for (size_t e = 0; e < nq * nk; e++)
                slice[e] = unif(&r) < c->dense_keep;
        else
            r.state = job.first_state + advance_of(s * job.slice_draws + nq * nk);
        mask_rows(&r, nq, nk, n_masked, rows, slice);
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
    free(in->seqlens_q), free(in->seqlens_k), free(in->dense_mask), free(in->block_table);
    free(in->descale_q), free(in->descale_k), free(in->descale_v);
    inputs_variants_free(in);
    memset(in, 0, sizeof *in);
}

static int alloc_storage(ac_inputs *in, int workers, ac_err *err)
{
    const ac_case *c = &in->c;
    size_t nq = ac_q_elems(&in->p), nkv = ac_kv_elems(&in->p), es = ac_dtype_size(c->dtype);
    size_t no = ac_o_elems(&in->p), nv = ac_v_elems(&in->p); /* dO, V: d_v columns */
    /* + 1: THD with no rows at all asks for 0 bytes, and malloc(0) may be NULL */
    in->q = malloc(nq * es + 1), in->d_o = malloc(no * es + 1);
    in->k = malloc(nkv * es + 1), in->v = malloc(nv * es + 1);
    in->qd = malloc(nq * sizeof(double) + 1), in->d_od = malloc(no * sizeof(double) + 1);
    in->kd = malloc(nkv * sizeof(double) + 1), in->vd = malloc(nv * sizeof(double) + 1);
    bool ok = in->q && in->d_o && in->k && in->v && in->qd && in->d_od && in->kd && in->vd;
    in->seqlens_q = copy_lens(c->seqlens_q, c->n_seqlens_q);
    in->seqlens_k = copy_lens(c->seqlens_k, c->n_seqlens_k);
    ok = ok && (c->n_seqlens_q == 0 || in->seqlens_q) && (c->n_seqlens_k == 0 || in->seqlens_k);
    if (ok && c->mask == AC_MASK_DENSE)
        ok = (in->dense_mask = draw_dense_mask(c, workers)) != NULL;
    if (!ok)
        return ac_fail(err, AC_ERR_ENV, "inputs: out of memory for b=%d hq=%d hkv=%d nq=%d nk=%d d=%d", c->batch,
                       c->heads_q, c->heads_kv, c->seqlen_q, c->seqlen_k, c->head_dim);
    if (c->layout != AC_LAYOUT_THD) { /* THD: the lengths are cu_seqlens (inputs_variants_layout) */
        in->p.seqlens_q = in->seqlens_q;
        in->p.seqlens_k = in->seqlens_k;
    }
    in->p.dense_mask = in->dense_mask;
    return AC_OK;
}

static void tensor_init(tensor_fill *f, const ac_inputs *in, role r, const double *signs, void *bits, double *wide)
{
    static const uint64_t stream_of[] = {[ROLE_Q] = INPUTS_STREAM_Q,
                                         [ROLE_K] = INPUTS_STREAM_K,
                                         [ROLE_V] = INPUTS_STREAM_V,
                                         [ROLE_DO] = INPUTS_STREAM_DO};
    const ac_problem *p = &in->p;
    bool q_like = r == ROLE_Q || r == ROLE_DO;
    f->x = (draw_ctx){.c = &in->c, .p = p, .r = r, .mode = ac_dist_mode(&in->c), .signs = signs};
    static const ac_tensor_kind kind_of[] = {
        [ROLE_Q] = AC_TENSOR_Q, [ROLE_K] = AC_TENSOR_K, [ROLE_V] = AC_TENSOR_V, [ROLE_DO] = AC_TENSOR_O};
    f->kind = kind_of[r];
    f->bits = bits, f->wide = wide;
    f->heads = q_like ? p->heads_q : p->heads_kv;
    f->seqlen = q_like ? p->seqlen_q : p->seqlen_k;
    f->slices = p->batch * f->heads;
    f->first_state = stream(in->c.seed, stream_of[r]).state;
    f->slice_advance = 0;
    f->raw = ac_dtype_is_fp8(in->c.dtype) && r != ROLE_DO;
    atomic_init(&f->nonzero, ac_tensor_elems(p, f->kind) == 0); /* THD with no rows: nothing to be zero */
}

static int draw_all(ac_inputs *in, int workers, ac_err *err)
{
    const ac_case *c = &in->c;
    bool need_signs = c->dist == AC_DIST_INCREASING || (c->dist == AC_DIST_HUGE && ac_dist_mode(c) == 1);
    double *signs = need_signs ? draw_signs(c, &in->p) : NULL;
    if (need_signs && !signs)
        return ac_fail(err, AC_ERR_ENV, "inputs: out of memory");
    tensor_fill f[4];
    tensor_init(&f[0], in, ROLE_Q, signs, in->q, in->qd);
    tensor_init(&f[1], in, ROLE_K, signs, in->k, in->kd);
    tensor_init(&f[2], in, ROLE_V, signs, in->v, in->vd);
    tensor_init(&f[3], in, ROLE_DO, signs, in->d_o, in->d_od);
    fill_tensors(f, workers);
    free(signs);
    int st = inputs_fp8_quantise(in, err); /* fp8: descale factors, codes (inputs_fp8.c) */
    if (st != AC_OK)
        return st;
    in->p.descale_q = in->descale_q, in->p.descale_k = in->descale_k, in->p.descale_v = in->descale_v;
    static const char *const names[] = {"Q", "K", "V"}; /* dO may be all zeros */
    for (int a = 0; a < 3; a++)
        if (!atomic_load(&f[a].nonzero))
            return ac_fail(err, AC_ERR_INPUT, "dist: every element of %s rounds to zero in %s; pick larger values",
                           names[a], ac_dtype_name(c->dtype));
    return c->dist == AC_DIST_DOMINANT ? inputs_plant_dominant(in, workers, err) : AC_OK;
}

ac_dtype ac_inputs_out_dtype(const ac_inputs *in) { return ac_case_out_dtype(&in->c); }

/* ---- varlen padding: NaN ------------------------------------------------------ */

/* Rows s >= valid (of every head of batch b) of one tensor of kind `kind`
 * become NaN, in the dtype's bits and in the widening alike, up to the rows
 * it stores (THD stores none past a sequence's length). */
static void nan_rows(const ac_inputs *in, ac_tensor_kind kind, int b, int valid, void *bits, double *wide)
{
    const ac_problem *p = &in->p;
    ac_dtype t = in->c.dtype;
    uint32_t nan_bits = ac_narrow(t, NAN);
    bool q_side = kind == AC_TENSOR_Q || kind == AC_TENSOR_O;
    int heads = q_side ? p->heads_q : p->heads_kv, stored = ac_stored_rows(p, b, q_side);
    for (int h = 0; h < heads; h++)
        for (int s = valid; s < stored; s++)
            for (int ch = 0; ch < ac_tensor_dim(p, kind); ch++) {
                size_t at = ac_tensor_index(p, kind, b, h, s, ch);
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
            nan_rows(in, AC_TENSOR_Q, b, nq, in->q, in->qd);
        if (in->d_o && in->d_od)
            nan_rows(in, AC_TENSOR_O, b, nq, in->d_o, in->d_od);
        if (in->k && in->kd)
            nan_rows(in, AC_TENSOR_K, b, nk, in->k, in->kd);
        if (in->v && in->vd)
            nan_rows(in, AC_TENSOR_V, b, nk, in->v, in->vd);
    }
}

int inputs_make_workers(const ac_case *c, ac_inputs *in, int workers, ac_err *err)
{
    memset(in, 0, sizeof *in);
    int st = ac_case_validate(c, err);
    if (st != AC_OK)
        return st;
    in->c = *c;
    in->p = problem_of(c);
    if ((st = inputs_variants_layout(in, err)) != AC_OK) { /* THD's cu_seqlens (inputs_variants.c) */
        ac_inputs_free(in);
        return st;
    }
    bool padded = c->layout != AC_LAYOUT_THD;
    in->p.seqlens_q = c->n_seqlens_q && padded ? c->seqlens_q : NULL; /* checked before anything is allocated */
    in->p.seqlens_k = c->n_seqlens_k && padded ? c->seqlens_k : NULL;
    st = ac_problem_validate(&in->p, 0, err);
    if (st == AC_OK && !ac_inputs_mask_fits(c))
        st = ac_fail(err, AC_ERR_INPUT, "shape too big: a dense mask of %zu x nq=%d x nk=%d", mask_slices(c),
                     c->seqlen_q, c->seqlen_k);
    in->p.seqlens_q = in->p.seqlens_k = NULL;
    if (st == AC_OK)
        st = alloc_storage(in, workers, err);
    if (st == AC_OK)
        st = draw_all(in, workers, err);
    if (st == AC_OK)
        inputs_v_from_k(in); /* v=k: V is K's first d_v channels (inputs_variants.c) */
    if (st == AC_OK)
        st = inputs_variants_draw(in, err); /* inputs_variants.c: after the tensors (sinks=over reads them) */
    if (st == AC_OK) /* after every draw, so the values inside the lengths are those of any earlier attncheck */
        ac_inputs_nan_padding(in);
    if (st == AC_OK)
        st = ac_inputs_page(in, err); /* inputs_paged.c: kv=paged(P), splits */
    if (st != AC_OK)
        ac_inputs_free(in);
    return st;
}

/* At least 2^16 elements a worker: a thread start costs tens of microseconds,
 * and most fuzz cases are a few thousand elements. */
#define MIN_ELEMS_PER_WORKER 65536.0

bool ac_inputs_mask_fits(const ac_case *c)
{
    return c->mask != AC_MASK_DENSE ||
        (double)mask_slices(c) * c->seqlen_q * c->seqlen_k <= (double)AC_DEFAULT_MEM_BUDGET / 4;
}

int ac_inputs_make(const ac_case *c, ac_inputs *in, ac_err *err)
{
    int workers = 1;
    memset(in, 0, sizeof *in);
    int st = ref_thread_count(&workers, err);
    if (st != AC_OK)
        return st;
    double elems =
        2.0 * c->batch * ((double)c->heads_q * c->seqlen_q + (double)c->heads_kv * c->seqlen_k) * c->head_dim;
    if (c->mask == AC_MASK_DENSE)
        elems += (double)mask_slices(c) * c->seqlen_q * c->seqlen_k / 4; /* a keep draw is cheaper */
    double useful = floor(elems / MIN_ELEMS_PER_WORKER);
    if (useful < workers)
        workers = useful < 1 ? 1 : (int)useful;
    return inputs_make_workers(c, in, workers, err);
}
