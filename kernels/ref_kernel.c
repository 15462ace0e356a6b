/* kernels/ref_kernel.c — ref-fp64: the fp64 reference wrapped as a host kernel.
 * Inputs widened exactly, ref_forward_fp64 / ref_backward_fp64, outputs rounded
 * to the dtype (LSE to float).  It is the kernel the harness must pass end to
 * end with no other kernel present: its only error is the final rounding. */
#include <math.h>
#include <stdlib.h>

#include "kernel.h"

#define ALL_DTYPES ((1u << AC_F32) | (1u << AC_F16) | (1u << AC_BF16))
#define ALL_LAYOUTS AC_LAYOUTS_ALL

static void free_all(double **bufs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(bufs[i]);
}

/* Allocates n double buffers of the given sizes; false (all freed) on failure. */
static bool alloc_all(double **bufs, const size_t *sizes, size_t n)
{
    bool ok = true;
    for (size_t i = 0; i < n; i++) {
        bufs[i] = malloc((sizes[i] ? sizes[i] : 1) * sizeof(double));
        ok = ok && bufs[i];
    }
    if (!ok)
        free_all(bufs, n);
    return ok;
}

static int ref_forward_keep(const ac_kernel *self, const ac_problem *p, ac_dtype t, const ac_fwd_args *a, ac_err *err);

/* Dropout: ref-fp64 draws its keep mask from a hash of (seed, pair), the same
 * in the forward and the backward, and runs the reference given it; *keep is
 * allocated (free it), NULL without dropout. */
static int draw_keep(const ac_problem *p, uint8_t **keep, ac_err *err)
{
    *keep = NULL;
    if (p->dropout_p == 0.0)
        return AC_OK;
    size_t n = ac_dropout_elems(p);
    if (!(*keep = malloc(n + 1)))
        return ac_fail(err, AC_ERR_ENV, "ref-fp64: out of memory for the dropout mask");
    for (size_t x = 0; x < n; x++) {
        uint64_t z = (p->dropout_seed + x) * 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        (*keep)[x] = (double)((z ^ (z >> 31)) >> 11) * 0x1p-53 >= p->dropout_p;
    }
    return AC_OK;
}

static int ref_forward(const ac_kernel *self, const ac_problem *p_in, ac_dtype t, const ac_fwd_args *a, ac_err *err)
{
    ac_problem problem = *p_in, *p = &problem;
    uint8_t *keep = NULL;
    int st0 = draw_keep(p, &keep, err);
    if (st0 != AC_OK)
        return st0;
    p->dropout_keep = keep;
    for (size_t x = 0; keep && a->dropout_mask && x < ac_dropout_elems(p); x++)
        a->dropout_mask[x / 8] =
            (uint8_t)(keep[x] ? a->dropout_mask[x / 8] | (1u << (x % 8)) : a->dropout_mask[x / 8] & ~(1u << (x % 8)));
    st0 = ref_forward_keep(self, p, t, a, err);
    free(keep);
    return st0;
}

/* A paged cache's K and V read through the block table into the contiguous twin's layout. */
static bool gather_pages(const ac_problem *p, double **k, double **v)
{
    ac_problem twin = ac_problem_unpaged(p);
    double *kc = malloc(ac_kv_elems(&twin) * sizeof(double) + 1), *vc = malloc(ac_v_elems(&twin) * sizeof(double) + 1);
    if (!kc || !vc) {
        free(kc), free(vc);
        return false;
    }
    ac_paged_gather(p, AC_TENSOR_K, *k, kc);
    ac_paged_gather(p, AC_TENSOR_V, *v, vc);
    free(*k), free(*v);
    *k = kc, *v = vc;
    return true;
}

static int ref_forward_keep(const ac_kernel *self, const ac_problem *p, ac_dtype t, const ac_fwd_args *a, ac_err *err)
{
    int st = ac_kernel_supports(self, p, t, false, err);
    if (st != AC_OK)
        return st;
    size_t nq = ac_q_elems(p), nkv = ac_kv_elems(p), nl = ac_lse_elems(p), no = ac_o_elems(p), nv = ac_v_elems(p);
    double *b[5]; /* q k v o lse */
    const size_t sizes[5] = {nq, nkv, nv, no, nl};
    if (!alloc_all(b, sizes, 5))
        return ac_fail(err, AC_ERR_ENV, "ref-fp64: out of memory");
    ac_load(t, a->q, nq, b[0]);
    ac_load(t, a->k, nkv, b[1]);
    ac_load(t, a->v, nv, b[2]);
    ac_problem twin = ac_problem_unpaged(p);
    if (ac_problem_paged(p) && !gather_pages(p, &b[1], &b[2])) {
        free_all(b, 5);
        return ac_fail(err, AC_ERR_ENV, "ref-fp64: out of memory");
    }
    st = ref_forward_fp64(&twin, b[0], b[1], b[2], b[3], b[4], err);
    if (st == AC_OK) {
        ac_store(t, b[3], no, a->o);
        for (size_t i = 0; i < nl; i++)
            a->lse[i] = (float)b[4][i];
    }
    free_all(b, 5);
    return st;
}

/* The variants' parameter gradients (dSink), rounded to f32. */
static int ref_params_out(const ac_problem *p, const double *lse, const double *delta, const ac_bwd_args *a,
                          ac_err *err)
{
    if (!p->sinks)
        return AC_OK;
    double *dsink = malloc((size_t)p->heads_q * sizeof(double));
    if (!dsink)
        return ac_fail(err, AC_ERR_ENV, "ref-fp64: out of memory");
    int st = ref_backward_params_fp64(p, lse, delta, dsink, err);
    for (int h = 0; st == AC_OK && h < p->heads_q; h++)
        a->dsink[h] = (float)dsink[h];
    free(dsink);
    return st;
}

/* dBias, rounded to the bias's dtype; b: the backward's q k v o lse dO ... delta. */
static int ref_dbias_out(const ac_problem *p, double *const b[10], const ac_bwd_args *a, ac_err *err)
{
    size_t n = ac_bias_elems(p);
    double *dbias = malloc((n + 1) * sizeof(double));
    if (!dbias)
        return ac_fail(err, AC_ERR_ENV, "ref-fp64: out of memory");
    int st = ref_backward_dbias_fp64(p, b[0], b[1], b[2], b[4], b[5], b[9], dbias, err);
    if (st == AC_OK)
        ac_store(p->bias_dtype, dbias, n, a->dbias);
    free(dbias);
    return st;
}

static int ref_backward_keep(const ac_kernel *self, const ac_problem *p, ac_dtype t, const ac_bwd_args *a, ac_err *err);

static int ref_backward(const ac_kernel *self, const ac_problem *p_in, ac_dtype t, const ac_bwd_args *a, ac_err *err)
{
    ac_problem problem = *p_in;
    uint8_t *keep = NULL;
    int st = draw_keep(&problem, &keep, err);
    problem.dropout_keep = keep;
    if (st == AC_OK)
        st = ref_backward_keep(self, &problem, t, a, err);
    free(keep);
    return st;
}

static int ref_backward_keep(const ac_kernel *self, const ac_problem *p, ac_dtype t, const ac_bwd_args *a, ac_err *err)
{
    int st = ac_kernel_supports(self, p, t, true, err);
    if (st != AC_OK)
        return st;
    size_t nq = ac_q_elems(p), nkv = ac_kv_elems(p), nl = ac_lse_elems(p), no = ac_o_elems(p), nv = ac_v_elems(p);
    double *b[10]; /* q k v o lse dO dq dk dv delta */
    const size_t sizes[10] = {nq, nkv, nv, no, nl, no, nq, nkv, nv, nl};
    if (!alloc_all(b, sizes, 10))
        return ac_fail(err, AC_ERR_ENV, "ref-fp64: out of memory");
    ac_load(t, a->q, nq, b[0]);
    ac_load(t, a->k, nkv, b[1]);
    ac_load(t, a->v, nv, b[2]);
    ac_load(t, a->d_o, no, b[5]);
    /* LSE recomputed in double, not read back from the f32 it was stored in: a
     * fused kernel's backward recomputes S the way its forward did, so its own
     * rounded LSE is consistent with its S; this kernel's S is exact, and an f32
     * LSE would put a relative error of |LSE| * 2^-24 on every P (exp(256) when
     * scores reach 1e10).  O is the given, rounded one, as a training step has. */
    st = ref_forward_fp64(p, b[0], b[1], b[2], b[3], b[4], err);
    ac_load(t, a->o, no, b[3]);
    if (st == AC_OK)
        st = ref_backward_fp64(p, b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], err);
    if (st == AC_OK) {
        ac_store(t, b[6], nq, a->dq);
        ac_store(t, b[7], nkv, a->dk);
        ac_store(t, b[8], nv, a->dv);
        st = ref_params_out(p, b[4], b[9], a, err);
    }
    if (st == AC_OK && p->bias)
        st = ref_dbias_out(p, b, a, err);
    free_all(b, 10);
    return st;
}

const ac_kernel ac_kernel_ref_fp64 = {
    .name = "ref-fp64",
    .description = "the fp64 reference (OpenBLAS dgemm, softmax in double) rounded to the dtype; LSE in float",
    .caps = {.dtypes = ALL_DTYPES,
             .n_head_dims = 0,
             .max_head_dim = AC_MAX_HEAD_DIM,
             .masks = AC_MASKCAP_ALL,
             .layouts = ALL_LAYOUTS,
             .gqa = true,
             .varlen = true,
             .backward = true,
             .max_seqlen = 0,
             .variants = AC_VAR_ALL},
    .device = AC_DEV_CPU,
    .memory = AC_MEM_HOST,
    .available = NULL,
    .forward = ref_forward,
    .backward = ref_backward,
    .ctx = NULL,
};
