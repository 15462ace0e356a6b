/* harness/files/safetensors.c — tensors from and to .safetensors files: u64 LE
 * header length N, N bytes of JSON {name: {"dtype": "F32", "shape": [2, 3],
 * "data_offsets": [begin, end]}, "__metadata__": {...}} padded with blanks,
 * then the byte buffer the offsets index, which the tensors must tile exactly.
 * Shared parts (the dtype table, bounded reads from a file or a buffer) are in
 * tensor_io.c; tensor_io.h says what every reader refuses. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "harness/files/files.h"
#include "harness/files/tensor_io.h"
#include "harness/files/tensor_io_internal.h"

static int st_dtype(const char *path, const char *name, const cJSON *j, ac_tensor *t, ac_err *err)
{
    if (!cJSON_IsString(j))
        return ac_fail(err, AC_ERR_INPUT, "%s: tensor %s: no \"dtype\" string", path, name);
    for (int i = 0; i < AC_TF_COUNT; i++)
        if (!strcmp(j->valuestring, tio_dtypes[i].st)) {
            t->dtype = (ac_tfile_dtype)i;
            return AC_OK;
        }
    return ac_fail(err, AC_ERR_INPUT,
                   "%s: tensor %s: dtype %s not supported (F32, F16, BF16, F64, U16, BOOL, "
                   "U8, I32, I64)",
                   path, name, j->valuestring);
}

static int st_shape(const char *path, const char *name, const cJSON *j, ac_tensor *t, ac_err *err)
{
    if (!cJSON_IsArray(j))
        return ac_fail(err, AC_ERR_INPUT, "%s: tensor %s: no \"shape\" array", path, name);
    if (cJSON_GetArraySize(j) > AC_TENSOR_MAX_DIMS)
        return ac_fail(err, AC_ERR_INPUT, "%s: tensor %s: more than %d dimensions", path, name, AC_TENSOR_MAX_DIMS);
    const cJSON *e;
    cJSON_ArrayForEach(e, j)
    {
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
        return ac_fail(err, AC_ERR_INPUT,
                       "%s: tensor %s: data_offsets [%.0f, %.0f] out of range (data "
                       "buffer holds %lld bytes)",
                       path, name, b, e, buf_len);
    range[0] = (long long)b, range[1] = (long long)e;
    size_t need = 0;
    char shp[256];
    ac_tensor_shape_str(t, shp, sizeof shp);
    if (!tio_shape_bytes(t, &need) || (unsigned long long)(range[1] - range[0]) != need)
        return ac_fail(err, AC_ERR_INPUT, "%s: tensor %s: data_offsets span %lld bytes, shape %s %s needs %zu", path,
                       name, range[1] - range[0], shp, ac_tfile_dtype_name(t->dtype), need);
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

static int st_header(const tio_source *f, const char *path, long long size, cJSON **root, long long *buf_off,
                     ac_err *err)
{
    unsigned char n8[8];
    if (size < 8 || tio_read_at(f, 0, n8, 8) != 0)
        return ac_fail(err, AC_ERR_INPUT, "%s: not a .safetensors file (shorter than 8 bytes)", path);
    unsigned long long n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | n8[i];
    if (n > AC_SAFETENSORS_MAX_HEADER)
        return ac_fail(err, AC_ERR_INPUT, "%s: header length %llu bytes is absurd (limit %zu): corrupt file", path, n,
                       AC_SAFETENSORS_MAX_HEADER);
    if ((long long)n > size - 8)
        return ac_fail(err, AC_ERR_INPUT, "%s: header length %llu runs past the end of the file (%lld bytes)", path, n,
                       size);
    char *json = malloc(n + 1);
    if (!json)
        return ac_fail(err, AC_ERR_ENV, "%s: out of memory", path);
    int st = tio_read_at(f, 8, json, n) == 0 ? AC_OK : ac_fail(err, AC_ERR_INPUT, "%s: cannot read header", path);
    if (st == AC_OK) {
        *root = parse_header_json(json, n);
        if (!*root || !cJSON_IsObject(*root))
            st = ac_fail(err, AC_ERR_INPUT, "%s: header is not a JSON object (one object, padded with blanks)", path);
    }
    free(json);
    *buf_off = 8 + (long long)n;
    return st;
}

static int st_tensor(const tio_source *f, const char *path, const cJSON *e, long long buf_off, long long buf_len,
                     ac_tensor *t, long long range[2], ac_err *err)
{
    memset(t, 0, sizeof *t);
    tio_label(t, path, e->string);
    if (strlen(e->string) >= sizeof t->name)
        return ac_fail(err, AC_ERR_INPUT, "%s: tensor name '%s' longer than %zu bytes", path, t->name,
                       sizeof t->name - 1);
    if (!cJSON_IsObject(e))
        return ac_fail(err, AC_ERR_INPUT, "%s: tensor %s: entry is not an object", path, e->string);
    int st = st_dtype(path, e->string, cJSON_GetObjectItemCaseSensitive(e, "dtype"), t, err);
    if (st == AC_OK)
        st = st_shape(path, e->string, cJSON_GetObjectItemCaseSensitive(e, "shape"), t, err);
    if (st == AC_OK)
        st = st_offsets(path, e->string, cJSON_GetObjectItemCaseSensitive(e, "data_offsets"), buf_len, t, range, err);
    if (st == AC_OK)
        st = tio_load_data(f, t, buf_off + range[0], range[1] - range[0], err);
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
            return ac_fail(err, AC_ERR_INPUT, "%s: bytes [%lld, %lld) of the data buffer belong to no tensor", path, at,
                           s[i].b);
        at = s[i].e;
    }
    if (at < buf_len)
        return ac_fail(err, AC_ERR_INPUT,
                       "%s: %lld trailing bytes after the last tensor (the data buffer holds "
                       "%lld, the tensors %lld)",
                       path, buf_len - at, buf_len, at);
    return AC_OK;
}

static int st_all(const tio_source *f, const char *path, const cJSON *root, long long buf_off, long long size,
                  ac_tensor_set *set, ac_err *err)
{
    size_t cap = (size_t)cJSON_GetArraySize(root);
    set->t = calloc(cap ? cap : 1, sizeof *set->t);
    span *spans = calloc(cap ? cap : 1, sizeof *spans);
    int st = set->t && spans ? AC_OK : ac_fail(err, AC_ERR_ENV, "%s: out of memory", path);
    const cJSON *e;
    cJSON_ArrayForEach(e, root)
    {
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

static int safetensors_from(const tio_source *f, const char *path, ac_tensor_set *set, ac_err *err)
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
    tio_source src;
    int st = tio_open(path, &src, err);
    if (st != AC_OK)
        return st;
    st = safetensors_from(&src, path, set, err);
    fclose(src.f);
    return st;
}

int ac_safetensors_read_mem(const void *data, size_t len, const char *label_, ac_tensor_set *set, ac_err *err)
{
    tio_source src = {.mem = data, .size = (long long)len};
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
        size_t bytes = t->n_elems * tio_dtypes[t->dtype].size;
        cJSON *e = cJSON_AddObjectToObject(root, t->name);
        cJSON *shape = e ? cJSON_AddArrayToObject(e, "shape") : NULL;
        cJSON *offs = e ? cJSON_AddArrayToObject(e, "data_offsets") : NULL;
        if (!shape || !offs || !cJSON_AddStringToObject(e, "dtype", tio_dtypes[t->dtype].st))
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
        bytes += ts[i]->n_elems * tio_dtypes[ts[i]->dtype].size;
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
        size_t b = ts[i]->n_elems * tio_dtypes[ts[i]->dtype].size;
        if (b)
            memcpy(buf + off, ts[i]->data, b);
        off += b;
    }
    int st = ac_write_atomic(path, buf, off, err);
    free(buf);
    return st;
}
