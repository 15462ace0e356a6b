/* harness/run/test_run_vk.c — v=k and MLA decode's shape (suite harness_vk):
 * V drawn as K's first d_v channels in every layout, a kernel that reads V
 * from K's buffer (cpu-flash-mla, as FlashMLA does) passes exactly the v=k
 * cases and is given no other, its planted bug is caught on MLA's shape, and
 * the decode profile draws that shape. */
#include <criterion/criterion.h>
#include <string.h>

#include "harness/harness.h"

static ac_case parse(const char *line)
{
    ac_case c;
    ac_err err = {{0}};
    cr_assert_eq(ac_case_parse(line, &c, &err), AC_OK, "%s: %s", line, err.msg);
    return c;
}

#define LINE(rest) "v1 seed=3 b=3 hq=8 hkv=2 nq=3 nk=70 d=40 dtype=bf16 mask=causal-br " rest

/* Every visible key's V row is its K row's first d_v channels, bit for bit. */
Test(harness_vk, v_is_k_prefix_in_every_layout_paged_included)
{
    const char *lines[] = {
        LINE("layout=bhsd dist=normal(0,1) scale=auto dv=24 v=k"),
        LINE("seqlens-k=70,1,33 layout=bshd dist=uniform(-2,2) scale=auto v=k"),
        LINE("layout=thd dist=normal(0,1) scale=auto dv=8 v=k"),
        LINE("seqlens-k=70,0,41 layout=bshd dist=outliers(1,0.01) scale=auto dv=32 v=k kv=paged(16)"),
        LINE("layout=bhsd dist=normal(0,1) scale=auto dv=40 v=k kv=paged(3,contig) splits=2"),
    };
    for (size_t x = 0; x < sizeof lines / sizeof lines[0]; x++) {
        ac_case c = parse(lines[x]);
        ac_inputs in;
        ac_err err = {{0}};
        cr_assert_eq(ac_inputs_make(&c, &in, &err), AC_OK, "%s: %s", lines[x], err.msg);
        const ac_problem *p = &in.p;
        cr_assert(p->v_from_k, "%s", lines[x]);
        size_t compared = 0;
        for (int b = 0; b < p->batch; b++)
            for (int h = 0; h < p->heads_kv; h++)
                for (int j = 0; j < ac_seqlen_k_of(p, b); j++)
                    for (int ch = 0; ch < ac_head_dim_v(p); ch++, compared++) {
                        size_t kv = ac_tensor_index(p, AC_TENSOR_K, b, h, j, ch),
                               vv = ac_tensor_index(p, AC_TENSOR_V, b, h, j, ch);
                        cr_assert_eq(ac_bits_get(c.dtype, in.v, vv), ac_bits_get(c.dtype, in.k, kv),
                                     "%s: b=%d h=%d j=%d ch=%d", lines[x], b, h, j, ch);
                        cr_assert(in.vd[vv] == in.kd[kv]);
                    }
        cr_assert_gt(compared, 0);
        ac_inputs_free(&in);
    }
}

/* Without v=k, V is drawn apart: its rows are not K's. */
Test(harness_vk, without_v_is_k_v_is_its_own)
{
    ac_case c = parse(LINE("layout=bhsd dist=normal(0,1) scale=auto dv=24"));
    ac_inputs in;
    ac_err err = {{0}};
    cr_assert_eq(ac_inputs_make(&c, &in, &err), AC_OK, "%s", err.msg);
    size_t same = 0;
    for (int ch = 0; ch < 24; ch++)
        same += in.vd[ac_tensor_index(&in.p, AC_TENSOR_V, 0, 0, 0, ch)] ==
            in.kd[ac_tensor_index(&in.p, AC_TENSOR_K, 0, 0, 0, ch)];
    cr_assert_lt(same, 3);
    ac_inputs_free(&in);
}

/* ---- a kernel that reads V from K's buffer -------------------------------------- */

/* cpu-flash-mla (kernels/cpu_flash_mla.c) reads V from K; a copy of it claiming nothing of the sort. */
static ac_kernel v_from_k_kernel(void)
{
    ac_kernel k = *ac_kernel_find("cpu-flash-mla");
    cr_assert(k.caps.v_from_k);
    return k;
}

static ac_result run_with(const ac_kernel *k, const ac_case *c)
{
    ac_budgets b;
    ac_err err = {{0}};
    cr_assert_eq(ac_budgets_load(ac_budgets_default_path(), &b, &err), AC_OK, "%s", err.msg);
    ac_run_opts o = {.backward = false, .cert_rows = 2};
    ac_result r;
    cr_assert_eq(ac_run_case(k, c, &b, &o, &r, &err), AC_OK, "%s: %s", k->name, err.msg);
    return r;
}

/* It passes a v=k case; on the same case with V its own (run past the
 * registry's refusal) it reads the wrong V and fails O; the registry refuses
 * that case, naming the reason. */
Test(harness_vk, a_kernel_reading_v_from_k_passes_v_is_k_and_is_refused_other_cases)
{
    ac_kernel k = v_from_k_kernel();
    const char *mla = "v1 seed=9 b=2 hq=16 hkv=1 nq=2 nk=200 d=576 dtype=bf16 mask=causal-br seqlens-k=200,77 "
                      "layout=bshd dist=normal(0,1) scale=auto dv=512 v=k kv=paged(64)";
    ac_case c = parse(mla);
    ac_result r = run_with(&k, &c);
    cr_assert_eq(r.verdict, AC_VERDICT_PASS, "%s: %s", mla, r.why);
    cr_assert_lt(r.m[AC_OUT_O].max_scaled, 4.0);
    c.v_from_k = false;
    ac_inputs in;
    ac_err err = {{0}};
    cr_assert_eq(ac_inputs_make(&c, &in, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(ac_kernel_supports(&k, &in.p, c.dtype, false, &err), AC_ERR_INPUT);
    cr_assert(strstr(err.msg, "reads V as K's first d_v channels"), "%s", err.msg);
    ac_inputs_free(&in);
    k.caps.v_from_k = false; /* run it anyway: the verdict the requirement prevents */
    r = run_with(&k, &c);
    cr_assert_eq(r.verdict, AC_VERDICT_FAIL);
    cr_assert_gt(r.m[AC_OUT_O].max_scaled, 100.0, "%g", r.m[AC_OUT_O].max_scaled);
}

/* The rope-first mutant reads V from K's last d_v channels: on MLA decode's shape it fails O. */
Test(harness_vk, the_rope_first_mutant_fails_mla_decode)
{
    const ac_kernel *k = ac_kernel_find("cpu-flash-mla-mutant-rope-first");
    cr_assert_not_null(k);
    ac_case c = parse("v1 seed=9 b=2 hq=16 hkv=1 nq=2 nk=200 d=576 dtype=bf16 mask=causal-br seqlens-k=200,77 "
                      "layout=bshd dist=normal(0,1) scale=auto dv=512 v=k kv=paged(64)");
    ac_result r = run_with(k, &c);
    cr_assert_eq(r.verdict, AC_VERDICT_FAIL);
    cr_assert_gt(r.m[AC_OUT_O].max_scaled, 100.0, "%g", r.m[AC_OUT_O].max_scaled);
    c.head_dim_v = 0; /* V is the whole of K: both ends read the same channels */
    r = run_with(k, &c);
    cr_assert_eq(r.verdict, AC_VERDICT_PASS, "%s", r.why);
}

/* ---- the generator -------------------------------------------------------------- */

/* A kernel reading V from K gets v=k in every case of every profile, d_v <= d, never fp8. */
Test(harness_vk, every_generated_case_of_a_v_from_k_kernel_is_v_is_k)
{
    ac_kernel k = v_from_k_kernel();
    k.caps.dtypes |= 1u << AC_E4M3; /* claimed, but v=k excludes it: such cases keep V their own */
    const ac_profile profiles[] = {AC_PROFILE_DEFAULT, AC_PROFILE_DECODE, AC_PROFILE_LONG};
    for (int pr = 0; pr < 3; pr++) {
        ac_gen g;
        ac_gen_init(&g, 11, &k.caps);
        g.profile = profiles[pr];
        g.max_seqlen = pr == 2 ? 4096 : 512;
        for (int n = 0; n < 300; n++) {
            ac_case c;
            ac_err err = {{0}};
            cr_assert_eq(ac_gen_next(&g, &c, &err), AC_OK, "%s", err.msg);
            char line[AC_CASE_LINE_MAX];
            ac_case_format(&c, line, sizeof line);
            if (ac_dtype_is_fp8(c.dtype)) {
                cr_assert(!c.v_from_k, "%s", line);
                continue;
            }
            cr_assert(c.v_from_k, "%s", line);
            cr_assert(c.head_dim_v <= c.head_dim, "%s", line);
        }
    }
}

/* The decode profile: ~15% of cpu-flash's cases are MLA decode (one KV head,
 * 16-128 query heads, d 576, d_v 512), about half of them v=k; the default
 * profile draws none, and no other case is v=k. */
Test(harness_vk, the_decode_profile_draws_mla_decode_shapes)
{
    const ac_kernel *k = ac_kernel_find("cpu-flash");
    const ac_profile profiles[] = {AC_PROFILE_DECODE, AC_PROFILE_DEFAULT};
    for (int pr = 0; pr < 2; pr++) {
        ac_gen g;
        ac_gen_init(&g, 5, &k->caps);
        g.profile = profiles[pr];
        g.max_seqlen = 4096;
        int mla = 0, vk = 0, n = 2000;
        for (int x = 0; x < n; x++) {
            ac_case c;
            cr_assert_eq(ac_gen_next(&g, &c, NULL), AC_OK);
            bool shape = c.heads_kv == 1 && c.head_dim_v == 512 && c.heads_q >= 16 && c.heads_q <= 128;
            mla += shape;
            vk += c.v_from_k;
            cr_assert(!c.v_from_k || shape, "v=k outside the MLA shape");
        }
        if (pr == 1) {
            cr_assert_eq(mla + vk, 0, "default profile: %d MLA, %d v=k", mla, vk);
            continue;
        }
        cr_assert(mla > n * 10 / 100 && mla < n * 20 / 100, "%d of %d MLA decode shapes", mla, n);
        cr_assert(vk > mla * 35 / 100 && vk < mla * 65 / 100, "%d of %d MLA cases v=k", vk, mla);
    }
}
