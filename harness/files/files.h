/* harness/files/files.h — whole files: every report, corpus and tensor file
 * attncheck writes goes through ac_write_atomic, so a crash never leaves half
 * a file; every file it reads whole goes through ac_read_file, so a path to
 * /dev/zero, a FIFO or a directory is refused instead of read forever.
 *
 * Paths come from users, so nothing is trusted:
 *   - reads: only regular files are opened (a FIFO is refused without
 *     blocking), and never more than a stated number of bytes;
 *   - writes: a symlink is written through to its target (the link stays a
 *     link); a target that exists and is not a regular file (a device such as
 *     /dev/full or /dev/null, a FIFO, a directory) is refused, never replaced;
 *     a file that exists keeps its mode (and its owner, where the process may
 *     set it); a new file gets 0666 less the umask, as open(2) would give it.
 *     Every failure to write a path the user named is AC_ERR_INPUT (exit 2),
 *     whatever its cause (a missing folder, no permission, a full disk);
 *     running out of memory is AC_ERR_ENV. */
#ifndef ATTNCHECK_FILES_H
#define ATTNCHECK_FILES_H

#include <stddef.h>
#include <stdio.h>

#include "ref/ref.h"

/* Room for a path attncheck builds (DIR/NAME.npy, DIR/<kernel>.cases, a temp file beside one). */
#define AC_PATH_LEN 4200
/* The most a text file attncheck reads whole (a corpus file, budgets) may hold. */
#define AC_TEXT_FILE_MAX ((size_t)64 << 20)

/* Replaces path with data atomically: a temp file beside the target, fsync, rename. */
int ac_write_atomic(const char *path, const char *data, size_t len, ac_err *err);
/* Builds a document in memory with fill(f, ctx), then writes it to path atomically. */
int ac_write_doc(const char *path, void (*fill)(FILE *f, const void *ctx), const void *ctx, ac_err *err);
/* Whether ac_write_atomic(path) can succeed, without touching path: its target
 * is absent or a regular file, and its folder takes a new file (one is created
 * and removed).  what names the option in the message ("--json"). */
int ac_check_writable(const char *path, const char *what, ac_err *err);
/* The path a write to path lands on: path with its symlinks followed (the
 * target need not exist).  AC_ERR_INPUT for a loop or a path too long. */
int ac_write_target(const char *path, char *out, size_t len, ac_err *err);

/* Opens path for reading when it is a regular file (never blocks on a FIFO);
 * *size is its size.  AC_ERR_INPUT naming what it is otherwise. */
int ac_open_regular(const char *path, int *fd, long long *size, ac_err *err);
/* Reads all of path into a malloc'd, NUL-terminated buffer (*len excludes the
 * NUL); more than max bytes is AC_ERR_INPUT.  A missing file gives *out NULL,
 * *len 0 and AC_OK; anything but a regular file is AC_ERR_INPUT. */
int ac_read_file_max(const char *path, size_t max, char **out, size_t *len, ac_err *err);
/* ac_read_file_max with max AC_TEXT_FILE_MAX. */
int ac_read_file(const char *path, char **out, size_t *len, ac_err *err);
/* "a FIFO", "a directory", "a character device", ... for messages. */
const char *ac_file_kind(unsigned mode);

/* Removes path and, when it is a directory, everything under it, depth first and without
 * following symbolic links (a link is removed, not its target); a missing path is no error.
 * 0, or -1 when something could not be removed (errno says why). */
int ac_remove_tree(const char *path);

#endif
