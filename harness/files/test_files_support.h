/* harness/files/test_files_support.h — for tests only: a fresh temp dir per
 * test (a suite's .init/.fini; test_tmpdir.h, so it is removed after a failed
 * assertion too) and paths in it.  Included by the tests of the tensor files
 * (files/test_tensor_io.c), of check (cli/test_check.c) and of the reports. */
#ifndef ATTNCHECK_TEST_FILES_SUPPORT_H
#define ATTNCHECK_TEST_FILES_SUPPORT_H

#include <criterion/criterion.h>
#include <stdio.h>

#include "harness/files/test_tmpdir.h"

static char dir[64]; /* the current test's temp dir */

static void make_dir(void) { snprintf(dir, sizeof dir, "%s", ac_test_tmpdir("ac-tio")); }

static void remove_dir(void) { ac_test_tmpdirs_remove(); }

static const char *path_of(const char *name)
{
    static char p[4][128];
    static int turn;
    turn = (turn + 1) % 4;
    snprintf(p[turn], sizeof p[turn], "%s/%s", dir, name);
    return p[turn];
}

#endif
