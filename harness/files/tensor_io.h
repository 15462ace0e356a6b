/* harness/files/tensor_io.h — tensor files: how `check` and `reference` read
 * a kernel's tensors dumped by any framework, and write theirs.
 *
 * NumPy .npy (format 1.0, 2.0, 3.0; C order, little-endian) and .safetensors,
 * read into one owned, contiguous, little-endian buffer per tensor.  Every bad
 * file (truncated, trailing bytes, lying shape, unknown dtype, Fortran order,
 * big-endian, absurd header length, overlapping or out-of-range offsets) gives
 * AC_ERR_INPUT with a message naming the file, the tensor and what is wrong.
 * Writers are atomic (temp file beside the target, then rename).  bf16 has no
 * NumPy dtype: in .npy it travels as '<u2' bit patterns (AC_TF_U16). */
#ifndef ATTNCHECK_TENSOR_IO_H
#define ATTNCHECK_TENSOR_IO_H

#include <stddef.h>
#include <stdint.h>

#include "harness/files/files.h"
#include "ref/ref.h"

typedef enum {
    AC_TF_F32 = 0,
    AC_TF_F16,
    AC_TF_BF16,
    AC_TF_F64,
    AC_TF_U16,
    AC_TF_BOOL,
    AC_TF_U8,
    AC_TF_I32,
    AC_TF_I64,
    AC_TF_F8_E4M3,
    AC_TF_F8_E5M2, /* safetensors only (.npy holds fp8 codes as |u1: U8) */
    AC_TF_COUNT
} ac_tfile_dtype;
const char *ac_tfile_dtype_name(ac_tfile_dtype t); /* "f32", ..., "u16", "bool", "u8", "i32", "i64" */
size_t ac_tfile_dtype_size(ac_tfile_dtype t);

#define AC_TENSOR_MAX_DIMS 8
#define AC_NPY_MAX_HEADER ((size_t)1 << 20) /* 1 MiB: any real header is < 1 KiB */
#define AC_SAFETENSORS_MAX_HEADER ((size_t)100 << 20) /* safetensors' own limit */
typedef struct {
    char name[64]; /* "q", or the safetensors key */
    char file[AC_PATH_LEN]; /* where it was read from (messages) */
    ac_tfile_dtype dtype;
    int ndim;
    int64_t shape[AC_TENSOR_MAX_DIMS];
    size_t n_elems;
    void *data; /* owned: n_elems * ac_tfile_dtype_size(dtype) bytes */
} ac_tensor;
void ac_tensor_free(ac_tensor *t);
/* "(1, 2, 3, 4)" into buf. */
void ac_tensor_shape_str(const ac_tensor *t, char *buf, size_t len);

/* Reads path as .npy; name labels the tensor in messages and t->name.  path
 * must be a regular file (a FIFO or device is refused without blocking). */
int ac_npy_read(const char *path, const char *name, ac_tensor *t, ac_err *err);
/* The same from the len bytes at data (the fuzz targets'); label stands for the file in messages. */
int ac_npy_read_mem(const void *data, size_t len, const char *label, const char *name, ac_tensor *t, ac_err *err);
int ac_npy_write(const char *path, const ac_tensor *t, ac_err *err);

typedef struct {
    ac_tensor *t;
    size_t n;
} ac_tensor_set;
/* Reads every tensor of a .safetensors file (the "__metadata__" entry is skipped).
 * The header must be one JSON object padded with blanks only, and the tensors
 * must tile the data buffer exactly (no overlap, no hole, no trailing bytes). */
int ac_safetensors_read(const char *path, ac_tensor_set *set, ac_err *err);
int ac_safetensors_read_mem(const void *data, size_t len, const char *label, ac_tensor_set *set, ac_err *err);
const ac_tensor *ac_tensor_set_find(const ac_tensor_set *set, const char *name);
void ac_tensor_set_free(ac_tensor_set *set);
int ac_safetensors_write(const char *path, const ac_tensor *const *tensors, size_t n, ac_err *err);

#endif
