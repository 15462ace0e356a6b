/* harness/run/test_run_broadcast.c — dense masks of every broadcast shape and
 * negative scales (suite harness_broadcast): the generator draws them for
 * every kernel, correct kernels pass them, and a kernel that reads batch 0's
 * mask for every batch (or head 0's for every head) now fails. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness/harness.h"

static ac_result run_with(const ac_kernel *k, const char *line)
{
    ac_case c;
    ac_err err = {{0}};
    cr_assert_eq(ac_case_parse(line, &c, &err), AC_OK, "%s: %s", line, err.msg);
    ac_budgets b;
    cr_assert_eq(ac_budgets_load(ac_budgets_default_path(), &b, &err), AC_OK, "%s", err.msg);
    ac_run_opts o = {.backward = true, .cert_rows = 2};
    ac_result r;
    cr_assert_eq(ac_run_case(k, &c, &b, &o, &r, &err), AC_OK, "%s on %s: %s", k->name, line, err.msg);
    return r;
}

/* cpu-flash handed a problem whose mask claims one slice: batch 0's (head 0's) mask for all. */
static int first_slice_forward(const ac_kernel *self, const ac_problem *p, ac_dtype t, const ac_fwd_args *a,
                               ac_err *err)
{
    (void)self;
    ac_problem q = *p;
    q.mask_batch = q.mask_heads = 1; /* index (0, 0): the first slice of the (B, Hq) mask */
    const ac_kernel *k = ac_kernel_find("cpu-flash");
    return k->forward(k, &q, t, a, err);
}

static int first_slice_backward(const ac_kernel *self, const ac_problem *p, ac_dtype t, const ac_bwd_args *a,
                                ac_err *err)
{
    (void)self;
    ac_problem q = *p;
    q.mask_batch = q.mask_heads = 1;
    const ac_kernel *k = ac_kernel_find("cpu-flash");
    return k->backward(k, &q, t, a, err);
}

#define LINE(dims) \
    "v1 seed=6 b=3 hq=4 hkv=2 nq=40 nk=50 d=16 dtype=bf16 mask=dense(0.5) maskrows=0.1 layout=bhsd " \
    "dist=normal(0,1) scale=auto" dims

Test(harness_broadcast, a_kernel_reading_one_mask_slice_fails_every_shape_but_one_slice)
{
    ac_kernel k = *ac_kernel_find("cpu-flash");
    k.name = "cpu-flash-first-mask-slice";
    k.forward = first_slice_forward, k.backward = first_slice_backward;
    const char *shapes[] = {LINE(" maskdims=b1"), LINE(" maskdims=1h"), LINE(" maskdims=bh")};
    for (int s = 0; s < 3; s++) {
        ac_result r = run_with(&k, shapes[s]);
        cr_assert_eq(r.verdict, AC_VERDICT_FAIL, "%s passed", shapes[s]);
        cr_assert_eq(run_with(ac_kernel_find("cpu-flash"), shapes[s]).verdict, AC_VERDICT_PASS, "%s", shapes[s]);
    }
    cr_assert_eq(run_with(&k, LINE("")).verdict, AC_VERDICT_PASS, "one slice: nothing to misread");
}

/* maskdims=11 is the old mask, byte for byte: a (B, Hq) mask's first slice is it. */
Test(harness_broadcast, a_broadcast_masks_first_slice_is_the_one_slice_mask)
{
    ac_case c1, cbh;
    ac_inputs one, all;
    ac_err err = {{0}};
    cr_assert_eq(ac_case_parse(LINE(""), &c1, &err), AC_OK);
    cr_assert_eq(ac_case_parse(LINE(" maskdims=bh"), &cbh, &err), AC_OK);
    cr_assert_eq(ac_inputs_make(&c1, &one, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(ac_inputs_make(&cbh, &all, &err), AC_OK, "%s", err.msg);
    cr_assert(all.p.mask_batch == 3 && all.p.mask_heads == 4);
    size_t slice = 40 * 50;
    cr_assert(memcmp(one.dense_mask, all.dense_mask, slice) == 0, "slice (0, 0) moved");
    cr_assert(memcmp(all.dense_mask, all.dense_mask + slice, slice) != 0, "slices (0, 0) and (0, 1) are alike");
    ac_inputs_free(&one);
    ac_inputs_free(&all);
}

/* The generator: half the dense masks with (B, Hq) dimensions, 5% negative
 * scales, for a kernel that claims no variant as for one that claims all. */
Test(harness_broadcast, the_generator_draws_broadcast_masks_and_negative_scales_for_every_kernel)
{
    ac_caps caps = {.dtypes = 7,
                    .max_head_dim = 256,
                    .masks = AC_MASKCAP_ALL,
                    .layouts = 3,
                    .gqa = true,
                    .varlen = true,
                    .backward = true};
    ac_gen g;
    ac_gen_init(&g, 31, &caps);
    int dense = 0, dims = 0, negative = 0, n = 3000;
    for (int k = 0; k < n; k++) {
        ac_case c;
        cr_assert_eq(ac_gen_next(&g, &c, NULL), AC_OK);
        dense += c.mask == AC_MASK_DENSE;
        dims += c.mask_per_batch || c.mask_per_head;
        negative += c.scale < 0.0;
        cr_assert(c.scale_auto || c.scale != 0.0);
    }
    cr_assert(dims > 0.5 * dense - 4 * sqrt(dense * 0.25) && dims < 0.5 * dense + 4 * sqrt(dense * 0.25),
              "%d of %d dense masks with dimensions", dims, dense);
    cr_assert(negative > 0.05 * n - 4 * sqrt(n * 0.05 * 0.95) && negative < 0.05 * n + 4 * sqrt(n * 0.05 * 0.95),
              "%d of %d negative scales", negative, n);
}

/* Negative scales reverse the scores' order: correct kernels pass, masks included. */
Test(harness_broadcast, correct_kernels_pass_negative_scales)
{
    static const char *const lines[] = {
        "v1 seed=3 b=1 hq=2 hkv=1 nq=40 nk=70 d=16 dtype=bf16 mask=causal-br layout=bhsd dist=normal(0,1) scale=-0.25",
        "v1 seed=4 b=2 hq=2 hkv=2 nq=33 nk=65 d=8 dtype=f32 mask=dense(0.5) maskrows=0.2 layout=bshd "
        "dist=normal(0,1) scale=-1 maskdims=bh",
        "v1 seed=5 b=1 hq=2 hkv=1 nq=40 nk=70 d=16 dtype=f16 mask=window-tl(8,0) layout=bhsd dist=dominant(8) "
        "scale=-0.25 softcap=5 alibi=paper",
    };
    const char *kernels[] = {"cpu-flash", "cpu-flash-128x64", "ref-fp64"};
    for (int k = 0; k < 3; k++)
        for (int l = 0; l < 3; l++) {
            ac_result r = run_with(ac_kernel_find(kernels[k]), lines[l]);
            cr_assert_eq(r.verdict, AC_VERDICT_PASS, "%s on %s: %s", kernels[k], lines[l], r.why);
        }
}
