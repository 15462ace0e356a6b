/* harness/case/test_case_variants.c — the variants in case lines, the
 * generator and the shrinker (suite harness_case_variants). */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness/harness.h"

typedef struct {
    char line[300];
} line_param;

static void assert_round_trip(const char *line)
{
    ac_case c;
    ac_err err = {{0}};
    cr_assert_eq(ac_case_parse(line, &c, &err), AC_OK, "parse '%s': %s", line, err.msg);
    char out[AC_CASE_LINE_MAX];
    cr_assert_gt(ac_case_format(&c, out, sizeof out), 0);
    cr_assert_str_eq(out, line);
}

#define BASE \
    "v1 seed=3 b=2 hq=4 hkv=2 nq=33 nk=65 d=16 dtype=bf16 mask=causal-br layout=bhsd dist=normal(0,1) scale=auto"

ParameterizedTestParameters(harness_case_variants, variant_lines_round_trip_byte_for_byte)
{
    static line_param lines[] = {
        {BASE " softcap=30"},
        {BASE " softcap=0.25"},
        {BASE " softcap=0.1"}, /* f32(0.1) prints back as 0.1 */
        {BASE " sinks=normal(0,1)"},
        {BASE " sinks=over(20)"},
        {BASE " sinks=over(-0.5)"},
        {BASE " softcap=50 sinks=normal(2,0.25)"},
        {BASE " dv=128"},
        {"v1 seed=3 b=1 hq=16 hkv=16 nq=64 nk=64 d=192 dtype=bf16 mask=causal-br layout=bshd dist=normal(0,1) "
         "scale=auto dv=128 sinks=over(4)"},
        {"v1 seed=3 b=2 hq=4 hkv=2 nq=33 nk=65 d=16 dtype=bf16 mask=causal-br layout=thd dist=normal(0,1) scale=auto"},
        {BASE " alibi=paper"},
        {BASE " alibi=paper:bh"},
        {BASE " alibi=uniform(0,0.01):bh"},
        {BASE " softcap=30 sinks=over(4) alibi=uniform(1,16)"},
        {BASE " bias=normal(0,1):11"},
        {BASE " dropout=0.1"},
        {BASE " softcap=30 dropout=0.01"},
        {"v1 seed=3 b=2 hq=4 hkv=2 nq=33 nk=65 d=16 dtype=bf16 mask=window-br(8,0) layout=bhsd dist=normal(0,1) "
         "scale=auto sinktokens=4"},
        {"v1 seed=3 b=2 hq=4 hkv=2 nq=33 nk=65 d=16 dtype=bf16 mask=dense(0.5) layout=bhsd dist=normal(0,1) "
         "scale=-0.25 maskdims=b1"},
        {"v1 seed=3 b=2 hq=4 hkv=2 nq=33 nk=65 d=16 dtype=bf16 mask=dense(0.5) maskrows=0.1 layout=bhsd "
         "dist=normal(0,1) scale=auto bias=normal(0,1):bh maskdims=bh"},
        {BASE " bias=normal(-2,1):bh:f32:inf(0.2)"},
        {BASE " bias=normal(0,4):1h:inf(0.9)"},
        {BASE " alibi=paper bias=normal(0.5,0.25):b1:f32"},
        {"v1 seed=3 b=3 hq=4 hkv=2 nq=33 nk=65 d=16 dtype=bf16 mask=none seqlens-q=33,0,5 seqlens-k=1,65,9 "
         "layout=thd dist=normal(0,1) scale=auto softcap=30"},
        {BASE " v=k"},
        {"v1 seed=3 b=2 hq=128 hkv=1 nq=2 nk=4097 d=576 dtype=bf16 mask=causal-br layout=bshd dist=normal(0,1) "
         "scale=auto dv=512 v=k kv=paged(64) splits=4"},
    };
    return cr_make_param_array(line_param, lines, sizeof lines / sizeof lines[0]);
}

ParameterizedTest(line_param *p, harness_case_variants, variant_lines_round_trip_byte_for_byte)
{
    assert_round_trip(p->line);
}

typedef struct {
    char line[300];
    char why[80];
} bad_param;

ParameterizedTestParameters(harness_case_variants, bad_variant_fields_are_refused_naming_the_field)
{
    static bad_param lines[] = {
        {BASE " softcap=0", "softcap"},
        {BASE " softcap=-5", "softcap"},
        {BASE " softcap=1e40", "softcap"}, /* no f32 value */
        {BASE " softcap=abc", "softcap"},
        {BASE " sinks=normal(0)", "sinks"},
        {BASE " sinks=normal(0,-1)", "sinks"},
        {BASE " sinks=over(x)", "sinks"},
        {BASE " sinks=uniform(0,1)", "sinks"},
        {BASE " sinks=normal(1e31,1)", "sinks"},
        {BASE " dv=0", "dv"},
        {BASE " dv=1025", "dv"},
        {BASE " dv=x", "dv"},
        {BASE " v=q", "v"},
        {BASE " dv=32 v=k", "v"}, /* BASE's d is 16: V cannot be K's first 32 channels */
        {"v1 seed=3 b=2 hq=4 hkv=2 nq=33 nk=65 d=16 dtype=e4m3 out=bf16 descale=tensor p=e4m3 mask=causal-br "
         "layout=bhsd dist=normal(0,1) scale=auto v=k",
         "v"}, /* fp8: V's codes would carry K's factors */
        {BASE " alibi=geometric", "alibi"},
        {BASE " alibi=uniform(2,1)", "alibi"},
        {BASE " alibi=uniform(0)", "alibi"},
        {BASE " alibi=paper:hb", "alibi"},
        {BASE " alibi=uniform(0,1e40)", "alibi"},
        {BASE " bias=normal(0,1)", "bias"},
        {BASE " dropout=0", "dropout"},
        {BASE " dropout=1", "dropout"},
        {BASE " dropout=x", "dropout"},
        {BASE " maskdims=bh", "maskdims"}, /* BASE's mask is causal-br */
        {BASE " sinktokens=4", "sinktokens"}, /* causal: no left edge to pass */
        {"v1 seed=3 b=2 hq=4 hkv=2 nq=33 nk=65 d=16 dtype=bf16 mask=window-br(inf,8) layout=bhsd dist=normal(0,1) "
         "scale=auto sinktokens=4",
         "sinktokens"},
        {"v1 seed=3 b=2 hq=4 hkv=2 nq=33 nk=65 d=16 dtype=bf16 mask=window-br(8,0) layout=bhsd dist=normal(0,1) "
         "scale=auto sinktokens=0",
         "sinktokens"},
        {"v1 seed=3 b=2 hq=4 hkv=2 nq=33 nk=65 d=16 dtype=bf16 mask=dense(0.5) layout=bhsd dist=normal(0,1) "
         "scale=auto maskdims=11",
         "maskdims"},
        {BASE " bias=normal(0,1):hb", "bias"},
        {BASE " bias=normal(0,1):11:f16", "bias"},
        {BASE " bias=normal(0,1):11:inf(2)", "bias"},
        {BASE " bias=normal(0,-1):11", "bias"},
        {BASE " bias=normal(1e39,1):11", "bias"},
        {BASE " bias=uniform(0,1):11", "bias"},
        {BASE " bias=normal(0,1):11:inf(0.1):f32", "bias"},
        {"v1 seed=3 b=2 hq=4 hkv=2 nq=33 nk=65 d=16 dtype=bf16 mask=none layout=tdh dist=normal(0,1) scale=auto",
         "layout"},
    };
    return cr_make_param_array(bad_param, lines, sizeof lines / sizeof lines[0]);
}

ParameterizedTest(bad_param *p, harness_case_variants, bad_variant_fields_are_refused_naming_the_field)
{
    ac_case c;
    ac_err err = {{0}};
    cr_assert_eq(ac_case_parse(p->line, &c, &err), AC_ERR_INPUT, "accepted '%s'", p->line);
    cr_assert_not_null(strstr(err.msg, p->why), "'%s': message '%s' does not name %s", p->line, err.msg, p->why);
}

Test(harness_case_variants, the_softcap_is_stored_as_its_f32_value)
{
    ac_case c;
    cr_assert_eq(ac_case_parse(BASE " softcap=0.1", &c, NULL), AC_OK);
    cr_assert_eq(c.softcap, (double)0.1f);
}

/* ---- the generator ----------------------------------------------------------------------- */

static bool has_variant(const ac_case *c)
{
    return c->softcap != 0.0 || c->sinks != AC_SINKS_NONE || c->head_dim_v != 0 || c->alibi != AC_ALIBI_NONE ||
        c->bias != AC_BIAS_NONE || c->sink_tokens != 0 || c->dropout != 0.0;
}

static ac_caps caps_with(unsigned variants)
{
    ac_caps caps = {.dtypes = 7,
                    .max_head_dim = 256,
                    .masks = AC_MASKCAP_ALL,
                    .layouts = 3,
                    .gqa = true,
                    .varlen = true,
                    .backward = true,
                    .variants = variants};
    return caps;
}

/* The line without " key=value" of the given key. */
static void strip_field(char *line, const char *key)
{
    char pat[40];
    snprintf(pat, sizeof pat, " %s=", key);
    char *at = strstr(line, pat);
    if (!at)
        return;
    char *end = strchr(at + 1, ' ');
    memmove(at, end ? end : at + strlen(at), strlen(end ? end : at + strlen(at)) + 1);
}

Test(harness_case_variants, a_kernel_claiming_no_variant_gets_none_and_the_same_plain_cases)
{
    ac_caps none = caps_with(0), all = caps_with(AC_VAR_ALL);
    ac_gen g0, g1;
    ac_gen_init(&g0, 77, &none);
    ac_gen_init(&g1, 77, &all);
    int with_softcap = 0, with_sinks = 0, with_dv = 0, with_alibi = 0, with_bias = 0, n = 2000;
    for (int k = 0; k < n; k++) {
        ac_case a, b;
        cr_assert_eq(ac_gen_next(&g0, &a, NULL), AC_OK);
        cr_assert_eq(ac_gen_next(&g1, &b, NULL), AC_OK);
        cr_assert(!has_variant(&a), "case %d: a variant drawn for a kernel that claims none", k);
        char la[AC_CASE_LINE_MAX], lb[AC_CASE_LINE_MAX];
        ac_case_format(&a, la, sizeof la);
        ac_case_format(&b, lb, sizeof lb);
        with_softcap += b.softcap != 0.0;
        with_sinks += b.sinks != AC_SINKS_NONE;
        with_dv += b.head_dim_v != 0;
        with_alibi += b.alibi != AC_ALIBI_NONE;
        with_bias += b.bias != AC_BIAS_NONE;
        cr_assert(b.sinks == AC_SINKS_NONE || b.dist != AC_DIST_HUGE, "case %d: sinks with huge()", k);
        cr_assert(b.head_dim_v == 0 || (b.head_dim_v >= 1 && b.head_dim_v <= 256), "case %d: dv=%d", k, b.head_dim_v);
        strip_field(lb, "softcap");
        strip_field(lb, "sinks");
        strip_field(lb, "dv");
        strip_field(lb, "alibi");
        strip_field(lb, "bias");
        strip_field(lb, "sinktokens");
        strip_field(lb, "dropout");
        strip_field(lb, "kv");
        strip_field(lb, "splits");
        if (b.head_dim_v == 0) /* a d_v draw may set d too (MLA's 192/128) */
            cr_assert_str_eq(la, lb, "case %d: the plain part moved", k);
    }
    /* 15% +- 4 sigma */
    cr_assert(with_softcap > 0.15 * n - 4 * sqrt(n * 0.15 * 0.85) &&
                  with_softcap < 0.15 * n + 4 * sqrt(n * 0.15 * 0.85),
              "%d of %d cases with a softcap", with_softcap, n);
    cr_assert(with_bias > 0.15 * n - 4 * sqrt(n * 0.15 * 0.85) && with_bias < 0.15 * n + 4 * sqrt(n * 0.15 * 0.85),
              "%d of %d cases with a bias", with_bias, n);
    cr_assert(with_alibi > 0.15 * n - 4 * sqrt(n * 0.15 * 0.85) && with_alibi < 0.15 * n + 4 * sqrt(n * 0.15 * 0.85),
              "%d of %d cases with ALiBi", with_alibi, n);
    cr_assert(with_dv > 0.12 * n - 4 * sqrt(n * 0.12 * 0.88) && with_dv < 0.12 * n + 4 * sqrt(n * 0.12 * 0.88),
              "%d of %d cases with dv", with_dv, n);
    /* sinks: 15% of the cases without huge() (90% of them) */
    cr_assert(with_sinks > 0.135 * n - 4 * sqrt(n * 0.135 * 0.865) &&
                  with_sinks < 0.135 * n + 4 * sqrt(n * 0.135 * 0.865),
              "%d of %d cases with sinks", with_sinks, n);
}

Test(harness_case_variants, softcaps_include_saturating_ones)
{
    ac_caps all = caps_with(AC_VAR_ALL);
    ac_gen g;
    ac_gen_init(&g, 5, &all);
    bool small = false, gemma = false;
    for (int k = 0; k < 1000; k++) {
        ac_case c;
        cr_assert_eq(ac_gen_next(&g, &c, NULL), AC_OK);
        small |= c.softcap > 0.0 && c.softcap <= 1.0;
        gemma |= c.softcap == 50.0;
    }
    cr_assert(small && gemma, "c <= 1 (tanh saturates) %d, c = 50 (Gemma 2) %d", small, gemma);
}

/* ---- the shrinker ---------------------------------------------------------------------------- */

static bool always(const ac_case *c, void *ctx)
{
    (void)c, (void)ctx;
    return true;
}

static bool needs_softcap(const ac_case *c, void *ctx)
{
    (void)ctx;
    return c->softcap != 0.0;
}

static bool needs_a_big_sink(const ac_case *c, void *ctx)
{
    (void)ctx;
    return c->sinks != AC_SINKS_NONE;
}

Test(harness_case_variants, the_shrinker_drops_sinks_or_simplifies_them_to_normal_0_1)
{
    ac_case c, min;
    cr_assert_eq(ac_case_parse(BASE " sinks=over(20)", &c, NULL), AC_OK);
    ac_shrink(&c, always, NULL, 500, &min);
    cr_assert_eq(min.sinks, AC_SINKS_NONE);
    ac_shrink(&c, needs_a_big_sink, NULL, 500, &min);
    cr_assert(min.sinks == AC_SINKS_NORMAL && min.sinks_a == 0.0 && min.sinks_b == 1.0, "sinks %d(%g,%g)",
              (int)min.sinks, min.sinks_a, min.sinks_b);
}

/* A kernel listing (d_qk, d_v) pairs gets only those: a pair sets both dims. */
Test(harness_case_variants, a_kernel_listing_dv_pairs_gets_only_its_pairs)
{
    ac_caps caps = caps_with(AC_VAR_DV);
    caps.n_dv_pairs = 2;
    caps.dv_pairs[0][0] = 192, caps.dv_pairs[0][1] = 128;
    caps.dv_pairs[1][0] = 128, caps.dv_pairs[1][1] = 96;
    ac_gen g;
    ac_gen_init(&g, 9, &caps);
    int seen = 0;
    for (int k = 0; k < 1000; k++) {
        ac_case c;
        cr_assert_eq(ac_gen_next(&g, &c, NULL), AC_OK);
        if (c.head_dim_v == 0)
            continue;
        seen++;
        cr_assert((c.head_dim == 192 && c.head_dim_v == 128) || (c.head_dim == 128 && c.head_dim_v == 96),
                  "case %d: d=%d dv=%d", k, c.head_dim, c.head_dim_v);
    }
    cr_assert_gt(seen, 60);
}

Test(harness_case_variants, the_shrinker_drops_a_variant_the_failure_does_not_need_and_keeps_one_it_does)
{
    ac_case c;
    cr_assert_eq(ac_case_parse(BASE " softcap=30", &c, NULL), AC_OK);
    ac_case min;
    ac_shrink(&c, always, NULL, 500, &min);
    cr_assert_eq(min.softcap, 0.0, "a failure that needs no softcap shrinks without one");
    ac_shrink(&c, needs_softcap, NULL, 500, &min);
    cr_assert_eq(min.softcap, 30.0);
    cr_assert(min.batch == 1 && min.seqlen_q == 1 && min.seqlen_k == 1, "the rest shrinks as ever");
}

/* ---- the packed THD layout --------------------------------------------------------------- */

/* Only a kernel claiming the THD layout gets it: 12% of its cases, each one
 * valid, most with sequences of different lengths side by side. */
Test(harness_case_variants, the_packed_layout_is_drawn_only_for_a_kernel_claiming_it)
{
    ac_caps padded = caps_with(AC_VAR_ALL), packed = caps_with(AC_VAR_ALL);
    packed.layouts = AC_LAYOUTS_ALL;
    ac_gen g0, g1;
    ac_gen_init(&g0, 21, &padded);
    ac_gen_init(&g1, 21, &packed);
    int thd = 0, several = 0, n = 2000;
    for (int k = 0; k < n; k++) {
        ac_case a, b;
        cr_assert_eq(ac_gen_next(&g0, &a, NULL), AC_OK);
        cr_assert_eq(ac_gen_next(&g1, &b, NULL), AC_OK, "case %d", k);
        cr_assert_neq(a.layout, AC_LAYOUT_THD, "case %d: THD for a kernel that does not claim it", k);
        if (b.layout != AC_LAYOUT_THD)
            continue;
        thd++;
        several += b.batch > 1 && b.n_seqlens_q == b.batch;
    }
    cr_assert(thd > 0.12 * n - 4 * sqrt(n * 0.12 * 0.88) && thd < 0.12 * n + 4 * sqrt(n * 0.12 * 0.88),
              "%d of %d cases packed", thd, n);
    cr_assert_gt(several, thd / 3, "%d of %d packed cases with several sequences of their own lengths", several, thd);
}

static bool needs_thd(const ac_case *c, void *ctx)
{
    (void)ctx;
    return c->layout == AC_LAYOUT_THD && c->batch > 1;
}

Test(harness_case_variants, the_shrinker_unpacks_a_thd_case_the_failure_does_not_need)
{
    ac_case c, min;
    cr_assert_eq(ac_case_parse("v1 seed=3 b=3 hq=4 hkv=2 nq=33 nk=65 d=16 dtype=bf16 mask=none seqlens-q=33,0,5 "
                               "seqlens-k=1,65,9 layout=thd dist=normal(0,1) scale=auto",
                               &c, NULL),
                 AC_OK);
    ac_shrink(&c, always, NULL, 500, &min);
    cr_assert_eq(min.layout, AC_LAYOUT_BHSD);
    ac_shrink(&c, needs_thd, NULL, 500, &min);
    cr_assert(min.layout == AC_LAYOUT_THD && min.batch == 2 && min.seqlen_q == 1, "kept packed, b=%d nq=%d", min.batch,
              min.seqlen_q);
}

static bool needs_alibi(const ac_case *c, void *ctx)
{
    (void)ctx;
    return c->alibi != AC_ALIBI_NONE;
}

Test(harness_case_variants, the_shrinker_drops_alibi_or_simplifies_it_to_the_papers_slopes)
{
    ac_case c, min;
    cr_assert_eq(ac_case_parse(BASE " alibi=uniform(1,16):bh", &c, NULL), AC_OK);
    ac_shrink(&c, always, NULL, 500, &min);
    cr_assert_eq(min.alibi, AC_ALIBI_NONE);
    ac_shrink(&c, needs_alibi, NULL, 500, &min);
    cr_assert(min.alibi == AC_ALIBI_PAPER && !min.alibi_bh, "alibi %d bh %d", (int)min.alibi, min.alibi_bh);
}

static bool needs_a_bias(const ac_case *c, void *ctx)
{
    (void)ctx;
    return c->bias != AC_BIAS_NONE;
}

Test(harness_case_variants, the_shrinker_drops_a_bias_or_simplifies_it_to_a_plain_one)
{
    ac_case c, min;
    cr_assert_eq(ac_case_parse(BASE " bias=normal(-2,4):bh:f32:inf(0.2)", &c, NULL), AC_OK);
    ac_shrink(&c, always, NULL, 500, &min);
    cr_assert_eq(min.bias, AC_BIAS_NONE);
    ac_shrink(&c, needs_a_bias, NULL, 500, &min);
    cr_assert(min.bias == AC_BIAS_NORMAL && min.bias_a == 0.0 && min.bias_b == 1.0 && min.bias_inf == 0.0 &&
                  !min.bias_per_batch && !min.bias_per_head && !min.bias_f32,
              "bias not simplified");
}
