/* kernels/cuda/test_cuda_descriptors.c — Criterion tests of the CUDA kernel
 * descriptors and device-memory helpers that hold with or without a GPU (CI
 * has none), and with or without CUDA (the same tests run on
 * kernels/cuda_none.c): names, claims, and AC_ERR_ENV saying why. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "attncheck_config.h"
#include "family.h"
#if ATTNCHECK_HAVE_CUDA
#include "acd.h" /* acd_decode_splits: host code, no device needed */
#include <cublas_v2.h>
#endif

Test(cuda_kernels, family_lists_flash_naive_and_three_mutants)
{
    const ac_kernel *all[32];
    size_t n = ac_cuda_kernels(all, 32);
    /* cuda-flash-fp8 and its two mutants too (family.h ACD_FP8_FAMILY), cuda-decode and its four, cuda-decode-fp8 and
     * its one, cuda-decode-mla and its two (ACD_DECODE_FAMILY) */
    cr_assert_eq(n, 18); /* both builds list the same rows (cuda_none.c) */
    size_t mutants = 0, fp8 = 0, decode = 0;
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
        if (strncmp(all[i]->name, "cuda-decode", 11) == 0) {
            decode++;
            cr_assert_null(all[i]->backward, "paged decode is forward only");
        }
    }
    cr_assert_eq(mutants, 3);
    cr_assert_eq(fp8, 3);
    cr_assert_eq(decode, 10);
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
    const ac_kernel *k = ac_kernel_find("cuda-flash");
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
    const ac_kernel *naive = ac_kernel_find("cuda-naive");
    cr_assert_not_null(naive);
    cr_assert(!naive->caps.backward && naive->backward == NULL);
    cr_assert_eq(naive->caps.variants, 0u);
    cr_assert(!(naive->caps.layouts & (1u << AC_LAYOUT_THD)));
}

/* Both builds claim the same: a build without CUDA lists what a CUDA build
 * offers (it once listed d <= 128 and no mutants). */
Test(cuda_kernels, mutants_claim_the_forward_of_flash)
{
    const ac_kernel *flash = ac_kernel_find("cuda-flash");
    const char *mutants[] = {"cuda-flash-mutant-race", "cuda-flash-mutant-causal-skip",
                             "cuda-flash-mutant-tail-unmasked"};
    for (int i = 0; i < 3; i++) {
        const ac_kernel *k = ac_kernel_find(mutants[i]);
        cr_assert_not_null(k, "%s", mutants[i]);
        const ac_caps *a = &k->caps, *b = &flash->caps;
        cr_assert(a->dtypes == b->dtypes && a->n_head_dims == b->n_head_dims && a->max_head_dim == b->max_head_dim &&
                      a->masks == b->masks && a->layouts == b->layouts && a->gqa == b->gqa && a->varlen == b->varlen &&
                      a->max_seqlen == b->max_seqlen && a->variants == b->variants && a->n_dv_pairs == b->n_dv_pairs &&
                      !a->backward,
                  "%s claims other than cuda-flash's forward", k->name);
        cr_assert_arr_eq(a->head_dims, b->head_dims, sizeof a->head_dims, "%s", k->name);
    }
    cr_assert_eq(ac_kernel_find("cuda-naive")->caps.max_seqlen, 16384);
}

/* Without a device, availability and allocation fail as environment errors
 * that say why (the cudart call, or that CUDA was not built); with one, a round
 * trip returns the bytes sent. */
Test(cuda_kernels, device_helpers_report_env_or_round_trip)
{
    ac_err why = {{0}};
    const ac_kernel *k = ac_kernel_find("cuda-flash");
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

/* cuda-decode claims what decode.cu implements: f16/bf16, d 64 and 128, every
 * mask kind, bhsd/bshd, GQA, varlen, paged and split, no backward; its four
 * mutants claim the same, and `prove --base cuda-decode` finds them (their
 * names carry "mutant" after the family's "cuda-" prefix). */
Test(cuda_kernels, decode_and_its_mutants_claim_paged_split_decode)
{
    const char *names[] = {"cuda-decode", "cuda-decode-mutant-combine-no-rescale", "cuda-decode-mutant-empty-split-nan",
                           "cuda-decode-mutant-split-off-by-one", "cuda-decode-mutant-last-page-slots"};
    for (int i = 0; i < 5; i++) {
        const ac_kernel *k = ac_kernel_find(names[i]);
        cr_assert_not_null(k, "%s", names[i]);
        cr_assert_eq(ac_kernel_find(names[i]), k, "%s is registered", names[i]);
        const ac_caps *c = &k->caps;
        cr_assert_eq(c->dtypes, (1u << AC_F16) | (1u << AC_BF16), "%s", names[i]);
        cr_assert(c->n_head_dims == 2 && c->head_dims[0] == 64 && c->head_dims[1] == 128, "%s", names[i]);
        cr_assert_eq(c->masks, (unsigned)AC_MASKCAP_ALL, "%s", names[i]);
        cr_assert_eq(c->layouts, (1u << AC_LAYOUT_BHSD) | (1u << AC_LAYOUT_BSHD), "%s", names[i]);
        cr_assert_eq(c->variants, (unsigned)(AC_VAR_PAGED | AC_VAR_SPLIT), "%s", names[i]);
        cr_assert(c->gqa && c->varlen && !c->backward && c->max_seqlen == 0, "%s", names[i]);
        cr_assert_eq(i == 0, strstr(k->name, "mutant") == NULL);
    }
}

/* cuda-decode-mla claims MLA decode (decode_mla.cu): f16/bf16, d 576 with the
 * one listed d_v 512 (d_v = d, 576, needs no claim), V read from K (v_from_k:
 * given only v=k problems), paged, split, every mask kind, forward only; its
 * two mutants claim the same. */
Test(cuda_kernels, decode_mla_and_its_mutants_claim_mla_decode)
{
    const char *names[] = {"cuda-decode-mla", "cuda-decode-mla-mutant-rope-first",
                           "cuda-decode-mla-mutant-rope-dropped"};
    for (int i = 0; i < 3; i++) {
        const ac_kernel *k = ac_kernel_find(names[i]);
        cr_assert_not_null(k, "%s", names[i]);
        const ac_caps *c = &k->caps;
        cr_assert_eq(c->dtypes, (1u << AC_F16) | (1u << AC_BF16), "%s", names[i]);
        cr_assert(c->n_head_dims == 1 && c->head_dims[0] == 576 && c->max_head_dim == 576, "%s", names[i]);
        cr_assert(c->n_dv_pairs == 1 && c->dv_pairs[0][0] == 576 && c->dv_pairs[0][1] == 512, "%s", names[i]);
        cr_assert_eq(c->variants, (unsigned)(AC_VAR_PAGED | AC_VAR_SPLIT | AC_VAR_DV), "%s", names[i]);
        cr_assert(c->v_from_k && c->gqa && c->varlen && !c->backward && !k->backward, "%s", names[i]);
        cr_assert_eq(c->masks, (unsigned)AC_MASKCAP_ALL, "%s", names[i]);
    }
}

/* A paged bf16 decode problem: 2 sequences of 40 and 0 keys in pages of 16. */
static ac_problem decode_problem(int *lens, int *table)
{
    ac_problem p = ac_problem_dense(2, 8, 2, 1, 40, 128);
    lens[0] = 40, lens[1] = 0;
    for (int x = 0; x < 6; x++)
        table[x] = 5 - x;
    p.seqlens_k = lens;
    p.page_size = 16, p.num_pages = 6, p.pages_per_seq = 3, p.block_table = table;
    return p;
}

/* What cuda-decode refuses is refused before any device call (AC_ERR_INPUT
 * naming it, in a CUDA build with or without a GPU); a problem it takes fails
 * without a device as an environment error (the device staging, or "built
 * without CUDA"), never a crash. */
Test(cuda_kernels, decode_refuses_or_fails_as_env_without_a_device)
{
    ac_err why = {{0}};
    if (ac_cuda_present(&why))
        cr_skip_test("a CUDA device is present: attncheck-test-cuda runs cuda-decode");
    const ac_kernel *k = ac_kernel_find("cuda-decode");
    int lens[2], table[6];
    ac_problem p = decode_problem(lens, table);
    ac_err err = {{0}};
    cr_assert_eq(ac_problem_validate(&p, 0, &err), AC_OK, "%s", err.msg);
    ac_fwd_args a = {0};
    cr_assert_eq(k->forward(k, &p, AC_BF16, &a, &err), AC_ERR_ENV, "%s", err.msg);
    ac_problem d96 = p;
    d96.head_dim = 96;
    err.msg[0] = '\0';
    int st = k->forward(k, &d96, AC_F16, &a, &err);
    int st32 = k->forward(k, &p, AC_F32, &a, &why);
    if (ATTNCHECK_HAVE_CUDA) {
        cr_assert_eq(st, AC_ERR_INPUT);
        cr_assert(strstr(err.msg, "head dim 96") != NULL, "message: %s", err.msg);
        cr_assert_eq(st32, AC_ERR_INPUT);
        cr_assert(strstr(why.msg, "f16 or bf16") != NULL, "message: %s", why.msg);
    } else {
        cr_assert(st == AC_ERR_ENV && st32 == AC_ERR_ENV);
        cr_assert(strstr(err.msg, "built without CUDA") != NULL, "message: %s", err.msg);
    }
}

/* cuda-decode-mla refuses, before any device call, a problem whose V is its
 * own (it reads V from K), a head dim other than 576 and a variant it does not
 * implement (a softcap), naming itself; an MLA problem it takes fails without
 * a device as an environment error. */
Test(cuda_kernels, decode_mla_refuses_what_it_cannot_read)
{
    ac_err why = {{0}};
    if (ac_cuda_present(&why))
        cr_skip_test("a CUDA device is present: attncheck-test-cuda runs cuda-decode-mla");
    const ac_kernel *k = ac_kernel_find("cuda-decode-mla");
    int lens[2], table[6];
    ac_problem p = decode_problem(lens, table);
    p.heads_q = 16, p.heads_kv = 1, p.head_dim = 576, p.head_dim_v = 512;
    ac_err err = {{0}};
    cr_assert_eq(ac_problem_validate(&p, 0, &err), AC_OK, "%s", err.msg);
    ac_fwd_args a = {0};
    const int own_v = k->forward(k, &p, AC_BF16, &a, &err);
    ac_problem d128 = decode_problem(lens, table);
    d128.v_from_k = true;
    ac_err err128 = {{0}};
    const int st128 = k->forward(k, &d128, AC_BF16, &a, &err128);
    p.v_from_k = true;
    ac_err env = {{0}};
    cr_assert_eq(k->forward(k, &p, AC_BF16, &a, &env), AC_ERR_ENV, "%s", env.msg);
    ac_problem capped = p;
    capped.softcap = 30.0;
    ac_err errcap = {{0}};
    const int stcap = k->forward(k, &capped, AC_BF16, &a, &errcap);
    if (ATTNCHECK_HAVE_CUDA) {
        cr_assert_eq(stcap, AC_ERR_INPUT);
        cr_assert(strstr(errcap.msg, "cuda-decode-mla: variants") != NULL, "message: %s", errcap.msg);
        cr_assert_eq(own_v, AC_ERR_INPUT);
        cr_assert(strstr(err.msg, "v=k") != NULL, "message: %s", err.msg);
        cr_assert_eq(st128, AC_ERR_INPUT);
        cr_assert(strstr(err128.msg, "d 128 with d_v 128") != NULL, "message: %s", err128.msg);
    } else {
        cr_assert(own_v == AC_ERR_ENV && st128 == AC_ERR_ENV && stcap == AC_ERR_ENV);
        cr_assert(strstr(err.msg, "built without CUDA") != NULL, "message: %s", err.msg);
    }
}

#if ATTNCHECK_HAVE_CUDA
/* The split count (decode.cu's acd_decode_splits, host code): a hint is
 * taken as given up to 256 and the workspace bound; auto fills the device's
 * CTA slots for one long sequence, takes one split when the grid's waves are
 * already 80% full, splits a grid whose last wave is mostly idle, and never
 * splits a short cache. */
Test(cuda_kernels, decode_split_count_follows_hint_and_shape)
{
    int lens[2], table[6];
    ac_problem p = decode_problem(lens, table);
    const int slots = 264; /* the H100's 132 SMs x 2 CTAs */
    p.num_splits = 3;
    cr_assert_eq(acd_decode_splits(&p, 1, slots), 3);
    p.num_splits = 1000;
    cr_assert_eq(acd_decode_splits(&p, 1, slots), 256, "a hint above 256 is clamped");
    p.num_splits = 0;
    cr_assert_eq(acd_decode_splits(&p, 1, slots), 1, "40 keys are never split");
    ac_problem one = ac_problem_dense(1, 32, 4, 1, 16384, 128); /* B = 1: 4 CTAs without splits */
    int s = acd_decode_splits(&one, 1, slots);
    cr_assert(s >= 32 && 4 * s <= slots && s <= 16384 / 128, "B = 1, 16k keys: %d splits", s);
    ac_problem many = ac_problem_dense(128, 32, 4, 1, 16384, 128); /* 512 CTAs: 1.94 waves, 97% full */
    cr_assert_eq(acd_decode_splits(&many, 1, slots), 1);
    /* 3 CTAs an SM (396 slots): 1.29 waves, the last 29% full; 3 splits make 3.88 waves */
    cr_assert_eq(acd_decode_splits(&many, 1, 396), 3);
    ac_problem near = ac_problem_dense(55, 32, 4, 1, 16384, 128); /* 220 CTAs: 83% of one wave */
    cr_assert_eq(acd_decode_splits(&near, 1, slots), 1);
    ac_problem wide = ac_problem_dense(64, 64, 8, 512, 4096, 128); /* 2M rows: one split's partials are 1 GiB */
    wide.num_splits = 8;
    cr_assert_eq(acd_decode_splits(&wide, 256, slots), 1, "the workspace bound wins over the hint");
    /* MLA: 122880 rows of d_v = 512 partials (514 floats with m_s, l_s: 253 MB a split) fit 4 splits in 1 GiB,
     * where d = 576's 578 floats would fit 3 */
    ac_problem mla = ac_problem_dense(60, 128, 1, 16, 4096, 576);
    mla.head_dim_v = 512;
    mla.num_splits = 8;
    cr_assert_eq(acd_decode_splits(&mla, 128, slots), 4, "the workspace counts d_v columns");
}

/* Auto never spends a second wave of CTAs on short splits: the wave rule alone
 * gave B = 40 at 1k keys 8 splits over 5 waves (70% slower than one split on
 * the H200).  More waves are taken where the splits are long, and one wave's
 * worth of splits is taken whatever their length. */
Test(cuda_kernels, decode_split_count_no_second_wave_of_short_splits)
{
    const int slots = 264;
    static const struct {
        int batch, keys, splits;
        const char *why;
    } cases[] = {
        {40, 1024, 1, "160 CTAs; 8 splits of 128 keys were 5 waves"},
        {40, 16384, 3, "3 splits of 5504 keys: 480 CTAs, 1.8 waves"},
        {40, 65536, 8, "8 splits of 8192 keys: 1280 CTAs, 4.8 waves"},
        {24, 4096, 2, "one wave of 192 CTAs, not 8 splits of 512 keys"},
        {96, 4096, 1, "384 CTAs; 2 splits of 2048 keys would be 2.9 waves"},
        {96, 16384, 2, "2 splits of 8192 keys: 768 CTAs, 2.9 waves"},
        {12, 4096, 5, "one wave of 240 CTAs, not 11 splits of 384 keys"},
        {8, 16384, 8, "one wave: unchanged"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ac_problem p = ac_problem_dense(cases[i].batch, 32, 4, 1, cases[i].keys, 128);
        const int s = acd_decode_splits(&p, 1, slots);
        cr_assert_eq(s, cases[i].splits, "B = %d, %d keys: %d splits, not %d (%s)", cases[i].batch, cases[i].keys, s,
                     cases[i].splits, cases[i].why);
    }
}

/* The merge in clusters: 2-8 splits (the portable cluster size), and only where
 * every CTA of the grid is resident at once as clusters of S (one wave);
 * otherwise the combine kernel. */
Test(cuda_kernels, decode_cluster_merge_only_for_one_wave_of_2_to_8_splits)
{
    cr_assert(acd_decode_cluster_fits(8, 256, 32), "B = 8, 16k: 32 clusters of 8, 32 resident");
    cr_assert(!acd_decode_cluster_fits(8, 256, 31), "one cluster would wait for a second wave");
    cr_assert(acd_decode_cluster_fits(2, 2, 132));
    cr_assert(!acd_decode_cluster_fits(1, 64, 264), "one split: nothing to merge");
    cr_assert(!acd_decode_cluster_fits(9, 9, 100), "nine splits exceed the portable cluster");
    cr_assert(!acd_decode_cluster_fits(4, 0, 66), "an empty grid");
    cr_assert(!acd_decode_cluster_fits(4, 64, 0), "no cluster fits: pre-Hopper, or JIT-compiled code");
    cr_assert(acd_decode_cluster_fits(4, 4LL * 66, 66) && !acd_decode_cluster_fits(4, 4LL * 66 + 4, 66));
}

/* The splits cut a sequence's keys into consecutive ranges from key 0, each of
 * the keys per split that the batch's longest sequence gives (whole 64-key
 * units, the last non-empty range shorter), empty ones only at the end,
 * covering every key once; a sequence longer than the batch's longest (not a
 * plan's) ends in the last split.  The off-by-one mutant's ranges overlap their
 * successor by exactly one key. */
static void check_split_ranges(int n, int longest, int S)
{
    const long long units = ((long long)longest + 63) / 64;
    const long long keys = (units + S - 1) / S * 64; /* every range but the last holds this many, or fewer at n */
    int next = 0, empty_seen = 0;
    for (int s = 0; s < S; s++) {
        int k0, k1, m0, m1;
        acd_decode_split_keys(n, longest, S, s, ACD_MUT_NONE, &k0, &k1);
        cr_assert_eq(k0, next, "n=%d longest=%d S=%d split %d starts at %d, not %d", n, longest, S, s, k0, next);
        cr_assert(k1 - k0 == keys || k1 == n, "n=%d longest=%d S=%d split %d: [%d, %d)", n, longest, S, s, k0, k1);
        if (k1 == k0)
            empty_seen = 1;
        else
            cr_assert(!empty_seen, "n=%d longest=%d S=%d: a non-empty split %d after an empty one", n, longest, S, s);
        next = k1;
        acd_decode_split_keys(n, longest, S, s, ACD_MUT_DEC_SPLIT_OFF_BY_ONE, &m0, &m1);
        cr_assert_eq(m0, k0);
        cr_assert_eq(m1, s < S - 1 && k1 < n ? k1 + 1 : k1, "n=%d S=%d split %d: mutant end %d", n, S, s, m1);
    }
    cr_assert_eq(next, n, "n=%d longest=%d S=%d: the splits end at %d", n, longest, S, next);
}

Test(cuda_kernels, decode_splits_cover_every_key_once)
{
    const int lengths[] = {0, 1, 63, 64, 65, 1000, 16461, 2147483647}, counts[] = {1, 2, 3, 7, 64, 256};
    for (size_t a = 0; a < sizeof lengths / sizeof lengths[0]; a++)
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
            const int n = lengths[a], S = counts[c];
            check_split_ranges(n, n, S); /* the longest sequence */
            for (size_t b = 0; b <= a; b++)
                check_split_ranges(lengths[b], n, S); /* shorter ones beside it */
            if (a > 0)
                check_split_ranges(n, lengths[a - 1], S); /* longer than the plan's longest: the last split */
        }
}

/* The longest sequence fills ceil(units / S) units a split: 16 384 keys over 8 splits give 2048 each, 16 461
 * (258 units) over 8 give 33 units (2112 keys) to the first seven and the last 1677 keys to the last; a
 * sequence of 3000 beside it fills one split and 888 keys of the next, the rest empty. */
Test(cuda_kernels, decode_split_ranges_by_hand)
{
    int k0, k1;
    acd_decode_split_keys(16384, 16384, 8, 3, ACD_MUT_NONE, &k0, &k1);
    cr_assert(k0 == 6144 && k1 == 8192, "[%d, %d)", k0, k1);
    acd_decode_split_keys(16461, 16461, 8, 7, ACD_MUT_NONE, &k0, &k1);
    cr_assert(k0 == 7 * 2112 && k1 == 16461, "[%d, %d)", k0, k1);
    acd_decode_split_keys(3000, 16461, 8, 1, ACD_MUT_NONE, &k0, &k1);
    cr_assert(k0 == 2112 && k1 == 3000, "[%d, %d)", k0, k1);
    acd_decode_split_keys(3000, 16461, 8, 2, ACD_MUT_NONE, &k0, &k1);
    cr_assert(k0 == 3000 && k1 == 3000, "[%d, %d)", k0, k1);
}

/* Whether one of the process's mappings names `lib` (/proc/self/maps). */
static bool mapped(const char *lib)
{
    FILE *f = fopen("/proc/self/maps", "r");
    cr_assert(f != NULL);
    char line[4096];
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, lib) != NULL;
    fclose(f);
    return found;
}

/* cuBLAS is opened by its first call (ref/cuda/cublas_lazy.cu), not at start: the
 * process has no libcublas mapped until a cuBLAS function runs, then cuBLAS's own
 * status strings come back (without a GPU: no handle is made). */
Test(cuda_kernels, cublas_is_opened_by_its_first_call)
{
    cr_assert(!mapped("libcublas"), "libcublas mapped before any cuBLAS call");
    const char *s = cublasGetStatusString(CUBLAS_STATUS_NOT_SUPPORTED);
    cr_assert(s != NULL);
    cr_assert(mapped("libcublas.so"), "no libcublas after a call: %s", s);
    cr_assert(strstr(s, "not loaded") == NULL && strstr(s, "has no") == NULL, "cuBLAS's string: %s", s);
    cr_assert(strstr(s, "NOT_SUPPORTED") != NULL || strstr(s, "not supported") != NULL, "%s", s);
}
#endif
