/* ref/cuda/test_gpuref_main.c — attncheck-test-gpuref: the GPU reference tier
 * against the CPU tier, on every fixture line and on random lines covering
 * every mask kind, dtype and layout (GQA, varlen, Nq != Nk, fully masked rows),
 * each run three ways: blocks as planned, tiny forced blocks (many blocks, the
 * key ranges of causal and window blocks; downloads in chunks of 100 to 322
 * doubles), and forward only.  First, ref_gpu_warm_up on a thread of its own:
 * the context it leaves is the one the runs take.  Every array of
 * the bundle is compared (test_gpuref_compare.c), the CPU spot check must
 * agree with the device, and the device memory must stay within the plan.
 * Then the error paths: a memory limit too small (AC_ERR_ENV naming it), bad
 * arguments (AC_ERR_INPUT).
 *
 *   attncheck-test-gpuref [--fixtures DIR|none] [--random N] [--seed S] [--quick]
 *                         [--verbose] [--cpu-only]
 * (defaults: $ATTNCHECK_SOURCE_DIR/fixtures, 96 random lines, seed 1; --quick:
 * 36 random lines and no long lines, for compute-sanitizer)
 * --cpu-only runs what needs no device: every line parsed and its CPU bundle
 * built, and the comparator's self-test (a copy of the CPU bundle passes; one
 * planted error per array fails that array alone).  Output goes to stdout and
 * $OUT/gpuref-test.log.  Exit: 0 all passed, 1 a mismatch, 2 bad usage,
 * 3 no device. */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attncheck_config.h"
#include "test_gpuref.h"

#define MAX_WORK (1 << 24) /* b hq nq nk d above this: skipped (the CPU bundle would dominate) */
#define MAX_WORK_LONG (1 << 29) /* the long lines, chosen for it */

static FILE *g_log;

void tg_say(const char *fmt, ...)
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

typedef struct {
    const char *fixtures;
    int random, verbose, quick, cpu_only;
    uint64_t seed;
} options;

typedef struct {
    long cases, runs, failed, skipped;
    double worst_units, naive_same_min;
} tally;

/* ---- one case on the device ------------------------------------------------------- */

typedef struct {
    const char *name;
    int block_rows; /* 0: as planned */
    bool backward;
    size_t chunk_elems; /* doubles per download chunk; 0: a staging slot's */
} variant;

static bool check_stats(const ac_inputs *in, const variant *v, const ref_gpu_stats *st)
{
    ref_gpu_plan_t plan;
    ac_err err = {{0}};
    if (ref_gpu_plan(&in->p, in->c.dtype, v->backward, true, true, 0, st->block_rows, &plan, &err) != AC_OK) {
        tg_say("    FAIL plan: %s\n", err.msg);
        return false;
    }
    if (st->device_bytes > plan.total_bytes) {
        tg_say("    FAIL device memory %zu bytes over the plan's %zu\n", st->device_bytes, plan.total_bytes);
        return false;
    }
    return true;
}

static bool spot_check(const ac_inputs *in, const tg_bundle *g)
{
    ref_gpu_check chk;
    ac_err err = {{0}};
    const double *d_o = g->backward ? in->d_od : NULL;
    if (ref_gpu_spot_check(&in->p, in->c.dtype, in->qd, in->kd, in->vd, d_o, &g->out, 64, 32, in->c.seed, &chk, &err) !=
        AC_OK) {
        tg_say("    FAIL spot check: %s\n", err.msg);
        return false;
    }
    if (chk.agrees)
        return true;
    const ref_gpu_disagreement *w = &chk.worst[chk.worst_output];
    tg_say("    FAIL spot check: %s disagrees by %.3g units at b=%d h=%d row=%d col=%d: gpu %.17g cpu %.17g\n",
           ref_gpu_check_name(chk.worst_output), w->units, w->b, w->h, w->row, w->col, w->got, w->want);
    return false;
}

static bool run_variant(const ac_inputs *in, const ac_reference *r, const variant *v, const options *o, tally *t)
{
    tg_bundle g;
    if (tg_bundle_alloc(&in->p, v->backward, &g) != AC_OK) {
        tg_say("    FAIL out of host memory\n");
        return false;
    }
    ref_gpu_opts opts = {.block_rows = v->block_rows, .download_chunk_elems = v->chunk_elems};
    ref_gpu_stats st;
    ac_err err = {{0}};
    int status = ref_gpu_reference(&in->p, in->c.dtype, in->q, in->k, in->v, v->backward ? in->d_o : NULL, &opts,
                                   &g.out, &st, &err);
    bool ok = status == AC_OK;
    if (!ok)
        tg_say("    FAIL %s: ref_gpu_reference status %d: %s\n", v->name, status, err.msg);
    double worst = 0.0, same = 1.0;
    if (ok) {
        int bad = tg_compare(in, r, &g, o->verbose, &worst, &same);
        ok = bad == 0;
        ok &= spot_check(in, &g);
        ok &= check_stats(in, v, &st);
        if (!ok || o->verbose)
            tg_say(
                "    %s %s: block %d rows, %ld blocks, %.1f MiB, %.3f s; worst %.3g x tol; naive %.4f bitwise equal\n",
                ok ? "ok  " : "FAIL", v->name, st.block_rows, st.blocks, (double)st.device_bytes / (1 << 20),
                st.total_seconds, worst, same);
    }
    t->runs++;
    t->worst_units = worst > t->worst_units ? worst : t->worst_units;
    t->naive_same_min = same < t->naive_same_min ? same : t->naive_same_min;
    tg_bundle_free(&g);
    return ok;
}

/* Parses line, builds inputs and the CPU bundle; AC_ERR_INPUT "skipped: ..." for a line over MAX_WORK or
 * one the GPU tier does not implement (ref_gpu_supports: fp8, paged K/V, the variants, THD). */
static int prepare(const tg_line *l, ac_inputs *in, ac_reference *r, ac_err *err)
{
    ac_case c;
    int status = ac_case_parse(l->line, &c, err);
    if (status != AC_OK)
        return status;
    double cap = strcmp(l->where, "long") == 0 ? MAX_WORK_LONG : MAX_WORK;
    if (tg_case_work(&c) > cap)
        return ac_fail(err, AC_ERR_INPUT, "skipped: b hq nq nk d = %.3g > %.3g", tg_case_work(&c), cap);
    status = ac_inputs_make(&c, in, err);
    ac_err why = {{0}};
    if (status == AC_OK && ref_gpu_supports(&in->p, &why) != AC_OK) /* the harness gives such lines to the CPU tier */
        return ac_fail(err, AC_ERR_INPUT, "skipped: %s", why.msg);
    if (status == AC_OK)
        status = ac_reference_make(in, true, 0, r, err);
    return status;
}

static void run_line(const tg_line *l, long index, const options *o, tally *t)
{
    ac_inputs in;
    ac_reference r;
    ac_err err = {{0}};
    memset(&in, 0, sizeof in);
    memset(&r, 0, sizeof r);
    int status = prepare(l, &in, &r, &err);
    t->cases++;
    if (status != AC_OK) {
        bool skip = strncmp(err.msg, "skipped", 7) == 0;
        tg_say("%s %s: %s\n  %s\n", skip ? "SKIP" : "FAIL", l->where, err.msg, l->line);
        *(skip ? &t->skipped : &t->failed) += 1;
        ac_reference_free(&r);
        ac_inputs_free(&in);
        return;
    }
    bool ok = true;
    if (!o->cpu_only) {
        /* small blocks also come down in small chunks: every output crosses chunk
         * edges (in the middle of a BSHD row, of a GQA group's heads) */
        variant vs[] = {{"planned blocks", 0, true, 0},
                        {"small blocks", 1 + (int)(index % 7), true, (size_t)(100 + 37 * (index % 7))},
                        {"forward only", 2 + (int)(index % 5), false, 0}};
        for (int v = 0; v < (index % 3 == 0 ? 3 : 2); v++)
            ok &= run_variant(&in, &r, &vs[v], o, t);
    }
    if (!ok)
        t->failed++;
    if (!ok || o->verbose || o->cpu_only)
        tg_say("%s %s\n  %s\n", ok ? "PASS" : "FAIL", l->where, l->line);
    ac_reference_free(&r);
    ac_inputs_free(&in);
}

/* ---- the comparator's self-test (no device) ----------------------------------------- */

static double *copy_of(const double *x, size_t n)
{
    double *y = malloc((n ? n : 1) * sizeof *y);
    if (y && n)
        memcpy(y, x, n * sizeof *y);
    return y;
}

/* g := a copy of the CPU bundle r. */
static void bundle_copy(const ac_problem *p, const ac_reference *r, tg_bundle *g)
{
    size_t nq = ac_q_elems(p), nkv = ac_kv_elems(p), nl = ac_lse_elems(p);
    ref_gpu_outputs o = {
        copy_of(r->o, nq),         copy_of(r->lse, nl),      copy_of(r->dq, nq),        copy_of(r->dk, nkv),
        copy_of(r->dv, nkv),       copy_of(r->delta, nl),    copy_of(r->e_o, nq),       copy_of(r->e_lse, nl),
        copy_of(r->e_dq, nq),      copy_of(r->e_dk, nkv),    copy_of(r->e_dv, nkv),     copy_of(r->naive_o, nq),
        copy_of(r->naive_lse, nl), copy_of(r->naive_dq, nq), copy_of(r->naive_dk, nkv), copy_of(r->naive_dv, nkv)};
    g->out = o;
    g->backward = true;
}

/* Moves the largest-magnitude finite element of x far out of any tolerance. */
static void plant(double *x, size_t n)
{
    size_t at = 0;
    for (size_t e = 0; e < n; e++)
        if (isfinite(x[e]) && fabs(x[e]) > fabs(x[at]))
            at = e;
    x[at] = x[at] * 1.1 + 1e-3; /* 10%: past the naive's 10% too */
}

static bool comparator_self_test(const char *line)
{
    tg_line l = {{0}, "self-test"};
    snprintf(l.line, sizeof l.line, "%s", line);
    ac_inputs in;
    ac_reference r;
    ac_err err = {{0}};
    memset(&in, 0, sizeof in);
    memset(&r, 0, sizeof r);
    if (prepare(&l, &in, &r, &err) != AC_OK) {
        tg_say("FAIL self-test: %s\n", err.msg);
        return false;
    }
    const ac_problem *p = &in.p;
    size_t nq = ac_q_elems(p), nkv = ac_kv_elems(p), nl = ac_lse_elems(p);
    tg_bundle g;
    bundle_copy(p, &r, &g);
    double worst, same;
    bool ok = tg_compare(&in, &r, &g, false, &worst, &same) == 0 && worst == 0.0 && same == 1.0;
    double **arrays[] = {&g.out.o,         &g.out.lse,      &g.out.dq,       &g.out.dk,
                         &g.out.dv,        &g.out.delta,    &g.out.e_o,      &g.out.e_lse,
                         &g.out.e_dq,      &g.out.e_dk,     &g.out.e_dv,     &g.out.naive_o,
                         &g.out.naive_lse, &g.out.naive_dq, &g.out.naive_dk, &g.out.naive_dv};
    const double *cpu[] = {r.o,    r.lse,  r.dq,   r.dk,      r.dv,        r.delta,    r.e_o,      r.e_lse,
                           r.e_dq, r.e_dk, r.e_dv, r.naive_o, r.naive_lse, r.naive_dq, r.naive_dk, r.naive_dv};
    size_t sizes[] = {nq, nl, nq, nkv, nkv, nl, nq, nl, nq, nkv, nkv, nq, nl, nq, nkv, nkv};
    for (size_t a = 0; a < 16; a++) { /* one planted error: that array alone fails */
        plant(*arrays[a], sizes[a]);
        tg_say("  self-test: planted in array %zu:\n", a);
        int bad = tg_compare(&in, &r, &g, false, &worst, &same);
        if (bad != 1) {
            tg_say("FAIL self-test: a planted error in array %zu gave %d failing arrays\n", a, bad);
            ok = false;
        }
        memcpy(*arrays[a], cpu[a], sizes[a] * sizeof(double));
    }
    tg_bundle_free(&g);
    ac_reference_free(&r);
    ac_inputs_free(&in);
    tg_say("%s comparator self-test on %s\n", ok ? "PASS" : "FAIL", line);
    return ok;
}

/* ---- error paths on the device ----------------------------------------------------------- */

/* ---- the warm-up -------------------------------------------------------------------- */

typedef struct {
    int status;
    ac_err err;
    double seconds;
} warm_result;

static void *warm_main(void *arg)
{
    warm_result *w = arg;
    double t0 = now_seconds();
    w->status = ref_gpu_warm_up(&w->err);
    w->seconds = now_seconds() - t0;
    return NULL;
}

/* ref_gpu_warm_up on another thread, as harness/ runs it; then the first
 * reference of this thread takes its context (its time is the call's alone). */
static bool warm_up_on_another_thread(void)
{
    warm_result w = {AC_OK, {{0}}, 0.0};
    pthread_t th;
    if (pthread_create(&th, NULL, warm_main, &w) != 0) {
        tg_say("FAIL warm-up: no thread\n");
        return false;
    }
    pthread_join(th, NULL);
    ac_problem p = ac_problem_dense(1, 1, 1, 256, 256, 64);
    size_t n = ac_q_elems(&p);
    uint16_t *bits = calloc(n, sizeof *bits);
    double *o = calloc(n, sizeof *o), *lse = calloc(256, sizeof *lse);
    ref_gpu_outputs out = {.o = o, .lse = lse};
    ac_err err = {{0}};
    double t0 = now_seconds();
    int st =
        bits && o && lse ? ref_gpu_reference(&p, AC_BF16, bits, bits, bits, NULL, NULL, &out, NULL, &err) : AC_ERR_ENV;
    double first = now_seconds() - t0;
    bool ok = w.status == AC_OK && st == AC_OK && fabs(lse[255] - log(256.0)) <= 1e-15 * log(256.0);
    tg_say("%s warm-up on another thread: status %d in %.3f s (%s); the first reference after it %.3f s, "
           "status %d %s\n",
           ok ? "PASS" : "FAIL", w.status, w.seconds, w.err.msg, first, st, err.msg);
    free(bits), free(o), free(lse);
    return ok;
}

static bool expect_status(const char *what, int got, int want, const ac_err *err, const char *needle)
{
    bool ok = got == want && (!needle || strstr(err->msg, needle) != NULL);
    tg_say("%s %s: status %d (want %d): %s\n", ok ? "PASS" : "FAIL", what, got, want, err->msg);
    return ok;
}

static bool error_paths(void)
{
    ac_problem p = ac_problem_dense(1, 2, 1, 64, 80, 16);
    size_t nq = ac_q_elems(&p), nkv = ac_kv_elems(&p), nl = ac_lse_elems(&p);
    uint16_t *bits = calloc(nq > nkv ? nq : nkv, sizeof *bits);
    double *o = calloc(nq, sizeof *o), *lse = calloc(nl, sizeof *lse), *e_o = calloc(nq, sizeof *e_o);
    bool ok = bits && o && lse && e_o;
    ac_err err = {{0}};
    ref_gpu_outputs out = {.o = o, .lse = lse};
    ref_gpu_opts tiny = {.device_mem_limit = 1024};
    ok &= expect_status("a 1 KiB device memory limit",
                        ref_gpu_reference(&p, AC_BF16, bits, bits, bits, NULL, &tiny, &out, NULL, &err), AC_ERR_ENV,
                        &err, "device memory");
    ref_gpu_outputs half = {.o = o, .lse = lse, .e_o = e_o};
    ok &= expect_status("e_o without e_lse",
                        ref_gpu_reference(&p, AC_BF16, bits, bits, bits, NULL, NULL, &half, NULL, &err), AC_ERR_INPUT,
                        &err, "e_lse");
    ok &=
        expect_status("d_o without dq", ref_gpu_reference(&p, AC_BF16, bits, bits, bits, bits, NULL, &out, NULL, &err),
                      AC_ERR_INPUT, &err, "dq");
    ac_problem bad = p;
    bad.heads_kv = 3;
    ok &= expect_status("hq not a multiple of hkv",
                        ref_gpu_reference(&bad, AC_BF16, bits, bits, bits, NULL, NULL, &out, NULL, &err), AC_ERR_INPUT,
                        &err, "multiple");
    ref_gpu_stats st;
    ok &=
        expect_status("forward only, no scales, no naive",
                      ref_gpu_reference(&p, AC_BF16, bits, bits, bits, NULL, NULL, &out, &st, &err), AC_OK, &err, NULL);
    /* zero inputs: P uniform over 80 keys, O = 0, LSE = log 80 (to the device's log, 1 ulp) */
    bool values = fabs(lse[0] - log(80.0)) <= 1e-15 * log(80.0) && o[0] == 0.0 && st.blocks == 2;
    tg_say("%s zero inputs: LSE %.17g (log 80 = %.17g), O %g, %ld blocks\n", values ? "PASS" : "FAIL", lse[0],
           log(80.0), o[0], st.blocks);
    ok &= values;
    free(bits), free(o), free(lse), free(e_o);
    return ok;
}

/* ---- main --------------------------------------------------------------------------------- */

static int parse(int argc, char **argv, options *o)
{
    const char *src = getenv("ATTNCHECK_SOURCE_DIR");
    static char dir[1024];
    snprintf(dir, sizeof dir, "%s/fixtures", src ? src : ".");
    *o = (options){dir, 96, 0, 0, 0, 1};
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "--fixtures") && a + 1 < argc)
            o->fixtures = argv[++a];
        else if (!strcmp(argv[a], "--random") && a + 1 < argc)
            o->random = atoi(argv[++a]);
        else if (!strcmp(argv[a], "--seed") && a + 1 < argc)
            o->seed = strtoull(argv[++a], NULL, 10);
        else if (!strcmp(argv[a], "--quick"))
            o->quick = 1;
        else if (!strcmp(argv[a], "--verbose"))
            o->verbose = 1;
        else if (!strcmp(argv[a], "--cpu-only"))
            o->cpu_only = 1;
        else {
            fprintf(stderr, "usage: %s [--fixtures DIR] [--random N] [--seed S] [--quick] [--verbose] [--cpu-only]\n",
                    argv[0]);
            return 2;
        }
    }
    if (o->quick && o->random > 36)
        o->random = 36;
    return 0;
}

/* Lengths where blocks, causal ranges and long sums matter; the CPU bundle takes seconds. */
static const char *const long_lines[] = {
    "v1 seed=7 b=1 hq=2 hkv=1 nq=1024 nk=1024 d=128 dtype=bf16 mask=causal-br layout=bhsd dist=normal(0,1) scale=auto",
    "v1 seed=8 b=1 hq=1 hkv=1 nq=700 nk=1500 d=64 dtype=f32 mask=window-br(300,40) layout=bshd dist=normal(0,1) "
    "scale=auto",
    "v1 seed=9 b=2 hq=2 hkv=2 nq=513 nk=1100 d=96 dtype=f16 mask=dense(0.3) maskrows=0.1 layout=bhsd "
    "dist=outliers(1,0.01) scale=auto",
};

static void open_log(void)
{
    const char *out = getenv("OUT");
    if (!out || !*out)
        return;
    char path[1024];
    snprintf(path, sizeof path, "%s/gpuref-test.log", out);
    g_log = fopen(path, "w");
}

int main(int argc, char **argv)
{
    options o;
    if (parse(argc, argv, &o))
        return 2;
    open_log();
    ac_err err = {{0}};
    if (!o.cpu_only && ref_gpu_available(&err) != AC_OK) {
        tg_say("attncheck-test-gpuref: no usable device: %s\n", err.msg);
        return 3;
    }
    tg_lines lines = {0};
    bool fixtures = strcmp(o.fixtures, "none") != 0;
    if ((fixtures && tg_load_fixtures(&lines, o.fixtures, &err) != AC_OK) ||
        tg_random_lines(&lines, o.seed, o.random, &err) != AC_OK) {
        tg_say("attncheck-test-gpuref: %s\n", err.msg);
        return 2;
    }
    for (size_t k = 0; !o.quick && k < sizeof long_lines / sizeof long_lines[0]; k++)
        if (tg_add_line(&lines, long_lines[k], "long", &err) != AC_OK)
            return 3;
    bool ok = comparator_self_test("v1 seed=5 b=2 hq=4 hkv=2 nq=70 nk=90 d=32 dtype=bf16 mask=causal-br "
                                   "layout=bshd dist=normal(0,1) scale=auto");
    if (!o.cpu_only) {
        ok &= warm_up_on_another_thread();
        ok &= error_paths();
    }
    tally t = {0, 0, 0, 0, 0.0, 1.0};
    double t0 = now_seconds();
    for (size_t k = 0; k < lines.n; k++)
        run_line(&lines.lines[k], (long)k, &o, &t);
    tg_say("attncheck-test-gpuref: %ld cases (%ld skipped), %ld device runs, %ld failed in %.1f s; worst fp64 "
           "difference %.3g x tolerance; naive bitwise equal to the CPU's: >= %.4f of elements\n",
           t.cases, t.skipped, t.runs, t.failed, now_seconds() - t0, t.worst_units, t.naive_same_min);
    tg_lines_free(&lines);
    ok &= t.failed == 0;
    tg_say("%s\n", ok ? "attncheck-test-gpuref: PASS" : "attncheck-test-gpuref: FAIL");
    if (g_log)
        fclose(g_log);
    return ok ? 0 : 1;
}
