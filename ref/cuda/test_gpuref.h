/* ref/cuda/test_gpuref.h — private to attncheck-test-gpuref: the case lines it
 * runs (test_gpuref_cases.c), the GPU-vs-CPU comparison of one bundle
 * (test_gpuref_compare.c) and the log both write to (test_gpuref_main.c). */
#ifndef ATTNCHECK_TEST_GPUREF_H
#define ATTNCHECK_TEST_GPUREF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../harness/harness.h"
#include "../ref_gpu.h"

/* Prints to stdout and, when $OUT is set, to $OUT/gpuref-test.log. */
void tg_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- case lines (test_gpuref_cases.c) ---- */
typedef struct {
    char line[AC_CASE_LINE_MAX];
    char where[160]; /* "fixtures/masks.cases:12", "random #7", ... */
} tg_line;

typedef struct {
    tg_line *lines;
    size_t n, cap;
} tg_lines;

/* Every case line of every *.cases file of dir, files in sorted order. */
int tg_load_fixtures(tg_lines *l, const char *dir, ac_err *err);
/* n random lines from seed: line k has mask kind k % 6, dtype (k / 6) % 3 and
 * layout (k / 18) % 2, so every mask x dtype x layout comes up within 36 lines;
 * the rest (GQA, varlen with empty sequences, Nq != Nk, fully masked rows,
 * head dims, distributions, scales) is drawn. */
int tg_random_lines(tg_lines *l, uint64_t seed, int n, ac_err *err);
int tg_add_line(tg_lines *l, const char *line, const char *where, ac_err *err);
void tg_lines_free(tg_lines *l);
/* b * hq * nq * nk * d, the size the program skips cases above. */
double tg_case_work(const ac_case *c);

/* ---- comparison (test_gpuref_compare.c) ---- */
/* The GPU bundle, allocated like ac_reference's arrays and poisoned with 1e300. */
typedef struct {
    ref_gpu_outputs out;
    bool backward;
} tg_bundle;
int tg_bundle_alloc(const ac_problem *p, bool backward, tg_bundle *g);
void tg_bundle_free(tg_bundle *g);

/* Compares every array of g with the CPU bundle r, printing a line per array
 * that fails (and all of them when verbose).  fp64 outputs and scales: within
 * max(1e-12 relative, the certification tolerance 1/64 ulp of the output
 * dtype (LSE: f32), floored at u E / 64); the naive: its max and mean error
 * against the fp64 reference within 10% of the CPU naive's (2x under 1024
 * elements), special values in the same places.  Returns the number of failing
 * arrays; *worst_units gets the largest tolerance ratio of the fp64 arrays and
 * *naive_same the fraction of naive elements bitwise equal to the CPU's. */
int tg_compare(const ac_inputs *in, const ac_reference *r, const tg_bundle *g, bool verbose, double *worst_units,
               double *naive_same);

#endif
