/* ref/test_parallel.c — the parallel for and the thread count (suite ref_parallel). */
#include <cblas.h>
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "parallel.h"
#include "ref.h"

typedef struct {
    atomic_int runs[1000];
    atomic_int blas_threads_seen; /* the largest OpenBLAS thread count a task saw */
    atomic_int bad_worker;
    int workers;
} count_job;

static void count_task(void *arg, size_t task, int worker)
{
    count_job *job = arg;
    atomic_fetch_add(&job->runs[task], 1);
    int blas = openblas_get_num_threads();
    if (blas > atomic_load(&job->blas_threads_seen))
        atomic_store(&job->blas_threads_seen, blas);
    if (worker < 0 || worker >= job->workers)
        atomic_store(&job->bad_worker, 1);
}

Test(ref_parallel, every_task_runs_once_with_one_blas_thread_and_blas_is_restored)
{
    openblas_set_num_threads(2);
    const int workers[] = {1, 2, 3, 8};
    const size_t tasks[] = {0, 1, 5, 1000};
    for (size_t w = 0; w < sizeof workers / sizeof workers[0]; w++)
        for (size_t t = 0; t < sizeof tasks / sizeof tasks[0]; t++) {
            count_job *job = calloc(1, sizeof *job);
            cr_assert(job != NULL);
            job->workers = workers[w];
            ref_parallel_for(workers[w], tasks[t], count_task, job);
            for (size_t i = 0; i < tasks[t]; i++)
                cr_assert_eq(atomic_load(&job->runs[i]), 1, "%d workers, %zu tasks: task %zu ran %d times", workers[w],
                             tasks[t], i, atomic_load(&job->runs[i]));
            for (size_t i = tasks[t]; i < 1000; i++)
                cr_assert_eq(atomic_load(&job->runs[i]), 0, "task %zu past the end ran", i);
            if (tasks[t] > 0)
                cr_assert_eq(atomic_load(&job->blas_threads_seen), 1, "a task saw %d BLAS threads",
                             atomic_load(&job->blas_threads_seen));
            cr_assert_eq(atomic_load(&job->bad_worker), 0, "a worker index outside [0, %d)", workers[w]);
            cr_assert_eq(openblas_get_num_threads(), 2, "BLAS threads not restored");
            free(job);
        }
}

Test(ref_parallel, thread_count_comes_from_the_variable_or_the_machine)
{
    int n = 0;
    cr_assert_eq(setenv("ATTNCHECK_THREADS", "5", 1), 0);
    cr_assert_eq(ref_thread_count(&n, NULL), AC_OK);
    cr_assert_eq(n, 5);
    cr_assert_eq(unsetenv("ATTNCHECK_THREADS"), 0);
    cr_assert_eq(ref_thread_count(&n, NULL), AC_OK);
    cr_assert(n >= 1 && n <= REF_MAX_THREADS, "machine gives %d", n);
    ac_err err = {{0}};
    cr_assert_eq(setenv("ATTNCHECK_THREADS", "", 1), 0); /* empty: as if unset */
    cr_assert_eq(ref_thread_count(&n, &err), AC_OK);
    cr_assert_eq(setenv("ATTNCHECK_THREADS", "257", 1), 0);
    cr_assert_eq(ref_thread_count(&n, &err), AC_ERR_INPUT);
    cr_assert(strstr(err.msg, "ATTNCHECK_THREADS='257'") != NULL, "message: %s", err.msg);
    unsetenv("ATTNCHECK_THREADS");
}

Test(ref_parallel, scratch_caps_the_workers_but_keeps_one)
{
    cr_assert_eq(ref_workers_within(16, 128u << 20), 8, "8 x 128 MiB fill the 1 GiB");
    cr_assert_eq(ref_workers_within(4, 1u << 20), 4);
    cr_assert_eq(ref_workers_within(16, (size_t)3 << 30), 1, "one worker even when it alone is over");
    cr_assert_eq(ref_workers_within(6, 0), 6);
}
