/* ref/cuda/test_gpuref_cases.c — the case lines attncheck-test-gpuref runs:
 * the fixture corpus as it is on disk, and random lines that cover every mask
 * kind in every dtype and layout, with GQA/MQA, varlen (empty sequences
 * included), Nq != Nk, fully masked rows and the input distributions. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_gpuref.h"

int tg_add_line(tg_lines *l, const char *line, const char *where, ac_err *err)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        tg_line *grown = realloc(l->lines, cap * sizeof *grown);
        if (!grown)
            return ac_fail(err, AC_ERR_ENV, "out of memory for case lines");
        l->lines = grown;
        l->cap = cap;
    }
    snprintf(l->lines[l->n].line, sizeof l->lines[l->n].line, "%s", line);
    snprintf(l->lines[l->n].where, sizeof l->lines[l->n].where, "%s", where);
    l->n++;
    return AC_OK;
}

void tg_lines_free(tg_lines *l)
{
    free(l->lines);
    memset(l, 0, sizeof *l);
}

double tg_case_work(const ac_case *c)
{
    return (double)c->batch * c->heads_q * c->seqlen_q * c->seqlen_k * c->head_dim;
}

static int is_cases_file(const struct dirent *e)
{
    size_t n = strlen(e->d_name);
    return n > 6 && strcmp(e->d_name + n - 6, ".cases") == 0;
}

static int load_file(tg_lines *l, const char *dir, const char *name, ac_err *err)
{
    char path[1024], buf[4096], where[160];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    if (!f)
        return ac_fail(err, AC_ERR_INPUT, "%s: cannot open", path);
    int status = AC_OK;
    for (long lineno = 1; status == AC_OK && fgets(buf, sizeof buf, f); lineno++) {
        char *s = buf;
        while (*s == ' ' || *s == '\t')
            s++;
        s[strcspn(s, "\r\n")] = '\0';
        if (*s == '\0' || *s == '#')
            continue;
        snprintf(where, sizeof where, "%.100s:%ld", name, lineno);
        status = tg_add_line(l, s, where, err);
    }
    fclose(f);
    return status;
}

int tg_load_fixtures(tg_lines *l, const char *dir, ac_err *err)
{
    struct dirent **names;
    int n = scandir(dir, &names, is_cases_file, alphasort);
    if (n < 0)
        return ac_fail(err, AC_ERR_INPUT, "%s: cannot list the fixture directory", dir);
    int status = AC_OK;
    for (int i = 0; i < n; i++) {
        if (status == AC_OK)
            status = load_file(l, dir, names[i]->d_name, err);
        free(names[i]);
    }
    free(names);
    if (status == AC_OK && n == 0)
        status = ac_fail(err, AC_ERR_INPUT, "%s: no *.cases file", dir);
    return status;
}

/* ---- random lines -------------------------------------------------------------- */

static uint64_t next(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int pick(uint64_t *state, int n) { return (int)(next(state) % (uint64_t)n); }

static const char *mask_text(uint64_t *rng, int kind, char *buf, size_t len)
{
    static const char *const sides[] = {"0", "1", "3", "17", "inf"};
    static const char *const keeps[] = {"0.05", "0.3", "0.7", "1"};
    static const char *const rows[] = {"", " maskrows=0.25", " maskrows=1", " maskrows=0.1"};
    const char *left = sides[pick(rng, 5)], *right = sides[pick(rng, 4)]; /* not both inf */
    switch (kind) {
    case 0:
        return "none";
    case 1:
        return "causal-tl";
    case 2:
        return "causal-br";
    case 3:
        snprintf(buf, len, "window-tl(%s,%s)", left, right);
        return buf;
    case 4:
        snprintf(buf, len, "window-br(%s,%s)", left, right);
        return buf;
    default:
        snprintf(buf, len, "dense(%s)%s", keeps[pick(rng, 4)], rows[pick(rng, 4)]);
        return buf;
    }
}

/* " seqlens-q=..." for b sequences of at most n, with an empty one now and then. */
static void seqlens_text(uint64_t *rng, const char *name, int b, int n, char *buf, size_t len)
{
    int at = snprintf(buf, len, " %s=", name);
    for (int s = 0; s < b && at < (int)len; s++) {
        int kind = pick(rng, 4), v = kind == 0 ? 0 : kind == 1 ? n : 1 + pick(rng, n);
        at += snprintf(buf + at, len - (size_t)at, "%s%d", s ? "," : "", v);
    }
}

static const char *dist_text(uint64_t *rng)
{
    static const char *const dists[] = {
        "normal(0,1)",   "normal(0,1)", "normal(0,1)",  "normal(1,0.5)", "uniform(-2,2)", "outliers(1,0.01)",
        "increasing(8)", "equal()",     "dominant(10)", "huge(0.5)",     "tiny()",
    };
    return dists[pick(rng, (int)(sizeof dists / sizeof dists[0]))];
}

/* Shapes: lengths that cross block edges (64, 65, 127, 200), tiny ones, Nq != Nk. */
static void draw_shape(uint64_t *rng, int *b, int *hq, int *hkv, int *nq, int *nk, int *d)
{
    static const int lens[] = {1, 2, 5, 16, 33, 64, 65, 127, 200, 257};
    static const int dims[] = {1, 3, 8, 16, 40, 64, 96, 128};
    static const int heads[][2] = {{1, 1}, {2, 2}, {3, 1}, {4, 2}, {6, 3}, {8, 1}, {8, 2}};
    int hh = pick(rng, 7);
    *b = 1 + pick(rng, 3);
    *hq = heads[hh][0];
    *hkv = heads[hh][1];
    *nq = lens[pick(rng, 10)];
    *nk = pick(rng, 4) == 0 ? *nq : lens[pick(rng, 10)];
    *d = dims[pick(rng, 8)];
    while ((double)*b * *hq * *nq * *nk * *d > (double)(1 << 22) && *d > 8)
        *d /= 2; /* keep the CPU bundle quick */
}

int tg_random_lines(tg_lines *l, uint64_t seed, int n, ac_err *err)
{
    static const char *const dtypes[] = {"f32", "f16", "bf16"};
    static const char *const scales[] = {"auto", "auto", "auto", "0.5", "2"};
    uint64_t rng = seed;
    for (int k = 0; k < n; k++) {
        int b, hq, hkv, nq, nk, d;
        draw_shape(&rng, &b, &hq, &hkv, &nq, &nk, &d);
        char mask[96], sq[160] = "", sk[160] = "", line[AC_CASE_LINE_MAX], where[32];
        const char *m = mask_text(&rng, k % 6, mask, sizeof mask);
        if (pick(&rng, 3) == 0) {
            seqlens_text(&rng, "seqlens-q", b, nq, sq, sizeof sq);
            seqlens_text(&rng, "seqlens-k", b, nk, sk, sizeof sk);
        }
        snprintf(line, sizeof line,
                 "v1 seed=%d b=%d hq=%d hkv=%d nq=%d nk=%d d=%d dtype=%s mask=%s%s%s "
                 "layout=%s dist=%s scale=%s",
                 1 + pick(&rng, 1 << 30), b, hq, hkv, nq, nk, d, dtypes[(k / 6) % 3], m, sq, sk,
                 (k / 18) % 2 ? "bshd" : "bhsd", dist_text(&rng), scales[pick(&rng, 5)]);
        snprintf(where, sizeof where, "random #%d", k);
        int status = tg_add_line(l, line, where, err);
        if (status != AC_OK)
            return status;
    }
    return AC_OK;
}
