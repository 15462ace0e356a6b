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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness/cli/check_internal.h"
#include "harness/run/dropout.h"
#include "harness/report/summary.h"
#include "harness/run/reference.h"
#include "harness/run/run.h"
#include "harness/verdict/budget.h"
#include "harness/verdict/gate.h"

/* ---- options ------------------------------------------------------------- */

/* What the option table cannot say alone: PATH, and reference's --out. */
static int required(const ac_cli *o, ac_err *err)
{
    if (!o->path)
        return ac_fail(err, AC_ERR_INPUT, "no PATH given (a directory of q.npy, k.npy, ... or a .safetensors file)");
    if (o->cmd == AC_CMD_REFERENCE && !o->out)
        return ac_fail(err, AC_ERR_INPUT, "--out DIR or --out FILE.safetensors is required");
    return AC_OK;
}

/* ---- the outputs under test ----------------------------------------------- */

typedef struct {
    const void *o, *dq, *dk, *dv; /* dtype bits: views into the files or kernel buffers */
    float *lse;                   /* owned: natural log */
    void *owned[4];               /* kernel outputs when --kernel ran */
    const float *dsink;           /* the variants' parameter gradients: a view, or dsink_owned */
    float *dsink_owned;
    const void *dbias;            /* the bias's dtype bits: a view, or dbias_owned */
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

/* --kernel NAME: the kernel computes the outputs from the files' inputs (host-memory kernels). */
static int run_kernel(const ac_cli *o, const ac_inputs *in, bool backward, outputs *g, ac_err *err)
{
    const ac_kernel *k = ac_kernel_find(o->kernel);
    if (!k)
        return ac_fail(err, AC_ERR_INPUT, "--kernel: no kernel named '%s' (see attncheck list)", o->kernel);
    if (k->memory != AC_MEM_HOST)
        return ac_fail(err, AC_ERR_INPUT, "--kernel %s: check runs host-memory kernels only; for a CUDA kernel "
                       "dump its outputs into the files", k->name);
    backward = backward && k->caps.backward && k->backward;
    int st = ac_kernel_supports(k, &in->p, in->c.dtype, backward, err);
    if (st != AC_OK)
        return st;
    size_t es = ac_dtype_size(ac_inputs_out_dtype(in)), nq = ac_q_elems(&in->p), nkv = ac_kv_elems(&in->p);
    size_t sizes[4] = {ac_o_elems(&in->p), nq, nkv, ac_v_elems(&in->p)}; /* o, dq, dk, dv */
    for (int i = 0; i < (backward ? 4 : 1); i++)
        if (!(g->owned[i] = malloc(sizes[i] * es + 1)))
            return ac_fail(err, AC_ERR_ENV, "out of memory for the kernel's outputs");
    if (!(g->lse = malloc(ac_lse_elems(&in->p) * sizeof(float) + 1)))
        return ac_fail(err, AC_ERR_ENV, "out of memory for the kernel's LSE");
    for (int i = 0; i < (backward ? 4 : 1); i++)
        ac_poison(ac_inputs_out_dtype(in), g->owned[i], sizes[i]);
    ac_poison_f32(g->lse, ac_lse_elems(&in->p));
    if (in->p.dropout_p > 0.0 && (!(g->dropout_bits = calloc((ac_dropout_elems(&in->p) + 7) / 8, 1)) ||
                                  !(g->dropout_keep = malloc(ac_dropout_elems(&in->p) + 1))))
        return ac_fail(err, AC_ERR_ENV, "out of memory for the kernel's dropout mask");
    ac_fwd_args fa = {.q = in->q, .k = in->k, .v = in->v, .o = g->owned[0], .lse = g->lse,
                      .dropout_mask = g->dropout_bits};
    if ((st = k->forward(k, &in->p, in->c.dtype, &fa, err)) != AC_OK)
        return st;
    if (g->dropout_bits) /* judged against the mask it drew (the files' --dropout-mask, if any, ignored) */
        ac_dropout_unpack(&in->p, g->dropout_bits, g->dropout_keep);
    g->o = g->owned[0];
    if (!backward)
        return AC_OK;
    if (in->p.sinks && !(g->dsink = g->dsink_owned = malloc((size_t)in->p.heads_q * sizeof(float))))
        return ac_fail(err, AC_ERR_ENV, "out of memory for the kernel's dSink");
    if (g->dsink_owned)
        ac_poison_f32(g->dsink_owned, (size_t)in->p.heads_q);
    size_t nb = ac_bias_elems(&in->p);
    if (nb && !(g->dbias = g->dbias_owned = malloc(nb * ac_dtype_size(in->p.bias_dtype))))
        return ac_fail(err, AC_ERR_ENV, "out of memory for the kernel's dBias");
    if (nb)
        ac_poison(in->p.bias_dtype, g->dbias_owned, nb);
    ac_bwd_args ba = {.q = in->q, .k = in->k, .v = in->v, .o = g->owned[0], .d_o = in->d_o, .lse = g->lse,
                      .dq = g->owned[1], .dk = g->owned[2], .dv = g->owned[3], .dsink = g->dsink_owned,
                      .dbias = g->dbias_owned};
    g->dq = g->owned[1], g->dk = g->owned[2], g->dv = g->owned[3];
    return k->backward(k, &in->p, in->c.dtype, &ba, err);
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
    if (w.col < 0)
        snprintf(buf, len, "(%d,%d,%d)", w.b, w.h, w.row);
    else
        snprintf(buf, len, "(%d,%d,%d,%d)", w.b, w.h, w.row, w.col);
}

static void print_result(const ac_inputs *in, const char *label, const ac_result *r)
{
    const ac_problem *p = &in->p;
    char variants[256];
    ac_check_variants_describe(in, variants, sizeof variants);
    printf("%s: %s b=%d hq=%d hkv=%d nq=%d nk=%d d=%d layout=%s scale=%.9g%s\n", label, ac_dtype_name(in->c.dtype),
           p->batch, p->heads_q, p->heads_kv, p->seqlen_q, p->seqlen_k, p->head_dim,
           ac_layout_name(p->layout), p->scale, variants);
    printf("%-4s %10s %-16s %10s %-16s %9s %9s %8s\n", "out", "max-ulp", "at", "max-scaled", "at", "naive-max",
           "naive-mean", "specials");
    for (int o = 0; o < AC_OUT_COUNT; o++) {
        const ac_metrics *m = &r->m[o];
        if (!m->present)
            continue;
        char a[40], b[40];
        print_where(a, sizeof a, m->at_max_ulp), print_where(b, sizeof b, m->at_max_scaled);
        printf("%-4s %10.3g %-16s %10.3g %-16s %9.3g %9.3g %8zu\n", ac_output_name((ac_output)o), m->max_ulp, a,
               m->max_scaled, b, m->vs_naive_max, m->vs_naive_mean,
               m->n_unexpected_nan + m->n_overflow + m->n_lost_special + m->n_wrong_zero + m->n_unwritten);
    }
    ac_summary s = {0};
    ac_summary_add(&s, r);
    s.seconds = r->seconds;
    ac_summary_print(stdout, label, &s);
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

static int verdict(const ac_cli *o, const ac_inputs *in_files, const outputs *g, ac_result *r, ac_err *err)
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
    if ((st = ac_reference_make(in, backward, o->cert_rows, &ref, err)) != AC_OK)
        return st;
    r->has_backward = backward;
    r->dtype = in->c.dtype;
    compare_outputs(in, g, &ref, r->m);
    r->cert = ref.cert;
    r->verdict = ac_gate(in, r->m, &b, r->why, sizeof r->why, r->kind, sizeof r->kind);
    ac_cert_note(&ref.cert, r->why, sizeof r->why);
    ac_reference_free(&ref);
    if (r->verdict == AC_VERDICT_PASS && in->p.dropout_p > 0.0) /* the keep fraction (no rerun from files) */
        st = ac_dropout_checks(&in->p, in->p.dropout_keep, NULL, NULL, r, err);
    return r->verdict == AC_VERDICT_ERROR ? ac_fail(err, AC_ERR_INPUT, "%s", r->why) : AC_OK;
}

static int report(const ac_cli *o, const char *label, const ac_result *r, ac_err *err)
{
    ac_report *rep;
    int st = ac_cli_open_report(o, false, &rep, err);
    if (st != AC_OK)
        return st;
    ac_report_add(rep, label, r, NULL);
    return ac_report_close(rep, err);
}

static int run_check(const ac_cli *o, ac_err *err)
{
    tensor_files f;
    ac_inputs in;
    outputs g;
    memset(&in, 0, sizeof in), memset(&g, 0, sizeof g);
    ac_result r;
    memset(&r, 0, sizeof r);
    char label[200];
    snprintf(label, sizeof label, "%s%s", o->kernel ? o->kernel : "check:", o->kernel ? "" : o->path);
    snprintf(r.line, sizeof r.line, "check %s%s%s", o->path, o->kernel ? " --kernel " : "", o->kernel ? o->kernel : "");
    int st = ac_check_read_files(o->path, &f, err);
    if (st == AC_OK)
        st = ac_check_make_inputs(o, &f, &in, err);
    if (st == AC_OK)
        st = gather_outputs(o, &f, &in, &g, err);
    double t0 = ac_now_seconds(); /* the reference and the comparison: what check spends */
    if (st == AC_OK)
        st = verdict(o, &in, &g, &r, err);
    r.seconds = ac_now_seconds() - t0;
    if (st == AC_OK) {
        print_result(&in, label, &r);
        st = report(o, label, &r, err);
    }
    outputs_free(&g);
    ac_inputs_free(&in);
    ac_check_files_free(&f);
    return st != AC_OK ? st : r.verdict == AC_VERDICT_PASS ? AC_OK : AC_FAIL_ACCURACY;
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
            return ac_fail(err, AC_ERR_ENV, "reference: out of memory");
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

static int run_reference(const ac_cli *o, ac_err *err)
{
    tensor_files f;
    ac_inputs in;
    memset(&in, 0, sizeof in);
    double *x[X_N] = {0}; /* o, lse, dq, dk, dv, delta, dsink, dbias */
    bool base2 = o->lse_base && !strcmp(o->lse_base, "2");
    int st = ac_check_read_files(o->path, &f, err);
    if (st == AC_OK)
        st = ac_check_make_inputs(o, &f, &in, err);
    bool bwd = f.have[T_DO];
    if (st == AC_OK && o->lse_base && !base2 && strcmp(o->lse_base, "e"))
        st = ac_fail(err, AC_ERR_INPUT, "--lse-base: '%s' is not e or 2", o->lse_base);
    if (st == AC_OK)
        st = compute_reference(&in, bwd, x, err);
    for (size_t i = 0; st == AC_OK && base2 && i < ac_lse_elems(&in.p); i++)
        x[1][i] /= M_LN2;
    if (st == AC_OK) {
        const ac_problem *p = &in.p;
        ac_tensor lse_shape, o_shape, dsink_shape = {.ndim = 1, .shape = {p->heads_q}};
        ac_check_out_shapes(&in, &f, &o_shape, &lse_shape); /* check_thd.c: THD's too */
        int nd = f.t[T_Q].ndim;
        ac_tensor dbias_shape = {.ndim = 4, .shape = {p->bias_batch > 1 ? p->bias_batch : 1,
                                                      p->bias_heads > 1 ? p->bias_heads : 1, p->seqlen_q, p->seqlen_k}};
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
