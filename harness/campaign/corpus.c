/* harness/campaign/corpus.c — the regression corpus: *.cases files read for
 * replay (a file, or every *.cases file of a directory in sorted order), and
 * failures appended to DIR/<kernel>.cases by --save-failures. */
#define _GNU_SOURCE /* F_OFD_SETLKW */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "harness/campaign/corpus.h"
#include "harness/files/files.h"
#include "harness/verdict/gate.h"
#include "kernels/kernel.h"

/* ---- saving failures ------------------------------------------------------- */

/* One line of text: newlines in why would break the corpus format. */
static void one_line(const char *in, char *out, size_t len)
{
    snprintf(out, len, "%s", in ? in : "");
    for (char *p = out; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
}

/* Keeps file names to [A-Za-z0-9._-]: a plugin's name must not escape DIR. */
static void file_stem(const char *kernel, char *out, size_t len)
{
    size_t n = 0;
    for (const char *p = kernel; *p && n + 1 < len; p++) {
        char ch = *p;
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-' ||
            ch == '_' || (ch == '.' && n > 0);
        out[n++] = ok ? ch : '_';
    }
    out[n] = '\0';
    if (n == 0)
        snprintf(out, len, "kernel");
}

/* "# DATE KERNEL: WHY\nLINE\n", each on one line, the date ISO 8601 UTC. */
static void corpus_entry(const char *kernel, const char *why, const char *line, char *buf, size_t len)
{
    char why1[AC_WHY_LEN], line1[AC_CASE_LINE_MAX], date[32];
    one_line(why, why1, sizeof why1);
    one_line(line, line1, sizeof line1);
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm);
    snprintf(buf, len, "# %s %s: %s\n%s\n", date, kernel, why1, line1);
}

/* Whether text (len bytes) has a line equal to line (trailing blanks aside). */
static bool has_line(const char *text, size_t len, const char *line)
{
    size_t want = strlen(line);
    for (size_t at = 0; at < len;) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - text) : len, n = end - at;
        while (n && (text[at + n - 1] == '\r' || text[at + n - 1] == ' '))
            n--;
        if (n == want && memcmp(text + at, line, n) == 0)
            return true;
        at = end + 1;
    }
    return false;
}

/* Whether DIR can take failures: it exists or can be created (its parent
 * must exist), is a folder, and accepts a new file.  Asked before a campaign,
 * so that a file given as DIR, a missing parent or a read-only or immutable
 * folder stops the run with exit 2 instead of failures being lost. */
int ac_save_failures_check(const char *dir, ac_err *err)
{
    struct stat sb;
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return ac_fail(err, AC_ERR_INPUT, "--save-failures %s: cannot create the folder: %s", dir, strerror(errno));
    if (stat(dir, &sb) != 0)
        return ac_fail(err, AC_ERR_INPUT, "--save-failures %s: %s", dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return ac_fail(err, AC_ERR_INPUT, "--save-failures %s: is %s, not a folder", dir, ac_file_kind(sb.st_mode));
    char probe[AC_PATH_LEN];
    if (snprintf(probe, sizeof probe, "%s/probe.cases", dir) >= (int)sizeof probe)
        return ac_fail(err, AC_ERR_INPUT, "--save-failures: path too long");
    return ac_check_writable(probe, "--save-failures", err);
}

/* An exclusive lock on the corpus file's lock file (".NAME.lock" beside the
 * target, which the atomic rename never replaces): every writer reads, appends
 * and renames under it, so concurrent fuzzers sharing a folder lose no entry.
 * Open-file-description locks serialise threads too; plain POSIX locks where
 * the kernel lacks them.  Returns the fd holding the lock, or -1. */
static int lock_corpus(const char *target, ac_err *err)
{
    char lock[AC_PATH_LEN];
    const char *slash = strrchr(target, '/');
    int dir_len = slash ? (int)(slash - target) : 1;
    if (snprintf(lock, sizeof lock, "%.*s/.%s.lock", dir_len, slash ? target : ".", slash ? slash + 1 : target) >=
        (int)sizeof lock) {
        ac_fail(err, AC_ERR_INPUT, "--save-failures: path too long");
        return -1;
    }
    int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (fd < 0) {
        ac_fail(err, AC_ERR_INPUT, "--save-failures: cannot create the lock file %s: %s", lock, strerror(errno));
        return -1;
    }
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    int st;
    while ((st = fcntl(fd, F_OFD_SETLKW, &fl)) != 0 && errno == EINTR)
        ;
    if (st != 0 && errno == EINVAL)
        while ((st = fcntl(fd, F_SETLKW, &fl)) != 0 && errno == EINTR)
            ;
    if (st != 0) {
        ac_fail(err, AC_ERR_INPUT, "--save-failures: cannot lock %s: %s", lock, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

/* path's old contents (if any) and then entry, replacing path atomically;
 * nothing when the file already holds line. */
static int append_atomic(const char *path, const char *entry, const char *line, ac_err *err)
{
    char *old;
    size_t old_len, add = strlen(entry);
    int st = ac_read_file(path, &old, &old_len, err);
    if (st != AC_OK)
        return st;
    if (old && has_line(old, old_len, line)) {
        free(old);
        return AC_OK;
    }
    char *all = malloc(old_len + add + 2);
    if (!all) {
        free(old);
        return ac_fail(err, AC_ERR_ENV, "out of memory");
    }
    if (old_len)
        memcpy(all, old, old_len);
    size_t n = old_len;
    if (n > 0 && all[n - 1] != '\n')
        all[n++] = '\n'; /* a file someone edited without a final newline */
    memcpy(all + n, entry, add);
    free(old);
    st = ac_write_atomic(path, all, n + add, err);
    free(all);
    return st;
}

int ac_save_failure(const char *dir, const char *kernel, const char *why, const char *line, ac_err *err)
{
    int st = ac_save_failures_check(dir, err);
    if (st != AC_OK)
        return st;
    char stem[AC_KERNEL_NAME_LEN], path[AC_PATH_LEN], target[AC_PATH_LEN];
    file_stem(kernel, stem, sizeof stem);
    if (snprintf(path, sizeof path, "%s/%s.cases", dir, stem) >= (int)sizeof path)
        return ac_fail(err, AC_ERR_INPUT, "--save-failures: path too long");
    if ((st = ac_write_target(path, target, sizeof target, err)) != AC_OK)
        return st;
    char entry[AC_WHY_LEN + AC_CASE_LINE_MAX + 300], line1[AC_CASE_LINE_MAX];
    corpus_entry(kernel, why, line, entry, sizeof entry);
    one_line(line, line1, sizeof line1);
    int lock = lock_corpus(target, err);
    if (lock < 0)
        return AC_ERR_INPUT;
    st = append_atomic(target, entry, line1, err);
    close(lock); /* releases the lock */
    return st;
}

/* ---- reading a corpus ------------------------------------------------------ */

int ac_corpus_add_line(ac_corpus *l, const char *line, const char *file, long lineno, ac_err *err)
{
    ac_case cs;
    ac_err why = {{0}};
    int st = ac_case_parse(line, &cs, &why);
    if (st == AC_OK)
        st = ac_case_validate(&cs, &why);
    if (st != AC_OK)
        return ac_fail(err, st, "%s:%ld: %s", file, lineno, why.msg);
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        ac_case *nc = realloc(l->cases, cap * sizeof *nc);
        if (nc)
            l->cases = nc;
        char(*nw)[AC_CORPUS_WHERE_MAX] = realloc(l->where, cap * sizeof *nw);
        if (nw)
            l->where = nw;
        if (!nc || !nw)
            return ac_fail(err, AC_ERR_ENV, "out of memory reading %s", file);
        l->cap = cap;
    }
    l->cases[l->n] = cs;
    snprintf(l->where[l->n], sizeof l->where[0], "%s:%ld", file, lineno);
    l->n++;
    return AC_OK;
}

/* One line of a corpus text (without its newline): NUL bytes are refused (a
 * binary file, or an editor's accident, must not be read as shorter lines),
 * and so is a line too long to be a case line. */
static int corpus_line(ac_corpus *l, const char *at, size_t len, const char *file, long lineno, ac_err *err)
{
    if (memchr(at, '\0', len))
        return ac_fail(err, AC_ERR_INPUT, "%s:%ld: a NUL byte in the line (not a text file?)", file, lineno);
    if (len >= AC_CASE_LINE_MAX)
        return ac_fail(err, AC_ERR_INPUT, "%s:%ld: line longer than %d characters", file, lineno, AC_CASE_LINE_MAX - 1);
    char line[AC_CASE_LINE_MAX];
    memcpy(line, at, len);
    line[len] = '\0';
    while (len && (line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t'))
        line[--len] = '\0';
    const char *p = line + strspn(line, " \t");
    if (*p == '\0' || *p == '#')
        return AC_OK;
    return ac_corpus_add_line(l, p, file, lineno, err);
}

int ac_corpus_parse(ac_corpus *l, const char *text, size_t len, const char *file, ac_err *err)
{
    long lineno = 0;
    for (size_t at = 0; at < len;) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t n = nl ? (size_t)(nl - (text + at)) : len - at;
        int st = corpus_line(l, text + at, n, file, ++lineno, err);
        if (st != AC_OK)
            return st;
        at += n + 1;
    }
    return AC_OK;
}

/* A regular file only, read whole and bounded (files.h): `run /dev/zero` or a
 * FIFO is refused, not read forever. */
static int corpus_file(ac_corpus *l, const char *path, ac_err *err)
{
    char *text;
    size_t len;
    int st = ac_read_file(path, &text, &len, err);
    if (st == AC_OK && !text)
        st = ac_fail(err, AC_ERR_INPUT, "cannot open %s: %s", path, strerror(ENOENT));
    if (st == AC_OK)
        st = ac_corpus_parse(l, text, len, path, err);
    free(text);
    return st;
}

static int has_cases_suffix(const struct dirent *e)
{
    size_t n = strlen(e->d_name);
    return e->d_name[0] != '.' && n > 6 && strcmp(e->d_name + n - 6, ".cases") == 0;
}

static int corpus_dir(ac_corpus *l, const char *dir, ac_err *err)
{
    struct dirent **names;
    int n = scandir(dir, &names, has_cases_suffix, alphasort);
    if (n < 0)
        return ac_fail(err, AC_ERR_INPUT, "cannot read %s: %s", dir, strerror(errno));
    int st = n == 0 ? ac_fail(err, AC_ERR_INPUT, "no *.cases files in %s", dir) : AC_OK;
    for (int i = 0; i < n; i++) {
        char path[AC_PATH_LEN];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name);
        if (st == AC_OK)
            st = corpus_file(l, path, err);
        free(names[i]);
    }
    free(names);
    return st;
}

int ac_corpus_load(ac_corpus *l, const char *path, ac_err *err)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return ac_fail(err, AC_ERR_INPUT, "cannot open %s: %s", path, strerror(errno));
    return S_ISDIR(sb.st_mode) ? corpus_dir(l, path, err) : corpus_file(l, path, err);
}

void ac_corpus_free(ac_corpus *l)
{
    free(l->cases);
    free(l->where);
    memset(l, 0, sizeof *l);
}
