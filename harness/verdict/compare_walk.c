/* harness/verdict/compare_walk.c — the comparator's walk (compare.h): every
 * element of one output, row by row (compare.c judges them), in tasks on
 * worker threads (ref/parallel.h), the partials merged in walk order.  Only
 * the tasks' list and partials are allocated. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness/verdict/compare.h"
#include "harness/verdict/compare_internal.h"
#include "ref/parallel.h"

/* ---- the walk, in tasks ----------------------------------------------------
 * The walk visits (b, h, row, col) in that order; it is cut into tasks of
 * consecutive rows of one (b, h), TASK_ELEMS elements or so each, a function
 * of the problem alone.  Each task fills its own partial, and the partials are
 * merged in walk order: maxima keep the first place in walk order on ties,
 * counts add, the first special is the earliest task's, sums add task after
 * task.  So the metrics do not depend on the thread count (the means differ
 * from one running sum over the whole walk in their last bits only).
 * Shapes: Q-like rows (O, LSE, dQ) of (b, h_q), K-like rows (dK, dV) of
 * (b, h_kv), dBias rows i of (mb, mh), and dSink's heads as the rows of one
 * span (Hq values: one task). */
#define TASK_ELEMS 32768

typedef struct {
    int b, h, row0, row1;
} task_span;

typedef enum { WALK_Q, WALK_K, WALK_BIAS, WALK_HEADS } walk_shape;

static walk_shape shape_of(ac_output which)
{
    switch (which) {
    case AC_OUT_DK:
    case AC_OUT_DV:
        return WALK_K;
    case AC_OUT_DBIAS:
        return WALK_BIAS;
    case AC_OUT_DSINK:
        return WALK_HEADS;
    default:
        return WALK_Q;
    }
}

typedef struct {
    const cmp_judge *a;
    const ac_problem *p;
    const cmp_tensors *tn;
    walk_shape shape;
    const task_span *spans;
    cmp_partial *parts;
} walk_job;

static void walk_task(const walk_job *j, const task_span *sp, cmp_partial *pt)
{
    for (int r = sp->row0; r < sp->row1; r++)
        switch (j->shape) {
        case WALK_K:
            cmp_k_row(j->a, pt, j->p, j->tn, sp->b, sp->h, r);
            break;
        case WALK_BIAS:
            cmp_bias_row(j->a, pt, j->p, j->tn, sp->b, sp->h, r);
            break;
        case WALK_HEADS:
            cmp_head(j->a, pt, j->tn, r);
            break;
        case WALK_Q:
            cmp_q_row(j->a, pt, j->p, j->tn, sp->b, sp->h, r);
            break;
        }
}

static void walk_task_fn(void *ctx, size_t task, int worker)
{
    (void)worker;
    const walk_job *j = ctx;
    cmp_partial pt; /* on this worker's stack: neighbouring tasks' partials share cache lines */
    cmp_partial_init(&pt);
    walk_task(j, &j->spans[task], &pt);
    j->parts[task] = pt;
}

/* Columns of a row of the walk. */
static int walk_cols(const ac_problem *p, walk_shape shape, const cmp_judge *a)
{
    if (shape == WALK_BIAS)
        return p->seqlen_k;
    return shape == WALK_HEADS || a->is_lse ? 1 : ac_tensor_dim(p, a->kind);
}

/* Rows a task takes: TASK_ELEMS elements' worth, or what a test asks for. */
static int task_rows(int cols, int requested)
{
    return requested > 0 ? requested : TASK_ELEMS / cols > 0 ? TASK_ELEMS / cols : 1;
}

/* Calls fn on every task of the walk, in walk order (fn NULL: counts them). */
typedef void (*span_fn)(void *ctx, size_t index, const task_span *sp);

/* The (b, h) slices of a shape and the rows of slice b. */
static void walk_slices(const ac_problem *p, walk_shape shape, int *batches, int *heads)
{
    *batches = shape == WALK_HEADS                 ? 1
        : shape == WALK_BIAS && p->bias_batch <= 1 ? 1
        : shape == WALK_BIAS                       ? p->bias_batch
                                                   : p->batch;
    *heads = shape == WALK_HEADS ? 1
        : shape == WALK_K        ? p->heads_kv
        : shape == WALK_Q        ? p->heads_q
        : p->bias_heads > 1      ? p->bias_heads
                                 : 1;
}

static int walk_rows(const ac_problem *p, walk_shape shape, int b)
{
    switch (shape) {
    case WALK_K:
        return ac_seqlen_k_of(p, b);
    case WALK_BIAS:
        return p->seqlen_q; /* rows no sequence has hold no keys (bias_row_keys) */
    case WALK_HEADS:
        return p->heads_q;
    case WALK_Q:
        break;
    }
    return ac_seqlen_q_of(p, b);
}

static size_t for_each_span(const ac_problem *p, walk_shape shape, int rows_per_task, span_fn fn, void *ctx)
{
    int batches, heads;
    walk_slices(p, shape, &batches, &heads);
    size_t n = 0;
    for (int b = 0; b < batches; b++) {
        int rows = walk_rows(p, shape, b);
        for (int h = 0; h < heads; h++)
            for (int r0 = 0; r0 < rows; r0 += rows_per_task, n++) {
                task_span sp = {b, h, r0, r0 + rows_per_task < rows ? r0 + rows_per_task : rows};
                if (fn)
                    fn(ctx, n, &sp);
            }
    }
    return n;
}

static void store_span(void *ctx, size_t index, const task_span *sp) { ((task_span *)ctx)[index] = *sp; }

typedef struct {
    const walk_job *j;
    cmp_partial *total;
} serial_walk;

static void walk_and_merge(void *ctx, size_t index, const task_span *sp)
{
    (void)index;
    serial_walk *s = ctx;
    cmp_partial pt;
    cmp_partial_init(&pt);
    walk_task(s->j, sp, &pt);
    cmp_merge(s->total, &pt);
}

/* Walks every task on `workers` threads into *total.  With one worker (or
 * without memory for the per-task partials) the tasks run here, one after
 * another, each merged as it ends: the same result. */
static void walk(const ac_inputs *in, ac_output which, const cmp_tensors *tn, const cmp_judge *a, int workers,
                 int rows_per_task, cmp_partial *total)
{
    const ac_problem *p = &in->p;
    walk_shape shape = shape_of(which);
    int rows = task_rows(walk_cols(p, shape, a), rows_per_task);
    walk_job j = {a, p, tn, shape, NULL, NULL};
    size_t n = for_each_span(p, shape, rows, NULL, NULL);
    task_span *spans = workers > 1 && n > 1 ? malloc(n * sizeof *spans) : NULL;
    cmp_partial *parts = spans ? malloc(n * sizeof *parts) : NULL;
    cmp_partial_init(total);
    if (parts) {
        for_each_span(p, shape, rows, store_span, spans);
        j.spans = spans, j.parts = parts;
        ref_parallel_for(workers, n, walk_task_fn, &j);
        for (size_t t = 0; t < n; t++)
            cmp_merge(total, &parts[t]);
    } else {
        serial_walk s = {&j, total};
        for_each_span(p, shape, rows, walk_and_merge, &s);
    }
    free(spans), free(parts);
}

static size_t compared_elems(const ac_problem *p, ac_output which)
{
    walk_shape shape = shape_of(which);
    int batches, heads;
    walk_slices(p, shape, &batches, &heads);
    if (shape == WALK_HEADS)
        return (size_t)p->heads_q;
    size_t n = 0;
    for (int b = 0; b < batches; b++) {
        if (shape == WALK_BIAS) {
            for (int i = 0; i < p->seqlen_q; i++)
                n += (size_t)heads * cmp_bias_row_keys(p, b, i);
            continue;
        }
        size_t cols = which == AC_OUT_LSE ? 1 : (size_t)ac_tensor_dim(p, cmp_output_kind(which));
        n += (size_t)heads * walk_rows(p, shape, b) * cols;
    }
    return n;
}

void compare_with(const ac_inputs *in, ac_output which, const void *got, const double *ref, const double *escale,
                  const double *naive, int workers, int rows_per_task, ac_metrics *m)
{
    memset(m, 0, sizeof *m);
    m->present = true;
    m->has_naive = naive != NULL;
    m->n_compared = compared_elems(&in->p, which);
    cmp_judge a = cmp_judge_for(in, which);
    cmp_tensors tn = {got, ref, escale, naive};
    cmp_partial total;
    walk(in, which, &tn, &a, workers, rows_per_task, &total);
    cmp_finish(&total, m);
}

/* At least this many elements a worker: a thread start costs tens of microseconds. */
#define MIN_ELEMS_PER_WORKER 65536

void ac_compare(const ac_inputs *in, ac_output which, const void *got, const double *ref, const double *escale,
                const double *naive, ac_metrics *m)
{
    int workers = 1;
    if (ref_thread_count(&workers, NULL) != AC_OK)
        workers = 1; /* a bad ATTNCHECK_THREADS is reported by the reference, which reads it first */
    size_t useful = compared_elems(&in->p, which) / MIN_ELEMS_PER_WORKER;
    if (useful < (size_t)workers)
        workers = useful < 1 ? 1 : (int)useful;
    compare_with(in, which, got, ref, escale, naive, workers, 0, m);
}

/* The rows with elements over budget: how many, their range, the first AC_DIAG_MAX_ROWS with counts. */
static void list_rows(ac_metrics *m, const size_t *counts, int n_rows)
{
    m->n_rows_over = m->n_rows_listed = 0;
    m->first_row_over = m->last_row_over = -1;
    for (int r = 0; r < n_rows; r++) {
        if (!counts[r])
            continue;
        if (m->n_rows_over++ == 0)
            m->first_row_over = r;
        m->last_row_over = r;
        if (m->n_rows_listed < AC_DIAG_MAX_ROWS)
            m->rows_over[m->n_rows_listed++] = (ac_row_count){r, counts[r]};
    }
}

int ac_compare_count_over(const ac_inputs *in, ac_output which, const void *got, const double *ref,
                          const double *escale, double limit, ac_metrics *m, ac_err *err)
{
    const ac_problem *p = &in->p;
    walk_shape shape = shape_of(which);
    int n_rows = shape == WALK_K ? p->seqlen_k : shape == WALK_HEADS ? 0 : p->seqlen_q;
    int batches;
    cmp_judge a = cmp_judge_for(in, which);
    a.over = m;
    a.limit = limit;
    a.row_counts = calloc((size_t)n_rows + 1, sizeof(size_t));
    if (!a.row_counts)
        return ac_fail(err, AC_ERR_ENV, "diagnosis: out of memory for %d row counts", n_rows);
    m->n_over = 0;
    memset(m->over_per_head, 0, sizeof m->over_per_head);
    walk_slices(p, shape, &batches, &m->n_heads);
    if (shape == WALK_HEADS) /* dSink's values are its heads */
        m->n_heads = p->heads_q;
    cmp_tensors tn = {got, ref, escale, NULL};
    cmp_partial thrown_away; /* the statistics of this second walk; the counts go to m */
    walk(in, which, &tn, &a, 1, 0, &thrown_away); /* one worker: the counts are shared */
    list_rows(m, a.row_counts, n_rows);
    free(a.row_counts);
    return AC_OK;
}
