/* harness/cli/check_internal.h — shared by check.c (the commands) and
 * check_files.c (tensor files -> ac_inputs); not part of harness.h. */
#ifndef ATTNCHECK_CHECK_INTERNAL_H
#define ATTNCHECK_CHECK_INTERNAL_H

#include "harness/cli/cli.h"
#include "harness/files/tensor_io.h"
#include "harness/run/inputs.h"

/* The tensors a case directory or .safetensors file may hold: the plain ones
 * (shapes and dtype checked together, check_files.c), then the variants'
 * parameter gradients (checked by check_variants.c): dsink (Hq) f32, dbias
 * (the bias's shape and dtype). */
enum { T_Q, T_K, T_V, T_O, T_LSE, T_DO, T_DQ, T_DK, T_DV, T_DSINK, T_DBIAS, T_N };
enum { T_PLAIN_N = T_DSINK };
extern const char *const ac_check_tnames[T_N]; /* "q", "k", "v", "o", "lse", "do", "dq", "dk", "dv", "dsink", "dbias" */

typedef struct {
    ac_tensor t[T_N];
    bool have[T_N];
} tensor_files;

/* The sizes the files give (THD: b from cu_seqlens, nq and nk the longest sequences). */
typedef struct {
    int b, hq, hkv, nq, nk, d;
    int d_v; /* v's last dimension: o, do and dv have it too (d_v != d: the dv variant) */
    ac_dtype dtype;
    int page_size, num_pages, pages_per_seq; /* --page-size, --block-table: k, v are pages (check_paged.c) */
} dims;

bool ac_check_ends_with(const char *s, const char *tail);
/* AC_OK when t has shape want (ndim dimensions), else an input error naming both and why. */
int ac_check_want_shape(const ac_tensor *t, int ndim, const int64_t *want, const char *why, ac_err *err);
/* PATH: a directory of NAME.npy files or one .safetensors file; q, k, v required. */
int ac_check_read_files(const char *path, tensor_files *f, ac_err *err);
void ac_check_files_free(tensor_files *f);
/* Shapes, dtypes and options into an ac_inputs (q, k, v, do moved out of f,
 * widened exactly; NaN/Inf refused).  in is zeroed first: ac_inputs_free is safe. */
int ac_check_make_inputs(const ac_cli *o, tensor_files *f, ac_inputs *in, ac_err *err);
/* One small tensor from a .npy file or a .safetensors file holding just it. */
int ac_check_read_small(const char *path, const char *label, ac_tensor *t, ac_err *err);
/* check_variants.c: the variants' options into in->p and in->c (shapes already read). */
int ac_check_variants(const ac_cli *o, ac_inputs *in, ac_err *err);
/* The variants' tensors in the files (dsink): shapes and dtypes against the problem. */
int ac_check_variant_files(const tensor_files *f, const ac_inputs *in, ac_err *err);
/* check_thd.c: --layout thd: cu_seqlens_q/_k read (into in->cu_seqlens_*), every
 * tensor's packed shape checked, d filled. */
int ac_check_thd_shapes(const ac_cli *o, const tensor_files *f, dims *d, ac_inputs *in, ac_err *err);
/* The THD problem from what ac_check_thd_shapes read (nothing for the padded layouts). */
int ac_check_thd_problem(ac_inputs *in);
/* check_paged.c: --page-size P and --block-table FILE: k, v are pages
 * (num_pages, P, Hkv, d) (V: d_v), the table (B, pages_per_seq) i32/i64 is read
 * into in->block_table, --seqlens-k is required; nk is pages_per_seq * P. */
int ac_check_paged_shapes(const ac_cli *o, const tensor_files *f, dims *d, ac_inputs *in, ac_err *err);
/* The paged problem from what ac_check_paged_shapes read (nothing when not paged). */
void ac_check_paged_problem(const dims *d, ac_inputs *in);
/* fp8 inputs (check_fp8.c): q as |u1 codes with --dtype e4m3|e5m2 or safetensors F8_E4M3/F8_E5M2.
 * ac_check_fp8_dtype: *is_fp8 and the dtype when q holds fp8 (AC_OK otherwise, untouched);
 * the outputs (o, dq, ...) then hold f16 or bf16 (<u2 bits, BF16), which sets O's dtype.
 * ac_check_fp8_problem: the problem's fp8 fields and the --descale-* factors (default 1 per
 * tensor); ac_check_fp8_descale: a widened Q, K or V multiplied by its factors (exact). */
int ac_check_fp8_dtype(const tensor_files *f, const char *want, bool *is_fp8, ac_dtype *out, ac_err *err);
int ac_check_fp8_problem(const ac_cli *o, const tensor_files *f, ac_inputs *in, ac_err *err);
void ac_check_fp8_descale(const ac_inputs *in, ac_tensor_kind kind, double *wide);
/* The shapes the reference writes O and LSE with: q's with v's head dim; (B, Hq, Nq) or THD's (Hq, total_q). */
void ac_check_out_shapes(const ac_inputs *in, const tensor_files *f, ac_tensor *o_shape, ac_tensor *lse_shape);
/* " softcap=30 ...": the variants in effect, for check's header line ("" when none). */
void ac_check_variants_describe(const ac_inputs *in, char *buf, size_t len);

#endif
