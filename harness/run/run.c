/* harness/run/run.c — the runner: one case end to end.
 *
 *   inputs (ac_inputs_make) -> poisoned outputs -> kernel forward (O, LSE)
 *   -> kernel backward fed the kernel's own O and LSE (dQ, dK, dV)
 *   -> reference bundle -> ac_compare per output -> ac_gate.
 *
 * Outputs are poisoned before every kernel call, so an element the kernel never
 * writes is caught as "unwritten" by the comparator.  For AC_MEM_CUDA kernels the
 * inputs and the poisoned outputs are staged on the device and downloaded after,
 * so the poison travels there and back too.
 *
 * A kernel that reports AC_ERR_ENV (a device fault) or AC_ERR_INPUT (a problem
 * outside what it can do) stops the case with that status: an error, never a
 * verdict.  A case outside the kernel's claimed capabilities is not run at all
 * (r->unsupported), so a fixture file can be replayed on any kernel. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness/run/inputs.h"
#include "harness/run/reference.h"
#include "harness/run/run.h"

/* Host copies of everything a kernel writes. */
typedef struct {
    void *o, *dq, *dk, *dv; /* dtype bits */
    float *lse;
    size_t q_bytes, kv_bytes, lse_bytes;
} host_outputs;

/* Device mirrors for AC_MEM_CUDA kernels: inputs and outputs. */
typedef struct {
    void *q, *k, *v, *d_o, *o, *lse, *dq, *dk, *dv;
} dev_buffers;

double ac_now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void outputs_free(host_outputs *h)
{
    free(h->o);
    free(h->dq);
    free(h->dk);
    free(h->dv);
    free(h->lse);
    memset(h, 0, sizeof *h);
}

static int outputs_alloc(const ac_inputs *in, bool backward, host_outputs *h, ac_err *err)
{
    size_t es = ac_dtype_size(ac_inputs_out_dtype(in));
    memset(h, 0, sizeof *h);
    h->q_bytes = ac_q_elems(&in->p) * es;
    h->kv_bytes = ac_kv_elems(&in->p) * es;
    h->lse_bytes = ac_lse_elems(&in->p) * sizeof(float);
    h->o = malloc(h->q_bytes);
    h->lse = malloc(h->lse_bytes);
    if (backward) {
        h->dq = malloc(h->q_bytes);
        h->dk = malloc(h->kv_bytes);
        h->dv = malloc(h->kv_bytes);
    }
    if (!h->o || !h->lse || (backward && (!h->dq || !h->dk || !h->dv))) {
        outputs_free(h);
        return ac_fail(err, AC_ERR_ENV, "out of memory for the kernel's outputs (%zu bytes each)", h->q_bytes);
    }
    return AC_OK;
}

static void dev_free_all(dev_buffers *d)
{
    void *all[] = {d->q, d->k, d->v, d->d_o, d->o, d->lse, d->dq, d->dk, d->dv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i])
            ac_dev_free(all[i]);
    memset(d, 0, sizeof *d);
}

/* Allocates *dev and uploads host into it. */
static int dev_stage(void **dev, const void *host, size_t bytes, ac_err *err)
{
    int st = ac_dev_alloc(dev, bytes, err);
    if (st != AC_OK)
        return st;
    return ac_dev_upload(*dev, host, bytes, err);
}

/* ---- forward and backward, on host memory or staged on the device ---------- */

static int forward_host(const ac_kernel *k, const ac_inputs *in, host_outputs *h, ac_err *err)
{
    ac_fwd_args a = {.q = in->q, .k = in->k, .v = in->v, .o = h->o, .lse = h->lse};
    return k->forward(k, &in->p, in->c.dtype, &a, err);
}

static int forward_cuda(const ac_kernel *k, const ac_inputs *in, host_outputs *h, dev_buffers *d, ac_err *err)
{
    int st;
    if ((st = dev_stage(&d->q, in->q, h->q_bytes, err)) != AC_OK ||
        (st = dev_stage(&d->k, in->k, h->kv_bytes, err)) != AC_OK ||
        (st = dev_stage(&d->v, in->v, h->kv_bytes, err)) != AC_OK ||
        (st = dev_stage(&d->o, h->o, h->q_bytes, err)) != AC_OK ||
        (st = dev_stage(&d->lse, h->lse, h->lse_bytes, err)) != AC_OK)
        return st;
    ac_fwd_args a = {.q = d->q, .k = d->k, .v = d->v, .o = d->o, .lse = d->lse};
    if ((st = k->forward(k, &in->p, in->c.dtype, &a, err)) != AC_OK)
        return st;
    if ((st = ac_dev_sync(err)) != AC_OK)
        return st;
    if ((st = ac_dev_download(h->o, d->o, h->q_bytes, err)) != AC_OK)
        return st;
    return ac_dev_download(h->lse, d->lse, h->lse_bytes, err);
}

static int backward_host(const ac_kernel *k, const ac_inputs *in, host_outputs *h, ac_err *err)
{
    ac_bwd_args a = {.q = in->q, .k = in->k, .v = in->v, .o = h->o, .d_o = in->d_o, .lse = h->lse,
                     .dq = h->dq, .dk = h->dk, .dv = h->dv};
    return k->backward(k, &in->p, in->c.dtype, &a, err);
}

/* The device already holds q, k, v and the kernel's own o, lse from the forward. */
static int backward_cuda(const ac_kernel *k, const ac_inputs *in, host_outputs *h, dev_buffers *d, ac_err *err)
{
    int st;
    if ((st = dev_stage(&d->d_o, in->d_o, h->q_bytes, err)) != AC_OK ||
        (st = dev_stage(&d->dq, h->dq, h->q_bytes, err)) != AC_OK ||
        (st = dev_stage(&d->dk, h->dk, h->kv_bytes, err)) != AC_OK ||
        (st = dev_stage(&d->dv, h->dv, h->kv_bytes, err)) != AC_OK)
        return st;
    ac_bwd_args a = {.q = d->q, .k = d->k, .v = d->v, .o = d->o, .d_o = d->d_o, .lse = d->lse,
                     .dq = d->dq, .dk = d->dk, .dv = d->dv};
    if ((st = k->backward(k, &in->p, in->c.dtype, &a, err)) != AC_OK)
        return st;
    if ((st = ac_dev_sync(err)) != AC_OK)
        return st;
    if ((st = ac_dev_download(h->dq, d->dq, h->q_bytes, err)) != AC_OK ||
        (st = ac_dev_download(h->dk, d->dk, h->kv_bytes, err)) != AC_OK)
        return st;
    return ac_dev_download(h->dv, d->dv, h->kv_bytes, err);
}

/* Poisons, runs forward (and backward), leaves the kernel's outputs in h. */
static int run_kernel(const ac_kernel *k, const ac_inputs *in, bool backward, host_outputs *h, ac_err *err)
{
    ac_dtype t = ac_inputs_out_dtype(in);
    size_t nq = ac_q_elems(&in->p), nkv = ac_kv_elems(&in->p);
    bool on_device = k->memory == AC_MEM_CUDA;
    dev_buffers d = {0};
    ac_poison(t, h->o, nq);
    ac_poison_f32(h->lse, ac_lse_elems(&in->p));
    int st = on_device ? forward_cuda(k, in, h, &d, err) : forward_host(k, in, h, err);
    if (st == AC_OK && backward) {
        ac_poison(t, h->dq, nq);
        ac_poison(t, h->dk, nkv);
        ac_poison(t, h->dv, nkv);
        st = on_device ? backward_cuda(k, in, h, &d, err) : backward_host(k, in, h, err);
    }
    dev_free_all(&d);
    return st;
}

/* ---- compare and gate ---------------------------------------------------- */

static void compare_all(const ac_inputs *in, const host_outputs *h, const ac_reference *ref, bool backward,
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

static int run_loaded(const ac_kernel *k, const ac_inputs *in, const ac_budgets *b, const ac_run_opts *o,
                      ac_result *r, ac_err *err)
{
    bool backward = o->backward && k->caps.backward && k->backward != NULL;
    int st = ac_kernel_supports(k, &in->p, in->c.dtype, backward, err);
    if (st != AC_OK) {
        r->unsupported = true;
        return stop(r, st, err);
    }
    host_outputs h;
    if ((st = outputs_alloc(in, backward, &h, err)) != AC_OK)
        return stop(r, st, err);
    st = run_kernel(k, in, backward, &h, err);
    ac_reference ref;
    memset(&ref, 0, sizeof ref);
    if (st == AC_OK)
        st = ac_reference_make(in, backward, o->cert_rows, &ref, err);
    if (st == AC_OK) {
        r->has_backward = backward;
        compare_all(in, &h, &ref, backward, r->m);
        r->cert = ref.cert;
        r->verdict = ac_gate(in, r->m, b, r->why, sizeof r->why, r->kind, sizeof r->kind);
        ac_reference_note(&ref, &r->cert, &r->ref, r->why, sizeof r->why);
    }
    ac_reference_free(&ref);
    outputs_free(&h);
    return st == AC_OK ? AC_OK : stop(r, st, err);
}

int ac_run_case(const ac_kernel *k, const ac_case *c, const ac_budgets *b, const ac_run_opts *o, ac_result *r,
                ac_err *err)
{
    double t0 = ac_now_seconds();
    memset(r, 0, sizeof *r);
    r->dtype = c->dtype;
    if (ac_case_format(c, r->line, sizeof r->line) < 0)
        snprintf(r->line, sizeof r->line, "(case line too long)");
    ac_inputs in;
    memset(&in, 0, sizeof in);
    int st = ac_inputs_make(c, &in, err);
    if (st != AC_OK)
        stop(r, st, err);
    else
        st = run_loaded(k, &in, b, o, r, err);
    ac_inputs_free(&in);
    r->seconds = ac_now_seconds() - t0;
    return st;
}
