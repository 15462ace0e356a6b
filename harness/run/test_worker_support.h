/* harness/run/test_worker_support.h — for tests only: isolated runs in a test
 * binary.  The kernel worker is `attncheck __worker`, and a test binary is not
 * attncheck, so this points $ATTNCHECK_WORKER_EXE at the attncheck binary:
 * $ATTNCHECK_BIN, else harness/attncheck beside the test binary (a build
 * tree), else attncheck beside it (a bundle). */
#ifndef ATTNCHECK_TEST_WORKER_SUPPORT_H
#define ATTNCHECK_TEST_WORKER_SUPPORT_H

#include <criterion/criterion.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void use_attncheck_as_worker(void)
{
    char self[PATH_MAX], exe[PATH_MAX + 32];
    const char *env = getenv("ATTNCHECK_BIN");
    if (env && *env) {
        snprintf(exe, sizeof exe, "%s", env);
    } else {
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        cr_assert_gt(n, 0);
        self[n] = '\0';
        *strrchr(self, '/') = '\0';
        snprintf(exe, sizeof exe, "%s/harness/attncheck", self); /* a build tree */
        if (access(exe, X_OK) != 0)
            snprintf(exe, sizeof exe, "%s/attncheck", self); /* a bundle (ci/make-bundle.sh) */
    }
    cr_assert_eq(access(exe, X_OK), 0, "%s is not built", exe);
    setenv("ATTNCHECK_WORKER_EXE", exe, 1);
}

#endif
