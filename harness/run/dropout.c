/* harness/run/dropout.c — a kernel's dropout keep mask: unpacked for the
 * reference, and checked for its statistics and its seed (dropout.h). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/run/dropout.h"

void ac_dropout_unpack(const ac_problem *p, const uint8_t *bits, uint8_t *keep)
{
    for (size_t x = 0; x < ac_dropout_elems(p); x++)
        keep[x] = (uint8_t)((bits[x / 8] >> (x % 8)) & 1u);
}

static bool bit_of(const uint8_t *bits, size_t x) { return (bits[x / 8] >> (x % 8)) & 1u; }

/* Visible pairs, kept ones among them, and (against other bits) how many differ. */
typedef struct {
    size_t visible, kept, differ;
} mask_count;

static mask_count count(const ac_problem *p, const uint8_t *keep, const uint8_t *other_bits)
{
    mask_count n = {0, 0, 0};
    for (int b = 0; b < p->batch; b++)
        for (int h = 0; h < p->heads_q; h++)
            for (int i = 0; i < ac_seqlen_q_of(p, b); i++)
                for (int j = 0; j < ac_seqlen_k_of(p, b); j++) {
                    if (!ac_visible(p, b, h, i, j))
                        continue;
                    size_t x = ac_dropout_index(p, b, h, i, j);
                    n.visible++;
                    n.kept += keep[x];
                    n.differ += other_bits && bit_of(other_bits, x) != (keep[x] != 0);
                }
    return n;
}

static void fail(ac_result *r, const char *kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void fail(ac_result *r, const char *kind, const char *fmt, ...)
{
    r->verdict = AC_VERDICT_FAIL;
    snprintf(r->kind, sizeof r->kind, "%s", kind);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->why, sizeof r->why, fmt, ap);
    va_end(ap);
}

int ac_dropout_checks(const ac_problem *p, const uint8_t *keep, ac_dropout_rerun rerun, void *ctx, ac_result *r,
                      ac_err *err)
{
    double q = p->dropout_p;
    mask_count n = count(p, keep, NULL);
    double expect = (double)n.visible * (1.0 - q), sigma = sqrt((double)n.visible * q * (1.0 - q));
    if (fabs((double)n.kept - expect) > 6.0 * sigma + 1.0) {
        fail(r, "dropout:keep-fraction", "dropout: %.0f pairs kept, the binomial expects %.1f +- 6 x %.2f",
             (double)n.kept, expect, sigma);
        return AC_OK;
    }
    if (!rerun) /* masks from files: no kernel to draw again */
        return AC_OK;
    size_t bytes = (ac_dropout_elems(p) + 7) / 8;
    uint8_t *again = malloc(bytes + 1);
    if (!again)
        return ac_fail(err, AC_ERR_ENV, "dropout: out of memory for a second keep mask");
    int st = rerun(ctx, p->dropout_seed, again, err);
    if (st == AC_OK && (n = count(p, keep, again)).differ > 0)
        fail(r, "dropout:not-reproducible",
             "dropout: the same seed drew another mask: %.0f of %.0f visible pairs "
             "differ",
             (double)n.differ, (double)n.visible);
    bool enough = 2.0 * q * (1.0 - q) * (double)n.visible >= 20.0; /* P(no difference) < e^-20 */
    if (st == AC_OK && r->verdict != AC_VERDICT_FAIL && enough &&
        (st = rerun(ctx, p->dropout_seed ^ 0x9E3779B97F4A7C15ull, again, err)) == AC_OK &&
        count(p, keep, again).differ == 0)
        fail(r, "dropout:seed-ignored",
             "dropout: another seed drew the same mask on all %.0f visible pairs "
             "(%.1f expected to differ)",
             (double)n.visible, 2.0 * q * (1.0 - q) * (double)n.visible);
    free(again);
    return st;
}
