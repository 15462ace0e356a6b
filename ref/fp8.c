/* ref/fp8.c — fp8 problems: which they are, where their descale factors sit,
 * and P's rounding recipe (docs/DESIGN.md, "fp8").  The dtypes themselves are
 * rows of ref/dtype.c's table. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>

#include "fp64_block.h"
#include "ref.h"

bool ac_problem_is_fp8(const ac_problem *p) { return p->fp8_out != AC_F32; }

static int rows_of(const ac_problem *p, ac_tensor_kind kind) { return kind == AC_TENSOR_Q ? p->seqlen_q : p->seqlen_k; }

static int blocks_of(const ac_problem *p, ac_tensor_kind kind)
{
    return (rows_of(p, kind) + p->descale_rows - 1) / p->descale_rows;
}

size_t ac_descale_count(const ac_problem *p, ac_tensor_kind kind)
{
    if (p->descale_rows == AC_DESCALE_TENSOR)
        return 1;
    if (p->descale_rows == AC_DESCALE_HEAD)
        return (size_t)p->batch * p->heads_kv;
    int heads = kind == AC_TENSOR_Q ? p->heads_q : p->heads_kv;
    return (size_t)p->batch * heads * blocks_of(p, kind);
}

size_t ac_descale_index(const ac_problem *p, ac_tensor_kind kind, int b, int h, int s)
{
    if (p->descale_rows == AC_DESCALE_TENSOR)
        return 0;
    if (p->descale_rows == AC_DESCALE_HEAD) /* Q's heads of a group share their kv head's factor */
        return (size_t)b * p->heads_kv + (kind == AC_TENSOR_Q ? ac_kv_head_of(p, h) : h);
    int heads = kind == AC_TENSOR_Q ? p->heads_q : p->heads_kv;
    return ((size_t)b * heads + h) * blocks_of(p, kind) + s / p->descale_rows;
}

float ac_fp8_p_round(ac_dtype fmt, float p_scaled) { return (float)ac_round(fmt, p_scaled); }

/* One pair's sum_k M_k (ref.h): each step's largest product, running sum
 * before and after, the sums exact enough in double (a bound needs no more). */
static double qk_step_magnitudes(const double *q, const double *k, int d)
{
    double acc = 0.0, total = 0.0;
    for (int c0 = 0; c0 < d; c0 += AC_FP8_ACC_STEP) {
        double big = fabs(acc);
        for (int c = c0; c < c0 + AC_FP8_ACC_STEP && c < d; c++) {
            double pr = q[c] * k[c];
            big = fmax(big, fabs(pr));
            acc += pr;
        }
        total += fmax(big, fabs(acc));
    }
    return total;
}

void ref_fp8_pv_errors(const ref_head *hd, const double *v, const double *prob, int i0, int i1, int jlo, int jhi,
                       double unit_out, double *e_o, size_t ld)
{
    int cols = jhi - jlo, step = AC_FP8_ACC_STEP;
    double unit = (step + 2.0) * ldexp(1.0, -hd->p->fp8_acc_bits) / unit_out;
    for (int i = i0; i < i1; i++) {
        const double *pr = prob + (size_t)(i - i0) * cols;
        for (int c = 0; c < hd->d_v; c++) {
            double acc = 0.0, total = 0.0, big = 0.0;
            for (int j = jlo; j < jhi; j++) { /* steps of 32 keys counted from key 0, as a kernel's tiles */
                double t = pr[j - jlo] * v[hd->v_base + (size_t)j * hd->ld_v + c];
                big = fmax(big, fmax(fabs(acc), fabs(t)));
                acc += t;
                if ((j + 1) % step == 0 || j + 1 == jhi)
                    total += fmax(big, fabs(acc)), big = 0.0;
            }
            e_o[(size_t)(i - i0) * ld + c] += unit * total;
        }
    }
}

void ref_fp8_qk_errors(const ref_head *hd, const double *q, const double *k, int i0, int i1, int jlo, int jhi,
                       double *out)
{
    const ac_problem *p = hd->p;
    int cols = jhi - jlo;
    double unit = fabs(p->scale) * (AC_FP8_ACC_STEP + 2.0) * ldexp(1.0, 24 - p->fp8_acc_bits);
    for (int i = i0; i < i1; i++)
        for (int j = jlo; j < jhi; j++)
            out[(size_t)(i - i0) * cols + (j - jlo)] = unit *
                qk_step_magnitudes(q + hd->q_base + (size_t)i * hd->ld_q, k + hd->kv_base + (size_t)j * hd->ld_kv,
                                   hd->d);
}

double ac_truncate_bits(double x, int bits)
{
    if (x == 0.0 || !isfinite(x))
        return x;
    int e;
    double m = frexp(x, &e); /* |m| in [0.5, 1): bits + 1 significant bits are m 2^(bits + 1) */
    return ldexp(trunc(ldexp(m, bits + 1)), e - bits - 1);
}

double ac_fp8_acc_step(double acc, const double *prod, int n, int bits)
{
    double big = fabs(acc), sum = 0.0;
    for (int i = 0; i < n; i++)
        big = fmax(big, fabs(prod[i]));
    if (big == 0.0 || !isfinite(big)) {
        for (int i = 0; i < n; i++)
            acc += prod[i];
        return acc;
    }
    int e;
    frexp(big, &e); /* big in [2^(e-1), 2^e): its leading bit is 2^(e-1) */
    double quantum = ldexp(1.0, e - 1 - bits); /* each term a multiple of it: the sum is exact in double */
    sum = trunc(acc / quantum) * quantum;
    for (int i = 0; i < n; i++)
        sum += trunc(prod[i] / quantum) * quantum;
    return ac_truncate_bits(sum, bits);
}

/* ---- S over the codes ------------------------------------------------------
 * Q and K hold code * factor, exact in double, but BLAS over them rounds each
 * product (two 28-bit significands) and each sum: at |S| ~ 1e32 (huge() inputs
 * with factors ~ 1e13) two keys with equal exact scores came out apart by
 * ~1e16, so the reference's P was one-hot where the exact one splits evenly —
 * the H100 campaign's only cuda-flash-fp8 failure judged the kernel's (right)
 * average against one key.  Dividing a row by its factor gives back the code
 * exactly; the codes' dot products are exact in double (e4m3: products of
 * 4-bit significands, multiples of 2^-18 below 2^18, so d <= 2^16 terms need
 * at most 52 bits; e5m2's wider range can round only where tiny and huge
 * codes meet), and S_ij = dot * (scale dq_i) * dk_j then rounds twice, the
 * same way for every key sharing a factor: ties stay ties. */

#define FP8_KEY_CHUNK 2048 /* keys per dgemm: the code copies stay O(chunk * d) */

static double factor_of(const ac_problem *p, ac_tensor_kind kind, int b, int h, int s)
{
    const float *f = kind == AC_TENSOR_Q ? p->descale_q : p->descale_k;
    return f[ac_descale_index(p, kind, b, h, s)];
}

/* out[r - r0][c] = t[base + r ld + c] / factor(r), rows [r0, r1). */
static void codes_of(const ref_head *hd, ac_tensor_kind kind, const double *t, int r0, int r1, double *out)
{
    bool q_side = kind == AC_TENSOR_Q;
    size_t base = q_side ? hd->q_base : hd->kv_base, ld = q_side ? hd->ld_q : hd->ld_kv;
    for (int r = r0; r < r1; r++) {
        double f = factor_of(hd->p, kind, hd->b, q_side ? hd->h : hd->h_kv, r);
        for (int c = 0; c < hd->d; c++)
            out[(size_t)(r - r0) * hd->d + c] = t[base + (size_t)r * ld + c] / f;
    }
}

bool ref_fp8_block_products(const ref_head *hd, const double *q, const double *k, int i0, int i1, int jlo, int jhi,
                            double *s)
{
    const ac_problem *p = hd->p;
    if (!ac_problem_is_fp8(p) || !p->descale_q || !p->descale_k)
        return false;
    int rows = i1 - i0, cols = jhi - jlo, chunk = cols < FP8_KEY_CHUNK ? cols : FP8_KEY_CHUNK;
    double *qc = malloc(sizeof *qc * (size_t)rows * hd->d), *kc = malloc(sizeof *kc * (size_t)chunk * hd->d);
    bool done = qc && kc;
    if (done) {
        codes_of(hd, AC_TENSOR_Q, q, i0, i1, qc);
        for (int j0 = jlo; j0 < jhi; j0 += chunk) {
            int j1 = j0 + chunk < jhi ? j0 + chunk : jhi;
            codes_of(hd, AC_TENSOR_K, k, j0, j1, kc);
            cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, j1 - j0, hd->d, 1.0, qc, hd->d, kc, hd->d, 0.0,
                        s + (j0 - jlo), cols);
        }
        for (int i = i0; i < i1; i++) {
            double sq = p->scale * factor_of(p, AC_TENSOR_Q, hd->b, hd->h, i);
            for (int j = jlo; j < jhi; j++)
                s[(size_t)(i - i0) * cols + (j - jlo)] *= sq * factor_of(p, AC_TENSOR_K, hd->b, hd->h_kv, j);
        }
    }
    free(qc);
    free(kc);
    return done;
}
