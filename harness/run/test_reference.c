/* harness/run/test_reference.c — the reference tiers (reference_tier.c): the
 * names, what auto chooses (the cpu tier below AC_REF_GPU_MIN_WORK and on a
 * machine without a usable GPU), the generator's cap for the tier in use, the
 * seconds prior; and the host memory a case needs (ac_problem_working_set),
 * measured: a case run in a child process peaks within the estimate.
 * Suite harness_reference. */
#include <criterion/criterion.h>
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness/harness.h"
#include "ref/ref_gpu.h"

Test(harness_reference, tier_names_parse_back_and_a_bad_one_names_the_choices)
{
    for (int t = AC_REF_AUTO; t <= AC_REF_GPU; t++) {
        ac_ref_tier back;
        cr_assert_eq(ac_ref_tier_parse(ac_ref_tier_name((ac_ref_tier)t), &back, NULL), AC_OK);
        cr_assert_eq(back, (ac_ref_tier)t);
    }
    ac_ref_tier x;
    ac_err err = {{0}};
    cr_assert_eq(ac_ref_tier_parse("tpu", &x, &err), AC_ERR_INPUT);
    cr_assert_not_null(strstr(err.msg, "auto, cpu, gpu"), "%s", err.msg);
}

Test(harness_reference, auto_is_the_cpu_tier_below_the_threshold_and_without_a_gpu)
{
    bool gpu = ref_gpu_available(NULL) == AC_OK;
    ac_problem small = ac_problem_dense(1, 1, 1, 64, 64, 64);
    ac_problem big = ac_problem_dense(1, 8, 8, 2048, 2048, 128); /* 2^32 work units, 128x the threshold */
    cr_assert_lt(64.0 * 64 * 64, AC_REF_GPU_MIN_WORK);
    ac_reference_set_tier(AC_REF_AUTO);
    cr_assert_eq(ac_reference_tier_for(&small, AC_BF16, true), AC_REF_CPU, "small: the CPU finishes first");
    cr_assert_eq(ac_reference_tier_for(&big, AC_BF16, true), gpu ? AC_REF_GPU : AC_REF_CPU,
                 "big: the GPU when one is usable (%s here)", gpu ? "one is" : "none is");
    ac_reference_set_tier(AC_REF_CPU);
    cr_assert_eq(ac_reference_tier_for(&big, AC_BF16, true), AC_REF_CPU, "--reference cpu is obeyed");
    ac_reference_set_tier(AC_REF_GPU);
    ac_err why = {{0}};
    cr_assert_eq(ac_reference_tier_check(&why), gpu ? AC_OK : AC_ERR_ENV, "%s", why.msg);
    ac_reference_set_tier(AC_REF_AUTO);
    cr_assert_eq(ac_reference_tier_check(&why), AC_OK, "auto always runs");
}

Test(harness_reference, the_cpu_tier_caps_work_and_memory_within_the_budget)
{
    ac_reference_set_tier(AC_REF_CPU);
    ac_gen_cap cap;
    ac_reference_gen_cap(true, &cap);
    cr_assert_eq(cap.max_work, 0, "the cpu tier keeps the default work cap");
    cr_assert_not_null(cap.fits);
    ac_case c = ac_case_default();
    c.heads_q = c.heads_kv = 4;
    c.seqlen_q = c.seqlen_k = 4096;
    c.head_dim = 128;
    ac_problem p = ac_problem_dense(1, 4, 4, 4096, 4096, 128);
    double need = ac_problem_working_set(&p, 16);
    ac_set_mem_budget((size_t)(need * 1.01));
    cr_assert(cap.fits(&c, cap.ctx), "%.3g bytes fit a budget 1%% above them", need);
    ac_set_mem_budget((size_t)(need * 0.99));
    cr_assert(!cap.fits(&c, cap.ctx), "and not 1%% below");
    ac_set_mem_budget(0);
    cr_assert_eq(ac_mem_budget(), AC_DEFAULT_MEM_BUDGET);
    ac_reference_set_tier(AC_REF_AUTO);
}

/* A paged case's pages sit beside its contiguous twin: the generator's memory
 * test counts them (it once did not, and a decode campaign drew cases the
 * reference then refused as over the budget). */
Test(harness_reference, the_memory_cap_counts_a_paged_cache)
{
    ac_reference_set_tier(AC_REF_CPU);
    ac_gen_cap cap;
    ac_reference_gen_cap(false, &cap);
    ac_case c = ac_case_default();
    c.batch = 2, c.heads_q = 8, c.heads_kv = 2, c.seqlen_q = 1, c.seqlen_k = 65536, c.head_dim = 128;
    c.kv_page_size = 16;
    ac_problem twin = ac_problem_dense(2, 8, 2, 1, 65536, 128), paged = twin;
    paged.page_size = 16;
    paged.num_pages = 2 * 4096 + 1 + 2 * 4096 / 4; /* inputs_paged.c's most: every page used, a quarter spare */
    double contiguous = ac_problem_working_set(&twin, 16), most = ac_problem_working_set(&paged, 16);
    cr_assert_gt(most, 1.2 * contiguous, "the pages are a real share: %.3g vs %.3g bytes", most, contiguous);
    ac_set_mem_budget((size_t)(contiguous * 1.01));
    cr_assert(!cap.fits(&c, cap.ctx), "the contiguous twin's need is not enough");
    ac_set_mem_budget((size_t)(most * 1.01));
    cr_assert(cap.fits(&c, cap.ctx), "the pages' upper bound is");
    ac_set_mem_budget(0);
    ac_reference_set_tier(AC_REF_AUTO);
}

Test(harness_reference, the_seconds_prior_grows_with_the_work_and_halves_with_causal)
{
    ac_reference_set_tier(AC_REF_CPU);
    ac_case c = ac_case_default();
    c.seqlen_q = c.seqlen_k = 1024;
    c.head_dim = 64;
    double full = ac_reference_seconds_prior(&c, false, 0), bwd = ac_reference_seconds_prior(&c, true, 0);
    cr_assert_float_eq(bwd / full, 3.0, 1e-12, "the backward triples it");
    c.seqlen_k = 2048;
    cr_assert_float_eq(ac_reference_seconds_prior(&c, false, 0) / full, 2.0, 1e-12, "linear in nk");
    ac_case_set_mask(&c, AC_MASK_CAUSAL_TL);
    double causal = ac_reference_seconds_prior(&c, false, 0) / full; /* rows see i + 1 of 2048 keys */
    cr_assert_float_eq(causal, 1024.0 * 1025 / 2 / (1024.0 * 1024), 1e-12, "only visible pairs count");
    double cert = ac_reference_seconds_prior(&c, false, 2) - ac_reference_seconds_prior(&c, false, 0);
    cr_assert_float_eq(cert, 2 * 2048 * 0.6e-6, 1e-12, "two certified rows of 2048 keys");
    double plain = ac_reference_seconds_prior(&c, true, 0);
    c.bias = AC_BIAS_NORMAL, c.dropout = 0.5;
    cr_assert_float_eq(ac_reference_seconds_prior(&c, true, 0) / plain, 1.0 + 3.2 + 1.3, 1e-12,
                       "a bias and dropout add what they cost");
    ac_reference_set_tier(AC_REF_AUTO);
}

/* ---- the working set, measured ---------------------------------------------------------- */

/* Peak resident kilobytes of a child that runs line on ref-fp64, less what it
 * had when it started. */
static long child_peak_kb(const char *line, long *baseline_kb)
{
    int fd[2];
    cr_assert_eq(pipe(fd), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        /* meson test sets MALLOC_PERTURB_, which fills every allocation and so makes
         * buffers resident that attncheck allocates but never touches whole */
        mallopt(M_PERTURB, 0);
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        long start = ru.ru_maxrss;
        ac_case c;
        ac_budgets b;
        ac_result r;
        ac_run_opts o = {.backward = true, .cert_rows = 2};
        int ok = ac_case_parse(line, &c, NULL) == AC_OK &&
            ac_budgets_load(ac_budgets_default_path(), &b, NULL) == AC_OK &&
            ac_run_case(&ac_kernel_ref_fp64, &c, &b, &o, &r, NULL) == AC_OK;
        if (write(fd[1], &start, sizeof start) != sizeof start)
            ok = 0;
        _exit(ok ? 0 : 1);
    }
    close(fd[1]);
    int st;
    struct rusage ru;
    cr_assert_eq(wait4(pid, &st, 0, &ru), pid);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the case ran");
    cr_assert_eq(read(fd[0], baseline_kb, sizeof *baseline_kb), (ssize_t)sizeof *baseline_kb);
    close(fd[0]);
    return ru.ru_maxrss - *baseline_kb;
}

/* AddressSanitizer's redzones and quarantine inflate every allocation's resident
 * size: the estimate is of attncheck's own memory, not of an instrumented build. */
#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

Test(harness_reference, the_working_set_bounds_a_measured_peak)
{
#ifdef UNDER_ASAN
    cr_skip_test("built with AddressSanitizer, which inflates the peak resident size; the plain build checks it");
#endif
    /* the shape the old estimate missed by 3x: one query row, many keys (certification dominates) */
    const char *line = "v1 seed=1 b=1 hq=1 hkv=1 nq=1 nk=100000 d=1 dtype=f32 mask=none layout=bhsd "
                       "dist=normal(0,1) scale=auto";
    long base_kb;
    long peak_kb = child_peak_kb(line, &base_kb);
    ac_problem p = ac_problem_dense(1, 1, 1, 1, 100000, 1);
    double est_kb = ac_problem_working_set(&p, 0) / 1024;
    cr_assert_geq(est_kb, (double)peak_kb, "estimated %.0f kB, the case peaked %ld kB above its start", est_kb,
                  peak_kb);
    cr_assert_leq(est_kb, 2.0 * (double)peak_kb, "and not far above: %.0f kB for %ld kB", est_kb, peak_kb);
}
