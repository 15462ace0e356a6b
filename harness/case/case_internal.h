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
bool case_read_number(const char *s, double *out);                                   /* a finite decimal */
/* "name(args)": NUL-terminates both in place; false when the shape is wrong. */
bool case_split_call(char *s, const char **name, char **args);
/* Splits args at commas into at most max numbers; the count, or -1. */
int case_read_numbers(char *args, double *vals, int max);
void case_fmt_double(char *buf, size_t len, double x); /* shortest %g that reads back exactly */
void case_fmt_f32(char *buf, size_t len, double x);    /* shortest %g that reads back to the same f32 */

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
int case_rng_int(case_rng *r, int lo, int hi);               /* uniform in lo..hi */
int case_rng_pick(case_rng *r, const int *weights, int n);   /* i with probability weights[i] / sum */
/* The generator's weight of mask kind k (before the kernel's claims and --mask),
 * and the draw of its parameters for case c (sizes already drawn). */
int case_mask_weight(ac_mask_kind k);
void case_mask_draw(case_rng *r, ac_case *c);

#endif
