/* ref/bench_ref.c — attncheck-bench-ref: how fast the CPU reference is.
 *
 * Two tables (--only dgemm|stages picks one):
 *  1. For B = 1, H = 1, d = 128 and each N (default 1024 and 4096), on random
 *     f16-exact inputs: the fp64 forward, the two bare cblas_dgemm calls it is
 *     built on (S = Q K^T: N x N x d; O = P V: N x d x N) timed in the same run,
 *     their ratio (goal <= 1.5), and MPFR certification of 8 rows at the default
 *     precision with its overhead relative to the forward (goal <= 20%).
 *  2. The stages of one harness case's reference, issue 12's CPU goal case
 *     (b=1 hq=4 hkv=4 nq=nk=1024 d=128 bf16 causal-br, normal(0,1) inputs made
 *     here, not by the harness): fp64 forward and backward, the error scales,
 *     LSE's scale, the naive forward and backward, certification of 2 rows (the
 *     harness's default), and their sum.  --scalar adds the scalar naive
 *     baseline (the tests' oracle, one run each: seconds) for comparison.
 * Times are medians of --reps runs (CLOCK_MONOTONIC).
 *
 *   attncheck-bench-ref [--n 1024,4096] [--reps 3] [--only dgemm|stages] [--scalar]
 * OPENBLAS_NUM_THREADS pins the BLAS thread count outside ref/'s parallel
 * regions, ATTNCHECK_THREADS the workers of those. */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ref/naive_scalar.h"
#include "ref/parallel.h"
#include "ref/ref.h"

#define MAX_SIZES 16
#define MAX_REPS 101
#define HEAD_DIM 128
#define CERT_ROWS 8

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* splitmix64 + Box-Muller, rounded to f16 so the inputs are what a kernel reads. */
static uint64_t mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void fill_normal(ac_dtype t, double *x, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) {
        double u1 = ((mix(&seed) >> 11) + 0.5) * 0x1p-53, u2 = ((mix(&seed) >> 11) + 0.5) * 0x1p-53;
        x[i] = ac_round(t, sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
    }
}

typedef struct {
    int n;
    double forward_s, dgemm_s, cert_s;
    double cert_ulp;
    int status;
} bench_row;

static int bench_one(int n, int reps, bench_row *out, ac_err *err)
{
    ac_problem p = ac_problem_dense(1, 1, 1, n, n, HEAD_DIM);
    size_t elems = ac_q_elems(&p);
    double *q = malloc(elems * sizeof *q), *k = malloc(elems * sizeof *k), *v = malloc(elems * sizeof *v);
    double *o = malloc(elems * sizeof *o), *lse = malloc((size_t)n * sizeof *lse);
    double *s = malloc((size_t)n * n * sizeof *s), *o2 = malloc(elems * sizeof *o2);
    if (!q || !k || !v || !o || !lse || !s || !o2) {
        free(q);
        free(k);
        free(v);
        free(o);
        free(lse);
        free(s);
        free(o2);
        return ac_fail(err, AC_ERR_ENV, "out of memory at N = %d", n);
    }
    fill_normal(AC_F16, q, elems, 1);
    fill_normal(AC_F16, k, elems, 2);
    fill_normal(AC_F16, v, elems, 3);
    double t_fwd[MAX_REPS], t_gemm[MAX_REPS], t_cert[MAX_REPS];
    int status = AC_OK;
    ac_cert cert = {0};
    for (int r = 0; r < reps && status == AC_OK; r++) {
        double t0 = now_s();
        status = ref_forward_fp64(&p, q, k, v, o, lse, err);
        double t1 = now_s();
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, HEAD_DIM, p.scale, q, HEAD_DIM, k, HEAD_DIM, 0.0, s,
                    n);
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, HEAD_DIM, n, 1.0, s, n, v, HEAD_DIM, 0.0, o2,
                    HEAD_DIM);
        double t2 = now_s();
        if (status == AC_OK)
            status =
                ref_certify(&p, AC_F32, q, k, v, o, lse, CERT_ROWS, 7 + (uint64_t)r, AC_DEFAULT_MPFR_PREC, &cert, err);
        double t3 = now_s();
        t_fwd[r] = t1 - t0;
        t_gemm[r] = t2 - t1;
        t_cert[r] = t3 - t2;
    }
    if (status == AC_OK) {
        out->n = n;
        out->forward_s = median(t_fwd, reps);
        out->dgemm_s = median(t_gemm, reps);
        out->cert_s = median(t_cert, reps);
        out->cert_ulp = cert.max_ulp_o;
    }
    free(q);
    free(k);
    free(v);
    free(o);
    free(lse);
    free(s);
    free(o2);
    return status;
}

/* ---- table 2: the stages of one case's reference ---------------------------- */

/* The case's tensors: inputs, fp64 reference, scales, naive baseline. */
enum {
    T_Q,
    T_K,
    T_V,
    T_DO,
    T_O,
    T_LSE,
    T_DQ,
    T_DK,
    T_DV,
    T_DELTA,
    T_EO,
    T_EDQ,
    T_EDK,
    T_EDV,
    T_ELSE,
    T_NO,
    T_NLSE,
    T_NDQ,
    T_NDK,
    T_NDV,
    T_COUNT
};
typedef struct {
    ac_problem p;
    ac_dtype t;
    double *x[T_COUNT];
} stage_case;

typedef int (*stage_fn)(stage_case *c, ac_err *err);

static int st_forward(stage_case *c, ac_err *err)
{
    double **x = c->x;
    return ref_forward_fp64(&c->p, x[T_Q], x[T_K], x[T_V], x[T_O], x[T_LSE], err);
}

static int st_backward(stage_case *c, ac_err *err)
{
    double **x = c->x;
    return ref_backward_fp64(&c->p, x[T_Q], x[T_K], x[T_V], x[T_O], x[T_LSE], x[T_DO], x[T_DQ], x[T_DK], x[T_DV],
                             x[T_DELTA], err);
}

static int st_scales(stage_case *c, ac_err *err)
{
    double **x = c->x;
    return ref_error_scales(&c->p, c->t, x[T_Q], x[T_K], x[T_V], x[T_O], x[T_LSE], x[T_DO], x[T_EO], x[T_EDQ], x[T_EDK],
                            x[T_EDV], err);
}

static int st_lse_scale(stage_case *c, ac_err *err)
{
    double **x = c->x;
    return ref_lse_error_scale(&c->p, x[T_Q], x[T_K], x[T_LSE], x[T_ELSE], err);
}

static int st_naive_forward(stage_case *c, ac_err *err)
{
    double **x = c->x;
    return ref_naive_forward(&c->p, c->t, x[T_Q], x[T_K], x[T_V], x[T_NO], x[T_NLSE], err);
}

static int st_naive_backward(stage_case *c, ac_err *err)
{
    double **x = c->x;
    return ref_naive_backward(&c->p, c->t, x[T_Q], x[T_K], x[T_V], x[T_NO], x[T_NLSE], x[T_DO], x[T_NDQ], x[T_NDK],
                              x[T_NDV], err);
}

static int st_certify(stage_case *c, ac_err *err)
{
    double **x = c->x;
    ac_cert cert;
    return ref_certify(&c->p, c->t, x[T_Q], x[T_K], x[T_V], x[T_O], x[T_LSE], 2, 5, AC_DEFAULT_MPFR_PREC, &cert, err);
}

static int st_naive_forward_scalar(stage_case *c, ac_err *err)
{
    double **x = c->x;
    return ref_naive_forward_scalar(&c->p, c->t, x[T_Q], x[T_K], x[T_V], x[T_NO], x[T_NLSE], err);
}

static int st_naive_backward_scalar(stage_case *c, ac_err *err)
{
    double **x = c->x;
    return ref_naive_backward_scalar(&c->p, c->t, x[T_Q], x[T_K], x[T_V], x[T_NO], x[T_NLSE], x[T_DO], x[T_NDQ],
                                     x[T_NDK], x[T_NDV], err);
}

static const struct {
    const char *name;
    stage_fn fn;
} stages[] = {
    {"fp64 forward", st_forward},           {"fp64 backward", st_backward},      {"error scales E", st_scales},
    {"LSE error scale", st_lse_scale},      {"naive forward", st_naive_forward}, {"naive backward", st_naive_backward},
    {"certification (2 rows)", st_certify},
};
#define N_STAGES (sizeof stages / sizeof stages[0])

static void stage_case_free(stage_case *c)
{
    for (int i = 0; i < T_COUNT; i++)
        free(c->x[i]);
}

/* b=1 hq=4 hkv=4 nq=nk=1024 d=128 bf16 causal-br, normal(0,1) bf16-exact inputs. */
static int stage_case_make(stage_case *c, ac_err *err)
{
    memset(c, 0, sizeof *c);
    c->p = ac_problem_dense(1, 4, 4, 1024, 1024, HEAD_DIM);
    c->p.windowed = true;
    c->p.window_right = 0;
    c->p.align = AC_ALIGN_BOTTOM_RIGHT;
    c->t = AC_BF16;
    size_t nq = ac_q_elems(&c->p), nkv = ac_kv_elems(&c->p), nl = ac_lse_elems(&c->p);
    const size_t sizes[T_COUNT] = {nq, nkv, nkv, nq,  nq, nl, nq, nkv, nkv, nl,
                                   nq, nq,  nkv, nkv, nl, nq, nl, nq,  nkv, nkv};
    for (int i = 0; i < T_COUNT; i++)
        if (!(c->x[i] = malloc(sizes[i] * sizeof(double)))) {
            stage_case_free(c);
            return ac_fail(err, AC_ERR_ENV, "stage case: out of memory");
        }
    const int inputs[4] = {T_Q, T_K, T_V, T_DO};
    for (int i = 0; i < 4; i++)
        fill_normal(c->t, c->x[inputs[i]], sizes[inputs[i]], 11 + (uint64_t)i);
    return AC_OK;
}

/* CPU time of the whole process, all threads: what a stage costs when the
 * machine is shared and its wall time depends on the neighbours. */
static double cpu_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Medians of reps runs: wall and CPU seconds. */
static int time_stage(stage_fn fn, stage_case *c, int reps, double *wall, double *cpu, ac_err *err)
{
    double t_wall[MAX_REPS], t_cpu[MAX_REPS];
    for (int r = 0; r < reps; r++) {
        double t0 = now_s(), c0 = cpu_s();
        int status = fn(c, err);
        if (status != AC_OK)
            return status;
        t_wall[r] = now_s() - t0;
        t_cpu[r] = cpu_s() - c0;
    }
    *wall = median(t_wall, reps);
    *cpu = median(t_cpu, reps);
    return AC_OK;
}

static int bench_stages(int reps, bool scalar)
{
    stage_case c;
    ac_err err = {{0}};
    int workers = 1, status = stage_case_make(&c, &err);
    if (status == AC_OK)
        status = ref_thread_count(&workers, &err);
    printf("\nstages of one case's reference: b=1 hq=4 hkv=4 nq=nk=1024 d=%d bf16 causal-br, median of %d runs,\n"
           "%d ref/ worker threads (ATTNCHECK_THREADS), OpenBLAS threads %d outside them\n\n",
           HEAD_DIM, reps, workers, openblas_get_num_threads());
    printf("%-26s  %10s  %10s\n", "stage", "wall_ms", "cpu_ms");
    double total = 0.0, total_cpu = 0.0, wall, cpu;
    for (size_t i = 0; status == AC_OK && i < N_STAGES; i++) {
        if ((status = time_stage(stages[i].fn, &c, reps, &wall, &cpu, &err)) == AC_OK)
            printf("%-26s  %10.1f  %10.1f\n", stages[i].name, 1e3 * wall, 1e3 * cpu);
        total += wall;
        total_cpu += cpu;
    }
    if (status == AC_OK)
        printf("%-26s  %10.1f  %10.1f\n", "total", 1e3 * total, 1e3 * total_cpu);
    const struct {
        const char *name;
        stage_fn fn;
    } scalar_stages[2] = {{"naive forward, scalar", st_naive_forward_scalar},
                          {"naive backward, scalar", st_naive_backward_scalar}};
    for (int i = 0; status == AC_OK && scalar && i < 2; i++)
        if ((status = time_stage(scalar_stages[i].fn, &c, 1, &wall, &cpu, &err)) == AC_OK)
            printf("%s%-26s  %10.1f  %10.1f\n", i ? "" : "\n", scalar_stages[i].name, 1e3 * wall, 1e3 * cpu);
    if (status != AC_OK)
        fprintf(stderr, "attncheck-bench-ref: stages: %s\n", err.msg);
    stage_case_free(&c);
    return status;
}

static int bench_dgemm_table(const int *sizes, int n_sizes, int reps)
{
    printf("fp64 reference forward vs its two bare dgemms; MPFR certification of %d rows at %d bits\n", CERT_ROWS,
           AC_DEFAULT_MPFR_PREC);
    printf("B=1 H=1 d=%d, f16-exact normal(0,1) inputs, median of %d runs, OpenBLAS threads %d\n\n", HEAD_DIM, reps,
           openblas_get_num_threads());
    printf("%6s  %11s  %11s  %6s  %11s  %8s  %10s\n", "N", "forward_ms", "2xdgemm_ms", "ratio", "certify_ms",
           "overhead", "cert_ulp");
    bool ratio_ok = true, cert_ok = true;
    for (int i = 0; i < n_sizes; i++) {
        bench_row row = {0};
        ac_err err = {{0}};
        int status = bench_one(sizes[i], reps, &row, &err);
        if (status != AC_OK) {
            fprintf(stderr, "attncheck-bench-ref: N = %d: %s\n", sizes[i], err.msg);
            return status;
        }
        double ratio = row.forward_s / row.dgemm_s, overhead = row.cert_s / row.forward_s;
        ratio_ok &= ratio <= 1.5;
        cert_ok &= overhead <= 0.20;
        printf("%6d  %11.1f  %11.1f  %6.2f  %11.1f  %7.1f%%  %10.2e\n", row.n, 1e3 * row.forward_s, 1e3 * row.dgemm_s,
               ratio, 1e3 * row.cert_s, 100.0 * overhead, row.cert_ulp);
    }
    printf("\nforward / dgemms <= 1.5: goal %s\n", ratio_ok ? "met" : "missed");
    printf("certification overhead <= 20%%: goal %s\n", cert_ok ? "met" : "missed");
    return AC_OK;
}

/* ---- the command line -------------------------------------------------------- */

static int parse_sizes(const char *list, int *sizes, int *count)
{
    *count = 0;
    const char *at = list;
    while (*at) {
        char *end;
        long n = strtol(at, &end, 10);
        if (end == at || n < 1 || n > 65536 || *count == MAX_SIZES || (*end && *end != ','))
            return AC_ERR_INPUT;
        sizes[(*count)++] = (int)n;
        at = *end ? end + 1 : end;
    }
    return *count ? AC_OK : AC_ERR_INPUT;
}

static int usage(const char *why)
{
    fprintf(stderr,
            "attncheck-bench-ref: %s\n"
            "usage: attncheck-bench-ref [--n N1,N2,...] [--reps K] [--only dgemm|stages] [--scalar]\n"
            "  --n       sequence lengths (Nq = Nk) of the dgemm table, 1..65536, default 1024,4096\n"
            "  --reps    runs per figure, the median is printed, 1..%d, default 3\n"
            "  --only    print one table: dgemm (forward vs its dgemms) or stages (one case's reference)\n"
            "  --scalar  the stages table also times the scalar naive baseline (once; seconds)\n",
            why, MAX_REPS);
    return AC_ERR_INPUT;
}

int main(int argc, char **argv)
{
    int sizes[MAX_SIZES] = {1024, 4096}, n_sizes = 2, reps = 3;
    bool dgemm_table = true, stage_table = true, scalar = false;
    for (int a = 1; a < argc; a++) {
        if (strcmp(argv[a], "--n") == 0 && a + 1 < argc) {
            if (parse_sizes(argv[++a], sizes, &n_sizes) != AC_OK)
                return usage("--n wants a comma-separated list of lengths in 1..65536");
        } else if (strcmp(argv[a], "--reps") == 0 && a + 1 < argc) {
            char *end;
            long r = strtol(argv[++a], &end, 10);
            if (*end || r < 1 || r > MAX_REPS)
                return usage("--reps wants an integer in 1..101");
            reps = (int)r;
        } else if (strcmp(argv[a], "--only") == 0 && a + 1 < argc) {
            a++;
            dgemm_table = strcmp(argv[a], "dgemm") == 0;
            stage_table = strcmp(argv[a], "stages") == 0;
            if (!dgemm_table && !stage_table)
                return usage("--only wants dgemm or stages");
        } else if (strcmp(argv[a], "--scalar") == 0) {
            scalar = true;
        } else if (strcmp(argv[a], "--help") == 0 || strcmp(argv[a], "-h") == 0) {
            usage("benchmark of the CPU reference");
            return AC_OK;
        } else {
            char why[300];
            snprintf(why, sizeof why, "unknown or incomplete option '%s'", argv[a]);
            return usage(why);
        }
    }
    if (dgemm_table) {
        int status = bench_dgemm_table(sizes, n_sizes, reps);
        if (status != AC_OK)
            return status;
    }
    return stage_table ? bench_stages(reps, scalar) : AC_OK;
}
