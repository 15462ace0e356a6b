/* harness/run/test_inputs_parallel.c — the inputs drawn in parallel are the
 * single-stream ones byte for byte, the variants' arrays and masks included,
 * and the streams are those of earlier attncheck (suite harness_inputs). */
#include <criterion/criterion.h>
#include <string.h>

#include "harness/harness.h"
#include "harness/run/inputs_internal.h"

/* Every distribution (huge in both modes: seeds 9 and 14), every role (all four
 * tensors are compared), dtype, layout, GQA (hkv 1, 2, 3), varlen with empty
 * sequences, and a dense mask of several row blocks (nq = 150). */
static const char *const lines[] = {
    "v1 seed=3 b=2 hq=4 hkv=2 nq=37 nk=53 d=24 dtype=bf16 mask=causal-br layout=bhsd dist=normal(0,1) scale=auto",
    "v1 seed=4 b=2 hq=4 hkv=2 nq=37 nk=53 d=24 dtype=f16 mask=none layout=bshd dist=uniform(-2,3) scale=auto",
    "v1 seed=5 b=2 hq=4 hkv=2 nq=37 nk=53 d=24 dtype=f32 mask=causal-tl layout=bhsd dist=outliers(1,0.01) scale=auto",
    "v1 seed=6 b=2 hq=4 hkv=1 nq=37 nk=53 d=24 dtype=f16 mask=none layout=bshd dist=increasing(4) scale=auto",
    "v1 seed=7 b=3 hq=6 hkv=3 nq=37 nk=53 d=24 dtype=bf16 mask=window-tl(3,5) layout=bhsd dist=equal() scale=0.3",
    "v1 seed=8 b=2 hq=4 hkv=2 nq=37 nk=53 d=24 dtype=f16 mask=none layout=bshd dist=dominant(8) scale=auto",
    "v1 seed=9 b=2 hq=4 hkv=2 nq=37 nk=53 d=24 dtype=f16 mask=none layout=bhsd dist=huge(0.9) scale=auto",
    "v1 seed=14 b=2 hq=4 hkv=2 nq=37 nk=53 d=24 dtype=bf16 mask=none layout=bhsd dist=huge(0.9) scale=auto",
    "v1 seed=11 b=2 hq=4 hkv=2 nq=37 nk=53 d=24 dtype=f32 mask=none layout=bshd dist=tiny() scale=auto",
    ("v1 seed=12 b=2 hq=4 hkv=2 nq=150 nk=53 d=24 dtype=bf16 mask=dense(0.5) maskrows=0.25 seqlens-q=0,130 "
     "seqlens-k=53,1 layout=bshd dist=normal(0,1) scale=auto"),
};
#define N_LINES (sizeof lines / sizeof lines[0])

static ac_case parse(const char *line)
{
    ac_case c;
    ac_err err = {{0}};
    cr_assert_eq(ac_case_parse(line, &c, &err), AC_OK, "%s: %s", line, err.msg);
    return c;
}

static ac_inputs make_on(const ac_case *c, int workers)
{
    ac_inputs in;
    ac_err err = {{0}};
    cr_assert_eq(inputs_make_workers(c, &in, workers, &err), AC_OK, "%d workers: %s", workers, err.msg);
    return in;
}

/* The variants' arrays and scalars of two inputs of the same case: the same bytes. */
static void assert_same_variants(const ac_inputs *a, const ac_inputs *b, const char *what)
{
    const ac_problem *p = &a->p, *q = &b->p;
    cr_assert(p->head_dim_v == q->head_dim_v && p->softcap == q->softcap && p->sink_tokens == q->sink_tokens &&
                  p->dropout_p == q->dropout_p && p->dropout_seed == q->dropout_seed && p->layout == q->layout,
              "%s: the variants' scalars differ", what);
    cr_assert(p->mask_batch == q->mask_batch && p->mask_heads == q->mask_heads && p->bias_batch == q->bias_batch &&
                  p->bias_heads == q->bias_heads && p->bias_dtype == q->bias_dtype && p->alibi_batch == q->alibi_batch,
              "%s: the broadcast shapes differ", what);
    size_t cu = sizeof(int) * ((size_t)p->batch + 1);
    const void *x[] = {p->sinks, p->alibi_slopes, p->bias, p->cu_seqlens_q, p->cu_seqlens_k};
    const void *y[] = {q->sinks, q->alibi_slopes, q->bias, q->cu_seqlens_q, q->cu_seqlens_k};
    size_t bytes[] = {sizeof(float) * (size_t)p->heads_q,
                      sizeof(float) * (size_t)p->heads_q * (size_t)(p->alibi_batch > 1 ? p->batch : 1),
                      p->bias ? ac_bias_elems(p) * ac_dtype_size(p->bias_dtype) : 0, cu, cu};
    static const char *const names[] = {"sinks", "ALiBi slopes", "bias", "cu_seqlens_q", "cu_seqlens_k"};
    for (int t = 0; t < 5; t++) {
        cr_assert_eq(!x[t], !y[t], "%s: %s present in one only", what, names[t]);
        if (x[t])
            cr_assert_eq(memcmp(x[t], y[t], bytes[t]), 0, "%s: %s differs", what, names[t]);
    }
}

/* Byte comparison of every array of two inputs of the same case. */
static void assert_same_bytes(const ac_inputs *a, const ac_inputs *b, const char *what)
{
    size_t nq = ac_q_elems(&a->p), nkv = ac_kv_elems(&a->p), es = ac_dtype_size(a->c.dtype);
    size_t no = ac_o_elems(&a->p), nv = ac_v_elems(&a->p); /* dO and V: d_v columns */
    const void *x[] = {a->q, a->k, a->v, a->d_o, a->qd, a->kd, a->vd, a->d_od};
    const void *y[] = {b->q, b->k, b->v, b->d_o, b->qd, b->kd, b->vd, b->d_od};
    size_t bytes[] = {nq * es, nkv * es, nv * es, no * es, nq * 8, nkv * 8, nv * 8, no * 8};
    static const char *const names[] = {"Q", "K", "V", "dO", "Q wide", "K wide", "V wide", "dO wide"};
    for (int t = 0; t < 8; t++)
        cr_assert_eq(memcmp(x[t], y[t], bytes[t]), 0, "%s: %s differs", what, names[t]);
    cr_assert_eq(!a->dense_mask, !b->dense_mask);
    if (a->dense_mask)
        cr_assert_eq(memcmp(a->dense_mask, b->dense_mask,
                            (size_t)a->p.mask_batch * a->p.mask_heads * a->c.seqlen_q * a->c.seqlen_k),
                     0, "%s: dense mask differs", what);
    assert_same_variants(a, b, what);
}

Test(harness_inputs, parallel_draws_are_the_single_stream_bytes_on_1_3_8_workers)
{
    const int workers[] = {1, 3, 8};
    for (size_t l = 0; l < N_LINES; l++) {
        ac_case c = parse(lines[l]);
        ac_inputs serial = make_on(&c, 0);
        for (int w = 0; w < 3; w++) {
            ac_inputs par = make_on(&c, workers[w]);
            char what[64];
            snprintf(what, sizeof what, "line %zu, %d workers", l, workers[w]);
            assert_same_bytes(&serial, &par, what);
            ac_inputs_free(&par);
        }
        ac_inputs_free(&serial);
    }
}

/* The variants' draws: THD (packed rows, empty sequences, the padded grid drawn), d_v on both
 * sides of d (the sign array is max(d, d_v) wide: increasing and huge(V) read it), sinks
 * over(M) (measured on the drawn scores), ALiBi, biases of every shape and dtype with -inf,
 * dropout's seed, sink tokens, and dense masks of several (b, h) slices over several row
 * blocks (nq = 150: maskdims=bh is 8 slices of 3 blocks each). */
static const char *const variant_lines[] = {
    ("v1 seed=21 b=3 hq=4 hkv=2 nq=37 nk=53 d=24 dtype=bf16 mask=causal-br seqlens-q=37,0,11 seqlens-k=53,9,0 "
     "layout=thd dist=normal(0,1) scale=auto dv=8 softcap=5 sinks=over(4) alibi=paper:bh bias=normal(0,1):bh:f32 "
     "dropout=0.1"),
    "v1 seed=22 b=2 hq=4 hkv=1 nq=37 nk=53 d=8 dtype=f16 mask=none layout=bshd dist=increasing(4) scale=auto dv=40",
    "v1 seed=23 b=2 hq=4 hkv=2 nq=37 nk=53 d=24 dtype=bf16 mask=none layout=bhsd dist=huge(0.9) scale=auto dv=12",
    ("v1 seed=24 b=2 hq=4 hkv=2 nq=150 nk=53 d=24 dtype=f16 mask=dense(0.5) maskrows=0.25 layout=bshd "
     "dist=normal(0,1) scale=auto maskdims=bh bias=normal(-2,1):1h:inf(0.2)"),
    ("v1 seed=25 b=2 hq=4 hkv=2 nq=150 nk=53 d=24 dtype=bf16 mask=dense(0.3) layout=bhsd dist=equal() scale=-0.2 "
     "maskdims=b1 alibi=uniform(0,1) sinks=normal(2,2)"),
    ("v1 seed=26 b=1 hq=2 hkv=2 nq=64 nk=200 d=16 dtype=f32 mask=window-tl(9,0) layout=thd dist=dominant(8) "
     "scale=auto sinktokens=4 bias=normal(0,4):b1 dropout=0.5"),
};
#define N_VARIANT_LINES (sizeof variant_lines / sizeof variant_lines[0])

Test(harness_inputs, variant_draws_are_the_single_stream_bytes_on_1_3_8_workers)
{
    const int workers[] = {1, 3, 8};
    for (size_t l = 0; l < N_VARIANT_LINES; l++) {
        ac_case c = parse(variant_lines[l]);
        ac_inputs serial = make_on(&c, 0);
        for (int w = 0; w < 3; w++) {
            ac_inputs par = make_on(&c, workers[w]);
            char what[64];
            snprintf(what, sizeof what, "variant line %zu, %d workers", l, workers[w]);
            assert_same_bytes(&serial, &par, what);
            ac_inputs_free(&par);
        }
        ac_inputs_free(&serial);
    }
}

Test(harness_inputs, generated_cases_draw_the_same_bytes_on_3_workers)
{
    ac_caps caps = {
        .dtypes = 7,
        .max_head_dim = 256,
        .masks = AC_MASKCAP_ALL,
        .layouts = AC_LAYOUTS_ALL,
        .gqa = true,
        .varlen = true,
        .variants = AC_VAR_ALL,
    };
    ac_gen g;
    ac_gen_init(&g, 47, &caps);
    g.max_seqlen = 96;
    for (int k = 0; k < 150; k++) {
        ac_case c;
        ac_err err = {{0}};
        cr_assert_eq(ac_gen_next(&g, &c, &err), AC_OK);
        ac_inputs serial = make_on(&c, 0), par = make_on(&c, 3);
        char what[32];
        snprintf(what, sizeof what, "case %d", k);
        assert_same_bytes(&serial, &par, what);
        ac_inputs_free(&serial), ac_inputs_free(&par);
    }
}

static uint64_t fnv1a(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* FNV-1a of the Q, K, V, dO bits and the dense mask of lines[], as drawn by
 * attncheck before the draws went parallel (commit e8194a8, one running
 * stream per tensor).  Every fixture and corpus line means these bytes: a
 * change here is a change of the streams, not a refactoring. */
static const uint64_t earlier[N_LINES][5] = {
    {0x76e35b0f1dacc313ull, 0x99ad208aff7edf81ull, 0x80b2e719ac757f0cull, 0x63117f77cc9303a0ull, 0},
    {0x9c4f5c92937ab3efull, 0x01adacad4d92a8dfull, 0x92826ce68a05a696ull, 0xf4d370ef4bb68e41ull, 0},
    {0x5b11b4122cba391eull, 0xfcfd5ee159f1a053ull, 0xda2fa4128cf15b1full, 0x16b9d0110b482c06ull, 0},
    {0x3ad23f4167fd6775ull, 0x7c22cd4af8f7b1e5ull, 0xb3ae6cb827764a12ull, 0x39642bad823c8bf7ull, 0},
    {0xcf4908c49aa63fbbull, 0x8a870eeffd013825ull, 0xcfc9f2002a0546a4ull, 0x43b1fe5c3d86cdf3ull, 0},
    {0x3c43dede712569acull, 0x450a2d20478b10e5ull, 0x0a8183f6ba64f130ull, 0x50f5f018b7d66756ull, 0},
    {0x1fb3a318d154f113ull, 0x7cd47e24c5732bc9ull, 0x2cf11632257155a9ull, 0x0cea4f6e7b82e6a7ull, 0},
    {0xf496613aa2d38ac9ull, 0xb19fbf9531ee0d5cull, 0x4f32b741db70a6bcull, 0x7ffa0f4c714e35a1ull, 0},
    {0x244e56ebffb5b16aull, 0x4f59f01287c17db0ull, 0xb5792cbec1a7f0eaull, 0x39b4d439b6f4f753ull, 0},
    {0xe1b05b5657ecf2fdull, 0xf48cb4b155ecc6e1ull, 0x53ad01ecfa2e0ce5ull, 0x1db1a09f65352debull, 0xbc51ee98560019c6ull},
};

Test(harness_inputs, streams_give_the_bytes_of_earlier_attncheck)
{
    for (size_t l = 0; l < N_LINES; l++) {
        ac_case c = parse(lines[l]);
        ac_inputs in;
        ac_err err = {{0}};
        cr_assert_eq(ac_inputs_make(&c, &in, &err), AC_OK, "%s", err.msg);
        size_t nq = ac_q_elems(&in.p), nkv = ac_kv_elems(&in.p), es = ac_dtype_size(c.dtype);
        uint64_t got[5] = {fnv1a(in.q, nq * es), fnv1a(in.k, nkv * es), fnv1a(in.v, nkv * es), fnv1a(in.d_o, nq * es),
                           in.dense_mask ? fnv1a(in.dense_mask, (size_t)c.seqlen_q * c.seqlen_k) : 0};
        for (int t = 0; t < 5; t++)
            cr_assert_eq(got[t], earlier[l][t], "line %zu tensor %d: %016llx, earlier %016llx", l, t,
                         (unsigned long long)got[t], (unsigned long long)earlier[l][t]);
        ac_inputs_free(&in);
    }
}

/* FNV-1a of Q, K, V, dO, the dense mask, the sinks, the slopes, the bias, cu_seqlens_q
 * and _k (xor) and the dropout seed of variant_lines[], as the variants were drawn
 * before they met the parallel draws (commit e6d45cb, one running stream per
 * tensor and per mask slice); 0: absent. */
static const uint64_t earlier_variants[N_VARIANT_LINES][10] = {
    {0xd7efd448cd0a0269ull, 0xb6fb0382010732aaull, 0xa4da6f9ab3415b9full, 0xcb645355eff5512bull, 0x0000000000000000ull,
     0xb4ad95003e4143e2ull, 0xcaaf58771ebea685ull, 0x6d1f9722336bd2a1ull, 0x0f4a74ad19775025ull, 0xbeafee637c39f358ull},
    {0x67f756b66f638af5ull, 0x78f49faaf5118ae5ull, 0x762bbab0ec886156ull, 0x72c34194de09b83aull, 0x0000000000000000ull,
     0x0000000000000000ull, 0x0000000000000000ull, 0x0000000000000000ull, 0x0000000000000000ull, 0x0000000000000000ull},
    {0x65bd2b16c4cbf9a9ull, 0x928396cdacc0557eull, 0x3ebccda41eeea2e1ull, 0xded3209721a3408aull, 0x0000000000000000ull,
     0x0000000000000000ull, 0x0000000000000000ull, 0x0000000000000000ull, 0x0000000000000000ull, 0x0000000000000000ull},
    {0x16d0b3eca13cdfaaull, 0xaff9c83907456187ull, 0x884a5a26bc1de233ull, 0x39c40f5ed2aad4a4ull, 0x5bf44d78d36773c2ull,
     0x0000000000000000ull, 0x0000000000000000ull, 0xf6d573c20b8fde9eull, 0x0000000000000000ull, 0x0000000000000000ull},
    {0xa0704d96438ec50aull, 0xb3176e3723e8bcecull, 0xe45d1e8d302a63bfull, 0x5322483a00b14a5dull, 0x972aa3b36c6afa95ull,
     0x7180ee78645527f7ull, 0x5c5a4d7e430abdc1ull, 0x0000000000000000ull, 0x0000000000000000ull, 0x0000000000000000ull},
    {0xd59d138cc3a6598cull, 0x98faab7f67292789ull, 0x71854c90626b00a4ull, 0xbce7c04b6dd5003aull, 0x0000000000000000ull,
     0x0000000000000000ull, 0x0000000000000000ull, 0x69021092de8b6e56ull, 0x0680a428abd1a408ull, 0xe9054f292cfb01e2ull},
};

Test(harness_inputs, variant_streams_give_the_bytes_of_the_variants_before_the_parallel_draws)
{
    for (size_t l = 0; l < N_VARIANT_LINES; l++) {
        ac_case c = parse(variant_lines[l]);
        ac_inputs in;
        ac_err err = {{0}};
        cr_assert_eq(ac_inputs_make(&c, &in, &err), AC_OK, "%s", err.msg);
        const ac_problem *p = &in.p;
        size_t es = ac_dtype_size(c.dtype), cu = sizeof(int) * ((size_t)p->batch + 1);
        size_t mask = (size_t)p->mask_batch * p->mask_heads * c.seqlen_q * c.seqlen_k;
        size_t slopes = sizeof(float) * (size_t)p->heads_q * (size_t)(p->alibi_batch > 1 ? p->batch : 1);
        uint64_t got[10] = {fnv1a(in.q, ac_q_elems(p) * es),
                            fnv1a(in.k, ac_kv_elems(p) * es),
                            fnv1a(in.v, ac_v_elems(p) * es),
                            fnv1a(in.d_o, ac_o_elems(p) * es),
                            in.dense_mask ? fnv1a(in.dense_mask, mask) : 0,
                            p->sinks ? fnv1a(p->sinks, sizeof(float) * (size_t)p->heads_q) : 0,
                            p->alibi_slopes ? fnv1a(p->alibi_slopes, slopes) : 0,
                            p->bias ? fnv1a(p->bias, ac_bias_elems(p) * ac_dtype_size(p->bias_dtype)) : 0,
                            p->cu_seqlens_q ? fnv1a(p->cu_seqlens_q, cu) ^ fnv1a(p->cu_seqlens_k, cu) : 0,
                            p->dropout_seed};
        for (int t = 0; t < 10; t++)
            cr_assert_eq(got[t], earlier_variants[l][t], "variant line %zu array %d: %016llx, earlier %016llx", l, t,
                         (unsigned long long)got[t], (unsigned long long)earlier_variants[l][t]);
        ac_inputs_free(&in);
    }
}
