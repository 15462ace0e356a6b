/* harness/exec/exec.h — kernels that are not C: an external command is the
 * kernel under test, fed through case directories.
 *
 * A case directory holds one call's inputs as .npy files and problem.json
 * (the problem spelled out: case line, sizes, dtype, layout, scale, mask,
 * lengths, what outputs are wanted and where they go).  The command writes
 * its outputs as .npy files into the out directory; attncheck checks their
 * shapes and dtypes and judges them like any kernel's (same reference, gate
 * and shrinker).  The format, field by field, is in the README ("Kernels that
 * are not C"); plugins/numpy_attention.py is a complete example.
 *
 *   one-shot    `--exec 'python3 k.py {in} {out}'`: one process per call;
 *   persistent  `--exec-persistent 'python3 k.py --serve'`: one process for
 *               the whole run; it reads a case directory per line on stdin and
 *               answers one line on stdout, "ok" or "error MESSAGE".
 *
 * What the command did wrong is a verdict on it (AC_KERNEL_FAULT, err->msg
 * "CLASS: ..."), not an error of attncheck:
 *   crash      killed by a signal (SIGSEGV, SIGABRT, ...);
 *   exited     one-shot: a nonzero exit status; persistent: the process ended
 *              without answering (it is restarted for the next call);
 *   timeout    no exit (one-shot) or no answer (persistent) within the deadline;
 *   error      persistent: it answered "error MESSAGE";
 *   missing-X  the call succeeded but X.npy (o, lse, dq, dk, dv) is not there;
 *   malformed-X  X.npy is not a .npy file, or has the wrong shape or dtype.
 * A command the shell cannot start (exit status 126 or 127) is bad usage
 * (AC_ERR_INPUT). */
#ifndef ATTNCHECK_EXEC_H
#define ATTNCHECK_EXEC_H

#include <stdbool.h>
#include <stddef.h>

#include "kernels/kernel.h"

/* ---- case directories ------------------------------------------------------ */

#define AC_CASE_JSON "problem.json"
#define AC_CASE_FORMAT "attncheck-case-1" /* problem.json's "format" */

/* One call's files.  q, k, v (and d_o, o) hold dtype bit patterns in the
 * problem's layout; lse is f32 (B, Hq, Nq).  A backward call carries d_o, the
 * kernel's own o and lse, and wants dq, dk, dv; a forward call wants o, lse;
 * `gen` gives d_o without backward: every output is wanted. */
typedef struct {
    const ac_problem *p;
    ac_dtype dtype; /* of q, k, v, do; outputs are ac_dtype_output(dtype), lse f32 */
    const char *case_line; /* NULL when there is none (check --kernel) */
    const void *q, *k, *v;
    const void *d_o, *o; /* NULL on a forward call */
    const float *lse; /* NULL on a forward call */
    bool backward; /* wants dq, dk, dv instead of o, lse */
    const char *out_dir; /* where the outputs go: problem.json's "out" */
} ac_case_files;

/* Writes the .npy files and problem.json into dir (which must exist). */
int ac_case_dir_write(const char *dir, const ac_case_files *cf, ac_err *err);

/* Reads the wanted outputs from out_dir into the caller's buffers (sized for
 * the problem): o, lse on a forward call, dq, dk, dv on a backward one.
 * AC_KERNEL_FAULT "missing-X: ..." / "malformed-X: ..." for a file that is not
 * there or not right; AC_ERR_ENV when memory runs out. */
int ac_case_dir_read_outputs(const char *out_dir, const ac_problem *p, ac_dtype t, bool backward, void *o, float *lse,
                             void *dq, void *dk, void *dv, ac_err *err);

/* A problem.json read back for `check` and `reference`: the options it stands
 * for, as the command line would spell them (strings owned by the struct). */
typedef struct {
    char dtype[16], layout[8], mask[96], scale[40];
    char seqlens_q[4096], seqlens_k[4096]; /* "" when absent */
    char mask_file[4200]; /* "" when absent */
    char case_line[1024]; /* "" when absent */
    char block_table_file[4200]; /* a paged cache: DIR/block_table.npy; "" when absent */
    int page_size; /* 0 when absent */
    char descale[3][4200],
        descale_block[16]; /* fp8: the factors' files in dir and the rows per block; "" when absent */
    bool v_from_k; /* "v_from_k": true: v.npy is k.npy's first d_v channels (the case's v=k) */
} ac_case_options;
/* AC_OK and *found = false when dir has no problem.json; AC_ERR_INPUT naming
 * the field when it is there but wrong. */
int ac_case_dir_options(const char *dir, ac_case_options *o, bool *found, ac_err *err);

/* ---- capabilities files ------------------------------------------------------ */

/* A JSON object with the plugin ABI's capability fields, masks in the case
 * line's spelling:
 *   {"name": "my-kernel", "dtypes": ["f16", "bf16"], "head_dims": [64, 128]
 *    (or "max_head_dim": 256), "masks": ["none", "causal-br", "window-br"],
 *    "layouts": ["bhsd"], "gqa": true, "varlen": false, "backward": true,
 *    "max_seqlen": 4096, "description": "..."}
 * "name" (default "exec"), "description", "gqa", "varlen", "backward" and
 * "max_seqlen" (0: no limit) may be left out.  Anything wrong (an unknown
 * field, a wrong type, an unknown dtype, a window claimed without its causal
 * alignment) is AC_ERR_INPUT with a message naming the field. */
int ac_exec_caps_parse(const char *json, size_t len, const char *label, ac_caps *caps, char *name, size_t name_len,
                       ac_err *err);
int ac_exec_caps_load(const char *path, ac_caps *caps, char *name, size_t name_len, ac_err *err);

/* ---- the kernel ---------------------------------------------------------------- */

typedef enum { AC_EXEC_ONESHOT = 0, AC_EXEC_PERSISTENT = 1 } ac_exec_mode;

#define AC_EXEC_DEFAULT_TIMEOUT 60.0 /* seconds per call: room for Python's imports on the first one */

typedef struct {
    const char *command; /* run by /bin/sh -c; one-shot: {in} and {out} are replaced by the directories */
    ac_exec_mode mode;
    const char *caps_path; /* the capabilities file */
    const char *name; /* NULL: the caps file's "name" */
    double timeout_s; /* per call; 0: AC_EXEC_DEFAULT_TIMEOUT */
} ac_exec_spec;

/* Checks the spec, reads the caps and registers the kernel (ac_kernel_add);
 * *out is the registered kernel.  Its scratch directory is made under
 * $ATTNCHECK_EXEC_TMPDIR, else /dev/shm, else $TMPDIR or /tmp, and removed at
 * exit, when a persistent command is stopped too. */
int ac_exec_register(const ac_exec_spec *spec, const ac_kernel **out, ac_err *err);

/* Persistent processes started, for the tests: 0 after a clean start, +1 per restart. */
long ac_exec_starts(const ac_kernel *k);

#endif
