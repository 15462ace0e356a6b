/* harness/files/test_tmpdir.c — a test's temp directories, removed by its .fini
 * (test_tmpdir.h). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

#include "harness/files/files.h"
#include "harness/files/test_tmpdir.h"

enum { MAX_DIRS = 8 };
static char dirs[MAX_DIRS][64];
static int n_dirs;

char *ac_test_tmpdir(const char *prefix)
{
    cr_assert_lt(n_dirs, MAX_DIRS, "a test makes at most %d temp directories", MAX_DIRS);
    char *d = dirs[n_dirs];
    cr_assert_lt(snprintf(d, sizeof dirs[0], "/tmp/%s-XXXXXX", prefix), (int)sizeof dirs[0], "prefix too long");
    cr_assert_not_null(mkdtemp(d), "cannot make %s", d);
    n_dirs++;
    return d;
}

void ac_test_tmpdirs_remove(void)
{
    int stuck = -1; /* one that could not be removed: the others are removed all the same */
    for (; n_dirs > 0; n_dirs--)
        if (ac_remove_tree(dirs[n_dirs - 1]) != 0)
            stuck = n_dirs - 1;
    cr_assert_eq(stuck, -1, "cannot remove %s", stuck >= 0 ? dirs[stuck] : "");
}
