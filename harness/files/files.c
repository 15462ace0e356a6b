/* harness/files/files.c — whole files, read at once (regular files only,
 * bounded) or replaced atomically (through symlinks, keeping the mode); a
 * scratch directory removed with what it holds. */
#define _XOPEN_SOURCE 700 /* nftw */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "harness/files/files.h"

#define MAX_SYMLINK_HOPS 40

const char *ac_file_kind(unsigned mode)
{
    switch (mode & S_IFMT) {
    case S_IFREG:
        return "a regular file";
    case S_IFDIR:
        return "a directory";
    case S_IFCHR:
        return "a character device";
    case S_IFBLK:
        return "a block device";
    case S_IFIFO:
        return "a FIFO";
    case S_IFSOCK:
        return "a socket";
    case S_IFLNK:
        return "a symbolic link";
    default:
        return "not a regular file";
    }
}

/* ---- reading ----------------------------------------------------------------- */

int ac_open_regular(const char *path, int *fd, long long *size, ac_err *err)
{
    *fd = -1;
    struct stat st;
    /* stat first: a device or FIFO is refused without being opened at all */
    if (stat(path, &st) != 0)
        return ac_fail(err, AC_ERR_INPUT, "%s: cannot open: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return ac_fail(err, AC_ERR_INPUT, "%s: is %s, not a regular file", path, ac_file_kind(st.st_mode));
    /* O_NONBLOCK: if it turned into a FIFO since, the open still returns */
    int f = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (f < 0)
        return ac_fail(err, AC_ERR_INPUT, "%s: cannot open: %s", path, strerror(errno));
    if (fstat(f, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(f);
        return ac_fail(err, AC_ERR_INPUT, "%s: is %s, not a regular file", path, ac_file_kind(st.st_mode));
    }
    int flags = fcntl(f, F_GETFL);
    if (flags >= 0)
        fcntl(f, F_SETFL, flags & ~O_NONBLOCK);
    *fd = f;
    *size = (long long)st.st_size;
    return AC_OK;
}

/* Up to max + 1 bytes of fd into a NUL-terminated buffer (a file under /proc
 * says size 0 and holds more: the size is a hint, the bound is max). */
static int read_bounded(int fd, const char *path, size_t max, size_t hint, char **out, size_t *len, ac_err *err)
{
    size_t cap = (hint < max ? hint : max) + 2, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        ssize_t got = read(fd, buf + n, cap - 1 - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            free(buf);
            return ac_fail(err, AC_ERR_INPUT, "%s: read error: %s", path, strerror(errno));
        }
        if (got == 0)
            break;
        n += (size_t)got;
        if (n > max) {
            free(buf);
            return ac_fail(err, AC_ERR_INPUT, "%s: larger than %zu bytes: not a file attncheck reads", path, max);
        }
        if (n == cap - 1) {
            char *bigger = realloc(buf, cap * 2);
            if (!bigger)
                free(buf);
            buf = bigger;
            cap *= 2;
        }
    }
    if (!buf)
        return ac_fail(err, AC_ERR_ENV, "%s: out of memory", path);
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return AC_OK;
}

int ac_read_file_max(const char *path, size_t max, char **out, size_t *len, ac_err *err)
{
    *out = NULL;
    *len = 0;
    struct stat st;
    if (stat(path, &st) != 0 && errno == ENOENT)
        return AC_OK;
    int fd;
    long long size;
    int status = ac_open_regular(path, &fd, &size, err);
    if (status != AC_OK)
        return status;
    status = read_bounded(fd, path, max, (size_t)size, out, len, err);
    close(fd);
    return status;
}

int ac_read_file(const char *path, char **out, size_t *len, ac_err *err)
{
    return ac_read_file_max(path, AC_TEXT_FILE_MAX, out, len, err);
}

/* ---- where a write lands ------------------------------------------------------- */

/* "DIR" and "BASE" of path ("." when it has no slash). */
static bool split_path(const char *path, char *dir, size_t len, const char **base)
{
    const char *slash = strrchr(path, '/');
    *base = slash ? slash + 1 : path;
    int n = slash ? (slash == path ? snprintf(dir, len, "/") : snprintf(dir, len, "%.*s", (int)(slash - path), path))
                  : snprintf(dir, len, ".");
    return n >= 0 && (size_t)n < len;
}

int ac_write_target(const char *path, char *out, size_t len, ac_err *err)
{
    char cur[AC_PATH_LEN], link[AC_PATH_LEN], dir[AC_PATH_LEN], next[AC_PATH_LEN];
    if (snprintf(cur, sizeof cur, "%s", path) >= (int)sizeof cur)
        return ac_fail(err, AC_ERR_INPUT, "%s: path too long", path);
    for (int hop = 0; hop < MAX_SYMLINK_HOPS; hop++) {
        struct stat st;
        if (lstat(cur, &st) != 0 || !S_ISLNK(st.st_mode)) {
            if (snprintf(out, len, "%s", cur) >= (int)len)
                return ac_fail(err, AC_ERR_INPUT, "%s: path too long", path);
            return AC_OK;
        }
        ssize_t n = readlink(cur, link, sizeof link - 1);
        if (n < 0)
            return ac_fail(err, AC_ERR_INPUT, "%s: cannot read the link: %s", cur, strerror(errno));
        link[n] = '\0';
        const char *base;
        int w = link[0] == '/' || !split_path(cur, dir, sizeof dir, &base)
            ? snprintf(next, sizeof next, "%s", link)
            : snprintf(next, sizeof next, "%s/%s", dir, link);
        if (w < 0 || (size_t)w >= sizeof next)
            return ac_fail(err, AC_ERR_INPUT, "%s: path too long", path);
        memcpy(cur, next, (size_t)w + 1);
    }
    return ac_fail(err, AC_ERR_INPUT, "%s: more than %d symbolic links (a loop?)", path, MAX_SYMLINK_HOPS);
}

/* A fresh file beside target, mode 0666 less the umask; *fd and its name in tmp. */
static int create_beside(const char *target, char *tmp, size_t len, int *fd, ac_err *err)
{
    char dir[AC_PATH_LEN];
    const char *base;
    if (!split_path(target, dir, sizeof dir, &base) || !*base)
        return ac_fail(err, AC_ERR_INPUT, "%s: not a file name", target);
    static unsigned counter;
    for (int attempt = 0; attempt < 100; attempt++) {
        unsigned salt = (unsigned)time(NULL) ^ (unsigned)clock() ^ (++counter * 2654435761u);
        if (snprintf(tmp, len, "%s/.attncheck-tmp-%ld-%08x", dir, (long)getpid(), salt) >= (int)len)
            return ac_fail(err, AC_ERR_INPUT, "%s: path too long", target);
        *fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0666);
        if (*fd >= 0)
            return AC_OK;
        if (errno != EEXIST)
            return ac_fail(err, AC_ERR_INPUT, "%s: cannot create a file in %s: %s", target, dir, strerror(errno));
    }
    return ac_fail(err, AC_ERR_INPUT, "%s: cannot create a temporary file in %s", target, dir);
}

/* The target's own state: absent (*exists false), or a regular file with st. */
static int target_state(const char *target, bool *exists, struct stat *st, ac_err *err)
{
    *exists = lstat(target, st) == 0;
    if (!*exists && errno != ENOENT)
        return ac_fail(err, AC_ERR_INPUT, "%s: %s", target, strerror(errno));
    if (*exists && !S_ISREG(st->st_mode))
        return ac_fail(err, AC_ERR_INPUT, "%s: is %s; attncheck writes only regular files", target,
                       ac_file_kind(st->st_mode));
    return AC_OK;
}

int ac_check_writable(const char *path, const char *what, ac_err *err)
{
    char target[AC_PATH_LEN], tmp[AC_PATH_LEN];
    struct stat st;
    bool exists;
    ac_err why = {{0}};
    int fd, status = ac_write_target(path, target, sizeof target, &why);
    if (status == AC_OK)
        status = target_state(target, &exists, &st, &why);
    if (status == AC_OK)
        status = create_beside(target, tmp, sizeof tmp, &fd, &why);
    if (status != AC_OK)
        return ac_fail(err, status, "%s %s", what, why.msg);
    close(fd);
    unlink(tmp);
    return AC_OK;
}

/* ---- writing ------------------------------------------------------------------------ */

static bool write_all(int fd, const char *data, size_t len)
{
    size_t done = 0;
    while (done < len) {
        ssize_t w = write(fd, data + done, len - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        done += (size_t)w;
    }
    return true;
}

/* The rename is durable once the folder's entry is. */
static void sync_dir_of(const char *target)
{
    char dir[AC_PATH_LEN];
    const char *base;
    if (!split_path(target, dir, sizeof dir, &base))
        return;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

int ac_write_atomic(const char *path, const char *data, size_t len, ac_err *err)
{
    char target[AC_PATH_LEN], tmp[AC_PATH_LEN];
    struct stat st;
    bool exists;
    int fd, status = ac_write_target(path, target, sizeof target, err);
    if (status == AC_OK)
        status = target_state(target, &exists, &st, err);
    if (status == AC_OK)
        status = create_beside(target, tmp, sizeof tmp, &fd, err);
    if (status != AC_OK)
        return status;
    bool ok = write_all(fd, data, len);
    int e = errno;
    if (ok && exists) { /* the file keeps its mode, and its owner where this process may set it */
        ok = fchmod(fd, st.st_mode & 07777) == 0;
        e = errno;
        if (ok && fchown(fd, st.st_uid, st.st_gid) != 0) {
            /* an unprivileged process cannot give a file away: it becomes the writer's */
        }
    }
    if (ok && !(ok = fsync(fd) == 0))
        e = errno;
    if (close(fd) != 0 && ok)
        ok = false, e = errno;
    if (ok && !(ok = rename(tmp, target) == 0))
        e = errno;
    if (!ok) {
        unlink(tmp);
        return ac_fail(err, AC_ERR_INPUT, "cannot write %s: %s", path, strerror(e));
    }
    sync_dir_of(target);
    return AC_OK;
}

int ac_write_doc(const char *path, void (*fill)(FILE *f, const void *ctx), const void *ctx, ac_err *err)
{
    char *doc = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&doc, &len);
    if (!f)
        return ac_fail(err, AC_ERR_ENV, "out of memory");
    fill(f, ctx);
    int st = fclose(f) == 0 ? ac_write_atomic(path, doc, len, err) : ac_fail(err, AC_ERR_ENV, "out of memory");
    free(doc);
    return st;
}

/* ---- removing a tree ------------------------------------------------------------------ */

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path) == 0 || errno == ENOENT ? 0 : -1;
}

int ac_remove_tree(const char *path)
{
    return nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS) == 0 || errno == ENOENT ? 0 : -1;
}
