/* kernels/cpu_flash_precision.c — within-budget precision losses: cpu-flash
 * (64x64 tiles) with one extra rounding or one cheaper operation each, the
 * kind of change a pull request makes for speed ("exp2 is cheaper", "multiply
 * by 1/l once").  Each passes every budget of budgets.txt on a clean campaign
 * (`attncheck fuzz --kernel X --cases 1000` exits 0), so the gate cannot see
 * it; the baseline comparison (`--baseline`, harness/verdict/baseline.h) must,
 * and `attncheck prove --baseline` measures after how many cases it does.
 *
 * Their names have no "mutant" in them, so `attncheck prove` (the planted-bug
 * proof) leaves them alone; `prove --baseline` takes every
 * <base>-precision-* kernel.  A kernel named *-control-* is the other side of
 * the proof: an equally accurate change (32-key K/V tiles: other rescale
 * points, other roundings) that the comparison must NOT flag.
 *
 * The deviations sit in cpu_flash.c and cpu_flash_bwd.c behind
 * `cp->mut == CF_PREC_X`, like the planted bugs'. */
#include <math.h>

#include "cpu_flash_internal.h"

float cf_round_if_finite(ac_dtype t, float acc)
{
    float r = cf_round_to(t, acc);
    return isfinite(r) ? r : acc; /* the un-normalised sum can pass the dtype's range where O does not */
}

#define PRECISION(ID, SUFFIX, WHAT) \
    { \
        .name = "cpu-flash-precision-" SUFFIX, .description = "within-budget precision loss: " WHAT, .caps = CF_CAPS, \
        .device = AC_DEV_CPU, .memory = AC_MEM_HOST, .available = NULL, .forward = cf_forward, \
        .backward = cf_backward, .ctx = &params[ID], \
    }

enum { CONTROL = 0 };
static const cpu_flash_params params[CF_PREC_END] = {
    [CONTROL] = {.block_q = 64, .block_k = 32, .mut = CF_MUT_NONE},
    [CF_PREC_O_ROUNDED_TWICE] = {.block_q = 64, .block_k = 64, .mut = CF_PREC_O_ROUNDED_TWICE},
};

static const ac_kernel kernels[] = {
    PRECISION(CF_PREC_O_ROUNDED_TWICE, "o-rounded-twice",
              "f16: the un-normalised O rounded to f16 (where it fits) before the division by l, as a partial "
              "output stored in the dtype, then rounded again"),
    PRECISION(CONTROL, "control-bc32",
              "none: 64x32 tiles (other rescale points, other roundings, the same accuracy); the control the "
              "baseline comparison must not flag"),
};

size_t cf_precision_kernels(const ac_kernel **out, size_t max)
{
    size_t n = 0;
    for (; n < sizeof kernels / sizeof kernels[0] && n < max; n++)
        out[n] = &kernels[n];
    return n;
}
