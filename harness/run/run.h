/* harness/run/run.h — the runner: one case end to end,
 *   inputs -> poisoned outputs in guard zones -> kernel forward (and backward),
 *   in a worker process -> reference -> comparator per output -> gate,
 * into an ac_result the campaign, the shrinker and the reports consume. */
#ifndef ATTNCHECK_RUN_H
#define ATTNCHECK_RUN_H

#include <stdbool.h>

#include "harness/case/case.h"
#include "harness/run/reference.h"
#include "harness/verdict/budget.h"
#include "harness/verdict/compare.h"
#include "harness/verdict/gate.h"
#include "kernels/kernel.h"

typedef struct {
    bool backward; /* run the backward when the kernel has one */
    int cert_rows; /* MPFR certification rows per case (0 = none) */
    /* Where the kernel runs.  true: in a worker process (worker.h; the command
     * line's default), so a kernel that crashes, exits or hangs becomes a
     * failure (kind kernel:crash, kernel:exited, kernel:timeout) and the caller
     * goes on.  false (a zeroed struct: library callers, tests with kernels of
     * their own that no worker could find): in this process (--in-process,
     * for gdb).  Guard zones, the input check and device faults work in both. */
    bool isolate;
    double kernel_timeout_s; /* isolated: seconds per forward or backward call; 0 = ac_kernel_deadline_s */
} ac_run_opts;

typedef struct {
    char line[AC_CASE_LINE_MAX];
    ac_verdict verdict;
    int status; /* AC_OK, or the AC_ERR_* that stopped it */
    ac_metrics m[AC_OUT_COUNT];
    ac_cert cert;
    ac_ref_info ref; /* the reference tier that ran, its GPU spot check */
    long index; /* the case's index in its campaign stream (run: its place in the corpus) */
    char why[AC_WHY_LEN];
    char kind[AC_KIND_LEN];
    double seconds;
    ac_dtype dtype; /* the case's dtype (for per-dtype summaries) */
    bool has_backward; /* dQ, dK, dV were run and compared */
    bool unsupported; /* outside the kernel's claimed caps: not run (AC_ERR_INPUT, kind "error:input") */
} ac_result;

/* Runs one case end to end: inputs, poisoned outputs, kernel forward (and
 * backward), reference, compare, gate.  Returns AC_OK when a verdict was
 * reached (pass or fail, in r->verdict), or the AC_ERR_* that prevented it.
 * A kernel that misbehaved (AC_KERNEL_FAULT: crash, exited, timeout,
 * device-fault, out-of-bounds-write, input-modified, or any class a kernel
 * reports itself) is a verdict: FAIL with kind "kernel:CLASS" and a why that
 * names the kernel (and its plugin file), shrunk like any failure. */
int ac_run_case(const ac_kernel *k, const ac_case *c, const ac_budgets *b, const ac_run_opts *o, ac_result *r,
                ac_err *err);

/* The line of the case ac_run_case is running on this thread (NULL outside
 * one): the --exec kernels write it into the case directory they hand over. */
const char *ac_run_current_line(void);

/* The kernel's outputs in host memory: O (and dQ, dK, dV) in the output dtype,
 * LSE f32; the variants': with dropout the forward's keep mask (one bit a
 * pair, LSB first at ac_dropout_index), with the backward dSink (Hq f32) for
 * sinks and dBias (shaped like the bias, in its dtype) for a bias; NULL when
 * the problem has none. */
typedef struct {
    void *o, *dq, *dk, *dv;
    float *lse;
    size_t q_bytes, kv_bytes, lse_bytes;
    size_t o_bytes, v_bytes; /* O and dV: d_v columns (= q_bytes, kv_bytes when d_v = d) */
    float *dsink;
    size_t dsink_bytes;
    void *dbias;
    size_t dbias_bytes;
    uint8_t *dropout_bits;
    size_t dropout_bytes;
} ac_kernel_outputs;

/* Runs k's forward (and with backward its backward, fed its own O and LSE) on
 * in: outputs poisoned between guard zones, inputs checked unchanged after
 * each call, in a worker when o->isolate.  AC_OK with *out filled (free with
 * ac_kernel_outputs_free, also after a failure); AC_ERR_INPUT or AC_ERR_ENV
 * when the kernel could not run; AC_KERNEL_FAULT with err->msg "CLASS: ..."
 * when it misbehaved. */
int ac_run_kernel(const ac_kernel *k, const ac_inputs *in, bool backward, const ac_run_opts *o, ac_kernel_outputs *out,
                  ac_err *err);
void ac_kernel_outputs_free(ac_kernel_outputs *out);

/* Dropout's checks beyond the outputs (harness/run/dropout.h) on the keep
 * mask `keep` (unpacked) that k's forward drew on in: its keep fraction, and
 * with k (NULL: a mask from files, the fraction alone) the same seed's and
 * another seed's masks, from k's forward run again through ac_run_kernel
 * with o.  A failed check sets r's verdict (FAIL, kind "dropout:..."); AC_OK,
 * or the rerun's status (AC_KERNEL_FAULT when it misbehaved). */
int ac_run_dropout_checks(const ac_kernel *k, const ac_inputs *in, const ac_run_opts *o, const uint8_t *keep,
                          ac_result *r, ac_err *err);

/* The default deadline of one call: max(10 s, FLOPs / R), FLOPs = 4 B Hq Nq Nk d
 * for the forward and 2.5 times that for the backward, R = 10^7 FLOP/s for a
 * CPU kernel (a scalar C kernel on a busy core does ~10^8) and 10^9 for a CUDA
 * kernel: generous, since a slow kernel must never read as a hung one. */
double ac_kernel_deadline_s(const ac_kernel *k, const ac_problem *p, bool backward_call);

/* r as the verdict on a kernel fault: FAIL, kind "kernel:CLASS" (CLASS: fault's
 * text before its first colon), why "CLASS: kernel NAME (plugin PATH): ...". */
void ac_result_kernel_fault(const ac_kernel *k, const ac_err *fault, ac_result *r);

/* `attncheck __worker PARENT_PID` (argv[0] = "__worker"): the kernel worker's
 * main loop (harness/run/worker.h); main calls it before anything else. */
int ac_worker_main(int argc, char **argv);

/* Seconds on the monotonic clock, for the time lines of run, fuzz and check. */
double ac_now_seconds(void);

#endif
