/* ref/parallel.c — the parallel for of parallel.h: pthreads, dynamic task
 * claiming, OpenBLAS held to one thread while tasks run.
 *
 * Why pthreads and not OpenMP: Debian's OpenBLAS is its pthreads build, which
 * does not know an OpenMP region from any other caller, so it would start its
 * own threads inside ours either way; holding it to one thread is needed in
 * both cases, and pthreads add no dependency and no second pool of spinning
 * threads (libgomp's) next to OpenBLAS's. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include <cblas.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "parallel.h"

int ref_thread_count(int *workers, ac_err *err)
{
    const char *env = getenv("ATTNCHECK_THREADS");
    if (env && *env) {
        char *end;
        errno = 0;
        long n = strtol(env, &end, 10);
        if (errno || *end || n < 1 || n > REF_MAX_THREADS)
            return ac_fail(err, AC_ERR_INPUT, "ATTNCHECK_THREADS='%s': want an integer in 1..%d", env, REF_MAX_THREADS);
        *workers = (int)n;
        return AC_OK;
    }
    cpu_set_t set;
    long n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : sysconf(_SC_NPROCESSORS_ONLN);
    *workers = n < 1 ? 1 : n > REF_MAX_THREADS ? REF_MAX_THREADS : (int)n;
    return AC_OK;
}

int ref_workers_within(int workers, size_t bytes_per_worker)
{
    size_t fit = bytes_per_worker ? REF_SCRATCH_BYTES / bytes_per_worker : (size_t)workers;
    if (fit < 1)
        fit = 1;
    return (size_t)workers < fit ? workers : (int)fit;
}

/* OpenBLAS's thread count is process-wide: the first parallel region to
 * start saves it and sets 1, the last to end restores it, so regions running
 * at once on other threads do not undo each other. */
static pthread_mutex_t blas_lock = PTHREAD_MUTEX_INITIALIZER;
static int blas_holders, blas_saved_threads;

static void blas_single_begin(void)
{
    pthread_mutex_lock(&blas_lock);
    if (blas_holders++ == 0) {
        blas_saved_threads = openblas_get_num_threads();
        openblas_set_num_threads(1);
    }
    pthread_mutex_unlock(&blas_lock);
}

static void blas_single_end(void)
{
    pthread_mutex_lock(&blas_lock);
    if (--blas_holders == 0)
        openblas_set_num_threads(blas_saved_threads);
    pthread_mutex_unlock(&blas_lock);
}

typedef struct {
    ref_task_fn fn;
    void *ctx;
    size_t n_tasks;
    atomic_size_t next;
} task_queue;

typedef struct {
    task_queue *queue;
    int worker;
} worker_arg;

static void drain(task_queue *q, int worker)
{
    for (;;) {
        size_t task = atomic_fetch_add_explicit(&q->next, 1, memory_order_relaxed);
        if (task >= q->n_tasks)
            return;
        q->fn(q->ctx, task, worker);
    }
}

static void *worker_main(void *arg)
{
    worker_arg *w = arg;
    drain(w->queue, w->worker);
    return NULL;
}

void ref_parallel_for(int workers, size_t n_tasks, ref_task_fn fn, void *ctx)
{
    if (n_tasks == 0)
        return;
    if ((size_t)workers > n_tasks)
        workers = (int)n_tasks;
    if (workers > REF_MAX_THREADS)
        workers = REF_MAX_THREADS;
    task_queue q = {fn, ctx, n_tasks, 0};
    pthread_t threads[REF_MAX_THREADS];
    worker_arg args[REF_MAX_THREADS];
    blas_single_begin();
    int started = 1; /* worker 0 is this thread */
    for (; started < workers; started++) {
        args[started] = (worker_arg){&q, started};
        if (pthread_create(&threads[started], NULL, worker_main, &args[started]) != 0)
            break; /* the ones running take the rest */
    }
    drain(&q, 0);
    for (int w = 1; w < started; w++)
        pthread_join(threads[w], NULL);
    blas_single_end();
}
