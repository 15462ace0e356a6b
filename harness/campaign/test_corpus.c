/* harness/campaign/test_corpus.c — the failure corpus writer (--save-failures)
 * and the corpus reader (attncheck run FILE|DIR). */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness/files/test_tmpdir.h"
#include "harness/harness.h"

/* A test's folders (ac_test_tmpdir) are removed after it, even when it fails. */
TestSuite(harness_corpus, .fini = ac_test_tmpdirs_remove);

/* ---- the failure corpus ---------------------------------------------------- */

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
    const char *dir = ac_test_tmpdir("ac-shrink");
    char path[256];
    snprintf(path, sizeof path, "%s/cpu-flash.cases", dir);
    FILE *f = fopen(path, "w");
    fputs("# hand-written\nv1 seed=1", f); /* no final newline: the writer adds one */
    fclose(f);
    ac_err err;
    cr_assert_eq(ac_save_failure(dir, "cpu-flash", "O:scaled 12 > 4\nat row 3", "LINE-A", &err), AC_OK, "%s", err.msg);
    cr_assert_eq(ac_save_failure(dir, "cpu-flash", "dK:scaled", "LINE-B", &err), AC_OK, "%s", err.msg);
    char *text = slurp(path);
    cr_assert(strncmp(text, "# hand-written\nv1 seed=1\n# 20", 29) == 0, "existing lines kept, got:\n%s", text);
    cr_assert_not_null(strstr(text, " cpu-flash: O:scaled 12 > 4 at row 3\nLINE-A\n"), "got:\n%s", text);
    char *b = strstr(text, "LINE-B\n");
    cr_assert(b && strstr(text, "LINE-A") < b, "appended in order");
    cr_assert_eq(count_entries(dir), 1, "only the corpus file remains (no temp files)");
    struct stat sb;
    stat(path, &sb);
    cr_assert_eq(sb.st_mode & 0777, 0644, "the existing file's mode (fopen under umask 022) is kept");
}

Test(harness_corpus, save_failure_creates_the_directory_and_sanitises_names)
{
    const char *dir = ac_test_tmpdir("ac-shrink");
    char sub[256], path[300];
    snprintf(sub, sizeof sub, "%s/new", dir);
    ac_err err;
    cr_assert_eq(ac_save_failure(sub, "../evil/k", "why", "LINE", &err), AC_OK, "%s", err.msg);
    snprintf(path, sizeof path, "%s/_._evil_k.cases", sub);
    cr_assert_str_eq(strstr(slurp(path), "LINE"), "LINE\n");
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
    const char *dir = ac_test_tmpdir("ac-shrink");
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
}

Test(harness_corpus, corpus_names_file_and_line_of_a_bad_line)
{
    const char *dir = ac_test_tmpdir("ac-shrink");
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
}

/* ---- hostile corpora and folders (issue 13) ------------------------------------ */

/* Several processes append to one folder at once, as fuzzers sharing
 * --save-failures do: every entry arrives, whole (the old read-modify-rename
 * without a lock lost 62 of 229). */
Test(harness_corpus, concurrent_savers_lose_no_entry)
{
    enum { PROCS = 4, EACH = 12 };
    const char *dir = ac_test_tmpdir("ac-shrink");
    for (int p = 0; p < PROCS; p++) {
        pid_t pid = fork();
        cr_assert_neq(pid, -1);
        if (pid == 0) {
            int bad = 0;
            for (int i = 0; i < EACH; i++) {
                char line[64];
                ac_err err;
                snprintf(line, sizeof line, "LINE-%d-%d", p, i);
                bad |= ac_save_failure(dir, "k", "why", line, &err) != AC_OK;
            }
            _exit(bad);
        }
    }
    for (int p = 0; p < PROCS; p++) {
        int status;
        cr_assert_neq(wait(&status), -1);
        cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "a saver failed");
    }
    char path[256];
    snprintf(path, sizeof path, "%s/k.cases", dir);
    char *text = slurp(path);
    for (int p = 0; p < PROCS; p++)
        for (int i = 0; i < EACH; i++) {
            char want[64];
            snprintf(want, sizeof want, "\nLINE-%d-%d\n", p, i);
            cr_assert_not_null(strstr(text, want), "entry %d of process %d lost", i, p);
        }
    int lines = 0;
    for (char *c = text; *c; c++)
        lines += *c == '\n';
    cr_assert_eq(lines, 2 * PROCS * EACH, "each entry is two whole lines");
}

/* Sets or clears the immutable flag; false where the process may not. */
static bool set_immutable(const char *path, bool on)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY);
    int flags = 0;
    bool ok = fd >= 0 && ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0;
    flags = on ? flags | FS_IMMUTABLE_FL : flags & ~FS_IMMUTABLE_FL;
    ok = ok && ioctl(fd, FS_IOC_SETFLAGS, &flags) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

/* A file given as DIR, a missing parent, a folder that refuses files: each is
 * an input error naming the folder, both before a campaign and at a save. */
Test(harness_corpus, save_errors_are_reported_not_dropped)
{
    const char *dir = ac_test_tmpdir("ac-shrink");
    char file[256], orphan[256], locked[256];
    snprintf(file, sizeof file, "%s/plain", dir);
    snprintf(orphan, sizeof orphan, "%s/no/such", dir);
    snprintf(locked, sizeof locked, "%s/locked", dir);
    write_file(file, "x\n");
    ac_err err = {{0}};
    cr_assert_eq(ac_save_failures_check(file, &err), AC_ERR_INPUT);
    cr_assert_not_null(strstr(err.msg, "is a regular file, not a folder"), "%s", err.msg);
    cr_assert_eq(ac_save_failure(file, "k", "why", "LINE", &err), AC_ERR_INPUT);
    cr_assert_eq(ac_save_failures_check(orphan, &err), AC_ERR_INPUT);
    cr_assert_not_null(strstr(err.msg, "cannot create the folder"), "%s", err.msg);
    cr_assert_eq(ac_save_failure(orphan, "k", "why", "LINE", &err), AC_ERR_INPUT);
    cr_assert_eq(mkdir(locked, 0755), 0);
    bool immutable = set_immutable(locked, true);
    if (!immutable && geteuid() != 0)
        cr_assert_eq(chmod(locked, 0555), 0);
    if (!immutable && geteuid() == 0) {
        ac_test_tmpdirs_remove(); /* a skipped test's .fini is not run */
        cr_skip_test("root without CAP_LINUX_IMMUTABLE: no folder refuses this process");
    }
    int st = ac_save_failures_check(locked, &err);
    int st2 = ac_save_failure(locked, "k", "why", "LINE", &err);
    if (immutable)
        set_immutable(locked, false);
    chmod(locked, 0755);
    cr_assert_eq(st, AC_ERR_INPUT);
    cr_assert_eq(st2, AC_ERR_INPUT);
    cr_assert_not_null(strstr(err.msg, locked), "the message names the folder: %s", err.msg);
}

/* A NUL byte is an error naming its line (fgets read it as a shorter line);
 * /dev/zero and a FIFO are refused instead of read forever. */
Test(harness_corpus, nul_bytes_devices_and_fifos_are_refused, .timeout = 10)
{
    const char *dir = ac_test_tmpdir("ac-shrink");
    char a[256], fifo[256];
    snprintf(a, sizeof a, "%s/a.cases", dir);
    snprintf(fifo, sizeof fifo, "%s/b.cases", dir);
    char l1[AC_CASE_LINE_MAX], text[2 * AC_CASE_LINE_MAX + 16];
    ac_case c = ac_case_default();
    int n = ac_case_format(&c, l1, sizeof l1);
    snprintf(text, sizeof text, "# ok\n%s\n%s\n", l1, l1);
    size_t len = strlen(text);
    text[5 + (size_t)n + 1 + 3] = '\0'; /* inside the second case line, on line 3 */
    FILE *f = fopen(a, "wb");
    fwrite(text, 1, len, f);
    fclose(f);
    ac_corpus l = {0};
    ac_err err = {{0}};
    cr_assert_eq(ac_corpus_load(&l, a, &err), AC_ERR_INPUT);
    char want[300];
    snprintf(want, sizeof want, "%s:3: a NUL byte", a);
    cr_assert_not_null(strstr(err.msg, want), "got: %s", err.msg);
    ac_corpus_free(&l);
    cr_assert_eq(ac_corpus_load(&l, "/dev/zero", &err), AC_ERR_INPUT);
    cr_assert_not_null(strstr(err.msg, "character device"), "%s", err.msg);
    unlink(a);
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    cr_assert_eq(ac_corpus_load(&l, fifo, &err), AC_ERR_INPUT);
    cr_assert_eq(ac_corpus_load(&l, dir, &err), AC_ERR_INPUT, "a FIFO named *.cases in a folder");
    cr_assert_not_null(strstr(err.msg, "is a FIFO"), "%s", err.msg);
}
