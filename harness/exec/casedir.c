/* harness/exec/casedir.c — case directories: one call's inputs as .npy files
 * plus problem.json, and the outputs an external kernel writes back.
 *
 * The same directory serves `attncheck gen` (a case line made into files any
 * framework can load), the --exec kernels (one directory per call) and
 * `check`/`reference`, which read problem.json in place of the options it
 * stands for.  bf16 travels as '<u2' bit patterns (NumPy has no bfloat16). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "harness/exec/exec.h"
#include "harness/files/tensor_io.h"

/* ---- names and shapes ------------------------------------------------------ */

static ac_tfile_dtype file_dtype(ac_dtype t)
{
    if (ac_dtype_is_fp8(t))
        return AC_TF_U8; /* e4m3/e5m2 codes as |u1 bytes */
    return t == AC_F32 ? AC_TF_F32 : t == AC_F16 ? AC_TF_F16 : AC_TF_U16; /* bf16 as <u2 bits */
}

/* O's dtype: the inputs' own, or an fp8 problem's out dtype. */
static ac_dtype out_dtype_of(const ac_problem *p, ac_dtype t)
{
    return ac_problem_is_fp8(p) ? p->fp8_out : ac_dtype_output(t);
}

/* fp8: the descale factors as 1-D f32 arrays descale_q/k/v.npy. */
static int write_descales(const char *dir, const ac_problem *p, ac_err *err);

/* Tensor `kind` in the problem's layout: Q-like (heads_q, seqlen_q) or K-like
 * (heads_kv, seqlen_k) rows of its own width (V, O, dO, dV: d_v). */
static ac_tensor shaped(const ac_problem *p, ac_tensor_kind kind, ac_tfile_dtype t, const void *data)
{
    bool q_like = kind == AC_TENSOR_Q || kind == AC_TENSOR_O;
    int dim = ac_tensor_dim(p, kind);
    if (!q_like && p->page_size > 0) { /* a paged cache: (num_pages, page_size, heads_kv, d or d_v) */
        ac_tensor x = {
            .dtype = t, .ndim = 4, .data = (void *)data, .shape = {p->num_pages, p->page_size, p->heads_kv, dim}};
        x.n_elems = (size_t)p->num_pages * (size_t)p->page_size * (size_t)p->heads_kv * (size_t)dim;
        return x;
    }
    int heads = q_like ? p->heads_q : p->heads_kv, seqlen = q_like ? p->seqlen_q : p->seqlen_k;
    ac_tensor x = {.dtype = t, .ndim = 4, .data = (void *)data};
    bool bshd = p->layout == AC_LAYOUT_BSHD;
    int64_t shape[4] = {p->batch, bshd ? seqlen : heads, bshd ? heads : seqlen, dim};
    memcpy(x.shape, shape, sizeof shape);
    x.n_elems = (size_t)p->batch * (size_t)heads * (size_t)seqlen * (size_t)dim;
    return x;
}

static ac_tensor lse_shaped(const ac_problem *p, const void *data)
{
    ac_tensor x = {.dtype = AC_TF_F32,
                   .ndim = 3,
                   .data = (void *)data,
                   .shape = {p->batch, p->heads_q, p->seqlen_q},
                   .n_elems = ac_lse_elems(p)};
    return x;
}

static int write_npy(const char *dir, const char *name, ac_tensor *t, ac_err *err)
{
    char path[AC_PATH_LEN];
    if (snprintf(path, sizeof path, "%s/%s.npy", dir, name) >= (int)sizeof path)
        return ac_fail(err, AC_ERR_INPUT, "%s: path too long", dir);
    snprintf(t->name, sizeof t->name, "%s", name);
    return ac_npy_write(path, t, err);
}

/* ---- problem.json ------------------------------------------------------------ */

/* The window part of the mask in the case line's spelling: "none", "causal-br", "window-tl(3,inf)". */
static void mask_spelling(const ac_problem *p, char *buf, size_t len)
{
    const char *al = p->align == AC_ALIGN_BOTTOM_RIGHT ? "br" : "tl";
    if (!p->windowed) {
        snprintf(buf, len, "%s", p->dense_mask ? "dense" : "none");
        return;
    }
    if (p->window_left == AC_WINDOW_INF && p->window_right == 0) {
        snprintf(buf, len, "causal-%s", al);
        return;
    }
    char l[16] = "inf", r[16] = "inf";
    if (p->window_left != AC_WINDOW_INF)
        snprintf(l, sizeof l, "%d", p->window_left);
    if (p->window_right != AC_WINDOW_INF)
        snprintf(r, sizeof r, "%d", p->window_right);
    snprintf(buf, len, "window-%s(%s,%s)", al, l, r);
}

static cJSON *side(int v) { return v == AC_WINDOW_INF ? cJSON_CreateNull() : cJSON_CreateNumber(v); }

static void add_lengths(cJSON *o, const char *key, const int *lens, int b)
{
    cJSON_AddItemToObject(o, key, lens ? cJSON_CreateIntArray(lens, b) : cJSON_CreateNull());
}

static void add_names(cJSON *o, const char *key, const char *const *names, int n)
{
    cJSON *a = cJSON_AddArrayToObject(o, key);
    for (int i = 0; i < n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateString(names[i]));
}

static void add_mask(cJSON *o, const ac_problem *p)
{
    char spelled[96];
    mask_spelling(p, spelled, sizeof spelled);
    cJSON_AddStringToObject(o, "mask", spelled);
    cJSON_AddBoolToObject(o, "causal", p->windowed && p->window_left == AC_WINDOW_INF && p->window_right == 0);
    if (p->windowed) {
        cJSON *w = cJSON_AddObjectToObject(o, "window");
        cJSON_AddItemToObject(w, "left", side(p->window_left));
        cJSON_AddItemToObject(w, "right", side(p->window_right));
    } else {
        cJSON_AddNullToObject(o, "window");
    }
    cJSON_AddStringToObject(o, "align", p->align == AC_ALIGN_BOTTOM_RIGHT ? "br" : "tl");
    cJSON_AddItemToObject(o, "dense_mask", p->dense_mask ? cJSON_CreateString("mask.npy") : cJSON_CreateNull());
}

/* The paged KV cache: k.npy, v.npy are then the pages (num_pages, page_size,
 * heads_kv, head_dim), block_table.npy (batch, pages_per_seq) int32; and the
 * split hint (0: the kernel's choice). */
static void add_paged(cJSON *o, const ac_problem *p)
{
    cJSON_AddNumberToObject(o, "page_size", p->page_size);
    cJSON_AddNumberToObject(o, "num_pages", p->num_pages);
    cJSON_AddItemToObject(o, "block_table",
                          p->page_size > 0 ? cJSON_CreateString("block_table.npy") : cJSON_CreateNull());
    cJSON_AddNumberToObject(o, "num_splits", p->num_splits);
}

static char *problem_json(const ac_case_files *cf)
{
    const ac_problem *p = cf->p;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "format", AC_CASE_FORMAT);
    cJSON_AddItemToObject(o, "case", cf->case_line ? cJSON_CreateString(cf->case_line) : cJSON_CreateNull());
    cJSON_AddStringToObject(o, "dtype", ac_dtype_name(cf->dtype));
    cJSON_AddStringToObject(o, "out_dtype", ac_dtype_name(out_dtype_of(p, cf->dtype)));
    if (ac_problem_is_fp8(p)) { /* fp8: P's declared format, the factors' granularity and files */
        cJSON_AddStringToObject(o, "p_dtype", ac_dtype_name(p->fp8_p));
        cJSON_AddNumberToObject(o, "acc_bits", p->fp8_acc_bits); /* the fp8 products' accumulator: 0 = f32 */
        if (p->descale_rows > 0)
            cJSON_AddNumberToObject(o, "descale", p->descale_rows);
        else
            cJSON_AddStringToObject(o, "descale", p->descale_rows == AC_DESCALE_HEAD ? "head" : "tensor");
        static const char *const files[] = {"descale_q.npy", "descale_k.npy", "descale_v.npy"};
        add_names(o, "descale_files", files, 3);
    }
    cJSON_AddStringToObject(o, "layout", p->layout == AC_LAYOUT_BSHD ? "bshd" : "bhsd");
    int sizes[7] = {p->batch, p->heads_q, p->heads_kv, p->seqlen_q, p->seqlen_k, p->head_dim, ac_head_dim_v(p)};
    const char *keys[7] = {"batch", "heads_q", "heads_kv", "seqlen_q", "seqlen_k", "head_dim", "head_dim_v"};
    for (int i = 0; i < 7; i++)
        cJSON_AddNumberToObject(o, keys[i], sizes[i]);
    if (p->v_from_k) /* V's rows are K's first head_dim_v channels (the case's v=k) */
        cJSON_AddTrueToObject(o, "v_from_k");
    char scale[40]; /* 17 digits: cJSON's own printing may stop at 15 when they read back within an epsilon */
    snprintf(scale, sizeof scale, "%.17g", p->scale);
    cJSON_AddRawToObject(o, "scale", scale);
    add_mask(o, p);
    add_lengths(o, "seqlens_q", p->seqlens_q, p->batch);
    add_lengths(o, "seqlens_k", p->seqlens_k, p->batch);
    add_paged(o, p);
    /* a backward call: inputs with the kernel's own o, lse; gen: do too, every output wanted */
    static const char *const all_in[] = {"q", "k", "v", "do", "o", "lse"};
    static const char *const all_out[] = {"o", "lse", "dq", "dk", "dv"};
    add_names(o, "inputs", all_in, cf->backward ? 6 : cf->d_o && !ac_problem_is_fp8(p) ? 4 : 3);
    if (cf->backward)
        add_names(o, "want", all_out + 2, 3);
    else /* fp8 is forward only */
        add_names(o, "want", all_out, cf->d_o && !ac_problem_is_fp8(p) ? 5 : 2);
    cJSON_AddStringToObject(o, "out", cf->out_dir ? cf->out_dir : "");
    cJSON_AddStringToObject(o, "lse", "f32, natural log, shape (batch, heads_q, seqlen_q) in every layout");
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    return text;
}

static int write_json(const char *dir, const ac_case_files *cf, ac_err *err)
{
    char path[AC_PATH_LEN];
    if (snprintf(path, sizeof path, "%s/%s", dir, AC_CASE_JSON) >= (int)sizeof path)
        return ac_fail(err, AC_ERR_INPUT, "%s: path too long", dir);
    char *text = problem_json(cf);
    if (!text)
        return ac_fail(err, AC_ERR_ENV, "%s: out of memory", path);
    int st = ac_write_atomic(path, text, strlen(text), err);
    cJSON_free(text);
    return st;
}

int ac_case_dir_write(const char *dir, const ac_case_files *cf, ac_err *err)
{
    const ac_problem *p = cf->p;
    ac_tfile_dtype in_t = file_dtype(cf->dtype), out_t = file_dtype(out_dtype_of(p, cf->dtype));
    ac_tensor q = shaped(p, AC_TENSOR_Q, in_t, cf->q), k = shaped(p, AC_TENSOR_K, in_t, cf->k),
              v = shaped(p, AC_TENSOR_V, in_t, cf->v);
    int st = write_npy(dir, "q", &q, err);
    if (st == AC_OK)
        st = write_npy(dir, "k", &k, err);
    if (st == AC_OK)
        st = write_npy(dir, "v", &v, err);
    if (st == AC_OK && cf->d_o && !ac_problem_is_fp8(p)) { /* fp8 is forward only */
        ac_tensor d_o = shaped(p, AC_TENSOR_O, in_t, cf->d_o);
        st = write_npy(dir, "do", &d_o, err);
    }
    if (st == AC_OK && cf->backward) {
        ac_tensor o = shaped(p, AC_TENSOR_O, out_t, cf->o), l = lse_shaped(p, cf->lse);
        if ((st = write_npy(dir, "o", &o, err)) == AC_OK)
            st = write_npy(dir, "lse", &l, err);
    }
    if (st == AC_OK && p->dense_mask) {
        ac_tensor m = {.dtype = AC_TF_U8,
                       .ndim = 4,
                       .data = (void *)p->dense_mask,
                       .shape = {p->mask_batch, p->mask_heads, p->seqlen_q, p->seqlen_k}};
        m.n_elems = (size_t)p->mask_batch * (size_t)p->mask_heads * (size_t)p->seqlen_q * (size_t)p->seqlen_k;
        st = write_npy(dir, "mask", &m, err);
    }
    if (st == AC_OK && p->page_size > 0) {
        ac_tensor bt = {
            .dtype = AC_TF_I32, .ndim = 2, .data = (void *)p->block_table, .shape = {p->batch, p->pages_per_seq}};
        bt.n_elems = (size_t)p->batch * (size_t)p->pages_per_seq;
        st = write_npy(dir, "block_table", &bt, err);
    }
    if (st == AC_OK && ac_problem_is_fp8(p))
        st = write_descales(dir, p, err);
    return st == AC_OK ? write_json(dir, cf, err) : st;
}

static int write_descales(const char *dir, const ac_problem *p, ac_err *err)
{
    const float *arr[3] = {p->descale_q, p->descale_k, p->descale_v};
    static const char *const names[3] = {"descale_q", "descale_k", "descale_v"};
    static const ac_tensor_kind kinds[3] = {AC_TENSOR_Q, AC_TENSOR_K, AC_TENSOR_V};
    int st = AC_OK;
    for (int i = 0; st == AC_OK && i < 3; i++) {
        if (!arr[i])
            return ac_fail(err, AC_ERR_INPUT, "%s: an fp8 problem without its %s factors", dir, names[i]);
        size_t n = ac_descale_count(p, kinds[i]);
        int64_t heads = kinds[i] == AC_TENSOR_Q ? p->heads_q : p->heads_kv;
        /* shaped as check reads them: (1), (B, Hkv), (B, H, blocks) */
        ac_tensor t = {.dtype = AC_TF_F32, .ndim = 1, .shape = {(int64_t)n}, .n_elems = n, .data = (void *)arr[i]};
        if (p->descale_rows == AC_DESCALE_HEAD)
            t.ndim = 2, t.shape[0] = p->batch, t.shape[1] = p->heads_kv;
        else if (p->descale_rows > 0)
            t.ndim = 3, t.shape[0] = p->batch, t.shape[1] = heads, t.shape[2] = (int64_t)n / (p->batch * heads);
        st = write_npy(dir, names[i], &t, err);
    }
    return st;
}

/* ---- outputs ------------------------------------------------------------------- */

/* X.npy of the wanted dtype and shape into dst; a kernel fault naming X otherwise. */
static int read_output(const char *dir, const char *name, const ac_tensor *want, void *dst, ac_err *err)
{
    char path[AC_PATH_LEN];
    if (snprintf(path, sizeof path, "%s/%s.npy", dir, name) >= (int)sizeof path)
        return ac_fail(err, AC_ERR_INPUT, "%s: path too long", dir);
    if (access(path, F_OK) != 0)
        return ac_fail(err, AC_KERNEL_FAULT, "missing-%s: the kernel wrote no %s.npy into %s", name, name, dir);
    ac_tensor t;
    ac_err why = {{0}};
    int st = ac_npy_read(path, name, &t, &why);
    if (st == AC_ERR_ENV)
        return ac_fail(err, st, "%s", why.msg);
    if (st != AC_OK)
        return ac_fail(err, AC_KERNEL_FAULT, "malformed-%s: %s", name, why.msg);
    bool same = t.ndim == want->ndim && t.dtype == want->dtype;
    for (int i = 0; same && i < t.ndim; i++)
        same = t.shape[i] == want->shape[i];
    if (same) {
        memcpy(dst, t.data, t.n_elems * ac_tfile_dtype_size(t.dtype));
    } else {
        char got[128], exp[128];
        ac_tensor_shape_str(&t, got, sizeof got);
        ac_tensor_shape_str(want, exp, sizeof exp);
        st = ac_fail(err, AC_KERNEL_FAULT, "malformed-%s: %s holds %s %s, expected %s %s%s", name, path,
                     ac_tfile_dtype_name(t.dtype), got, ac_tfile_dtype_name(want->dtype), exp,
                     want->dtype == AC_TF_U16 ? " (bf16 as <u2 bit patterns)" : "");
    }
    ac_tensor_free(&t);
    return st;
}

int ac_case_dir_read_outputs(const char *out_dir, const ac_problem *p, ac_dtype t, bool backward, void *o, float *lse,
                             void *dq, void *dk, void *dv, ac_err *err)
{
    ac_tfile_dtype out_t = file_dtype(out_dtype_of(p, t));
    if (!backward) {
        ac_tensor o_like = shaped(p, AC_TENSOR_O, out_t, NULL), l = lse_shaped(p, NULL);
        int st = read_output(out_dir, "o", &o_like, o, err);
        return st == AC_OK ? read_output(out_dir, "lse", &l, lse, err) : st;
    }
    ac_tensor q_like = shaped(p, AC_TENSOR_Q, out_t, NULL), k_like = shaped(p, AC_TENSOR_K, out_t, NULL),
              v_like = shaped(p, AC_TENSOR_V, out_t, NULL);
    int st = read_output(out_dir, "dq", &q_like, dq, err);
    if (st == AC_OK)
        st = read_output(out_dir, "dk", &k_like, dk, err);
    return st == AC_OK ? read_output(out_dir, "dv", &v_like, dv, err) : st;
}

/* ---- problem.json read back (check, reference) ---------------------------------- */

static int want_string(const cJSON *root, const char *key, char *out, size_t len, bool nullable, const char *path,
                       ac_err *err)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, key);
    if (nullable && (!j || cJSON_IsNull(j))) {
        out[0] = '\0';
        return AC_OK;
    }
    if (!cJSON_IsString(j) || strlen(j->valuestring) >= len)
        return ac_fail(err, AC_ERR_INPUT, "%s: \"%s\" must be a string%s", path, key, nullable ? " or null" : "");
    snprintf(out, len, "%s", j->valuestring);
    return AC_OK;
}

static int want_lengths(const cJSON *root, const char *key, char *out, size_t len, const char *path, ac_err *err)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, key), *e;
    out[0] = '\0';
    if (!j || cJSON_IsNull(j))
        return AC_OK;
    if (!cJSON_IsArray(j))
        return ac_fail(err, AC_ERR_INPUT, "%s: \"%s\" must be a list of lengths or null", path, key);
    size_t n = 0;
    cJSON_ArrayForEach(e, j)
    {
        if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) || n + 24 >= len)
            return ac_fail(err, AC_ERR_INPUT, "%s: \"%s\" must hold whole numbers", path, key);
        n += (size_t)snprintf(out + n, len - n, "%s%.0f", n ? "," : "", e->valuedouble);
    }
    return AC_OK;
}

/* "page_size" and "block_table" (a file in dir), both or neither. */
static int paged_from(const cJSON *root, const char *dir, const char *path, ac_case_options *o, ac_err *err)
{
    const cJSON *size = cJSON_GetObjectItemCaseSensitive(root, "page_size");
    char table[64];
    int st = want_string(root, "block_table", table, sizeof table, true, path, err);
    if (st != AC_OK || !table[0])
        return st;
    if (!cJSON_IsNumber(size) || size->valuedouble != floor(size->valuedouble) || size->valuedouble < 1 ||
        size->valuedouble > (1 << 20))
        return ac_fail(err, AC_ERR_INPUT, "%s: \"page_size\" must be a whole number in 1..%d with a block table", path,
                       1 << 20);
    if (strchr(table, '/') ||
        snprintf(o->block_table_file, sizeof o->block_table_file, "%s/%s", dir, table) >=
            (int)sizeof o->block_table_file)
        return ac_fail(err, AC_ERR_INPUT, "%s: \"block_table\" must name a file in %s", path, dir);
    o->page_size = (int)size->valuedouble;
    return AC_OK;
}

static int options_from(const cJSON *root, const char *dir, const char *path, ac_case_options *o, ac_err *err)
{
    const cJSON *scale = cJSON_GetObjectItemCaseSensitive(root, "scale");
    char dense[64];
    int st = want_string(root, "dtype", o->dtype, sizeof o->dtype, false, path, err);
    if (st == AC_OK)
        st = want_string(root, "layout", o->layout, sizeof o->layout, false, path, err);
    if (st == AC_OK)
        st = want_string(root, "mask", o->mask, sizeof o->mask, false, path, err);
    if (st == AC_OK)
        st = want_string(root, "dense_mask", dense, sizeof dense, true, path, err);
    if (st == AC_OK)
        st = want_string(root, "case", o->case_line, sizeof o->case_line, true, path, err);
    if (st == AC_OK)
        st = want_lengths(root, "seqlens_q", o->seqlens_q, sizeof o->seqlens_q, path, err);
    if (st == AC_OK)
        st = want_lengths(root, "seqlens_k", o->seqlens_k, sizeof o->seqlens_k, path, err);
    if (st == AC_OK && (!cJSON_IsNumber(scale) || !isfinite(scale->valuedouble)))
        st = ac_fail(err, AC_ERR_INPUT, "%s: \"scale\" must be a finite number", path);
    if (st != AC_OK)
        return st;
    snprintf(o->scale, sizeof o->scale, "%.17g", scale->valuedouble);
    st = paged_from(root, dir, path, o, err);
    if (st != AC_OK)
        return st;
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(root, "descale_files"),
                *grain = cJSON_GetObjectItemCaseSensitive(root, "descale");
    for (int i = 0; cJSON_IsArray(files) && i < 3; i++) { /* fp8: the factors beside the tensors */
        const cJSON *name = cJSON_GetArrayItem(files, i);
        if (!cJSON_IsString(name) || strchr(name->valuestring, '/') ||
            snprintf(o->descale[i], sizeof o->descale[i], "%s/%s", dir, name->valuestring) >= (int)sizeof o->descale[i])
            return ac_fail(err, AC_ERR_INPUT, "%s: \"descale_files\" must name three files in %s", path, dir);
    }
    const cJSON *vk = cJSON_GetObjectItemCaseSensitive(root, "v_from_k");
    if (vk && !cJSON_IsBool(vk))
        return ac_fail(err, AC_ERR_INPUT, "%s: \"v_from_k\" must be true or false", path);
    o->v_from_k = cJSON_IsTrue(vk);
    if (cJSON_IsNumber(grain) && grain->valuedouble >= 16 && grain->valuedouble <= 65536)
        snprintf(o->descale_block, sizeof o->descale_block, "%d", (int)grain->valuedouble);
    if (!strcmp(o->mask, "none") || !strcmp(o->mask, "dense"))
        o->mask[0] = '\0'; /* no window: the dense part, if any, is the file */
    if (dense[0] &&
        (strchr(dense, '/') ||
         snprintf(o->mask_file, sizeof o->mask_file, "%s/%s", dir, dense) >= (int)sizeof o->mask_file))
        return ac_fail(err, AC_ERR_INPUT, "%s: \"dense_mask\" must name a file in %s", path, dir);
    return AC_OK;
}

int ac_case_dir_options(const char *dir, ac_case_options *o, bool *found, ac_err *err)
{
    memset(o, 0, sizeof *o);
    *found = false;
    char path[AC_PATH_LEN], *text = NULL;
    size_t len = 0;
    if (snprintf(path, sizeof path, "%s/%s", dir, AC_CASE_JSON) >= (int)sizeof path)
        return ac_fail(err, AC_ERR_INPUT, "%s: path too long", dir);
    int st = ac_read_file(path, &text, &len, err);
    if (st != AC_OK || !text)
        return st;
    *found = true;
    cJSON *root = cJSON_ParseWithLength(text, len);
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (!cJSON_IsObject(root))
        st = ac_fail(err, AC_ERR_INPUT, "%s: not a JSON object", path);
    else if (!cJSON_IsString(format) || strcmp(format->valuestring, AC_CASE_FORMAT) != 0)
        st = ac_fail(err, AC_ERR_INPUT, "%s: \"format\" must be \"%s\"", path, AC_CASE_FORMAT);
    else
        st = options_from(root, dir, path, o, err);
    cJSON_Delete(root);
    free(text);
    return st;
}
