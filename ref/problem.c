/* ref/problem.c — the attention problem: validation, masks, layouts.
 *
 * One definition of "key j is visible from query i" (ac_visible) serves the
 * reference, the emulation and the comparator alike, so a mask convention is
 * written down exactly once (see ref.h for the rule). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "fp64_block.h"
#include "mask_kinds.h"
#include "parallel.h"
#include "ref.h"
#include "variants_internal.h"

double ac_default_scale(int head_dim) { return 1.0 / sqrt((double)head_dim); }

ac_problem ac_problem_dense(int batch, int heads_q, int heads_kv, int seqlen_q, int seqlen_k, int head_dim)
{
    ac_problem p = {
        .batch = batch,
        .heads_q = heads_q,
        .heads_kv = heads_kv,
        .seqlen_q = seqlen_q,
        .seqlen_k = seqlen_k,
        .head_dim = head_dim,
        .layout = AC_LAYOUT_BHSD,
        .scale = ac_default_scale(head_dim),
        .window_left = AC_WINDOW_INF,
        .window_right = AC_WINDOW_INF,
        .align = AC_ALIGN_TOP_LEFT,
        .mask_batch = 1,
        .mask_heads = 1,
    };
    return p;
}

const char *ac_layout_name(ac_layout l)
{
    static const char *const names[AC_LAYOUT_COUNT] = {
        [AC_LAYOUT_BHSD] = "bhsd", [AC_LAYOUT_BSHD] = "bshd", [AC_LAYOUT_THD] = "thd"};
    return (unsigned)l < AC_LAYOUT_COUNT ? names[l] : "?";
}

int ac_seqlen_q_of(const ac_problem *p, int b)
{
    if (p->layout == AC_LAYOUT_THD)
        return p->cu_seqlens_q[b + 1] - p->cu_seqlens_q[b];
    return p->seqlens_q ? p->seqlens_q[b] : p->seqlen_q;
}

int ac_seqlen_k_of(const ac_problem *p, int b)
{
    if (p->layout == AC_LAYOUT_THD)
        return p->cu_seqlens_k[b + 1] - p->cu_seqlens_k[b];
    return p->seqlens_k ? p->seqlens_k[b] : p->seqlen_k;
}

int ac_stored_rows(const ac_problem *p, int b, bool q_side)
{
    if (p->layout == AC_LAYOUT_THD)
        return q_side ? ac_seqlen_q_of(p, b) : ac_seqlen_k_of(p, b);
    if (!q_side && p->page_size > 0) /* pages hold the sequence's keys, nothing past them */
        return ac_seqlen_k_of(p, b);
    return q_side ? p->seqlen_q : p->seqlen_k;
}

/* THD: rows of all sequences, packed (q_side: cu_seqlens_q[B], else cu_seqlens_k[B]). */
static size_t thd_total(const ac_problem *p, bool q_side)
{
    return (size_t)(q_side ? p->cu_seqlens_q[p->batch] : p->cu_seqlens_k[p->batch]);
}
int ac_kv_head_of(const ac_problem *p, int h_q) { return h_q / (p->heads_q / p->heads_kv); }

size_t ac_q_elems(const ac_problem *p) { return ac_tensor_elems(p, AC_TENSOR_Q); }
size_t ac_kv_elems(const ac_problem *p) { return ac_tensor_elems(p, AC_TENSOR_K); }

size_t ac_lse_elems(const ac_problem *p)
{
    if (p->layout == AC_LAYOUT_THD)
        return (size_t)p->heads_q * thd_total(p, true);
    return (size_t)p->batch * p->heads_q * p->seqlen_q;
}

size_t ac_index(const ac_problem *p, int heads, int seqlen, int b, int h, int s, int c)
{
    size_t d = (size_t)p->head_dim;
    if (p->layout == AC_LAYOUT_BSHD)
        return (((size_t)b * seqlen + s) * heads + h) * d + c;
    return (((size_t)b * heads + h) * seqlen + s) * d + c;
}

size_t ac_q_index(const ac_problem *p, int b, int h, int i, int c)
{
    return ac_tensor_index(p, AC_TENSOR_Q, b, h, i, c);
}

size_t ac_kv_index(const ac_problem *p, int b, int h_kv, int j, int c)
{
    return ac_tensor_index(p, AC_TENSOR_K, b, h_kv, j, c);
}

size_t ac_lse_index(const ac_problem *p, int b, int h, int i)
{
    if (p->layout == AC_LAYOUT_THD) /* (Hq, total_q), FlashAttention's varlen LSE */
        return (size_t)h * thd_total(p, true) + (size_t)p->cu_seqlens_q[b] + (size_t)i;
    return ((size_t)b * p->heads_q + h) * p->seqlen_q + i;
}

/* ---- tensors by kind --------------------------------------------------------- */

int ac_head_dim_v(const ac_problem *p) { return p->head_dim_v > 0 ? p->head_dim_v : p->head_dim; }

int ac_tensor_dim(const ac_problem *p, ac_tensor_kind kind)
{
    return kind == AC_TENSOR_V || kind == AC_TENSOR_O ? ac_head_dim_v(p) : p->head_dim;
}

static bool q_side(ac_tensor_kind kind) { return kind == AC_TENSOR_Q || kind == AC_TENSOR_O; }

size_t ac_tensor_elems(const ac_problem *p, ac_tensor_kind kind)
{
    size_t heads = q_side(kind) ? (size_t)p->heads_q : (size_t)p->heads_kv, d = (size_t)ac_tensor_dim(p, kind);
    if (p->page_size > 0 && !q_side(kind)) /* the pages (num_pages, P, Hkv, d) */
        return (size_t)p->num_pages * (size_t)p->page_size * heads * d;
    if (p->layout == AC_LAYOUT_THD)
        return thd_total(p, q_side(kind)) * heads * d;
    return (size_t)p->batch * heads * (size_t)(q_side(kind) ? p->seqlen_q : p->seqlen_k) * d;
}

size_t ac_tensor_index(const ac_problem *p, ac_tensor_kind kind, int b, int h, int s, int c)
{
    size_t d = (size_t)ac_tensor_dim(p, kind);
    int heads = q_side(kind) ? p->heads_q : p->heads_kv, seqlen = q_side(kind) ? p->seqlen_q : p->seqlen_k;
    if (p->page_size > 0 && !q_side(kind)) /* through the block table */
        return (ac_paged_row(p, b, s) * heads + h) * d + c;
    if (p->layout == AC_LAYOUT_THD) { /* sequence b's rows start at cu_seqlens[b] */
        const int *cu = q_side(kind) ? p->cu_seqlens_q : p->cu_seqlens_k;
        return (((size_t)cu[b] + s) * heads + h) * d + c;
    }
    if (p->layout == AC_LAYOUT_BSHD)
        return (((size_t)b * seqlen + s) * heads + h) * d + c;
    return (((size_t)b * heads + h) * seqlen + s) * d + c;
}

void ac_copy_k_channels_to_v(const ac_problem *p, size_t elem_size, const void *k, void *v, int first)
{
    for (int b = 0; b < p->batch; b++)
        for (int h = 0; h < p->heads_kv; h++)
            for (int s = 0; s < ac_stored_rows(p, b, false); s++)
                memcpy((char *)v + ac_tensor_index(p, AC_TENSOR_V, b, h, s, 0) * elem_size,
                       (const char *)k + ac_tensor_index(p, AC_TENSOR_K, b, h, s, first) * elem_size,
                       (size_t)ac_head_dim_v(p) * elem_size); /* a row's channels are contiguous in every layout */
}

size_t ac_o_elems(const ac_problem *p) { return ac_tensor_elems(p, AC_TENSOR_O); }
size_t ac_v_elems(const ac_problem *p) { return ac_tensor_elems(p, AC_TENSOR_V); }
size_t ac_o_index(const ac_problem *p, int b, int h, int i, int c)
{
    return ac_tensor_index(p, AC_TENSOR_O, b, h, i, c);
}
size_t ac_v_index(const ac_problem *p, int b, int h_kv, int j, int c)
{
    return ac_tensor_index(p, AC_TENSOR_V, b, h_kv, j, c);
}

static bool sink_tokens_on(const ac_problem *p)
{
    return p->sink_tokens > 0 && p->windowed && p->window_left != AC_WINDOW_INF;
}

bool ac_has_pair_mask(const ac_problem *p) { return p->dense_mask || p->bias || sink_tokens_on(p); }

static void window_range(const ac_problem *p, int b, int i, int *lo, int *hi);

void ac_visible_range(const ac_problem *p, int b, int i, int *lo, int *hi)
{
    window_range(p, b, i, lo, hi);
    if (sink_tokens_on(p) && *hi > 0) /* the sink keys [0, k) join: the hull */
        *lo = 0;
}

void ac_visible_gap(const ac_problem *p, int b, int i, int *g0, int *g1)
{
    *g0 = *g1 = 0;
    if (!sink_tokens_on(p))
        return;
    int lo, hi;
    window_range(p, b, i, &lo, &hi);
    *g0 = p->sink_tokens < hi ? p->sink_tokens : hi;
    *g1 = lo < hi ? lo : hi;
    if (*g1 < *g0)
        *g1 = *g0;
}

static void window_range(const ac_problem *p, int b, int i, int *lo, int *hi)
{
    int nq = ac_seqlen_q_of(p, b), nk = ac_seqlen_k_of(p, b);
    *lo = 0;
    *hi = i < nq ? nk : 0;
    if (!p->windowed || *hi == 0)
        return;
    /* The window's centre: query i sits at key i (top-left) or is aligned so
     * the last query meets the last key (bottom-right). Computed in 64 bits:
     * i + nk - nq and the window bounds may exceed int near INT_MAX. */
    long long centre = (long long)i + (p->align == AC_ALIGN_BOTTOM_RIGHT ? nk - nq : 0);
    if (p->window_left != AC_WINDOW_INF && centre - p->window_left > *lo)
        *lo = centre - p->window_left > nk ? nk : (int)(centre - p->window_left);
    if (p->window_right != AC_WINDOW_INF && centre + p->window_right + 1 < *hi)
        *hi = centre + p->window_right + 1 < 0 ? 0 : (int)(centre + p->window_right + 1);
}

bool ac_visible(const ac_problem *p, int b, int h, int i, int j)
{
    int lo, hi;
    ac_visible_range(p, b, i, &lo, &hi);
    if (j < lo || j >= hi)
        return false;
    int g0, g1;
    ac_visible_gap(p, b, i, &g0, &g1);
    if (j >= g0 && j < g1) /* between the sink tokens and the window */
        return false;
    if (p->bias && ac_bias_at(p, b, h, i, j) == -INFINITY) /* a -inf bias hides the pair */
        return false;
    if (!p->dense_mask)
        return true;
    size_t mb = p->mask_batch == 1 ? 0 : (size_t)b;
    size_t mh = p->mask_heads == 1 ? 0 : (size_t)h;
    size_t at = ((mb * p->mask_heads + mh) * p->seqlen_q + i) * p->seqlen_k + j;
    return p->dense_mask[at] != 0;
}

/* ---- mask kinds (the table is ref/mask_kinds.h) ------------------------------- */

typedef struct {
    const char *name, *what;
    unsigned bit, with;
    ac_align align;
} mask_row;

static const mask_row mask_rows[AC_MASK_KIND_COUNT] = {
#define AC_MASK_ROW_(id, spelling, bit_no, alignment, claimed_with, description) \
    [AC_MASK_##id] = {spelling, description, 1u << (bit_no), AC_MASK_##claimed_with, alignment},
    AC_MASK_KINDS(AC_MASK_ROW_)
#undef AC_MASK_ROW_
};

static bool mask_ok(ac_mask_kind k) { return (unsigned)k < AC_MASK_KIND_COUNT; }
const char *ac_mask_name(ac_mask_kind k) { return mask_ok(k) ? mask_rows[k].name : "?"; }
const char *ac_mask_what(ac_mask_kind k) { return mask_ok(k) ? mask_rows[k].what : "?"; }
ac_align ac_mask_align(ac_mask_kind k) { return mask_ok(k) ? mask_rows[k].align : AC_ALIGN_TOP_LEFT; }
unsigned ac_mask_bit(ac_mask_kind k) { return mask_ok(k) ? mask_rows[k].bit : 0; }

unsigned ac_mask_needs(ac_mask_kind k) { return mask_ok(k) ? mask_rows[k].bit | mask_rows[mask_rows[k].with].bit : 0; }

int ac_mask_from_name(const char *name, size_t len, ac_mask_kind *out)
{
    for (int k = 0; name && k < AC_MASK_KIND_COUNT; k++)
        if (strlen(mask_rows[k].name) == len && strncmp(mask_rows[k].name, name, len) == 0) {
            *out = (ac_mask_kind)k;
            return AC_OK;
        }
    return AC_ERR_INPUT;
}

const char *ac_mask_names(void)
{
#define AC_MASK_LIST_(id, spelling, bit, alignment, claimed_with, what) ", " spelling
    static const char list[] = AC_MASK_KINDS(AC_MASK_LIST_);
#undef AC_MASK_LIST_
    return list + 2; /* past the first ", " */
}

unsigned ac_problem_masks(const ac_problem *p)
{
    bool br = p->align == AC_ALIGN_BOTTOM_RIGHT;
    unsigned kinds = 0;
    if (p->windowed) {
        bool causal = p->window_left == AC_WINDOW_INF && p->window_right == 0;
        ac_mask_kind k =
            causal ? (br ? AC_MASK_CAUSAL_BR : AC_MASK_CAUSAL_TL) : (br ? AC_MASK_WINDOW_BR : AC_MASK_WINDOW_TL);
        kinds |= 1u << k;
    }
    if (p->dense_mask)
        kinds |= 1u << AC_MASK_DENSE;
    return kinds ? kinds : 1u << AC_MASK_NONE;
}

static int validate_sizes(const ac_problem *p, ac_err *err)
{
    if (p->batch < 1)
        return ac_fail(err, AC_ERR_INPUT, "batch: must be >= 1, got %d", p->batch);
    if (p->heads_q < 1)
        return ac_fail(err, AC_ERR_INPUT, "heads_q: must be >= 1, got %d", p->heads_q);
    if (p->heads_kv < 1)
        return ac_fail(err, AC_ERR_INPUT, "heads_kv: must be >= 1, got %d", p->heads_kv);
    if (p->heads_q % p->heads_kv != 0)
        return ac_fail(err, AC_ERR_INPUT, "heads_q=%d is not a multiple of heads_kv=%d (GQA)", p->heads_q, p->heads_kv);
    if (p->seqlen_q < 1)
        return ac_fail(err, AC_ERR_INPUT, "seqlen_q: must be >= 1, got %d", p->seqlen_q);
    if (p->seqlen_k < 1)
        return ac_fail(err, AC_ERR_INPUT, "seqlen_k: must be >= 1, got %d", p->seqlen_k);
    if (p->head_dim < 1 || p->head_dim > AC_MAX_HEAD_DIM)
        return ac_fail(err, AC_ERR_INPUT, "head_dim: must be in 1..%d, got %d", AC_MAX_HEAD_DIM, p->head_dim);
    if (p->layout != AC_LAYOUT_BHSD && p->layout != AC_LAYOUT_BSHD && p->layout != AC_LAYOUT_THD)
        return ac_fail(err, AC_ERR_INPUT, "layout: unknown value %d", (int)p->layout);
    if (!isfinite(p->scale) || p->scale == 0.0)
        return ac_fail(err, AC_ERR_INPUT, "scale: must be finite and nonzero, got %g", p->scale);
    return AC_OK;
}

static int validate_mask(const ac_problem *p, ac_err *err)
{
    if (p->windowed) {
        if (p->window_left < 0 && p->window_left != AC_WINDOW_INF)
            return ac_fail(err, AC_ERR_INPUT, "window_left: must be >= 0 or unbounded, got %d", p->window_left);
        if (p->window_right < 0 && p->window_right != AC_WINDOW_INF)
            return ac_fail(err, AC_ERR_INPUT, "window_right: must be >= 0 or unbounded, got %d", p->window_right);
        if (p->align != AC_ALIGN_TOP_LEFT && p->align != AC_ALIGN_BOTTOM_RIGHT)
            return ac_fail(err, AC_ERR_INPUT, "align: unknown value %d", (int)p->align);
    }
    for (int b = 0; b < p->batch; b++) {
        if (p->seqlens_q && (p->seqlens_q[b] < 0 || p->seqlens_q[b] > p->seqlen_q))
            return ac_fail(err, AC_ERR_INPUT, "seqlens_q[%d]=%d: must be in 0..seqlen_q=%d", b, p->seqlens_q[b],
                           p->seqlen_q);
        if (p->seqlens_k && (p->seqlens_k[b] < 0 || p->seqlens_k[b] > p->seqlen_k))
            return ac_fail(err, AC_ERR_INPUT, "seqlens_k[%d]=%d: must be in 0..seqlen_k=%d", b, p->seqlens_k[b],
                           p->seqlen_k);
    }
    if (p->dense_mask) {
        if (p->mask_batch != 1 && p->mask_batch != p->batch)
            return ac_fail(err, AC_ERR_INPUT, "mask_batch: must be 1 or batch=%d, got %d", p->batch, p->mask_batch);
        if (p->mask_heads != 1 && p->mask_heads != p->heads_q)
            return ac_fail(err, AC_ERR_INPUT, "mask_heads: must be 1 or heads_q=%d, got %d", p->heads_q, p->mask_heads);
    }
    return AC_OK;
}

/* ---- the memory a case needs --------------------------------------------------
 * One case holds, for its whole life (harness/run/: inputs, the kernel's
 * outputs and the reference bundle; dtype elements counted as 4 bytes, the
 * widest):
 *   Q-like: q, dO (dtype) and their widenings; o, dq (the kernel's); the fp64
 *     o, dq, their error scales and the naive o, dq: 2*4 + 2*8 + 2*4 + 6*8 = 80 bytes;
 *   K-like: k, v likewise; dk, dv, their scales and the naive dk, dv: 80 bytes;
 *   LSE-like: the kernel's lse (4), the fp64 lse, D, E_lse, naive lse: 36 bytes;
 *   the dense mask, when there is one: Nq * Nk bytes per (mask batch, mask head);
 *   a paged cache: its pages' bits and widenings (12 bytes an element) beside the
 *     contiguous twin the K-like bytes above count;
 *   variants: d_v != d gives V, O, dO, dV (half of the Q-like and K-like bytes)
 *     d_v columns; dropout's keep mask 1 byte per (b, h, i, j) and its bits;
 *     a bias and dBias 32 bytes per bias element (the inputs', the kernel's,
 *     the fp64 dBias and its scale);
 * and, one stage at a time, the largest of the stages' own allocations:
 *   fp64 forward / backward: per worker one / two (rows x max(Nk, 256)) doubles;
 *   error scales: |K|, |V| (K-like doubles), g, r (LSE-like) and per worker
 *     five (rows x max(Nk, 256)) blocks and three (rows x d);
 *   LSE scale: |K| and per worker a (64 x Nk) block (min(64, Nq) rows touched);
 *   naive baseline: float copies of Q, dO, O (d padded to 8), K, V and K^T, V^T
 *     (Nk padded), and per worker two (64 x Nk) and (128 x d) float blocks (of
 *     which only min(64, Nq) rows are ever touched: the count here);
 *   MPFR certification: for a chunk of 8 rows, a 32-byte mpfr_t per (row, key)
 *     and, for the rows it certifies, 128 bits of limbs each; per thread (2) a
 *     pointer per key; a visibility byte per (row, key).
 * The per-worker scratch of every stage is what ref/parallel.c allows:
 * workers * per-worker bytes, but no more than max(REF_SCRATCH_BYTES, one
 * worker's); workers = `workers`, or ref_thread_count's when <= 0.  And 16 MiB
 * for what a run touches besides (OpenBLAS's and MPFR's buffers, stacks:
 * nq=1 nk=3e5 d=1 peaked 0.8 MB above the terms before it).
 * Measured (harness, ref-fp64, 2 workers): nq=1 nk=2e7 d=1 f32 peaked at
 * 7.06 GB of resident memory; this estimate says 7.5 GB (the old one, the
 * bundle alone, said 2.2 GB). */
#define WS_Q_BYTES 80.0
#define WS_KV_BYTES 80.0
#define WS_LSE_BYTES 36.0
#define WS_WIDE_KEYS 256.0 /* ref/backward.c REF_KEY_TILE, ref/scales.c SCALE_KEY_TILE */
#define WS_SCALE_BLOCKS 5.0 /* ref/scales.c: the blocks before B_ABS_Q */
#define WS_LSE_ROWS 64.0 /* ref/scales.c LSE_BLOCK_ROWS */
#define WS_MPFR_CHUNK_ROWS 8.0 /* ref/mpfr_ref.c MP_ROWS_PER_CHUNK */
#define WS_MPFR_THREADS 2.0 /* ref/mpfr_ref.c MP_THREADS */
#define WS_MPFR_VAR_BYTES 32.0 /* sizeof(mpfr_t) on LP64 */
#define WS_MPFR_LIMB_BYTES 16.0 /* AC_DEFAULT_MPFR_PREC (128) bits of limbs */
#define WS_DROPOUT_BYTES 1.25 /* the keep mask unpacked for the reference and the kernel's bits */
#define WS_BIAS_BYTES 32.0 /* bias and the kernel's dBias (4 each at most), fp64 dBias, its scale, naive */
#define WS_PROCESS_BYTES 16777216.0 /* what a run touches besides: OpenBLAS's and MPFR's buffers, stacks */

static double pad8(double x) { return ceil(x / 8.0) * 8.0; }

/* A stage's per-worker scratch, bounded as ref_workers_within bounds it. */
static double scratch(double per_worker, int workers)
{
    double all = per_worker * workers, cap = fmax((double)REF_SCRATCH_BYTES, per_worker);
    return fmin(all, cap);
}

static double stage_peak(const ac_problem *p, int workers)
{
    double d = p->head_dim, nk = p->seqlen_k, rows = ref_block_rows(p), wide = fmax(nk, WS_WIDE_KEYS);
    /* the padded extents: an upper bound of THD's packed rows, known before its cu_seqlens are */
    double kv = (double)p->batch * p->heads_kv * nk * fmax(d, ac_head_dim_v(p));
    double nl = (double)p->batch * p->heads_q * p->seqlen_q;
    double heads = (double)p->batch * p->heads_q, kv_heads = (double)p->batch * p->heads_kv;
    double fwd = scratch(8 * rows * (nk + 1), workers);
    double bwd = scratch(16 * rows * wide, workers);
    double scales = 16 * kv + 16 * nl + scratch(8 * rows * (WS_SCALE_BLOCKS * wide + 3 * d), workers);
    double lse = 8 * kv + scratch(8 * fmin(WS_LSE_ROWS, (double)p->seqlen_q) * nk, workers);
    double naive_copies =
        4 * (3 * heads * p->seqlen_q * pad8(d) + 2 * kv_heads * nk * pad8(d) + 2 * kv_heads * d * pad8(nk));
    /* the naive's blocks are 64 rows tall, but only the rows a problem has are ever touched */
    double naive_rows = fmin(64.0, (double)p->seqlen_q);
    double naive = naive_copies + scratch(4 * (2 * naive_rows * fmax(pad8(nk), 128) + 2 * 128 * pad8(d)), workers);
    double cert_rows = fmin(WS_MPFR_CHUNK_ROWS, (double)p->seqlen_q);
    double cert =
        nk * (WS_MPFR_CHUNK_ROWS * (WS_MPFR_VAR_BYTES + 1) + cert_rows * WS_MPFR_LIMB_BYTES + WS_MPFR_THREADS * 8);
    return fmax(fmax(fmax(fwd, bwd), fmax(scales, lse)), fmax(naive, cert));
}

double ac_problem_working_set(const ac_problem *p, int workers)
{
    if (workers <= 0 && ref_thread_count(&workers, NULL) != AC_OK)
        workers = 1;
    /* d_v != d: V, O, dO, dV and their copies (half of each 80 bytes) have d_v columns */
    double dv_share = (double)ac_head_dim_v(p) / p->head_dim;
    double q = (double)p->batch * p->heads_q * p->seqlen_q * p->head_dim * (0.5 + 0.5 * dv_share);
    double kv = (double)p->batch * p->heads_kv * p->seqlen_k * p->head_dim * (0.5 + 0.5 * dv_share);
    double nl = (double)p->batch * p->heads_q * p->seqlen_q;
    double pairs = (double)p->seqlen_q * p->seqlen_k;
    double mask = p->dense_mask ? (double)p->mask_batch * p->mask_heads * pairs : 0;
    double dropout = p->dropout_p > 0.0 ? WS_DROPOUT_BYTES * p->batch * p->heads_q * pairs : 0;
    double bias = p->bias ? WS_BIAS_BYTES * fmax(1, p->bias_batch) * fmax(1, p->bias_heads) * pairs : 0;
    /* a paged cache: the pages (dtype bits and widenings, 12 bytes an element) beside the contiguous twin */
    double pages =
        p->page_size > 0 ? 12.0 * p->num_pages * p->page_size * p->heads_kv * (p->head_dim + ac_head_dim_v(p)) : 0;
    return WS_PROCESS_BYTES + WS_Q_BYTES * q + WS_KV_BYTES * kv + WS_LSE_BYTES * nl + mask + dropout + bias + pages +
        stage_peak(p, workers);
}

/* The budget ac_problem_validate applies when given 0: AC_DEFAULT_MEM_BUDGET
 * until the program sets another (attncheck --mem-budget). */
static _Atomic size_t default_budget = AC_DEFAULT_MEM_BUDGET;

void ac_set_mem_budget(size_t bytes) { default_budget = bytes ? bytes : AC_DEFAULT_MEM_BUDGET; }
size_t ac_mem_budget(void) { return default_budget; }

/* THD: cu_seqlens_q and _k given, 0 first, nondecreasing, each length within
 * the grid's extent; no padded lengths beside them. */
static int validate_cu(const ac_problem *p, const int *cu, const char *name, int extent, ac_err *err)
{
    if (!cu)
        return ac_fail(err, AC_ERR_INPUT, "%s: the THD layout needs it (B + 1 row offsets)", name);
    if (cu[0] != 0)
        return ac_fail(err, AC_ERR_INPUT, "%s[0] = %d: must be 0", name, cu[0]);
    for (int b = 0; b < p->batch; b++)
        if (cu[b + 1] < cu[b] || cu[b + 1] - cu[b] > extent)
            return ac_fail(err, AC_ERR_INPUT, "%s: sequence %d has length %d, outside 0..%d", name, b,
                           cu[b + 1] - cu[b], extent);
    return AC_OK;
}

static int validate_layout_rows(const ac_problem *p, ac_err *err)
{
    if (p->layout != AC_LAYOUT_THD) {
        if (p->cu_seqlens_q || p->cu_seqlens_k)
            return ac_fail(err, AC_ERR_INPUT, "cu_seqlens: only with the THD layout (padded layouts take seqlens)");
        return AC_OK;
    }
    if (p->seqlens_q || p->seqlens_k)
        return ac_fail(err, AC_ERR_INPUT, "seqlens: the THD layout takes cu_seqlens_q/_k, not padded lengths");
    int st = validate_cu(p, p->cu_seqlens_q, "cu_seqlens_q", p->seqlen_q, err);
    return st == AC_OK ? validate_cu(p, p->cu_seqlens_k, "cu_seqlens_k", p->seqlen_k, err) : st;
}

int ac_problem_validate(const ac_problem *p, size_t mem_budget, ac_err *err)
{
    if (!p)
        return ac_fail(err, AC_ERR_INPUT, "problem: NULL");
    int status = validate_sizes(p, err);
    if (status == AC_OK)
        status = validate_layout_rows(p, err);
    if (status == AC_OK)
        status = validate_mask(p, err);
    if (status == AC_OK)
        status = ref_variants_validate(p, err);
    if (status != AC_OK)
        return status;
    double budget = (double)(mem_budget ? mem_budget : ac_mem_budget());
    double need = ac_problem_working_set(p, 0);
    if (need > budget)
        return ac_fail(err, AC_ERR_INPUT,
                       "shape too big: the reference needs %.3g GiB, over the budget of %.3g GiB "
                       "(b=%d hq=%d hkv=%d nq=%d nk=%d d=%d)",
                       need / (1 << 30), budget / (1 << 30), p->batch, p->heads_q, p->heads_kv, p->seqlen_q,
                       p->seqlen_k, p->head_dim);
    return AC_OK;
}
