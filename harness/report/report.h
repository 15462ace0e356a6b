/* harness/report/report.h — the report writers: every result of one
 * invocation, written at exit in the formats asked for (--json, --junit,
 * --markdown), each through ac_write_atomic.  A format is one row of the
 * table in report.c and one file (report_json.c, ...). */
#ifndef ATTNCHECK_REPORT_H
#define ATTNCHECK_REPORT_H

#include "harness/run/run.h"

typedef struct ac_report ac_report; /* collects results for one invocation */
int ac_report_open(ac_report **r, const char *json_path, const char *junit_path,
                   const char *markdown_path, ac_err *err);
void ac_report_add(ac_report *r, const char *kernel, const ac_result *res, const char *minimal_line);
int ac_report_close(ac_report *r, ac_err *err); /* writes atomically, frees */

#endif
