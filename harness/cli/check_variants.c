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

/* --sinks FILE: the (Hq) f32 logits (a (1, Hq) array too), finite. */
static int read_sinks(const ac_cli *o, ac_inputs *in, ac_err *err)
{
    if (!o->sinks)
        return AC_OK;
    ac_tensor t;
    int st = ac_check_read_small(o->sinks, "sinks", &t, err);
    if (st != AC_OK)
        return st;
    int hq = in->p.heads_q;
    if (t.dtype != AC_TF_F32 || (size_t)hq != t.n_elems || t.ndim > 2)
        st = ac_fail(err, AC_ERR_INPUT, "%s: sinks must be %d f32 values (Hq), got %s with %zu elements", o->sinks, hq,
                     ac_tfile_dtype_name(t.dtype), t.n_elems);
    for (int h = 0; st == AC_OK && h < hq; h++)
        if (!isfinite(((float *)t.data)[h]))
            st = ac_fail(err, AC_ERR_INPUT, "%s: sinks[%d] is %g: the logits must be finite", o->sinks, h,
                         (double)((float *)t.data)[h]);
    if (st == AC_OK) {
        in->sinks = t.data, t.data = NULL; /* freed with the inputs */
        in->p.sinks = in->sinks;
    }
    ac_tensor_free(&t);
    return st;
}

int ac_check_variants(const ac_cli *o, ac_inputs *in, ac_err *err)
{
    int st = ac_check_thd_problem(in); /* check_thd.c */
    if (st == AC_OK)
        st = read_softcap(o, in, err);
    if (st == AC_OK)
        st = read_sinks(o, in, err);
    return st;
}

int ac_check_variant_files(const tensor_files *f, const ac_inputs *in, ac_err *err)
{
    if (!f->have[T_DSINK])
        return AC_OK;
    const ac_tensor *t = &f->t[T_DSINK];
    if (!in->p.sinks)
        return ac_fail(err, AC_ERR_INPUT, "%s: dsink given but no --sinks: the problem has no sinks", t->file);
    if (!f->have[T_DO])
        return ac_fail(err, AC_ERR_INPUT, "%s: dsink given without do (the gradient it answers)", t->file);
    if (t->dtype != AC_TF_F32 || t->n_elems != (size_t)in->p.heads_q)
        return ac_fail(err, AC_ERR_INPUT, "%s: dsink must be %d f32 values (Hq), got %s with %zu elements", t->file,
                       in->p.heads_q, ac_tfile_dtype_name(t->dtype), t->n_elems);
    return AC_OK;
}

void ac_check_variants_describe(const ac_inputs *in, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    if (in->p.head_dim_v && in->p.head_dim_v != in->p.head_dim && at < len)
        at += (size_t)snprintf(buf + at, len - at, " dv=%d", in->p.head_dim_v);
    if (in->p.softcap != 0.0 && at < len)
        at += (size_t)snprintf(buf + at, len - at, " softcap=%.9g", in->p.softcap);
    if (in->p.sinks && at < len)
        at += (size_t)snprintf(buf + at, len - at, " sinks");
}
