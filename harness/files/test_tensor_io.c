/* harness/files/test_tensor_io.c — .npy and .safetensors readers and writers
 * (suite harness_tensor_io): round trips, and every bad file refused with
 * AC_ERR_INPUT and a message saying what is wrong.  Files are written by the
 * tests themselves, byte by byte, into a fresh temp dir. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "harness/files/test_files_support.h"
#include "harness/harness.h"

static void write_bytes(const char *path, const void *a, size_t na, const void *b, size_t nb)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(a, 1, na, f), na);
    if (nb)
        cr_assert_eq(fwrite(b, 1, nb, f), nb);
    fclose(f);
}

/* A v1.0 .npy with the given dict text and data_bytes bytes of data. */
static void write_npy(const char *path, const char *dict, size_t data_bytes)
{
    unsigned char pre[10 + 256];
    size_t n = strlen(dict);
    memcpy(pre, "\x93NUMPY\x01\x00", 8);
    pre[8] = (unsigned char)(n + 1), pre[9] = 0;
    memcpy(pre + 10, dict, n);
    pre[10 + n] = '\n';
    unsigned char *data = malloc(data_bytes + 1);
    for (size_t i = 0; i < data_bytes; i++)
        data[i] = (unsigned char)(i * 37 + 11);
    write_bytes(path, pre, 11 + n, data, data_bytes);
    free(data);
}

static int read_bad_npy(const char *dict, size_t data_bytes, ac_err *err)
{
    write_npy(path_of("bad.npy"), dict, data_bytes);
    ac_tensor t;
    int st = ac_npy_read(path_of("bad.npy"), "q", &t, err);
    cr_assert_null(t.data, "a refused file leaves no buffer");
    return st;
}

#define assert_refused(st, err, text) \
    do { \
        cr_assert_eq(st, AC_ERR_INPUT, "status %d: %s", st, (err).msg); \
        cr_assert_not_null(strstr((err).msg, text), "message '%s' lacks '%s'", (err).msg, text); \
    } while (0)

TestSuite(harness_tensor_io, .init = make_dir, .fini = remove_dir);

Test(harness_tensor_io, npy_round_trip_keeps_shape_dtype_and_every_byte)
{
    ac_tfile_dtype types[] = {AC_TF_F32, AC_TF_F16, AC_TF_U16, AC_TF_F64, AC_TF_BOOL, AC_TF_I64};
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        ac_tensor t = {.name = "x", .dtype = types[k], .ndim = 3, .shape = {2, 3, 5}, .n_elems = 30};
        size_t bytes = 30 * ac_tfile_dtype_size(types[k]);
        t.data = malloc(bytes);
        for (size_t i = 0; i < bytes; i++)
            ((unsigned char *)t.data)[i] = (unsigned char)(rand() & (types[k] == AC_TF_BOOL ? 1 : 0xff));
        ac_err err = {{0}};
        cr_assert_eq(ac_npy_write(path_of("x.npy"), &t, &err), AC_OK, "%s", err.msg);
        ac_tensor u;
        cr_assert_eq(ac_npy_read(path_of("x.npy"), "x", &u, &err), AC_OK, "%s", err.msg);
        cr_assert_eq(u.dtype, types[k]);
        cr_assert_eq(u.ndim, 3);
        cr_assert(u.shape[0] == 2 && u.shape[1] == 3 && u.shape[2] == 5 && u.n_elems == 30);
        cr_assert_eq(memcmp(u.data, t.data, bytes), 0, "data differs for %s", ac_tfile_dtype_name(types[k]));
        ac_tensor_free(&u);
        free(t.data);
    }
}

Test(harness_tensor_io, npy_reads_format_2_and_3_headers_and_scalar_and_1d_shapes)
{
    const char *dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }";
    unsigned char pre[12 + 128];
    size_t n = strlen(dict);
    float vals[3] = {1.5f, -2.25f, 3e-5f};
    for (int major = 2; major <= 3; major++) {
        memcpy(pre, "\x93NUMPY", 6);
        pre[6] = (unsigned char)major, pre[7] = 0;
        pre[8] = (unsigned char)n, pre[9] = pre[10] = pre[11] = 0;
        memcpy(pre + 12, dict, n);
        write_bytes(path_of("v.npy"), pre, 12 + n, vals, sizeof vals);
        ac_tensor t;
        ac_err err = {{0}};
        cr_assert_eq(ac_npy_read(path_of("v.npy"), "v", &t, &err), AC_OK, "v%d: %s", major, err.msg);
        cr_assert(t.ndim == 1 && t.shape[0] == 3 && ((float *)t.data)[1] == -2.25f);
        ac_tensor_free(&t);
    }
    ac_err err = {{0}};
    ac_tensor t;
    write_npy(path_of("s.npy"), "{'shape': (), 'fortran_order': False, 'descr': '<f8'}", 8);
    cr_assert_eq(ac_npy_read(path_of("s.npy"), "s", &t, &err), AC_OK, "%s", err.msg);
    cr_assert(t.ndim == 0 && t.n_elems == 1);
    ac_tensor_free(&t);
}

Test(harness_tensor_io, npy_truncated_data_names_file_shape_and_bytes)
{
    ac_err err = {{0}};
    int st = read_bad_npy("{'descr': '<f2', 'fortran_order': False, 'shape': (1, 2, 3, 4), }", 40, &err);
    assert_refused(st, err, "truncated: holds 40 bytes of data, shape (1, 2, 3, 4) f16 needs 48");
    cr_assert_not_null(strstr(err.msg, "bad.npy"));
}

Test(harness_tensor_io, npy_header_that_lies_about_the_shape_is_refused)
{
    ac_err err = {{0}};
    int st = read_bad_npy("{'descr': '<f2', 'fortran_order': False, 'shape': (1, 2, 3, 4), }", 1000, &err);
    assert_refused(st, err, "holds 1000 bytes of data, more than shape (1, 2, 3, 4) f16 needs (48)");
}

Test(harness_tensor_io, npy_fortran_big_endian_object_and_unknown_dtypes_are_refused)
{
    ac_err err = {{0}};
    assert_refused(read_bad_npy("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", 16, &err), err,
                   "Fortran-order");
    assert_refused(read_bad_npy("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 2), }", 16, &err), err,
                   "big-endian");
    assert_refused(read_bad_npy("{'descr': '|O', 'fortran_order': False, 'shape': (2,), }", 16, &err), err,
                   "object dtype");
    assert_refused(read_bad_npy("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", 16, &err), err,
                   "dtype '<c8' not supported");
    assert_refused(read_bad_npy("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", 8, &err), err,
                   "structured dtype");
    assert_refused(read_bad_npy("{'descr': '<f4', 'shape': (2,), }", 8, &err), err, "lacks 'fortran_order'");
    assert_refused(read_bad_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3), }", 8, &err), err,
                   "negative shape entry");
    assert_refused(read_bad_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, "
                                "1099511627776), }",
                                8, &err),
                   err, "overflows");
}

Test(harness_tensor_io, npy_absurd_header_length_is_refused_before_allocating)
{
    /* format 2.0 with a 4 GiB - 1 header length: the "10 GB header" of a corrupt file */
    unsigned char pre[16] = {0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 0xff, 0xff, 0xff, 0xff, '{', '}', ' ', '\n'};
    write_bytes(path_of("h.npy"), pre, sizeof pre, NULL, 0);
    ac_tensor t;
    ac_err err = {{0}};
    assert_refused(ac_npy_read(path_of("h.npy"), "q", &t, &err), err, "header length 4294967295 bytes is absurd");
    /* a plausible length that runs past the end of the file */
    pre[8] = 0, pre[9] = 0x10, pre[10] = 0, pre[11] = 0;
    write_bytes(path_of("h.npy"), pre, sizeof pre, NULL, 0);
    assert_refused(ac_npy_read(path_of("h.npy"), "q", &t, &err), err, "runs past the end of the file");
    static const char zip[] = "PK\x03\x04 not npy";
    write_bytes(path_of("h.npy"), zip, sizeof zip - 1, NULL, 0);
    assert_refused(ac_npy_read(path_of("h.npy"), "q", &t, &err), err, "not a .npy file");
    assert_refused(ac_npy_read(path_of("missing.npy"), "q", &t, &err), err, "cannot open");
}

/* ---- safetensors ---- */

static void write_st(const char *path, const char *json, const void *data, size_t data_bytes)
{
    size_t n = strlen(json);
    unsigned char *buf = malloc(8 + n);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)(((unsigned long long)n >> (8 * i)) & 0xff);
    memcpy(buf + 8, json, n);
    write_bytes(path, buf, 8 + n, data, data_bytes);
    free(buf);
}

static int read_bad_st(const char *json, size_t data_bytes, ac_err *err)
{
    unsigned char data[256] = {0};
    write_st(path_of("bad.safetensors"), json, data, data_bytes);
    ac_tensor_set set;
    int st = ac_safetensors_read(path_of("bad.safetensors"), &set, err);
    cr_assert(set.n == 0 && set.t == NULL, "a refused file leaves no tensors");
    return st;
}

Test(harness_tensor_io, safetensors_round_trip_with_several_dtypes)
{
    uint16_t bf[6] = {0x3f80, 0xbf00, 0x4049, 0x0001, 0x7f7f, 0x8000};
    double f64[2] = {M_PI, -1e-300};
    float f32[4] = {1, 2, 3, 4};
    ac_tensor a = {.name = "q", .dtype = AC_TF_BF16, .ndim = 2, .shape = {2, 3}, .n_elems = 6, .data = bf};
    ac_tensor b = {.name = "o", .dtype = AC_TF_F64, .ndim = 1, .shape = {2}, .n_elems = 2, .data = f64};
    ac_tensor c = {.name = "lse", .dtype = AC_TF_F32, .ndim = 3, .shape = {1, 2, 2}, .n_elems = 4, .data = f32};
    const ac_tensor *all[] = {&a, &b, &c};
    ac_err err = {{0}};
    cr_assert_eq(ac_safetensors_write(path_of("t.safetensors"), all, 3, &err), AC_OK, "%s", err.msg);
    ac_tensor_set set;
    cr_assert_eq(ac_safetensors_read(path_of("t.safetensors"), &set, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(set.n, 3);
    const ac_tensor *q = ac_tensor_set_find(&set, "q"), *o = ac_tensor_set_find(&set, "o");
    const ac_tensor *l = ac_tensor_set_find(&set, "lse");
    cr_assert(q && o && l);
    cr_assert(q->dtype == AC_TF_BF16 && q->ndim == 2 && q->shape[1] == 3 && !memcmp(q->data, bf, sizeof bf));
    cr_assert(o->dtype == AC_TF_F64 && ((double *)o->data)[0] == M_PI && ((double *)o->data)[1] == -1e-300);
    cr_assert(l->ndim == 3 && l->shape[2] == 2 && ((float *)l->data)[3] == 4.0f);
    ac_tensor_set_free(&set);
}

Test(harness_tensor_io, safetensors_absurd_header_length_is_refused)
{
    unsigned char n8[8];
    unsigned long long ten_gb = 10000000000ull;
    for (int i = 0; i < 8; i++)
        n8[i] = (unsigned char)((ten_gb >> (8 * i)) & 0xff);
    write_bytes(path_of("h.safetensors"), n8, 8, "{}", 2);
    ac_tensor_set set;
    ac_err err = {{0}};
    assert_refused(ac_safetensors_read(path_of("h.safetensors"), &set, &err), err,
                   "header length 10000000000 bytes is absurd");
    n8[0] = 200, n8[1] = n8[2] = n8[3] = n8[4] = 0;
    write_bytes(path_of("h.safetensors"), n8, 8, "{}", 2);
    assert_refused(ac_safetensors_read(path_of("h.safetensors"), &set, &err), err, "runs past the end");
    write_bytes(path_of("h.safetensors"), "abc", 3, NULL, 0);
    assert_refused(ac_safetensors_read(path_of("h.safetensors"), &set, &err), err, "shorter than 8 bytes");
}

Test(harness_tensor_io, safetensors_bad_offsets_dtypes_and_json_are_refused)
{
    ac_err err = {{0}};
    assert_refused(read_bad_st("{\"q\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,800]}}", 8, &err), err,
                   "data_offsets [0, 800] out of range (data buffer holds 8 bytes)");
    assert_refused(read_bad_st("{\"q\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, &err), err,
                   "data_offsets span 8 bytes, shape (3,) f32 needs 12");
    assert_refused(read_bad_st("{\"q\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, &err), err,
                   "out of range");
    assert_refused(read_bad_st("{\"q\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                               "\"k\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                               12, &err),
                   err, "overlap");
    assert_refused(read_bad_st("{\"q\":{\"dtype\":\"C64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8, &err), err,
                   "dtype C64 not supported");
    assert_refused(read_bad_st("{\"q\":{\"dtype\":\"F32\",\"shape\":[2],", 8, &err), err, "not a JSON object");
    assert_refused(read_bad_st("{\"q\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, &err), err,
                   "bad shape entry");
    assert_refused(read_bad_st("{\"q\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, &err), err, "data_offsets");
}

Test(harness_tensor_io, safetensors_metadata_is_skipped)
{
    float v[2] = {0.5f, 7.0f};
    write_st(path_of("m.safetensors"),
             "{\"__metadata__\":{\"format\":\"pt\"},\"v\":{\"dtype\":\"F32\",\"shape\":[2],"
             "\"data_offsets\":[0,8]}}",
             v, sizeof v);
    ac_tensor_set set;
    ac_err err = {{0}};
    cr_assert_eq(ac_safetensors_read(path_of("m.safetensors"), &set, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(set.n, 1);
    cr_assert(((float *)set.t[0].data)[1] == 7.0f);
    ac_tensor_set_free(&set);
}

/* ---- hostile files (issue 13) ---- */

/* The .npy header is not NUL-terminated: a shape tuple that runs to the last
 * byte of the header must be refused without reading past it.  The buffer is
 * exactly the file's size, so ASan (ci/sanitize.sh) sees any over-read. */
Test(harness_tensor_io, npy_shape_at_the_end_of_the_header_is_refused_within_the_buffer)
{
    const char *dicts[] = {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2, 5, 4",
                           "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2, 5, 4,",
                           "{'descr': '<f4', 'fortran_order': False, 'shape': (2"};
    const char *want[] = {"shape tuple not closed", "bad shape entry", "shape tuple not closed"};
    for (int k = 0; k < 3; k++) {
        size_t n = strlen(dicts[k]);
        unsigned char *file = malloc(10 + n);
        memcpy(file, "\x93NUMPY\x01\x00", 8);
        file[8] = (unsigned char)n, file[9] = 0;
        memcpy(file + 10, dicts[k], n); /* the header ends with the digits: no newline, no NUL */
        ac_tensor t;
        ac_err err = {{0}};
        assert_refused(ac_npy_read_mem(file, 10 + n, "mem.npy", "q", &t, &err), err, want[k]);
        cr_assert_null(t.data);
        write_bytes(path_of("open.npy"), file, 10 + n, NULL, 0); /* the same bytes as a file */
        assert_refused(ac_npy_read(path_of("open.npy"), "q", &t, &err), err, want[k]);
        free(file);
    }
}

/* A FIFO must be refused at once, not block until a writer appears (the test
 * would hang); /dev/zero must be refused, not read forever. */
Test(harness_tensor_io, fifo_and_device_paths_are_refused_without_reading, .timeout = 10)
{
    cr_assert_eq(mkfifo(path_of("q.npy"), 0600), 0);
    ac_tensor t;
    ac_tensor_set set;
    ac_err err = {{0}};
    assert_refused(ac_npy_read(path_of("q.npy"), "q", &t, &err), err, "is a FIFO, not a regular file");
    assert_refused(ac_safetensors_read(path_of("q.npy"), &set, &err), err, "is a FIFO");
    assert_refused(ac_npy_read("/dev/zero", "q", &t, &err), err, "/dev/zero: is a character device");
    assert_refused(ac_safetensors_read("/dev/zero", &set, &err), err, "character device");
    assert_refused(ac_npy_read(dir, "q", &t, &err), err, "is a directory");
}

Test(harness_tensor_io, safetensors_trailing_bytes_holes_and_junk_after_the_header_are_refused)
{
    const char *q2 = "{\"q\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    ac_err err = {{0}};
    assert_refused(read_bad_st(q2, 12, &err), err, "4 trailing bytes after the last tensor");
    assert_refused(read_bad_st("{\"q\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, &err), err,
                   "bytes [0, 4) of the data buffer belong to no tensor");
    assert_refused(read_bad_st("{\"q\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                               "\"k\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
                               12, &err),
                   err, "bytes [4, 8) of the data buffer belong to no tensor");
    assert_refused(read_bad_st("{}", 3, &err), err, "3 trailing bytes");
    char junk[160];
    snprintf(junk, sizeof junk, "%s  {\"k\":1}", q2); /* a second JSON value after the object */
    assert_refused(read_bad_st(junk, 8, &err), err, "not a JSON object");
    snprintf(junk, sizeof junk, "%s   x", q2);
    assert_refused(read_bad_st(junk, 8, &err), err, "not a JSON object");
    assert_refused(read_bad_st("{\"q\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0.5,8.5]}}", 9, &err), err,
                   "are not integers");
    /* the padding the format allows: blanks after the object */
    snprintf(junk, sizeof junk, "%s    ", q2);
    ac_tensor_set set;
    write_st(path_of("pad.safetensors"), junk, "abcdefgh", 8);
    cr_assert_eq(ac_safetensors_read(path_of("pad.safetensors"), &set, &err), AC_OK, "%s", err.msg);
    cr_assert(set.n == 1 && !memcmp(set.t[0].data, "abcdefgh", 8));
    ac_tensor_set_free(&set);
}
