/* harness/run/inputs_fp8.c — fp8 inputs: the descale factors and the
 * quantisation of Q, K, V (issue 17).
 *
 * The tensors are first drawn as doubles from the case's distribution (run/
 * inputs.c); then per descale group (ac_descale_index: the tensor, a (b, kv
 * head), or a block of rows of a head) a factor d is drawn so that the group's
 * largest magnitude amax lands at the format's largest value times 2^-j:
 *   60%  j = 0         the whole range, amax at 448 (e4m3) or 57344 (e5m2);
 *   20%  j = -1, -2    saturating: the top of the group clamps at max (satfinite);
 *   20%  j = 4 .. 10   small: much of the group in the subnormals or 0.
 * d = f32(amax 2^j / max); the stored code is ac_narrow(x / d) (RNE,
 * satfinite) and the exact input is code * d, a product of a 4- (3-) bit and a
 * 24-bit significand, exact in double: what every reference tier reads. */
#include <float.h>
#include <math.h>
#include <stdlib.h>

#include "harness/run/inputs_internal.h"
#include "ref/rng.h"

static double unif(uint64_t *state) { return (double)(ac_splitmix64(state) >> 11) * 0x1p-53; }

static float draw_descale(double amax, double top, uint64_t *state)
{
    if (!(amax > 0.0) || !isfinite(amax))
        return 1.0f;
    double u = unif(state);
    uint64_t pick = ac_splitmix64(state);
    int j = u < 0.6 ? 0 : u < 0.8 ? -1 - (int)(pick % 2) : 4 + (int)(pick % 7);
    float d = (float)(ldexp(amax, j) / top);
    return d >= FLT_MIN && d <= FLT_MAX ? d : d < FLT_MIN ? FLT_MIN : FLT_MAX;
}

/* Calls fn on every stored element of tensor `kind` with its descale group. */
typedef void (*elem_fn)(void *ctx, size_t at, size_t group);

static void each_element(const ac_problem *p, ac_tensor_kind kind, elem_fn fn, void *ctx)
{
    bool q_side = kind == AC_TENSOR_Q;
    int heads = q_side ? p->heads_q : p->heads_kv, cols = ac_tensor_dim(p, kind);
    for (int b = 0; b < p->batch; b++)
        for (int h = 0; h < heads; h++)
            for (int s = 0; s < ac_stored_rows(p, b, q_side); s++) {
                size_t g = ac_descale_index(p, kind, b, h, s), row = ac_tensor_index(p, kind, b, h, s, 0);
                for (int c = 0; c < cols; c++)
                    fn(ctx, row + c, g);
            }
}

typedef struct {
    ac_dtype t;
    void *bits;
    double *wide, *amax;
    const float *descale;
} quant_ctx;

static void take_max(void *ctx, size_t at, size_t g)
{
    quant_ctx *q = ctx;
    q->amax[g] = fmax(q->amax[g], fabs(q->wide[at]));
}

static void quantise(void *ctx, size_t at, size_t g)
{
    quant_ctx *q = ctx;
    double d = q->descale[g];
    uint32_t code = ac_narrow(q->t, q->wide[at] / d);
    ac_bits_put(q->t, q->bits, at, code);
    q->wide[at] = ac_widen(q->t, code) * d; /* exact */
}

static int quantise_tensor(ac_inputs *in, ac_tensor_kind kind, void *bits, double *wide, float **descale,
                           uint64_t *state, ac_err *err)
{
    size_t n = ac_descale_count(&in->p, kind);
    double *amax = calloc(n, sizeof *amax);
    *descale = malloc(n * sizeof **descale);
    if (!amax || !*descale) {
        free(amax);
        return ac_fail(err, AC_ERR_ENV, "inputs: out of memory for %zu descale factors", n);
    }
    quant_ctx q = {in->c.dtype, bits, wide, amax, *descale};
    each_element(&in->p, kind, take_max, &q);
    for (size_t g = 0; g < n; g++)
        (*descale)[g] = draw_descale(amax[g], ac_max_finite(in->c.dtype), state);
    each_element(&in->p, kind, quantise, &q);
    free(amax);
    return AC_OK;
}

void inputs_fp8_problem(const ac_case *c, ac_problem *p)
{
    if (!ac_dtype_is_fp8(c->dtype))
        return;
    p->fp8_out = c->out_dtype;
    p->fp8_p = c->p_dtype;
    p->fp8_acc_bits = c->acc_bits;
    p->descale_rows = c->descale_rows;
}

int inputs_fp8_quantise(ac_inputs *in, ac_err *err)
{
    if (!ac_dtype_is_fp8(in->c.dtype))
        return AC_OK;
    uint64_t state = inputs_stream(in->c.seed, INPUTS_STREAM_FP8);
    int st = quantise_tensor(in, AC_TENSOR_Q, in->q, in->qd, &in->descale_q, &state, err);
    if (st == AC_OK)
        st = quantise_tensor(in, AC_TENSOR_K, in->k, in->kd, &in->descale_k, &state, err);
    if (st == AC_OK)
        st = quantise_tensor(in, AC_TENSOR_V, in->v, in->vd, &in->descale_v, &state, err);
    return st;
}
