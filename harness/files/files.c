/* harness/files/files.c — whole files, read at once or replaced atomically. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness/files/files.h"

int ac_read_file(const char *path, char **out, size_t *len, ac_err *err)
{
    *out = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT)
            return AC_OK;
        return ac_fail(err, AC_ERR_INPUT, "cannot read %s: %s", path, strerror(errno));
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            char *bigger = realloc(buf, cap * 2);
            if (!bigger) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = bigger;
            cap *= 2;
        }
    }
    bool bad = ferror(f) != 0;
    fclose(f);
    if (!buf || bad) {
        free(buf);
        return ac_fail(err, AC_ERR_ENV, "cannot read %s", path);
    }
    *out = buf;
    *len = n;
    return AC_OK;
}

int ac_write_atomic(const char *path, const char *data, size_t len, ac_err *err)
{
    char tmp[AC_PATH_LEN];
    const char *slash = strrchr(path, '/');
    int dir_len = slash ? (int)(slash - path) : 1;
    const char *dir = slash ? path : ".";
    if (snprintf(tmp, sizeof tmp, "%.*s/.tmp-XXXXXX", dir_len, dir) >= (int)sizeof tmp)
        return ac_fail(err, AC_ERR_INPUT, "path too long: %s", path);
    int fd = mkstemp(tmp);
    if (fd < 0)
        return ac_fail(err, AC_ERR_INPUT, "cannot create a file beside %s: %s", path, strerror(errno));
    size_t done = 0;
    while (done < len) {
        ssize_t w = write(fd, data + done, len - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        done += (size_t)w;
    }
    /* mkstemp makes 0600; a corpus or report is an ordinary file */
    bool ok = done == len && fchmod(fd, 0644) == 0 && fsync(fd) == 0;
    ok = close(fd) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return ac_fail(err, AC_ERR_ENV, "cannot write %s: %s", path, strerror(e));
    }
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
