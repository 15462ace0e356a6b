/* harness/campaign/corpus.h — the regression corpus: case lines in *.cases
 * files, read for `attncheck run` and appended to by --save-failures. */
#ifndef ATTNCHECK_CORPUS_H
#define ATTNCHECK_CORPUS_H

#include <stddef.h>

#include "harness/case/case.h"

/* Appends "# date kernel why\nLINE\n" to DIR/<kernel>.cases atomically (write temp, rename),
 * unless the file already holds LINE (a failure found again adds nothing).
 * DIR is created when missing; the date is ISO 8601 UTC; newlines in why become spaces. */
int ac_save_failure(const char *dir, const char *kernel, const char *why, const char *line, ac_err *err);

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
int ac_corpus_add_line(ac_corpus *l, const char *line, const char *file, long lineno, ac_err *err);
void ac_corpus_free(ac_corpus *l);

#endif
