/* harness/campaign/test_corpus.c — the failure corpus writer (--save-failures)
 * and the corpus reader (attncheck run FILE|DIR). */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness/harness.h"

/* ---- the failure corpus ---------------------------------------------------- */

static char *make_tmpdir(void)
{
    static char dir[64];
    snprintf(dir, sizeof dir, "/tmp/ac-shrink-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    return dir;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    static char buf[1 << 17];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.' || strncmp(e->d_name, ".tmp-", 5) == 0;
    closedir(d);
    return n;
}

Test(harness_corpus, save_failure_appends_atomically)
{
    char *dir = make_tmpdir();
    char path[256];
    snprintf(path, sizeof path, "%s/cpu-flash.cases", dir);
    FILE *f = fopen(path, "w");
    fputs("# hand-written\nv1 seed=1", f); /* no final newline: the writer adds one */
    fclose(f);
    ac_err err;
    cr_assert_eq(ac_save_failure(dir, "cpu-flash", "O:scaled 12 > 4\nat row 3", "LINE-A", &err), AC_OK, "%s",
                 err.msg);
    cr_assert_eq(ac_save_failure(dir, "cpu-flash", "dK:scaled", "LINE-B", &err), AC_OK, "%s", err.msg);
    char *text = slurp(path);
    cr_assert(strncmp(text, "# hand-written\nv1 seed=1\n# 20", 29) == 0, "existing lines kept, got:\n%s", text);
    cr_assert_not_null(strstr(text, " cpu-flash: O:scaled 12 > 4 at row 3\nLINE-A\n"), "got:\n%s", text);
    char *b = strstr(text, "LINE-B\n");
    cr_assert(b && strstr(text, "LINE-A") < b, "appended in order");
    cr_assert_eq(count_entries(dir), 1, "only the corpus file remains (no temp files)");
    struct stat sb;
    stat(path, &sb);
    cr_assert_eq(sb.st_mode & 0777, 0644);
    unlink(path);
    rmdir(dir);
}

Test(harness_corpus, save_failure_creates_the_directory_and_sanitises_names)
{
    char *dir = make_tmpdir();
    char sub[256], path[300];
    snprintf(sub, sizeof sub, "%s/new", dir);
    ac_err err;
    cr_assert_eq(ac_save_failure(sub, "../evil/k", "why", "LINE", &err), AC_OK, "%s", err.msg);
    snprintf(path, sizeof path, "%s/_._evil_k.cases", sub);
    cr_assert_str_eq(strstr(slurp(path), "LINE"), "LINE\n");
    unlink(path);
    rmdir(sub);
    rmdir(dir);
}

/* ---- reading a corpus ------------------------------------------------------- */

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

Test(harness_corpus, corpus_reads_dir_in_sorted_order_skipping_comments)
{
    char *dir = make_tmpdir();
    char a[256], b[256], other[256];
    snprintf(a, sizeof a, "%s/a.cases", dir);
    snprintf(b, sizeof b, "%s/b.cases", dir);
    snprintf(other, sizeof other, "%s/notes.txt", dir);
    ac_case c1 = ac_case_default(), c2 = ac_case_default();
    c1.seqlen_q = 3;
    c2.seqlen_k = 5;
    char l1[AC_CASE_LINE_MAX], l2[AC_CASE_LINE_MAX], text[3000];
    ac_case_format(&c1, l1, sizeof l1);
    ac_case_format(&c2, l2, sizeof l2);
    snprintf(text, sizeof text, "# why c2\n%s\n", l2);
    write_file(b, text);
    snprintf(text, sizeof text, "\n# why c1\n  %s\n", l1);
    write_file(a, text);
    write_file(other, "garbage\n");
    ac_corpus l = {0};
    ac_err err;
    cr_assert_eq(ac_corpus_load(&l, dir, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(l.n, 2);
    cr_assert_eq(l.cases[0].seqlen_q, 3, "a.cases first");
    cr_assert_eq(l.cases[1].seqlen_k, 5);
    char want[300];
    snprintf(want, sizeof want, "%s:3", a);
    cr_assert_str_eq(l.where[0], want);
    ac_corpus_free(&l);
    unlink(a), unlink(b), unlink(other);
    rmdir(dir);
}

Test(harness_corpus, corpus_names_file_and_line_of_a_bad_line)
{
    char *dir = make_tmpdir();
    char a[256];
    snprintf(a, sizeof a, "%s/a.cases", dir);
    char l1[AC_CASE_LINE_MAX], text[3000];
    ac_case c = ac_case_default();
    ac_case_format(&c, l1, sizeof l1);
    snprintf(text, sizeof text, "# ok\n%s\nv1 seed=1 b=zz\n", l1);
    write_file(a, text);
    ac_corpus l = {0};
    ac_err err;
    cr_assert_eq(ac_corpus_load(&l, a, &err), AC_ERR_INPUT);
    char want[300];
    snprintf(want, sizeof want, "%s:3: ", a);
    cr_assert(strncmp(err.msg, want, strlen(want)) == 0, "got: %s", err.msg);
    ac_corpus_free(&l);
    unlink(a);
    rmdir(dir);
}
