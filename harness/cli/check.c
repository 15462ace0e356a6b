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
} outputs;

static void outputs_free(outputs *g)
{
    free(g->lse);
    for (int i = 0; i < 4; i++)
        free(g->owned[i]);
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
    size_t sizes[4] = {nq, nq, nkv, nkv};
    for (int i = 0; i < (backward ? 4 : 1); i++)
        if (!(g->owned[i] = malloc(sizes[i] * es + 1)))
            return ac_fail(err, AC_ERR_ENV, "out of memory for the kernel's outputs");
    if (!(g->lse = malloc(ac_lse_elems(&in->p) * sizeof(float) + 1)))
        return ac_fail(err, AC_ERR_ENV, "out of memory for the kernel's LSE");
    for (int i = 0; i < (backward ? 4 : 1); i++)
        ac_poison(ac_inputs_out_dtype(in), g->owned[i], sizes[i]);
    ac_poison_f32(g->lse, ac_lse_elems(&in->p));
    ac_fwd_args fa = {in->q, in->k, in->v, g->owned[0], g->lse};
    if ((st = k->forward(k, &in->p, in->c.dtype, &fa, err)) != AC_OK)
        return st;
    g->o = g->owned[0];
    if (!backward)
        return AC_OK;
    ac_bwd_args ba = {in->q, in->k, in->v, g->owned[0], in->d_o, g->lse, g->owned[1], g->owned[2], g->owned[3]};
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
    printf("%s: %s b=%d hq=%d hkv=%d nq=%d nk=%d d=%d layout=%s scale=%.9g\n", label, ac_dtype_name(in->c.dtype),
           p->batch, p->heads_q, p->heads_kv, p->seqlen_q, p->seqlen_k, p->head_dim,
           p->layout == AC_LAYOUT_BSHD ? "bshd" : "bhsd", p->scale);
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
}

static int verdict(const ac_cli *o, const ac_inputs *in, const outputs *g, ac_result *r, ac_err *err)
{
    ac_budgets b;
    const char *bpath = o->budgets ? o->budgets : ac_budgets_default_path();
    int st = ac_budgets_load(bpath, &b, err);
    if (st != AC_OK)
        return st;
    bool backward = in->d_od && (g->dq || g->dk || g->dv);
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
    return r->verdict == AC_VERDICT_ERROR ? ac_fail(err, AC_ERR_INPUT, "%s", r->why) : AC_OK;
}

static int run_check(const ac_cli *o, ac_err *err)
{
    tensor_files f;
    memset(&f, 0, sizeof f);
    ac_inputs in;
    outputs g;
    memset(&in, 0, sizeof in), memset(&g, 0, sizeof g);
    ac_result r;
    memset(&r, 0, sizeof r);
    char label[200];
    snprintf(label, sizeof label, "%s%s", o->kernel ? o->kernel : "check:", o->kernel ? "" : o->path);
    snprintf(r.line, sizeof r.line, "check %s%s%s", o->path, o->kernel ? " --kernel " : "", o->kernel ? o->kernel : "");
    ac_report *rep = NULL; /* opened first: its paths are checked before anything is read */
    int st = ac_cli_open_report(o, false, &rep, err);
    if (st == AC_OK)
        st = ac_check_read_files(o->path, &f, err);
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
        ac_report_add(rep, label, &r, NULL);
        st = ac_report_close(rep, err);
        rep = NULL;
    }
    ac_report_discard(rep); /* a check that did not complete writes no report */
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
        const ac_tensor *ptr[5];
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

/* The files reference reads: PATH's tensors (or PATH), --mask-file, --seqlens-q/-k files. */
static int input_files(const ac_cli *o, char (*paths)[AC_PATH_LEN], int max)
{
    int n = 0;
    struct stat sb;
    if (stat(o->path, &sb) == 0 && S_ISDIR(sb.st_mode))
        for (int i = 0; i < T_N && n < max; i++)
            snprintf(paths[n++], AC_PATH_LEN, "%s/%s.npy", o->path, ac_check_tnames[i]);
    else
        snprintf(paths[n++], AC_PATH_LEN, "%s", o->path);
    const char *extra[3] = {o->mask_file, o->seqlens_q, o->seqlens_k};
    for (int i = 0; i < 3 && n < max; i++)
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
    static const char *const written[] = {"o", "lse", "dq", "dk", "dv"};
    char inputs[T_N + 3][AC_PATH_LEN], out[AC_PATH_LEN];
    int n_in = input_files(o, inputs, T_N + 3);
    bool to_file = ac_check_ends_with(o->out, ".safetensors");
    struct stat sb;
    bool out_dir = !to_file && stat(o->out, &sb) == 0;
    if (!to_file && same_file(o->out, o->path))
        return ac_fail(err, AC_ERR_INPUT, "--out %s is the input folder %s: the reference would replace the files "
                       "under test; write it elsewhere", o->out, o->path);
    if (out_dir && !S_ISDIR(sb.st_mode))
        return ac_fail(err, AC_ERR_INPUT, "--out %s: is %s, not a folder (or give FILE.safetensors)", o->out,
                       ac_file_kind(sb.st_mode));
    for (int w = 0; w < (to_file ? 1 : 5); w++) {
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

/* The fp64 reference of the inputs: x = o, lse (base e), and with bwd dq, dk, dv, delta. */
static int compute_reference(const ac_inputs *in, bool bwd, double *x[6], ac_err *err)
{
    const ac_problem *p = &in->p;
    size_t nq = ac_q_elems(p), nkv = ac_kv_elems(p), nl = ac_lse_elems(p);
    size_t sizes[6] = {nq, nl, nq, nkv, nkv, nl};
    for (int i = 0; i < (bwd ? 6 : 2); i++) /* calloc: padding rows read 0 */
        if (!(x[i] = calloc(sizes[i] + 1, sizeof(double))))
            return ac_fail(err, AC_ERR_ENV, "out of memory for the reference outputs");
    int st = ref_forward_fp64(p, in->qd, in->kd, in->vd, x[0], x[1], err);
    if (st == AC_OK && bwd)
        st = ref_backward_fp64(p, in->qd, in->kd, in->vd, x[0], x[1], in->d_od, x[2], x[3], x[4], x[5], err);
    return st;
}

static int run_reference(const ac_cli *o, ac_err *err)
{
    tensor_files f;
    ac_inputs in;
    memset(&in, 0, sizeof in);
    double *x[6] = {0}; /* o, lse, dq, dk, dv, delta */
    bool base2 = o->lse_base && !strcmp(o->lse_base, "2");
    memset(&f, 0, sizeof f);
    int st = check_out(o, err);
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
        x[1][i] /= M_LN2;
    if (st == AC_OK) {
        const ac_problem *p = &in.p;
        ac_tensor lse_shape = {.ndim = 3, .shape = {p->batch, p->heads_q, p->seqlen_q}};
        ac_tensor ts[5] = {f64_like("o", &f.t[T_Q], 4, x[0]), f64_like("lse", &lse_shape, 3, x[1]),
                           f64_like("dq", &f.t[T_Q], 4, x[2]), f64_like("dk", &f.t[T_K], 4, x[3]),
                           f64_like("dv", &f.t[T_K], 4, x[4])};
        st = write_outputs(o->out, ts, bwd ? 5 : 2, err);
    }
    if (st == AC_OK)
        printf("reference: wrote O, LSE%s (f64, lse base %s) to %s\n", bwd ? ", dQ, dK, dV" : "", base2 ? "2" : "e",
               o->out);
    for (int i = 0; i < 6; i++)
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
