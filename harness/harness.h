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
 * Parse -> format round-trips byte for byte for every line format produces.
 * Grammar (case.c): v1 seed b hq hkv nq nk d dtype mask [maskrows] [seqlens-q]
 * [seqlens-k] layout dist scale, with
 *   mask = none | causal-tl | causal-br | window-tl(L,R) | window-br(L,R) | dense(KEEP)
 *          (L, R integers >= 0 or inf; KEEP in (0,1]);  maskrows = FRAC in [0,1] (dense only)
 *   seqlens-q/-k = one length per sequence, each in 0..nq (0..nk)
 *   dist = normal(M,S) | uniform(LO,HI) | outliers(S,P) | increasing(SLOPE) | equal()
 *          | dominant(MARGIN) | huge(FRAC) | tiny();   scale = auto | VALUE
 * The parser also takes fields in any order and extra blanks, and defaults a
 * missing mask, layout, dist or scale (none, bhsd, normal(0,1), auto); the
 * other fields are required.  c->scale always holds the f32 value the kernel
 * uses ((float)(1/sqrt(d)) for auto, when parsed); ac_inputs_make recomputes it. */
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
/* What each distribution draws exactly (inputs.c); dO is normal(0,1) throughout:
 *   normal, uniform: every element of Q, K, V.
 *   outliers(S,P): Q, K normal(0,S), each element times AC_OUTLIER_FACTOR with
 *     probability P (heavy-tailed scores); V normal(0,S) (a heavy tail in V as well
 *     would push dQ = scale dS K past f16's range).
 *   increasing(SLOPE): Q_i = a_i w, K_j = t_j w (w in {-1,1}^d per (b, kv head), a_i
 *     in [0.5,1] / (scale d), t_j = SLOPE (j+1) / nk), so S_ij = scale d a_i t_j grows
 *     with j from ~0 to ~SLOPE in every row; V normal(0,1).
 *   equal(): K rows identical within each (b, kv head); Q, V normal(0,1).
 *   dominant(MARGIN): one key j* per (b, kv head) whose score beats every other
 *     key's, in every row, by >= MARGIN (Q_i0 = sign(scale), K_j* = (beta, 0, ..)).
 *   huge(FRAC) and tiny() have two modes, picked by the case seed (ac_dist_mode):
 *     mode 0 "scores": Q, K huge (f16: up to FRAC * 65504; bf16/f32: FRAC * 2^56, so
 *       S fits the f32 a fused kernel accumulates it in), V normal(0,1) — softmax
 *       one-hot, exp overflows without the max subtraction;
 *     mode 1 "values": V huge (f16: up to FRAC * 65504; bf16/f32: FRAC * max * 2^-17, so
 *       an f32 accumulator over 2^16 keys holds it), each column V_.c = +-T (1 - 2^-9 r):
 *       O near the top, an un-normalised accumulation in the dtype overflows, while
 *       dP - D = dO.(V_j - O) stays small enough for dS in the dtype.
 *     tiny: magnitudes in [2, 128] x the dtype's smallest normal (Q, K in mode 0;
 *       V in mode 1), random signs; normal(0,1) for the rest. */
#define AC_OUTLIER_FACTOR 1000.0
const char *ac_dist_name(ac_dist_kind k);  /* "normal", ... */
int ac_dist_param_count(ac_dist_kind k);   /* numbers inside the parentheses: 0, 1 or 2 */

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
/* max_seqlen 0 means AC_GEN_DEFAULT_MAX_SEQLEN (sized for CPU kernels: cpu-flash with backward
 * runs ~2 000 cases a minute on 2 cores); CUDA campaigns raise it (4096+).  caps.max_seqlen, when set,
 * caps it further.  The weights of the stream are documented in generate.c. */
#define AC_GEN_DEFAULT_MAX_SEQLEN 512

void ac_gen_init(ac_gen *g, uint64_t campaign_seed, const ac_caps *caps);
/* The next case of the stream: a pure function of (campaign_seed, index, caps, filters).
 * AC_ERR_INPUT when caps and filters leave nothing to draw (no dtype, mask or layout). */
int ac_gen_next(ac_gen *g, ac_case *c, ac_err *err);
/* Case `index` of the stream alone (ac_gen_next without advancing g->index). */
int ac_gen_case_at(const ac_gen *g, uint64_t index, ac_case *c, ac_err *err);
/* The effective cap on nq and nk for this generator. */
int ac_gen_max_seqlen(const ac_gen *g);

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

/* Validates c (ac_case_validate, then ac_problem_validate with the default memory
 * budget), builds the problem (scale: the f32 value the kernel uses,
 * (double)(float)(1/sqrt(d)) for scale=auto; dense mask (1, 1, Nq, Nk) with the
 * maskrows fraction of rows fully masked) and draws Q, K, V, dO from the case
 * seed: the same case gives byte-identical tensors, in either layout the same
 * logical values.  in is zeroed first, so ac_inputs_free is safe after a failure. */
int ac_inputs_make(const ac_case *c, ac_inputs *in, ac_err *err);
void ac_inputs_free(ac_inputs *in);
/* huge/tiny: 0 = "scores" (Q, K), 1 = "values" (V); a function of the case seed. */
int ac_dist_mode(const ac_case *c);

/* ======================= reference bundle (reference.c) =============
 * Everything a case is compared with, allocated once per case:
 *   o, lse, dq, dk, dv, delta: the fp64 reference (ref_forward_fp64 / ref_backward_fp64);
 *   e_*: error scales E (ref_error_scales), scaled_err = |y - x| / (u * E);
 *   e_lse: the LSE scale, defined here because the kernel computes LSE in f32
 *     whatever its dtype: E_lse_i = 1 + |LSE_i| + (d + 2) |scale| max_{j visible} sum_c |Q_ic||K_jc|
 *     (S_ij's f32 dot product errs by ~u_f32 * scale * sum_c |Q_ic||K_jc| and LSE is
 *     1-Lipschitz in S; log(l) >= 0 errs by ~u_f32 absolutely (the 1); the final
 *     m + log(l) rounds relative to |LSE|).  0 on a row with no visible key (exact -inf)
 *     and on padding rows.  LSE is measured with u = u_f32 and f32 ulps;
 *   naive_*: the same-dtype naive baseline (ref_naive_forward / _backward, the
 *     backward fed the naive O and LSE, as a framework would);
 *   cert: the MPFR certification of o/lse on cert_rows sampled rows (seed = the
 *     case seed); cert_rows == 0 skips it (rows_checked == 0, certified false).
 * backward needs in->d_od; r is zeroed first, so ac_reference_free is safe after a failure. */
typedef struct {
    bool has_backward;
    double *o, *lse, *dq, *dk, *dv, *delta;      /* fp64 reference */
    double *e_o, *e_lse, *e_dq, *e_dk, *e_dv;    /* error scales (e_lse: see above) */
    double *naive_o, *naive_lse, *naive_dq, *naive_dk, *naive_dv; /* same-dtype naive baseline */
    ac_cert cert;
} ac_reference;

int ac_reference_make(const ac_inputs *in, bool backward, int cert_rows, ac_reference *r, ac_err *err);
void ac_reference_free(ac_reference *r);
/* The LSE error scale above, on its own (e_lse: ac_lse_elems(p) doubles); used by
 * ac_reference_make, public so tests and tools can compute it for hand-made inputs. */
int ac_lse_error_scale(const ac_problem *p, const double *q, const double *k, const double *lse,
                       double *e_lse, ac_err *err);

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
    /* The means (and mean E) are over the n_mean elements whose reference is at least
     * the dtype's smallest normal: see compare.c, add_magnitudes. */
    double max_abs, mean_abs;
    double naive_max_abs, naive_mean_abs;
    size_t n_mean;
    double vs_naive_max, vs_naive_mean; /* kernel / naive; 0 when both are 0, +inf when only naive is 0 */
    bool has_naive;                     /* naive was given; otherwise the naive fields are 0 */
    double mean_escale;                 /* mean E over the elements in the magnitudes (the gate's vs-naive guard) */
    /* special-value classes, checked before any magnitude */
    size_t n_unexpected_nan, n_overflow, n_lost_special, n_wrong_zero, n_unwritten;
    ac_where first_special;
    /* which convention fully masked rows follow: rows seen, rows giving O = 0 (LSE -inf), rows giving NaN.
     * Counted for O, LSE and dQ (Q-like rows with no visible key), never for dK/dV.
     * masked_rows_lse_posinf: LSE rows giving +inf (FlashAttention 2's non-split kernels
     * write +inf there); accepted like -inf and also counted in masked_rows_zero. */
    size_t masked_rows, masked_rows_zero, masked_rows_nan, masked_rows_lse_posinf;
} ac_metrics;

/* Poison: fills n elements with ac_dtype_poison(t) (the dtype table's NaN
 * pattern, see ref.h), so a surviving one means "never written". */
void ac_poison(ac_dtype t, void *buf, size_t n);
void ac_poison_f32(float *buf, size_t n);
bool ac_is_poison(ac_dtype t, const void *buf, size_t i);

/* Compare one output of a kernel with the reference over the non-padding
 * elements (rows i < nq_b; for dK/dV keys j < nk_b).  got: dtype bits (float
 * for LSE), ref/escale/naive: doubles, Q-like / K-like / LSE-shaped as the
 * output is; naive may be NULL.  Per element, in this order (SLEEF-style, a
 * special class is counted instead of a magnitude):
 *   unwritten      got is the poison pattern;
 *   lost-special   ref is NaN/+-Inf and got differs (LSE -inf of a row with no
 *                  visible key: +-inf accepted, see masked_rows_lse_posinf);
 *   unexpected-nan got NaN, ref finite;   overflow: got +-Inf, ref finite;
 *   wrong-zero     E == 0 (ref is an exact zero) and got != 0, or got == 0 and
 *                  |ref| > AC_WRONG_ZERO_SCALED * u * E (a zero no rounding explains);
 *                  the latter still enters the magnitudes.
 * Magnitudes: ulp = |y - x| / ac_ulp(dtype, x), scaled = |y - x| / (u * E),
 * abs = |y - x|; LSE uses f32's ulp and u whatever the dtype.  Means are over
 * the elements in the magnitudes; the first maximum wins ties. */
#define AC_WRONG_ZERO_SCALED 1000.0
void ac_compare(const ac_inputs *in, ac_output which, const void *got, const double *ref,
                const double *escale, const double *naive, ac_metrics *m);
/* The dtype whose ulp and unit roundoff output `which` is measured in: t, or f32 for LSE. */
ac_dtype ac_output_dtype(ac_dtype t, ac_output which);

/* ======================= budgets and the gate (budget.c) ===========
 * budgets.txt at the repository root, line-oriented, '#' comments:
 *   version 1
 *   growth-length 64
 *   DTYPE OUTPUT scaled VALUE [grows]       e.g. "f16 O scaled 4", "f32 dQ scaled 8 grows"
 *   DTYPE OUTPUT vs-naive-mean VALUE|off    e.g. "f16 O vs-naive-mean 1.5"
 * Every (dtype, output) pair needs both lines.  A "grows" budget is multiplied by
 * max(1, sqrt(L / growth-length)), L = max(seqlen_q, seqlen_k, head_dim): f32
 * accumulations over N and d terms err like a random walk (see budgets.txt). */
typedef struct {
    double max_scaled[AC_DTYPE_COUNT][AC_OUT_COUNT];        /* before growth */
    double max_vs_naive_mean[AC_DTYPE_COUNT][AC_OUT_COUNT]; /* 0 = off */
    bool scaled_grows[AC_DTYPE_COUNT][AC_OUT_COUNT];
    double growth_length;
    int version;
    char source[256]; /* file it came from */
} ac_budgets;

int ac_budgets_load(const char *path, ac_budgets *b, ac_err *err);
/* Where the budgets file is: --budgets (the CLI's job), else $ATTNCHECK_BUDGETS, else the source tree's budgets.txt. */
const char *ac_budgets_default_path(void);
/* The growth factor for problem p (1 when the budget does not grow) and the budget it gives. */
double ac_budget_growth(const ac_budgets *b, const ac_problem *p, ac_dtype t, ac_output o);
double ac_budget_max_scaled(const ac_budgets *b, const ac_problem *p, ac_dtype t, ac_output o);
/* The vs-naive-mean check applies only with at least AC_VS_NAIVE_MIN_ELEMS elements,
 * AC_VS_NAIVE_MIN_ROWS query rows and as many keys (all heads and sequences), and a
 * naive mean error >= u * mean(E) / AC_VS_NAIVE_FLOOR_DIV (else the naive is ~exact
 * and a ratio says nothing).  A mean over a handful of rows or keys is too noisy
 * for a 1.5x ratio (correct kernels read 1.67x over 100 dQ elements of 2 query
 * rows, 2.57x over the 1029 dK elements of one query row); small problems are
 * judged by the max scaled error alone.  The elements counted are those in the
 * means: references at least the smallest normal (ac_metrics.n_mean). */
#define AC_VS_NAIVE_MIN_ELEMS 1024
#define AC_VS_NAIVE_MIN_ROWS 32
#define AC_VS_NAIVE_FLOOR_DIV 64.0

typedef enum { AC_VERDICT_PASS = 0, AC_VERDICT_FAIL = 1, AC_VERDICT_ERROR = 2 } ac_verdict;

/* Fills why (which budget, by how much, where) on failure; "kind" is a short stable
 * signature of the failure (e.g. "O:scaled", "LSE:unexpected-nan") the shrinker keeps.
 * Order: special classes (unwritten, unexpected-nan, overflow, lost-special,
 * wrong-zero; outputs O, LSE, dQ, dK, dV), then max scaled vs budget
 * ("O:scaled"), then the mean vs-naive ratio ("O:vs-naive-mean").  On a pass why
 * and kind are "". */
ac_verdict ac_gate(const ac_inputs *in, const ac_metrics m[AC_OUT_COUNT], const ac_budgets *b,
                   char *why, size_t why_len, char *kind, size_t kind_len);
/* A reference that was checked against MPFR and missed (rows_checked > 0, not
 * certified) is not a kernel failure, but must be said: appends "; reference not
 * certified: ..." to why and returns true.  false (why untouched) otherwise. */
bool ac_cert_note(const ac_cert *cert, char *why, size_t why_len);

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
    /* added by run.c's owner: */
    ac_dtype dtype;                /* the case's dtype (for per-dtype summaries) */
    bool has_backward;             /* dQ, dK, dV were run and compared */
    bool unsupported;              /* outside the kernel's claimed caps: not run (status AC_ERR_INPUT, kind "error:input") */
} ac_result;

/* Runs one case end to end: inputs, poisoned outputs, kernel forward (and
 * backward), reference, compare, gate.  Returns AC_OK when a verdict was
 * reached (pass or fail, in r->verdict), or the AC_ERR_* that prevented it. */
int ac_run_case(const ac_kernel *k, const ac_case *c, const ac_budgets *b, const ac_run_opts *o,
                ac_result *r, ac_err *err);

/* ---- campaigns (run.c): the fuzz loop shared by `fuzz` and `prove` ----
 * Per dtype x output aggregates over a campaign (or a replay). */
typedef struct {
    long cases;                       /* cases in which this output was compared */
    double max_ulp, max_scaled, vs_naive_max, vs_naive_mean;
    long specials;                    /* NaN/Inf/zero/unwritten elements, all classes */
    long failures;                    /* failures whose kind names this output */
} ac_summary_cell;

typedef struct {
    long cases, passed, failed, errors;
    int worst_status;                 /* highest AC_ERR_* among the errors, else AC_OK */
    double seconds;
    ac_summary_cell cell[AC_DTYPE_COUNT][AC_OUT_COUNT];
    long first_fail_case;             /* 1-based index of the first failure; 0 = none */
    double first_fail_seconds;        /* campaign time when it was found (before shrinking) */
    char first_kind[64], first_why[1024];
    char first_line[AC_CASE_LINE_MAX], first_minimal[AC_CASE_LINE_MAX];
} ac_summary;

struct ac_report;
typedef struct {
    uint64_t seed;
    long max_cases;                   /* stop after this many cases (0 = no limit) */
    double max_seconds;               /* stop after this long (0 = no limit) */
    unsigned dtype_filter, mask_filter; /* as in ac_gen */
    int max_seqlen;                   /* as in ac_gen */
    bool stop_first;                  /* stop at the first failure */
    int shrink_steps;                 /* predicate runs allowed per failure; 0 = no shrinking */
    const char *save_dir;             /* --save-failures DIR, or NULL */
    ac_run_opts run;
    bool progress;                    /* the "\r cases, cases/s, failures" line on stderr */
    FILE *out;                        /* failures and errors are printed here; NULL = silent */
} ac_campaign_opts;

/* Fuzzes k; a failure is shrunk (same kind), printed and saved.  Returns AC_OK,
 * or the AC_ERR_* that stopped it (generator error, device fault: AC_ERR_ENV);
 * other per-case errors are counted in s->errors / s->worst_status.  rep may be NULL. */
int ac_campaign(const ac_kernel *k, const ac_budgets *b, const ac_campaign_opts *o, struct ac_report *rep,
                ac_summary *s, ac_err *err);
/* Shrinks c, which fails with kind on k, keeping only steps that fail with the same kind. */
int ac_shrink_failure(const ac_kernel *k, const ac_budgets *b, const ac_run_opts *o, const ac_case *c,
                      const char *kind, int max_steps, ac_case *minimal);
void ac_summary_add(ac_summary *s, const ac_result *r);
void ac_summary_print(FILE *f, const char *kernel, const ac_summary *s);
/* Seconds on the monotonic clock, for the time lines of run, fuzz and check. */
double ac_now_seconds(void);

/* ---- prove (prove.c): detection power ----
 * Fuzzes the base kernel for clean_cases cases (it must pass them all), then
 * every registered kernel whose name contains "mutant" and starts with the
 * base's family prefix (its name up to and including the first '-'), each with
 * the same seed, until its first failure or mutant_cases.  Prints the table to
 * out, writes it as Markdown when markdown_path is set.  Returns 0 when the base
 * passed and every mutant was caught, 1 otherwise, 2/3 on errors. */
typedef struct {
    const char *base;                 /* default "cpu-flash" */
    uint64_t seed;
    long mutant_cases, clean_cases;
    int max_seqlen;
    int shrink_steps;
    ac_run_opts run;
    bool progress;
    const char *markdown_path;
    FILE *out;
} ac_prove_opts;
int ac_prove(const ac_prove_opts *o, const ac_budgets *b, struct ac_report *rep, ac_err *err);

/* ======================= shrinker (shrink.c) ======================== */
/* Does the case still fail the same way?  true to keep the shrink step. */
typedef bool (*ac_still_fails)(const ac_case *c, void *ctx);

/* Greedy: batch -> 1, heads -> 1, halve nq/nk, smaller d, simpler mask,
 * simpler distribution, fewer seeds..., keeping each step that still fails.
 * Returns the number of predicate calls made. */
int ac_shrink(const ac_case *failing, ac_still_fails pred, void *ctx, int max_steps, ac_case *minimal);

/* Appends "# date kernel why\nLINE\n" to DIR/<kernel>.cases atomically (write temp, rename).
 * DIR is created when missing; the date is ISO 8601 UTC; newlines in why become spaces. */
int ac_save_failure(const char *dir, const char *kernel, const char *why, const char *line, ac_err *err);
/* A corpus: case lines read from a file, or every *.cases file of a directory in
 * sorted order; blank lines and lines starting with '#' are skipped.  Every line
 * is parsed and validated on load; a bad one fails the load with "FILE:LINE: why"
 * (AC_ERR_INPUT).  where[i] is "FILE:LINE" of cases[i].  Zero-initialise, then load. */
#define AC_CORPUS_WHERE_MAX 300
typedef struct {
    ac_case *cases;
    char (*where)[AC_CORPUS_WHERE_MAX];
    size_t n, cap;
} ac_corpus;
int ac_corpus_load(ac_corpus *l, const char *path, ac_err *err);
int ac_corpus_add_line(ac_corpus *l, const char *line, const char *file, long lineno, ac_err *err);
void ac_corpus_free(ac_corpus *l);
/* Replaces path with data atomically: a temp file beside it, fsync, rename.  (shrink.c) */
int ac_write_atomic(const char *path, const char *data, size_t len, ac_err *err);

/* ======================= writers (report_*.c) ======================= */
typedef struct ac_report ac_report; /* collects results for one invocation */
int ac_report_open(ac_report **r, const char *json_path, const char *junit_path,
                   const char *markdown_path, ac_err *err);
void ac_report_add(ac_report *r, const char *kernel, const ac_result *res, const char *minimal_line);
int ac_report_close(ac_report *r, ac_err *err); /* writes atomically, frees */

/* ======================= tensor files (tensor_io.c) ================
 * NumPy .npy (format 1.0, 2.0, 3.0; C order, little-endian) and .safetensors,
 * read into one owned, contiguous, little-endian buffer per tensor.  Every bad
 * file (truncated, trailing bytes, lying shape, unknown dtype, Fortran order,
 * big-endian, absurd header length, overlapping or out-of-range offsets) gives
 * AC_ERR_INPUT with a message naming the file, the tensor and what is wrong.
 * Writers are atomic (temp file beside the target, then rename).  bf16 has no
 * NumPy dtype: in .npy it travels as '<u2' bit patterns (AC_TF_U16). */
typedef enum {
    AC_TF_F32 = 0, AC_TF_F16, AC_TF_BF16, AC_TF_F64, AC_TF_U16,
    AC_TF_BOOL, AC_TF_U8, AC_TF_I32, AC_TF_I64, AC_TF_COUNT
} ac_tfile_dtype;
const char *ac_tfile_dtype_name(ac_tfile_dtype t); /* "f32", ..., "u16", "bool", "u8", "i32", "i64" */
size_t ac_tfile_dtype_size(ac_tfile_dtype t);

#define AC_TENSOR_MAX_DIMS 8
#define AC_NPY_MAX_HEADER ((size_t)1 << 20)          /* 1 MiB: any real header is < 1 KiB */
#define AC_SAFETENSORS_MAX_HEADER ((size_t)100 << 20) /* safetensors' own limit */
typedef struct {
    char name[64];          /* "q", or the safetensors key */
    char file[1024];        /* where it was read from (messages) */
    ac_tfile_dtype dtype;
    int ndim;
    int64_t shape[AC_TENSOR_MAX_DIMS];
    size_t n_elems;
    void *data;             /* owned: n_elems * ac_tfile_dtype_size(dtype) bytes */
} ac_tensor;
void ac_tensor_free(ac_tensor *t);
/* "(1, 2, 3, 4)" into buf. */
void ac_tensor_shape_str(const ac_tensor *t, char *buf, size_t len);

/* Reads path as .npy; name labels the tensor in messages and t->name. */
int ac_npy_read(const char *path, const char *name, ac_tensor *t, ac_err *err);
int ac_npy_write(const char *path, const ac_tensor *t, ac_err *err);

typedef struct {
    ac_tensor *t;
    size_t n;
} ac_tensor_set;
/* Reads every tensor of a .safetensors file (the "__metadata__" entry is skipped). */
int ac_safetensors_read(const char *path, ac_tensor_set *set, ac_err *err);
const ac_tensor *ac_tensor_set_find(const ac_tensor_set *set, const char *name);
void ac_tensor_set_free(ac_tensor_set *set);
int ac_safetensors_write(const char *path, const ac_tensor *const *tensors, size_t n, ac_err *err);

/* ======================= CLI pieces in their own files ============== 
 * main.c parses the common options and dispatches; each returns an exit status. */
int ac_cmd_check(int argc, char **argv);     /* check.c: attncheck check PATH [options] */
int ac_cmd_reference(int argc, char **argv); /* check.c: attncheck reference PATH [options] */
/* plugin.c: dlopen a plugin, validate its descriptor, register it as a kernel. */
int ac_plugin_load(const char *path, const ac_kernel **out, ac_err *err);

#endif
