/* kernels/cuda/test_cuda_descriptors.c — Criterion tests of the CUDA kernel
 * descriptors and device-memory helpers that hold with or without a GPU (CI
 * has none), and with or without CUDA (the same tests run on
 * kernels/cuda_none.c): names, claims, and AC_ERR_ENV saying why. */
#include <criterion/criterion.h>
#include <string.h>

#include "attncheck_config.h"
#include "family.h"

static const ac_kernel *find_cuda(const char *name)
{
    const ac_kernel *all[16];
    size_t n = ac_cuda_kernels(all, 16);
    for (size_t i = 0; i < n; i++)
        if (strcmp(all[i]->name, name) == 0)
            return all[i];
    return NULL;
}

Test(cuda_kernels, family_lists_flash_naive_and_three_mutants)
{
    const ac_kernel *all[16];
    size_t n = ac_cuda_kernels(all, 16);
    /* cuda-flash-fp8 and its two mutants too (family.h ACD_FP8_FAMILY) */
    cr_assert_eq(n, 8); /* both builds list the same rows (cuda_none.c) */
    size_t mutants = 0, fp8 = 0;
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(all[i]->device, AC_DEV_CUDA, "%s", all[i]->name);
        cr_assert_eq(all[i]->memory, AC_MEM_CUDA, "%s", all[i]->name);
        cr_assert_not_null(all[i]->forward);
        cr_assert_not_null(all[i]->available);
        if (strncmp(all[i]->name, "cuda-flash-mutant-", 18) == 0) {
            mutants++;
            cr_assert_null(all[i]->backward, "mutants plant forward bugs only");
        }
        if (strncmp(all[i]->name, "cuda-flash-fp8", 14) == 0) {
            fp8++;
            cr_assert_null(all[i]->backward, "the fp8 path is forward only");
            cr_assert_eq(all[i]->caps.dtypes, AC_DTYPES_FP8, "%s", all[i]->name);
            cr_assert_eq(all[i]->caps.fp8_p, AC_E4M3, "%s", all[i]->name);
        }
    }
    cr_assert_eq(mutants, 3);
    cr_assert_eq(fp8, 3);
}

Test(cuda_kernels, count_respects_max)
{
    const ac_kernel *two[2];
    cr_assert_eq(ac_cuda_kernels(two, 2), 2);
    cr_assert_str_eq(two[0]->name, "cuda-flash");
    cr_assert_str_eq(two[1]->name, "cuda-naive");
}

Test(cuda_kernels, flash_claims_what_it_was_built_for)
{
    const ac_kernel *k = find_cuda("cuda-flash");
    cr_assert_not_null(k);
    cr_assert(k->caps.backward && k->backward);
    cr_assert_eq(k->caps.n_head_dims, 6);
    int want[] = {32, 64, 96, 128, 192, 256}; /* 192 and 256 on the CUDA cores */
    for (int i = 0; i < 6; i++)
        cr_assert_eq(k->caps.head_dims[i], want[i]);
    cr_assert_eq(k->caps.max_head_dim, 256);
    cr_assert_eq(k->caps.masks, (unsigned)AC_MASKCAP_ALL);
    cr_assert_eq(k->caps.dtypes, (1u << AC_F32) | (1u << AC_F16) | (1u << AC_BF16));
    cr_assert(k->caps.gqa && k->caps.varlen);
    cr_assert_eq(k->caps.layouts, (unsigned)AC_LAYOUTS_ALL);
    cr_assert_eq(k->caps.variants, (unsigned)(AC_VAR_SOFTCAP | AC_VAR_ALIBI | AC_VAR_SINKS | AC_VAR_DV | AC_VAR_BIAS));
    int pairs[][2] = {{192, 128}, {128, 96}, {256, 128}}; /* d_v != d_qk on the CUDA cores */
    cr_assert_eq(k->caps.n_dv_pairs, 3);
    for (int i = 0; i < 3; i++)
        cr_assert(k->caps.dv_pairs[i][0] == pairs[i][0] && k->caps.dv_pairs[i][1] == pairs[i][1]);
    const ac_kernel *naive = find_cuda("cuda-naive");
    cr_assert_not_null(naive);
    cr_assert(!naive->caps.backward && naive->backward == NULL);
    cr_assert_eq(naive->caps.variants, 0u);
    cr_assert(!(naive->caps.layouts & (1u << AC_LAYOUT_THD)));
}

/* Both builds claim the same: a build without CUDA lists what a CUDA build
 * offers (it once listed d <= 128 and no mutants). */
Test(cuda_kernels, mutants_claim_the_forward_of_flash)
{
    const ac_kernel *flash = find_cuda("cuda-flash");
    const char *mutants[] = {"cuda-flash-mutant-race", "cuda-flash-mutant-causal-skip",
                             "cuda-flash-mutant-tail-unmasked"};
    for (int i = 0; i < 3; i++) {
        const ac_kernel *k = find_cuda(mutants[i]);
        cr_assert_not_null(k, "%s", mutants[i]);
        const ac_caps *a = &k->caps, *b = &flash->caps;
        cr_assert(a->dtypes == b->dtypes && a->n_head_dims == b->n_head_dims && a->max_head_dim == b->max_head_dim &&
                      a->masks == b->masks && a->layouts == b->layouts && a->gqa == b->gqa && a->varlen == b->varlen &&
                      a->max_seqlen == b->max_seqlen && a->variants == b->variants && a->n_dv_pairs == b->n_dv_pairs &&
                      !a->backward,
                  "%s claims other than cuda-flash's forward", k->name);
        cr_assert_arr_eq(a->head_dims, b->head_dims, sizeof a->head_dims, "%s", k->name);
    }
    cr_assert_eq(find_cuda("cuda-naive")->caps.max_seqlen, 16384);
}

/* Without a device, availability and allocation fail as environment errors
 * that say why (the cudart call, or that CUDA was not built); with one, a round
 * trip returns the bytes sent. */
Test(cuda_kernels, device_helpers_report_env_or_round_trip)
{
    ac_err why = {{0}};
    const ac_kernel *k = find_cuda("cuda-flash");
    if (!ac_cuda_present(&why)) {
        cr_assert(strlen(why.msg) > 0);
        ac_err err = {{0}};
        cr_assert_eq(k->available(k, &err), AC_ERR_ENV);
        cr_assert(strstr(err.msg, "CUDA") != NULL, "message: %s", err.msg);
        void *dev = (void *)1;
        err.msg[0] = '\0';
        cr_assert_eq(ac_dev_alloc(&dev, 64, &err), AC_ERR_ENV);
        cr_assert_null(dev);
        const char *why_alloc = ATTNCHECK_HAVE_CUDA ? "cudaMalloc" : "built without CUDA";
        cr_assert(strstr(err.msg, why_alloc) != NULL, "message: %s", err.msg);
        return;
    }
    ac_err err = {{0}};
    cr_assert_eq(k->available(k, &err), AC_OK);
    unsigned char sent[64], got[64];
    for (int i = 0; i < 64; i++)
        sent[i] = (unsigned char)(37 * i + 11);
    void *dev = NULL;
    cr_assert_eq(ac_dev_alloc(&dev, sizeof sent, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(ac_dev_upload(dev, sent, sizeof sent, &err), AC_OK, "%s", err.msg);
    memset(got, 0, sizeof got);
    cr_assert_eq(ac_dev_download(got, dev, sizeof got, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(ac_dev_sync(&err), AC_OK, "%s", err.msg);
    ac_dev_free(dev);
    cr_assert_arr_eq(got, sent, sizeof sent);
}
