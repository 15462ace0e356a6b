/* kernels/cpu_flash_fp8.c — cpu-flash-fp8: FlashAttention-3's fp8 forward on the
 * CPU (issue 17), and its planted bugs.
 *
 * Q, K, V are e4m3/e5m2 codes with f32 descale factors (ref.h, "fp8").  Per
 * (batch, head, query row), K/V tiles of 64 keys over the visible range:
 *   S_ij = (sum_c q_ic k_jc in f32, exact products of fp8 values) * (scale dq_i dk_j) in f32;
 *   the running max m and denominator l in f32 (l sums the unquantised P~);
 *   P~ = exp(S - m) rounded to the declared format: e4m3 as sigma P~ with
 *   sigma = 448 (the row's running max lands on e4m3's largest value), or
 *   bf16 (cpu-flash-fp8-pbf16: only QK^T in fp8, P kept at 16 bits; -pf16 the same in f16);
 *   the P V partial sums of a tile in f32 over the raw V codes, multiplied by
 *   V's descale per run of keys sharing one factor (a block boundary may
 *   fall inside a tile), then added to the rescaled accumulator;
 *   O = acc / (sigma l) rounded to the output dtype (out=), LSE = m + log l.
 * Forward only, as FlashAttention-3's fp8 path. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernel.h"

#define TILE_K 64
#define E4M3_MAX 448.0f

typedef enum {
    FP8_CORRECT = 0,
    FP8_MUT_P_CLAMP, /* P~ scaled by 4096, not onto 448: the largest weights saturate (FlashAttention's bug) */
    FP8_MUT_V_DESCALE_TWICE, /* V's descale applied to the partial sums twice */
    FP8_MUT_TRUNCATE, /* P rounded to e4m3 toward zero, not to nearest */
    FP8_MUT_P_E5M2, /* P rounded to e5m2 though e4m3 is declared */
    FP8_MUT_P_UNSCALED, /* P~ rounded to e4m3 as it is (sigma 1): weights below 2^-10 of the row max flush to 0 */
    FP8_MUT_ACC_E8M13, /* QK^T and PV accumulated as Hopper's fp8 tensor cores do (e8m13, truncated) though f32 is declared */
} fp8_mutant;

typedef struct {
    ac_dtype p_fmt; /* what it declares */
    fp8_mutant mut;
    int acc_bits; /* the fp8 products' accumulator, declared and used: 0 = f32, else ref.h's fp8_acc_bits */
} fp8_params;

/* e4m3 rounded toward zero (the truncation mutant), saturating at 448. */
static float truncate_e4m3(float x)
{
    float a = fabsf(x);
    if (a >= E4M3_MAX)
        return E4M3_MAX;
    int e = a > 0.0f ? ilogbf(a) : -6;
    e = e < -6 ? -6 : e;
    float quantum = ldexpf(1.0f, e - 3);
    return floorf(a / quantum) * quantum;
}

static float round_p(const fp8_params *fp, float p_tilde, float sigma)
{
    switch (fp->mut) {
    case FP8_MUT_TRUNCATE:
        return truncate_e4m3(p_tilde * sigma);
    case FP8_MUT_P_E5M2:
        return ac_fp8_p_round(AC_E5M2, p_tilde * sigma);
    default:
        return ac_dtype_is_fp8(fp->p_fmt) ? ac_fp8_p_round(fp->p_fmt, p_tilde * sigma)
                                          : (float)ac_round(fp->p_fmt, p_tilde);
    }
}

static float sigma_of(const fp8_params *fp)
{
    if (!ac_dtype_is_fp8(fp->p_fmt))
        return 1.0f;
    return fp->mut == FP8_MUT_P_CLAMP ? 4096.0f : fp->mut == FP8_MUT_P_UNSCALED ? 1.0f : (float)AC_FP8_P_SIGMA;
}

typedef struct {
    const ac_problem *p;
    ac_dtype t;
    const ac_fwd_args *a;
    const fp8_params *fp;
    float lut[256]; /* the codes' values, exact in f32 */
} fp8_call;

static float code(const fp8_call *x, const void *buf, size_t at) { return x->lut[((const uint8_t *)buf)[at]]; }

/* Q_i . K_j over the codes in the kernel's accumulator: f32, or the steps of
 * Hopper's fp8 tensor cores (ref.h, ac_fp8_acc_step) with `bits` fraction bits. */
static float codes_dot(const fp8_call *x, const float *q_row, int b, int h_kv, int j, int bits)
{
    const ac_problem *p = x->p;
    if (bits <= 0) {
        float acc = 0.0f;
        for (int c = 0; c < p->head_dim; c++)
            acc += q_row[c] * code(x, x->a->k, ac_kv_index(p, b, h_kv, j, c));
        return acc;
    }
    double acc = 0.0, prod[AC_FP8_ACC_STEP];
    for (int c0 = 0; c0 < p->head_dim; c0 += AC_FP8_ACC_STEP) {
        int n = p->head_dim - c0 < AC_FP8_ACC_STEP ? p->head_dim - c0 : AC_FP8_ACC_STEP;
        for (int c = 0; c < n; c++)
            prod[c] = (double)q_row[c0 + c] * code(x, x->a->k, ac_kv_index(p, b, h_kv, j, c0 + c));
        acc = ac_fp8_acc_step(acc, prod, n, bits);
    }
    return (float)acc;
}

/* s[j - j0] <- S_ij of the visible keys of the tile, -inf elsewhere. */
static void tile_scores(const fp8_call *x, int b, int h, int i, int j0, int j1, const float *q_row, float *s)
{
    const ac_problem *p = x->p;
    int h_kv = ac_kv_head_of(p, h);
    float sq = (float)p->scale * p->descale_q[ac_descale_index(p, AC_TENSOR_Q, b, h, i)];
    for (int j = j0; j < j1; j++) {
        if (!ac_visible(p, b, h, i, j)) {
            s[j - j0] = -INFINITY;
            continue;
        }
        float acc =
            codes_dot(x, q_row, b, h_kv, j, x->fp->mut == FP8_MUT_ACC_E8M13 ? AC_FP8_ACC_HOPPER : x->fp->acc_bits);
        s[j - j0] = acc * (sq * p->descale_k[ac_descale_index(p, AC_TENSOR_K, b, h_kv, j)]);
    }
}

/* part += sum_j pq_j v_j over keys [js, je) in the tensor cores' steps
 * (ref.h, ac_fp8_acc_step): 32 keys counted from key 0, cut where V's
 * descale factor changes. */
static void pv_steps(const fp8_call *x, int b, int h_kv, int js, int je, int j0, const float *pq, float *part, int bits)
{
    const ac_problem *p = x->p;
    double prod[AC_FP8_ACC_STEP];
    while (js < je) {
        int end = (js / AC_FP8_ACC_STEP + 1) * AC_FP8_ACC_STEP;
        end = end < je ? end : je;
        for (int c = 0; c < ac_head_dim_v(p); c++) {
            for (int j = js; j < end; j++)
                prod[j - js] = (double)pq[j - j0] * code(x, x->a->v, ac_v_index(p, b, h_kv, j, c));
            part[c] = (float)ac_fp8_acc_step(part[c], prod, end - js, bits);
        }
        js = end;
    }
}

/* acc += sum_j pq_j v_j, in runs of keys sharing V's descale factor. */
static void tile_pv(const fp8_call *x, int b, int h, int j0, int j1, const float *pq, float *acc, float *part)
{
    const ac_problem *p = x->p;
    int h_kv = ac_kv_head_of(p, h), dv = ac_head_dim_v(p);
    for (int j = j0; j < j1;) {
        size_t g = ac_descale_index(p, AC_TENSOR_V, b, h_kv, j);
        memset(part, 0, (size_t)dv * sizeof *part);
        int run = j, bits = x->fp->mut == FP8_MUT_ACC_E8M13 ? AC_FP8_ACC_HOPPER : x->fp->acc_bits;
        for (; j < j1 && ac_descale_index(p, AC_TENSOR_V, b, h_kv, j) == g; j++)
            if (pq[j - j0] != 0.0f && bits <= 0)
                for (int c = 0; c < dv; c++)
                    part[c] += pq[j - j0] * code(x, x->a->v, ac_v_index(p, b, h_kv, j, c));
        if (bits > 0)
            pv_steps(x, b, h_kv, run, j, j0, pq, part, bits);
        float dsc = p->descale_v[g];
        if (x->fp->mut == FP8_MUT_V_DESCALE_TWICE)
            dsc *= p->descale_v[g];
        for (int c = 0; c < dv; c++)
            acc[c] += part[c] * dsc;
    }
}

static void forward_row(const fp8_call *x, int b, int h, int i, float *buf)
{
    const ac_problem *p = x->p;
    int d = p->head_dim, dv = ac_head_dim_v(p), lo, hi;
    float *q_row = buf, *acc = q_row + d, *part = acc + dv, *s = part + dv;
    float m = -INFINITY, l = 0.0f, sigma = sigma_of(x->fp);
    for (int c = 0; c < d; c++)
        q_row[c] = code(x, x->a->q, ac_q_index(p, b, h, i, c));
    memset(acc, 0, (size_t)dv * sizeof *acc);
    ac_visible_range(p, b, i, &lo, &hi);
    for (int j0 = lo; j0 < hi; j0 += TILE_K) {
        int j1 = j0 + TILE_K < hi ? j0 + TILE_K : hi;
        tile_scores(x, b, h, i, j0, j1, q_row, s);
        float m_new = m;
        for (int j = 0; j < j1 - j0; j++)
            m_new = s[j] > m_new ? s[j] : m_new;
        if (m_new == -INFINITY)
            continue; /* nothing visible yet */
        float alpha = m == -INFINITY ? 0.0f : expf(m - m_new), rowsum = 0.0f;
        for (int j = 0; j < j1 - j0; j++) {
            float pt = s[j] == -INFINITY ? 0.0f : expf(s[j] - m_new);
            rowsum += pt;
            s[j] = round_p(x->fp, pt, sigma);
        }
        l = l * alpha + rowsum;
        for (int c = 0; c < dv; c++)
            acc[c] *= alpha;
        tile_pv(x, b, h, j0, j1, s, acc, part);
        m = m_new;
    }
    ac_dtype out = p->fp8_out;
    for (int c = 0; c < dv; c++)
        ac_bits_put(out, x->a->o, ac_o_index(p, b, h, i, c), ac_narrow(out, l > 0.0f ? acc[c] / (sigma * l) : 0.0f));
    x->a->lse[ac_lse_index(p, b, h, i)] = l > 0.0f ? m + logf(l) : -INFINITY;
}

static int fp8_forward(const ac_kernel *self, const ac_problem *p, ac_dtype t, const ac_fwd_args *a, ac_err *err)
{
    int st = ac_problem_validate(p, 0, err);
    if (st == AC_OK)
        st = ac_kernel_supports(self, p, t, false, err);
    if (st != AC_OK)
        return st;
    if (!ac_problem_is_fp8(p) || !p->descale_q || !p->descale_k || !p->descale_v)
        return ac_fail(err, AC_ERR_INPUT, "%s: an fp8 problem with its descale factors is needed", self->name);
    fp8_call x = {p, t, a, self->ctx, {0}};
    for (int c = 0; c < 256; c++)
        x.lut[c] = (float)ac_widen(t, (uint32_t)c);
    int d = p->head_dim, dv = ac_head_dim_v(p);
    float *buf = malloc(((size_t)d + 2 * (size_t)dv + TILE_K) * sizeof *buf);
    if (!buf)
        return ac_fail(err, AC_ERR_ENV, "%s: out of memory", self->name);
    for (int b = 0; b < p->batch; b++)
        for (int h = 0; h < p->heads_q; h++)
            for (int i = 0; i < ac_stored_rows(p, b, true); i++) {
                if (i < ac_seqlen_q_of(p, b)) {
                    forward_row(&x, b, h, i, buf);
                    continue;
                }
                for (int c = 0; c < dv; c++) /* padding rows: zeros, never compared */
                    ac_bits_put(p->fp8_out, a->o, ac_o_index(p, b, h, i, c), 0);
                a->lse[ac_lse_index(p, b, h, i)] = -INFINITY;
            }
    free(buf);
    return AC_OK;
}

#define FP8_CAPS(p_fmt, qk) \
    { \
        .dtypes = AC_DTYPES_FP8, .n_head_dims = 0, .max_head_dim = AC_MAX_HEAD_DIM, .masks = AC_MASKCAP_ALL, \
        .layouts = AC_LAYOUTS_ALL, .gqa = true, .varlen = true, .backward = false, .max_seqlen = 0, \
        .variants = AC_VAR_DV | AC_VAR_PAGED, .fp8_p = (p_fmt), .fp8_acc_bits = (qk), \
    }

#define FP8_KERNEL_QK(kname, p_fmt, mutant, qk, what) \
    { \
        .name = kname, .description = what, .caps = FP8_CAPS(p_fmt, qk), .device = AC_DEV_CPU, .memory = AC_MEM_HOST, \
        .forward = fp8_forward, .backward = NULL, .ctx = &(const fp8_params){p_fmt, mutant, qk}, \
    }
#define FP8_KERNEL(kname, p_fmt, mutant, what) FP8_KERNEL_QK(kname, p_fmt, mutant, 0, what)

static const ac_kernel fp8_kernels[] = {
    FP8_KERNEL("cpu-flash-fp8", AC_E4M3, FP8_CORRECT,
               "FlashAttention-3's fp8 forward: QK^T of fp8 codes in f32, P scaled onto 448 by the row max and "
               "rounded to e4m3, PV in f32 with V's descale per run of keys"),
    FP8_KERNEL("cpu-flash-fp8-pbf16", AC_BF16, FP8_CORRECT,
               "fp8 QK^T and PV operands, P kept in bf16 (the other common recipe)"),
    FP8_KERNEL("cpu-flash-fp8-pf16", AC_F16, FP8_CORRECT,
               "fp8 QK^T and PV operands, P kept in f16 (cuda-decode-fp8's recipe: codes widened exactly to f16)"),
    FP8_KERNEL_QK(
        "cpu-flash-fp8-acc13", AC_E4M3, FP8_CORRECT, AC_FP8_ACC_HOPPER,
        "cpu-flash-fp8 with QK^T and PV accumulated as Hopper's fp8 tensor cores do (e8m13, truncated every 32 "
        "products), and declared so (acc=e8m13)"),
    FP8_KERNEL(
        "cpu-flash-fp8-mutant-p-clamp-448", AC_E4M3, FP8_MUT_P_CLAMP,
        "P scaled by 4096 instead of onto 448: the largest weights saturate at e4m3's 448 (FlashAttention-3's bug)"),
    FP8_KERNEL("cpu-flash-fp8-mutant-v-descale-twice", AC_E4M3, FP8_MUT_V_DESCALE_TWICE,
               "V's descale factor applied twice"),
    FP8_KERNEL("cpu-flash-fp8-mutant-e4m3-truncate", AC_E4M3, FP8_MUT_TRUNCATE,
               "P rounded to e4m3 toward zero instead of to nearest even"),
    FP8_KERNEL("cpu-flash-fp8-mutant-p-e5m2", AC_E4M3, FP8_MUT_P_E5M2, "P rounded to e5m2 though e4m3 is declared"),
    FP8_KERNEL("cpu-flash-fp8-mutant-acc-e8m13", AC_E4M3, FP8_MUT_ACC_E8M13,
               "QK^T and PV accumulated as Hopper's fp8 tensor cores do (e8m13, truncated) though f32 is declared"),
    FP8_KERNEL("cpu-flash-fp8-mutant-p-unscaled", AC_E4M3, FP8_MUT_P_UNSCALED,
               "P rounded to e4m3 without the row-max scale: weights below e4m3's smallest subnormal (2^-9 of the "
               "row max) flush to zero"),
};

size_t ac_cpu_flash_fp8_kernels(const ac_kernel **out, size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < sizeof fp8_kernels / sizeof fp8_kernels[0] && n < max; i++)
        out[n++] = &fp8_kernels[i];
    return n;
}
