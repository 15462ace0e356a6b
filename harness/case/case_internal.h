/* harness/case/case_internal.h — shared by the files of harness/case/ only:
 * how case-line values are read and written canonically (numbers.c), the mask
 * kinds' behaviours (masks.c), the distributions (dists.c), and the
 * generator's random stream, which masks.c draws a kind's parameters from. */
#ifndef ATTNCHECK_CASE_INTERNAL_H
#define ATTNCHECK_CASE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "harness/case/case.h"
#include "ref/rng.h"

/* ---- values (numbers.c) -------------------------------------------------------
 * Readers take all of s or fail; writers print the shortest form that reads
 * back to the same value, so parse -> format is byte-identical. */
/* AC_ERR_INPUT with "KEY: expected WHAT, got 'GOT'". */
int case_bad(ac_err *err, const char *key, const char *what, const char *got);
bool case_read_digits(const char *s, unsigned long long max, unsigned long long *out); /* [0-9]+, <= max */
bool case_read_number(const char *s, double *out); /* a finite decimal */
/* "name(args)": NUL-terminates both in place; false when the shape is wrong. */
bool case_split_call(char *s, const char **name, char **args);
/* Splits args at commas into at most max numbers; the count, or -1. */
int case_read_numbers(char *args, double *vals, int max);
void case_fmt_double(char *buf, size_t len, double x); /* shortest %g that reads back exactly */
void case_fmt_f32(char *buf, size_t len, double x); /* shortest %g that reads back to the same f32 */

/* ---- the fields' table (case.c): one row per field, in canonical order ---------- */
typedef struct case_field case_field;
typedef enum { FIELD_INT, FIELD_DOUBLE, FIELD_CUSTOM } field_type;

struct case_field {
    const char *key;
    bool required; /* a v1 line must give it */
    bool always; /* printed at its default too (v1 prints mask, layout, dist, scale) */
    field_type type;
    /* FIELD_INT, FIELD_DOUBLE: the member, its default and range, and what a value must be */
    size_t offset;
    double def, min, max;
    const char *what;
    /* FIELD_CUSTOM; validate also adds checks to the number fields.  format
     * writes the value and returns false when it is at its default. */
    int (*parse)(const case_field *f, const char *value, ac_case *c, ac_err *err);
    bool (*format)(const case_field *f, const ac_case *c, char *buf, size_t len);
    void (*reset)(ac_case *c);
    int (*validate)(const case_field *f, const ac_case *c, ac_err *err);
};

/* The variants' fields (case_variants.c), rows of case.c's table. */
#define CASE_VARIANT_FIELD_FNS(name) \
    int case_parse_##name(const case_field *f, const char *value, ac_case *c, ac_err *err); \
    bool case_format_##name(const case_field *f, const ac_case *c, char *buf, size_t len); \
    void case_reset_##name(ac_case *c); \
    int case_validate_##name(const case_field *f, const ac_case *c, ac_err *err);
CASE_VARIANT_FIELD_FNS(dv)
CASE_VARIANT_FIELD_FNS(vk)
CASE_VARIANT_FIELD_FNS(softcap)
CASE_VARIANT_FIELD_FNS(sinks)
CASE_VARIANT_FIELD_FNS(alibi)
CASE_VARIANT_FIELD_FNS(bias)
CASE_VARIANT_FIELD_FNS(maskdims)
CASE_VARIANT_FIELD_FNS(sinktokens)
CASE_VARIANT_FIELD_FNS(dropout)
CASE_VARIANT_FIELD_FNS(kv) /* case_paged.c */
CASE_VARIANT_FIELD_FNS(splits)
CASE_VARIANT_FIELD_FNS(out) /* fp8's fields: case_fp8.c */
CASE_VARIANT_FIELD_FNS(descale)
CASE_VARIANT_FIELD_FNS(pfmt)
CASE_VARIANT_FIELD_FNS(fp8acc)
#undef CASE_VARIANT_FIELD_FNS

/* ---- mask kinds (masks.c) ------------------------------------------------------- */
void case_mask_format(const ac_case *c, char *buf, size_t len); /* "window-br(8,0)" */
int case_mask_validate(const ac_case *c, ac_err *err);

/* ---- distributions (dists.c) ---------------------------------------------------- */
int case_dist_parse(const char *value, ac_case *c, ac_err *err);
void case_dist_format(const ac_case *c, char *buf, size_t len); /* "normal(0,1)" */
int case_dist_validate(const ac_case *c, ac_err *err);

/* ---- the generator's stream (generate.c) ----------------------------------------- */
typedef struct {
    uint64_t state;
} case_rng;
static inline uint64_t case_rng_u64(case_rng *r) { return ac_splitmix64(&r->state); }
int case_rng_int(case_rng *r, int lo, int hi); /* uniform in lo..hi */
int case_rng_pick(case_rng *r, const int *weights, int n); /* i with probability weights[i] / sum */
/* The generator's weight of mask kind k (before the kernel's claims and --mask),
 * and the draw of its parameters for case c (sizes already drawn). */
int case_mask_weight(ac_mask_kind k);
void case_mask_draw(case_rng *r, ac_case *c);

#endif
