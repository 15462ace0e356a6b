/* harness/run/arena.c — one case's kernel buffers in one block, outputs
 * between guard zones; the checks after a kernel call (see arena.h). */
#include <stdio.h>
#include <string.h>

#include "harness/run/arena.h"
#include "harness/verdict/compare.h"
#include "ref/rng.h"

static const char *const buf_names[AC_BUF_COUNT] = {
    "Q", "K", "V", "dO", "seqlens_q", "seqlens_k", "mask", "O", "LSE", "dQ", "dK", "dV",
};

const char *ac_buf_name(ac_buf b) { return (unsigned)b < AC_BUF_COUNT ? buf_names[b] : "?"; }
bool ac_buf_is_output(ac_buf b) { return b >= AC_BUF_FIRST_OUTPUT && b < AC_BUF_COUNT; }
const char *ac_entry_name(ac_entry e) { return e == AC_ENTRY_FORWARD ? "forward" : "backward"; }

bool ac_entry_writes(ac_entry e, ac_buf b)
{
    if (e == AC_ENTRY_FORWARD)
        return b == AC_BUF_O || b == AC_BUF_LSE;
    return b == AC_BUF_DQ || b == AC_BUF_DK || b == AC_BUF_DV;
}

bool ac_entry_uses(ac_entry e, ac_buf b)
{
    if (e == AC_ENTRY_BACKWARD)
        return true;
    return b != AC_BUF_DO && b != AC_BUF_DQ && b != AC_BUF_DK && b != AC_BUF_DV;
}

/* ---- layout ------------------------------------------------------------------ */

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

void ac_arena_plan(const ac_inputs *in, bool backward, ac_arena_layout *l)
{
    memset(l, 0, sizeof *l);
    const ac_problem *p = &in->p;
    uint64_t es = ac_dtype_size(in->c.dtype), os = ac_dtype_size(ac_inputs_out_dtype(in));
    uint64_t nq = ac_q_elems(p), nkv = ac_kv_elems(p);
    l->dtype = (int32_t)in->c.dtype;
    l->out_dtype = (int32_t)ac_inputs_out_dtype(in);
    l->bytes[AC_BUF_Q] = nq * es;
    l->bytes[AC_BUF_K] = l->bytes[AC_BUF_V] = nkv * es;
    l->bytes[AC_BUF_DO] = backward ? nq * es : 0;
    l->bytes[AC_BUF_SEQLENS_Q] = p->seqlens_q ? sizeof(int) * (uint64_t)p->batch : 0;
    l->bytes[AC_BUF_SEQLENS_K] = p->seqlens_k ? sizeof(int) * (uint64_t)p->batch : 0;
    l->bytes[AC_BUF_MASK] =
        p->dense_mask ? (uint64_t)p->mask_batch * p->mask_heads * p->seqlen_q * (uint64_t)p->seqlen_k : 0;
    l->bytes[AC_BUF_O] = nq * os;
    l->bytes[AC_BUF_LSE] = ac_lse_elems(p) * sizeof(float);
    if (backward) {
        l->bytes[AC_BUF_DQ] = nq * os;
        l->bytes[AC_BUF_DK] = l->bytes[AC_BUF_DV] = nkv * os;
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

void ac_arena_put_inputs(const ac_arena_layout *l, const ac_inputs *in, uint8_t *base)
{
    const void *src[AC_BUF_COUNT] = {in->q, in->k, in->v, in->d_o, in->p.seqlens_q, in->p.seqlens_k,
                                     in->p.dense_mask};
    for (int b = 0; b < AC_BUF_FIRST_OUTPUT; b++)
        if (l->bytes[b])
            memcpy(base + l->off[b], src[b], l->bytes[b]);
}

ac_problem ac_arena_problem(const ac_problem *p, const ac_arena_layout *l, uint8_t *base)
{
    ac_problem q = *p;
    q.seqlens_q = l->bytes[AC_BUF_SEQLENS_Q] ? (const int *)(base + l->off[AC_BUF_SEQLENS_Q]) : NULL;
    q.seqlens_k = l->bytes[AC_BUF_SEQLENS_K] ? (const int *)(base + l->off[AC_BUF_SEQLENS_K]) : NULL;
    q.dense_mask = l->bytes[AC_BUF_MASK] ? base + l->off[AC_BUF_MASK] : NULL;
    return q;
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

static size_t elem_size(const ac_arena_layout *l, ac_buf b)
{
    if (b == AC_BUF_LSE)
        return sizeof(float);
    if (b == AC_BUF_SEQLENS_Q || b == AC_BUF_SEQLENS_K)
        return sizeof(int);
    if (b == AC_BUF_MASK)
        return 1;
    return ac_dtype_size((ac_dtype)(ac_buf_is_output(b) ? l->out_dtype : l->dtype));
}

void ac_arena_arm(const ac_arena_layout *l, ac_entry e, uint8_t *base)
{
    for (int b = AC_BUF_FIRST_OUTPUT; b < AC_BUF_COUNT; b++) {
        /* the forward arms every output: a stray store into dQ's guards shows there too */
        if (!l->bytes[b] || (e == AC_ENTRY_BACKWARD && !ac_entry_writes(e, (ac_buf)b)))
            continue;
        uint8_t *buf = base + l->off[b];
        size_t n = l->bytes[b] / elem_size(l, (ac_buf)b);
        if (b == AC_BUF_LSE)
            ac_poison_f32((float *)buf, n);
        else
            ac_poison((ac_dtype)l->out_dtype, buf, n);
        ac_canary_fill(buf - AC_GUARD_BYTES, AC_GUARD_BYTES);
        ac_canary_fill(buf + l->bytes[b], AC_GUARD_BYTES);
    }
}

/* ---- checks ------------------------------------------------------------------------ */

/* "(b=0 h=1 i=3 c=2)": element idx of buffer b in the problem's terms. */
static void where(const ac_problem *p, ac_buf b, uint64_t idx, char *out, size_t len)
{
    bool q_like = b == AC_BUF_Q || b == AC_BUF_DO || b == AC_BUF_O || b == AC_BUF_DQ;
    int d = p->head_dim;
    if (b == AC_BUF_LSE) {
        uint64_t i = idx % (uint64_t)p->seqlen_q, r = idx / (uint64_t)p->seqlen_q;
        snprintf(out, len, "(b=%llu h=%llu i=%llu)", (unsigned long long)(r / (uint64_t)p->heads_q),
                 (unsigned long long)(r % (uint64_t)p->heads_q), (unsigned long long)i);
    } else if (b == AC_BUF_SEQLENS_Q || b == AC_BUF_SEQLENS_K) {
        snprintf(out, len, "(b=%llu)", (unsigned long long)idx);
    } else if (b == AC_BUF_MASK) {
        uint64_t j = idx % (uint64_t)p->seqlen_k, r = idx / (uint64_t)p->seqlen_k;
        snprintf(out, len, "(row %llu of head slice %llu, key %llu)", (unsigned long long)(r % (uint64_t)p->seqlen_q),
                 (unsigned long long)(r / (uint64_t)p->seqlen_q), (unsigned long long)j);
    } else {
        uint64_t heads = (uint64_t)(q_like ? p->heads_q : p->heads_kv);
        uint64_t seqlen = (uint64_t)(q_like ? p->seqlen_q : p->seqlen_k);
        uint64_t c = idx % (uint64_t)d, r = idx / (uint64_t)d, h, s;
        if (p->layout == AC_LAYOUT_BHSD)
            s = r % seqlen, h = (r / seqlen) % heads, r /= seqlen * heads;
        else
            h = r % heads, s = (r / heads) % seqlen, r /= heads * seqlen;
        snprintf(out, len, "(b=%llu h=%llu %s=%llu c=%llu)", (unsigned long long)r, (unsigned long long)h,
                 q_like ? "i" : "j", (unsigned long long)s, (unsigned long long)c);
    }
}

/* The guards of output b: AC_OK or the out-of-bounds write, in elements from its start or end. */
static int check_guards(const ac_arena_layout *l, ac_entry e, ac_buf b, const uint8_t *base, ac_err *err)
{
    const uint8_t *buf = base + l->off[b];
    size_t es = elem_size(l, b), n = l->bytes[b] / es, first, last;
    const char *type = b == AC_BUF_LSE ? "f32" : ac_dtype_name((ac_dtype)l->out_dtype);
    if (ac_canary_damage(buf - AC_GUARD_BYTES, AC_GUARD_BYTES, &first, &last)) {
        /* byte x of the guard lies AC_GUARD_BYTES - x bytes before the start */
        size_t far = (AC_GUARD_BYTES - first + es - 1) / es, near = (AC_GUARD_BYTES - last + es - 1) / es;
        return ac_fail(err, AC_KERNEL_FAULT, "out-of-bounds-write: %s wrote before the start of %s: elements "
                       "start-%zu to start-%zu (%s holds %zu %s elements)", ac_entry_name(e), ac_buf_name(b), far,
                       near, ac_buf_name(b), n, type);
    }
    if (ac_canary_damage(buf + l->bytes[b], AC_GUARD_BYTES, &first, &last))
        return ac_fail(err, AC_KERNEL_FAULT, "out-of-bounds-write: %s wrote past the end of %s: elements end+%zu "
                       "to end+%zu (%s holds %zu %s elements; end+0 is the first one past it)", ac_entry_name(e),
                       ac_buf_name(b), first / es, last / es, ac_buf_name(b), n, type);
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
    char at[96];
    where(p, b, first, at, sizeof at);
    return ac_fail(err, AC_KERNEL_FAULT, "input-modified: %s changed %zu element%s of %s, the first at element %zu "
                   "%s", ac_entry_name(e), changed, changed == 1 ? "" : "s", ac_buf_name(b), first, at);
}

int ac_arena_check(const ac_arena_layout *l, ac_entry e, const uint8_t *base, const ac_inputs *in,
                   const void *fwd_o, const float *fwd_lse, ac_err *err)
{
    int st = AC_OK;
    for (int b = AC_BUF_FIRST_OUTPUT; st == AC_OK && b < AC_BUF_COUNT; b++)
        if (l->bytes[b])
            st = check_guards(l, e, (ac_buf)b, base, err);
    const void *want[AC_BUF_COUNT] = {in->q, in->k, in->v, in->d_o, in->p.seqlens_q, in->p.seqlens_k,
                                      in->p.dense_mask};
    for (int b = 0; st == AC_OK && b < AC_BUF_FIRST_OUTPUT; b++)
        st = check_input(l, e, (ac_buf)b, base, want[b], &in->p, err);
    if (st == AC_OK && e == AC_ENTRY_BACKWARD) /* the forward's outputs are the backward's inputs */
        st = check_input(l, e, AC_BUF_O, base, fwd_o, &in->p, err);
    if (st == AC_OK && e == AC_ENTRY_BACKWARD)
        st = check_input(l, e, AC_BUF_LSE, base, fwd_lse, &in->p, err);
    return st;
}
