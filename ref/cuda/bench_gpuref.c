/* ref/cuda/bench_gpuref.c — attncheck-bench-gpuref: the GPU reference tier on
 * the shapes (b = 1, d = 128, bf16, causal bottom-right, forward and
 * backward, every output: fp64 reference, error scales, naive baseline):
 * hq = hkv = 16 at N = 8192 and 32768, hq = hkv = 8 at N = 131072.  Per shape:
 * the wall time of ref_gpu_reference (inputs and outputs in host memory, as the
 * harness holds them), the time of each stage, the FLOP rates, the device
 * memory, and the CPU spot check of sampled rows and keys against the result.
 * Then cuBLAS's own DGEMM (and SGEMM) TFLOP/s on the device, the yardstick of
 * the "reference fp64 rate within 3x of DGEMM".  It measures the
 * reference alone; the end-to-end figure is the harness's.
 *
 *   attncheck-bench-gpuref [--quick] [--n N] [--heads H] [--no-spot]
 * --quick: N = 8192 only; --n/--heads: one shape of your own.  Output to stdout
 * and $OUT/gpuref-bench.txt.  Exit 3 without a device, 1 if a spot check
 * disagrees. */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpuref_internal.h"

static FILE *g_log;

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    if (g_log) {
        va_start(ap, fmt);
        vfprintf(g_log, fmt, ap);
        va_end(ap);
    }
    fflush(stdout);
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- inputs: bf16 values ~ normal(0, 1), filled on every core ---------------- */

typedef struct {
    uint16_t *bits;
    double *wide;
    size_t begin, end;
    uint64_t seed;
} fill_job;

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A sum of four uniforms, centred and scaled to variance 1 (close enough to a
 * normal for timing), rounded to bf16 (nearest even) and widened exactly. */
static void *fill_range(void *arg)
{
    fill_job *j = arg;
    uint64_t state = j->seed ^ (j->begin * 0x9e3779b97f4a7c15ull);
    for (size_t e = j->begin; e < j->end; e++) {
        uint64_t r = splitmix(&state);
        double u =
            (double)(r & 0xffff) + (double)((r >> 16) & 0xffff) + (double)((r >> 32) & 0xffff) + (double)(r >> 48);
        float x = (float)((u / 65536.0 - 2.0) * 1.7320508075688772);
        uint32_t b;
        memcpy(&b, &x, sizeof b);
        b = (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
        j->bits[e] = (uint16_t)b;
        uint32_t w = b << 16;
        float back;
        memcpy(&back, &w, sizeof back);
        j->wide[e] = back;
    }
    return NULL;
}

static void fill_inputs(uint16_t *bits, double *wide, size_t n, uint64_t seed)
{
    enum { THREADS = 16 };
    pthread_t th[THREADS];
    fill_job jobs[THREADS];
    int started = 0;
    for (int t = 0; t < THREADS; t++) {
        jobs[t] = (fill_job){bits, wide, n * t / THREADS, n * (t + 1) / THREADS, seed};
        if (pthread_create(&th[t], NULL, fill_range, &jobs[t]) == 0)
            started = t + 1;
        else
            fill_range(&jobs[t]);
    }
    for (int t = 0; t < started; t++)
        pthread_join(th[t], NULL);
}

/* ---- one shape ------------------------------------------------------------------ */

typedef struct {
    int heads, n;
} shape;

typedef struct {
    uint16_t *bits[4];
    double *wide[4];
    ref_gpu_outputs out;
} host_set;

static void host_free(host_set *h)
{
    ref_gpu_outputs *o = &h->out;
    double *all[] = {o->o,    o->lse,  o->dq,   o->dk,      o->dv,        o->delta,    o->e_o,      o->e_lse,
                     o->e_dq, o->e_dk, o->e_dv, o->naive_o, o->naive_lse, o->naive_dq, o->naive_dk, o->naive_dv};
    for (size_t a = 0; a < sizeof all / sizeof all[0]; a++)
        free(all[a]);
    for (int t = 0; t < 4; t++) {
        free(h->bits[t]);
        free(h->wide[t]);
    }
    memset(h, 0, sizeof *h);
}

/* Outputs are malloc'd and left untouched, as the harness's would be: the
 * first touch of their pages is part of the download time. */
static bool host_alloc(const ac_problem *p, host_set *h)
{
    memset(h, 0, sizeof *h);
    size_t nq = ac_q_elems(p), nkv = ac_kv_elems(p), nl = ac_lse_elems(p);
    size_t in_sizes[4] = {nq, nkv, nkv, nq};
    bool ok = true;
    for (int t = 0; t < 4; t++) {
        ok &= (h->bits[t] = malloc(in_sizes[t] * sizeof(uint16_t))) != NULL;
        ok &= (h->wide[t] = malloc(in_sizes[t] * sizeof(double))) != NULL;
        if (ok)
            fill_inputs(h->bits[t], h->wide[t], in_sizes[t], 1000 + (uint64_t)t);
    }
    ref_gpu_outputs *o = &h->out;
    double **q_like[] = {&o->o, &o->dq, &o->e_o, &o->e_dq, &o->naive_o, &o->naive_dq};
    double **kv_like[] = {&o->dk, &o->dv, &o->e_dk, &o->e_dv, &o->naive_dk, &o->naive_dv};
    double **rows[] = {&o->lse, &o->delta, &o->e_lse, &o->naive_lse};
    for (int a = 0; a < 6; a++) {
        ok &= (*q_like[a] = malloc(nq * sizeof(double))) != NULL;
        ok &= (*kv_like[a] = malloc(nkv * sizeof(double))) != NULL;
    }
    for (int a = 0; a < 4; a++)
        ok &= (*rows[a] = malloc(nl * sizeof(double))) != NULL;
    return ok;
}

static ac_problem problem_of(shape s)
{
    ac_problem p = ac_problem_dense(1, s.heads, s.heads, s.n, s.n, 128);
    p.scale = (double)(float)(1.0 / sqrt(128.0));
    p.windowed = true;
    p.window_right = 0;
    p.align = AC_ALIGN_BOTTOM_RIGHT;
    return p;
}

static void print_stats(const ref_gpu_stats *st, double dgemm_tflops)
{
    double fp64_s =
        st->seconds[REF_GPU_STAGE_FORWARD] + st->seconds[REF_GPU_STAGE_BACKWARD] + st->seconds[REF_GPU_STAGE_SCALES];
    double fp64_flops = st->flops_attention + st->flops_scales;
    say("  stages (s):");
    for (int g = 0; g < REF_GPU_STAGE_COUNT; g++)
        say(" %s %.3f", ref_gpu_stage_name((ref_gpu_stage)g), st->seconds[g]);
    say("\n  GEMM work: fp64 attention %.3g, fp64 scales %.3g, f32 naive %.3g FLOP; %ld blocks of %d rows; "
        "device memory %.2f GiB\n",
        st->flops_attention, st->flops_scales, st->flops_naive, st->blocks, st->block_rows,
        (double)st->device_bytes / (1 << 30));
    if (fp64_s > 0.0) {
        double rate = fp64_flops / fp64_s / 1e12, attn = st->flops_attention / fp64_s / 1e12;
        say("  fp64 rate over the fp64 stages (%.3f s): %.2f TFLOP/s of all fp64 GEMMs (%.2f counting the "
            "attention GEMMs alone); cuBLAS DGEMM %.2f: %.2fx (%.2fx) below it\n",
            fp64_s, rate, attn, dgemm_tflops, dgemm_tflops / rate, dgemm_tflops / attn);
    }
    say("  naive: %.3f s, %.2f TFLOP/s f32 (sequential-order kernels)\n",
        st->seconds[REF_GPU_STAGE_NAIVE_FWD] + st->seconds[REF_GPU_STAGE_NAIVE_BWD],
        st->flops_naive / (st->seconds[REF_GPU_STAGE_NAIVE_FWD] + st->seconds[REF_GPU_STAGE_NAIVE_BWD] + 1e-30) / 1e12);
}

static bool spot(const ac_problem *p, const host_set *h)
{
    ref_gpu_check chk;
    ac_err err = {{0}};
    double t0 = now_seconds();
    if (ref_gpu_spot_check(p, AC_BF16, h->wide[0], h->wide[1], h->wide[2], h->wide[3], &h->out, 8, 4, 1, &chk, &err) !=
        AC_OK) {
        say("  spot check: %s\n", err.msg);
        return false;
    }
    say("  CPU spot check (%zu rows, %zu keys, %.2f s): %s; worst", chk.rows_checked, chk.keys_checked,
        now_seconds() - t0, chk.agrees ? "agrees" : "DISAGREES");
    for (int o = 0; o < REF_GPU_CHECK_COUNT; o++)
        say(" %s %.2e", ref_gpu_check_name((ref_gpu_check_output)o), chk.worst[o].units);
    say(" (units of max(ulp, u A); certified <= %g)\n", AC_CERT_MAX_ULP);
    return chk.agrees;
}

/* Runs the shape once plain (the wall time a harness sees) and, unless it
 * is the long one, once with stage timing (a sync at every stage edge). */
static int bench_shape(shape s, bool with_spot, double dgemm_tflops)
{
    ac_problem p = problem_of(s);
    host_set h;
    double t0 = now_seconds();
    if (!host_alloc(&p, &h)) {
        say("N=%d: out of host memory\n", s.n);
        host_free(&h);
        return 3;
    }
    say("b=1 hq=hkv=%d N=%d d=128 bf16 causal-br, forward + backward + scales + naive (inputs made in %.2f s)\n",
        s.heads, s.n, now_seconds() - t0);
    ref_gpu_stats st;
    ac_err err = {{0}};
    int status = AC_OK;
    if (s.n < 131072) {
        ref_gpu_opts plain = {0};
        status = ref_gpu_reference(&p, AC_BF16, h.bits[0], h.bits[1], h.bits[2], h.bits[3], &plain, &h.out, &st, &err);
        if (status == AC_OK)
            say("  wall %.3f s (no stage timing)\n", st.total_seconds);
    }
    ref_gpu_opts timed = {.timing = true};
    if (status == AC_OK)
        status = ref_gpu_reference(&p, AC_BF16, h.bits[0], h.bits[1], h.bits[2], h.bits[3], &timed, &h.out, &st, &err);
    if (status != AC_OK) {
        say("  ref_gpu_reference: %s\n", err.msg);
        host_free(&h);
        return status;
    }
    say("  wall %.3f s with stage timing on %s\n", st.total_seconds, st.device);
    print_stats(&st, dgemm_tflops);
    bool agrees = !with_spot || spot(&p, &h);
    host_free(&h);
    return agrees ? AC_OK : 1;
}

/* Small cases, where a fuzz campaign lives: the fixed cost of a call (context
 * check, plan, ~40 allocations, launches) against the work.  Median of 5 calls
 * each, forward + backward + everything, so `--reference auto` can pick a size
 * above which the GPU tier pays. */
static int bench_small(void)
{
    const int lengths[] = {128, 512, 2048};
    say("small cases (b=1 hq=hkv=4 d=128 bf16 causal-br, median of 5 calls):");
    for (int x = 0; x < 3; x++) {
        shape s = {4, lengths[x]};
        ac_problem p = problem_of(s);
        host_set h;
        if (!host_alloc(&p, &h)) {
            host_free(&h);
            return 3;
        }
        double times[5];
        ac_err err = {{0}};
        for (int rep = 0; rep < 5; rep++) {
            ref_gpu_stats st;
            if (ref_gpu_reference(&p, AC_BF16, h.bits[0], h.bits[1], h.bits[2], h.bits[3], NULL, &h.out, &st, &err) !=
                AC_OK) {
                say("\n  N=%d: %s\n", s.n, err.msg);
                host_free(&h);
                return 3;
            }
            times[rep] = st.total_seconds;
        }
        for (int i = 1; i < 5; i++) /* insertion sort: five values */
            for (int j = i; j > 0 && times[j] < times[j - 1]; j--) {
                double tmp = times[j];
                times[j] = times[j - 1];
                times[j - 1] = tmp;
            }
        say(" N=%d %.2f ms;", s.n, 1e3 * times[2]);
        host_free(&h);
    }
    say("\n");
    return AC_OK;
}

static void open_log(void)
{
    const char *out = getenv("OUT");
    if (!out || !*out)
        return;
    char path[1024];
    snprintf(path, sizeof path, "%s/gpuref-bench.txt", out);
    g_log = fopen(path, "w");
}

int main(int argc, char **argv)
{
    shape shapes[3] = {{16, 8192}, {16, 32768}, {8, 131072}};
    int n_shapes = 3;
    bool with_spot = true;
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "--quick"))
            n_shapes = 1;
        else if (!strcmp(argv[a], "--no-spot"))
            with_spot = false;
        else if (!strcmp(argv[a], "--n") && a + 1 < argc)
            shapes[0].n = atoi(argv[++a]), n_shapes = 1;
        else if (!strcmp(argv[a], "--heads") && a + 1 < argc)
            shapes[0].heads = atoi(argv[++a]), n_shapes = 1;
        else {
            fprintf(stderr, "usage: %s [--quick] [--n N] [--heads H] [--no-spot]\n", argv[0]);
            return 2;
        }
    }
    open_log();
    ac_err err = {{0}};
    if (ref_gpu_available(&err) != AC_OK) {
        say("attncheck-bench-gpuref: no usable device: %s\n", err.msg);
        return 3;
    }
    double dgemm = 0.0, dgemm_like = 0.0, sgemm = 0.0;
    if (refg_gemm_tflops(true, 8192, 8192, 8192, 3, &dgemm, &err) != AC_OK ||
        refg_gemm_tflops(true, 32768, 2048, 128, 10, &dgemm_like, &err) != AC_OK ||
        refg_gemm_tflops(false, 8192, 8192, 8192, 3, &sgemm, &err) != AC_OK) {
        say("attncheck-bench-gpuref: %s\n", err.msg);
        return 3;
    }
    say("cuBLAS on this device: DGEMM %.2f TFLOP/s (8192^3), %.2f TFLOP/s (32768 x 2048 x 128, an S block's "
        "shape); SGEMM %.2f TFLOP/s (8192^3, FP32, no TF32)\n",
        dgemm, dgemm_like, sgemm);
    int worst = bench_small();
    for (int s = 0; s < n_shapes; s++) {
        int status = bench_shape(shapes[s], with_spot, dgemm);
        worst = status > worst ? status : worst;
    }
    if (g_log)
        fclose(g_log);
    return worst;
}
