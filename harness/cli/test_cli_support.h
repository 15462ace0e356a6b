/* harness/cli/test_cli_support.h — for tests only: the built `attncheck`
 * binary run as a user runs it, its exit status and what it printed.  The
 * binary is $ATTNCHECK_BIN, else harness/attncheck beside the test binary. */
#ifndef ATTNCHECK_TEST_CLI_SUPPORT_H
#define ATTNCHECK_TEST_CLI_SUPPORT_H

#include <criterion/criterion.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static inline const char *cli_bin_path(void)
{
    static char path[PATH_MAX + 32];
    const char *env = getenv("ATTNCHECK_BIN");
    if (env && *env)
        return env;
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    cr_assert_gt(n, 0);
    self[n] = '\0';
    *strrchr(self, '/') = '\0';
    snprintf(path, sizeof path, "%s/harness/attncheck", self);
    return path;
}

/* Runs the binary with args (shell syntax, run from the current directory)
 * and returns its exit status (137: killed at the time limit); stdout and
 * stderr together in out. */
static inline int cli_run(const char *args, char *out, size_t len)
{
    char cmd[PATH_MAX + 8192];
    /* killed after a minute: a binary that reads /dev/zero forever must fail the test, not outlive it */
    snprintf(cmd, sizeof cmd, "timeout -s KILL 60 '%s' %s 2>&1", cli_bin_path(), args);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t n = 0, got;
    while (n + 1 < len && (got = fread(out + n, 1, len - 1 - n, p)) > 0)
        n += got;
    out[n] = '\0';
    char sink[4096];
    while (fread(sink, 1, sizeof sink, p) > 0)
        ;
    int status = pclose(p);
    cr_assert(WIFEXITED(status), "attncheck %s did not exit normally", args);
    return WEXITSTATUS(status);
}

/* The whole of a file the binary wrote, NUL-terminated, malloc'd (a fuzz
 * campaign's JSON Lines pass 1 MiB in under a second: a fixed buffer cut the
 * campaign record off and failed the test on fast machines). */
static inline char *cli_slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s was not written", path);
    size_t cap = 1 << 16, n = 0, got;
    char *text = malloc(cap);
    cr_assert_not_null(text);
    while ((got = fread(text + n, 1, cap - 1 - n, f)) > 0)
        if ((n += got) == cap - 1) {
            text = realloc(text, cap *= 2);
            cr_assert_not_null(text);
        }
    text[n] = '\0';
    fclose(f);
    return text;
}

#endif
