/* harness/files/tensor_io_internal.h — shared by the tensor-file readers of
 * harness/files/ only (tensor_io.c: .npy and the common parts; safetensors.c). */
#ifndef ATTNCHECK_TENSOR_IO_INTERNAL_H
#define ATTNCHECK_TENSOR_IO_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "harness/files/tensor_io.h"

#define MAX_DIM ((int64_t)1 << 40) /* any one dimension: far past a real tensor, far below overflow */

/* One row per ac_tfile_dtype: its name, .npy descr (NULL: none) and safetensors name, and size. */
typedef struct {
    const char *name, *npy, *st;
    size_t size;
} tio_dtype;
extern const tio_dtype tio_dtypes[AC_TF_COUNT];

/* What a reader reads from: a regular file, or a buffer (the fuzz targets').
 * Every read is checked against size, so no offset from a header reaches
 * past the end. */
typedef struct {
    FILE *f;
    const unsigned char *mem;
    long long size;
} tio_source;
/* A regular file only: a FIFO, a device or a directory is refused (files.h). */
int tio_open(const char *path, tio_source *src, ac_err *err);
/* n bytes at off into buf; -1 past the end or on a read error. */
int tio_read_at(const tio_source *src, long long off, void *buf, size_t n);
/* The data region [off, off + avail) must hold exactly what t's shape says: read into t->data. */
int tio_load_data(const tio_source *f, ac_tensor *t, long long off, long long avail, ac_err *err);
/* n_elems from the shape, and the byte count; false on overflow. */
bool tio_shape_bytes(ac_tensor *t, size_t *bytes);
/* t->file and t->name, for messages. */
void tio_label(ac_tensor *t, const char *path, const char *name);

#endif
