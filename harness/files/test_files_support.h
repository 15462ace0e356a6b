/* harness/files/test_files_support.h — for tests only: a fresh temp dir per
 * test (a suite's .init/.fini) and paths in it.  Included by the tests of the
 * tensor files (files/test_tensor_io.c) and of check (cli/test_check.c). */
#ifndef ATTNCHECK_TEST_FILES_SUPPORT_H
#define ATTNCHECK_TEST_FILES_SUPPORT_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

static char dir[64]; /* the current test's temp dir */

static void make_dir(void)
{
    snprintf(dir, sizeof dir, "/tmp/ac-tio-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void remove_dir(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

static const char *path_of(const char *name)
{
    static char p[4][128];
    static int turn;
    turn = (turn + 1) % 4;
    snprintf(p[turn], sizeof p[turn], "%s/%s", dir, name);
    return p[turn];
}

#endif
