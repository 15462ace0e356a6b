/* harness/cli/check_variants.c — the variants of `attncheck check` and
 * `attncheck reference` (ref/variants.h): what the files cannot say, read
 * from the options into the problem and the descriptive case, as a fuzz
 * case with the same variants would have them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/cli/check_internal.h"

/* --softcap C: as the case line's softcap, the f32 value of c > 0. */
static int read_softcap(const ac_cli *o, ac_inputs *in, ac_err *err)
{
    if (!o->softcap)
        return AC_OK;
    char *e;
    double c = strtod(o->softcap, &e);
    if (e == o->softcap || *e || !(c > 0.0) || !isfinite((float)c))
        return ac_fail(err, AC_ERR_INPUT, "--softcap: '%s' is not a finite c > 0", o->softcap);
    in->c.softcap = in->p.softcap = (double)(float)c;
    return AC_OK;
}

int ac_check_variants(const ac_cli *o, ac_inputs *in, ac_err *err)
{
    return read_softcap(o, in, err);
}

void ac_check_variants_describe(const ac_inputs *in, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    if (in->p.softcap != 0.0 && at < len)
        at += (size_t)snprintf(buf + at, len - at, " softcap=%.9g", in->p.softcap);
}
