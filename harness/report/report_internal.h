/* harness/report/report_internal.h — shared by the report writers only. */
#ifndef ATTNCHECK_REPORT_INTERNAL_H
#define ATTNCHECK_REPORT_INTERNAL_H

#include "harness/report/report.h"

/* Kernels one report keeps apart (one JUnit suite, one Markdown table each). */
#define REPORT_MAX_KERNELS 64

/* "pass", "fail", "error" or "skipped" (a case outside the kernel's claims). */
const char *report_verdict_name(const ac_result *res);
/* The slot of kernel among the n records of size `size` at `records` (each
 * starting with its name, char[AC_KERNEL_NAME_LEN]), a fresh zeroed one
 * appended when it is new; NULL when all REPORT_MAX_KERNELS are taken. */
void *report_kernel_slot(void *records, size_t size, int *n, const char *kernel);

#endif
