/* ref/mpfr_exact.c — exact slicing for dgemm and exact sums of doubles, the
 * pieces that let the MPFR reference do its two matrix products in BLAS
 * without rounding anything.  See mpfr_exact.h. */
#include <limits.h>
#include <math.h>
#include <stdint.h>

#include "fp64_block.h"
#include "mpfr_exact.h"

int mx_exact_beta(size_t n)
{
    int log2n = 0;
    while (((size_t)1 << log2n) < n)
        log2n++;
    return (53 - log2n) / 2;
}

/* sigma_l: the smallest exponent with max |line| <= 2^sigma (INT_MIN: all zero). */
static int sigma_of(double max)
{
    int ex;
    frexp(max, &ex); /* max < 2^ex */
    return max == 0.0 ? INT_MIN : ex;
}

/* Lines [l0, l1) of a block, in the block's own coordinates: rows
 * [l0, l1) x all columns, or all rows x columns [l0, l1). */
typedef struct {
    size_t o0, o1, i0, i1;
} part;

static part part_of(const mx_block *b, size_t l0, size_t l1)
{
    part p = {0, b->outer, 0, b->inner};
    if (b->lines_are_rows) {
        p.o0 = l0;
        p.o1 = l1;
    } else {
        p.i0 = l0;
        p.i1 = l1;
    }
    return p;
}

/* Copies the part into rem (checking every value) and leaves each line's
 * largest magnitude in maxes[l]. */
static int load_part(const mx_block *b, part p, double *rem, double *maxes)
{
    bool bad = false;
    for (size_t o = p.o0; o < p.o1; o++) {
        const double *src = b->src + o * b->ld;
        double *r = rem + o * b->inner, row_max = 0.0;
        for (size_t i = p.i0; i < p.i1; i++) {
            double x = src[i], a = fabs(x);
            bad |= !(a <= 0x1p400) || (a < 0x1p-400 && a != 0.0); /* NaN fails the first test */
            r[i] = x;
            if (b->lines_are_rows)
                row_max = a > row_max ? a : row_max;
            else
                maxes[i] = (o == p.o0 || a > maxes[i]) ? a : maxes[i];
        }
        if (b->lines_are_rows)
            maxes[o] = row_max;
    }
    return bad ? MX_BAD_VALUE : 0;
}

/* One slice of the part in memory order; live[l] becomes nonzero for every
 * line whose remainder is still nonzero. */
static void slice_pass(const mx_block *b, part p, const double *c, double *rem, double *sl, double *live)
{
    for (size_t o = p.o0; o < p.o1; o++) {
        double *r = rem + o * b->inner, *s = sl + o * b->inner;
        if (b->lines_are_rows) {
            double cl = c[o], left = 0.0;
            for (size_t i = p.i0; i < p.i1; i++) {
                s[i] = (cl + r[i]) - cl;
                r[i] -= s[i];
                left += fabs(r[i]);
            }
            live[o] = left;
        } else {
            for (size_t i = p.i0; i < p.i1; i++) {
                s[i] = (c[i] + r[i]) - c[i];
                r[i] -= s[i];
                live[i] += fabs(r[i]);
            }
        }
    }
}

typedef struct {
    const mx_block *b;
    int beta, max_slices;
    double *out, *rem, *line;
    int used[2];
    size_t split; /* first line of the second half (lines when not split) */
} slice_job;

/* Rump's extraction: with c = 1.5 * 2^K, fl(fl(c + x) - c) is x rounded to a
 * multiple of 2^(K - 52) (for |x| <= 2^(K-1)) and x minus it is exact.
 * Slice s of a line with exponent sigma has quantum 2^(sigma - beta (s+1)),
 * so its entries are integers of at most beta bits (beta - 1 after the first).
 * A line whose remainder is all zero is done: c = 0 moves its zeros along. */
static int slice_lines(const slice_job *job, size_t l0, size_t l1)
{
    const mx_block *b = job->b;
    size_t lines = b->lines_are_rows ? b->outer : b->inner, n = b->outer * b->inner;
    double *sig = job->line, *c = job->line + lines, *live = job->line + 2 * lines;
    part p = part_of(b, l0, l1);
    if (load_part(b, p, job->rem, sig) != 0)
        return MX_BAD_VALUE;
    for (size_t l = l0; l < l1; l++) {
        int sigma = sigma_of(sig[l]);
        sig[l] = sigma == INT_MIN ? -INFINITY : sigma;
    }
    for (int used = 0;; used++) {
        bool any = false;
        for (size_t l = l0; l < l1; l++) {
            c[l] = isinf(sig[l]) ? 0.0 : ldexp(1.5, (int)sig[l] - job->beta * (used + 1) + 52);
            any |= !isinf(sig[l]);
            live[l] = 0.0;
        }
        if (!any)
            return used;
        if (used == job->max_slices)
            return MX_TOO_MANY_SLICES;
        slice_pass(b, p, c, job->rem, job->out + (size_t)used * n, live);
        for (size_t l = l0; l < l1; l++)
            if (live[l] == 0.0)
                sig[l] = -INFINITY;
    }
}

static void slice_half(void *arg, int l0, int l1)
{
    slice_job *job = arg;
    int half = l0 == 0 ? 0 : 1;
    if (half == 1)
        job->split = (size_t)l0;
    job->used[half] = slice_lines(job, (size_t)l0, (size_t)l1);
}

/* Zero slices [from, to) of lines [l0, l1): a half that needed fewer. */
static void zero_slices(const mx_block *b, double *out, size_t l0, size_t l1, int from, int to)
{
    part p = part_of(b, l0, l1);
    size_t n = b->outer * b->inner;
    for (int s = from; s < to; s++)
        for (size_t o = p.o0; o < p.o1; o++)
            for (size_t i = p.i0; i < p.i1; i++)
                out[(size_t)s * n + o * b->inner + i] = 0.0;
}

/* The two halves of the lines are sliced on two threads (ref_parallel_rows). */
int mx_slice_block(const mx_block *b, int beta, double *out, int max_slices, double *rem, double *line)
{
    size_t lines = b->lines_are_rows ? b->outer : b->inner;
    slice_job job = {b, beta, max_slices, out, rem, line, {0, 0}, lines};
    ref_parallel_rows(slice_half, &job, 0, (int)lines, b->outer * b->inner);
    for (int h = 0; h < 2; h++)
        if (job.used[h] < 0)
            return job.used[h];
    int used = job.used[0] > job.used[1] ? job.used[0] : job.used[1];
    zero_slices(b, out, 0, job.split, job.used[0], used);
    if (job.split < lines)
        zero_slices(b, out, job.split, lines, job.used[1], used);
    return used;
}

/* The n-bit field (n <= 52) starting at bit lo of the significand integer of
 * nl limbs; bits outside the significand read as zero. */
static uint64_t field(const mp_limb_t *limbs, long nl, long lo, int n)
{
    if (lo < 0) {
        if (lo + n <= 0)
            return 0;
        return field(limbs, nl, 0, n + (int)lo) << (-lo);
    }
    if (lo >= nl * 64)
        return 0;
    if (lo + n > nl * 64)
        n = (int)(nl * 64 - lo);
    long w = lo / 64;
    int sh = (int)(lo % 64);
    unsigned __int128 both = limbs[w];
    if (w + 1 < nl)
        both |= (unsigned __int128)limbs[w + 1] << 64;
    return (uint64_t)(both >> sh) & ((UINT64_C(1) << n) - 1);
}

void mx_slice_bits(mpfr_t x, int beta, int n_slices, const double *quantum, double *out, size_t stride)
{
    if (mpfr_zero_p(x)) {
        for (int s = 0; s < n_slices; s++)
            out[(size_t)s * stride] = 0.0;
        return;
    }
    /* x = M * 2^(ex - 64 nl), M the nl-limb significand integer */
    long nl = (long)((mpfr_get_prec(x) + 63) / 64);
    long base = (long)mpfr_get_exp(x) - 64 * nl;
    const mp_limb_t *limbs = mpfr_custom_get_significand(x);
    for (int s = 0; s < n_slices; s++) {
        long lo_abs = 1 - (long)beta * (s + 1); /* the slice's quantum exponent */
        uint64_t bits = field(limbs, nl, lo_abs - base, beta);
        out[(size_t)s * stride] = (double)bits * quantum[s]; /* exact: bits < 2^52 */
    }
}

/* Shewchuk's grow-expansion with zero elimination: h[0..n) stays a
 * nonoverlapping expansion whose exact sum is everything added so far. */
static size_t grow_expansion(double *h, size_t n, double x)
{
    size_t out = 0;
    double q = x;
    for (size_t i = 0; i < n; i++) {
        double sum = q + h[i];
        double bv = sum - q;
        double err = (q - (sum - bv)) + (h[i] - bv);
        q = sum;
        if (err != 0.0)
            h[out++] = err;
    }
    if (q != 0.0 || out == 0)
        h[out++] = q;
    return out;
}

/* A nonoverlapping expansion of doubles spans at most 2^400 * 2^400 * 512
 * down to 2^-1074, so it has fewer than 40 components: 64 is room enough. */
void mx_sum_doubles(mpfr_t dst, const double *terms, size_t n, mpfr_t *tmp, mpfr_ptr *ptrs)
{
    double h[64];
    size_t m = 0;
    for (size_t t = 0; t < n; t++)
        if (terms[t] != 0.0 && m < 64)
            m = grow_expansion(h, m, terms[t]);
    if (m <= 2) { /* the common cases: one rounding at most, no mpfr_sum */
        mpfr_set_d(dst, m ? h[m - 1] : 0.0, MPFR_RNDN);
        if (m == 2) { /* not mpfr_add_d: it allocates a temporary per call */
            mpfr_set_d(tmp[0], h[0], MPFR_RNDN);
            mpfr_add(dst, dst, tmp[0], MPFR_RNDN);
        }
        return;
    }
    for (size_t t = 0; t < m; t++) {
        mpfr_set_d(tmp[t], h[t], MPFR_RNDN); /* exact: tmp has >= 53 bits */
        ptrs[t] = tmp[t];
    }
    mpfr_sum(dst, ptrs, m, MPFR_RNDN);
}

/* ---- exp by tables and a short series ------------------------------------- */

#define GRID_BITS (5 * MX_EXP_LEVELS) /* n = round(-x 2^GRID_BITS); |r| <= 2^-(GRID_BITS+1) */

/* Terms of the series for |r| <= 2^-GRID_BITS: the first dropped term
 * 2^-GRID_BITS(N+1) / (N+1)! must be below 2^-(prec+10). */
static int exp_terms(int prec)
{
    double log2_term = 0.0; /* log2(2^-15n / n!) */
    for (int n = 1; n <= MX_EXP_MAX_TERMS; n++) {
        log2_term += -(double)GRID_BITS - log2((double)n);
        if (log2_term < -(prec + 10.0))
            return n - 1;
    }
    return MX_EXP_MAX_TERMS;
}

/* Stage n is multiplied by r^n <= 2^-GRID_BITS n in the end: it needs that
 * many fewer bits. */
static int stage_prec(int prec, int n)
{
    int p = prec + 12 - GRID_BITS * n;
    return p < 32 ? 32 : p;
}

void mx_exp_table_init(mx_exp_table *t, int prec)
{
    int wp = prec + 12;
    t->prec = prec;
    t->terms = exp_terms(prec);
    for (int a = 0; a <= MX_EXP_WHOLE; a++) {
        mpfr_init2(t->whole[a], wp);
        mpfr_set_si(t->whole[a], -a, MPFR_RNDN);
        mpfr_exp(t->whole[a], t->whole[a], MPFR_RNDN);
    }
    for (int l = 0; l < MX_EXP_LEVELS; l++)
        for (int b = 0; b < 32; b++) {
            mpfr_init2(t->frac[l][b], wp);
            mpfr_set_si_2exp(t->frac[l][b], -b, -5 * (l + 1), MPFR_RNDN); /* exact */
            mpfr_exp(t->frac[l][b], t->frac[l][b], MPFR_RNDN);
        }
    for (int n = 0; n <= t->terms; n++) {
        mpfr_init2(t->coef[n], wp);
        mpfr_fac_ui(t->coef[n], (unsigned long)n, MPFR_RNDN);
        mpfr_ui_div(t->coef[n], 1, t->coef[n], MPFR_RNDN);
    }
    /* pairs of levels multiplied out once: three products per exp, not five */
    for (int a = 0; a <= MX_EXP_WHOLE; a++)
        for (int b = 0; b < 32; b++) {
            mpfr_init2(t->hi[a * 32 + b], wp);
            mpfr_mul(t->hi[a * 32 + b], t->whole[a], t->frac[0][b], MPFR_RNDN);
        }
    for (int b = 0; b < 32; b++)
        for (int c = 0; c < 32; c++) {
            mpfr_init2(t->mid[b * 32 + c], wp);
            mpfr_mul(t->mid[b * 32 + c], t->frac[1][b], t->frac[2][c], MPFR_RNDN);
        }
}

void mx_exp_table_clear(mx_exp_table *t)
{
    for (int a = 0; a <= MX_EXP_WHOLE; a++)
        mpfr_clear(t->whole[a]);
    for (int l = 0; l < MX_EXP_LEVELS; l++)
        for (int b = 0; b < 32; b++)
            mpfr_clear(t->frac[l][b]);
    for (int n = 0; n <= t->terms; n++)
        mpfr_clear(t->coef[n]);
    for (int i = 0; i < (MX_EXP_WHOLE + 1) * 32; i++)
        mpfr_clear(t->hi[i]);
    for (int i = 0; i < 32 * 32; i++)
        mpfr_clear(t->mid[i]);
}

void mx_exp_scratch_init(mx_exp_scratch *s, const mx_exp_table *t)
{
    mpfr_init2(s->r, t->prec);
    mpfr_init2(s->grid, 53);
    mpfr_init2(s->acc, t->prec + 12);
    for (int n = 0; n <= t->terms; n++)
        mpfr_init2(s->h[n], stage_prec(t->prec, n));
}

void mx_exp_scratch_clear(mx_exp_scratch *s, const mx_exp_table *t)
{
    mpfr_clears(s->r, s->grid, s->acc, (mpfr_ptr)0);
    for (int n = 0; n <= t->terms; n++)
        mpfr_clear(s->h[n]);
}

void mx_exp(mpfr_t out, mpfr_srcptr x, const mx_exp_table *t, mx_exp_scratch *s)
{
    double xd = mpfr_get_d(x, MPFR_RNDN);
    if (!(xd >= -(double)MX_EXP_WHOLE) || xd > 0.0) {
        mpfr_exp(out, x, MPFR_RNDN);
        return;
    }
    long n = lround(ldexp(-xd, GRID_BITS));
    /* r = x + n 2^-GRID_BITS is exact at prec bits: x >= -64 has at most 7
     * integer bits and r keeps only x's bits below 2^-GRID_BITS.  (Not
     * mpfr_add_d and friends here: each allocates a temporary per call.) */
    mpfr_set_d(s->grid, ldexp((double)n, -GRID_BITS), MPFR_RNDN);
    mpfr_add(s->r, x, s->grid, MPFR_RNDN);
    mpfr_srcptr h = t->coef[t->terms];
    for (int k = t->terms - 1; k >= 0; k--) { /* mul + add: mpfr_fma costs three times more */
        mpfr_mul(s->h[k], h, s->r, MPFR_RNDN);
        mpfr_add(s->h[k], s->h[k], t->coef[k], MPFR_RNDN);
        h = s->h[k];
    }
    /* times exp(-(a; b1)) exp(-(b2 b3)) exp(-b4), skipping factors of 1; the
     * last product rounds straight to out's precision */
    long hi = n >> (GRID_BITS - 5), mid = (n >> 5) & 1023, low = n & 31;
    mpfr_srcptr factor[3];
    int nf = 0;
    if (hi > 0)
        factor[nf++] = t->hi[hi];
    if (mid > 0)
        factor[nf++] = t->mid[mid];
    if (low > 0)
        factor[nf++] = t->frac[3][low];
    if (nf == 0) {
        mpfr_set(out, h, MPFR_RNDN);
        return;
    }
    for (int f = 0; f < nf - 1; f++) {
        mpfr_mul(s->acc, h, factor[f], MPFR_RNDN);
        h = s->acc;
    }
    mpfr_mul(out, h, factor[nf - 1], MPFR_RNDN);
}
