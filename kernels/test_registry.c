/* kernels/test_registry.c — the kernel registry: built-in list, run-time
 * additions, the capability check and its messages, availability, and the
 * ref-fp64 kernel (suite kernels_registry). */
#include "attncheck_config.h"
#include "test_kernels_support.h"

static int fake_forward(const ac_kernel *self, const ac_problem *p, ac_dtype t, const ac_fwd_args *a, ac_err *err)
{
    (void)self, (void)p, (void)t, (void)a, (void)err;
    return AC_OK;
}

/* Claims little, so every capability can be found missing. */
static const ac_kernel narrow_kernel = {
    .name = "test-narrow",
    .description = "test double",
    .caps = {.dtypes = 1u << AC_F16,
             .head_dims = {64, 128},
             .n_head_dims = 2,
             .max_head_dim = 128,
             .masks = AC_MASKCAP_NONE | AC_MASKCAP_CAUSAL_BR,
             .layouts = 1u << AC_LAYOUT_BHSD,
             .gqa = false,
             .varlen = false,
             .backward = false,
             .max_seqlen = 1024},
    .device = AC_DEV_CPU,
    .memory = AC_MEM_HOST,
    .forward = fake_forward,
};

Test(kernels_registry, lists_the_builtin_kernels_with_unique_names)
{
    size_t n = ac_kernel_count();
    cr_assert_geq(n, 1 + 2 + 12 + 2, "ref-fp64, two cpu-flash tilings, >= 12 mutants, two CUDA kernels");
    cr_assert_str_eq(ac_kernel_at(0)->name, "ref-fp64");
    for (size_t i = 0; i < n; i++) {
        const ac_kernel *k = ac_kernel_at(i);
        cr_assert(k && k->name && k->description && k->forward, "kernel %zu incomplete", i);
        cr_assert_eq(ac_kernel_find(k->name), k, "%s is not found by name", k->name);
        for (size_t j = i + 1; j < n; j++)
            cr_assert(strcmp(k->name, ac_kernel_at(j)->name) != 0, "duplicate name %s", k->name);
    }
    cr_assert_null(ac_kernel_at(n));
    cr_assert_null(ac_kernel_find("no-such-kernel"));
    cr_assert_null(ac_kernel_find(NULL));
    cr_assert_not_null(ac_kernel_find("cpu-flash-128x64"));
    cr_assert_not_null(ac_kernel_find("cuda-flash"));
}

Test(kernels_registry, adds_a_kernel_and_refuses_a_duplicate_name)
{
    size_t before = ac_kernel_count();
    ac_err err = {{0}};
    ac_kernel k = narrow_kernel;
    char name[32] = "test-narrow";
    k.name = name;
    cr_assert_eq(ac_kernel_add(&k, &err), AC_OK, "%s", err.msg);
    strcpy(name, "overwritten"); /* the registry keeps its own copy of the name */
    const ac_kernel *found = ac_kernel_find("test-narrow");
    cr_assert_not_null(found);
    cr_assert_eq(found->caps.max_seqlen, 1024);
    cr_assert_eq(ac_kernel_count(), before + 1);
    cr_assert_eq(ac_kernel_at(before), found);
    k.name = "test-narrow";
    cr_assert_eq(ac_kernel_add(&k, &err), AC_ERR_INPUT);
    cr_assert(strstr(err.msg, "'test-narrow' is already registered"), "%s", err.msg);
    k.name = "cpu-flash";
    cr_assert_eq(ac_kernel_add(&k, &err), AC_ERR_INPUT);
    cr_assert(strstr(err.msg, "'cpu-flash' is already registered"), "%s", err.msg);
    k.name = NULL;
    cr_assert_eq(ac_kernel_add(&k, &err), AC_ERR_INPUT);
    cr_assert_eq(ac_kernel_count(), before + 1);
}

Test(kernels_registry, refuses_additions_past_the_table_size)
{
    ac_err err = {{0}};
    static char names[64][16];
    int added = 0, st = AC_OK;
    for (; added < 64 && st == AC_OK; added++) {
        ac_kernel k = narrow_kernel;
        snprintf(names[added], sizeof names[added], "t-%d", added);
        k.name = names[added];
        st = ac_kernel_add(&k, &err);
    }
    cr_assert_eq(st, AC_ERR_INPUT, "64 additions all accepted");
    cr_assert(strstr(err.msg, "registry full"), "%s", err.msg);
    cr_assert_not_null(ac_kernel_find("t-0"));
}

/* The message for one missing capability: problem p (from a base that passes) changed by the caller. */
static void expect_refusal(const ac_problem *p, ac_dtype t, bool bwd, const char *needle)
{
    ac_err err = {{0}};
    cr_assert_eq(ac_kernel_supports(&narrow_kernel, p, t, bwd, &err), AC_ERR_INPUT, "accepted (want '%s')", needle);
    cr_assert(strstr(err.msg, needle), "message '%s' lacks '%s'", err.msg, needle);
    cr_assert(strstr(err.msg, "test-narrow"), "message '%s' does not name the kernel", err.msg);
}

Test(kernels_registry, supports_names_the_missing_capability)
{
    ac_problem ok = ac_problem_dense(1, 2, 2, 100, 100, 64);
    ac_err err = {{0}};
    cr_assert_eq(ac_kernel_supports(&narrow_kernel, &ok, AC_F16, false, &err), AC_OK, "%s", err.msg);
    ac_problem p = ok;
    expect_refusal(&p, AC_BF16, false, "dtype bf16");
    p.head_dim = 80;
    expect_refusal(&p, AC_F16, false, "head_dim=80 (supports 64, 128)");
    p = ok;
    p.windowed = true, p.window_left = AC_WINDOW_INF, p.window_right = 0, p.align = AC_ALIGN_TOP_LEFT;
    expect_refusal(&p, AC_F16, false, "causal mask aligned top-left");
    p.align = AC_ALIGN_BOTTOM_RIGHT;
    cr_assert_eq(ac_kernel_supports(&narrow_kernel, &p, AC_F16, false, &err), AC_OK, "%s", err.msg);
    p.window_left = 16;
    expect_refusal(&p, AC_F16, false, "sliding window");
    p = ok;
    uint8_t mask[100 * 100] = {1};
    p.dense_mask = mask, p.mask_batch = 1, p.mask_heads = 1;
    expect_refusal(&p, AC_F16, false, "dense boolean mask");
    p = ok;
    p.layout = AC_LAYOUT_BSHD;
    expect_refusal(&p, AC_F16, false, "layout bshd");
    p = ok;
    p.heads_kv = 1;
    expect_refusal(&p, AC_F16, false, "GQA/MQA (hq=2, hkv=1)");
    p = ok;
    int lens[1] = {50};
    p.seqlens_k = lens;
    expect_refusal(&p, AC_F16, false, "varlen");
    expect_refusal(&ok, AC_F16, true, "no backward");
    p = ok;
    p.seqlen_k = 2048;
    expect_refusal(&p, AC_F16, false, "up to 1024 (nq=100, nk=2048)");
}

Test(kernels_registry, a_kernel_claiming_only_causal_refuses_an_unmasked_problem)
{
    ac_kernel k = narrow_kernel;
    k.caps.masks = AC_MASKCAP_CAUSAL_TL | AC_MASKCAP_WINDOW;
    ac_problem p = ac_problem_dense(1, 1, 1, 8, 8, 64);
    ac_err err = {{0}};
    cr_assert_eq(ac_kernel_supports(&k, &p, AC_F16, false, &err), AC_ERR_INPUT);
    cr_assert(strstr(err.msg, "mask=none"), "%s", err.msg);
    p.windowed = true, p.window_left = 4, p.window_right = 0, p.align = AC_ALIGN_TOP_LEFT;
    cr_assert_eq(ac_kernel_supports(&k, &p, AC_F16, false, &err), AC_OK, "%s", err.msg);
    p.align = AC_ALIGN_BOTTOM_RIGHT; /* a window only in the alignments claimed for causal */
    cr_assert_eq(ac_kernel_supports(&k, &p, AC_F16, false, &err), AC_ERR_INPUT);
    cr_assert(strstr(err.msg, "sliding window aligned bottom-right"), "%s", err.msg);
}

Test(kernels_registry, cuda_kernels_report_why_they_cannot_run)
{
    const ac_kernel *k = ac_kernel_find("cuda-flash");
    cr_assert_not_null(k);
    cr_assert_eq(k->device, AC_DEV_CUDA);
    ac_err why = {{0}};
    if (!ATTNCHECK_HAVE_CUDA) {
        cr_assert_not(ac_kernel_is_available(k, &why));
        cr_assert_str_eq(why.msg, "built without CUDA");
        cr_assert_not(ac_cuda_present(&why));
        void *dev = (void *)1;
        cr_assert_eq(ac_dev_alloc(&dev, 16, &why), AC_ERR_ENV);
        cr_assert_null(dev);
        cr_assert_eq(ac_dev_sync(&why), AC_ERR_ENV);
        cr_assert_eq(ac_cuda_bench(0, NULL), AC_ERR_ENV);
    } else if (!ac_kernel_is_available(k, &why)) {
        cr_assert(why.msg[0], "unavailable without a reason");
    }
    cr_assert(ac_kernel_is_available(ac_kernel_find("cpu-flash"), &why));
}

/* ref-fp64 returns the fp64 reference rounded once: bit for bit ac_store of it. */
Test(kernels_registry, ref_kernel_is_the_reference_rounded_to_the_dtype)
{
    ac_problem p = ac_problem_dense(2, 4, 2, 33, 47, 16);
    p.windowed = true, p.window_left = AC_WINDOW_INF, p.window_right = 0, p.align = AC_ALIGN_BOTTOM_RIGHT;
    p.layout = AC_LAYOUT_BSHD;
    tk_case c;
    tk_init(&c, p, AC_BF16, 1.0, 8);
    const ac_kernel *k = ac_kernel_find("ref-fp64");
    tk_poison(&c);
    tk_forward(k, &c);
    tk_backward(k, &c);
    double *q = tk_widen(c.t, c.q, c.nq), *kk = tk_widen(c.t, c.k, c.nkv), *v = tk_widen(c.t, c.v, c.nkv);
    double *d_o = tk_widen(c.t, c.d_o, c.nq), *o_in = tk_widen(c.t, c.o, c.nq);
    double *o = malloc(c.nq * 8), *lse = malloc(c.nl * 8), *lse_in = malloc(c.nl * 8), *delta = malloc(c.nl * 8);
    double *dq = malloc(c.nq * 8), *dk = malloc(c.nkv * 8), *dv = malloc(c.nkv * 8);
    ac_err err = {{0}};
    cr_assert_eq(ref_forward_fp64(&p, q, kk, v, o, lse, &err), AC_OK, "%s", err.msg);
    uint16_t *want = malloc(c.nkv * 2 > c.nq * 2 ? c.nkv * 2 : c.nq * 2);
    ac_store(c.t, o, c.nq, want);
    cr_assert(memcmp(want, c.o, c.nq * 2) == 0, "O is not the rounded reference");
    for (size_t i = 0; i < c.nl; i++) {
        cr_assert_eq(c.lse[i], (float)lse[i], "LSE[%zu]", i);
        lse_in[i] = c.lse[i];
    }
    cr_assert_eq(ref_backward_fp64(&p, q, kk, v, o_in, lse_in, d_o, dq, dk, dv, delta, &err), AC_OK, "%s", err.msg);
    ac_store(c.t, dq, c.nq, want);
    cr_assert(memcmp(want, c.dq, c.nq * 2) == 0, "dQ");
    ac_store(c.t, dk, c.nkv, want);
    cr_assert(memcmp(want, c.dk, c.nkv * 2) == 0, "dK");
    ac_store(c.t, dv, c.nkv, want);
    cr_assert(memcmp(want, c.dv, c.nkv * 2) == 0, "dV");
    free(q), free(kk), free(v), free(d_o), free(o_in), free(o), free(lse), free(lse_in), free(delta);
    free(dq), free(dk), free(dv), free(want);
    tk_free(&c);
}
