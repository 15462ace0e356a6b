/* ref/parallel.h — a parallel for over independent tasks, the one place
 * attncheck computes on several threads: ref/ (the references, the GPU tier's
 * host copies) and harness/ (the inputs' draws, the comparator) use it.
 *
 * Workers are POSIX threads (the caller is worker 0).  While tasks run,
 * OpenBLAS is held to one thread, so every BLAS call inside a task runs on the
 * worker that made it: no oversubscription of the cores, and a task's
 * arithmetic is the same whichever worker runs it and however many there are.
 * Tasks are claimed dynamically (an atomic counter), so uneven tasks (causal
 * rows) balance; a task must only write what belongs to it, which makes the
 * results independent of the thread count bit for bit. */
#ifndef ATTNCHECK_REF_PARALLEL_H
#define ATTNCHECK_REF_PARALLEL_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" { /* ref/cuda's host code is C++ */
#endif

#include "ref.h"

/* The workers ref/ uses: ATTNCHECK_THREADS when set (1 .. REF_MAX_THREADS),
 * else the CPUs this process may run on.  AC_ERR_INPUT names the variable
 * when it is not a number in range. */
#define REF_MAX_THREADS 256
int ref_thread_count(int *workers, ac_err *err);

/* Workers to use when each needs bytes_per_worker of scratch: at most
 * `workers`, at least 1, and no more than REF_SCRATCH_BYTES in all (a 16-core
 * machine at Nk = 128k would otherwise hold 16 score blocks of 128 MiB). */
#define REF_SCRATCH_BYTES ((size_t)1 << 30)
int ref_workers_within(int workers, size_t bytes_per_worker);

/* fn(ctx, task, worker) for every task in [0, n_tasks), on up to `workers`
 * threads; `worker` in [0, workers) indexes per-worker scratch.  Returns when
 * all are done.  If threads cannot be started the remaining workers do all
 * the tasks (same results, slower). */
typedef void (*ref_task_fn)(void *ctx, size_t task, int worker);
void ref_parallel_for(int workers, size_t n_tasks, ref_task_fn fn, void *ctx);

#ifdef __cplusplus
}
#endif

#endif
