/* kernels/cuda/test_cuda_dispatch.c — attncheck-test-cuda --dispatch: which
 * kernel family the dispatchers launch (acd.h's acd_last_path) for small real
 * problems run through the kernels' entry points, as the other cases run them.
 * The wgmma kernels and their fallbacks both pass the correctness cases, so
 * without this a change that sent, say, the 192/128 backward or fp8 at
 * d = 256 from wgmma to mma.sync or the CUDA cores would go unseen.  On
 * compute capability 9.0 (the sm_90a wgmma code's only target) it expects the
 * Hopper families, with ACD_NO_WGMMA=1 the fallbacks; elsewhere it skips. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_cuda_support.h"

typedef struct {
    acd_path_kind kind; /* the dispatcher looked at; a backward check runs the forward first */
    const char *kernel;
    ac_dtype t;
    int d, dv; /* d_qk, d_v */
    ac_layout layout;
    const char *hopper, *fallback; /* the family expected with wgmma on, and with ACD_NO_WGMMA=1 */
} dispatch_check;

/* What flash_fwd.cu, flash_bwd.cu and flash_fp8.cu promise (README's cuda-flash and
 * cuda-flash-fp8 rows).  cuda-flash-fp8 does not claim THD (family.h); its check has
 * one sequence, where THD's memory is BSHD's, and asserts only that
 * acd_fp8_wg_usable sends THD to the CUDA cores. */
static const dispatch_check checks[] = {
    {ACD_DISPATCH_FWD, "cuda-flash", AC_BF16, 64, 64, AC_LAYOUT_BHSD, ACD_PATH_WGMMA, ACD_PATH_MMA_SYNC},
    {ACD_DISPATCH_FWD, "cuda-flash", AC_BF16, 128, 128, AC_LAYOUT_BSHD, ACD_PATH_WGMMA, ACD_PATH_MMA_SYNC},
    {ACD_DISPATCH_FWD, "cuda-flash", AC_BF16, 192, 128, AC_LAYOUT_BHSD, ACD_PATH_WGMMA, ACD_PATH_MMA_SYNC},
    {ACD_DISPATCH_FWD, "cuda-flash", AC_BF16, 256, 128, AC_LAYOUT_BHSD, ACD_PATH_WGMMA, ACD_PATH_MMA_SYNC},
    {ACD_DISPATCH_FWD, "cuda-flash", AC_BF16, 128, 96, AC_LAYOUT_BHSD, ACD_PATH_MMA_SYNC, ACD_PATH_MMA_SYNC},
    {ACD_DISPATCH_FWD, "cuda-flash", AC_BF16, 256, 256, AC_LAYOUT_BHSD, ACD_PATH_CUDA_CORES, ACD_PATH_CUDA_CORES},
    {ACD_DISPATCH_FWD, "cuda-flash", AC_F32, 64, 64, AC_LAYOUT_BHSD, ACD_PATH_CUDA_CORES, ACD_PATH_CUDA_CORES},
    /* racecheck does not see wgmma's shared-memory reads: the race mutant must stay on mma.sync */
    {ACD_DISPATCH_FWD, "cuda-flash-mutant-race", AC_F16, 128, 128, AC_LAYOUT_BHSD, ACD_PATH_MMA_SYNC,
     ACD_PATH_MMA_SYNC},
    {ACD_DISPATCH_BWD, "cuda-flash", AC_BF16, 64, 64, AC_LAYOUT_BHSD, ACD_PATH_WGMMA, ACD_PATH_MMA_SYNC},
    {ACD_DISPATCH_BWD, "cuda-flash", AC_BF16, 128, 128, AC_LAYOUT_BSHD, ACD_PATH_WGMMA, ACD_PATH_MMA_SYNC},
    {ACD_DISPATCH_BWD, "cuda-flash", AC_BF16, 192, 128, AC_LAYOUT_BHSD, ACD_PATH_WGMMA, ACD_PATH_MMA_SYNC},
    {ACD_DISPATCH_BWD, "cuda-flash", AC_BF16, 128, 96, AC_LAYOUT_BHSD, ACD_PATH_WGMMA, ACD_PATH_MMA_SYNC},
    /* 256/128's dK, dV accumulators do not fit the wgmma backward's registers */
    {ACD_DISPATCH_BWD, "cuda-flash", AC_BF16, 256, 128, AC_LAYOUT_BHSD, ACD_PATH_MMA_SYNC, ACD_PATH_MMA_SYNC},
    {ACD_DISPATCH_BWD, "cuda-flash", AC_F32, 64, 64, AC_LAYOUT_BHSD, ACD_PATH_CUDA_CORES, ACD_PATH_CUDA_CORES},
    {ACD_DISPATCH_FP8, "cuda-flash-fp8", AC_E4M3, 64, 64, AC_LAYOUT_BHSD, ACD_PATH_FP8_WGMMA, ACD_PATH_FP8_CUDA_CORES},
    {ACD_DISPATCH_FP8, "cuda-flash-fp8", AC_E4M3, 128, 128, AC_LAYOUT_BHSD, ACD_PATH_FP8_WGMMA,
     ACD_PATH_FP8_CUDA_CORES},
    {ACD_DISPATCH_FP8, "cuda-flash-fp8", AC_E4M3, 256, 256, AC_LAYOUT_BHSD, ACD_PATH_FP8_WGMMA,
     ACD_PATH_FP8_CUDA_CORES},
    {ACD_DISPATCH_FP8, "cuda-flash-fp8", AC_E4M3, 128, 128, AC_LAYOUT_THD, ACD_PATH_FP8_CUDA_CORES,
     ACD_PATH_FP8_CUDA_CORES},
};

static const char *const kind_name[ACD_DISPATCH_KINDS] = {"forward", "backward", "fp8-fwd"};

/* A device copy of n random values in t: normal(0, 1), fp8 codes of normal(0, 16). */
static void *random_device(ac_dtype t, size_t n)
{
    double *x = malloc(n * sizeof *x);
    void *bits = malloc(n * ac_dtype_size(t));
    for (size_t e = 0; e < n; e++)
        x[e] = (ac_dtype_is_fp8(t) ? 16.0 : 1.0) * acdt_nrand();
    ac_store(t, x, n, bits);
    void *dev = acdt_to_device(bits, n * ac_dtype_size(t));
    free(x);
    free(bits);
    return dev;
}

/* (1, 2, 1, 128, 192, d) with GQA; THD as one packed sequence; fp8: per-tensor factors, O in bf16. */
static ac_problem check_problem(const dispatch_check *dc, const ac_kernel *k, int *cu_q, int *cu_k, float *descale)
{
    ac_problem p = ac_problem_dense(1, 2, 1, 128, 192, dc->d);
    p.head_dim_v = dc->dv == dc->d ? 0 : dc->dv;
    p.layout = dc->layout;
    if (dc->layout == AC_LAYOUT_THD) {
        cu_q[0] = cu_k[0] = 0;
        cu_q[1] = p.seqlen_q;
        cu_k[1] = p.seqlen_k;
        p.cu_seqlens_q = cu_q;
        p.cu_seqlens_k = cu_k;
    }
    if (ac_dtype_is_fp8(dc->t)) {
        p.fp8_out = AC_BF16;
        p.fp8_p = AC_E4M3;
        p.fp8_acc_bits = k->caps.fp8_acc_bits;
        p.descale_rows = AC_DESCALE_TENSOR;
        descale[0] = descale[1] = descale[2] = 1.0f / 16;
        p.descale_q = &descale[0];
        p.descale_k = &descale[1];
        p.descale_v = &descale[2];
    }
    return p;
}

/* The check's problem through its kernel's forward (and backward), the record of its
 * kind cleared first; AC_OK or the failing call's status with err filled. */
static int run_check(const dispatch_check *dc, ac_err *err)
{
    const ac_kernel *k = acdt_find_kernel(dc->kernel);
    if (!k)
        return ac_fail(err, AC_ERR_INPUT, "no kernel %s", dc->kernel);
    int cu_q[2], cu_k[2];
    float descale[3];
    ac_problem p = check_problem(dc, k, cu_q, cu_k, descale);
    int st = ac_problem_validate(&p, 0, err);
    if (st != AC_OK)
        return st;
    const ac_dtype out = ac_dtype_is_fp8(dc->t) ? p.fp8_out : dc->t;
    const size_t es = ac_dtype_size(dc->t), os = ac_dtype_size(out), no = ac_o_elems(&p);
    const size_t nq = ac_q_elems(&p), nk = ac_kv_elems(&p), nv = ac_v_elems(&p), nl = ac_lse_elems(&p);
    void *q = random_device(dc->t, nq), *kk = random_device(dc->t, nk), *v = random_device(dc->t, nv);
    void *o = acdt_to_device(NULL, no * os), *lse = acdt_to_device(NULL, nl * sizeof(float));
    ac_fwd_args fa = {.q = q, .k = kk, .v = v, .o = o, .lse = lse};
    acd_note_path(dc->kind, NULL);
    st = k->forward(k, &p, dc->t, &fa, err);
    if (st == AC_OK && dc->kind == ACD_DISPATCH_BWD) {
        void *d_o = random_device(dc->t, no), *dq = acdt_to_device(NULL, nq * es);
        void *dk = acdt_to_device(NULL, nk * es), *dv = acdt_to_device(NULL, nv * es);
        ac_bwd_args ba = {.q = q, .k = kk, .v = v, .o = o, .d_o = d_o, .lse = lse, .dq = dq, .dk = dk, .dv = dv};
        st = k->backward ? k->backward(k, &p, dc->t, &ba, err)
                         : ac_fail(err, AC_ERR_INPUT, "%s has no backward", dc->kernel);
        ac_dev_free(d_o), ac_dev_free(dq), ac_dev_free(dk), ac_dev_free(dv);
    }
    ac_dev_free(q), ac_dev_free(kk), ac_dev_free(v), ac_dev_free(o), ac_dev_free(lse);
    return st;
}

/* Whether wgmma should run here: 1 (Hopper, wgmma on), 0 (Hopper, ACD_NO_WGMMA
 * set as flash_fwd_sm90.cu's wgmma_device reads it: non-empty, not "0..."),
 * -1 (another device) or -2 (the device not read); why says which. */
static int wgmma_expected(char *why, size_t why_len)
{
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
        snprintf(why, why_len, "the device's compute capability could not be read");
        return -2;
    }
    if (major != 9 || minor != 0) {
        snprintf(why, why_len, "device %d has compute capability %d.%d; the wgmma kernels are sm_90a code (9.0)", dev,
                 major, minor);
        return -1;
    }
    const char *off = getenv("ACD_NO_WGMMA");
    return !off || !*off || *off == '0';
}

/* Returns the number of failures: a check whose dispatcher launched another family
 * than expected (or none), or whose problem failed to run. */
int acdt_dispatch_tests(void)
{
    char why[160];
    const int wgmma = wgmma_expected(why, sizeof why);
    if (wgmma < 0) {
        printf("dispatch: %s: %s\n", wgmma == -1 ? "skipped" : "FAIL", why);
        return wgmma == -1 ? 0 : 1;
    }
    printf("dispatch: the kernel family each dispatcher launched (compute capability 9.0, %s)\n",
           wgmma ? "wgmma on" : "ACD_NO_WGMMA set");
    int failures = 0;
    for (size_t x = 0; x < sizeof checks / sizeof checks[0]; x++) {
        const dispatch_check *dc = &checks[x];
        const char *want = wgmma ? dc->hopper : dc->fallback;
        ac_err err = {0};
        const int st = run_check(dc, &err);
        const char *got = acd_last_path(dc->kind);
        const bool ok = st == AC_OK && strcmp(got, want) == 0;
        failures += !ok;
        char dims[32];
        snprintf(dims, sizeof dims, "d=%d/%d", dc->d, dc->dv);
        printf("dispatch %-8s %-30s %-5s %-10s %-4s expected %-14s got %-14s %s\n", kind_name[dc->kind], dc->kernel,
               ac_dtype_name(dc->t), dims, ac_layout_name(dc->layout), want, got, ok ? "ok" : "FAIL");
        if (st != AC_OK)
            printf("    status %d: %s\n", st, err.msg);
        fflush(stdout);
    }
    return failures;
}
