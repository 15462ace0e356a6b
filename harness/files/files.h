/* harness/files/files.h — whole files: every report, corpus and tensor file
 * attncheck writes goes through ac_write_atomic, so a crash never leaves half
 * a file. */
#ifndef ATTNCHECK_FILES_H
#define ATTNCHECK_FILES_H

#include <stddef.h>
#include <stdio.h>

#include "ref/ref.h"

/* Room for a path attncheck builds (DIR/NAME.npy, DIR/<kernel>.cases, a temp file beside one). */
#define AC_PATH_LEN 4200

/* Replaces path with data atomically: a temp file beside it, fsync, rename. */
int ac_write_atomic(const char *path, const char *data, size_t len, ac_err *err);
/* Builds a document in memory with fill(f, ctx), then writes it to path atomically. */
int ac_write_doc(const char *path, void (*fill)(FILE *f, const void *ctx), const void *ctx, ac_err *err);
/* Reads all of path into a malloc'd buffer (*out NULL and *len 0 when the file does not exist). */
int ac_read_file(const char *path, char **out, size_t *len, ac_err *err);

#endif
