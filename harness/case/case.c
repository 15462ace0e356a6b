/* harness/case/case.c — case lines: the field table, parse, canonical format,
 * semantic checks.
 *
 * Every field of the line is one row of `fields` below, in canonical order:
 * its key, whether a v1 line must give it, whether the canonical line prints
 * it at its default, how it is parsed, formatted, defaulted and validated.
 * A plain number field (an int or a double at an offset of ac_case, with a
 * default and a range) needs no code of its own; the mask (masks.c) and the
 * distribution (dists.c) have theirs.  A new optional field — softcap,
 * dropout, d_v — is one row: printed only when not at its default, so every
 * line written before it keeps its bytes.
 *
 * The canonical line has the fields in table order, single spaces, optional
 * fields only when not at their default.  Numbers are printed in the shortest
 * form that reads back to the same value (scale: the same f32 value, since
 * the kernel's scale is an f32), so parse -> format is byte-identical for
 * every line format writes.  The parser also accepts fields in any order and
 * extra blanks; fields that are not required take their default. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/case/case.h"
#include "harness/case/case_internal.h"

/* ---- the fields ---------------------------------------------------------------- */

static int *int_at(const case_field *f, ac_case *c) { return (int *)((char *)c + f->offset); }
static int int_of(const case_field *f, const ac_case *c) { return *(const int *)((const char *)c + f->offset); }
static double *double_at(const case_field *f, ac_case *c) { return (double *)((char *)c + f->offset); }
static double double_of(const case_field *f, const ac_case *c)
{
    return *(const double *)((const char *)c + f->offset);
}

/* -- seed, dtype, layout, scale, seqlens: the custom fields other than mask and dist */

static int parse_seed(const case_field *f, const char *value, ac_case *c, ac_err *err)
{
    unsigned long long v;
    if (!case_read_digits(value, UINT64_MAX, &v))
        return case_bad(err, f->key, "an unsigned 64-bit integer", value);
    c->seed = v;
    return AC_OK;
}

static bool format_seed(const case_field *f, const ac_case *c, char *buf, size_t len)
{
    (void)f;
    snprintf(buf, len, "%llu", (unsigned long long)c->seed);
    return c->seed == 1;
}

static void reset_seed(ac_case *c) { c->seed = 1; }

static int parse_dtype(const case_field *f, const char *value, ac_case *c, ac_err *err)
{
    char names[64], what[80];
    if (ac_dtype_parse(value, &c->dtype) == AC_OK)
        return AC_OK;
    ac_dtype_list(names, sizeof names);
    snprintf(what, sizeof what, "one of %s", names);
    return case_bad(err, f->key, what, value);
}

static bool format_dtype(const case_field *f, const ac_case *c, char *buf, size_t len)
{
    (void)f;
    snprintf(buf, len, "%s", ac_dtype_name(c->dtype));
    return c->dtype == AC_F16;
}

static void reset_dtype(ac_case *c) { c->dtype = AC_F16; }

static int validate_dtype(const case_field *f, const ac_case *c, ac_err *err)
{
    if ((unsigned)c->dtype >= AC_DTYPE_COUNT)
        return ac_fail(err, AC_ERR_INPUT, "%s: unknown value %d", f->key, (int)c->dtype);
    return AC_OK;
}

static int parse_mask(const case_field *f, const char *value, ac_case *c, ac_err *err)
{
    (void)f;
    return ac_case_mask_parse(value, c, err);
}

static bool format_mask(const case_field *f, const ac_case *c, char *buf, size_t len)
{
    (void)f;
    case_mask_format(c, buf, len);
    return c->mask == AC_MASK_NONE;
}

static void reset_mask(ac_case *c)
{
    ac_case_set_mask(c, AC_MASK_NONE);
    c->window_left = c->window_right = AC_WINDOW_INF;
    c->dense_keep = 1.0;
}

static int validate_mask(const case_field *f, const ac_case *c, ac_err *err)
{
    (void)f;
    return case_mask_validate(c, err);
}

static int validate_maskrows(const case_field *f, const ac_case *c, ac_err *err)
{
    if (c->masked_rows > 0.0 && c->mask != AC_MASK_DENSE)
        return ac_fail(err, AC_ERR_INPUT, "%s: needs mask=dense(KEEP)", f->key);
    return AC_OK;
}

/* The lengths of seqlens-q or seqlens-k, and their count. */
static bool is_q(const case_field *f) { return strcmp(f->key, "seqlens-q") == 0; }
static int *lens_at(const case_field *f, ac_case *c, int **n)
{
    *n = is_q(f) ? &c->n_seqlens_q : &c->n_seqlens_k;
    return is_q(f) ? c->seqlens_q : c->seqlens_k;
}

static int parse_lens(const case_field *f, const char *value, ac_case *c, ac_err *err)
{
    char tmp[AC_CASE_LINE_MAX];
    if (strlen(value) >= sizeof tmp)
        return case_bad(err, f->key, "comma-separated lengths", value);
    strcpy(tmp, value);
    int *n, *lens = lens_at(f, c, &n), count = 0;
    for (char *tok = tmp;;) {
        char *comma = strchr(tok, ',');
        if (comma)
            *comma = '\0';
        unsigned long long v;
        if (!case_read_digits(tok, INT_MAX, &v))
            return case_bad(err, f->key, "comma-separated integers >= 0", value);
        if (count >= AC_CASE_MAX_BATCH)
            return ac_fail(err, AC_ERR_INPUT, "%s: more than %d lengths", f->key, AC_CASE_MAX_BATCH);
        lens[count++] = (int)v;
        if (!comma)
            break;
        tok = comma + 1;
    }
    *n = count;
    return AC_OK;
}

static bool format_lens(const case_field *f, const ac_case *c, char *buf, size_t len)
{
    int n = is_q(f) ? c->n_seqlens_q : c->n_seqlens_k;
    const int *lens = is_q(f) ? c->seqlens_q : c->seqlens_k;
    size_t at = 0;
    buf[0] = '\0';
    for (int b = 0; b < n && at < len; b++)
        at += (size_t)snprintf(buf + at, len - at, b ? ",%d" : "%d", lens[b]);
    return n == 0;
}

static void reset_lens(ac_case *c) { c->n_seqlens_q = c->n_seqlens_k = 0; }

static int validate_lens(const case_field *f, const ac_case *c, ac_err *err)
{
    int n = is_q(f) ? c->n_seqlens_q : c->n_seqlens_k;
    const int *lens = is_q(f) ? c->seqlens_q : c->seqlens_k;
    int padded = is_q(f) ? c->seqlen_q : c->seqlen_k;
    if (n == 0)
        return AC_OK;
    if (n != c->batch)
        return ac_fail(err, AC_ERR_INPUT, "%s: %d length%s for b=%d (one per sequence)", f->key, n, n == 1 ? "" : "s",
                       c->batch);
    for (int b = 0; b < n; b++)
        if (lens[b] < 0 || lens[b] > padded)
            return ac_fail(err, AC_ERR_INPUT, "%s: length %d of sequence %d is outside 0..%s=%d", f->key, lens[b], b,
                           is_q(f) ? "nq" : "nk", padded);
    return AC_OK;
}

static int parse_layout(const case_field *f, const char *value, ac_case *c, ac_err *err)
{
    for (int l = 0; l < AC_LAYOUT_COUNT; l++)
        if (strcmp(value, ac_layout_name((ac_layout)l)) == 0) {
            c->layout = (ac_layout)l;
            return AC_OK;
        }
    return case_bad(err, f->key, "bhsd, bshd or thd", value);
}

static bool format_layout(const case_field *f, const ac_case *c, char *buf, size_t len)
{
    (void)f;
    snprintf(buf, len, "%s", ac_layout_name(c->layout));
    return c->layout == AC_LAYOUT_BHSD;
}

static void reset_layout(ac_case *c) { c->layout = AC_LAYOUT_BHSD; }

static int validate_layout(const case_field *f, const ac_case *c, ac_err *err)
{
    if (c->layout != AC_LAYOUT_BHSD && c->layout != AC_LAYOUT_BSHD && c->layout != AC_LAYOUT_THD)
        return ac_fail(err, AC_ERR_INPUT, "%s: unknown value %d", f->key, (int)c->layout);
    return AC_OK;
}

static int parse_dist(const case_field *f, const char *value, ac_case *c, ac_err *err)
{
    (void)f;
    return case_dist_parse(value, c, err);
}

static bool format_dist(const case_field *f, const ac_case *c, char *buf, size_t len)
{
    (void)f;
    case_dist_format(c, buf, len);
    return c->dist == AC_DIST_NORMAL && c->dist_a == 0.0 && c->dist_b == 1.0;
}

static void reset_dist(ac_case *c)
{
    c->dist = AC_DIST_NORMAL;
    c->dist_a = 0.0;
    c->dist_b = 1.0;
}

static int validate_dist(const case_field *f, const ac_case *c, ac_err *err)
{
    (void)f;
    return case_dist_validate(c, err);
}

static int parse_scale(const case_field *f, const char *value, ac_case *c, ac_err *err)
{
    double v;
    if (strcmp(value, "auto") == 0) {
        c->scale_auto = true;
        return AC_OK;
    }
    if (!case_read_number(value, &v))
        return case_bad(err, f->key, "auto or a finite number", value);
    c->scale_auto = false;
    c->scale = (double)(float)v; /* the kernel's scale is an f32 */
    return AC_OK;
}

static bool format_scale(const case_field *f, const ac_case *c, char *buf, size_t len)
{
    (void)f;
    if (c->scale_auto)
        snprintf(buf, len, "auto");
    else
        case_fmt_f32(buf, len, c->scale);
    return c->scale_auto;
}

static void reset_scale(ac_case *c)
{
    c->scale_auto = true;
    c->scale = (double)(float)(1.0 / sqrt((double)c->head_dim));
}

static int validate_scale(const case_field *f, const ac_case *c, ac_err *err)
{
    if (!c->scale_auto && (!isfinite(c->scale) || (float)c->scale == 0.0f || !isfinite((float)c->scale)))
        return ac_fail(err, AC_ERR_INPUT, "%s: must be a nonzero finite f32, got %g", f->key, c->scale);
    return AC_OK;
}

/* -- the variants' fields (ref/variants.h): optional, printed only when set */

static int validate_gqa(const case_field *f, const ac_case *c, ac_err *err)
{
    (void)f;
    if (c->heads_q % c->heads_kv != 0)
        return ac_fail(err, AC_ERR_INPUT, "hq=%d is not a multiple of hkv=%d", c->heads_q, c->heads_kv);
    return AC_OK;
}

/* -- the table: one row per field, in canonical order */

#define INT_FIELD(key, member, def, min, max, extra) \
    { \
        key, true, true, FIELD_INT, offsetof(ac_case, member), def, min, max, "a positive integer", NULL, NULL, NULL, \
            extra \
    }
#define CUSTOM_FIELD(key, required, always, name) \
    { \
        key, required, always, FIELD_CUSTOM, 0, 0, 0, 0, NULL, parse_##name, format_##name, reset_##name, \
            validate_##name \
    }

#define VARIANT_FIELD(key, name) \
    { \
        key, false, false, FIELD_CUSTOM, 0, 0, 0, 0, NULL, case_parse_##name, case_format_##name, case_reset_##name, \
            case_validate_##name \
    }

static const case_field fields[] = {
    {"seed", true, true, FIELD_CUSTOM, 0, 0, 0, 0, NULL, parse_seed, format_seed, reset_seed, NULL},
    INT_FIELD("b", batch, 1, 1, AC_CASE_MAX_BATCH, NULL),
    INT_FIELD("hq", heads_q, 1, 1, INT_MAX, NULL),
    INT_FIELD("hkv", heads_kv, 1, 1, INT_MAX, validate_gqa),
    INT_FIELD("nq", seqlen_q, 16, 1, INT_MAX, NULL),
    INT_FIELD("nk", seqlen_k, 16, 1, INT_MAX, NULL),
    INT_FIELD("d", head_dim, 16, 1, AC_MAX_HEAD_DIM, NULL),
    CUSTOM_FIELD("dtype", true, true, dtype),
    VARIANT_FIELD("out", out), /* fp8's: case_fp8.c */
    VARIANT_FIELD("descale", descale),
    VARIANT_FIELD("p", pfmt),
    VARIANT_FIELD("acc", fp8acc),
    CUSTOM_FIELD("mask", false, true, mask),
    {"maskrows", false, false, FIELD_DOUBLE, offsetof(ac_case, masked_rows), 0, 0, 1, "a fraction in [0,1]", NULL, NULL,
     NULL, validate_maskrows},
    CUSTOM_FIELD("seqlens-q", false, false, lens),
    CUSTOM_FIELD("seqlens-k", false, false, lens),
    CUSTOM_FIELD("layout", false, true, layout),
    CUSTOM_FIELD("dist", false, true, dist),
    CUSTOM_FIELD("scale", false, true, scale),
    VARIANT_FIELD("dv", dv), /* the variants' fields: case_variants.c */
    VARIANT_FIELD("v", vk),
    VARIANT_FIELD("softcap", softcap),
    VARIANT_FIELD("sinks", sinks),
    VARIANT_FIELD("alibi", alibi),
    VARIANT_FIELD("bias", bias),
    VARIANT_FIELD("maskdims", maskdims),
    VARIANT_FIELD("sinktokens", sinktokens),
    VARIANT_FIELD("dropout", dropout),
    VARIANT_FIELD("kv", kv), /* the paged KV cache and split-KV: case_paged.c */
    VARIANT_FIELD("splits", splits),
};
enum { N_FIELDS = (int)(sizeof fields / sizeof fields[0]) };

/* -- the number fields' parse, format, default and range */

static int parse_field(const case_field *f, const char *value, ac_case *c, ac_err *err)
{
    unsigned long long v;
    double x;
    switch (f->type) {
    case FIELD_INT:
        if (!case_read_digits(value, INT_MAX, &v) || (double)v < f->min)
            return case_bad(err, f->key, f->what, value);
        *int_at(f, c) = (int)v;
        return AC_OK;
    case FIELD_DOUBLE:
        if (!case_read_number(value, &x))
            return case_bad(err, f->key, f->what, value);
        *double_at(f, c) = x;
        return AC_OK;
    default:
        return f->parse(f, value, c, err);
    }
}

static bool format_field(const case_field *f, const ac_case *c, char *buf, size_t len)
{
    switch (f->type) {
    case FIELD_INT:
        snprintf(buf, len, "%d", int_of(f, c));
        return int_of(f, c) == (int)f->def;
    case FIELD_DOUBLE:
        case_fmt_double(buf, len, double_of(f, c));
        return double_of(f, c) == f->def;
    default:
        return f->format(f, c, buf, len);
    }
}

static void reset_field(const case_field *f, ac_case *c)
{
    if (f->type == FIELD_INT)
        *int_at(f, c) = (int)f->def;
    else if (f->type == FIELD_DOUBLE)
        *double_at(f, c) = f->def;
    else
        f->reset(c);
}

static int validate_field(const case_field *f, const ac_case *c, ac_err *err)
{
    if (f->type == FIELD_INT) {
        int v = int_of(f, c);
        if (v < f->min || v > f->max)
            return f->max == INT_MAX
                ? ac_fail(err, AC_ERR_INPUT, "%s: must be >= %g, got %d", f->key, f->min, v)
                : ac_fail(err, AC_ERR_INPUT, "%s: must be in %g..%g, got %d", f->key, f->min, f->max, v);
    } else if (f->type == FIELD_DOUBLE) {
        double v = double_of(f, c);
        if (!(v >= f->min && v <= f->max))
            return ac_fail(err, AC_ERR_INPUT, "%s: must be %s, got %g", f->key, f->what, v);
    }
    return f->validate ? f->validate(f, c, err) : AC_OK;
}

ac_dtype ac_case_out_dtype(const ac_case *c)
{
    return ac_dtype_is_fp8(c->dtype) ? c->out_dtype : ac_dtype_output(c->dtype);
}

/* ---- default, format, parse, validate ---------------------------------------------- */

ac_case ac_case_default(void)
{
    ac_case c;
    memset(&c, 0, sizeof c);
    c.version = 1;
    for (int f = 0; f < N_FIELDS; f++) /* in table order: scale's default reads d's */
        reset_field(&fields[f], &c);
    return c;
}

int ac_case_format(const ac_case *c, char *buf, size_t len)
{
    size_t at = 0;
    bool overflow = false;
    for (int f = -1; f < N_FIELDS; f++) { /* -1: the version */
        char value[AC_CASE_LINE_MAX];
        bool at_default = f >= 0 && format_field(&fields[f], c, value, sizeof value);
        if (f >= 0 && at_default && !fields[f].required && !fields[f].always)
            continue;
        size_t room = at < len ? len - at : 0;
        int n = f < 0 ? snprintf(room ? buf + at : NULL, room, "v1")
                      : snprintf(room ? buf + at : NULL, room, " %s=%s", fields[f].key, value);
        overflow |= n < 0 || (size_t)n >= room;
        at += n > 0 ? (size_t)n : 0;
    }
    return overflow ? -1 : (int)at;
}

/* One "key=value" token (NUL-terminated, no blanks). */
static int parse_token(char *tok, ac_case *c, unsigned *seen, ac_err *err)
{
    char *eq = strchr(tok, '=');
    if (!eq)
        return ac_fail(err, AC_ERR_INPUT, "'%s': expected key=value", tok);
    *eq = '\0';
    for (int f = 0; f < N_FIELDS; f++) {
        if (strcmp(tok, fields[f].key) != 0)
            continue;
        if (*seen & (1u << f))
            return ac_fail(err, AC_ERR_INPUT, "duplicate field '%s'", tok);
        *seen |= 1u << f;
        return parse_field(&fields[f], eq + 1, c, err);
    }
    return ac_fail(err, AC_ERR_INPUT, "unknown field '%s'", tok);
}

/* The tokens after "v1"; *seen gets a bit per field given. */
static int parse_tokens(char *buf, ac_case *c, unsigned *seen, ac_err *err)
{
    bool first = true;
    for (char *save = NULL, *tok = strtok_r(buf, " \t\r\n", &save); tok; tok = strtok_r(NULL, " \t\r\n", &save)) {
        if (first) {
            if (strcmp(tok, "v1") != 0)
                return ac_fail(err, AC_ERR_INPUT, "version: expected 'v1' first, got '%s'", tok);
            first = false;
            continue;
        }
        int st = parse_token(tok, c, seen, err);
        if (st != AC_OK)
            return st;
    }
    return first ? ac_fail(err, AC_ERR_INPUT, "case line: empty (expected 'v1 seed=... ')") : AC_OK;
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
    int st = parse_tokens(buf, &c, &seen, err);
    if (st != AC_OK)
        return st;
    for (int f = 0; f < N_FIELDS; f++)
        if (fields[f].required && !(seen & (1u << f)))
            return ac_fail(err, AC_ERR_INPUT, "missing field '%s'", fields[f].key);
    if (c.scale_auto)
        c.scale = (double)(float)(1.0 / sqrt((double)c.head_dim));
    st = ac_case_validate(&c, err);
    if (st == AC_OK)
        *out = c;
    return st;
}

int ac_case_validate(const ac_case *c, ac_err *err)
{
    if (!c)
        return ac_fail(err, AC_ERR_INPUT, "case: NULL");
    if (c->version != 1)
        return ac_fail(err, AC_ERR_INPUT, "version: only v1 exists, got %d", c->version);
    for (int f = 0; f < N_FIELDS; f++) {
        int st = validate_field(&fields[f], c, err);
        if (st != AC_OK)
            return st;
    }
    return AC_OK;
}
