/* harness/run/worker.h — the kernel worker (internal to harness/run/).
 *
 * Process model.  Kernels under test run in a worker: attncheck itself,
 * started with posix_spawn (fork+exec) of /proc/self/exe as
 * `attncheck __worker PARENT_PID`, never a plain fork: the parent has threads
 * (ref/parallel.c, OpenBLAS) and may hold a CUDA context (the GPU reference
 * tier), and a forked copy of either is unusable, while an exec'ed process
 * starts clean and creates its own CUDA context when a CUDA kernel first
 * runs.  $ATTNCHECK_WORKER_EXE names another attncheck binary to exec (the
 * unit tests, whose own executable is not attncheck, set it).
 *
 * The worker is spawned at the first isolated call of a thread and persists
 * across cases; it is killed and replaced by a fresh one at the next call after
 * any kernel failure (a crash, an exit, a timeout, a device fault, a guard or
 * input check, an environment error), so one bad case never poisons the next.
 * It gets:
 *   fd 3  a SOCK_SEQPACKET socket: one message per request and per reply;
 *   fd 4  the arena, a sealed memfd (arena.h's layout) both processes map;
 *         F_SEAL_SHRINK, so nothing the kernel does can truncate it under the
 *         parent (a SIGBUS there); grown with ftruncate, replaced to shrink;
 *   fd 0  /dev/null; stdout and stderr are the parent's; every other fd is
 *         closed, fds 3 and 4 are close-on-exec (a kernel's own children get
 *         neither);
 *   its own process group (a timeout kills the kernel's children too), the
 *   parent's death as SIGKILL (PR_SET_PDEATHSIG), no core dumps.
 * Protocol: a hello (versions, message sizes, the --plugin paths, which the
 * worker loads so its registry matches), then per entry a request (kernel
 * name, entry, the problem, the arena layout and size) answered by a reply
 * (status and message).  The parent waits with the call's deadline; the
 * worker's death shows as end of file on the socket or in waitpid. */
#ifndef ATTNCHECK_WORKER_H
#define ATTNCHECK_WORKER_H

#include "harness/run/arena.h"

/* This thread's shared arena, at least bytes long (grown, or replaced when it is
 * far larger than needed); NULL and AC_ERR_ENV when memory is short.  Valid
 * until the next ac_worker_arena. */
uint8_t *ac_worker_arena(size_t bytes, ac_err *err);

/* Entry e of k on the arena (put there by the caller), in this thread's
 * worker, within timeout_s seconds.  The kernel's status (AC_OK, AC_ERR_INPUT,
 * AC_ERR_ENV, AC_KERNEL_FAULT with its message); AC_KERNEL_FAULT "crash: ...",
 * "exited: ..." or "timeout: ..." when the worker died or ran past the deadline;
 * AC_ERR_ENV when no worker could be started. */
int ac_worker_call(const ac_kernel *k, ac_entry e, const ac_problem *p, const ac_arena_layout *l, double timeout_s,
                   ac_err *err);

/* Kills this thread's worker (the next call starts a fresh one). */
void ac_worker_retire(void);
/* This thread's worker's process id, 0 when none runs (for tests). */
long ac_worker_pid(void);

#endif
