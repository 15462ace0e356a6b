/* harness/case/case_variants.c — the variants' case-line fields (rows of
 * case.c's table, ref/variants.h's variants): dv, softcap, sinks, alibi, bias,
 * sinktokens, dropout, and the dense mask's broadcast dimensions (maskdims).
 * Each is optional, printed only when set, and reads back byte for byte. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness/case/case_internal.h"

int case_parse_dv(const case_field *f, const char *value, ac_case *c, ac_err *err)
{
    unsigned long long v;
    if (!case_read_digits(value, AC_MAX_HEAD_DIM, &v) || v < 1)
        return case_bad(err, f->key, "a head dim of V in 1..1024", value);
    c->head_dim_v = (int)v;
    return AC_OK;
}

bool case_format_dv(const case_field *f, const ac_case *c, char *buf, size_t len)
{
    (void)f;
    snprintf(buf, len, "%d", c->head_dim_v);
    return c->head_dim_v == 0;
}

void case_reset_dv(ac_case *c) { c->head_dim_v = 0; }

int case_validate_dv(const case_field *f, const ac_case *c, ac_err *err)
{
    if (c->head_dim_v < 0 || c->head_dim_v > AC_MAX_HEAD_DIM)
        return ac_fail(err, AC_ERR_INPUT, "%s: must be in 1..%d, got %d", f->key, AC_MAX_HEAD_DIM, c->head_dim_v);
    return AC_OK;
}

/* v=k: V is K's first d_v channels (MLA decode's latent cache). */
int case_parse_vk(const case_field *f, const char *value, ac_case *c, ac_err *err)
{
    if (strcmp(value, "k") != 0)
        return case_bad(err, f->key, "k (V is K's first d_v channels)", value);
    c->v_from_k = true;
    return AC_OK;
}

bool case_format_vk(const case_field *f, const ac_case *c, char *buf, size_t len)
{
    (void)f;
    snprintf(buf, len, "k");
    return !c->v_from_k;
}

void case_reset_vk(ac_case *c) { c->v_from_k = false; }

int case_validate_vk(const case_field *f, const ac_case *c, ac_err *err)
{
    if (!c->v_from_k)
        return AC_OK;
    if (c->head_dim_v > c->head_dim)
        return ac_fail(err, AC_ERR_INPUT, "%s=k: V is K's first dv channels, so dv (%d) must be at most d (%d)", f->key,
                       c->head_dim_v, c->head_dim);
    if (ac_dtype_is_fp8(c->dtype))
        return ac_fail(err, AC_ERR_INPUT, "%s=k: not with fp8 inputs (dtype=%s): V's codes would carry K's factors",
                       f->key, ac_dtype_name(c->dtype));
    return AC_OK;
}

int case_parse_softcap(const case_field *f, const char *value, ac_case *c, ac_err *err)
{
    double v;
    if (!case_read_number(value, &v) || !(v > 0.0) || !isfinite((float)v))
        return case_bad(err, f->key, "a finite softcap c > 0", value);
    c->softcap = (double)(float)v; /* the kernel's softcap is an f32 */
    return AC_OK;
}

bool case_format_softcap(const case_field *f, const ac_case *c, char *buf, size_t len)
{
    (void)f;
    case_fmt_f32(buf, len, c->softcap);
    return c->softcap == 0.0;
}

void case_reset_softcap(ac_case *c) { c->softcap = 0.0; }

int case_validate_softcap(const case_field *f, const ac_case *c, ac_err *err)
{
    if (c->softcap != 0.0 &&
        (!(c->softcap > 0.0) || !isfinite((float)c->softcap) || (double)(float)c->softcap != c->softcap))
        return ac_fail(err, AC_ERR_INPUT, "%s: must be an f32 value > 0, got %g", f->key, c->softcap);
    return AC_OK;
}

int case_parse_sinks(const case_field *f, const char *value, ac_case *c, ac_err *err)
{
    char tmp[128];
    const char *name;
    char *args;
    double v[2];
    if (snprintf(tmp, sizeof tmp, "%s", value) >= (int)sizeof tmp || !case_split_call(tmp, &name, &args))
        return case_bad(err, f->key, "normal(M,S) or over(MARGIN)", value);
    int n = case_read_numbers(args, v, 2);
    if (strcmp(name, "normal") == 0 && n == 2 && v[1] >= 0.0)
        c->sinks = AC_SINKS_NORMAL, c->sinks_a = v[0], c->sinks_b = v[1];
    else if (strcmp(name, "over") == 0 && n == 1)
        c->sinks = AC_SINKS_OVER, c->sinks_a = v[0], c->sinks_b = 0.0;
    else
        return case_bad(err, f->key, "normal(M,S) with S >= 0 or over(MARGIN)", value);
    return AC_OK;
}

bool case_format_sinks(const case_field *f, const ac_case *c, char *buf, size_t len)
{
    (void)f;
    char a[40], b[40];
    case_fmt_double(a, sizeof a, c->sinks_a);
    case_fmt_double(b, sizeof b, c->sinks_b);
    if (c->sinks == AC_SINKS_NORMAL)
        snprintf(buf, len, "normal(%s,%s)", a, b);
    else
        snprintf(buf, len, "over(%s)", a);
    return c->sinks == AC_SINKS_NONE;
}

void case_reset_sinks(ac_case *c)
{
    c->sinks = AC_SINKS_NONE;
    c->sinks_a = c->sinks_b = 0.0;
}

int case_validate_sinks(const case_field *f, const ac_case *c, ac_err *err)
{
    if (c->sinks != AC_SINKS_NONE && c->sinks != AC_SINKS_NORMAL && c->sinks != AC_SINKS_OVER)
        return ac_fail(err, AC_ERR_INPUT, "%s: unknown kind %d", f->key, (int)c->sinks);
    /* the logits are f32 values: |M| + 8 S (normal) or the margin must fit one */
    if (c->sinks != AC_SINKS_NONE && !(fabs(c->sinks_a) + 8.0 * c->sinks_b < 1e30))
        return ac_fail(err, AC_ERR_INPUT, "%s: the sink logits must fit an f32 (|M| + 8 S < 1e30)", f->key);
    return AC_OK;
}

/* alibi=paper | uniform(LO,HI), with ":bh" for slopes per batch and head (B, Hq)
 * instead of per head (Hq); see ac_alibi_kind. */
int case_parse_alibi(const case_field *f, const char *value, ac_case *c, ac_err *err)
{
    char tmp[128];
    const char *name;
    char *args;
    double v[2];
    if (snprintf(tmp, sizeof tmp, "%s", value) >= (int)sizeof tmp)
        return case_bad(err, f->key, "paper or uniform(LO,HI), optionally :bh", value);
    size_t n = strlen(tmp);
    bool bh = n > 3 && strcmp(tmp + n - 3, ":bh") == 0;
    if (bh)
        tmp[n - 3] = '\0';
    if (strcmp(tmp, "paper") == 0) {
        c->alibi = AC_ALIBI_PAPER, c->alibi_a = c->alibi_b = 0.0, c->alibi_bh = bh;
        return AC_OK;
    }
    if (!case_split_call(tmp, &name, &args) || strcmp(name, "uniform") != 0 || case_read_numbers(args, v, 2) != 2 ||
        !(v[0] <= v[1]))
        return case_bad(err, f->key, "paper or uniform(LO,HI) with LO <= HI, optionally :bh", value);
    c->alibi = AC_ALIBI_UNIFORM, c->alibi_a = v[0], c->alibi_b = v[1], c->alibi_bh = bh;
    return AC_OK;
}

bool case_format_alibi(const case_field *f, const ac_case *c, char *buf, size_t len)
{
    (void)f;
    char a[40], b[40];
    case_fmt_double(a, sizeof a, c->alibi_a);
    case_fmt_double(b, sizeof b, c->alibi_b);
    if (c->alibi == AC_ALIBI_PAPER)
        snprintf(buf, len, "paper%s", c->alibi_bh ? ":bh" : "");
    else
        snprintf(buf, len, "uniform(%s,%s)%s", a, b, c->alibi_bh ? ":bh" : "");
    return c->alibi == AC_ALIBI_NONE;
}

void case_reset_alibi(ac_case *c)
{
    c->alibi = AC_ALIBI_NONE;
    c->alibi_a = c->alibi_b = 0.0;
    c->alibi_bh = false;
}

int case_validate_alibi(const case_field *f, const ac_case *c, ac_err *err)
{
    if (c->alibi != AC_ALIBI_NONE && c->alibi != AC_ALIBI_PAPER && c->alibi != AC_ALIBI_UNIFORM)
        return ac_fail(err, AC_ERR_INPUT, "%s: unknown kind %d", f->key, (int)c->alibi);
    /* the slopes are f32 values: the range must fit one */
    if (c->alibi == AC_ALIBI_UNIFORM &&
        !(c->alibi_a <= c->alibi_b && fabs(c->alibi_a) < 1e30 && fabs(c->alibi_b) < 1e30))
        return ac_fail(err, AC_ERR_INPUT, "%s: uniform(LO,HI) needs LO <= HI within an f32's range", f->key);
    return AC_OK;
}

/* bias=normal(M,S):SHAPE[:f32][:inf(F)], the tokens after the values in that order. */
static const char *const bias_shapes[4] = {"11", "1h", "b1", "bh"}; /* bit 0: per head, bit 1: per batch */

static bool parse_bias_tail(char *tok, char **save, ac_case *c)
{
    int shape = -1;
    for (int k = 0; k < 4; k++)
        if (tok && strcmp(tok, bias_shapes[k]) == 0)
            shape = k;
    if (shape < 0)
        return false;
    c->bias_per_head = shape & 1, c->bias_per_batch = shape >> 1;
    char *next = strtok_r(NULL, ":", save);
    if (next && strcmp(next, "f32") == 0)
        c->bias_f32 = true, next = strtok_r(NULL, ":", save);
    if (next) {
        const char *name;
        char *args;
        double f;
        if (!case_split_call(next, &name, &args) || strcmp(name, "inf") != 0 || case_read_numbers(args, &f, 1) != 1)
            return false;
        c->bias_inf = f;
        next = strtok_r(NULL, ":", save);
    }
    return next == NULL;
}

int case_parse_bias(const case_field *f, const char *value, ac_case *c, ac_err *err)
{
    char tmp[160];
    const char *name;
    char *args;
    double v[2];
    static const char *const what = "normal(M,S):SHAPE[:f32][:inf(F)], SHAPE 11, 1h, b1 or bh";
    if (snprintf(tmp, sizeof tmp, "%s", value) >= (int)sizeof tmp)
        return case_bad(err, f->key, what, value);
    char *save = NULL, *values = strtok_r(tmp, ":", &save), *shape = strtok_r(NULL, ":", &save);
    case_reset_bias(c);
    if (!values || !case_split_call(values, &name, &args) || strcmp(name, "normal") != 0 ||
        case_read_numbers(args, v, 2) != 2 || !(v[1] >= 0.0) || !parse_bias_tail(shape, &save, c))
        return case_bad(err, f->key, what, value);
    c->bias = AC_BIAS_NORMAL, c->bias_a = v[0], c->bias_b = v[1];
    return AC_OK;
}

bool case_format_bias(const case_field *f, const ac_case *c, char *buf, size_t len)
{
    (void)f;
    char a[40], b[40], x[40];
    case_fmt_double(a, sizeof a, c->bias_a);
    case_fmt_double(b, sizeof b, c->bias_b);
    case_fmt_double(x, sizeof x, c->bias_inf);
    int shape = (c->bias_per_batch ? 2 : 0) + (c->bias_per_head ? 1 : 0);
    int n = snprintf(buf, len, "normal(%s,%s):%s%s", a, b, bias_shapes[shape], c->bias_f32 ? ":f32" : "");
    if (c->bias_inf > 0.0 && n >= 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, ":inf(%s)", x);
    return c->bias == AC_BIAS_NONE;
}

void case_reset_bias(ac_case *c)
{
    c->bias = AC_BIAS_NONE;
    c->bias_a = c->bias_b = c->bias_inf = 0.0;
    c->bias_per_batch = c->bias_per_head = c->bias_f32 = false;
}

int case_validate_bias(const case_field *f, const ac_case *c, ac_err *err)
{
    if (c->bias == AC_BIAS_NONE)
        return AC_OK;
    if (c->bias != AC_BIAS_NORMAL)
        return ac_fail(err, AC_ERR_INPUT, "%s: unknown kind %d", f->key, (int)c->bias);
    double top = c->bias_f32 ? ac_max_finite(AC_F32) : ac_max_finite(c->dtype);
    if (!(fabs(c->bias_a) + 8.0 * c->bias_b < top))
        return ac_fail(err, AC_ERR_INPUT, "%s: |M| + 8 S must stay below %s's largest %g", f->key,
                       ac_dtype_name(c->bias_f32 ? AC_F32 : c->dtype), top);
    if (!(c->bias_inf >= 0.0 && c->bias_inf <= 1.0))
        return ac_fail(err, AC_ERR_INPUT, "%s: inf(F) needs F in [0,1], got %g", f->key, c->bias_inf);
    return AC_OK;
}

/* maskdims=1h|b1|bh: which of (B, Hq) a dense mask has (bias_shapes' spelling; 11 is the default, not printed). */
int case_parse_maskdims(const case_field *f, const char *value, ac_case *c, ac_err *err)
{
    for (int k = 1; k < 4; k++)
        if (strcmp(value, bias_shapes[k]) == 0) {
            c->mask_per_head = k & 1, c->mask_per_batch = k >> 1;
            return AC_OK;
        }
    return case_bad(err, f->key, "1h, b1 or bh", value);
}

bool case_format_maskdims(const case_field *f, const ac_case *c, char *buf, size_t len)
{
    (void)f;
    snprintf(buf, len, "%s", bias_shapes[(c->mask_per_batch ? 2 : 0) + (c->mask_per_head ? 1 : 0)]);
    return !c->mask_per_batch && !c->mask_per_head;
}

void case_reset_maskdims(ac_case *c) { c->mask_per_batch = c->mask_per_head = false; }

int case_validate_maskdims(const case_field *f, const ac_case *c, ac_err *err)
{
    if ((c->mask_per_batch || c->mask_per_head) && c->mask != AC_MASK_DENSE)
        return ac_fail(err, AC_ERR_INPUT, "%s: needs mask=dense(KEEP)", f->key);
    return AC_OK;
}

/* sinktokens=K: the first K keys visible past a window's (finite) left edge. */
int case_parse_sinktokens(const case_field *f, const char *value, ac_case *c, ac_err *err)
{
    unsigned long long v;
    if (!case_read_digits(value, INT_MAX, &v) || v < 1)
        return case_bad(err, f->key, "a number of keys >= 1", value);
    c->sink_tokens = (int)v;
    return AC_OK;
}

bool case_format_sinktokens(const case_field *f, const ac_case *c, char *buf, size_t len)
{
    (void)f;
    snprintf(buf, len, "%d", c->sink_tokens);
    return c->sink_tokens == 0;
}

void case_reset_sinktokens(ac_case *c) { c->sink_tokens = 0; }

int case_validate_sinktokens(const case_field *f, const ac_case *c, ac_err *err)
{
    bool window = c->mask == AC_MASK_WINDOW_TL || c->mask == AC_MASK_WINDOW_BR;
    if (c->sink_tokens < 0 || (c->sink_tokens > 0 && (!window || c->window_left == AC_WINDOW_INF)))
        return ac_fail(err, AC_ERR_INPUT, "%s: needs mask=window-tl(L,R) or window-br(L,R) with L finite", f->key);
    return AC_OK;
}

/* dropout=P, 0 < P < 1. */
int case_parse_dropout(const case_field *f, const char *value, ac_case *c, ac_err *err)
{
    double v;
    if (!case_read_number(value, &v) || !(v > 0.0 && v < 1.0))
        return case_bad(err, f->key, "a dropout probability in (0,1)", value);
    c->dropout = v;
    return AC_OK;
}

bool case_format_dropout(const case_field *f, const ac_case *c, char *buf, size_t len)
{
    (void)f;
    case_fmt_double(buf, len, c->dropout);
    return c->dropout == 0.0;
}

void case_reset_dropout(ac_case *c) { c->dropout = 0.0; }

int case_validate_dropout(const case_field *f, const ac_case *c, ac_err *err)
{
    if (c->dropout != 0.0 && !(c->dropout > 0.0 && c->dropout < 1.0))
        return ac_fail(err, AC_ERR_INPUT, "%s: must be in (0,1), got %g", f->key, c->dropout);
    return AC_OK;
}
