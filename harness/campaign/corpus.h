/* harness/campaign/corpus.h — the regression corpus: case lines in *.cases
 * files, read for `attncheck run` and appended to by --save-failures. */
#ifndef ATTNCHECK_CORPUS_H
#define ATTNCHECK_CORPUS_H

#include <stddef.h>

#include "harness/case/case.h"

/* Appends "# date kernel why\nLINE\n" to DIR/<kernel>.cases atomically (write temp, rename),
 * unless the file already holds LINE (a failure found again adds nothing), under a
 * lock (.<kernel>.cases.lock beside it), so processes sharing DIR lose no entry.
 * DIR is created when missing (not its parent); the date is ISO 8601 UTC; newlines
 * in why become spaces.  Every failure is AC_ERR_INPUT naming DIR (or AC_ERR_ENV:
 * out of memory): the caller must report it, never drop it. */
int ac_save_failure(const char *dir, const char *kernel, const char *why, const char *line, ac_err *err);
/* Whether --save-failures DIR can be written (created if missing, a folder that
 * takes a new file); asked before a campaign starts.  AC_OK or AC_ERR_INPUT. */
int ac_save_failures_check(const char *dir, ac_err *err);

/* A corpus: case lines read from a file, or every *.cases file of a directory in
 * sorted order; blank lines and lines starting with '#' are skipped.  Every line
 * is parsed and validated on load; a bad one fails the load with "FILE:LINE: why"
 * (AC_ERR_INPUT).  where[i] is "FILE:LINE" of cases[i].  Zero-initialise, then load. */
#define AC_CORPUS_WHERE_MAX 300
typedef struct {
    ac_case *cases;
    char (*where)[AC_CORPUS_WHERE_MAX];
    size_t n, cap;
} ac_corpus;
int ac_corpus_load(ac_corpus *l, const char *path, ac_err *err);
/* The lines of one corpus text of len bytes (file names it in messages); a NUL
 * byte or a line of AC_CASE_LINE_MAX characters or more is AC_ERR_INPUT naming
 * FILE:LINE.  ac_corpus_load reads each file (a regular file, at most
 * AC_TEXT_FILE_MAX bytes) and calls this. */
int ac_corpus_parse(ac_corpus *l, const char *text, size_t len, const char *file, ac_err *err);
int ac_corpus_add_line(ac_corpus *l, const char *line, const char *file, long lineno, ac_err *err);
void ac_corpus_free(ac_corpus *l);

#endif
