/* harness/report/report.h — the report writers: every result of one
 * invocation, written at exit in the formats asked for, each file through
 * ac_write_atomic so a crash never leaves half a report.
 *
 * A format is one row of the table in report.c ({flag, help, open, write,
 * close}) and one file: report_json.c (--json, JSON Lines), report_junit.c
 * (--junit), report_markdown.c (--markdown).  The command line takes its
 * options from the table, so a new format is that file and that row. */
#ifndef ATTNCHECK_REPORT_H
#define ATTNCHECK_REPORT_H

#include <stddef.h>

#include "harness/run/run.h"

typedef struct {
    const char *flag; /* the option that asks for it: "--json" */
    const char *help; /* for --help: "FILE  JSON Lines, one object per case" */
    /* A writer's state, NULL when out of memory. */
    void *(*open)(void);
    /* One result; minimal_line is the shrunk line of a failure, or NULL. */
    void (*write)(void *state, const char *kernel, const ac_result *res, const char *minimal_line);
    /* Writes path (atomically) and frees the state, even on failure; with
     * path NULL it frees the state and writes nothing (ac_report_discard). */
    int (*close)(void *state, const char *path, ac_err *err);
} ac_report_format;

#define AC_REPORT_MAX_FORMATS 8
size_t ac_report_format_count(void);
const ac_report_format *ac_report_format_at(size_t i);
/* The index of the format asked for by flag ("--json"), or -1. */
int ac_report_format_index(const char *flag);

typedef struct ac_report ac_report; /* collects results for one invocation */
int ac_report_open(ac_report **r, ac_err *err);
/* Asks for format `flag` ("--json") to be written to path at close.  The path
 * is checked now (files.h's ac_check_writable: a regular file or none, in a
 * folder that takes a new file; not the file of another format), so a run
 * never starts with a report it cannot write: AC_ERR_INPUT naming the flag. */
int ac_report_want(ac_report *r, const char *flag, const char *path, ac_err *err);
void ac_report_add(ac_report *r, const char *kernel, const ac_result *res, const char *minimal_line);
int ac_report_close(ac_report *r, ac_err *err); /* writes every file asked for, frees */
/* Frees r and writes nothing: for a run that did not complete (a bad line, a
 * missing file, a bad --base), whose files must stay as they were. */
void ac_report_discard(ac_report *r);

#endif
