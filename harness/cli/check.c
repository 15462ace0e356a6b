/* harness/cli/check.c — `attncheck check` and `attncheck reference`: anyone's
 * kernel, through tensors in files.
 *
 *   attncheck check PATH [options]       compare O (LSE, dQ, dK, dV) from files
 *   attncheck reference PATH --out DIR|FILE.safetensors [options]
 *
 * PATH is a directory of q.npy, k.npy, v.npy, o.npy [lse.npy do.npy dq.npy
 * dk.npy dv.npy] or one .safetensors file holding tensors of those names.
 * The files cannot say everything, so options do: --layout (bhsd: (B, H, S, d)
 * as PyTorch; bshd: (B, S, H, d) as flash_attn_func), --causal, --window,
 * --mask, --seqlens-q/-k, --scale, --lse-base, --dtype (bf16 bits in .npy).
 * The inputs become an ac_inputs exactly as the fuzzer's (same reference,
 * comparator, gate and budgets), so a verdict here means what it means there.
 * --kernel NAME (after --plugin PATH.so, or a built-in) runs that kernel on the
 * files' inputs instead of reading its outputs from the files. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "harness/cli/check_internal.h"
#include "harness/exec/exec.h"
#include "harness/report/summary.h"
#include "harness/run/dropout.h"
#include "harness/run/reference.h"
#include "harness/run/run.h"
#include "harness/verdict/budget.h"
#include "harness/verdict/diagnose.h"
#include "harness/verdict/gate.h"

/* ---- options ------------------------------------------------------------- */

/* What the option table cannot say alone: PATH, and reference's --out. */
static int required(const ac_cli *o, ac_err *err)
{
    if (!o->path)
        return ac_fail(err, AC_ERR_INPUT, "no PATH given (a directory of q.npy, k.npy, ... or a .safetensors file)");
    if (o->cmd != AC_CMD_REFERENCE)
        return AC_OK;
    if (!o->out)
        return ac_fail(err, AC_ERR_INPUT, "--out DIR or --out FILE.safetensors is required");
    struct stat s;
    if (ac_check_ends_with(o->out, ".npz") || ac_check_ends_with(o->out, ".npy"))
        return ac_fail(err, AC_ERR_INPUT,
                       "--out %s: reference writes a directory (one .npy per tensor: o.npy, "
                       "lse.npy, ...) or one FILE.safetensors, not a .%s file",
                       o->out, ac_check_ends_with(o->out, ".npz") ? "npz" : "npy");
    if (!ac_check_ends_with(o->out, ".safetensors") && stat(o->out, &s) == 0 && !S_ISDIR(s.st_mode))
        return ac_fail(err, AC_ERR_INPUT, "--out %s is a file: give a directory or FILE.safetensors", o->out);
    return AC_OK;
}

/* ---- a case directory (attncheck gen, an --exec call) says its problem ------------- */

/* The options problem.json stands for, in place of the command line's; giving
 * one of them as well is refused rather than silently overridden. */
static int case_dir_options(const ac_cli *o, ac_cli *eff, ac_case_options *co, ac_err *err)
{
    *eff = *o;
    struct stat s;
    bool found = false;
    if (stat(o->path, &s) != 0 || !S_ISDIR(s.st_mode))
        return AC_OK;
    int st = ac_case_dir_options(o->path, co, &found, err);
    if (st != AC_OK || !found)
        return st;
    const char *given[] = {o->dtype,     o->layout,    o->mask,  o->mask_file,
                           o->seqlens_q, o->seqlens_k, o->scale, o->block_table};
    const char *names[] = {"--dtype",     "--layout",    "--mask",  "--mask-file",
                           "--seqlens-q", "--seqlens-k", "--scale", "--block-table"};
    for (size_t i = 0; i < sizeof given / sizeof given[0]; i++)
        if (given[i])
            return ac_fail(err, AC_ERR_INPUT, "%s/%s already gives the problem (%s); drop %s", o->path, AC_CASE_JSON,
                           co->case_line[0] ? co->case_line : "dtype, layout, mask, lengths, scale", names[i]);
    eff->dtype = co->dtype, eff->layout = co->layout, eff->scale = co->scale;
    eff->mask = co->mask[0] ? co->mask : NULL;
    eff->mask_file = co->mask_file[0] ? co->mask_file : NULL;
    eff->seqlens_q = co->seqlens_q[0] ? co->seqlens_q : NULL;
    eff->seqlens_k = co->seqlens_k[0] ? co->seqlens_k : NULL;
    eff->block_table = co->block_table_file[0] ? co->block_table_file : NULL;
    eff->page_size = co->page_size ? co->page_size : o->page_size;
    eff->v_from_k = co->v_from_k || o->v_from_k;
    if (co->descale[0][0] && !o->descale_q && !o->descale_k && !o->descale_v) { /* fp8's factors */
        eff->descale_q = co->descale[0], eff->descale_k = co->descale[1], eff->descale_v = co->descale[2];
        eff->descale_block = co->descale_block[0] ? co->descale_block : o->descale_block;
    }
    return AC_OK;
}

/* ---- the progress line: a terminal sees what takes more than a second ------------- */

typedef struct {
    _Atomic(const char *) stage; /* NULL: done */
    double t0;
    pthread_t thread;
    bool running;
} progress;

static void *progress_loop(void *arg)
{
    progress *pr = arg;
    bool shown = false;
    const char *stage;
    while ((stage = atomic_load(&pr->stage)) != NULL) {
        double t = ac_now_seconds() - pr->t0;
        if (t >= 1.0) {
            fprintf(stderr, "\rcheck: %s (%.1f s)\033[K", stage, t);
            fflush(stderr);
            shown = true;
        }
        struct timespec pause = {0, 250000000};
        nanosleep(&pause, NULL);
    }
    if (shown)
        fputs("\r\033[K", stderr); /* the line goes: the table follows on stdout */
    return NULL;
}

static void progress_start(progress *pr, const ac_cli *o)
{
    atomic_store(&pr->stage, "reading the tensors");
    pr->t0 = ac_now_seconds();
    pr->running = !o->quiet && isatty(STDERR_FILENO) && pthread_create(&pr->thread, NULL, progress_loop, pr) == 0;
}

static void progress_stage(progress *pr, const char *stage) { atomic_store(&pr->stage, stage); }

static void progress_stop(progress *pr)
{
    atomic_store(&pr->stage, NULL);
    if (pr->running)
        pthread_join(pr->thread, NULL);
    pr->running = false;
}

/* ---- the outputs under test ----------------------------------------------- */

typedef struct {
    const void *o, *dq, *dk, *dv; /* dtype bits: views into the files or kernel buffers */
    float *lse; /* owned: natural log */
    void *owned[4]; /* kernel outputs when --kernel ran */
    const float *dsink; /* the variants' parameter gradients: a view, or dsink_owned */
    float *dsink_owned;
    const void *dbias; /* the bias's dtype bits: a view, or dbias_owned */
    void *dbias_owned;
    uint8_t *dropout_bits, *dropout_keep; /* --kernel with dropout: the mask it drew, and unpacked */
} outputs;

static void outputs_free(outputs *g)
{
    free(g->lse);
    for (int i = 0; i < 4; i++)
        free(g->owned[i]);
    free(g->dsink_owned);
    free(g->dbias_owned);
    free(g->dropout_bits), free(g->dropout_keep);
}

static int lse_from_file(const ac_cli *o, const ac_tensor *t, outputs *g, ac_err *err)
{
    bool base2 = o->lse_base && !strcmp(o->lse_base, "2");
    if (o->lse_base && !base2 && strcmp(o->lse_base, "e"))
        return ac_fail(err, AC_ERR_INPUT, "--lse-base: '%s' is not e or 2", o->lse_base);
    g->lse = malloc(t->n_elems * sizeof(float) + 1);
    if (!g->lse)
        return ac_fail(err, AC_ERR_ENV, "lse: out of memory");
    memcpy(g->lse, t->data, t->n_elems * sizeof(float));
    for (size_t i = 0; base2 && i < t->n_elems; i++)
        g->lse[i] = (float)(g->lse[i] * M_LN2); /* -inf stays -inf */
    return AC_OK;
}

/* --kernel NAME: the kernel computes the outputs from the files' inputs
 * (host-memory kernels), in a worker unless --in-process, exactly as fuzz runs
 * it: guard zones, the input check, the deadline.  AC_KERNEL_FAULT (err names
 * the class) when it misbehaved. */
static int run_kernel(const ac_cli *o, const ac_inputs *in, bool backward, outputs *g, ac_err *err)
{
    const ac_kernel *k = ac_kernel_find(o->kernel);
    if (!k)
        return ac_fail(err, AC_ERR_INPUT, "--kernel: no kernel named '%s' (see attncheck list)", o->kernel);
    if (k->memory != AC_MEM_HOST)
        return ac_fail(err, AC_ERR_INPUT,
                       "--kernel %s: check runs host-memory kernels only; for a CUDA kernel "
                       "dump its outputs into the files",
                       k->name);
    backward = backward && k->caps.backward && k->backward;
    int st = ac_kernel_supports(k, &in->p, in->c.dtype, backward, err);
    if (st != AC_OK)
        return st;
    ac_run_opts ro = {.backward = backward, .isolate = !o->in_process, .kernel_timeout_s = o->kernel_timeout_s};
    ac_kernel_outputs h;
    st = ac_run_kernel(k, in, backward, &ro, &h, err);
    g->owned[0] = h.o, g->owned[1] = h.dq, g->owned[2] = h.dk, g->owned[3] = h.dv; /* outputs_free frees them */
    g->lse = h.lse;
    g->dsink = g->dsink_owned = h.dsink, g->dbias = g->dbias_owned = h.dbias;
    g->dropout_bits = h.dropout_bits;
    if (st != AC_OK)
        return st;
    if (g->dropout_bits) { /* judged against the mask it drew (the files' --dropout-mask, if any, ignored) */
        if (!(g->dropout_keep = malloc(ac_dropout_elems(&in->p) + 1)))
            return ac_fail(err, AC_ERR_ENV, "out of memory for the kernel's dropout mask");
        ac_dropout_unpack(&in->p, g->dropout_bits, g->dropout_keep);
    }
    g->o = h.o;
    g->dq = h.dq, g->dk = h.dk, g->dv = h.dv;
    return AC_OK;
}

static int gather_outputs(const ac_cli *o, const tensor_files *f, const ac_inputs *in, outputs *g, ac_err *err)
{
    memset(g, 0, sizeof *g);
    if (o->kernel)
        return run_kernel(o, in, f->have[T_DO], g, err);
    if (!f->have[T_O])
        return ac_fail(err, AC_ERR_INPUT, "%s: no tensor o (the kernel's output to check)", o->path);
    g->o = f->t[T_O].data;
    g->dq = f->have[T_DQ] ? f->t[T_DQ].data : NULL;
    g->dk = f->have[T_DK] ? f->t[T_DK].data : NULL;
    g->dv = f->have[T_DV] ? f->t[T_DV].data : NULL;
    g->dsink = f->have[T_DSINK] ? f->t[T_DSINK].data : NULL;
    g->dbias = f->have[T_DBIAS] ? f->t[T_DBIAS].data : NULL;
    return f->have[T_LSE] ? lse_from_file(o, &f->t[T_LSE], g, err) : AC_OK;
}

/* ---- printing -------------------------------------------------------------- */

static void print_where(char *buf, size_t len, ac_where w)
{
    if (w.row < 0)
        snprintf(buf, len, "-");
    else if (w.col < 0)
        snprintf(buf, len, "(%d,%d,%d)", w.b, w.h, w.row);
    else
        snprintf(buf, len, "(%d,%d,%d,%d)", w.b, w.h, w.row, w.col);
}

static void print_number(int width, bool have, double x)
{
    if (have)
        printf(" %*.4g", width, x);
    else
        printf(" %*s", width, "-");
}

/* One table, one row per output compared: the gated columns with their budgets, the
 * worst element (where, expected, actual, its error scale E), then what is not gated. */
static void print_result(const ac_inputs *in, const char *label, const ac_result *r)
{
    const ac_problem *p = &in->p;
    char variants[256];
    ac_check_variants_describe(in, variants, sizeof variants);
    printf("%s: %s b=%d hq=%d hkv=%d nq=%d nk=%d d=%d layout=%s scale=%.9g%s\n", label, ac_dtype_name(in->c.dtype),
           p->batch, p->heads_q, p->heads_kv, p->seqlen_q, p->seqlen_k, p->head_dim, ac_layout_name(p->layout),
           p->scale, variants);
    printf("%-5s %11s %7s %-16s %11s %11s %9s %11s %7s %9s %10s\n", "out", "max-scaled*", "budget", "at", "expected",
           "actual", "E", "naive-mean*", "budget", "specials*", "max-ulp");
    for (int o = 0; o < AC_OUT_COUNT; o++) {
        const ac_metrics *m = &r->m[o];
        if (!m->present)
            continue;
        bool measured = m->n_measured > 0;
        char at[40];
        print_where(at, sizeof at, m->at_max_scaled);
        printf("%-5s", ac_output_name((ac_output)o));
        print_number(11, measured, m->max_scaled);
        print_number(7, true, m->budget_scaled);
        printf(" %-16s", measured ? at : "-");
        print_number(11, measured, m->worst_ref);
        print_number(11, measured, m->worst_got);
        print_number(9, measured, m->worst_escale);
        print_number(11, m->vs_naive_applies, m->vs_naive_mean);
        print_number(7, m->budget_vs_naive_mean > 0, m->budget_vs_naive_mean);
        printf(" %9zu", ac_metrics_specials(m));
        print_number(10, measured, m->max_ulp);
        putchar('\n');
    }
    printf("* gated: max-scaled <= budget, naive-mean <= budget (where the problem has >= 1024 elements, 32 rows\n"
           "  and 32 keys), specials (NaN/Inf/zero/unwritten) = 0; max-ulp is not gated (it explodes near 0).\n"
           "reference and comparison: %.3g s\n",
           r->seconds);
    printf("%s%s%s\n", r->verdict == AC_VERDICT_PASS ? "PASS" : "FAIL", r->why[0] ? ": " : "", r->why);
}

/* ---- check ----------------------------------------------------------------- */

static void compare_outputs(const ac_inputs *in, const outputs *g, const ac_reference *ref, ac_metrics *m)
{
    memset(m, 0, sizeof(ac_metrics) * AC_OUT_COUNT);
    ac_compare(in, AC_OUT_O, g->o, ref->o, ref->e_o, ref->naive_o, &m[AC_OUT_O]);
    if (g->lse)
        ac_compare(in, AC_OUT_LSE, g->lse, ref->lse, ref->e_lse, ref->naive_lse, &m[AC_OUT_LSE]);
    if (!ref->has_backward)
        return;
    const void *got[3] = {g->dq, g->dk, g->dv};
    const double *x[3] = {ref->dq, ref->dk, ref->dv}, *e[3] = {ref->e_dq, ref->e_dk, ref->e_dv};
    const double *nv[3] = {ref->naive_dq, ref->naive_dk, ref->naive_dv};
    for (int i = 0; i < 3; i++)
        if (got[i])
            ac_compare(in, (ac_output)(AC_OUT_DQ + i), got[i], x[i], e[i], nv[i], &m[AC_OUT_DQ + i]);
    if (g->dsink && ref->dsink) /* the variants' parameter gradients */
        ac_compare(in, AC_OUT_DSINK, g->dsink, ref->dsink, ref->e_dsink, NULL, &m[AC_OUT_DSINK]);
    if (g->dbias && ref->dbias)
        ac_compare(in, AC_OUT_DBIAS, g->dbias, ref->dbias, ref->e_dbias, NULL, &m[AC_OUT_DBIAS]);
}

static int verdict(const ac_cli *o, const ac_inputs *in_files, const outputs *g, progress *pr, ac_result *r,
                   ac_err *err)
{
    ac_inputs view = *in_files, *in = &view; /* with --kernel and dropout: the kernel's keep mask */
    if (g->dropout_keep)
        view.p.dropout_keep = g->dropout_keep;
    ac_budgets b;
    const char *bpath = o->budgets ? o->budgets : ac_budgets_default_path();
    int st = ac_budgets_load(bpath, &b, err);
    if (st != AC_OK)
        return st;
    bool backward = in->d_od && (g->dq || g->dk || g->dv || g->dsink || g->dbias);
    ac_reference ref;
    progress_stage(pr, "computing the reference (fp64, error scales, naive baseline, MPFR certificate)");
    if ((st = ac_reference_make(in, backward, o->cert_rows, &ref, err)) != AC_OK)
        return st;
    progress_stage(pr, "comparing");
    r->has_backward = backward;
    r->dtype = in->c.dtype;
    compare_outputs(in, g, &ref, r->m);
    r->cert = ref.cert;
    r->verdict = ac_gate(in, r->m, &b, r->why, sizeof r->why, r->kind, sizeof r->kind);
    const void *got[AC_OUT_COUNT] = {g->o, g->lse, g->dq, g->dk, g->dv, g->dsink, g->dbias};
    ac_err diag_err; /* a diagnosis that runs out of memory leaves the verdict as it is */
    if (r->verdict == AC_VERDICT_FAIL)
        ac_diagnose(in, &ref, got, r->m, r->why, sizeof r->why, &diag_err);
    ac_cert_note(&ref.cert, r->why, sizeof r->why);
    ac_reference_free(&ref);
    if (r->verdict == AC_VERDICT_PASS && in->p.dropout_p > 0.0) { /* files: the keep fraction; --kernel: reruns too */
        ac_run_opts ro = {.isolate = !o->in_process, .kernel_timeout_s = o->kernel_timeout_s};
        st = ac_run_dropout_checks(o->kernel ? ac_kernel_find(o->kernel) : NULL, in_files, &ro, in->p.dropout_keep, r,
                                   err);
    }
    if (st != AC_OK)
        return st;
    return r->verdict == AC_VERDICT_ERROR ? ac_fail(err, AC_ERR_INPUT, "%s", r->why) : AC_OK;
}

/* The case into rep (opened before anything was read, so its paths were
 * checked first) and, with --baseline, against its old record; rep is closed
 * and written: the check completed. */
static int report(const ac_cli *o, ac_report *rep, const char *label, const ac_result *r, ac_err *err)
{
    ac_report_add(rep, label, r, NULL);
    struct ac_baseline *base; /* --baseline OLD.jsonl: this case against its old record */
    int st = ac_cli_baseline_load(o, label, &base, err);
    if (st == AC_OK && base) {
        ac_cli_baseline_observe(base, r);
        st = ac_cli_baseline_finish(o, base, rep, AC_OK, err);
    }
    int wst = ac_report_close(rep, st == AC_OK || st == AC_FAIL_ACCURACY ? err : NULL);
    return st != AC_OK ? st : wst;
}

/* The kernel misbehaved: its FAIL, printed and reported like any other verdict. */
static int kernel_fault(const ac_cli *o, ac_report *rep, const char *label, const ac_err *fault, ac_result *r,
                        ac_err *err)
{
    ac_result_kernel_fault(ac_kernel_find(o->kernel), fault, r);
    printf("%s: FAIL [%s]: %s\n", label, r->kind, r->why);
    int st = report(o, rep, label, r, err);
    return st != AC_OK ? st : AC_FAIL_ACCURACY;
}

/* The reference, the comparison and the table, once the outputs are there. */
static int judge(const ac_cli *o, ac_report *rep, const ac_inputs *in, const outputs *g, progress *pr,
                 const char *label, ac_result *r, ac_err *err)
{
    double t0 = ac_now_seconds(); /* the reference and the comparison: what check spends */
    int st = verdict(o, in, g, pr, r, err);
    r->seconds = ac_now_seconds() - t0;
    progress_stop(pr);
    if (st == AC_KERNEL_FAULT) /* in the dropout checks' rerun of the forward */
        return kernel_fault(o, rep, label, err, r, err);
    if (st != AC_OK) {
        ac_report_discard(rep); /* a check that did not complete writes no report */
        return st;
    }
    print_result(in, label, r);
    st = report(o, rep, label, r, err);
    return st != AC_OK ? st : r->verdict == AC_VERDICT_PASS ? AC_OK : AC_FAIL_ACCURACY;
}

static int run_check(const ac_cli *given, ac_err *err)
{
    ac_cli o;
    ac_case_options co;
    tensor_files f;
    memset(&f, 0, sizeof f);
    ac_inputs in;
    outputs g;
    memset(&in, 0, sizeof in), memset(&g, 0, sizeof g);
    ac_result r;
    memset(&r, 0, sizeof r);
    char label[200];
    snprintf(label, sizeof label, "%s%s", given->kernel ? given->kernel : "check:", given->kernel ? "" : given->path);
    snprintf(r.line, sizeof r.line, "check %s%s%s", given->path, given->kernel ? " --kernel " : "",
             given->kernel ? given->kernel : "");
    ac_report *rep = NULL; /* opened first: its paths are checked before anything is read */
    int st = ac_cli_open_report(given, false, &rep, err);
    if (st != AC_OK)
        return st;
    progress pr;
    progress_start(&pr, given);
    st = case_dir_options(given, &o, &co, err);
    if (st == AC_OK)
        st = ac_check_read_files(o.path, &f, err);
    if (st == AC_OK)
        st = ac_check_make_inputs(&o, &f, &in, err);
    if (st == AC_OK && o.kernel) { /* the kernel runs on NaN padding, as in fuzz (README, "Varlen") */
        ac_inputs_nan_padding(&in);
        progress_stage(&pr, "running the kernel");
    }
    double t_kernel = ac_now_seconds();
    if (st == AC_OK)
        st = gather_outputs(&o, &f, &in, &g, err);
    if (st == AC_KERNEL_FAULT) {
        progress_stop(&pr);
        r.seconds = ac_now_seconds() - t_kernel;
        r.dtype = in.c.dtype;
        st = kernel_fault(&o, rep, label, err, &r, err);
    } else if (st == AC_OK) {
        st = judge(&o, rep, &in, &g, &pr, label, &r, err);
    } else {
        progress_stop(&pr);
        ac_report_discard(rep); /* a check that did not complete writes no report */
    }
    outputs_free(&g);
    ac_inputs_free(&in);
    ac_check_files_free(&f);
    return st;
}

/* ---- reference --------------------------------------------------------------- */

static ac_tensor f64_like(const char *name, const ac_tensor *shape_of, int ndim, double *data)
{
    ac_tensor t = {.dtype = AC_TF_F64, .ndim = ndim, .data = data};
    snprintf(t.name, sizeof t.name, "%s", name);
    memcpy(t.shape, shape_of->shape, sizeof(int64_t) * (size_t)ndim);
    t.n_elems = 1;
    for (int i = 0; i < ndim; i++)
        t.n_elems *= (size_t)t.shape[i];
    return t;
}

static int write_outputs(const char *out, ac_tensor *ts, int n, ac_err *err)
{
    if (ac_check_ends_with(out, ".safetensors")) {
        const ac_tensor *ptr[8];
        for (int i = 0; i < n; i++)
            ptr[i] = &ts[i];
        return ac_safetensors_write(out, ptr, (size_t)n, err);
    }
    if (mkdir(out, 0755) != 0 && errno != EEXIST)
        return ac_fail(err, AC_ERR_INPUT, "--out %s: cannot create the directory: %s", out, strerror(errno));
    int st = AC_OK;
    for (int i = 0; st == AC_OK && i < n; i++) {
        char path[AC_PATH_LEN];
        if (snprintf(path, sizeof path, "%s/%s.npy", out, ts[i].name) >= (int)sizeof path)
            return ac_fail(err, AC_ERR_INPUT, "--out: path too long");
        st = ac_npy_write(path, &ts[i], err);
    }
    return st;
}

/* ---- reference --out: never over the inputs ------------------------------------ */

/* Both exist and are one file (through symlinks and hard links alike). */
static bool same_file(const char *a, const char *b)
{
    struct stat x, y;
    return stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

/* The files reference reads: PATH's tensors (or PATH), --mask-file, --seqlens-q/-k files and the
 * variants' (--cu-seqlens-q/-k, --sinks, --alibi, --bias, --dropout-mask). */
static int input_files(const ac_cli *o, char (*paths)[AC_PATH_LEN], int max)
{
    int n = 0;
    struct stat sb;
    if (stat(o->path, &sb) == 0 && S_ISDIR(sb.st_mode))
        for (int i = 0; i < T_N && n < max; i++)
            snprintf(paths[n++], AC_PATH_LEN, "%s/%s.npy", o->path, ac_check_tnames[i]);
    else
        snprintf(paths[n++], AC_PATH_LEN, "%s", o->path);
    const char *extra[] = {o->mask_file, o->seqlens_q, o->seqlens_k, o->cu_seqlens_q, o->cu_seqlens_k,
                           o->sinks,     o->alibi,     o->bias,      o->dropout_mask, o->block_table};
    for (size_t i = 0; i < sizeof extra / sizeof extra[0] && n < max; i++)
        if (extra[i])
            snprintf(paths[n++], AC_PATH_LEN, "%s", extra[i]);
    return n;
}

/* reference writes --out (a .safetensors file, or o.npy ... in a folder) only
 * where no input lives: `reference DIR --out DIR` would replace the kernel's
 * o.npy with the reference (a later check of DIR would compare the reference
 * with itself), `reference X.safetensors --out X.safetensors` would destroy
 * the inputs.  Checked before anything is computed, with the paths' writability. */
static int check_out(const ac_cli *o, ac_err *err)
{
    static const char *const written[] = {"o", "lse", "dq", "dk", "dv", "dsink", "dbias"};
    enum { N_WRITTEN = sizeof written / sizeof written[0], MAX_INPUTS = T_N + 9 };
    char inputs[MAX_INPUTS][AC_PATH_LEN], out[AC_PATH_LEN];
    int n_in = input_files(o, inputs, MAX_INPUTS);
    bool to_file = ac_check_ends_with(o->out, ".safetensors");
    struct stat sb;
    bool out_dir = !to_file && stat(o->out, &sb) == 0;
    if (!to_file && same_file(o->out, o->path))
        return ac_fail(err, AC_ERR_INPUT,
                       "--out %s is the input folder %s: the reference would replace the files "
                       "under test; write it elsewhere",
                       o->out, o->path);
    if (out_dir && !S_ISDIR(sb.st_mode))
        return ac_fail(err, AC_ERR_INPUT, "--out %s: is %s, not a folder (or give FILE.safetensors)", o->out,
                       ac_file_kind(sb.st_mode));
    for (int w = 0; w < (to_file ? 1 : N_WRITTEN); w++) {
        if (to_file)
            snprintf(out, sizeof out, "%s", o->out);
        else if (snprintf(out, sizeof out, "%s/%s.npy", o->out, written[w]) >= (int)sizeof out)
            return ac_fail(err, AC_ERR_INPUT, "--out: path too long");
        for (int i = 0; i < n_in; i++)
            if (same_file(out, inputs[i]))
                return ac_fail(err, AC_ERR_INPUT, "--out %s: writing %s would overwrite the input %s", o->out, out,
                               inputs[i]);
        int st = to_file || out_dir ? ac_check_writable(out, "--out", err) : AC_OK;
        if (st != AC_OK)
            return st;
    }
    /* a folder still to be made: where it would go must take it */
    return to_file || out_dir ? AC_OK : ac_check_writable(o->out, "--out", err);
}

/* The fp64 reference of the inputs: x = o, lse (base e), and with bwd dq, dk, dv, delta,
 * and the variants' parameter gradients (dsink) when the problem has them. */
enum { X_O, X_LSE, X_DQ, X_DK, X_DV, X_DELTA, X_DSINK, X_DBIAS, X_N };
static int compute_reference(const ac_inputs *in, bool bwd, double *x[X_N], ac_err *err)
{
    const ac_problem *p = &in->p;
    size_t nq = ac_q_elems(p), nkv = ac_kv_elems(p), nl = ac_lse_elems(p);
    size_t sizes[X_N] = {ac_o_elems(p), nl, nq, nkv, ac_v_elems(p), nl, (size_t)p->heads_q, ac_bias_elems(p)};
    for (int i = 0; i < (bwd ? X_N : 2); i++) /* calloc: padding rows read 0 */
        if (!(x[i] = calloc(sizes[i] + 1, sizeof(double))))
            return ac_fail(err, AC_ERR_ENV, "out of memory for the reference (%zu doubles)", sizes[i]);
    int st = ref_forward_fp64(p, in->qd, in->kd, in->vd, x[X_O], x[X_LSE], err);
    if (st == AC_OK && bwd)
        st = ref_backward_fp64(p, in->qd, in->kd, in->vd, x[X_O], x[X_LSE], in->d_od, x[X_DQ], x[X_DK], x[X_DV],
                               x[X_DELTA], err);
    if (st == AC_OK && bwd)
        st = ref_backward_params_fp64(p, x[X_LSE], x[X_DELTA], p->sinks ? x[X_DSINK] : NULL, err);
    if (st == AC_OK && bwd)
        st = ref_backward_dbias_fp64(p, in->qd, in->kd, in->vd, x[X_LSE], in->d_od, x[X_DELTA], x[X_DBIAS], err);
    return st;
}

static int run_reference(const ac_cli *given, ac_err *err)
{
    ac_cli eff;
    const ac_cli *o = &eff;
    ac_case_options co;
    tensor_files f;
    memset(&f, 0, sizeof f);
    ac_inputs in;
    memset(&in, 0, sizeof in);
    double *x[X_N] = {0}; /* o, lse, dq, dk, dv, delta, dsink, dbias */
    bool base2 = given->lse_base && !strcmp(given->lse_base, "2");
    int st = case_dir_options(given, &eff, &co, err);
    if (st == AC_OK)
        st = check_out(o, err);
    if (st == AC_OK)
        st = ac_check_read_files(o->path, &f, err);
    if (st == AC_OK)
        st = ac_check_make_inputs(o, &f, &in, err);
    bool bwd = f.have[T_DO];
    if (st == AC_OK && o->lse_base && !base2 && strcmp(o->lse_base, "e"))
        st = ac_fail(err, AC_ERR_INPUT, "--lse-base: '%s' is not e or 2", o->lse_base);
    if (st == AC_OK)
        st = compute_reference(&in, bwd, x, err);
    for (size_t i = 0; st == AC_OK && base2 && i < ac_lse_elems(&in.p); i++)
        x[X_LSE][i] /= M_LN2;
    if (st == AC_OK) {
        const ac_problem *p = &in.p;
        ac_tensor lse_shape, o_shape, dsink_shape = {.ndim = 1, .shape = {p->heads_q}};
        ac_check_out_shapes(&in, &f, &o_shape, &lse_shape); /* check_thd.c: THD's too */
        int nd = f.t[T_Q].ndim;
        ac_tensor dbias_shape = {.ndim = 4,
                                 .shape = {p->bias_batch > 1 ? p->bias_batch : 1, p->bias_heads > 1 ? p->bias_heads : 1,
                                           p->seqlen_q, p->seqlen_k}};
        ac_tensor ts[7] = {f64_like("o", &o_shape, nd, x[X_O]), f64_like("lse", &lse_shape, lse_shape.ndim, x[X_LSE]),
                           f64_like("dq", &f.t[T_Q], nd, x[X_DQ]), f64_like("dk", &f.t[T_K], nd, x[X_DK]),
                           f64_like("dv", &f.t[T_V], nd, x[X_DV])};
        int n = bwd ? 5 : 2; /* the variants' parameter gradients after */
        if (bwd && p->sinks)
            ts[n++] = f64_like("dsink", &dsink_shape, 1, x[X_DSINK]);
        if (bwd && p->bias)
            ts[n++] = f64_like("dbias", &dbias_shape, 4, x[X_DBIAS]);
        st = write_outputs(o->out, ts, n, err);
    }
    if (st == AC_OK)
        printf("reference: wrote O, LSE%s%s%s (f64, lse base %s) to %s\n", bwd ? ", dQ, dK, dV" : "",
               bwd && in.p.sinks ? ", dSink" : "", bwd && in.p.bias ? ", dBias" : "", base2 ? "2" : "e", o->out);
    for (int i = 0; i < X_N; i++)
        free(x[i]);
    ac_inputs_free(&in);
    ac_check_files_free(&f);
    return st;
}

static int command(const ac_cli *o, ac_err *err)
{
    int st = required(o, err);
    if (st == AC_OK)
        st = o->cmd == AC_CMD_REFERENCE ? run_reference(o, err) : run_check(o, err);
    return st;
}

int ac_cmd_check(int argc, char **argv) { return ac_cli_main(argc, argv, command); }
int ac_cmd_reference(int argc, char **argv) { return ac_cli_main(argc, argv, command); }
