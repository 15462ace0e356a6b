/* harness/exec/caps.c — an external kernel's capabilities from a JSON file:
 * the plugin ABI's fields, masks in the case line's spelling (exec.h).
 * Every field is checked, and a message names the one that is wrong: a typo
 * in a caps file must not silently widen or narrow what is fuzzed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "harness/exec/exec.h"
#include "harness/files/files.h"

static const char *const known_fields[] = {"name",       "description", "dtypes", "head_dims", "max_head_dim",
                                           "masks",      "layouts",     "gqa",    "varlen",    "backward",
                                           "max_seqlen", "paged",       "split",  "dv",        "v_from_k"};
enum { N_FIELDS = (int)(sizeof known_fields / sizeof known_fields[0]) };

typedef struct {
    const char *label; /* the file, for messages */
    ac_err *err;
} where;

static int bad(const where *w, const char *field, const char *what)
{
    return ac_fail(w->err, AC_ERR_INPUT, "%s: \"%s\" %s", w->label, field, what);
}

static int check_fields(const cJSON *root, const where *w)
{
    const cJSON *f;
    cJSON_ArrayForEach(f, root)
    {
        int i = 0;
        while (i < N_FIELDS && strcmp(f->string, known_fields[i]) != 0)
            i++;
        if (i == N_FIELDS)
            return ac_fail(
                w->err, AC_ERR_INPUT,
                "%s: unknown field \"%s\" (fields: name, description, dtypes, "
                "head_dims or max_head_dim, masks, layouts, gqa, varlen, backward, max_seqlen, paged, split)",
                w->label, f->string);
    }
    return AC_OK;
}

/* A whole number in lo..hi. */
static int integer(const cJSON *j, const char *field, int lo, int hi, int *out, const where *w)
{
    if (!cJSON_IsNumber(j) || j->valuedouble != floor(j->valuedouble) || j->valuedouble < lo || j->valuedouble > hi) {
        char what[96];
        snprintf(what, sizeof what, "must be a whole number in %d..%d", lo, hi);
        return bad(w, field, what);
    }
    *out = (int)j->valuedouble;
    return AC_OK;
}

static int flag(const cJSON *root, const char *field, bool *out, const where *w)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, field);
    if (j && !cJSON_IsBool(j))
        return bad(w, field, "must be true or false");
    *out = j && cJSON_IsTrue(j);
    return AC_OK;
}

/* A non-empty list of strings, each parsed into a bit by parse(). */
static int names(const cJSON *root, const char *field, int (*parse)(const char *, unsigned *), const char *choices,
                 unsigned *bits, const where *w)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, field), *e;
    *bits = 0;
    char what[256];
    snprintf(what, sizeof what, "must be a non-empty list of names from: %s", choices);
    if (!cJSON_IsArray(j) || cJSON_GetArraySize(j) == 0)
        return bad(w, field, what);
    cJSON_ArrayForEach(e, j)
    {
        unsigned bit;
        if (!cJSON_IsString(e) || parse(e->valuestring, &bit) != AC_OK) {
            snprintf(what, sizeof what, "has an unknown entry %s%s%s (known: %s)", cJSON_IsString(e) ? "'" : "",
                     cJSON_IsString(e) ? e->valuestring : "that is not a string", cJSON_IsString(e) ? "'" : "",
                     choices);
            return bad(w, field, what);
        }
        *bits |= bit;
    }
    return AC_OK;
}

static int parse_dtype(const char *s, unsigned *bit)
{
    ac_dtype t;
    int st = ac_dtype_parse(s, &t);
    *bit = 1u << t;
    return st;
}

static int parse_layout(const char *s, unsigned *bit)
{
    *bit = !strcmp(s, "bhsd") ? 1u << AC_LAYOUT_BHSD : !strcmp(s, "bshd") ? 1u << AC_LAYOUT_BSHD : 0;
    return *bit ? AC_OK : AC_ERR_INPUT;
}

static int parse_mask_kind(const char *s, unsigned *bit)
{
    ac_mask_kind k;
    int st = ac_mask_from_name(s, strlen(s), &k);
    *bit = 1u << k;
    return st;
}

/* Kinds listed -> capability bits.  The two windows share one bit and come in the
 * alignments claimed for causal, so the bits may imply a kind that was not listed:
 * that is refused, so what is fuzzed is exactly what the file lists. */
static int mask_caps(unsigned kinds, unsigned *caps, const where *w)
{
    *caps = 0;
    for (int k = 0; k < AC_MASK_KIND_COUNT; k++)
        if (kinds & (1u << k))
            *caps |= ac_mask_bit((ac_mask_kind)k);
    for (int k = 0; k < AC_MASK_KIND_COUNT; k++) {
        unsigned needs = ac_mask_needs((ac_mask_kind)k);
        bool listed = kinds & (1u << k), implied = (*caps & needs) == needs;
        char what[256];
        if (listed && !implied) {
            snprintf(what, sizeof what,
                     "lists %s without %s: a window is claimed in the alignments claimed for "
                     "causal (as in the plugin ABI)",
                     ac_mask_name((ac_mask_kind)k),
                     ac_mask_align((ac_mask_kind)k) == AC_ALIGN_BOTTOM_RIGHT ? "causal-br" : "causal-tl");
            return bad(w, "masks", what);
        }
        if (implied && !listed) {
            snprintf(what, sizeof what,
                     "implies %s (one window bit for both alignments claimed for causal, as in "
                     "the plugin ABI): list it too, or drop the window",
                     ac_mask_name((ac_mask_kind)k));
            return bad(w, "masks", what);
        }
    }
    return AC_OK;
}

static int head_dims(const cJSON *root, ac_caps *c, const where *w)
{
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(root, "head_dims");
    const cJSON *max = cJSON_GetObjectItemCaseSensitive(root, "max_head_dim"), *e;
    if (!list == !max)
        return ac_fail(w->err, AC_ERR_INPUT, "%s: give \"head_dims\" (a list) or \"max_head_dim\", one of them",
                       w->label);
    if (max)
        return integer(max, "max_head_dim", 1, AC_MAX_HEAD_DIM, &c->max_head_dim, w);
    if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) < 1 || cJSON_GetArraySize(list) > AC_MAX_LISTED_HEAD_DIMS) {
        char what[96];
        snprintf(what, sizeof what, "must list 1 to %d head dims", AC_MAX_LISTED_HEAD_DIMS);
        return bad(w, "head_dims", what);
    }
    cJSON_ArrayForEach(e, list)
    {
        int st = integer(e, "head_dims", 1, AC_MAX_HEAD_DIM, &c->head_dims[c->n_head_dims], w);
        if (st != AC_OK)
            return st;
        c->max_head_dim =
            c->head_dims[c->n_head_dims] > c->max_head_dim ? c->head_dims[c->n_head_dims] : c->max_head_dim;
        c->n_head_dims++;
    }
    return AC_OK;
}

static int kernel_name(const cJSON *root, char *name, size_t len, const where *w)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, "name");
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(root, "description");
    if (d && !cJSON_IsString(d))
        return bad(w, "description", "must be a string");
    if (!j) {
        snprintf(name, len, "exec");
        return AC_OK;
    }
    bool ok = cJSON_IsString(j) && j->valuestring[0] && strlen(j->valuestring) < 64 && strlen(j->valuestring) < len;
    for (const char *s = ok ? j->valuestring : ""; *s; s++)
        ok &= (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || strchr("-_.", *s);
    if (!ok)
        return bad(w, "name", "must be 1-63 characters of [A-Za-z0-9._-]");
    snprintf(name, len, "%s", j->valuestring);
    return AC_OK;
}

static int caps_from(const cJSON *root, ac_caps *c, char *name, size_t name_len, const where *w)
{
    unsigned kinds = 0;
    int st = check_fields(root, w);
    if (st == AC_OK)
        st = kernel_name(root, name, name_len, w);
    if (st == AC_OK)
        st = names(root, "dtypes", parse_dtype, "f32, f16, bf16", &c->dtypes, w);
    if (st == AC_OK)
        st = head_dims(root, c, w);
    if (st == AC_OK)
        st = names(root, "masks", parse_mask_kind, ac_mask_names(), &kinds, w);
    if (st == AC_OK)
        st = mask_caps(kinds, &c->masks, w);
    if (st == AC_OK)
        st = names(root, "layouts", parse_layout, "bhsd, bshd", &c->layouts, w);
    if (st == AC_OK)
        st = flag(root, "gqa", &c->gqa, w);
    if (st == AC_OK)
        st = flag(root, "varlen", &c->varlen, w);
    if (st == AC_OK)
        st = flag(root, "backward", &c->backward, w);
    bool paged = false, split = false; /* a paged KV cache (k, v as pages, block_table.npy); split-KV hints */
    bool dv = false; /* V (and O) with d_v columns of their own (v.npy's last dimension; head_dim_v) */
    if (st == AC_OK)
        st = flag(root, "paged", &paged, w);
    if (st == AC_OK)
        st = flag(root, "split", &split, w);
    if (st == AC_OK)
        st = flag(root, "dv", &dv, w);
    if (st == AC_OK) /* reads V as K's first d_v channels: given only v=k cases (problem.json "v_from_k") */
        st = flag(root, "v_from_k", &c->v_from_k, w);
    c->variants =
        (paged ? (unsigned)AC_VAR_PAGED : 0u) | (split ? (unsigned)AC_VAR_SPLIT : 0u) | (dv ? (unsigned)AC_VAR_DV : 0u);
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(root, "max_seqlen");
    if (st == AC_OK && ms)
        st = integer(ms, "max_seqlen", 0, 1 << 30, &c->max_seqlen, w);
    return st;
}

int ac_exec_caps_parse(const char *json, size_t len, const char *label, ac_caps *caps, char *name, size_t name_len,
                       ac_err *err)
{
    memset(caps, 0, sizeof *caps);
    where w = {label, err};
    cJSON *root = cJSON_ParseWithLength(json, len);
    int st;
    if (!root)
        st = ac_fail(err, AC_ERR_INPUT, "%s: not valid JSON (near \"%.20s\")", label,
                     cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() : "");
    else if (!cJSON_IsObject(root))
        st = ac_fail(err, AC_ERR_INPUT, "%s: expected a JSON object of capabilities", label);
    else
        st = caps_from(root, caps, name, name_len, &w);
    cJSON_Delete(root);
    return st;
}

int ac_exec_caps_load(const char *path, ac_caps *caps, char *name, size_t name_len, ac_err *err)
{
    char *text = NULL;
    size_t len = 0;
    int st = ac_read_file(path, &text, &len, err);
    if (st == AC_OK && !text)
        st = ac_fail(err, AC_ERR_INPUT, "--caps %s: no such file", path);
    if (st == AC_OK)
        st = ac_exec_caps_parse(text, len, path, caps, name, name_len, err);
    free(text);
    return st;
}
