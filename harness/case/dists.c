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
    [AC_DIST_NORMAL] = "normal", [AC_DIST_UNIFORM] = "uniform", [AC_DIST_OUTLIERS] = "outliers",
    [AC_DIST_INCREASING] = "increasing", [AC_DIST_EQUAL] = "equal", [AC_DIST_DOMINANT] = "dominant",
    [AC_DIST_HUGE] = "huge", [AC_DIST_TINY] = "tiny",
};

int ac_dist_param_count(ac_dist_kind k)
{
    switch (k) {
    case AC_DIST_NORMAL: case AC_DIST_UNIFORM: case AC_DIST_OUTLIERS: return 2;
    case AC_DIST_INCREASING: case AC_DIST_DOMINANT: case AC_DIST_HUGE: return 1;
    default: return 0;
    }
}

const char *ac_dist_name(ac_dist_kind k) { return (unsigned)k < AC_DIST_COUNT ? dist_names[k] : "?"; }

void case_dist_format(const ac_case *c, char *buf, size_t len)
{
    char a[40], b[40];
    case_fmt_double(a, sizeof a, c->dist_a);
    case_fmt_double(b, sizeof b, c->dist_b);
    switch (ac_dist_param_count(c->dist)) {
    case 2: snprintf(buf, len, "%s(%s,%s)", ac_dist_name(c->dist), a, b); break;
    case 1: snprintf(buf, len, "%s(%s)", ac_dist_name(c->dist), a); break;
    default: snprintf(buf, len, "%s()", ac_dist_name(c->dist)); break;
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
            return ac_fail(err, AC_ERR_INPUT, "dist: %s takes %d number%s, got '%s'", name, want,
                           want == 1 ? "" : "s", value);
        c->dist = (ac_dist_kind)k;
        c->dist_a = vals[0];
        c->dist_b = vals[1];
        return AC_OK;
    }
    return case_bad(err, "dist",
               "normal(M,S), uniform(LO,HI), outliers(S,P), increasing(SLOPE), equal(), "
               "dominant(MARGIN), huge(FRAC) or tiny()", value);
}

/* Parameters in range, and values that fit the dtype (inputs never overflow). */
/* The parameters in range; *need is the largest magnitude the draw reaches
 * (0 when the distribution scales itself to the dtype). */
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
    case AC_DIST_INCREASING:
    case AC_DIST_DOMINANT:
        if (!(a > 0 && a <= 1e4))
            return ac_fail(err, AC_ERR_INPUT, "dist: %s needs a parameter in (0,1e4], got %g", ac_dist_name(c->dist), a);
        return AC_OK;
    case AC_DIST_HUGE:
        return a > 0 && a <= 1 ? AC_OK : ac_fail(err, AC_ERR_INPUT, "dist: huge(FRAC) needs FRAC in (0,1], got %g", a);
    default: return AC_OK;
    }
}

int case_dist_validate(const ac_case *c, ac_err *err)
{
    double a = c->dist_a, b = c->dist_b, top = ac_max_finite(c->dtype), need;
    const char *name = ac_dist_name(c->dist);
    if ((unsigned)c->dist >= AC_DIST_COUNT)
        return ac_fail(err, AC_ERR_INPUT, "dist: unknown kind %d", (int)c->dist);
    if (!isfinite(a) || !isfinite(b))
        return ac_fail(err, AC_ERR_INPUT, "dist: %s parameters must be finite", name);
    int st = dist_params_ok(c, &need, err);
    if (st == AC_OK && need > top)
        st = ac_fail(err, AC_ERR_INPUT, "dist: %s(%g,%g) draws values up to %g, beyond %s's largest %g", name, a, b,
                     need, ac_dtype_name(c->dtype), top);
    return st;
}
