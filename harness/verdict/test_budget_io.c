/* harness/verdict/test_budget_io.c — the budgets file read from hostile paths
 * and texts (suite harness_budget): /dev/zero and FIFOs refused at once (the
 * old reader grew to 4 GB on /dev/zero), sizes and lines bounded, NUL bytes
 * and loose numbers refused naming the line. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness/files/test_tmpdir.h"
#include "harness/harness.h"

/* The repository's budgets.txt, read through the parser under test. */
static char *repository_text(size_t *len)
{
    char *text;
    ac_err err = {{0}};
    cr_assert_eq(ac_read_file(ac_budgets_default_path(), &text, len, &err), AC_OK, "%s", err.msg);
    cr_assert_not_null(text);
    return text;
}

Test(harness_budget, devices_and_fifos_are_refused_without_reading, .timeout = 10, .fini = ac_test_tmpdirs_remove)
{
    ac_budgets b;
    ac_err err = {{0}};
    cr_assert_eq(ac_budgets_load("/dev/zero", &b, &err), AC_ERR_INPUT);
    cr_assert_not_null(strstr(err.msg, "/dev/zero: is a character device"), "%s", err.msg);
    char *dir = ac_test_tmpdir("ac-budget"), fifo[64];
    snprintf(fifo, sizeof fifo, "%s/budgets.txt", dir);
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    cr_assert_eq(ac_budgets_load(fifo, &b, &err), AC_ERR_INPUT);
    cr_assert_not_null(strstr(err.msg, "is a FIFO"), "%s", err.msg);
    unlink(fifo);
    cr_assert_eq(ac_budgets_load(dir, &b, &err), AC_ERR_INPUT);
}

Test(harness_budget, a_file_past_the_size_bound_is_refused, .fini = ac_test_tmpdirs_remove)
{
    char path[128];
    snprintf(path, sizeof path, "%s/budgets.txt", ac_test_tmpdir("ac-budget"));
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    cr_assert_geq(fd, 0);
    cr_assert_eq(ftruncate(fd, (off_t)AC_BUDGETS_FILE_MAX + 1), 0); /* a megabyte of NUL bytes and one more */
    close(fd);
    ac_budgets b;
    ac_err err = {{0}};
    cr_assert_eq(ac_budgets_load(path, &b, &err), AC_ERR_INPUT);
    cr_assert_not_null(strstr(err.msg, "larger than 1048576 bytes"), "%s", err.msg);
}

Test(harness_budget, nul_bytes_long_lines_and_loose_numbers_name_their_line)
{
    size_t len;
    char *text = repository_text(&len);
    ac_budgets b;
    ac_err err = {{0}};
    cr_assert_eq(ac_budgets_parse(text, len, "budgets.txt", &b, &err), AC_OK, "%s", err.msg);
    /* a NUL byte on line 2: strtok and getline read it as a shorter line */
    char *copy = malloc(len + 1);
    memcpy(copy, text, len + 1);
    char *line2 = strchr(copy, '\n') + 1;
    line2[0] = '\0';
    cr_assert_eq(ac_budgets_parse(copy, len, "budgets.txt", &b, &err), AC_ERR_INPUT);
    cr_assert_not_null(strstr(err.msg, "budgets.txt:2: a NUL byte"), "%s", err.msg);
    free(copy);
    char *longer = malloc(len + 2000);
    memcpy(longer, "# ", 2);
    memset(longer + 2, 'x', 1500);
    longer[1502] = '\n';
    memcpy(longer + 1503, text, len);
    cr_assert_eq(ac_budgets_parse(longer, len + 1503, "b.txt", &b, &err), AC_ERR_INPUT);
    cr_assert_not_null(strstr(err.msg, "b.txt:1: line longer than"), "%s", err.msg);
    free(longer);
    const char *loose[] = {"0x4", "inf", "+4", "4.0.0", "nan"};
    for (size_t i = 0; i < sizeof loose / sizeof loose[0]; i++) {
        char doc[256];
        snprintf(doc, sizeof doc, "version 1\ngrowth-length %s\n", loose[i]);
        cr_assert_eq(ac_budgets_parse(doc, strlen(doc), "b.txt", &b, &err), AC_ERR_INPUT, "%s", loose[i]);
        cr_assert_not_null(strstr(err.msg, "b.txt:2: growth-length"), "%s: %s", loose[i], err.msg);
    }
    free(text);
}
