/* ref/status.c — the one way every component reports an error: a status
 * code (the CLI's exit status) and a message the caller may print. */
#include <stdarg.h>
#include <stdio.h>

#include "ref.h"

int ac_fail(ac_err *err, int status, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return status;
}
