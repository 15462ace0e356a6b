/* harness/files/tensor_io.c — tensors from and to NumPy .npy and .safetensors files.
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
#include <stdio.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "harness/files/files.h"
#include "harness/files/tensor_io.h"

#define MAX_DIM ((int64_t)1 << 40)

static const struct {
    const char *name, *npy, *st;
    size_t size;
} dtypes[AC_TF_COUNT] = {
    [AC_TF_F32] = {"f32", "<f4", "F32", 4},   [AC_TF_F16] = {"f16", "<f2", "F16", 2},
    [AC_TF_BF16] = {"bf16", NULL, "BF16", 2}, [AC_TF_F64] = {"f64", "<f8", "F64", 8},
    [AC_TF_U16] = {"u16", "<u2", "U16", 2},   [AC_TF_BOOL] = {"bool", "|b1", "BOOL", 1},
    [AC_TF_U8] = {"u8", "|u1", "U8", 1},      [AC_TF_I32] = {"i32", "<i4", "I32", 4},
    [AC_TF_I64] = {"i64", "<i8", "I64", 8},
};

const char *ac_tfile_dtype_name(ac_tfile_dtype t)
{
    return (unsigned)t < AC_TF_COUNT ? dtypes[t].name : "?";
}

size_t ac_tfile_dtype_size(ac_tfile_dtype t)
{
    return (unsigned)t < AC_TF_COUNT ? dtypes[t].size : 0;
}

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
static bool shape_bytes(ac_tensor *t, size_t *bytes)
{
    size_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        if (__builtin_mul_overflow(n, (size_t)t->shape[i], &n))
            return false;
    t->n_elems = n;
    return !__builtin_mul_overflow(n, dtypes[t->dtype].size, bytes);
}

static void label(ac_tensor *t, const char *path, const char *name)
{
    snprintf(t->file, sizeof t->file, "%s", path);
    snprintf(t->name, sizeof t->name, "%s", name);
}

/* What a reader reads from: a regular file, or a buffer (the fuzz targets').
 * Every read is checked against size, so no offset from a header reaches
 * past the end. */
typedef struct {
    FILE *f;
    const unsigned char *mem;
    long long size;
} source;

static int read_at(const source *src, long long off, void *buf, size_t n)
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
static int open_source(const char *path, source *src, ac_err *err)
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
static int load_data(const source *f, ac_tensor *t, long long off, long long avail, ac_err *err)
{
    char shp[256];
    ac_tensor_shape_str(t, shp, sizeof shp);
    size_t need = 0;
    if (!shape_bytes(t, &need))
        return ac_fail(err, AC_ERR_INPUT, "%s: tensor %s: shape %s overflows", t->file, t->name, shp);
    if ((unsigned long long)avail < need)
        return ac_fail(err, AC_ERR_INPUT, "%s: tensor %s truncated: holds %lld bytes of data, shape %s %s needs %zu",
                       t->file, t->name, avail, shp, ac_tfile_dtype_name(t->dtype), need);
    if ((unsigned long long)avail > need)
        return ac_fail(err, AC_ERR_INPUT,
                       "%s: tensor %s: holds %lld bytes of data, more than shape %s %s needs (%zu): "
                       "the header does not describe the data", t->file, t->name, avail, shp,
                       ac_tfile_dtype_name(t->dtype), need);
    t->data = malloc(need ? need : 1);
    if (!t->data)
        return ac_fail(err, AC_ERR_ENV, "%s: tensor %s: out of memory for %zu bytes", t->file, t->name, need);
    if (need && read_at(f, off, t->data, need) != 0)
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
        if (dtypes[i].npy && strcmp(d, dtypes[i].npy) == 0) {
            t->dtype = (ac_tfile_dtype)i;
            return AC_OK;
        }
    return ac_fail(err, AC_ERR_INPUT, "%s: dtype '%s' not supported (use <f4, <f2, <u2 for bf16 bits, <f8, "
                   "|b1, |u1, <i4, <i8)", path, d);
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
                       !seen[0] ? "descr" : !seen[1] ? "fortran_order" : "shape");
    if (fortran)
        return ac_fail(err, AC_ERR_INPUT, "%s: Fortran-order (column-major) array: save it C-contiguous "
                       "(numpy.ascontiguousarray, torch .contiguous())", path);
    return AC_OK;
}

/* Magic, version and header length: the data starts at *data_off. */
static int npy_preamble(const source *f, const char *path, long long size, size_t *hdr_len, long long *data_off,
                        ac_err *err)
{
    unsigned char pre[12];
    if (size < 10 || read_at(f, 0, pre, 10) != 0 || memcmp(pre, "\x93NUMPY", 6) != 0)
        return ac_fail(err, AC_ERR_INPUT, "%s: not a .npy file (no \\x93NUMPY magic)", path);
    int major = pre[6];
    if (major == 1) {
        *hdr_len = (size_t)pre[8] | (size_t)pre[9] << 8;
        *data_off = 10;
    } else if (major == 2 || major == 3) {
        if (size < 12 || read_at(f, 8, pre + 8, 4) != 0)
            return ac_fail(err, AC_ERR_INPUT, "%s: truncated .npy preamble", path);
        *hdr_len = (size_t)pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
        *data_off = 12;
    } else {
        return ac_fail(err, AC_ERR_INPUT, "%s: .npy format version %d.%d not supported (1.0, 2.0, 3.0)", path,
                       major, pre[7]);
    }
    if (*hdr_len > AC_NPY_MAX_HEADER)
        return ac_fail(err, AC_ERR_INPUT, "%s: header length %zu bytes is absurd (limit %zu): corrupt file",
                       path, *hdr_len, AC_NPY_MAX_HEADER);
    if ((long long)*hdr_len > size - *data_off)
        return ac_fail(err, AC_ERR_INPUT, "%s: header length %zu runs past the end of the file (%lld bytes)",
                       path, *hdr_len, size);
    *data_off += (long long)*hdr_len;
    return AC_OK;
}

static int npy_from(const source *f, const char *path, const char *name, ac_tensor *t, ac_err *err)
{
    memset(t, 0, sizeof *t);
    label(t, path, name);
    long long size = f->size, data_off = 0;
    size_t hdr_len = 0;
    int st = npy_preamble(f, path, size, &hdr_len, &data_off, err);
    char *hdr = st == AC_OK ? malloc(hdr_len + 1) : NULL;
    if (st == AC_OK && !hdr)
        st = ac_fail(err, AC_ERR_ENV, "%s: out of memory", path);
    if (st == AC_OK && read_at(f, data_off - (long long)hdr_len, hdr, hdr_len) != 0)
        st = ac_fail(err, AC_ERR_INPUT, "%s: cannot read the header", path);
    if (st == AC_OK)
        st = npy_dict(path, hdr, hdr_len, t, err);
    if (st == AC_OK)
        st = load_data(f, t, data_off, size - data_off, err);
    free(hdr);
    if (st != AC_OK)
        ac_tensor_free(t);
    return st;
}

int ac_npy_read(const char *path, const char *name, ac_tensor *t, ac_err *err)
{
    memset(t, 0, sizeof *t);
    source src;
    int st = open_source(path, &src, err);
    if (st != AC_OK)
        return st;
    st = npy_from(&src, path, name, t, err);
    fclose(src.f);
    return st;
}

int ac_npy_read_mem(const void *data, size_t len, const char *label_, const char *name, ac_tensor *t, ac_err *err)
{
    source src = {.mem = data, .size = (long long)len};
    return npy_from(&src, label_, name, t, err);
}

int ac_npy_write(const char *path, const ac_tensor *t, ac_err *err)
{
    if ((unsigned)t->dtype >= AC_TF_COUNT || !dtypes[t->dtype].npy)
        return ac_fail(err, AC_ERR_INPUT, "%s: dtype %s has no .npy form (bf16: write its bits as u16)", path,
                       ac_tfile_dtype_name(t->dtype));
    char shp[256], dict[400];
    ac_tensor_shape_str(t, shp, sizeof shp);
    int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                     dtypes[t->dtype].npy, shp);
    /* pad with spaces so the data starts on a 64-byte boundary, newline last */
    size_t hdr_len = ((size_t)n + 1 + 10 + 63) / 64 * 64 - 10;
    size_t bytes = t->n_elems * dtypes[t->dtype].size;
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

/* ======================= .safetensors ===================================== */

static int st_dtype(const char *path, const char *name, const cJSON *j, ac_tensor *t, ac_err *err)
{
    if (!cJSON_IsString(j))
        return ac_fail(err, AC_ERR_INPUT, "%s: tensor %s: no \"dtype\" string", path, name);
    for (int i = 0; i < AC_TF_COUNT; i++)
        if (!strcmp(j->valuestring, dtypes[i].st)) {
            t->dtype = (ac_tfile_dtype)i;
            return AC_OK;
        }
    return ac_fail(err, AC_ERR_INPUT, "%s: tensor %s: dtype %s not supported (F32, F16, BF16, F64, U16, BOOL, "
                   "U8, I32, I64)", path, name, j->valuestring);
}

static int st_shape(const char *path, const char *name, const cJSON *j, ac_tensor *t, ac_err *err)
{
    if (!cJSON_IsArray(j))
        return ac_fail(err, AC_ERR_INPUT, "%s: tensor %s: no \"shape\" array", path, name);
    if (cJSON_GetArraySize(j) > AC_TENSOR_MAX_DIMS)
        return ac_fail(err, AC_ERR_INPUT, "%s: tensor %s: more than %d dimensions", path, name,
                       AC_TENSOR_MAX_DIMS);
    const cJSON *e;
    cJSON_ArrayForEach(e, j) {
        double v = cJSON_IsNumber(e) ? e->valuedouble : -1;
        if (v < 0 || v > (double)MAX_DIM || v != (double)(int64_t)v)
            return ac_fail(err, AC_ERR_INPUT, "%s: tensor %s: bad shape entry", path, name);
        t->shape[t->ndim++] = (int64_t)v;
    }
    return AC_OK;
}

/* data_offsets [begin, end] within a buffer of buf_len bytes, end - begin = shape bytes. */
static int st_offsets(const char *path, const char *name, const cJSON *j, long long buf_len, ac_tensor *t,
                      long long range[2], ac_err *err)
{
    if (!cJSON_IsArray(j) || cJSON_GetArraySize(j) != 2 || !cJSON_IsNumber(cJSON_GetArrayItem(j, 0)) ||
        !cJSON_IsNumber(cJSON_GetArrayItem(j, 1)))
        return ac_fail(err, AC_ERR_INPUT, "%s: tensor %s: \"data_offsets\" is not [begin, end]", path, name);
    double b = cJSON_GetArrayItem(j, 0)->valuedouble, e = cJSON_GetArrayItem(j, 1)->valuedouble;
    if (b != floor(b) || e != floor(e))
        return ac_fail(err, AC_ERR_INPUT, "%s: tensor %s: data_offsets [%g, %g] are not integers", path, name, b, e);
    if (b < 0 || e < b || e > (double)buf_len)
        return ac_fail(err, AC_ERR_INPUT, "%s: tensor %s: data_offsets [%.0f, %.0f] out of range (data "
                       "buffer holds %lld bytes)", path, name, b, e, buf_len);
    range[0] = (long long)b, range[1] = (long long)e;
    size_t need = 0;
    char shp[256];
    ac_tensor_shape_str(t, shp, sizeof shp);
    if (!shape_bytes(t, &need) || (unsigned long long)(range[1] - range[0]) != need)
        return ac_fail(err, AC_ERR_INPUT, "%s: tensor %s: data_offsets span %lld bytes, shape %s %s needs %zu",
                       path, name, range[1] - range[0], shp, ac_tfile_dtype_name(t->dtype), need);
    return AC_OK;
}

/* The JSON must fill the header: only the format's padding (blanks) may follow it. */
static cJSON *parse_header_json(const char *json, size_t n)
{
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, n, &end, false);
    if (!root)
        return NULL;
    for (; end && end < json + n; end++)
        if (*end != ' ' && *end != '\t' && *end != '\n' && *end != '\r') {
            cJSON_Delete(root);
            return NULL;
        }
    return root;
}

static int st_header(const source *f, const char *path, long long size, cJSON **root, long long *buf_off,
                     ac_err *err)
{
    unsigned char n8[8];
    if (size < 8 || read_at(f, 0, n8, 8) != 0)
        return ac_fail(err, AC_ERR_INPUT, "%s: not a .safetensors file (shorter than 8 bytes)", path);
    unsigned long long n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | n8[i];
    if (n > AC_SAFETENSORS_MAX_HEADER)
        return ac_fail(err, AC_ERR_INPUT, "%s: header length %llu bytes is absurd (limit %zu): corrupt file",
                       path, n, AC_SAFETENSORS_MAX_HEADER);
    if ((long long)n > size - 8)
        return ac_fail(err, AC_ERR_INPUT, "%s: header length %llu runs past the end of the file (%lld bytes)",
                       path, n, size);
    char *json = malloc(n + 1);
    if (!json)
        return ac_fail(err, AC_ERR_ENV, "%s: out of memory", path);
    int st = read_at(f, 8, json, n) == 0 ? AC_OK : ac_fail(err, AC_ERR_INPUT, "%s: cannot read header", path);
    if (st == AC_OK) {
        *root = parse_header_json(json, n);
        if (!*root || !cJSON_IsObject(*root))
            st = ac_fail(err, AC_ERR_INPUT, "%s: header is not a JSON object (one object, padded with blanks)", path);
    }
    free(json);
    *buf_off = 8 + (long long)n;
    return st;
}

static int st_tensor(const source *f, const char *path, const cJSON *e, long long buf_off, long long buf_len,
                     ac_tensor *t, long long range[2], ac_err *err)
{
    memset(t, 0, sizeof *t);
    label(t, path, e->string);
    if (strlen(e->string) >= sizeof t->name)
        return ac_fail(err, AC_ERR_INPUT, "%s: tensor name '%s' longer than %zu bytes", path, t->name,
                       sizeof t->name - 1);
    if (!cJSON_IsObject(e))
        return ac_fail(err, AC_ERR_INPUT, "%s: tensor %s: entry is not an object", path, e->string);
    int st = st_dtype(path, e->string, cJSON_GetObjectItemCaseSensitive(e, "dtype"), t, err);
    if (st == AC_OK)
        st = st_shape(path, e->string, cJSON_GetObjectItemCaseSensitive(e, "shape"), t, err);
    if (st == AC_OK)
        st = st_offsets(path, e->string, cJSON_GetObjectItemCaseSensitive(e, "data_offsets"), buf_len, t,
                        range, err);
    if (st == AC_OK)
        st = load_data(f, t, buf_off + range[0], range[1] - range[0], err);
    return st;
}

typedef struct {
    long long b, e;
    const char *name;
} span;

static int span_cmp(const void *a, const void *b)
{
    const span *x = a, *y = b;
    return x->b < y->b ? -1 : x->b > y->b;
}

/* The tensors tile the data buffer exactly, as the format requires: no
 * overlap, no hole, nothing after the last one (trailing bytes would be data
 * no header describes). */
static int check_spans(const char *path, span *s, size_t n, long long buf_len, ac_err *err)
{
    qsort(s, n, sizeof *s, span_cmp);
    long long at = 0;
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && s[i].b < s[i - 1].e)
            return ac_fail(err, AC_ERR_INPUT, "%s: tensors %s [%lld, %lld) and %s [%lld, %lld) overlap", path,
                           s[i - 1].name, s[i - 1].b, s[i - 1].e, s[i].name, s[i].b, s[i].e);
        if (s[i].b > at)
            return ac_fail(err, AC_ERR_INPUT, "%s: bytes [%lld, %lld) of the data buffer belong to no tensor", path,
                           at, s[i].b);
        at = s[i].e;
    }
    if (at < buf_len)
        return ac_fail(err, AC_ERR_INPUT, "%s: %lld trailing bytes after the last tensor (the data buffer holds "
                       "%lld, the tensors %lld)", path, buf_len - at, buf_len, at);
    return AC_OK;
}

static int st_all(const source *f, const char *path, const cJSON *root, long long buf_off, long long size,
                  ac_tensor_set *set, ac_err *err)
{
    size_t cap = (size_t)cJSON_GetArraySize(root);
    set->t = calloc(cap ? cap : 1, sizeof *set->t);
    span *spans = calloc(cap ? cap : 1, sizeof *spans);
    int st = set->t && spans ? AC_OK : ac_fail(err, AC_ERR_ENV, "%s: out of memory", path);
    const cJSON *e;
    cJSON_ArrayForEach(e, root) {
        if (st != AC_OK)
            break;
        if (!strcmp(e->string, "__metadata__"))
            continue;
        long long range[2] = {0, 0};
        if (ac_tensor_set_find(set, e->string)) {
            st = ac_fail(err, AC_ERR_INPUT, "%s: tensor %s appears twice in the header", path, e->string);
            break;
        }
        st = st_tensor(f, path, e, buf_off, size - buf_off, &set->t[set->n], range, err);
        spans[set->n] = (span){range[0], range[1], set->t[set->n].name};
        set->n++;
    }
    if (st == AC_OK)
        st = check_spans(path, spans, set->n, size - buf_off, err);
    free(spans);
    return st;
}

static int safetensors_from(const source *f, const char *path, ac_tensor_set *set, ac_err *err)
{
    memset(set, 0, sizeof *set);
    long long buf_off = 0;
    cJSON *root = NULL;
    int st = st_header(f, path, f->size, &root, &buf_off, err);
    if (st == AC_OK)
        st = st_all(f, path, root, buf_off, f->size, set, err);
    cJSON_Delete(root);
    if (st != AC_OK)
        ac_tensor_set_free(set);
    return st;
}

int ac_safetensors_read(const char *path, ac_tensor_set *set, ac_err *err)
{
    memset(set, 0, sizeof *set);
    source src;
    int st = open_source(path, &src, err);
    if (st != AC_OK)
        return st;
    st = safetensors_from(&src, path, set, err);
    fclose(src.f);
    return st;
}

int ac_safetensors_read_mem(const void *data, size_t len, const char *label_, ac_tensor_set *set, ac_err *err)
{
    source src = {.mem = data, .size = (long long)len};
    return safetensors_from(&src, label_, set, err);
}

const ac_tensor *ac_tensor_set_find(const ac_tensor_set *set, const char *name)
{
    for (size_t i = 0; i < set->n; i++)
        if (!strcmp(set->t[i].name, name))
            return &set->t[i];
    return NULL;
}

void ac_tensor_set_free(ac_tensor_set *set)
{
    for (size_t i = 0; set->t && i < set->n; i++)
        ac_tensor_free(&set->t[i]);
    free(set->t);
    memset(set, 0, sizeof *set);
}

static char *st_header_json(const ac_tensor *const *ts, size_t n, size_t *len)
{
    cJSON *root = cJSON_CreateObject();
    size_t off = 0;
    for (size_t i = 0; root && i < n; i++) {
        const ac_tensor *t = ts[i];
        size_t bytes = t->n_elems * dtypes[t->dtype].size;
        cJSON *e = cJSON_AddObjectToObject(root, t->name);
        cJSON *shape = e ? cJSON_AddArrayToObject(e, "shape") : NULL;
        cJSON *offs = e ? cJSON_AddArrayToObject(e, "data_offsets") : NULL;
        if (!shape || !offs || !cJSON_AddStringToObject(e, "dtype", dtypes[t->dtype].st))
            break;
        for (int d = 0; d < t->ndim; d++)
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[d]));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(off + bytes)));
        off += bytes;
    }
    char *json = root ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    *len = json ? strlen(json) : 0;
    return json;
}

int ac_safetensors_write(const char *path, const ac_tensor *const *ts, size_t n, ac_err *err)
{
    size_t json_len, bytes = 0;
    char *json = st_header_json(ts, n, &json_len);
    if (!json)
        return ac_fail(err, AC_ERR_ENV, "%s: out of memory", path);
    size_t hdr_len = (json_len + 7) / 8 * 8; /* the format pads with spaces to 8 bytes */
    for (size_t i = 0; i < n; i++)
        bytes += ts[i]->n_elems * dtypes[ts[i]->dtype].size;
    char *buf = malloc(8 + hdr_len + bytes);
    if (!buf) {
        free(json);
        return ac_fail(err, AC_ERR_ENV, "%s: out of memory", path);
    }
    for (int i = 0; i < 8; i++)
        buf[i] = (char)(((unsigned long long)hdr_len >> (8 * i)) & 0xff);
    memset(buf + 8, ' ', hdr_len);
    memcpy(buf + 8, json, json_len);
    free(json);
    size_t off = 8 + hdr_len;
    for (size_t i = 0; i < n; i++) {
        size_t b = ts[i]->n_elems * dtypes[ts[i]->dtype].size;
        if (b)
            memcpy(buf + off, ts[i]->data, b);
        off += b;
    }
    int st = ac_write_atomic(path, buf, off, err);
    free(buf);
    return st;
}
