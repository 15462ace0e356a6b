/* harness/files/tensor_io.c — tensors from and to NumPy .npy files, and what
 * both readers share: the dtype table, bounded reads from a regular file or a
 * buffer, the data region checked against the shape (safetensors.c: the
 * .safetensors format).
 *
 * These files come from users (a PyTorch dump, a vendor's test vectors), so
 * every field is distrusted: header lengths are bounded before anything is
 * allocated, shapes are multiplied with overflow checks, and the data size is
 * compared with the file size both ways (short = truncated, long = the header
 * lies about the shape).  Allocation is bounded by the file's own size.
 *
 * .npy:  "\x93NUMPY" major minor, header length (u16 LE in 1.0, u32 LE in 2.0
 *        and 3.0), then a Python dict literal {'descr': '<f4', 'fortran_order':
 *        False, 'shape': (2, 3), } padded with spaces and a newline.
 * .safetensors: u64 LE header length N, N bytes of JSON {name: {"dtype": "F32",
 *        "shape": [2, 3], "data_offsets": [begin, end]}, "__metadata__": {...}},
 *        then the byte buffer the offsets index.
 * Hosts are little-endian (x86-64, AArch64), as both formats store here. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness/files/files.h"
#include "harness/files/tensor_io.h"
#include "harness/files/tensor_io_internal.h"

const tio_dtype tio_dtypes[AC_TF_COUNT] = {
    [AC_TF_F32] = {"f32", "<f4", "F32", 4},
    [AC_TF_F16] = {"f16", "<f2", "F16", 2},
    [AC_TF_BF16] = {"bf16", NULL, "BF16", 2},
    [AC_TF_F64] = {"f64", "<f8", "F64", 8},
    [AC_TF_U16] = {"u16", "<u2", "U16", 2},
    [AC_TF_BOOL] = {"bool", "|b1", "BOOL", 1},
    [AC_TF_U8] = {"u8", "|u1", "U8", 1},
    [AC_TF_I32] = {"i32", "<i4", "I32", 4},
    [AC_TF_I64] = {"i64", "<i8", "I64", 8},
    [AC_TF_F8_E4M3] = {"e4m3", NULL, "F8_E4M3", 1},
    [AC_TF_F8_E5M2] = {"e5m2", NULL, "F8_E5M2", 1},
};

const char *ac_tfile_dtype_name(ac_tfile_dtype t) { return (unsigned)t < AC_TF_COUNT ? tio_dtypes[t].name : "?"; }

size_t ac_tfile_dtype_size(ac_tfile_dtype t) { return (unsigned)t < AC_TF_COUNT ? tio_dtypes[t].size : 0; }

void ac_tensor_free(ac_tensor *t)
{
    if (!t)
        return;
    free(t->data);
    memset(t, 0, sizeof *t);
}

void ac_tensor_shape_str(const ac_tensor *t, char *buf, size_t len)
{
    size_t n = (size_t)snprintf(buf, len, "(");
    for (int i = 0; i < t->ndim && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (n < len)
        snprintf(buf + n, len - n, t->ndim == 1 ? ",)" : ")");
}

/* n_elems from the shape, and the byte count; false on overflow. */
bool tio_shape_bytes(ac_tensor *t, size_t *bytes)
{
    size_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        if (__builtin_mul_overflow(n, (size_t)t->shape[i], &n))
            return false;
    t->n_elems = n;
    return !__builtin_mul_overflow(n, tio_dtypes[t->dtype].size, bytes);
}

void tio_label(ac_tensor *t, const char *path, const char *name)
{
    snprintf(t->file, sizeof t->file, "%s", path);
    snprintf(t->name, sizeof t->name, "%s", name);
}

int tio_read_at(const tio_source *src, long long off, void *buf, size_t n)
{
    if (off < 0 || off > src->size || n > (unsigned long long)(src->size - off))
        return -1;
    if (src->mem) {
        if (n)
            memcpy(buf, src->mem + off, n);
        return 0;
    }
    if (fseeko(src->f, (off_t)off, SEEK_SET) != 0)
        return -1;
    return fread(buf, 1, n, src->f) == n ? 0 : -1;
}

/* A regular file only: a FIFO, a device or a directory is refused (files.h). */
int tio_open(const char *path, tio_source *src, ac_err *err)
{
    memset(src, 0, sizeof *src);
    int fd;
    int st = ac_open_regular(path, &fd, &src->size, err);
    if (st != AC_OK)
        return st;
    if (!(src->f = fdopen(fd, "rb"))) {
        close(fd);
        return ac_fail(err, AC_ERR_ENV, "%s: cannot open: %s", path, strerror(errno));
    }
    return AC_OK;
}

/* The data region [off, off + avail) must hold exactly what the shape says. */
int tio_load_data(const tio_source *f, ac_tensor *t, long long off, long long avail, ac_err *err)
{
    char shp[256];
    ac_tensor_shape_str(t, shp, sizeof shp);
    size_t need = 0;
    if (!tio_shape_bytes(t, &need))
        return ac_fail(err, AC_ERR_INPUT, "%s: tensor %s: shape %s overflows", t->file, t->name, shp);
    if ((unsigned long long)avail < need)
        return ac_fail(err, AC_ERR_INPUT, "%s: tensor %s truncated: holds %lld bytes of data, shape %s %s needs %zu",
                       t->file, t->name, avail, shp, ac_tfile_dtype_name(t->dtype), need);
    if ((unsigned long long)avail > need)
        return ac_fail(err, AC_ERR_INPUT,
                       "%s: tensor %s: holds %lld bytes of data, more than shape %s %s needs (%zu): "
                       "the header does not describe the data",
                       t->file, t->name, avail, shp, ac_tfile_dtype_name(t->dtype), need);
    t->data = malloc(need ? need : 1);
    if (!t->data)
        return ac_fail(err, AC_ERR_ENV, "%s: tensor %s: out of memory for %zu bytes", t->file, t->name, need);
    if (need && tio_read_at(f, off, t->data, need) != 0)
        return ac_fail(err, AC_ERR_INPUT, "%s: tensor %s: read error", t->file, t->name);
    return AC_OK;
}

/* ======================= .npy ============================================= */

typedef struct {
    const char *s, *end;
} cursor;

static void skip_ws(cursor *c)
{
    while (c->s < c->end && isspace((unsigned char)*c->s))
        c->s++;
}

static bool take(cursor *c, char ch)
{
    skip_ws(c);
    if (c->s < c->end && *c->s == ch) {
        c->s++;
        return true;
    }
    return false;
}

/* A Python string literal in ' or " quotes (no escapes occur in these headers). */
static bool quoted(cursor *c, char *out, size_t len)
{
    skip_ws(c);
    if (c->s >= c->end || (*c->s != '\'' && *c->s != '"'))
        return false;
    char q = *c->s++;
    size_t n = 0;
    while (c->s < c->end && *c->s != q) {
        if (n + 1 >= len)
            return false;
        out[n++] = *c->s++;
    }
    out[n] = 0;
    return c->s < c->end && *c->s++ == q;
}

static int npy_descr(const char *path, ac_tensor *t, cursor *c, ac_err *err)
{
    char d[32];
    skip_ws(c);
    if (c->s < c->end && *c->s == '[')
        return ac_fail(err, AC_ERR_INPUT, "%s: structured dtype (record array) not supported", path);
    if (!quoted(c, d, sizeof d))
        return ac_fail(err, AC_ERR_INPUT, "%s: header: 'descr' is not a string", path);
    if (d[0] == '>')
        return ac_fail(err, AC_ERR_INPUT, "%s: big-endian dtype '%s' not supported (save with '<')", path, d);
    if (strchr(d, 'O'))
        return ac_fail(err, AC_ERR_INPUT, "%s: object dtype '%s' not supported (needs pickle)", path, d);
    for (int i = 0; i < AC_TF_COUNT; i++)
        if (tio_dtypes[i].npy && strcmp(d, tio_dtypes[i].npy) == 0) {
            t->dtype = (ac_tfile_dtype)i;
            return AC_OK;
        }
    return ac_fail(err, AC_ERR_INPUT,
                   "%s: dtype '%s' not supported (use <f4, <f2, <u2 for bf16 bits, <f8, "
                   "|b1, |u1, <i4, <i8)",
                   path, d);
}

/* One dimension: decimal digits within the header (it is not NUL-terminated,
 * so no strtoll), at most MAX_DIM. */
static int shape_entry(const char *path, cursor *c, long long *v, ac_err *err)
{
    skip_ws(c);
    *v = 0;
    const char *start = c->s;
    for (; c->s < c->end && *c->s >= '0' && *c->s <= '9'; c->s++) {
        *v = *v * 10 + (*c->s - '0');
        if (*v > MAX_DIM)
            return ac_fail(err, AC_ERR_INPUT, "%s: header: shape entry beyond %lld", path, (long long)MAX_DIM);
    }
    if (c->s == start && c->s < c->end && *c->s == '-')
        return ac_fail(err, AC_ERR_INPUT, "%s: header: negative shape entry", path);
    if (c->s == start)
        return ac_fail(err, AC_ERR_INPUT, "%s: header: bad shape entry", path);
    if (c->s < c->end && (*c->s == 'L' || *c->s == 'l')) /* Python 2's long suffix, as NumPy wrote it */
        c->s++;
    return AC_OK;
}

static int npy_shape(const char *path, ac_tensor *t, cursor *c, ac_err *err)
{
    if (!take(c, '('))
        return ac_fail(err, AC_ERR_INPUT, "%s: header: 'shape' is not a tuple", path);
    t->ndim = 0;
    while (!take(c, ')')) {
        long long v;
        int st = shape_entry(path, c, &v, err);
        if (st != AC_OK)
            return st;
        if (t->ndim == AC_TENSOR_MAX_DIMS)
            return ac_fail(err, AC_ERR_INPUT, "%s: more than %d dimensions", path, AC_TENSOR_MAX_DIMS);
        t->shape[t->ndim++] = v;
        if (!take(c, ',')) {
            if (!take(c, ')'))
                return ac_fail(err, AC_ERR_INPUT, "%s: header: shape tuple not closed", path);
            break;
        }
    }
    return AC_OK;
}

static int npy_bool(const char *path, cursor *c, bool *out, ac_err *err)
{
    skip_ws(c);
    size_t left = (size_t)(c->end - c->s);
    if (left >= 4 && !strncmp(c->s, "True", 4))
        *out = true, c->s += 4;
    else if (left >= 5 && !strncmp(c->s, "False", 5))
        *out = false, c->s += 5;
    else
        return ac_fail(err, AC_ERR_INPUT, "%s: header: 'fortran_order' is not True/False", path);
    return AC_OK;
}

static int npy_dict(const char *path, const char *hdr, size_t len, ac_tensor *t, ac_err *err)
{
    cursor c = {hdr, hdr + len};
    bool fortran = false, seen[3] = {false, false, false};
    if (!take(&c, '{'))
        return ac_fail(err, AC_ERR_INPUT, "%s: header is not a dict", path);
    while (!take(&c, '}')) {
        char key[32];
        if (!quoted(&c, key, sizeof key) || !take(&c, ':'))
            return ac_fail(err, AC_ERR_INPUT, "%s: header: malformed dict", path);
        int st;
        if (!strcmp(key, "descr"))
            st = npy_descr(path, t, &c, err), seen[0] = true;
        else if (!strcmp(key, "fortran_order"))
            st = npy_bool(path, &c, &fortran, err), seen[1] = true;
        else if (!strcmp(key, "shape"))
            st = npy_shape(path, t, &c, err), seen[2] = true;
        else
            st = ac_fail(err, AC_ERR_INPUT, "%s: header: unknown key '%s'", path, key);
        if (st != AC_OK)
            return st;
        if (!take(&c, ',')) {
            if (!take(&c, '}'))
                return ac_fail(err, AC_ERR_INPUT, "%s: header: malformed dict", path);
            break;
        }
    }
    if (!seen[0] || !seen[1] || !seen[2])
        return ac_fail(err, AC_ERR_INPUT, "%s: header lacks '%s'", path,
                       !seen[0]       ? "descr"
                           : !seen[1] ? "fortran_order"
                                      : "shape");
    if (fortran)
        return ac_fail(err, AC_ERR_INPUT,
                       "%s: Fortran-order (column-major) array: save it C-contiguous "
                       "(numpy.ascontiguousarray, torch .contiguous())",
                       path);
    return AC_OK;
}

/* Magic, version and header length: the data starts at *data_off. */
static int npy_preamble(const tio_source *f, const char *path, long long size, size_t *hdr_len, long long *data_off,
                        ac_err *err)
{
    unsigned char pre[12];
    if (size < 10 || tio_read_at(f, 0, pre, 10) != 0 || memcmp(pre, "\x93NUMPY", 6) != 0)
        return ac_fail(err, AC_ERR_INPUT, "%s: not a .npy file (no \\x93NUMPY magic)", path);
    int major = pre[6];
    if (major == 1) {
        *hdr_len = (size_t)pre[8] | (size_t)pre[9] << 8;
        *data_off = 10;
    } else if (major == 2 || major == 3) {
        if (size < 12 || tio_read_at(f, 8, pre + 8, 4) != 0)
            return ac_fail(err, AC_ERR_INPUT, "%s: truncated .npy preamble", path);
        *hdr_len = (size_t)pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
        *data_off = 12;
    } else {
        return ac_fail(err, AC_ERR_INPUT, "%s: .npy format version %d.%d not supported (1.0, 2.0, 3.0)", path, major,
                       pre[7]);
    }
    if (*hdr_len > AC_NPY_MAX_HEADER)
        return ac_fail(err, AC_ERR_INPUT, "%s: header length %zu bytes is absurd (limit %zu): corrupt file", path,
                       *hdr_len, AC_NPY_MAX_HEADER);
    if ((long long)*hdr_len > size - *data_off)
        return ac_fail(err, AC_ERR_INPUT, "%s: header length %zu runs past the end of the file (%lld bytes)", path,
                       *hdr_len, size);
    *data_off += (long long)*hdr_len;
    return AC_OK;
}

static int npy_from(const tio_source *f, const char *path, const char *name, ac_tensor *t, ac_err *err)
{
    memset(t, 0, sizeof *t);
    tio_label(t, path, name);
    long long size = f->size, data_off = 0;
    size_t hdr_len = 0;
    int st = npy_preamble(f, path, size, &hdr_len, &data_off, err);
    char *hdr = st == AC_OK ? malloc(hdr_len + 1) : NULL;
    if (st == AC_OK && !hdr)
        st = ac_fail(err, AC_ERR_ENV, "%s: out of memory", path);
    if (st == AC_OK && tio_read_at(f, data_off - (long long)hdr_len, hdr, hdr_len) != 0)
        st = ac_fail(err, AC_ERR_INPUT, "%s: cannot read the header", path);
    if (st == AC_OK)
        st = npy_dict(path, hdr, hdr_len, t, err);
    if (st == AC_OK)
        st = tio_load_data(f, t, data_off, size - data_off, err);
    free(hdr);
    if (st != AC_OK)
        ac_tensor_free(t);
    return st;
}

int ac_npy_read(const char *path, const char *name, ac_tensor *t, ac_err *err)
{
    memset(t, 0, sizeof *t);
    tio_source src;
    int st = tio_open(path, &src, err);
    if (st != AC_OK)
        return st;
    st = npy_from(&src, path, name, t, err);
    fclose(src.f);
    return st;
}

int ac_npy_read_mem(const void *data, size_t len, const char *label_, const char *name, ac_tensor *t, ac_err *err)
{
    tio_source src = {.mem = data, .size = (long long)len};
    return npy_from(&src, label_, name, t, err);
}

int ac_npy_write(const char *path, const ac_tensor *t, ac_err *err)
{
    if ((unsigned)t->dtype >= AC_TF_COUNT || !tio_dtypes[t->dtype].npy)
        return ac_fail(err, AC_ERR_INPUT, "%s: dtype %s has no .npy form (bf16: write its bits as u16)", path,
                       ac_tfile_dtype_name(t->dtype));
    char shp[256], dict[400];
    ac_tensor_shape_str(t, shp, sizeof shp);
    int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                     tio_dtypes[t->dtype].npy, shp);
    /* pad with spaces so the data starts on a 64-byte boundary, newline last */
    size_t hdr_len = ((size_t)n + 1 + 10 + 63) / 64 * 64 - 10;
    size_t bytes = t->n_elems * tio_dtypes[t->dtype].size;
    char *buf = malloc(10 + hdr_len + bytes);
    if (!buf)
        return ac_fail(err, AC_ERR_ENV, "%s: out of memory", path);
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (char)(hdr_len & 0xff), buf[9] = (char)(hdr_len >> 8);
    memset(buf + 10, ' ', hdr_len);
    memcpy(buf + 10, dict, (size_t)n);
    buf[10 + hdr_len - 1] = '\n';
    if (bytes)
        memcpy(buf + 10 + hdr_len, t->data, bytes);
    int st = ac_write_atomic(path, buf, 10 + hdr_len + bytes, err);
    free(buf);
    return st;
}
