/* harness/case/case.c — case lines: parse, canonical format, semantic checks.
 *
 *   v1 seed=N b=N hq=N hkv=N nq=N nk=N d=N dtype=f16|bf16|f32
 *      mask=none|causal-tl|causal-br|window-tl(L,R)|window-br(L,R)|dense(KEEP)
 *      [maskrows=FRAC] [seqlens-q=a,b,..] [seqlens-k=a,b,..] layout=bhsd|bshd
 *      dist=normal(M,S)|uniform(LO,HI)|outliers(S,P)|increasing(SLOPE)|equal()
 *           |dominant(MARGIN)|huge(FRAC)|tiny()
 *      scale=auto|VALUE
 *
 * The canonical line has the fields in this order, single spaces, optional
 * fields only when not at their default.  Numbers are printed in the shortest
 * form that reads back to the same value (scale: the same f32 value, since the
 * kernel's scale is an f32), so parse -> format is byte-identical for every
 * line format writes.  The parser also accepts fields in any order and extra
 * blanks; mask, layout, dist and scale may be left out (none, bhsd,
 * normal(0,1), auto), the other fields are required. */
#include <ctype.h>
#include <stdarg.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/case/case.h"

/* ---- canonical numbers ---------------------------------------------------- */

/* Integers below 10^15 print as integers: "dominant(20)", not "2e+01". */
static bool fmt_integer(char *buf, size_t len, double x)
{
    if (x != floor(x) || fabs(x) >= 1e15)
        return false;
    snprintf(buf, len, "%.0f", x);
    return true;
}

/* Shortest %.Ng (N = 1..17) that strtod reads back to x exactly. */
static void fmt_double(char *buf, size_t len, double x)
{
    if (fmt_integer(buf, len, x))
        return;
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, len, "%.*g", prec, x);
        if (strtod(buf, NULL) == x)
            return;
    }
}

/* Shortest %.Ng that reads back to the same f32 value. */
static void fmt_f32(char *buf, size_t len, double x)
{
    float f = (float)x;
    if (fmt_integer(buf, len, (double)f))
        return;
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, len, "%.*g", prec, (double)f);
        if ((float)strtod(buf, NULL) == f)
            return;
    }
}

static void fmt_window_side(char *buf, size_t len, int w)
{
    if (w == AC_WINDOW_INF)
        snprintf(buf, len, "inf");
    else
        snprintf(buf, len, "%d", w);
}

/* ---- names ------------------------------------------------------------- */

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

ac_case ac_case_default(void)
{
    ac_case c;
    memset(&c, 0, sizeof c);
    c.version = 1;
    c.seed = 1;
    c.batch = c.heads_q = c.heads_kv = 1;
    c.seqlen_q = c.seqlen_k = 16;
    c.head_dim = 16;
    c.dtype = AC_F16;
    c.layout = AC_LAYOUT_BHSD;
    c.mask = AC_CMASK_NONE;
    c.align = AC_ALIGN_TOP_LEFT;
    c.window_left = AC_WINDOW_INF;
    c.window_right = AC_WINDOW_INF;
    c.dense_keep = 1.0;
    c.scale_auto = true;
    c.scale = (double)(float)(1.0 / sqrt(16.0));
    c.dist = AC_DIST_NORMAL;
    c.dist_a = 0.0;
    c.dist_b = 1.0;
    return c;
}

/* ---- format ------------------------------------------------------------ */

typedef struct {
    char *buf;
    size_t len, at;
    bool overflow;
} sink;

static void put(sink *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(sink *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t room = s->at < s->len ? s->len - s->at : 0;
    int n = vsnprintf(room ? s->buf + s->at : NULL, room, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= room)
        s->overflow = true;
    s->at += n > 0 ? (size_t)n : 0;
}

static void put_mask(sink *s, const ac_case *c)
{
    const char *al = c->align == AC_ALIGN_BOTTOM_RIGHT ? "br" : "tl";
    char l[32], r[32];
    switch (c->mask) {
    case AC_CMASK_NONE: put(s, " mask=none"); break;
    case AC_CMASK_CAUSAL: put(s, " mask=causal-%s", al); break;
    case AC_CMASK_WINDOW:
        fmt_window_side(l, sizeof l, c->window_left);
        fmt_window_side(r, sizeof r, c->window_right);
        put(s, " mask=window-%s(%s,%s)", al, l, r);
        break;
    case AC_CMASK_DENSE:
        fmt_double(l, sizeof l, c->dense_keep);
        put(s, " mask=dense(%s)", l);
        break;
    }
    if (c->masked_rows != 0.0) {
        fmt_double(l, sizeof l, c->masked_rows);
        put(s, " maskrows=%s", l);
    }
}

static void put_lens(sink *s, const char *key, const int *lens, int n)
{
    if (n <= 0)
        return;
    put(s, " %s=", key);
    for (int b = 0; b < n; b++)
        put(s, b ? ",%d" : "%d", lens[b]);
}

static void put_dist(sink *s, const ac_case *c)
{
    char a[40], b[40];
    fmt_double(a, sizeof a, c->dist_a);
    fmt_double(b, sizeof b, c->dist_b);
    switch (ac_dist_param_count(c->dist)) {
    case 2: put(s, " dist=%s(%s,%s)", ac_dist_name(c->dist), a, b); break;
    case 1: put(s, " dist=%s(%s)", ac_dist_name(c->dist), a); break;
    default: put(s, " dist=%s()", ac_dist_name(c->dist)); break;
    }
}

int ac_case_format(const ac_case *c, char *buf, size_t len)
{
    sink s = {buf, len, 0, false};
    put(&s, "v1 seed=%llu b=%d hq=%d hkv=%d nq=%d nk=%d d=%d dtype=%s", (unsigned long long)c->seed,
        c->batch, c->heads_q, c->heads_kv, c->seqlen_q, c->seqlen_k, c->head_dim, ac_dtype_name(c->dtype));
    put_mask(&s, c);
    put_lens(&s, "seqlens-q", c->seqlens_q, c->n_seqlens_q);
    put_lens(&s, "seqlens-k", c->seqlens_k, c->n_seqlens_k);
    put(&s, " layout=%s", c->layout == AC_LAYOUT_BSHD ? "bshd" : "bhsd");
    put_dist(&s, c);
    if (c->scale_auto) {
        put(&s, " scale=auto");
    } else {
        char v[40];
        fmt_f32(v, sizeof v, c->scale);
        put(&s, " scale=%s", v);
    }
    if (s.overflow)
        return -1;
    return (int)s.at;
}

/* ---- parse: values --------------------------------------------------------- */

/* Value parsers: 0 on success, else fill err naming `key` and return AC_ERR_INPUT. */

static int bad(ac_err *err, const char *key, const char *what, const char *got)
{
    return ac_fail(err, AC_ERR_INPUT, "%s: expected %s, got '%s'", key, what, got);
}

/* Decimal digits only (no sign, no blanks), value <= max. */
static bool read_digits(const char *s, unsigned long long max, unsigned long long *out)
{
    if (!*s)
        return false;
    unsigned long long v = 0;
    for (; *s; s++) {
        if (!isdigit((unsigned char)*s))
            return false;
        unsigned digit = (unsigned)(*s - '0');
        if (v > (max - digit) / 10)
            return false;
        v = v * 10 + digit;
    }
    *out = v;
    return true;
}

static int parse_pos_int(const char *key, const char *s, int *out, ac_err *err)
{
    unsigned long long v;
    if (!read_digits(s, 2147483647ULL, &v) || v == 0)
        return bad(err, key, "a positive integer", s);
    *out = (int)v;
    return AC_OK;
}

static int parse_seed(const char *key, const char *s, uint64_t *out, ac_err *err)
{
    unsigned long long v;
    if (!read_digits(s, UINT64_MAX, &v))
        return bad(err, key, "an unsigned 64-bit integer", s);
    *out = v;
    return AC_OK;
}

/* A finite decimal number occupying all of s. */
static bool read_number(const char *s, double *out)
{
    if (!*s || isspace((unsigned char)*s))
        return false;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end || errno == ERANGE || !isfinite(v))
        return false;
    *out = v;
    return true;
}

/* "name(args)": copies the name, points args at the text inside the
 * parentheses (NUL-terminated in place).  false when the shape is wrong. */
static bool split_call(char *s, const char **name, char **args)
{
    char *open = strchr(s, '(');
    size_t n = strlen(s);
    if (!open || n < 2 || s[n - 1] != ')')
        return false;
    *open = '\0';
    s[n - 1] = '\0';
    *name = s;
    *args = open + 1;
    return true;
}

/* Splits args at commas into at most max numbers; returns the count or -1. */
static int read_numbers(char *args, double *vals, int max)
{
    if (!*args)
        return 0;
    int n = 0;
    for (char *tok = args;; n++) {
        char *comma = strchr(tok, ',');
        if (comma)
            *comma = '\0';
        if (n >= max || !read_number(tok, &vals[n]))
            return -1;
        if (!comma)
            return n + 1;
        tok = comma + 1;
    }
}

static bool read_window_side(const char *s, int *out)
{
    unsigned long long v;
    if (strcmp(s, "inf") == 0) {
        *out = AC_WINDOW_INF;
        return true;
    }
    if (!read_digits(s, 2147483647ULL, &v))
        return false;
    *out = (int)v;
    return true;
}

static int parse_window(const char *value, char *args, ac_case *c, ac_err *err)
{
    char *comma = strchr(args, ',');
    if (!comma)
        return bad(err, "mask", "window-tl(L,R) or window-br(L,R) with L, R >= 0 or inf", value);
    *comma = '\0';
    if (!read_window_side(args, &c->window_left) || !read_window_side(comma + 1, &c->window_right))
        return bad(err, "mask", "window sides that are integers >= 0 or inf", value);
    c->mask = AC_CMASK_WINDOW;
    return AC_OK;
}

static int parse_mask(const char *value, ac_case *c, ac_err *err)
{
    static const char *const expected =
        "none, causal-tl, causal-br, window-tl(L,R), window-br(L,R) or dense(KEEP)";
    char tmp[128];
    if (strlen(value) >= sizeof tmp)
        return bad(err, "mask", expected, value);
    strcpy(tmp, value);
    c->align = AC_ALIGN_TOP_LEFT;
    c->window_left = AC_WINDOW_INF;
    c->window_right = AC_WINDOW_INF;
    if (strcmp(tmp, "none") == 0) {
        c->mask = AC_CMASK_NONE;
        return AC_OK;
    }
    if (strcmp(tmp, "causal-tl") == 0 || strcmp(tmp, "causal-br") == 0) {
        c->mask = AC_CMASK_CAUSAL;
        c->align = tmp[7] == 'b' ? AC_ALIGN_BOTTOM_RIGHT : AC_ALIGN_TOP_LEFT;
        c->window_right = 0;
        return AC_OK;
    }
    const char *name;
    char *args;
    if (!split_call(tmp, &name, &args))
        return bad(err, "mask", expected, value);
    if (strcmp(name, "window-tl") == 0 || strcmp(name, "window-br") == 0) {
        c->align = name[7] == 'b' ? AC_ALIGN_BOTTOM_RIGHT : AC_ALIGN_TOP_LEFT;
        return parse_window(value, args, c, err);
    }
    if (strcmp(name, "dense") == 0) {
        double keep;
        if (read_numbers(args, &keep, 1) != 1)
            return bad(err, "mask", "dense(KEEP) with KEEP a number in (0,1]", value);
        c->mask = AC_CMASK_DENSE;
        c->dense_keep = keep;
        return AC_OK;
    }
    return bad(err, "mask", expected, value);
}

static int parse_dist(const char *value, ac_case *c, ac_err *err)
{
    char tmp[128];
    const char *name;
    char *args;
    if (strlen(value) >= sizeof tmp)
        return bad(err, "dist", "NAME(ARGS)", value);
    strcpy(tmp, value);
    if (!split_call(tmp, &name, &args))
        return bad(err, "dist", "NAME(ARGS), e.g. normal(0,1)", value);
    for (int k = 0; k < AC_DIST_COUNT; k++) {
        if (strcmp(name, dist_names[k]) != 0)
            continue;
        double vals[2] = {0, 0};
        int want = ac_dist_param_count((ac_dist_kind)k);
        if (read_numbers(args, vals, 2) != want)
            return ac_fail(err, AC_ERR_INPUT, "dist: %s takes %d number%s, got '%s'", name, want,
                           want == 1 ? "" : "s", value);
        c->dist = (ac_dist_kind)k;
        c->dist_a = vals[0];
        c->dist_b = vals[1];
        return AC_OK;
    }
    return bad(err, "dist",
               "normal(M,S), uniform(LO,HI), outliers(S,P), increasing(SLOPE), equal(), "
               "dominant(MARGIN), huge(FRAC) or tiny()", value);
}

static int parse_lens(const char *key, const char *value, int *lens, int *n, ac_err *err)
{
    char tmp[AC_CASE_LINE_MAX];
    if (strlen(value) >= sizeof tmp)
        return bad(err, key, "comma-separated lengths", value);
    strcpy(tmp, value);
    int count = 0;
    for (char *tok = tmp;;) {
        char *comma = strchr(tok, ',');
        if (comma)
            *comma = '\0';
        unsigned long long v;
        if (!read_digits(tok, 2147483647ULL, &v))
            return bad(err, key, "comma-separated integers >= 0", value);
        if (count >= AC_CASE_MAX_BATCH)
            return ac_fail(err, AC_ERR_INPUT, "%s: more than %d lengths", key, AC_CASE_MAX_BATCH);
        lens[count++] = (int)v;
        if (!comma)
            break;
        tok = comma + 1;
    }
    *n = count;
    return AC_OK;
}

static int parse_scale(const char *value, ac_case *c, ac_err *err)
{
    if (strcmp(value, "auto") == 0) {
        c->scale_auto = true;
        return AC_OK;
    }
    double v;
    if (!read_number(value, &v))
        return bad(err, "scale", "auto or a finite number", value);
    c->scale_auto = false;
    c->scale = (double)(float)v; /* the kernel's scale is an f32 */
    return AC_OK;
}

/* ---- parse: fields ---------------------------------------------------------- */

enum {
    F_SEED, F_B, F_HQ, F_HKV, F_NQ, F_NK, F_D, F_DTYPE, F_MASK, F_MASKROWS,
    F_SEQLENS_Q, F_SEQLENS_K, F_LAYOUT, F_DIST, F_SCALE, F_COUNT,
    F_FIRST_OPTIONAL = F_MASK,
};
static const char *const field_names[F_COUNT] = {
    "seed", "b", "hq", "hkv", "nq", "nk", "d", "dtype", "mask", "maskrows",
    "seqlens-q", "seqlens-k", "layout", "dist", "scale",
};

static int parse_field(int f, const char *value, ac_case *c, ac_err *err)
{
    const char *key = field_names[f];
    switch (f) {
    case F_SEED: return parse_seed(key, value, &c->seed, err);
    case F_B: return parse_pos_int(key, value, &c->batch, err);
    case F_HQ: return parse_pos_int(key, value, &c->heads_q, err);
    case F_HKV: return parse_pos_int(key, value, &c->heads_kv, err);
    case F_NQ: return parse_pos_int(key, value, &c->seqlen_q, err);
    case F_NK: return parse_pos_int(key, value, &c->seqlen_k, err);
    case F_D: return parse_pos_int(key, value, &c->head_dim, err);
    case F_DTYPE:
        return ac_dtype_parse(value, &c->dtype) == AC_OK ? AC_OK : bad(err, key, "f16, bf16 or f32", value);
    case F_MASK: return parse_mask(value, c, err);
    case F_MASKROWS:
        return read_number(value, &c->masked_rows) ? AC_OK : bad(err, key, "a fraction in [0,1]", value);
    case F_SEQLENS_Q: return parse_lens(key, value, c->seqlens_q, &c->n_seqlens_q, err);
    case F_SEQLENS_K: return parse_lens(key, value, c->seqlens_k, &c->n_seqlens_k, err);
    case F_LAYOUT:
        if (strcmp(value, "bhsd") == 0 || strcmp(value, "bshd") == 0) {
            c->layout = value[1] == 's' ? AC_LAYOUT_BSHD : AC_LAYOUT_BHSD;
            return AC_OK;
        }
        return bad(err, key, "bhsd or bshd", value);
    case F_DIST: return parse_dist(value, c, err);
    default: return parse_scale(value, c, err);
    }
}

/* One "key=value" token (NUL-terminated, no blanks). */
static int parse_token(char *tok, ac_case *c, unsigned *seen, ac_err *err)
{
    char *eq = strchr(tok, '=');
    if (!eq)
        return ac_fail(err, AC_ERR_INPUT, "'%s': expected key=value", tok);
    *eq = '\0';
    for (int f = 0; f < F_COUNT; f++) {
        if (strcmp(tok, field_names[f]) != 0)
            continue;
        if (*seen & (1u << f))
            return ac_fail(err, AC_ERR_INPUT, "duplicate field '%s'", tok);
        *seen |= 1u << f;
        return parse_field(f, eq + 1, c, err);
    }
    return ac_fail(err, AC_ERR_INPUT, "unknown field '%s'", tok);
}

int ac_case_parse(const char *line, ac_case *out, ac_err *err)
{
    if (!line)
        return ac_fail(err, AC_ERR_INPUT, "case line: NULL");
    char buf[AC_CASE_LINE_MAX];
    if (strlen(line) >= sizeof buf)
        return ac_fail(err, AC_ERR_INPUT, "case line: longer than %d characters", AC_CASE_LINE_MAX - 1);
    strcpy(buf, line);
    ac_case c = ac_case_default();
    unsigned seen = 0;
    bool first = true;
    for (char *save = NULL, *tok = strtok_r(buf, " \t\r\n", &save); tok; tok = strtok_r(NULL, " \t\r\n", &save)) {
        if (first) {
            if (strcmp(tok, "v1") != 0)
                return ac_fail(err, AC_ERR_INPUT, "version: expected 'v1' first, got '%s'", tok);
            first = false;
            continue;
        }
        int st = parse_token(tok, &c, &seen, err);
        if (st != AC_OK)
            return st;
    }
    if (first)
        return ac_fail(err, AC_ERR_INPUT, "case line: empty (expected 'v1 seed=... ')");
    for (int f = 0; f < F_FIRST_OPTIONAL; f++)
        if (!(seen & (1u << f)))
            return ac_fail(err, AC_ERR_INPUT, "missing field '%s'", field_names[f]);
    if (c.scale_auto)
        c.scale = (double)(float)(1.0 / sqrt((double)c.head_dim));
    int st = ac_case_validate(&c, err);
    if (st == AC_OK)
        *out = c;
    return st;
}

/* ---- semantic checks ------------------------------------------------------- */

static int validate_sizes(const ac_case *c, ac_err *err)
{
    if (c->version != 1)
        return ac_fail(err, AC_ERR_INPUT, "version: only v1 exists, got %d", c->version);
    if (c->batch < 1 || c->batch > AC_CASE_MAX_BATCH)
        return ac_fail(err, AC_ERR_INPUT, "b: must be in 1..%d, got %d", AC_CASE_MAX_BATCH, c->batch);
    if (c->heads_q < 1 || c->heads_kv < 1)
        return ac_fail(err, AC_ERR_INPUT, "%s: must be >= 1, got %d", c->heads_q < 1 ? "hq" : "hkv",
                       c->heads_q < 1 ? c->heads_q : c->heads_kv);
    if (c->heads_q % c->heads_kv != 0)
        return ac_fail(err, AC_ERR_INPUT, "hq=%d is not a multiple of hkv=%d", c->heads_q, c->heads_kv);
    if (c->seqlen_q < 1 || c->seqlen_k < 1)
        return ac_fail(err, AC_ERR_INPUT, "%s: must be >= 1, got %d", c->seqlen_q < 1 ? "nq" : "nk",
                       c->seqlen_q < 1 ? c->seqlen_q : c->seqlen_k);
    if (c->head_dim < 1 || c->head_dim > AC_MAX_HEAD_DIM)
        return ac_fail(err, AC_ERR_INPUT, "d: must be in 1..%d, got %d", AC_MAX_HEAD_DIM, c->head_dim);
    if ((unsigned)c->dtype >= AC_DTYPE_COUNT)
        return ac_fail(err, AC_ERR_INPUT, "dtype: unknown value %d", (int)c->dtype);
    if (c->layout != AC_LAYOUT_BHSD && c->layout != AC_LAYOUT_BSHD)
        return ac_fail(err, AC_ERR_INPUT, "layout: unknown value %d", (int)c->layout);
    if (!c->scale_auto && (!isfinite(c->scale) || (float)c->scale == 0.0f || !isfinite((float)c->scale)))
        return ac_fail(err, AC_ERR_INPUT, "scale: must be a nonzero finite f32, got %g", c->scale);
    return AC_OK;
}

static int validate_lens(const char *key, const int *lens, int n, int batch, int padded, const char *pad_key,
                         ac_err *err)
{
    if (n == 0)
        return AC_OK;
    if (n != batch)
        return ac_fail(err, AC_ERR_INPUT, "%s: %d length%s for b=%d (one per sequence)", key, n,
                       n == 1 ? "" : "s", batch);
    for (int b = 0; b < n; b++)
        if (lens[b] < 0 || lens[b] > padded)
            return ac_fail(err, AC_ERR_INPUT, "%s: length %d of sequence %d is outside 0..%s=%d", key,
                           lens[b], b, pad_key, padded);
    return AC_OK;
}

static bool window_side_ok(int w) { return w >= 0 || w == AC_WINDOW_INF; }

static int validate_mask(const ac_case *c, ac_err *err)
{
    switch (c->mask) {
    case AC_CMASK_NONE: case AC_CMASK_CAUSAL: break;
    case AC_CMASK_WINDOW:
        if (!window_side_ok(c->window_left) || !window_side_ok(c->window_right))
            return ac_fail(err, AC_ERR_INPUT, "mask: window sides must be >= 0 or inf, got (%d,%d)",
                           c->window_left, c->window_right);
        break;
    case AC_CMASK_DENSE:
        if (!(c->dense_keep > 0.0 && c->dense_keep <= 1.0))
            return ac_fail(err, AC_ERR_INPUT, "mask: dense(KEEP) needs KEEP in (0,1], got %g", c->dense_keep);
        break;
    default: return ac_fail(err, AC_ERR_INPUT, "mask: unknown kind %d", (int)c->mask);
    }
    if (c->align != AC_ALIGN_TOP_LEFT && c->align != AC_ALIGN_BOTTOM_RIGHT)
        return ac_fail(err, AC_ERR_INPUT, "mask: unknown alignment %d", (int)c->align);
    if (!(c->masked_rows >= 0.0 && c->masked_rows <= 1.0))
        return ac_fail(err, AC_ERR_INPUT, "maskrows: must be a fraction in [0,1], got %g", c->masked_rows);
    if (c->masked_rows > 0.0 && c->mask != AC_CMASK_DENSE)
        return ac_fail(err, AC_ERR_INPUT, "maskrows: needs mask=dense(KEEP)");
    int st = validate_lens("seqlens-q", c->seqlens_q, c->n_seqlens_q, c->batch, c->seqlen_q, "nq", err);
    if (st == AC_OK)
        st = validate_lens("seqlens-k", c->seqlens_k, c->n_seqlens_k, c->batch, c->seqlen_k, "nk", err);
    return st;
}

/* Parameters in range, and values that fit the dtype (inputs never overflow). */
static int validate_dist(const ac_case *c, ac_err *err)
{
    double a = c->dist_a, b = c->dist_b, top = ac_max_finite(c->dtype), need = 0.0;
    const char *name = ac_dist_name(c->dist);
    if ((unsigned)c->dist >= AC_DIST_COUNT)
        return ac_fail(err, AC_ERR_INPUT, "dist: unknown kind %d", (int)c->dist);
    if (!isfinite(a) || !isfinite(b))
        return ac_fail(err, AC_ERR_INPUT, "dist: %s parameters must be finite", name);
    switch (c->dist) {
    case AC_DIST_NORMAL:
        if (!(b > 0))
            return ac_fail(err, AC_ERR_INPUT, "dist: normal(M,S) needs S > 0, got %g", b);
        need = fabs(a) + 8 * b;
        break;
    case AC_DIST_UNIFORM:
        if (!(a < b))
            return ac_fail(err, AC_ERR_INPUT, "dist: uniform(LO,HI) needs LO < HI, got (%g,%g)", a, b);
        need = fmax(fabs(a), fabs(b));
        break;
    case AC_DIST_OUTLIERS:
        if (!(a > 0) || !(b >= 0 && b <= 1))
            return ac_fail(err, AC_ERR_INPUT, "dist: outliers(S,P) needs S > 0 and P in [0,1], got (%g,%g)", a, b);
        need = 8 * AC_OUTLIER_FACTOR * a;
        break;
    case AC_DIST_INCREASING:
    case AC_DIST_DOMINANT:
        if (!(a > 0 && a <= 1e4))
            return ac_fail(err, AC_ERR_INPUT, "dist: %s needs a parameter in (0,1e4], got %g", name, a);
        break;
    case AC_DIST_HUGE:
        if (!(a > 0 && a <= 1))
            return ac_fail(err, AC_ERR_INPUT, "dist: huge(FRAC) needs FRAC in (0,1], got %g", a);
        break;
    default: break;
    }
    if (need > top)
        return ac_fail(err, AC_ERR_INPUT, "dist: %s(%g,%g) draws values up to %g, beyond %s's largest %g",
                       name, a, b, need, ac_dtype_name(c->dtype), top);
    return AC_OK;
}

int ac_case_validate(const ac_case *c, ac_err *err)
{
    if (!c)
        return ac_fail(err, AC_ERR_INPUT, "case: NULL");
    int st = validate_sizes(c, err);
    if (st == AC_OK)
        st = validate_mask(c, err);
    if (st == AC_OK)
        st = validate_dist(c, err);
    return st;
}
