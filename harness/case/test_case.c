/* harness/case/test_case.c — case lines: round trips and rejections (suite harness_case). */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness/harness.h"

static void assert_round_trip(const char *line)
{
    ac_case c;
    ac_err err = {{0}};
    cr_assert_eq(ac_case_parse(line, &c, &err), AC_OK, "parse '%s': %s", line, err.msg);
    char out[AC_CASE_LINE_MAX];
    int n = ac_case_format(&c, out, sizeof out);
    cr_assert_eq(n, (int)strlen(line), "'%s' -> '%s'", line, out);
    cr_assert_str_eq(out, line);
}

/* Canonical lines, one per feature of the grammar; each round-trips on its own. */
typedef struct {
    char line[200];
} good_line;

ParameterizedTestParameters(harness_case, hand_written_canonical_lines_round_trip_byte_for_byte)
{
    static good_line lines[] = {
        {"v1 seed=9 b=2 hq=8 hkv=2 nq=300 nk=700 d=96 dtype=bf16 mask=causal-br layout=bhsd dist=normal(0,1) "
         "scale=auto"},
        {"v1 seed=1 b=1 hq=1 hkv=1 nq=1 nk=1 d=1 dtype=f32 mask=none layout=bshd dist=tiny() scale=auto"},
        {"v1 seed=18446744073709551615 b=3 hq=6 hkv=3 nq=65 nk=64 d=63 dtype=f16 mask=window-tl(0,0) layout=bhsd "
         "dist=equal() scale=0.3"},
        {"v1 seed=5 b=1 hq=4 hkv=1 nq=7 nk=129 d=128 dtype=f16 mask=window-br(inf,3) layout=bhsd dist=increasing(16) "
         "scale=auto"},
        {"v1 seed=5 b=1 hq=4 hkv=1 nq=7 nk=129 d=128 dtype=f16 mask=window-tl(12,inf) layout=bhsd dist=dominant(8) "
         "scale=2"},
        {"v1 seed=7 b=2 hq=2 hkv=2 nq=33 nk=17 d=64 dtype=bf16 mask=dense(0.5) maskrows=0.25 seqlens-q=0,33 "
         "seqlens-k=17,1 layout=bshd dist=outliers(1,0.001) scale=0.05"},
        {"v1 seed=2 b=2 hq=1 hkv=1 nq=3 nk=2 d=8 dtype=f16 mask=causal-tl seqlens-k=2,0 layout=bhsd dist=uniform(-4,4) "
         "scale=1e-05"},
        {"v1 seed=3 b=1 hq=1 hkv=1 nq=3 nk=2 d=8 dtype=f16 mask=dense(1) maskrows=1 layout=bhsd dist=huge(0.9) "
         "scale=auto"},
        {"v1 seed=4 b=1 hq=1 hkv=1 nq=3 nk=2 d=8 dtype=f32 mask=none layout=bhsd dist=normal(-1.25,0.1) "
         "scale=0.33333334"},
    };
    return cr_make_param_array(good_line, lines, sizeof lines / sizeof lines[0]);
}

ParameterizedTest(good_line *line, harness_case, hand_written_canonical_lines_round_trip_byte_for_byte)
{
    assert_round_trip(line->line);
}

Test(harness_case, generated_lines_round_trip_byte_for_byte)
{
    ac_caps caps = {
        .dtypes = 7,
        .max_head_dim = 256,
        .masks = AC_MASKCAP_ALL,
        .layouts = 3,
        .gqa = true,
        .varlen = true,
    };
    ac_gen g;
    ac_gen_init(&g, 12345, &caps);
    for (int k = 0; k < 500; k++) {
        ac_case c;
        ac_err err = {{0}};
        cr_assert_eq(ac_gen_next(&g, &c, &err), AC_OK, "%s", err.msg);
        char line[AC_CASE_LINE_MAX];
        cr_assert_gt(ac_case_format(&c, line, sizeof line), 0);
        assert_round_trip(line);
    }
}

Test(harness_case, non_canonical_line_is_accepted_and_canonicalised)
{
    ac_case c;
    ac_err err = {{0}};
    const char *in = "  v1   d=16 nk=5\tnq=4 hkv=1 hq=1 b=1 seed=3 dtype=f16 scale=0.10000000000000001  ";
    cr_assert_eq(ac_case_parse(in, &c, &err), AC_OK, "%s", err.msg);
    char out[AC_CASE_LINE_MAX];
    ac_case_format(&c, out, sizeof out);
    cr_assert_str_eq(
        out, "v1 seed=3 b=1 hq=1 hkv=1 nq=4 nk=5 d=16 dtype=f16 mask=none layout=bhsd dist=normal(0,1) scale=0.1");
    cr_assert_eq(c.scale, (double)0.1f, "an explicit scale is the f32 the kernel uses");
}

Test(harness_case, scale_auto_is_the_f32_rounding_of_one_over_sqrt_d)
{
    ac_case c;
    cr_assert_eq(ac_case_parse("v1 seed=1 b=1 hq=1 hkv=1 nq=1 nk=1 d=96 dtype=f16", &c, NULL), AC_OK);
    cr_assert(c.scale_auto);
    cr_assert_eq(c.scale, (double)(float)(1.0 / sqrt(96.0)));
    cr_assert_neq(c.scale, 1.0 / sqrt(96.0), "1/sqrt(96) is not an f32, so rounding shows");
}

Test(harness_case, format_reports_a_too_small_buffer)
{
    ac_case c = ac_case_default();
    char small[20];
    cr_assert_eq(ac_case_format(&c, small, sizeof small), -1);
}

/* Each malformed line is rejected with AC_ERR_INPUT and a message naming the field. */
/* Parameters are copied into each test's process: the strings live in the struct. */
typedef struct {
    char line[200], want[100];
} bad_line;

ParameterizedTestParameters(harness_case, malformed_fields_are_rejected_naming_the_field)
{
    static bad_line bad[] = {
        {"v1 seed=1 b=1 hq=1 hkv=1 nq=4 nk=x d=8 dtype=f16", "nk: expected a positive integer, got 'x'"},
        {"v1 seed=1 b=1 hq=1 hkv=1 nq=4 nk=0 d=8 dtype=f16", "nk: expected a positive integer, got '0'"},
        {"v1 seed=1 b=1 hq=1 hkv=1 nq=-4 nk=4 d=8 dtype=f16", "nq: expected a positive integer, got '-4'"},
        {"v1 seed=1 b=1 hq=1 hkv=1 nq=4 nk=4 d=8 dtype=f16 foo=3", "unknown field 'foo'"},
        {"v1 seed=1 b=1 hq=1 hkv=1 nq=4 nk=4 dtype=f16", "missing field 'd'"},
        {"v1 seed=1 b=1 hq=6 hkv=4 nq=4 nk=4 d=8 dtype=f16", "hq=6 is not a multiple of hkv=4"},
        {"v1 seed=1 b=1 hq=1 hkv=1 nq=4 nk=4 d=8 dtype=f8",
         "dtype: expected one of f32, f16, bf16, e4m3, e5m2, got 'f8'"},
        {"v1 seed=1 b=1 hq=1 hkv=1 nq=4 nk=4 d=8 dtype=f16 d=9", "duplicate field 'd'"},
        {"v2 seed=1 b=1 hq=1 hkv=1 nq=4 nk=4 d=8 dtype=f16", "version: expected 'v1'"},
        {"v1 seed=-1 b=1 hq=1 hkv=1 nq=4 nk=4 d=8 dtype=f16", "seed: expected an unsigned 64-bit integer"},
        {"v1 seed=18446744073709551616 b=1 hq=1 hkv=1 nq=4 nk=4 d=8 dtype=f16", "seed: expected"},
        {"v1 seed=1 b=65 hq=1 hkv=1 nq=4 nk=4 d=8 dtype=f16", "b: must be in 1..64, got 65"},
        {"v1 seed=1 b=1 hq=1 hkv=1 nq=4 nk=4 d=1025 dtype=f16", "d: must be in 1..1024, got 1025"},
        {"v1 seed=1 b=1 hq=1 hkv=1 nq=4 nk=4 d=8 dtype=f16 mask=causal", "mask: expected none, causal-tl"},
        {"v1 seed=1 b=1 hq=1 hkv=1 nq=4 nk=4 d=8 dtype=f16 mask=window-tl(-1,2)", "mask: expected window sides"},
        {"v1 seed=1 b=1 hq=1 hkv=1 nq=4 nk=4 d=8 dtype=f16 mask=window-br(3)", "mask: expected window-tl(L,R)"},
        {"v1 seed=1 b=1 hq=1 hkv=1 nq=4 nk=4 d=8 dtype=f16 mask=dense(0)", "mask: dense(KEEP) needs KEEP in (0,1]"},
        {"v1 seed=1 b=1 hq=1 hkv=1 nq=4 nk=4 d=8 dtype=f16 mask=dense(1.5)", "mask: dense(KEEP) needs KEEP in (0,1]"},
        {"v1 seed=1 b=1 hq=1 hkv=1 nq=4 nk=4 d=8 dtype=f16 mask=dense(0.5) maskrows=2",
         "maskrows: must be a fraction in [0,1]"},
        {"v1 seed=1 b=1 hq=1 hkv=1 nq=4 nk=4 d=8 dtype=f16 maskrows=0.5", "maskrows: needs mask=dense(KEEP)"},
        {"v1 seed=1 b=2 hq=1 hkv=1 nq=4 nk=4 d=8 dtype=f16 seqlens-q=1", "seqlens-q: 1 length for b=2"},
        {"v1 seed=1 b=2 hq=1 hkv=1 nq=4 nk=4 d=8 dtype=f16 seqlens-k=1,5",
         "seqlens-k: length 5 of sequence 1 is outside 0..nk=4"},
        {"v1 seed=1 b=1 hq=1 hkv=1 nq=4 nk=4 d=8 dtype=f16 seqlens-k=a",
         "seqlens-k: expected comma-separated integers >= 0"},
        {"v1 seed=1 b=1 hq=1 hkv=1 nq=4 nk=4 d=8 dtype=f16 layout=sbhd",
         "layout: expected bhsd, bshd or thd, got 'sbhd'"},
        {"v1 seed=1 b=1 hq=1 hkv=1 nq=4 nk=4 d=8 dtype=f16 dist=normal(0)", "dist: normal takes 2 numbers"},
        {"v1 seed=1 b=1 hq=1 hkv=1 nq=4 nk=4 d=8 dtype=f16 dist=gamma(1)", "dist: expected normal(M,S)"},
        {"v1 seed=1 b=1 hq=1 hkv=1 nq=4 nk=4 d=8 dtype=f16 dist=normal(0,-1)", "dist: normal(M,S) needs S > 0"},
        {"v1 seed=1 b=1 hq=1 hkv=1 nq=4 nk=4 d=8 dtype=f16 dist=uniform(1,1)", "dist: uniform(LO,HI) needs LO < HI"},
        {"v1 seed=1 b=1 hq=1 hkv=1 nq=4 nk=4 d=8 dtype=f16 dist=normal(0,1e5)", "beyond f16's largest 65504"},
        {"v1 seed=1 b=1 hq=1 hkv=1 nq=4 nk=4 d=8 dtype=f16 dist=huge(2)", "dist: huge(FRAC) needs FRAC in (0,1]"},
        {"v1 seed=1 b=1 hq=1 hkv=1 nq=4 nk=4 d=8 dtype=f16 dist=normal(nan,1)", "dist: normal takes 2 numbers"},
        {"v1 seed=1 b=1 hq=1 hkv=1 nq=4 nk=4 d=8 dtype=f16 scale=fast",
         "scale: expected auto or a finite number, got 'fast'"},
        {"v1 seed=1 b=1 hq=1 hkv=1 nq=4 nk=4 d=8 dtype=f16 scale=0", "scale: must be a nonzero finite f32"},
        {"v1 seed=1 b=1 hq=1 hkv=1 nq=4 nk=4 d=8 dtype=f16 scale=1e300", "scale: must be a nonzero finite f32"},
        {"v1 seed=1 b=1 hq=1 hkv=1 nq=4 nk=4 d=8 dtype=f16 nk", "'nk': expected key=value"},
        {"", "case line: empty"},
        /* numbers are read strictly: no hex, inf, '+' or blanks (strtod took them) */
        {"v1 seed=1 b=1 hq=1 hkv=1 nq=4 nk=4 d=8 dtype=f16 scale=0x1p-3", "scale: expected auto or a finite number"},
        {"v1 seed=1 b=1 hq=1 hkv=1 nq=4 nk=4 d=8 dtype=f16 scale=inf", "scale: expected auto or a finite number"},
        {"v1 seed=1 b=1 hq=1 hkv=1 nq=4 nk=4 d=8 dtype=f16 scale=+1", "scale: expected auto or a finite number"},
        {"v1 seed=1 b=1 hq=1 hkv=1 nq=4 nk=4 d=8 dtype=f16 scale=1e", "scale: expected auto or a finite number"},
        {"v1 seed=1 b=1 hq=1 hkv=1 nq=4 nk=4 d=8 dtype=f16 scale=.", "scale: expected auto or a finite number"},
        {"v1 seed=1 b=1 hq=1 hkv=1 nq=4 nk=4 d=8 dtype=f16 dist=normal(0x0,1)", "dist: normal takes 2 numbers"},
        {"v1 seed=+1 b=1 hq=1 hkv=1 nq=4 nk=4 d=8 dtype=f16", "seed: expected an unsigned 64-bit integer"},
        {"v1 seed=1 b=1 hq=1 hkv=1 nq=4 nk=4 d=8 dtype=f16 mask=dense(1e-400)", "mask: expected dense(KEEP)"},
        /* valid lines whose draws overflow: refused here, not reported as a kernel's failure */
        {"v1 seed=1 b=1 hq=1 hkv=1 nq=4 nk=4 d=1 dtype=f16 dist=increasing(1) scale=1e-5",
         "with scale 1e-05 and d=1 draws Q up to 100000"},
        {"v1 seed=1 b=1 hq=1 hkv=1 nq=4 nk=4 d=8 dtype=f32 dist=normal(0,1e36)", "gives scores up to 1.81019e+74"},
        {"v1 seed=1 b=1 hq=1 hkv=1 nq=4 nk=4 d=8 dtype=bf16 dist=uniform(-1e20,1e20)", "gives scores up to"},
        {"v1 seed=1 b=1 hq=1 hkv=1 nq=4 nk=4 d=8 dtype=f16 dist=normal(0,1) scale=1e37", "gives scores up to"},
        {"v1 seed=1 b=1 hq=1 hkv=1 nq=4 nk=4 d=8 dtype=f32 dist=outliers(1e32,0.5)", "gives scores up to"},
    };
    return cr_make_param_array(bad_line, bad, sizeof bad / sizeof bad[0]);
}

ParameterizedTest(bad_line *bad, harness_case, malformed_fields_are_rejected_naming_the_field)
{
    ac_case c;
    ac_err err = {{0}};
    int st = ac_case_parse(bad->line, &c, &err);
    cr_assert_eq(st, AC_ERR_INPUT, "'%s' gave status %d", bad->line, st);
    cr_assert(strstr(err.msg, bad->want) != NULL, "'%s': message '%s' lacks '%s'", bad->line, err.msg, bad->want);
}

Test(harness_case, validate_checks_windows_and_lengths_set_in_code)
{
    ac_case c = ac_case_default();
    cr_assert_eq(ac_case_validate(&c, NULL), AC_OK);
    c.mask = AC_MASK_WINDOW_TL;
    c.window_left = -2;
    ac_err err = {{0}};
    cr_assert_eq(ac_case_validate(&c, &err), AC_ERR_INPUT);
    cr_assert(strstr(err.msg, "mask: window sides") != NULL, "%s", err.msg);
    c = ac_case_default();
    c.n_seqlens_q = 1;
    c.seqlens_q[0] = 17; /* nq = 16 */
    cr_assert_eq(ac_case_validate(&c, &err), AC_ERR_INPUT);
    cr_assert(strstr(err.msg, "seqlens-q: length 17") != NULL, "%s", err.msg);
}

Test(harness_case, default_case_is_the_documented_one)
{
    ac_case c = ac_case_default();
    char line[AC_CASE_LINE_MAX];
    ac_case_format(&c, line, sizeof line);
    cr_assert_str_eq(
        line, "v1 seed=1 b=1 hq=1 hkv=1 nq=16 nk=16 d=16 dtype=f16 mask=none layout=bhsd dist=normal(0,1) scale=auto");
}

/* Every row of the mask-kind table: its line round-trips, and the problem it
 * gives uses exactly that kind (the parser, formatter, inputs and the
 * problem's classification all read the same row). */
Test(harness_case, every_mask_kind_round_trips_and_gives_the_problem_it_names)
{
    static const char *const params[AC_MASK_KIND_COUNT] = {
        [AC_MASK_WINDOW_TL] = "(3,inf)", [AC_MASK_WINDOW_BR] = "(inf,2)", [AC_MASK_DENSE] = "(0.5)"};
    for (int k = 0; k < AC_MASK_KIND_COUNT; k++) {
        char line[AC_CASE_LINE_MAX];
        snprintf(line, sizeof line,
                 "v1 seed=3 b=1 hq=2 hkv=1 nq=9 nk=7 d=8 dtype=f16 mask=%s%s layout=bhsd "
                 "dist=normal(0,1) scale=auto",
                 ac_mask_name((ac_mask_kind)k), params[k] ? params[k] : "");
        assert_round_trip(line);
        ac_case c;
        cr_assert_eq(ac_case_parse(line, &c, NULL), AC_OK);
        cr_assert_eq(c.mask, (ac_mask_kind)k);
        ac_inputs in;
        ac_err err = {{0}};
        cr_assert_eq(ac_inputs_make(&c, &in, &err), AC_OK, "%s", err.msg);
        cr_assert_eq(ac_problem_masks(&in.p), 1u << k, "%s: problem uses 0x%x", line, ac_problem_masks(&in.p));
        cr_assert_eq(in.p.align, ac_mask_align((ac_mask_kind)k));
        ac_inputs_free(&in);
    }
}

Test(harness_case, the_capability_bits_are_the_table_s)
{
    unsigned all = 0;
    for (int k = 0; k < AC_MASK_KIND_COUNT; k++)
        all |= ac_mask_bit((ac_mask_kind)k);
    cr_assert_eq((unsigned)AC_MASKCAP_ALL, all);
    cr_assert_eq((unsigned)AC_MASKCAP_CAUSAL_BR, ac_mask_bit(AC_MASK_CAUSAL_BR));
    cr_assert_eq((unsigned)AC_MASKCAP_WINDOW, ac_mask_bit(AC_MASK_WINDOW_BR));
    cr_assert_eq((unsigned)AC_MASKCAP_ALL, 0x1Fu, "the plugin ABI's five bits, never renumbered");
}

Test(harness_case, mask_filters_take_kinds_and_stems)
{
    unsigned kinds = 0;
    ac_err err = {{0}};
    cr_assert_eq(ac_mask_filter_parse("causal,window-br", &kinds, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(kinds, 1u << AC_MASK_CAUSAL_TL | 1u << AC_MASK_CAUSAL_BR | 1u << AC_MASK_WINDOW_BR);
    cr_assert_eq(ac_mask_filter_parse("window,none,dense", &kinds, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(kinds, 1u << AC_MASK_WINDOW_TL | 1u << AC_MASK_WINDOW_BR | 1u << AC_MASK_NONE | 1u << AC_MASK_DENSE);
    cr_assert_eq(ac_mask_filter_parse("causal,sliding", &kinds, &err), AC_ERR_INPUT);
    cr_assert(strstr(err.msg, "'sliding'") != NULL, "%s", err.msg);
    cr_assert_eq(ac_mask_filter_parse("win", &kinds, &err), AC_ERR_INPUT, "a stem is a whole word before '-'");
}

/* The longest valid case: its canonical line must fit AC_CASE_LINE_MAX, so no
 * caller ever prints "(case line too long)" (ac_result.line, the corpus, the
 * summary hold that many). */
Test(harness_case, the_longest_valid_line_fits_the_buffer_and_round_trips)
{
    char line[4096], lens[800];
    size_t at = 0;
    for (int b = 0; b < AC_CASE_MAX_BATCH; b++)
        at += (size_t)snprintf(lens + at, sizeof lens - at, b ? ",%d" : "%d", 2147483647 - b);
    snprintf(line, sizeof line,
             "v1 seed=18446744073709551615 b=64 hq=2147483647 hkv=2147483647 nq=2147483647 nk=2147483647 d=512 "
             "dtype=bf16 mask=dense(0.12345678901234566) maskrows=0.12345678901234566 seqlens-q=%s seqlens-k=%s "
             "layout=bshd dist=uniform(-1.2345678901234568e-300,-1.2345678901234566e-300) scale=-1.1754944e-38",
             lens, lens);
    ac_case c;
    ac_err err = {{0}};
    cr_assert_eq(ac_case_parse(line, &c, &err), AC_OK, "%s", err.msg);
    char out[AC_CASE_LINE_MAX];
    int n = ac_case_format(&c, out, sizeof out);
    cr_assert_gt(n, 1600, "the longest line is long (%d)", n);
    cr_assert_lt(n, AC_CASE_LINE_MAX, "%d characters do not fit", n);
    cr_assert_str_eq(out, line);
    c.mask = AC_MASK_WINDOW_BR, c.window_left = c.window_right = 2147483647, c.masked_rows = 0;
    cr_assert_lt(ac_case_format(&c, out, sizeof out), AC_CASE_LINE_MAX - 1, "window-br at its longest");
}
