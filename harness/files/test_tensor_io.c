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
#include <unistd.h>

#include "harness/harness.h"

static char dir[64];

static void make_dir(void)
{
    snprintf(dir, sizeof dir, "/tmp/ac-tio-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void remove_dir(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

static const char *path_of(const char *name)
{
    static char p[4][128];
    static int turn;
    turn = (turn + 1) % 4;
    snprintf(p[turn], sizeof p[turn], "%s/%s", dir, name);
    return p[turn];
}

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

#define assert_refused(st, err, text)                                                                      \
    do {                                                                                                   \
        cr_assert_eq(st, AC_ERR_INPUT, "status %d: %s", st, (err).msg);                                    \
        cr_assert_not_null(strstr((err).msg, text), "message '%s' lacks '%s'", (err).msg, text);           \
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
    assert_refused(read_bad_npy("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", 8, &err),
                   err, "structured dtype");
    assert_refused(read_bad_npy("{'descr': '<f4', 'shape': (2,), }", 8, &err), err, "lacks 'fortran_order'");
    assert_refused(read_bad_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3), }", 8, &err), err,
                   "shape entry -3 out of range");
    assert_refused(read_bad_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, "
                                "1099511627776), }", 8, &err), err, "overflows");
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
                               "\"k\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, &err), err,
                   "overlap");
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
    write_st(path_of("m.safetensors"), "{\"__metadata__\":{\"format\":\"pt\"},\"v\":{\"dtype\":\"F32\",\"shape\":[2],"
             "\"data_offsets\":[0,8]}}", v, sizeof v);
    ac_tensor_set set;
    ac_err err = {{0}};
    cr_assert_eq(ac_safetensors_read(path_of("m.safetensors"), &set, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(set.n, 1);
    cr_assert(((float *)set.t[0].data)[1] == 7.0f);
    ac_tensor_set_free(&set);
}

/* ======================= attncheck check / reference (suite harness_check) ===== */

static ac_tfile_dtype file_dtype(ac_dtype t)
{
    return t == AC_F32 ? AC_TF_F32 : t == AC_F16 ? AC_TF_F16 : AC_TF_U16; /* bf16 as <u2 bits */
}

static void put_tensor(const char *name, ac_tfile_dtype t, const ac_problem *p, bool q_like, void *data)
{
    int heads = q_like ? p->heads_q : p->heads_kv, seq = q_like ? p->seqlen_q : p->seqlen_k;
    ac_tensor x = {.dtype = t, .ndim = 4, .data = data};
    int64_t bhsd[4] = {p->batch, heads, seq, p->head_dim}, bshd[4] = {p->batch, seq, heads, p->head_dim};
    memcpy(x.shape, p->layout == AC_LAYOUT_BSHD ? bshd : bhsd, sizeof bhsd);
    x.n_elems = (size_t)p->batch * heads * seq * p->head_dim;
    char file[32];
    snprintf(file, sizeof file, "case/%s.npy", name);
    ac_err err = {{0}};
    cr_assert_eq(ac_npy_write(path_of(file), &x, &err), AC_OK, "%s", err.msg);
}

/* `attncheck reference` on the case dir, then its f64 outputs rounded to the
 * dtype (lse to f32) written back as the "kernel's" outputs: a perfect kernel. */
static void perfect_outputs(const ac_inputs *in, const char *const *extra)
{
    char *argv[16] = {"reference", (char *)path_of("case"), "--out", (char *)path_of("ref"), "--dtype",
                      (char *)ac_dtype_name(in->c.dtype), "--layout",
                      in->p.layout == AC_LAYOUT_BSHD ? "bshd" : "bhsd"};
    int argc = 8;
    for (int i = 0; extra && extra[i] && argc < 15; i++)
        argv[argc++] = (char *)extra[i];
    cr_assert_eq(ac_cmd_reference(argc, argv), AC_OK);
    const char *names[] = {"o", "lse", "dq", "dk", "dv"};
    for (int i = 0; i < 5; i++) {
        char src[32], dst[32];
        snprintf(src, sizeof src, "ref/%s.npy", names[i]);
        snprintf(dst, sizeof dst, "case/%s.npy", names[i]);
        ac_tensor t;
        ac_err err = {{0}};
        cr_assert_eq(ac_npy_read(path_of(src), names[i], &t, &err), AC_OK, "%s", err.msg);
        cr_assert_eq(t.dtype, AC_TF_F64);
        ac_tensor r = t;
        r.dtype = i == 1 ? AC_TF_F32 : file_dtype(in->c.dtype);
        r.data = malloc(t.n_elems * 4);
        for (size_t e = 0; e < t.n_elems; e++)
            if (i == 1)
                ((float *)r.data)[e] = (float)((double *)t.data)[e];
            else
                ac_store(in->c.dtype, (double *)t.data + e, 1, (char *)r.data + e * ac_dtype_size(in->c.dtype));
        cr_assert_eq(ac_npy_write(path_of(dst), &r, &err), AC_OK, "%s", err.msg);
        free(r.data);
        ac_tensor_free(&t);
    }
}

/* Writes q, k, v, do of a case line into DIR/case/, and perfect outputs. */
static ac_inputs dump_case(const char *line, const char *const *extra)
{
    ac_case c;
    ac_inputs in;
    ac_err err = {{0}};
    cr_assert_eq(ac_case_parse(line, &c, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(ac_inputs_make(&c, &in, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(mkdir(path_of("case"), 0755), 0);
    ac_tfile_dtype t = file_dtype(c.dtype);
    put_tensor("q", t, &in.p, true, in.q), put_tensor("k", t, &in.p, false, in.k);
    put_tensor("v", t, &in.p, false, in.v), put_tensor("do", t, &in.p, true, in.d_o);
    perfect_outputs(&in, extra);
    return in;
}

static int check(const char *a1, const char *a2, const char *a3, const char *a4)
{
    char *argv[] = {"check", (char *)path_of("case"), (char *)a1, (char *)a2, (char *)a3, (char *)a4, NULL};
    int argc = 2;
    while (argv[argc])
        argc++;
    return ac_cmd_check(argc, argv);
}

TestSuite(harness_check, .init = make_dir, .fini = remove_dir);

Test(harness_check, perfect_outputs_pass_and_a_planted_error_fails_at_its_place)
{
    ac_inputs in = dump_case("v1 seed=5 b=2 hq=4 hkv=2 nq=9 nk=13 d=8 dtype=f16 mask=none layout=bhsd dist=normal(0,1) scale=auto", NULL);
    cr_assert_eq(check(NULL, NULL, NULL, NULL), AC_OK);
    /* O at (b=1, h=2, i=5, c=3) off by 0.25: far outside any f16 rounding */
    ac_tensor o;
    ac_err err = {{0}};
    cr_assert_eq(ac_npy_read(path_of("case/o.npy"), "o", &o, &err), AC_OK);
    size_t at = ac_q_index(&in.p, 1, 2, 5, 3);
    double x = ac_widen(AC_F16, ((uint16_t *)o.data)[at]) + 0.25;
    ((uint16_t *)o.data)[at] = (uint16_t)ac_narrow(AC_F16, x);
    cr_assert_eq(ac_npy_write(path_of("case/o.npy"), &o, &err), AC_OK);
    cr_assert_eq(check("--json", path_of("out.jsonl"), NULL, NULL), AC_FAIL_ACCURACY);
    FILE *f = fopen(path_of("out.jsonl"), "r");
    char buf[8192] = "";
    cr_assert_not_null(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    cr_assert_not_null(strstr(buf, "O:scaled"), "%s", buf);
    cr_assert_not_null(strstr(buf, "at b=1 h=2 row=5 col=3"), "%s", buf);
    ac_tensor_free(&o);
    ac_inputs_free(&in);
}

Test(harness_check, bf16_bits_need_dtype_and_bshd_causal_gqa_passes)
{
    ac_inputs in = dump_case("v1 seed=8 b=1 hq=4 hkv=1 nq=7 nk=11 d=16 dtype=bf16 mask=causal-br layout=bshd "
                             "dist=normal(0,1) scale=auto", NULL);
    /* the reference above was made without the mask: redo it with --mask causal-br */
    char *argv[] = {"reference", (char *)path_of("case"), "--out", (char *)path_of("ref"), "--dtype", "bf16",
                    "--layout", "bshd", "--mask", "causal-br", NULL};
    cr_assert_eq(ac_cmd_reference(10, argv), AC_OK);
    cr_assert_eq(check("--layout", "bshd", "--mask", "causal-br"), AC_ERR_INPUT, "u16 without --dtype bf16");
    char *ok[] = {"check", (char *)path_of("case"), "--layout", "bshd", "--dtype", "bf16", "--mask", "causal-br", NULL};
    /* outputs were rounded from the unmasked reference: masked rows differ, so this must fail */
    cr_assert_eq(ac_cmd_check(8, ok), AC_FAIL_ACCURACY);
    ac_inputs_free(&in);
}

Test(harness_check, reference_with_lse_base_2_and_safetensors_output)
{
    ac_inputs in = dump_case("v1 seed=3 b=1 hq=2 hkv=2 nq=5 nk=6 d=4 dtype=f32 mask=none layout=bhsd dist=normal(0,1) scale=auto", NULL);
    char *argv[] = {"reference", (char *)path_of("case"), "--out", (char *)path_of("r.safetensors"), "--lse-base", "2", NULL};
    cr_assert_eq(ac_cmd_reference(6, argv), AC_OK);
    ac_tensor_set set;
    ac_err err = {{0}};
    cr_assert_eq(ac_safetensors_read(path_of("r.safetensors"), &set, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(set.n, 5);
    double *o = malloc(ac_q_elems(&in.p) * sizeof(double)), *lse = malloc(ac_lse_elems(&in.p) * sizeof(double));
    cr_assert_eq(ref_forward_fp64(&in.p, in.qd, in.kd, in.vd, o, lse, &err), AC_OK);
    const ac_tensor *so = ac_tensor_set_find(&set, "o"), *sl = ac_tensor_set_find(&set, "lse");
    cr_assert(so && sl && so->dtype == AC_TF_F64 && sl->ndim == 3);
    cr_assert_eq(memcmp(so->data, o, ac_q_elems(&in.p) * sizeof(double)), 0, "O is the fp64 reference, exactly");
    for (size_t i = 0; i < ac_lse_elems(&in.p); i++)
        cr_assert_float_eq(((double *)sl->data)[i], lse[i] / M_LN2, 1e-12);
    /* lse in base 2 read back with --lse-base 2 passes; read as base e it fails */
    ac_tensor l = {.name = "lse", .dtype = AC_TF_F32, .ndim = 3, .shape = {1, 2, 5}, .n_elems = 10};
    float lf[10];
    for (int i = 0; i < 10; i++)
        lf[i] = (float)(lse[i] / M_LN2);
    l.data = lf;
    cr_assert_eq(ac_npy_write(path_of("case/lse.npy"), &l, &err), AC_OK);
    cr_assert_eq(check("--lse-base", "2", NULL, NULL), AC_OK);
    cr_assert_eq(check(NULL, NULL, NULL, NULL), AC_FAIL_ACCURACY);
    free(o), free(lse);
    ac_tensor_set_free(&set);
    ac_inputs_free(&in);
}

static void overwrite(const char *name, ac_tfile_dtype t, int ndim, const int64_t *shape, double fill_nan_at)
{
    ac_tensor x = {.dtype = t, .ndim = ndim, .n_elems = 1};
    for (int i = 0; i < ndim; i++)
        x.shape[i] = shape[i], x.n_elems *= (size_t)shape[i];
    x.data = calloc(x.n_elems, ac_tfile_dtype_size(t));
    for (size_t i = 0; t == AC_TF_F32 && i < x.n_elems; i++)
        ((float *)x.data)[i] = i == (size_t)fill_nan_at ? NAN : 0.5f;
    ac_err err = {{0}};
    cr_assert_eq(ac_npy_write(path_of(name), &x, &err), AC_OK);
    free(x.data);
}

Test(harness_check, bad_inputs_exit_2_with_the_reason)
{
    ac_inputs in = dump_case("v1 seed=4 b=1 hq=2 hkv=2 nq=4 nk=5 d=4 dtype=f32 mask=none layout=bhsd dist=normal(0,1) scale=auto", NULL);
    int64_t qs[4] = {1, 2, 4, 4}, ks[4] = {1, 2, 5, 4}, bad[4] = {1, 2, 6, 4};
    overwrite("case/v.npy", AC_TF_F32, 4, bad, -1);
    cr_assert_eq(check(NULL, NULL, NULL, NULL), AC_ERR_INPUT, "v shape differs from k");
    overwrite("case/v.npy", AC_TF_F16, 4, ks, -1);
    cr_assert_eq(check(NULL, NULL, NULL, NULL), AC_ERR_INPUT, "v dtype differs from q");
    overwrite("case/v.npy", AC_TF_F32, 4, ks, -1);
    overwrite("case/q.npy", AC_TF_F32, 4, qs, 7);
    cr_assert_eq(check(NULL, NULL, NULL, NULL), AC_ERR_INPUT, "NaN in q");
    overwrite("case/q.npy", AC_TF_F32, 3, qs, -1);
    cr_assert_eq(check(NULL, NULL, NULL, NULL), AC_ERR_INPUT, "3-D q");
    overwrite("case/q.npy", AC_TF_F32, 4, qs, -1);
    cr_assert_eq(check("--mask", "window-br(3)", NULL, NULL), AC_ERR_INPUT, "a window needs two sides");
    cr_assert_eq(check("--mask", "dense(0.5)", NULL, NULL), AC_ERR_INPUT, "a dense mask comes from --mask-file");
    cr_assert_eq(check("--layout", "hsbd", NULL, NULL), AC_ERR_INPUT);
    cr_assert_eq(check("--seqlens-k", "1,2,3", NULL, NULL), AC_ERR_INPUT, "3 lengths for a batch of 1");
    cr_assert_eq(check("--mask-file", path_of("case/k.npy"), NULL, NULL), AC_ERR_INPUT, "f32 mask");
    cr_assert_eq(check("--mask", path_of("case/k.npy"), NULL, NULL), AC_ERR_INPUT, "a file is not a mask kind");
    cr_assert_eq(check("--bogus", "1", NULL, NULL), AC_ERR_INPUT);
    unlink(path_of("case/k.npy"));
    cr_assert_eq(check(NULL, NULL, NULL, NULL), AC_ERR_INPUT, "no k.npy");
    char *none[] = {"check", (char *)path_of("nowhere"), NULL};
    cr_assert_eq(ac_cmd_check(2, none), AC_ERR_INPUT);
    ac_inputs_free(&in);
}

Test(harness_check, mask_file_and_key_lengths_pass_with_a_fully_masked_row)
{
    /* q, k, v first (outputs are remade below, once the mask exists) */
    ac_inputs in = dump_case("v1 seed=6 b=2 hq=2 hkv=1 nq=6 nk=10 d=8 dtype=f16 mask=none layout=bhsd "
                             "dist=normal(0,1) scale=auto", NULL);
    uint8_t keep[6 * 10];
    for (int i = 0; i < 60; i++)
        keep[i] = (uint8_t)((i * 7 + 3) % 5 != 0);
    memset(keep + 2 * 10, 0, 10); /* row 2 sees no key: O = 0, LSE = -inf expected */
    ac_tensor m = {.dtype = AC_TF_BOOL, .ndim = 4, .shape = {1, 1, 6, 10}, .n_elems = 60, .data = keep};
    ac_err err = {{0}};
    cr_assert_eq(ac_npy_write(path_of("mask.npy"), &m, &err), AC_OK);
    const char *extra[] = {"--mask-file", path_of("mask.npy"), "--seqlens-k", "7,10", NULL};
    perfect_outputs(&in, extra);
    ac_tensor o;
    cr_assert_eq(ac_npy_read(path_of("case/o.npy"), "o", &o, &err), AC_OK);
    cr_assert_eq(((uint16_t *)o.data)[ac_q_index(&in.p, 0, 1, 2, 3)], 0, "a fully masked row's O is 0");
    ac_tensor_free(&o);
    cr_assert_eq(check("--mask-file", path_of("mask.npy"), "--seqlens-k", "7,10"), AC_OK);
    cr_assert_eq(check("--mask-file", path_of("mask.npy"), "--seqlens-k", "8,10"), AC_FAIL_ACCURACY,
                 "key 7 of batch 0 now counts: the outputs no longer match");
    ac_inputs_free(&in);
}

Test(harness_check, one_safetensors_file_holds_the_whole_case)
{
    ac_inputs in = dump_case("v1 seed=9 b=1 hq=2 hkv=2 nq=8 nk=8 d=8 dtype=bf16 mask=none layout=bhsd "
                             "dist=normal(0,1) scale=auto", NULL);
    const char *names[] = {"q", "k", "v", "o", "lse", "do", "dq", "dk", "dv"};
    ac_tensor t[9];
    const ac_tensor *all[9];
    ac_err err = {{0}};
    for (int i = 0; i < 9; i++) {
        char file[32];
        snprintf(file, sizeof file, "case/%s.npy", names[i]);
        cr_assert_eq(ac_npy_read(path_of(file), names[i], &t[i], &err), AC_OK, "%s", err.msg);
        if (t[i].dtype == AC_TF_U16)
            t[i].dtype = AC_TF_BF16; /* safetensors carries bf16 natively: no --dtype needed */
        all[i] = &t[i];
    }
    cr_assert_eq(ac_safetensors_write(path_of("case.safetensors"), all, 9, &err), AC_OK, "%s", err.msg);
    char *argv[] = {"check", (char *)path_of("case.safetensors"), NULL};
    cr_assert_eq(ac_cmd_check(2, argv), AC_OK);
    for (int i = 0; i < 9; i++)
        ac_tensor_free(&t[i]);
    ac_inputs_free(&in);
}
