/* harness/report/report_internal.h — shared by the report writers only. */
#ifndef ATTNCHECK_REPORT_INTERNAL_H
#define ATTNCHECK_REPORT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "harness/report/report.h"

/* Kernels one report keeps apart (one JUnit suite, one Markdown table each). */
#define REPORT_MAX_KERNELS 64

/* "pass", "fail", "error" or "skipped" (a case outside the kernel's claims). */
const char *report_verdict_name(const ac_result *res);
/* The slot of kernel among the n records of size `size` at `records` (each
 * starting with its name, char[AC_KERNEL_NAME_LEN]), a fresh zeroed one
 * appended when it is new; NULL when all REPORT_MAX_KERNELS are taken. */
void *report_kernel_slot(void *records, size_t size, int *n, const char *kernel);

/* Text from a plugin or a path may be any bytes, and a report must stay
 * well-formed JSON and XML: the length (1 to 4) of the valid UTF-8 character
 * at s and its code point, or 0 for a byte that starts none (an overlong form,
 * a surrogate, past U+10FFFF, a cut sequence, a stray continuation byte). */
size_t report_utf8_char(const unsigned char *s, uint32_t *cp);
/* s with each byte that report_utf8_char refuses written as the four
 * characters \xHH; malloc'd, NULL when out of memory. */
char *report_utf8_clean(const char *s);

#endif
