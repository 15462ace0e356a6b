/* harness/harness.h — case lines, generator, inputs, comparator, gate,
 * runner, shrinker and report writers.  The CLI (harness/main.c) is built on
 * these alone.  See ../shared/DESIGN.md for the data flow.
 *
 * Sections are owned by different files:
 *   case lines ............ case.c        generator ........ generate.c
 *   inputs ................ inputs.c      reference bundle . reference.c
 *   comparator ............ compare.c     budgets/gate ..... budget.c
 *   runner ................ run.c         shrinker ......... shrink.c
 *   writers ............... report_*.c
 */
#ifndef ATTNCHECK_HARNESS_H
#define ATTNCHECK_HARNESS_H

#include <stdio.h>

#include "../kernels/kernel.h"
#include "../ref/ref.h"

/* ======================= case lines (case.c) =======================
 * One line reproduces one case exactly, e.g.
 *   v1 seed=9 b=2 hq=8 hkv=2 nq=300 nk=700 d=96 dtype=bf16 mask=causal-br layout=bhsd dist=normal(0,1) scale=auto
 * Fields after "v1" are key=value separated by single spaces, printed in a
 * fixed order; optional fields are printed only when not at their default.
 * Parse -> format round-trips byte for byte for every line format produces. */
#define AC_CASE_MAX_BATCH 64
#define AC_CASE_LINE_MAX 1024

typedef enum {
    AC_CMASK_NONE = 0,
    AC_CMASK_CAUSAL,   /* window (INF, 0) in the case's alignment */
    AC_CMASK_WINDOW,   /* window (left, right) in the case's alignment */
    AC_CMASK_DENSE,    /* random boolean mask with keep probability dense_keep, drawn from the seed */
} ac_case_mask;

typedef enum {
    AC_DIST_NORMAL = 0, /* normal(mean, std) */
    AC_DIST_UNIFORM,    /* uniform(lo, hi) */
    AC_DIST_OUTLIERS,   /* normal(0, a) with a fraction b of elements times 1000 (heavy tail) */
    AC_DIST_INCREASING, /* scores grow along the keys: a rescale at every tile; a = slope */
    AC_DIST_EQUAL,      /* all scores equal (K rows identical), V random */
    AC_DIST_DOMINANT,   /* one key per row dominates by a margin a */
    AC_DIST_HUGE,       /* magnitudes near the dtype's overflow (fraction a of its max) */
    AC_DIST_TINY,       /* magnitudes near the dtype's underflow */
    AC_DIST_COUNT
} ac_dist_kind;

typedef struct {
    int version;  /* 1 */
    uint64_t seed;
    int batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim;
    ac_dtype dtype;
    ac_layout layout;
    ac_case_mask mask;
    ac_align align;
    int window_left, window_right; /* AC_CMASK_WINDOW; AC_WINDOW_INF allowed on one side */
    double dense_keep;             /* AC_CMASK_DENSE */
    double masked_rows;            /* fraction of query rows fully masked (needs a dense mask) */
    int n_seqlens_q, n_seqlens_k;  /* 0, or batch: per-sequence lengths */
    int seqlens_q[AC_CASE_MAX_BATCH], seqlens_k[AC_CASE_MAX_BATCH];
    bool scale_auto;               /* scale = 1/sqrt(d) */
    double scale;
    ac_dist_kind dist;
    double dist_a, dist_b;
} ac_case;

/* AC_OK, or AC_ERR_INPUT with a message naming the bad field. */
int ac_case_parse(const char *line, ac_case *c, ac_err *err);
/* Writes the canonical line (no newline); returns its length, or -1 if len is too small. */
int ac_case_format(const ac_case *c, char *buf, size_t len);
/* Semantic checks (sizes, window, seqlens, GQA) beyond syntax. */
int ac_case_validate(const ac_case *c, ac_err *err);
/* A valid default case (seed 1, b=1, h=1, nq=nk=16, d=16, f16, no mask, normal(0,1)). */
ac_case ac_case_default(void);

/* ======================= generator (generate.c) ===================== */
typedef struct {
    uint64_t campaign_seed;
    uint64_t index;           /* cases drawn so far */
    ac_caps caps;             /* only cases inside these are drawn */
    unsigned dtype_filter;    /* bit per ac_dtype; 0 = all the kernel claims */
    unsigned mask_filter;     /* AC_MASKCAP_* bits; 0 = all the kernel claims */
    int max_seqlen;           /* cap on nq, nk (keeps CPU kernels in budget); 0 = default */
} ac_gen;

void ac_gen_init(ac_gen *g, uint64_t campaign_seed, const ac_caps *caps);
/* The next case of the stream: a pure function of (campaign_seed, index, caps, filters). */
int ac_gen_next(ac_gen *g, ac_case *c, ac_err *err);

/* ======================= inputs (inputs.c) ==========================
 * A case made concrete: the problem, inputs in the case's dtype and their
 * exact widenings, dO for the backward, mask and seqlens storage. */
typedef struct {
    ac_case c;
    ac_problem p;
    void *q, *k, *v, *d_o;          /* dtype bit patterns */
    double *qd, *kd, *vd, *d_od;    /* exact widenings */
    int *seqlens_q, *seqlens_k;     /* owned; p points at them */
    uint8_t *dense_mask;            /* owned; p points at it */
} ac_inputs;

int ac_inputs_make(const ac_case *c, ac_inputs *in, ac_err *err);
void ac_inputs_free(ac_inputs *in);

/* ======================= reference bundle (reference.c) ============= */
typedef struct {
    bool has_backward;
    double *o, *lse, *dq, *dk, *dv, *delta;      /* fp64 reference */
    double *e_o, *e_lse, *e_dq, *e_dk, *e_dv;    /* error scales (e_lse: see compare.c) */
    double *naive_o, *naive_lse, *naive_dq, *naive_dk, *naive_dv; /* same-dtype naive baseline */
    ac_cert cert;
} ac_reference;

int ac_reference_make(const ac_inputs *in, bool backward, int cert_rows, ac_reference *r, ac_err *err);
void ac_reference_free(ac_reference *r);

/* ======================= comparator (compare.c) ===================== */
typedef enum { AC_OUT_O = 0, AC_OUT_LSE, AC_OUT_DQ, AC_OUT_DK, AC_OUT_DV, AC_OUT_COUNT } ac_output;
const char *ac_output_name(ac_output o); /* "O", "LSE", "dQ", "dK", "dV" */

typedef struct {
    int b, h, row, col; /* col = -1 for LSE */
} ac_where;

typedef struct {
    bool present;
    size_t n_compared;
    double max_ulp, mean_ulp;
    ac_where at_max_ulp;
    double max_scaled;
    ac_where at_max_scaled;
    double max_abs, mean_abs;
    double naive_max_abs, naive_mean_abs;
    double vs_naive_max, vs_naive_mean; /* kernel / naive; 0 when both are 0 */
    /* special-value classes, checked before any magnitude */
    size_t n_unexpected_nan, n_overflow, n_lost_special, n_wrong_zero, n_unwritten;
    ac_where first_special;
    /* which convention fully masked rows follow: rows seen, rows giving O = 0 (LSE -inf), rows giving NaN */
    size_t masked_rows, masked_rows_zero, masked_rows_nan;
} ac_metrics;

/* Poison: a NaN payload no arithmetic produces, so a surviving one means "never written". */
void ac_poison(ac_dtype t, void *buf, size_t n);
void ac_poison_f32(float *buf, size_t n);
bool ac_is_poison(ac_dtype t, const void *buf, size_t i);

/* Compare one output of a kernel with the reference.  got: dtype bits (float
 * for LSE), ref/escale/naive: doubles, Q-like / K-like / LSE-shaped as the output is. */
void ac_compare(const ac_inputs *in, ac_output which, const void *got, const double *ref,
                const double *escale, const double *naive, ac_metrics *m);

/* ======================= budgets and the gate (budget.c) =========== */
typedef struct {
    /* per dtype, per output: max scaled error (f32: times sqrt(Nk)/sqrt(scale_n0)), mean vs-naive ratio, ... */
    double max_scaled[AC_DTYPE_COUNT][AC_OUT_COUNT];
    double max_vs_naive_mean[AC_DTYPE_COUNT][AC_OUT_COUNT];
    int version;
    char source[256]; /* file it came from */
} ac_budgets;

int ac_budgets_load(const char *path, ac_budgets *b, ac_err *err);
/* Where the budgets file is: --budgets, else $ATTNCHECK_BUDGETS, else the source tree's budgets.txt. */
const char *ac_budgets_default_path(void);

typedef enum { AC_VERDICT_PASS = 0, AC_VERDICT_FAIL = 1, AC_VERDICT_ERROR = 2 } ac_verdict;

/* Fills why (which budget, by how much, where) on failure; "kind" is a short stable
 * signature of the failure (e.g. "O:scaled", "LSE:unexpected-nan") the shrinker keeps. */
ac_verdict ac_gate(const ac_inputs *in, const ac_metrics m[AC_OUT_COUNT], const ac_budgets *b,
                   char *why, size_t why_len, char *kind, size_t kind_len);

/* ======================= runner (run.c) ============================= */
typedef struct {
    bool backward;     /* run the backward when the kernel has one */
    int cert_rows;     /* MPFR certification rows per case (0 = none) */
} ac_run_opts;

typedef struct {
    char line[AC_CASE_LINE_MAX];
    ac_verdict verdict;
    int status;                    /* AC_OK, or the AC_ERR_* that stopped it */
    ac_metrics m[AC_OUT_COUNT];
    ac_cert cert;
    char why[1024];
    char kind[64];
    double seconds;
} ac_result;

/* Runs one case end to end: inputs, poisoned outputs, kernel forward (and
 * backward), reference, compare, gate.  Returns AC_OK when a verdict was
 * reached (pass or fail, in r->verdict), or the AC_ERR_* that prevented it. */
int ac_run_case(const ac_kernel *k, const ac_case *c, const ac_budgets *b, const ac_run_opts *o,
                ac_result *r, ac_err *err);

/* ======================= shrinker (shrink.c) ======================== */
/* Does the case still fail the same way?  true to keep the shrink step. */
typedef bool (*ac_still_fails)(const ac_case *c, void *ctx);

/* Greedy: batch -> 1, heads -> 1, halve nq/nk, smaller d, simpler mask,
 * simpler distribution, fewer seeds..., keeping each step that still fails.
 * Returns the number of predicate calls made. */
int ac_shrink(const ac_case *failing, ac_still_fails pred, void *ctx, int max_steps, ac_case *minimal);

/* Appends "# date kernel why\nLINE\n" to DIR/<kernel>.cases atomically (write temp, rename). */
int ac_save_failure(const char *dir, const char *kernel, const char *why, const char *line, ac_err *err);

/* ======================= writers (report_*.c) ======================= */
typedef struct ac_report ac_report; /* collects results for one invocation */
int ac_report_open(ac_report **r, const char *json_path, const char *junit_path,
                   const char *markdown_path, ac_err *err);
void ac_report_add(ac_report *r, const char *kernel, const ac_result *res, const char *minimal_line);
int ac_report_close(ac_report *r, ac_err *err); /* writes atomically, frees */

/* ======================= CLI pieces in their own files ============== 
 * main.c parses the common options and dispatches; each returns an exit status. */
int ac_cmd_check(int argc, char **argv);     /* check.c: attncheck check PATH [options] */
int ac_cmd_reference(int argc, char **argv); /* check.c: attncheck reference PATH [options] */
/* plugin.c: dlopen a plugin, validate its descriptor, register it as a kernel. */
int ac_plugin_load(const char *path, const ac_kernel **out, ac_err *err);

#endif
