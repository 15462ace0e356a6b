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

/* A verdict that is not one case's (the baseline comparison's rows, a case it
 * could not compare): JUnit's testcase `name` in testsuite `suite`, a row of
 * Markdown's section `suite`, and `json`, one JSON object without a newline,
 * a line of the JSON Lines (suite NULL: the JSON only).  kind: the failure's
 * class ("regression"); every string set ("" when empty). */
typedef enum { AC_CHECK_PASS = 0, AC_CHECK_FAIL, AC_CHECK_SKIPPED } ac_check_status;
typedef struct {
    const char *suite, *name, *kind, *message, *json;
    ac_check_status status;
} ac_report_check;
/* One field of a record that is not a case (ac_report_record): a string, a
 * number or a boolean, under key. */
typedef enum { AC_FIELD_STRING, AC_FIELD_NUMBER, AC_FIELD_BOOL } ac_field_type;
typedef struct {
    const char *key;
    ac_field_type type;
    const char *s; /* AC_FIELD_STRING */
    double x; /* AC_FIELD_NUMBER; AC_FIELD_BOOL: nonzero is true */
} ac_report_field;

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
    /* One check (may be NULL: the format ignores checks). */
    void (*write_check)(void *state, const ac_report_check *c);
    /* A record that is not a case, {"type": type, fields}: the JSON Lines' first
     * ("environment") and last ("campaign") ones.  NULL: the format has none. */
    void (*record)(void *state, const char *type, const ac_report_field *fields, size_t n);
    /* A case record already written in this format, passed through as it is
     * (merge copies the shards' JSON Lines; what it parses of them is only what
     * the summary needs).  NULL: the format writes the result instead. */
    void (*write_raw)(void *state, const char *text);
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
void ac_report_add_check(ac_report *r, const ac_report_check *c);
/* A record that is not a case, to the formats that keep such records (JSON Lines):
 * call it with "environment" before the first case and "campaign" after the last. */
void ac_report_record(ac_report *r, const char *type, const ac_report_field *fields, size_t n);
/* ac_report_add, except that a format with write_raw writes raw_json (one JSON
 * Lines record, as read from a shard) instead of serialising res again. */
void ac_report_add_raw(ac_report *r, const char *kernel, const ac_result *res, const char *minimal_line,
                       const char *raw_json);
int ac_report_close(ac_report *r, ac_err *err); /* writes every file asked for, frees */
/* Frees r and writes nothing: for a run that did not complete (a bad line, a
 * missing file, a bad --base), whose files must stay as they were. */
void ac_report_discard(ac_report *r);

/* report_baseline.c: the baseline comparison's rows and listed cases as checks
 * (after ac_baseline_evaluate). */
struct ac_baseline;
void ac_report_add_baseline(ac_report *r, const struct ac_baseline *b);

#endif
