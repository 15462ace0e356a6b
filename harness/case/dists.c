/* harness/case/dists.c — the input distributions of a case line: names,
 * parameters, parse, canonical format and the checks that the values they
 * draw fit the dtype.  What each one draws is in case.h and run/inputs.c; the
 * generator's choices among them are in generate.c. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness/case/case.h"
#include "harness/case/case_internal.h"

static const char *const dist_names[AC_DIST_COUNT] = {
    [AC_DIST_NORMAL] = "normal",     [AC_DIST_UNIFORM] = "uniform",
    [AC_DIST_OUTLIERS] = "outliers", [AC_DIST_INCREASING] = "increasing",
    [AC_DIST_EQUAL] = "equal",       [AC_DIST_DOMINANT] = "dominant",
    [AC_DIST_HUGE] = "huge",         [AC_DIST_TINY] = "tiny",
    [AC_DIST_FA3] = "fa3",
};

int ac_dist_param_count(ac_dist_kind k)
{
    switch (k) {
    case AC_DIST_NORMAL:
    case AC_DIST_UNIFORM:
    case AC_DIST_OUTLIERS:
    case AC_DIST_FA3:
        return 2;
    case AC_DIST_INCREASING:
    case AC_DIST_DOMINANT:
    case AC_DIST_HUGE:
        return 1;
    default:
        return 0;
    }
}

const char *ac_dist_name(ac_dist_kind k) { return (unsigned)k < AC_DIST_COUNT ? dist_names[k] : "?"; }

void case_dist_format(const ac_case *c, char *buf, size_t len)
{
    char a[40], b[40];
    case_fmt_double(a, sizeof a, c->dist_a);
    case_fmt_double(b, sizeof b, c->dist_b);
    switch (ac_dist_param_count(c->dist)) {
    case 2:
        snprintf(buf, len, "%s(%s,%s)", ac_dist_name(c->dist), a, b);
        break;
    case 1:
        snprintf(buf, len, "%s(%s)", ac_dist_name(c->dist), a);
        break;
    default:
        snprintf(buf, len, "%s()", ac_dist_name(c->dist));
        break;
    }
}

int case_dist_parse(const char *value, ac_case *c, ac_err *err)
{
    char tmp[128];
    const char *name;
    char *args;
    if (strlen(value) >= sizeof tmp)
        return case_bad(err, "dist", "NAME(ARGS)", value);
    strcpy(tmp, value);
    if (!case_split_call(tmp, &name, &args))
        return case_bad(err, "dist", "NAME(ARGS), e.g. normal(0,1)", value);
    for (int k = 0; k < AC_DIST_COUNT; k++) {
        if (strcmp(name, dist_names[k]) != 0)
            continue;
        double vals[2] = {0, 0};
        int want = ac_dist_param_count((ac_dist_kind)k);
        if (case_read_numbers(args, vals, 2) != want)
            return ac_fail(err, AC_ERR_INPUT, "dist: %s takes %d number%s, got '%s'", name, want, want == 1 ? "" : "s",
                           value);
        c->dist = (ac_dist_kind)k;
        c->dist_a = vals[0];
        c->dist_b = vals[1];
        return AC_OK;
    }
    return case_bad(err, "dist",
                    "normal(M,S), uniform(LO,HI), outliers(S,P), increasing(SLOPE), equal(), "
                    "dominant(MARGIN), huge(FRAC), tiny() or fa3(P,S)",
                    value);
}

/* The parameters in range; *need is the largest magnitude the draw of Q, K or
 * V reaches from its parameters alone (0 when the distribution scales itself
 * to the dtype). */
static int dist_params_ok(const ac_case *c, double *need, ac_err *err)
{
    double a = c->dist_a, b = c->dist_b;
    *need = 0.0;
    switch (c->dist) {
    case AC_DIST_NORMAL:
        *need = fabs(a) + 8 * b;
        return b > 0 ? AC_OK : ac_fail(err, AC_ERR_INPUT, "dist: normal(M,S) needs S > 0, got %g", b);
    case AC_DIST_UNIFORM:
        *need = fmax(fabs(a), fabs(b));
        return a < b ? AC_OK : ac_fail(err, AC_ERR_INPUT, "dist: uniform(LO,HI) needs LO < HI, got (%g,%g)", a, b);
    case AC_DIST_OUTLIERS:
        *need = 8 * AC_OUTLIER_FACTOR * a;
        if (!(a > 0) || !(b >= 0 && b <= 1))
            return ac_fail(err, AC_ERR_INPUT, "dist: outliers(S,P) needs S > 0 and P in [0,1], got (%g,%g)", a, b);
        return AC_OK;
    case AC_DIST_FA3:
        *need = 8.0 * (1.0 + b);
        if (!(a >= 0 && a <= 1) || !(b > 0))
            return ac_fail(err, AC_ERR_INPUT, "dist: fa3(P,S) needs P in [0,1] and S > 0, got (%g,%g)", a, b);
        return AC_OK;
    case AC_DIST_INCREASING:
    case AC_DIST_DOMINANT:
        if (!(a > 0 && a <= 1e4))
            return ac_fail(err, AC_ERR_INPUT, "dist: %s needs a parameter in (0,1e4], got %g", ac_dist_name(c->dist),
                           a);
        return AC_OK;
    case AC_DIST_HUGE:
        return a > 0 && a <= 1 ? AC_OK : ac_fail(err, AC_ERR_INPUT, "dist: huge(FRAC) needs FRAC in (0,1], got %g", a);
    default:
        return AC_OK;
    }
}

/* Bounds on what the draws of run/inputs.c reach, with the case's f32 scale:
 * |Q|, |K| (the score operands) and |V|.  dO and the normal(0,1) parts are
 * Irwin-Hall sums, within 6 (8 here).  huge() and tiny() scale themselves to
 * the dtype (its bounds are their own), dominant() is checked exactly when its
 * key is planted (run/inputs.c). */
typedef struct {
    double q, k, v;
} draw_bounds;

static draw_bounds bounds_of(const ac_case *c, double need, double scale)
{
    const double gauss = 8.0;
    switch (c->dist) {
    case AC_DIST_NORMAL:
    case AC_DIST_UNIFORM:
    case AC_DIST_FA3:
        return (draw_bounds){need, need, need};
    case AC_DIST_OUTLIERS:
        return (draw_bounds){need, need, gauss * c->dist_a};
    /* Q_i = a_i w with a_i <= 1 / (|scale| d): a tiny scale makes Q large */
    case AC_DIST_INCREASING:
        return (draw_bounds){1.0 / (fabs(scale) * c->head_dim), c->dist_a, gauss};
    default:
        return (draw_bounds){gauss, gauss, gauss};
    }
}

/* Every drawn input fits the dtype, and the products a fused kernel forms in
 * f32 fit f32: the scores S = scale Q K^T (|scale| d max|Q| max|K|) and
 * dP = dO V^T (8 d max|V|).  A line past these gives Inf or NaN in any kernel,
 * so it is refused here rather than reported as the kernel's failure. */
static int draws_fit(const ac_case *c, double need, ac_err *err)
{
    /* fp8 inputs are scaled into the format by their descale factors (run/inputs_fp8.c) */
    double f32_top = ac_max_finite(AC_F32), top = ac_dtype_is_fp8(c->dtype) ? f32_top : ac_max_finite(c->dtype);
    double scale = c->scale_auto ? (double)(float)(1.0 / sqrt((double)c->head_dim)) : c->scale;
    const char *dt = ac_dtype_name(c->dtype);
    char line[80];
    case_dist_format(c, line, sizeof line);
    if (need > top)
        return ac_fail(err, AC_ERR_INPUT, "dist: %s draws values up to %g, beyond %s's largest %g", line, need, dt,
                       top);
    if (!isfinite(scale) || scale == 0.0 || c->head_dim < 1 || c->dist == AC_DIST_HUGE || c->dist == AC_DIST_TINY ||
        c->dist == AC_DIST_DOMINANT)
        return AC_OK; /* the scale's own check speaks for a bad scale */
    draw_bounds bd = bounds_of(c, need, scale);
    double scores = fabs(scale) * c->head_dim * bd.q * bd.k, dp = 8.0 * c->head_dim * bd.v;
    if (bd.q > top)
        return ac_fail(err, AC_ERR_INPUT,
                       "dist: %s with scale %g and d=%d draws Q up to %g (1/(|scale| d)), "
                       "beyond %s's largest %g",
                       line, scale, c->head_dim, bd.q, dt, top);
    if (!(scores <= f32_top))
        return ac_fail(err, AC_ERR_INPUT,
                       "dist: %s with scale %g and d=%d gives scores up to %g "
                       "(|scale| d max|Q| max|K|), beyond f32's largest %g, where fused kernels compute them",
                       line, scale, c->head_dim, scores, f32_top);
    if (!(dp <= f32_top))
        return ac_fail(err, AC_ERR_INPUT, "dist: %s with d=%d gives dP = dO V^T up to %g, beyond f32's largest %g",
                       line, c->head_dim, dp, f32_top);
    return AC_OK;
}

int case_dist_validate(const ac_case *c, ac_err *err)
{
    double a = c->dist_a, b = c->dist_b, need;
    const char *name = ac_dist_name(c->dist);
    if ((unsigned)c->dist >= AC_DIST_COUNT)
        return ac_fail(err, AC_ERR_INPUT, "dist: unknown kind %d", (int)c->dist);
    if (!isfinite(a) || !isfinite(b))
        return ac_fail(err, AC_ERR_INPUT, "dist: %s parameters must be finite", name);
    int st = dist_params_ok(c, &need, err);
    if (st == AC_OK && c->dist == AC_DIST_DOMINANT && ac_dtype_is_fp8(c->dtype))
        return ac_fail(err, AC_ERR_INPUT,
                       "dist: dominant() plants its key in the dtype, not as an fp8 code times "
                       "a descale factor; not with dtype=%s",
                       ac_dtype_name(c->dtype));
    return st == AC_OK ? draws_fit(c, need, err) : st;
}
