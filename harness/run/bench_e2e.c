/* harness/run/bench_e2e.c — attncheck-bench-e2e: what one case costs end to
 * end, stage by stage, on issue 12's shapes: b = 1, hkv = hq, d = 128, bf16,
 * causal, forward and backward; hq = 16 at N = 8192 and 32768, hq = 8 at
 * N = 131072.  The stages are those of `attncheck run` (run.c, reference.c),
 * called the same way and timed one by one:
 *   inputs     ac_inputs_make: Q, K, V, dO drawn and widened
 *   kernel     forward and backward, with the device copies of a CUDA kernel
 *   reference  the fp64 forward and backward (gpu tier: with its copies, the
 *              tier's choice and what the call spends outside its stages: a
 *              context, allocations; the warm-up ac_reference_prepare started
 *              before the inputs counts where it is waited for, here)
 *   naive      the same-dtype naive baseline
 *   scales     the error scales of every output, LSE's included
 *   certify    MPFR on --cert-rows sampled rows (the CPU, either tier)
 *   spot       the CPU spot check of the GPU reference (gpu tier)
 *   compare    ac_compare of the five outputs and the gate
 * and the total, the verdict, and on the gpu tier the reference's fp64 rate
 * (attncheck-bench-gpuref sets it against cuBLAS DGEMM on the same device).
 *
 *   attncheck-bench-e2e [--kernel NAME] [--reference auto|cpu|gpu] [--n N,N,...]
 *                       [--hq H] [--d D] [--dtype f16|bf16|f32] [--no-backward] [--cert-rows R]
 * Without --n and --hq, the set: hq = 16 at N = 8192 and 32768, hq = 8
 * at N = 131072.  --hq H runs every N at hq = H.  Default kernel: the best
 * available (cuda-flash, else cpu-flash).  Exit 0, 1 when a case fails, 2/3 on
 * errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/harness.h"
#include "ref/ref_gpu.h"

enum { ST_INPUTS, ST_KERNEL, ST_REF, ST_NAIVE, ST_SCALES, ST_CERT, ST_SPOT, ST_COMPARE, ST_COUNT };
static const char *const stage_names[ST_COUNT] = {"inputs", "kernel",  "reference", "naive",
                                                  "scales", "certify", "spot",      "compare"};

typedef struct {
    const ac_kernel *k;
    ac_budgets b;
    int n[16], n_count, hq, d, cert_rows;
    ac_dtype t;
    bool backward;
    bool hq_given; /* --hq: every N at hq; else the set (hq / 2 past N = 32768) */
} bench;

typedef struct {
    double s[ST_COUNT];
    ac_verdict verdict;
    double gpu_fp64_tflops;
    ac_ref_tier tier;
} timing;

/* ---- the kernel, as run.c runs it (outputs poisoned, device copies timed) ---- */

typedef struct {
    void *o, *dq, *dk, *dv;
    float *lse;
} outputs;

static int stage_dev(void **dev, const void *host, size_t bytes, ac_err *err)
{
    int st = ac_dev_alloc(dev, bytes, err);
    return st == AC_OK ? ac_dev_upload(*dev, host, bytes, err) : st;
}

static int kernel_on_device(const ac_kernel *k, const ac_inputs *in, bool bwd, outputs *h, size_t qb, size_t kb,
                            size_t lb, ac_err *err)
{
    void *d[9] = {0}; /* q k v o lse do dq dk dv */
    int st = AC_OK;
    const void *src[9] = {in->q, in->k, in->v, h->o, h->lse, in->d_o, h->dq, h->dk, h->dv};
    size_t bytes[9] = {qb, kb, kb, qb, lb, qb, qb, kb, kb};
    for (int i = 0; i < (bwd ? 9 : 5) && st == AC_OK; i++)
        st = stage_dev(&d[i], src[i], bytes[i], err);
    ac_fwd_args fa = {.q = d[0], .k = d[1], .v = d[2], .o = d[3], .lse = d[4]};
    if (st == AC_OK && (st = k->forward(k, &in->p, in->c.dtype, &fa, err)) == AC_OK && bwd) {
        ac_bwd_args ba = {
            .q = d[0], .k = d[1], .v = d[2], .o = d[3], .d_o = d[5], .lse = d[4], .dq = d[6], .dk = d[7], .dv = d[8]};
        st = k->backward(k, &in->p, in->c.dtype, &ba, err);
    }
    if (st == AC_OK)
        st = ac_dev_sync(err);
    void *dst[9] = {0, 0, 0, h->o, h->lse, 0, h->dq, h->dk, h->dv};
    for (int i = 3; i < (bwd ? 9 : 5) && st == AC_OK; i++)
        if (dst[i])
            st = ac_dev_download(dst[i], d[i], bytes[i], err);
    for (int i = 0; i < 9; i++)
        if (d[i])
            ac_dev_free(d[i]);
    return st;
}

static int run_kernel(const ac_kernel *k, const ac_inputs *in, bool bwd, outputs *h, ac_err *err)
{
    ac_dtype t = ac_inputs_out_dtype(in);
    size_t nq = ac_q_elems(&in->p), nkv = ac_kv_elems(&in->p), nl = ac_lse_elems(&in->p), es = ac_dtype_size(t);
    h->o = malloc(nq * es), h->lse = malloc(nl * sizeof(float));
    h->dq = bwd ? malloc(nq * es) : NULL, h->dk = bwd ? malloc(nkv * es) : NULL, h->dv = bwd ? malloc(nkv * es) : NULL;
    if (!h->o || !h->lse || (bwd && (!h->dq || !h->dk || !h->dv)))
        return ac_fail(err, AC_ERR_ENV, "out of memory for the kernel's outputs");
    ac_poison(t, h->o, nq), ac_poison_f32(h->lse, nl);
    if (bwd)
        ac_poison(t, h->dq, nq), ac_poison(t, h->dk, nkv), ac_poison(t, h->dv, nkv);
    if (k->memory == AC_MEM_CUDA)
        return kernel_on_device(k, in, bwd, h, nq * es, nkv * es, nl * sizeof(float), err);
    ac_fwd_args fa = {.q = in->q, .k = in->k, .v = in->v, .o = h->o, .lse = h->lse};
    int st = k->forward(k, &in->p, in->c.dtype, &fa, err);
    ac_bwd_args ba = {.q = in->q,
                      .k = in->k,
                      .v = in->v,
                      .o = h->o,
                      .d_o = in->d_o,
                      .lse = h->lse,
                      .dq = h->dq,
                      .dk = h->dk,
                      .dv = h->dv};
    return st == AC_OK && bwd ? k->backward(k, &in->p, in->c.dtype, &ba, err) : st;
}

/* ---- the reference, stage by stage ------------------------------------------------ */

static double *zeros(size_t n) { return calloc(n ? n : 1, sizeof(double)); }

static void ref_alloc(const ac_problem *p, bool bwd, ac_reference *r)
{
    size_t nq = ac_q_elems(p), nkv = ac_kv_elems(p), nl = ac_lse_elems(p);
    memset(r, 0, sizeof *r);
    r->has_backward = bwd;
    r->o = zeros(nq), r->lse = zeros(nl), r->e_o = zeros(nq), r->e_lse = zeros(nl);
    r->naive_o = zeros(nq), r->naive_lse = zeros(nl);
    if (bwd) {
        r->dq = zeros(nq), r->dk = zeros(nkv), r->dv = zeros(nkv), r->delta = zeros(nl);
        r->e_dq = zeros(nq), r->e_dk = zeros(nkv), r->e_dv = zeros(nkv);
        r->naive_dq = zeros(nq), r->naive_dk = zeros(nkv), r->naive_dv = zeros(nkv);
    }
}

static int cpu_reference(const ac_inputs *in, bool bwd, ac_reference *r, timing *tm, ac_err *err)
{
    const ac_problem *p = &in->p;
    ac_dtype t = in->c.dtype;
    double t0 = ac_now_seconds();
    int st = ref_forward_fp64(p, in->qd, in->kd, in->vd, r->o, r->lse, err);
    if (st == AC_OK && bwd)
        st = ref_backward_fp64(p, in->qd, in->kd, in->vd, r->o, r->lse, in->d_od, r->dq, r->dk, r->dv, r->delta, err);
    double t1 = ac_now_seconds();
    if (st == AC_OK)
        st = ref_naive_forward(p, t, in->qd, in->kd, in->vd, r->naive_o, r->naive_lse, err);
    if (st == AC_OK && bwd)
        st = ref_naive_backward(p, t, in->qd, in->kd, in->vd, r->naive_o, r->naive_lse, in->d_od, r->naive_dq,
                                r->naive_dk, r->naive_dv, err);
    double t2 = ac_now_seconds();
    if (st == AC_OK)
        st = ref_error_scales(p, t, in->qd, in->kd, in->vd, r->o, r->lse, bwd ? in->d_od : NULL, r->e_o, r->e_dq,
                              r->e_dk, r->e_dv, err);
    if (st == AC_OK)
        st = ref_lse_error_scale(p, in->qd, in->kd, r->lse, r->e_lse, err);
    tm->s[ST_REF] = t1 - t0, tm->s[ST_NAIVE] = t2 - t1, tm->s[ST_SCALES] = ac_now_seconds() - t2;
    return st;
}

/* t_choice: the seconds the tier's choice took (it waits for the warm-up). */
static int gpu_reference(const ac_inputs *in, bool bwd, int cert_rows, double t_choice, ac_reference *r, timing *tm,
                         ac_err *err)
{
    ref_gpu_outputs out = {r->o,    r->lse,  r->dq,   r->dk,      r->dv,        r->delta,    r->e_o,      r->e_lse,
                           r->e_dq, r->e_dk, r->e_dv, r->naive_o, r->naive_lse, r->naive_dq, r->naive_dk, r->naive_dv};
    ref_gpu_opts opts = {.timing = true};
    ref_gpu_stats gs;
    int st = ref_gpu_reference(&in->p, in->c.dtype, in->q, in->k, in->v, bwd ? in->d_o : NULL, &opts, &out, &gs, err);
    const double *x = gs.seconds;
    tm->s[ST_NAIVE] = x[REF_GPU_STAGE_NAIVE_FWD] + x[REF_GPU_STAGE_NAIVE_BWD];
    tm->s[ST_SCALES] = x[REF_GPU_STAGE_SCALES];
    /* the whole call less the naive and the scales: upload, fp64 forward and
     * backward, download, and the costs outside the stages (context, plan, allocations) */
    tm->s[ST_REF] = t_choice + gs.total_seconds - tm->s[ST_NAIVE] - tm->s[ST_SCALES];
    double fp64_s = x[REF_GPU_STAGE_FORWARD] + x[REF_GPU_STAGE_BACKWARD];
    tm->gpu_fp64_tflops = fp64_s > 0 ? gs.flops_attention / fp64_s / 1e12 : 0;
    if (st != AC_OK || cert_rows <= 0)
        return st;
    double t0 = ac_now_seconds();
    ref_gpu_check chk;
    st = ref_gpu_spot_check(&in->p, in->c.dtype, in->qd, in->kd, in->vd, bwd ? in->d_od : NULL, &out, (size_t)cert_rows,
                            (size_t)cert_rows, in->c.seed, &chk, err);
    tm->s[ST_SPOT] = ac_now_seconds() - t0;
    if (st == AC_OK && !chk.agrees)
        fprintf(stderr, "spot check: the GPU reference is %.3g units off at %s\n", chk.worst[chk.worst_output].units,
                ref_gpu_check_name(chk.worst_output));
    return st;
}

/* ---- one case ------------------------------------------------------------------------ */

static void compare(const ac_inputs *in, const outputs *h, const ac_reference *r, bool bwd, const ac_budgets *b,
                    timing *tm)
{
    double t0 = ac_now_seconds();
    ac_metrics m[AC_OUT_COUNT];
    memset(m, 0, sizeof m);
    ac_compare(in, AC_OUT_O, h->o, r->o, r->e_o, r->naive_o, &m[AC_OUT_O]);
    ac_compare(in, AC_OUT_LSE, h->lse, r->lse, r->e_lse, r->naive_lse, &m[AC_OUT_LSE]);
    if (bwd) {
        ac_compare(in, AC_OUT_DQ, h->dq, r->dq, r->e_dq, r->naive_dq, &m[AC_OUT_DQ]);
        ac_compare(in, AC_OUT_DK, h->dk, r->dk, r->e_dk, r->naive_dk, &m[AC_OUT_DK]);
        ac_compare(in, AC_OUT_DV, h->dv, r->dv, r->e_dv, r->naive_dv, &m[AC_OUT_DV]);
    }
    char why[AC_WHY_LEN], kind[AC_KIND_LEN];
    tm->verdict = ac_gate(in, m, b, why, sizeof why, kind, sizeof kind);
    tm->s[ST_COMPARE] = ac_now_seconds() - t0;
    if (tm->verdict != AC_VERDICT_PASS)
        fprintf(stderr, "  %s\n", why);
}

static int one_case(const bench *bn, int n, int hq, timing *tm, ac_err *err)
{
    memset(tm, 0, sizeof *tm);
    ac_case c = ac_case_default();
    c.seed = 12;
    c.heads_q = c.heads_kv = hq;
    c.seqlen_q = c.seqlen_k = n;
    c.head_dim = bn->d;
    c.dtype = bn->t;
    ac_case_set_mask(&c, AC_MASK_CAUSAL_BR);
    bool bwd = bn->backward && bn->k->caps.backward && bn->k->backward;
    ac_inputs in;
    outputs h = {0};
    ac_reference r;
    double t0 = ac_now_seconds();
    ac_reference_prepare(&c, bwd); /* as run.c: the device warms up while the inputs are drawn */
    int st = ac_inputs_make(&c, &in, err);
    double t1 = ac_now_seconds();
    tm->s[ST_INPUTS] = t1 - t0;
    if (st == AC_OK)
        st = run_kernel(bn->k, &in, bwd, &h, err);
    tm->s[ST_KERNEL] = ac_now_seconds() - t1;
    if (st == AC_OK) {
        ref_alloc(&in.p, bwd, &r);
        double t_choice = ac_now_seconds();
        tm->tier = ac_reference_tier_for(&in.p, in.c.dtype, bwd);
        t_choice = ac_now_seconds() - t_choice;
        st = tm->tier == AC_REF_GPU ? gpu_reference(&in, bwd, bn->cert_rows, t_choice, &r, tm, err)
                                    : cpu_reference(&in, bwd, &r, tm, err);
        double t2 = ac_now_seconds();
        if (st == AC_OK && bn->cert_rows > 0)
            st = ref_certify(&in.p, ac_inputs_out_dtype(&in), in.qd, in.kd, in.vd, r.o, r.lse, (size_t)bn->cert_rows,
                             c.seed, AC_DEFAULT_MPFR_PREC, &r.cert, err);
        tm->s[ST_CERT] = ac_now_seconds() - t2;
        if (st == AC_OK)
            compare(&in, &h, &r, bwd, &bn->b, tm);
        ac_reference_free(&r);
    }
    free(h.o), free(h.lse), free(h.dq), free(h.dk), free(h.dv);
    ac_inputs_free(&in);
    return st;
}

/* ---- the command line and the table ------------------------------------------------- */

static int parse_list(const char *s, int *out, int max)
{
    int n = 0;
    for (const char *p = s; *p && n < max;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > AC_GEN_MAX_SEQLEN)
            return -1;
        out[n++] = (int)v;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',')
            return -1;
    }
    return n;
}

static int parse_args(int argc, char **argv, bench *bn, ac_err *err)
{
    const char *kernel = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        ac_ref_tier tier;
        if (!strcmp(a, "--no-backward")) {
            bn->backward = false;
            continue;
        }
        if (!v)
            return ac_fail(err, AC_ERR_INPUT, "%s: unknown, or it needs a value (see the comment atop bench_e2e.c)", a);
        i++;
        if (!strcmp(a, "--kernel"))
            kernel = v;
        else if (!strcmp(a, "--reference") && ac_ref_tier_parse(v, &tier, err) == AC_OK)
            ac_reference_set_tier(tier);
        else if (!strcmp(a, "--n") && (bn->n_count = parse_list(v, bn->n, 16)) > 0)
            continue;
        else if (!strcmp(a, "--hq"))
            bn->hq = atoi(v), bn->hq_given = true;
        else if (!strcmp(a, "--d"))
            bn->d = atoi(v);
        else if (!strcmp(a, "--cert-rows"))
            bn->cert_rows = atoi(v);
        else if (!strcmp(a, "--dtype") && ac_dtype_parse(v, &bn->t) == AC_OK)
            continue;
        else
            return ac_fail(err, AC_ERR_INPUT, "%s %s: not understood", a, v);
    }
    static const char *const best[] = {"cuda-flash", "cpu-flash"};
    for (size_t i = 0; !kernel && i < 2; i++)
        if (ac_kernel_find(best[i]) && ac_kernel_is_available(ac_kernel_find(best[i]), NULL))
            kernel = best[i];
    if (!kernel || !(bn->k = ac_kernel_find(kernel)))
        return ac_fail(err, AC_ERR_INPUT, "--kernel: no kernel named '%s'", kernel ? kernel : "");
    if (!ac_kernel_is_available(bn->k, err))
        return AC_ERR_ENV;
    if (bn->hq < 1 || bn->d < 1 || bn->d > AC_MAX_HEAD_DIM || bn->cert_rows < 0)
        return ac_fail(err, AC_ERR_INPUT, "--hq, --d, --cert-rows out of range");
    return ac_reference_tier_check(err);
}

int main(int argc, char **argv)
{
    static bench bn = {
        .hq = 16, .d = 128, .cert_rows = 2, .t = AC_BF16, .backward = true, .n = {8192, 32768, 131072}, .n_count = 3};
    ac_err err = {{0}};
    int st = parse_args(argc, argv, &bn, &err);
    if (st == AC_OK)
        st = ac_budgets_load(ac_budgets_default_path(), &bn.b, &err);
    if (st != AC_OK) {
        fprintf(stderr, "attncheck-bench-e2e: %s\n", err.msg);
        return st;
    }
    ac_set_mem_budget((size_t)1 << 40); /* a benchmark: what the machine holds, not the fuzzer's budget */
    printf("kernel %s, %s, d=%d, causal-br, %s, %d certified rows; seconds per stage\n", bn.k->name,
           ac_dtype_name(bn.t), bn.d, bn.backward ? "forward+backward" : "forward", bn.cert_rows);
    printf("%7s %3s %4s", "N", "hq", "tier");
    for (int s = 0; s < ST_COUNT; s++)
        printf(" %9s", stage_names[s]);
    printf(" %9s %7s %s\n", "total", "verdict", "gpu-fp64-TFLOP/s");
    int worst = AC_OK;
    for (int i = 0; i < bn.n_count; i++) {
        int n = bn.n[i], hq = !bn.hq_given && n > 32768 ? (bn.hq + 1) / 2 : bn.hq;
        timing tm;
        st = one_case(&bn, n, hq, &tm, &err);
        if (st != AC_OK) {
            printf("%7d %3d  error: %s\n", n, hq, err.msg);
            worst = st > worst ? st : worst;
            continue;
        }
        double total = 0;
        printf("%7d %3d %4s", n, hq, ac_ref_tier_name(tm.tier));
        for (int s = 0; s < ST_COUNT; s++)
            printf(" %9.3f", tm.s[s]), total += tm.s[s];
        printf(" %9.3f %7s", total, tm.verdict == AC_VERDICT_PASS ? "pass" : "FAIL");
        if (tm.tier == AC_REF_GPU)
            printf(" %.2f", tm.gpu_fp64_tflops);
        printf("\n");
        fflush(stdout);
        if (tm.verdict != AC_VERDICT_PASS && worst == AC_OK)
            worst = AC_FAIL_ACCURACY;
    }
    return worst;
}
