/* harness/run/arena.c — one case's kernel buffers in one block, outputs
 * between guard zones; the checks after a kernel call (see arena.h). */
#include <stdio.h>
#include <string.h>

#include "harness/run/arena.h"
#include "harness/verdict/compare.h"
#include "ref/rng.h"

static const char *const buf_names[AC_BUF_COUNT] = {
    "Q",
    "K",
    "V",
    "dO",
    "seqlens_q",
    "seqlens_k",
    "mask",
    "cu_seqlens_q",
    "cu_seqlens_k",
    "sinks",
    "alibi_slopes",
    "bias",
    "block_table",
    "descale_q",
    "descale_k",
    "descale_v",
    "O",
    "LSE",
    "dropout_mask",
    "dQ",
    "dK",
    "dV",
    "dSink",
    "dBias",
};

const char *ac_buf_name(ac_buf b) { return (unsigned)b < AC_BUF_COUNT ? buf_names[b] : "?"; }
bool ac_buf_is_output(ac_buf b) { return b >= AC_BUF_FIRST_OUTPUT && b < AC_BUF_COUNT; }
const char *ac_entry_name(ac_entry e) { return e == AC_ENTRY_FORWARD ? "forward" : "backward"; }

bool ac_entry_writes(ac_entry e, ac_buf b)
{
    if (e == AC_ENTRY_FORWARD)
        return b == AC_BUF_O || b == AC_BUF_LSE || b == AC_BUF_DROPOUT;
    return b == AC_BUF_DQ || b == AC_BUF_DK || b == AC_BUF_DV || b == AC_BUF_DSINK || b == AC_BUF_DBIAS;
}

bool ac_entry_uses(ac_entry e, ac_buf b)
{
    if (e == AC_ENTRY_BACKWARD)
        return b != AC_BUF_DROPOUT;
    return b != AC_BUF_DO && !ac_entry_writes(AC_ENTRY_BACKWARD, b);
}

/* ---- layout ------------------------------------------------------------------ */

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

void ac_arena_plan(const ac_inputs *in, bool backward, ac_arena_layout *l)
{
    memset(l, 0, sizeof *l);
    const ac_problem *p = &in->p;
    uint64_t es = ac_dtype_size(in->c.dtype), os = ac_dtype_size(ac_inputs_out_dtype(in));
    uint64_t nq = ac_q_elems(p), nkv = ac_kv_elems(p), no = ac_o_elems(p), nv = ac_v_elems(p);
    uint64_t heads = (uint64_t)p->heads_q, batch = (uint64_t)p->batch;
    uint64_t bias_bytes = p->bias ? ac_bias_elems(p) * ac_dtype_size(p->bias_dtype) : 0;
    l->dtype = (int32_t)in->c.dtype;
    l->out_dtype = (int32_t)ac_inputs_out_dtype(in);
    l->bias_dtype = (int32_t)(p->bias ? p->bias_dtype : AC_F32);
    l->bytes[AC_BUF_Q] = nq * es;
    l->bytes[AC_BUF_K] = nkv * es;
    l->bytes[AC_BUF_V] = nv * es;
    l->bytes[AC_BUF_DO] = backward ? no * es : 0;
    l->bytes[AC_BUF_SEQLENS_Q] = p->seqlens_q ? sizeof(int) * batch : 0;
    l->bytes[AC_BUF_SEQLENS_K] = p->seqlens_k ? sizeof(int) * batch : 0;
    l->bytes[AC_BUF_MASK] =
        p->dense_mask ? (uint64_t)p->mask_batch * p->mask_heads * p->seqlen_q * (uint64_t)p->seqlen_k : 0;
    l->bytes[AC_BUF_CU_SEQLENS_Q] = p->cu_seqlens_q ? sizeof(int) * (batch + 1) : 0;
    l->bytes[AC_BUF_CU_SEQLENS_K] = p->cu_seqlens_k ? sizeof(int) * (batch + 1) : 0;
    l->bytes[AC_BUF_SINKS] = p->sinks ? sizeof(float) * heads : 0;
    l->bytes[AC_BUF_ALIBI] = p->alibi_slopes ? sizeof(float) * heads * (p->alibi_batch > 1 ? batch : 1) : 0;
    l->bytes[AC_BUF_BIAS] = bias_bytes;
    l->bytes[AC_BUF_BLOCK_TABLE] = p->block_table ? sizeof(int) * batch * (uint64_t)p->pages_per_seq : 0;
    l->bytes[AC_BUF_DESCALE_Q] = p->descale_q ? sizeof(float) * ac_descale_count(p, AC_TENSOR_Q) : 0;
    l->bytes[AC_BUF_DESCALE_K] = p->descale_k ? sizeof(float) * ac_descale_count(p, AC_TENSOR_K) : 0;
    l->bytes[AC_BUF_DESCALE_V] = p->descale_v ? sizeof(float) * ac_descale_count(p, AC_TENSOR_V) : 0;
    l->bytes[AC_BUF_O] = no * os;
    l->bytes[AC_BUF_LSE] = ac_lse_elems(p) * sizeof(float);
    l->bytes[AC_BUF_DROPOUT] = p->dropout_p > 0.0 ? (ac_dropout_elems(p) + 7) / 8 : 0; /* one bit a pair */
    if (backward) {
        l->bytes[AC_BUF_DQ] = nq * os;
        l->bytes[AC_BUF_DK] = nkv * os;
        l->bytes[AC_BUF_DV] = nv * os;
        l->bytes[AC_BUF_DSINK] = p->sinks ? sizeof(float) * heads : 0;
        l->bytes[AC_BUF_DBIAS] = bias_bytes;
    }
    uint64_t at = 0;
    for (int b = 0; b < AC_BUF_COUNT; b++) {
        if (!l->bytes[b])
            continue;
        bool guarded = ac_buf_is_output((ac_buf)b);
        l->off[b] = at + (guarded ? AC_GUARD_BYTES : 0);
        /* the guard after starts where the buffer ends: a one-element overrun lands in it */
        at = align_up(l->off[b] + l->bytes[b] + (guarded ? AC_GUARD_BYTES : 0), 256);
    }
    l->total = at;
}

/* Where the caller keeps input buffer b (the arena's inputs are copies of these). */
static const void *input_source(const ac_inputs *in, ac_buf b)
{
    const ac_problem *p = &in->p;
    const void *src[AC_BUF_FIRST_OUTPUT] = {in->q,           in->k,        in->v,           in->d_o,
                                            p->seqlens_q,    p->seqlens_k, p->dense_mask,   p->cu_seqlens_q,
                                            p->cu_seqlens_k, p->sinks,     p->alibi_slopes, p->bias,
                                            p->block_table,  p->descale_q, p->descale_k,    p->descale_v};
    return b < AC_BUF_FIRST_OUTPUT ? src[b] : NULL;
}

void ac_arena_put_inputs(const ac_arena_layout *l, const ac_inputs *in, uint8_t *base)
{
    for (int b = 0; b < AC_BUF_FIRST_OUTPUT; b++)
        if (l->bytes[b])
            memcpy(base + l->off[b], input_source(in, (ac_buf)b), l->bytes[b]);
}

static const void *at_or_null(const ac_arena_layout *l, ac_buf b, uint8_t *base)
{
    return l->bytes[b] ? base + l->off[b] : NULL;
}

ac_problem ac_arena_problem(const ac_problem *p, const ac_arena_layout *l, uint8_t *base)
{
    ac_problem q = *p;
    q.seqlens_q = at_or_null(l, AC_BUF_SEQLENS_Q, base);
    q.seqlens_k = at_or_null(l, AC_BUF_SEQLENS_K, base);
    q.dense_mask = at_or_null(l, AC_BUF_MASK, base);
    q.cu_seqlens_q = at_or_null(l, AC_BUF_CU_SEQLENS_Q, base);
    q.cu_seqlens_k = at_or_null(l, AC_BUF_CU_SEQLENS_K, base);
    q.sinks = at_or_null(l, AC_BUF_SINKS, base);
    q.alibi_slopes = at_or_null(l, AC_BUF_ALIBI, base);
    q.bias = at_or_null(l, AC_BUF_BIAS, base);
    q.block_table = at_or_null(l, AC_BUF_BLOCK_TABLE, base);
    q.descale_q = at_or_null(l, AC_BUF_DESCALE_Q, base);
    q.descale_k = at_or_null(l, AC_BUF_DESCALE_K, base);
    q.descale_v = at_or_null(l, AC_BUF_DESCALE_V, base);
    q.dropout_keep = NULL;
    return q;
}

void ac_problem_strip_arrays(ac_problem *p)
{
    p->seqlens_q = p->seqlens_k = p->cu_seqlens_q = p->cu_seqlens_k = NULL;
    p->dense_mask = p->dropout_keep = NULL;
    p->sinks = p->alibi_slopes = NULL;
    p->bias = NULL;
    p->block_table = NULL;
    p->descale_q = p->descale_k = p->descale_v = NULL;
}

/* ---- canaries ---------------------------------------------------------------- */

/* Word k of every guard: splitmix64 of a fixed stream, so no arithmetic and no
 * plausible store (zeros, NaN, a copy of the output) reproduces it. */
static uint64_t canary_word(uint64_t k)
{
    uint64_t s = 0xA77C4EC4CA4A21E5ull + k * 0x9E3779B97F4A7C15ull;
    return ac_splitmix64(&s);
}

void ac_canary_fill(uint8_t *buf, size_t n)
{
    for (size_t i = 0; i < n; i += 8) {
        uint64_t w = canary_word(i / 8);
        memcpy(buf + i, &w, n - i < 8 ? n - i : 8);
    }
}

bool ac_canary_damage(const uint8_t *buf, size_t n, size_t *first, size_t *last)
{
    bool any = false;
    for (size_t i = 0; i < n; i += 8) {
        uint64_t w = canary_word(i / 8);
        size_t len = n - i < 8 ? n - i : 8;
        if (memcmp(buf + i, &w, len) == 0)
            continue;
        const uint8_t *want = (const uint8_t *)&w;
        for (size_t j = 0; j < len; j++)
            if (buf[i + j] != want[j]) {
                if (!any)
                    *first = i + j;
                *last = i + j;
                any = true;
            }
    }
    return any;
}

/* ---- arming --------------------------------------------------------------------- */

/* The dtype of buffer b's elements, for those that have one (f32 for LSE,
 * sinks, slopes, dSink; the bias's for bias and dBias); -1 for the integer
 * and byte arrays. */
static int buf_dtype(const ac_arena_layout *l, ac_buf b)
{
    switch (b) {
    case AC_BUF_LSE:
    case AC_BUF_SINKS:
    case AC_BUF_ALIBI:
    case AC_BUF_DSINK:
        return AC_F32;
    case AC_BUF_DESCALE_Q:
    case AC_BUF_DESCALE_K:
    case AC_BUF_DESCALE_V:
        return AC_F32;
    case AC_BUF_BIAS:
    case AC_BUF_DBIAS:
        return l->bias_dtype;
    case AC_BUF_SEQLENS_Q:
    case AC_BUF_SEQLENS_K:
    case AC_BUF_CU_SEQLENS_Q:
    case AC_BUF_CU_SEQLENS_K:
    case AC_BUF_MASK:
    case AC_BUF_DROPOUT:
        return -1;
    default:
        return ac_buf_is_output(b) ? l->out_dtype : l->dtype;
    }
}

static size_t elem_size(const ac_arena_layout *l, ac_buf b)
{
    int t = buf_dtype(l, b);
    if (t >= 0)
        return ac_dtype_size((ac_dtype)t);
    return b == AC_BUF_MASK || b == AC_BUF_DROPOUT ? 1 : sizeof(int);
}

void ac_arena_arm(const ac_arena_layout *l, ac_entry e, uint8_t *base)
{
    for (int b = AC_BUF_FIRST_OUTPUT; b < AC_BUF_COUNT; b++) {
        /* the forward arms every output: a stray store into dQ's guards shows there too */
        if (!l->bytes[b] || (e == AC_ENTRY_BACKWARD && !ac_entry_writes(e, (ac_buf)b)))
            continue;
        uint8_t *buf = base + l->off[b];
        size_t n = l->bytes[b] / elem_size(l, (ac_buf)b);
        if (b == AC_BUF_DROPOUT)
            memset(buf, AC_DROPOUT_POISON, n);
        else
            ac_poison((ac_dtype)buf_dtype(l, (ac_buf)b), buf, n);
        ac_canary_fill(buf - AC_GUARD_BYTES, AC_GUARD_BYTES);
        ac_canary_fill(buf + l->bytes[b], AC_GUARD_BYTES);
    }
}

/* ---- checks ------------------------------------------------------------------------ */

/* Sequence b of THD's packed row t (cu: the (B + 1) offsets). */
static uint64_t thd_sequence(const ac_problem *p, const int *cu, uint64_t t)
{
    uint64_t b = 0;
    while (cu && (int)b + 1 < p->batch && t >= (uint64_t)cu[b + 1])
        b++;
    return b;
}

/* "(b=0 h=1 i=3 c=2)": element idx of a Q-, K-, V- or O-shaped buffer. */
static void where_tensor(const ac_problem *p, ac_tensor_kind kind, uint64_t idx, char *out, size_t len)
{
    bool q_like = kind == AC_TENSOR_Q || kind == AC_TENSOR_O;
    uint64_t heads = (uint64_t)(q_like ? p->heads_q : p->heads_kv);
    uint64_t seqlen = (uint64_t)(q_like ? p->seqlen_q : p->seqlen_k);
    uint64_t d = (uint64_t)ac_tensor_dim(p, kind), c = idx % d, r = idx / d, h, s;
    if (p->layout == AC_LAYOUT_THD) { /* (total, H, d): row r / H of the packed rows */
        const int *cu = q_like ? p->cu_seqlens_q : p->cu_seqlens_k;
        h = r % heads, s = r / heads, r = thd_sequence(p, cu, s);
        s -= cu ? (uint64_t)cu[r] : 0;
    } else if (p->layout == AC_LAYOUT_BHSD) {
        s = r % seqlen, h = (r / seqlen) % heads, r /= seqlen * heads;
    } else {
        h = r % heads, s = (r / heads) % seqlen, r /= heads * seqlen;
    }
    snprintf(out, len, "(b=%llu h=%llu %s=%llu c=%llu)", (unsigned long long)r, (unsigned long long)h,
             q_like ? "i" : "j", (unsigned long long)s, (unsigned long long)c);
}

/* "(b=0 h=1 i=3 j=2 ...)": entry idx of a (nb, nh, Nq, Nk) array (the bias, dBias). */
static void where_pairs(const ac_problem *p, uint64_t idx, uint64_t nh, char *out, size_t len)
{
    uint64_t j = idx % (uint64_t)p->seqlen_k, r = idx / (uint64_t)p->seqlen_k;
    uint64_t i = r % (uint64_t)p->seqlen_q, slice = r / (uint64_t)p->seqlen_q;
    snprintf(out, len, "(b=%llu h=%llu i=%llu j=%llu of the broadcast shape)", (unsigned long long)(slice / nh),
             (unsigned long long)(slice % nh), (unsigned long long)i, (unsigned long long)j);
}

/* Element idx of buffer b in the problem's terms. */
static void where(const ac_problem *p, ac_buf b, uint64_t idx, char *out, size_t len)
{
    uint64_t hq = (uint64_t)p->heads_q;
    switch (b) {
    case AC_BUF_LSE:
        if (p->layout == AC_LAYOUT_THD) { /* (Hq, total_q) */
            uint64_t total = p->cu_seqlens_q ? (uint64_t)p->cu_seqlens_q[p->batch] : 1, t = idx % total;
            uint64_t sb = thd_sequence(p, p->cu_seqlens_q, t);
            snprintf(out, len, "(b=%llu h=%llu i=%llu)", (unsigned long long)sb, (unsigned long long)(idx / total),
                     (unsigned long long)(t - (p->cu_seqlens_q ? (uint64_t)p->cu_seqlens_q[sb] : 0)));
        } else {
            uint64_t i = idx % (uint64_t)p->seqlen_q, r = idx / (uint64_t)p->seqlen_q;
            snprintf(out, len, "(b=%llu h=%llu i=%llu)", (unsigned long long)(r / hq), (unsigned long long)(r % hq),
                     (unsigned long long)i);
        }
        return;
    case AC_BUF_SEQLENS_Q:
    case AC_BUF_SEQLENS_K:
    case AC_BUF_CU_SEQLENS_Q:
    case AC_BUF_CU_SEQLENS_K:
        snprintf(out, len, "(b=%llu)", (unsigned long long)idx);
        return;
    case AC_BUF_SINKS:
    case AC_BUF_DSINK:
        snprintf(out, len, "(h=%llu)", (unsigned long long)idx);
        return;
    case AC_BUF_ALIBI:
        snprintf(out, len, "(b=%llu h=%llu)", (unsigned long long)(idx / hq), (unsigned long long)(idx % hq));
        return;
    case AC_BUF_MASK: {
        uint64_t j = idx % (uint64_t)p->seqlen_k, r = idx / (uint64_t)p->seqlen_k;
        snprintf(out, len, "(row %llu of head slice %llu, key %llu)", (unsigned long long)(r % (uint64_t)p->seqlen_q),
                 (unsigned long long)(r / (uint64_t)p->seqlen_q), (unsigned long long)j);
        return;
    }
    case AC_BUF_BIAS:
    case AC_BUF_DBIAS:
        where_pairs(p, idx, (uint64_t)(p->bias_heads > 1 ? p->bias_heads : 1), out, len);
        return;
    case AC_BUF_DESCALE_Q:
    case AC_BUF_DESCALE_K:
    case AC_BUF_DESCALE_V:
        snprintf(out, len, "(factor %llu)", (unsigned long long)idx);
        return;
    case AC_BUF_DROPOUT:
        snprintf(out, len, "(byte %llu)", (unsigned long long)idx);
        return;
    case AC_BUF_K:
    case AC_BUF_DK:
        where_tensor(p, AC_TENSOR_K, idx, out, len);
        return;
    case AC_BUF_V:
    case AC_BUF_DV:
        where_tensor(p, AC_TENSOR_V, idx, out, len);
        return;
    case AC_BUF_DO:
    case AC_BUF_O:
        where_tensor(p, AC_TENSOR_O, idx, out, len);
        return;
    default:
        where_tensor(p, AC_TENSOR_Q, idx, out, len);
        return;
    }
}

/* The guards of output b: AC_OK or the out-of-bounds write, in elements from its start or end. */
static int check_guards(const ac_arena_layout *l, ac_entry e, ac_buf b, const uint8_t *base, ac_err *err)
{
    const uint8_t *buf = base + l->off[b];
    size_t es = elem_size(l, b), n = l->bytes[b] / es, first, last;
    const char *type = buf_dtype(l, b) >= 0 ? ac_dtype_name((ac_dtype)buf_dtype(l, b)) : "byte";
    if (ac_canary_damage(buf - AC_GUARD_BYTES, AC_GUARD_BYTES, &first, &last)) {
        /* byte x of the guard lies AC_GUARD_BYTES - x bytes before the start */
        size_t far = (AC_GUARD_BYTES - first + es - 1) / es, near = (AC_GUARD_BYTES - last + es - 1) / es;
        return ac_fail(err, AC_KERNEL_FAULT,
                       "out-of-bounds-write: %s wrote before the start of %s: elements "
                       "start-%zu to start-%zu (%s holds %zu %s elements)",
                       ac_entry_name(e), ac_buf_name(b), far, near, ac_buf_name(b), n, type);
    }
    if (ac_canary_damage(buf + l->bytes[b], AC_GUARD_BYTES, &first, &last))
        return ac_fail(err, AC_KERNEL_FAULT,
                       "out-of-bounds-write: %s wrote past the end of %s: elements end+%zu "
                       "to end+%zu (%s holds %zu %s elements; end+0 is the first one past it)",
                       ac_entry_name(e), ac_buf_name(b), first / es, last / es, ac_buf_name(b), n, type);
    return AC_OK;
}

/* An input buffer against the caller's copy: AC_OK or the first changed element and how many. */
static int check_input(const ac_arena_layout *l, ac_entry e, ac_buf b, const uint8_t *base, const void *want,
                       const ac_problem *p, ac_err *err)
{
    const uint8_t *got = base + l->off[b];
    if (!l->bytes[b] || !want || memcmp(got, want, l->bytes[b]) == 0)
        return AC_OK;
    size_t es = elem_size(l, b), n = l->bytes[b] / es, first = n, changed = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp(got + i * es, (const uint8_t *)want + i * es, es) != 0) {
            first = first < n ? first : i;
            changed++;
        }
    char at[128];
    where(p, b, first, at, sizeof at);
    return ac_fail(err, AC_KERNEL_FAULT,
                   "input-modified: %s changed %zu element%s of %s, the first at element %zu "
                   "%s",
                   ac_entry_name(e), changed, changed == 1 ? "" : "s", ac_buf_name(b), first, at);
}

int ac_arena_check(const ac_arena_layout *l, ac_entry e, const uint8_t *base, const ac_inputs *in, const void *fwd_o,
                   const float *fwd_lse, ac_err *err)
{
    int st = AC_OK;
    for (int b = AC_BUF_FIRST_OUTPUT; st == AC_OK && b < AC_BUF_COUNT; b++)
        if (l->bytes[b])
            st = check_guards(l, e, (ac_buf)b, base, err);
    for (int b = 0; st == AC_OK && b < AC_BUF_FIRST_OUTPUT; b++)
        st = check_input(l, e, (ac_buf)b, base, input_source(in, (ac_buf)b), &in->p, err);
    if (st == AC_OK && e == AC_ENTRY_BACKWARD) /* the forward's outputs are the backward's inputs */
        st = check_input(l, e, AC_BUF_O, base, fwd_o, &in->p, err);
    if (st == AC_OK && e == AC_ENTRY_BACKWARD)
        st = check_input(l, e, AC_BUF_LSE, base, fwd_lse, &in->p, err);
    return st;
}
