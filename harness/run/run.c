/* harness/run/run.c — the runner: one case end to end.
 *
 *   inputs (ac_inputs_make) -> the arena: inputs copied, outputs poisoned
 *   between guard zones (arena.h) -> kernel forward (O, LSE; with dropout its
 *   keep mask) -> kernel backward fed the kernel's own O and LSE (dQ, dK, dV;
 *   dSink, dBias with sinks, a bias) -> reference bundle (with dropout given
 *   the kernel's mask) -> ac_compare per output -> ac_gate -> with dropout
 *   the mask's own checks (dropout.h: its forward rerun through this runner).
 *
 * The kernel runs in a worker process (worker.h) when o->isolate, here
 * otherwise; the arena is the same either way (the worker's is shared
 * memory), and so are the checks after each call: the guards (an
 * out-of-bounds write) and the inputs, compared with this process's own copy
 * (a modified input).  Outputs are poisoned before every call, so an element
 * the kernel never writes is caught as "unwritten" by the comparator; for
 * AC_MEM_CUDA kernels the buffers, guards and poison travel to the device and
 * back (call.c).
 *
 * A kernel that crashed, exited, hung, faulted the device or failed a check
 * (AC_KERNEL_FAULT) gets a verdict: FAIL, kind kernel:CLASS.  A kernel that
 * reports AC_ERR_ENV (the device or the driver) or AC_ERR_INPUT (a problem
 * outside what it can do) stops the case with that status: an error, never a
 * verdict.  A case outside the kernel's claimed capabilities is not run at all
 * (r->unsupported), so a fixture file can be replayed on any kernel. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness/run/arena.h"
#include "harness/run/call.h"
#include "harness/run/dropout.h"
#include "harness/run/inputs.h"
#include "harness/run/plugin.h"
#include "harness/run/reference.h"
#include "harness/run/run.h"
#include "harness/run/worker.h"
#include "harness/verdict/diagnose.h"

double ac_now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void ac_kernel_outputs_free(ac_kernel_outputs *h)
{
    free(h->o);
    free(h->dq);
    free(h->dk);
    free(h->dv);
    free(h->lse);
    free(h->dsink), free(h->dbias), free(h->dropout_bits);
    memset(h, 0, sizeof *h);
}

static int outputs_alloc(const ac_inputs *in, bool backward, ac_kernel_outputs *h, ac_err *err)
{
    const ac_problem *p = &in->p;
    size_t es = ac_dtype_size(ac_inputs_out_dtype(in));
    memset(h, 0, sizeof *h);
    h->q_bytes = ac_q_elems(p) * es;
    h->kv_bytes = ac_kv_elems(p) * es;
    h->o_bytes = ac_o_elems(p) * es;
    h->v_bytes = ac_v_elems(p) * es;
    h->lse_bytes = ac_lse_elems(p) * sizeof(float);
    h->o = malloc(h->o_bytes + 1); /* + 1: THD with no rows has 0 bytes */
    h->lse = malloc(h->lse_bytes + 1);
    if (backward) {
        h->dq = malloc(h->q_bytes + 1);
        h->dk = malloc(h->kv_bytes + 1);
        h->dv = malloc(h->v_bytes + 1);
    }
    if (p->dropout_p > 0.0) { /* the keep mask the forward draws (dropout.h) */
        h->dropout_bytes = (ac_dropout_elems(p) + 7) / 8;
        h->dropout_bits = malloc(h->dropout_bytes + 1);
    }
    if (backward && p->sinks) { /* the variants' parameter gradients */
        h->dsink_bytes = (size_t)p->heads_q * sizeof(float);
        h->dsink = malloc(h->dsink_bytes);
    }
    if (backward && p->bias) {
        h->dbias_bytes = ac_bias_elems(p) * ac_dtype_size(p->bias_dtype);
        h->dbias = malloc(h->dbias_bytes + 1);
    }
    if (!h->o || !h->lse || (backward && (!h->dq || !h->dk || !h->dv)) || (h->dsink_bytes && !h->dsink) ||
        (h->dbias_bytes && !h->dbias) || (h->dropout_bytes && !h->dropout_bits)) {
        ac_kernel_outputs_free(h);
        return ac_fail(err, AC_ERR_ENV, "out of memory for the kernel's outputs (%zu bytes each)", h->q_bytes);
    }
    return AC_OK;
}

double ac_kernel_deadline_s(const ac_kernel *k, const ac_problem *p, bool backward_call)
{
    double flops = 4.0 * p->batch * p->heads_q * (double)p->seqlen_q * (double)p->seqlen_k * p->head_dim;
    double rate = k->device == AC_DEV_CUDA ? 1e9 : 1e7;
    return fmax(10.0, (backward_call ? 2.5 : 1.0) * flops / rate);
}

/* ---- one entry: armed, called (here or in the worker), checked ------------------ */

typedef struct {
    const ac_kernel *k;
    const ac_inputs *in;
    const ac_run_opts *o;
    ac_arena_layout l;
    uint8_t *base;
} kernel_run;

static int run_entry(const kernel_run *x, ac_entry e, const ac_kernel_outputs *fwd, ac_err *err)
{
    ac_arena_arm(&x->l, e, x->base);
    int st;
    if (x->o->isolate) {
        double limit = x->o->kernel_timeout_s > 0 ? x->o->kernel_timeout_s
                                                  : ac_kernel_deadline_s(x->k, &x->in->p, e == AC_ENTRY_BACKWARD);
        st = ac_worker_call(x->k, e, &x->in->p, &x->l, limit, err);
    } else {
        st = ac_call_entry(x->k, e, &x->in->p, &x->l, x->base, err);
    }
    if (st == AC_KERNEL_FAULT) /* it died, hung or faulted: what it left in the arena is beside the point */
        return st;
    ac_err scribble = {{0}};
    int chk = ac_arena_check(&x->l, e, x->base, x->in, fwd ? fwd->o : NULL, fwd ? fwd->lse : NULL, &scribble);
    if (chk != AC_OK) { /* a kernel that wrote out of bounds may have damaged its process too */
        if (x->o->isolate)
            ac_worker_retire();
        *err = scribble;
        return chk;
    }
    return st;
}

static void copy_out(const kernel_run *x, ac_buf b, void *dst) { memcpy(dst, x->base + x->l.off[b], x->l.bytes[b]); }

static int run_entries(const kernel_run *x, bool backward, ac_kernel_outputs *h, ac_err *err)
{
    int st = run_entry(x, AC_ENTRY_FORWARD, NULL, err);
    if (st != AC_OK)
        return st;
    copy_out(x, AC_BUF_O, h->o);
    copy_out(x, AC_BUF_LSE, h->lse);
    if (h->dropout_bits)
        copy_out(x, AC_BUF_DROPOUT, h->dropout_bits);
    if (!backward)
        return AC_OK;
    if ((st = run_entry(x, AC_ENTRY_BACKWARD, h, err)) != AC_OK)
        return st;
    copy_out(x, AC_BUF_DQ, h->dq);
    copy_out(x, AC_BUF_DK, h->dk);
    copy_out(x, AC_BUF_DV, h->dv);
    if (h->dsink)
        copy_out(x, AC_BUF_DSINK, h->dsink);
    if (h->dbias)
        copy_out(x, AC_BUF_DBIAS, h->dbias);
    return AC_OK;
}

int ac_run_kernel(const ac_kernel *k, const ac_inputs *in, bool backward, const ac_run_opts *o, ac_kernel_outputs *out,
                  ac_err *err)
{
    ac_run_opts here = *o;
    here.isolate = o->isolate && !k->own_process; /* an --exec kernel is a process already */
    o = &here;
    kernel_run x = {.k = k, .in = in, .o = o};
    ac_arena_plan(in, backward, &x.l);
    int st = outputs_alloc(in, backward, out, err);
    if (st != AC_OK)
        return st;
    uint8_t *own = o->isolate ? NULL : aligned_alloc(256, x.l.total); /* --in-process: one per case */
    x.base = o->isolate ? ac_worker_arena(x.l.total, err) : own;
    if (!x.base)
        return o->isolate ? AC_ERR_ENV
                          : ac_fail(err, AC_ERR_ENV, "out of memory for the kernel's buffers (%llu bytes)",
                                    (unsigned long long)x.l.total);
    ac_arena_put_inputs(&x.l, in, x.base);
    st = run_entries(&x, backward, out, err);
    free(own);
    return st;
}

/* ---- a kernel fault as a verdict ---------------------------------------------------- */

void ac_result_kernel_fault(const ac_kernel *k, const ac_err *fault, ac_result *r)
{
    const char *msg = fault->msg, *colon = strchr(msg, ':');
    size_t len = colon ? (size_t)(colon - msg) : 0;
    bool named = len > 0 && len < 32 && strspn(msg, "abcdefghijklmnopqrstuvwxyz0123456789-") == len;
    const char *rest = named ? colon + 1 + strspn(colon + 1, " ") : msg;
    char cls[32];
    snprintf(cls, sizeof cls, "%.*s", named ? (int)len : 5, named ? msg : "fault");
    const char *plugin = ac_plugin_path_of(k);
    r->verdict = AC_VERDICT_FAIL;
    r->status = AC_OK;
    memset(r->m, 0, sizeof r->m);
    snprintf(r->kind, sizeof r->kind, "kernel:%s", cls);
    snprintf(r->why, sizeof r->why, "%s: kernel %s%s%s%s: %s", cls, k->name, plugin ? " (plugin " : "",
             plugin ? plugin : "", plugin ? ")" : "", rest);
}

/* ---- compare and gate ---------------------------------------------------- */

static void compare_all(const ac_inputs *in, const ac_kernel_outputs *h, const ac_reference *ref, bool backward,
                        ac_metrics m[AC_OUT_COUNT])
{
    memset(m, 0, sizeof(ac_metrics) * AC_OUT_COUNT);
    ac_compare(in, AC_OUT_O, h->o, ref->o, ref->e_o, ref->naive_o, &m[AC_OUT_O]);
    ac_compare(in, AC_OUT_LSE, h->lse, ref->lse, ref->e_lse, ref->naive_lse, &m[AC_OUT_LSE]);
    if (!backward)
        return;
    ac_compare(in, AC_OUT_DQ, h->dq, ref->dq, ref->e_dq, ref->naive_dq, &m[AC_OUT_DQ]);
    ac_compare(in, AC_OUT_DK, h->dk, ref->dk, ref->e_dk, ref->naive_dk, &m[AC_OUT_DK]);
    ac_compare(in, AC_OUT_DV, h->dv, ref->dv, ref->e_dv, ref->naive_dv, &m[AC_OUT_DV]);
    if (h->dsink) /* the variants' parameter gradients */
        ac_compare(in, AC_OUT_DSINK, h->dsink, ref->dsink, ref->e_dsink, NULL, &m[AC_OUT_DSINK]);
    if (h->dbias)
        ac_compare(in, AC_OUT_DBIAS, h->dbias, ref->dbias, ref->e_dbias, NULL, &m[AC_OUT_DBIAS]);
}

/* Marks r as stopped by status st with err's message. */
static int stop(ac_result *r, int st, const ac_err *err)
{
    r->verdict = AC_VERDICT_ERROR;
    r->status = st;
    snprintf(r->why, sizeof r->why, "%s", err ? err->msg : "");
    snprintf(r->kind, sizeof r->kind, "%s", st == AC_ERR_ENV ? "error:environment" : "error:input");
    return st;
}

/* ---- dropout: the kernel's forward again, for dropout.h's seed checks ------- */

typedef struct {
    const ac_kernel *k;
    const ac_inputs *in;
    const ac_run_opts *o;
} rerun_ctx;

/* The forward once more with another seed, through the same runner (the
 * worker, the arena's guards and checks): its keep bits into bits. */
static int rerun_forward(void *arg, uint64_t seed, uint8_t *bits, ac_err *err)
{
    const rerun_ctx *c = arg;
    ac_inputs in = *c->in; /* a view: nothing of it is freed here */
    in.p.dropout_seed = seed;
    ac_kernel_outputs h;
    int st = ac_run_kernel(c->k, &in, false, c->o, &h, err);
    if (st == AC_OK)
        memcpy(bits, h.dropout_bits, h.dropout_bytes);
    ac_kernel_outputs_free(&h);
    return st;
}

/* Reference, comparison, gate and diagnosis of the kernel's outputs h; in
 * carries the kernel's keep mask with dropout. */
static int judge_outputs(const ac_inputs *in, const ac_kernel_outputs *h, bool backward, const ac_budgets *b,
                         const ac_run_opts *o, ac_result *r, ac_err *err)
{
    ac_reference ref;
    int st = ac_reference_make(in, backward, o->cert_rows, &ref, err);
    if (st == AC_OK) {
        r->has_backward = backward;
        compare_all(in, h, &ref, backward, r->m);
        r->cert = ref.cert;
        r->verdict = ac_gate(in, r->m, b, r->why, sizeof r->why, r->kind, sizeof r->kind);
        const void *got[AC_OUT_COUNT] = {h->o, h->lse, h->dq, h->dk, h->dv, h->dsink, h->dbias};
        ac_err diag_err; /* a diagnosis that runs out of memory leaves the verdict as it is */
        if (r->verdict == AC_VERDICT_FAIL)
            ac_diagnose(in, &ref, got, r->m, r->why, sizeof r->why, &diag_err);
        ac_reference_note(&ref, &r->cert, &r->ref, r->why, sizeof r->why);
    }
    ac_reference_free(&ref);
    return st;
}

int ac_run_dropout_checks(const ac_kernel *k, const ac_inputs *in, const ac_run_opts *o, const uint8_t *keep,
                          ac_result *r, ac_err *err)
{
    rerun_ctx rc = {k, in, o};
    return ac_dropout_checks(&in->p, keep, k ? rerun_forward : NULL, &rc, r, err);
}

static int run_loaded(const ac_kernel *k, const ac_inputs *in_case, const ac_budgets *b, const ac_run_opts *o,
                      ac_result *r, ac_err *err)
{
    ac_inputs ref_in = *in_case, *in = &ref_in; /* a view; with dropout the reference's gets the kernel's mask */
    /* a paged KV cache is a decode-time layout, and fp8 (issue 17) is forward only */
    bool backward = o->backward && k->caps.backward && k->backward != NULL && !ac_problem_paged(&in->p) &&
        !ac_dtype_is_fp8(in_case->c.dtype);
    int st = ac_kernel_supports(k, &in->p, in->c.dtype, backward, err);
    if (st != AC_OK) {
        r->unsupported = true;
        return stop(r, st, err);
    }
    ac_kernel_outputs h;
    uint8_t *keep = NULL;
    st = ac_run_kernel(k, in, backward, o, &h, err);
    if (st == AC_OK && h.dropout_bits) { /* (a): judged against the mask it drew */
        if (!(keep = malloc(ac_dropout_elems(&in->p) + 1)))
            st = ac_fail(err, AC_ERR_ENV, "out of memory for the dropout keep mask");
        else
            ac_dropout_unpack(&in->p, h.dropout_bits, keep), ref_in.p.dropout_keep = keep;
    }
    if (st == AC_OK)
        st = judge_outputs(in, &h, backward, b, o, r, err);
    if (st == AC_OK && keep && r->verdict == AC_VERDICT_PASS) /* (b), (c): dropout.h */
        st = ac_run_dropout_checks(k, in_case, o, keep, r, err);
    free(keep);
    ac_kernel_outputs_free(&h);
    if (st == AC_KERNEL_FAULT) { /* a verdict on the kernel, not an error of the run */
        ac_result_kernel_fault(k, err, r);
        return AC_OK;
    }
    return st == AC_OK ? AC_OK : stop(r, st, err);
}

static _Thread_local const char *current_line;

const char *ac_run_current_line(void) { return current_line; }

int ac_run_case(const ac_kernel *k, const ac_case *c, const ac_budgets *b, const ac_run_opts *o, ac_result *r,
                ac_err *err)
{
    double t0 = ac_now_seconds();
    memset(r, 0, sizeof *r);
    r->dtype = c->dtype;
    ac_case_format(c, r->line, sizeof r->line); /* AC_CASE_LINE_MAX holds the longest valid line */
    ac_inputs in;
    memset(&in, 0, sizeof in);
    /* the gpu tier's context and cuBLAS handle are made while the inputs are drawn */
    ac_reference_prepare(c, o->backward && k->caps.backward && k->backward && !ac_dtype_is_fp8(c->dtype));
    int st = ac_inputs_make(c, &in, err);
    if (st != AC_OK)
        stop(r, st, err);
    else {
        current_line = r->line;
        st = run_loaded(k, &in, b, o, r, err);
        current_line = NULL;
    }
    ac_inputs_free(&in);
    r->seconds = ac_now_seconds() - t0;
    return st;
}
