/* harness/verdict/baseline_load.c — the old run of a baseline comparison,
 * read from the JSON Lines of `attncheck fuzz|run|check --json`
 * (harness/report/report_json.c writes them).  Case records only; records with
 * a "type" (environment, campaign, baseline results) are skipped. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "harness/verdict/baseline.h"
#include "harness/verdict/baseline_internal.h"

#define MAX_KERNELS 64

typedef struct {
    const char *path;
    long line_no;
    char kernels[MAX_KERNELS][AC_KERNEL_NAME_LEN];
    int n_kernels;
    int *kernel_of; /* per old case, while loading */
    size_t cap_kernel_of;
    ac_err *err;
} loader;

static int bad(loader *ld, const char *what, const char *key)
{
    return ac_fail(ld->err, AC_ERR_INPUT, "--baseline %s:%ld: %s%s%s", ld->path, ld->line_no, what, key ? " " : "",
                   key ? key : "");
}

/* A metric: a JSON number, or "inf", "-inf", "nan" (how the writer spells non-finite ones). */
static bool number_of(const cJSON *v, double *out)
{
    if (cJSON_IsNumber(v)) {
        *out = v->valuedouble;
        return true;
    }
    if (!cJSON_IsString(v))
        return false;
    const char *s = v->valuestring;
    *out = !strcmp(s, "inf") ? INFINITY : !strcmp(s, "-inf") ? -INFINITY : !strcmp(s, "nan") ? NAN : 0.0;
    return !strcmp(s, "inf") || !strcmp(s, "-inf") || !strcmp(s, "nan");
}

static int read_outputs(loader *ld, const cJSON *outs, baseline_old *x)
{
    if (!outs)
        return AC_OK;
    if (!cJSON_IsObject(outs))
        return bad(ld, "field 'outputs' is not an object", NULL);
    for (int o = 0; o < AC_OUT_COUNT; o++) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(outs, ac_output_name((ac_output)o));
        if (!m)
            continue;
        if (!cJSON_IsObject(m) || !number_of(cJSON_GetObjectItemCaseSensitive(m, "mean_abs"), &x->mean_abs[o]) ||
            !number_of(cJSON_GetObjectItemCaseSensitive(m, "max_scaled"), &x->max_scaled[o]) ||
            !number_of(cJSON_GetObjectItemCaseSensitive(m, "n_mean"), &x->n_mean[o]))
            return bad(ld, "outputs: needs mean_abs, max_scaled and n_mean numbers in", ac_output_name((ac_output)o));
        x->present[o] = true;
    }
    return AC_OK;
}

static int read_verdict(loader *ld, const char *v, const cJSON *kind, baseline_old *x)
{
    x->verdict = AC_VERDICT_PASS;
    if (!strcmp(v, "fail"))
        x->verdict = AC_VERDICT_FAIL;
    else if (!strcmp(v, "error"))
        x->verdict = AC_VERDICT_ERROR, x->status = AC_ERR_INPUT;
    else if (!strcmp(v, "skipped"))
        x->unsupported = true;
    else if (strcmp(v, "pass") != 0)
        return bad(ld, "verdict is not pass, fail, error or skipped:", v);
    if (cJSON_IsString(kind))
        snprintf(x->kind, sizeof x->kind, "%s", kind->valuestring);
    return AC_OK;
}

static int kernel_index(loader *ld, const char *name)
{
    for (int i = 0; i < ld->n_kernels; i++)
        if (!strcmp(ld->kernels[i], name))
            return i;
    if (ld->n_kernels == MAX_KERNELS)
        return -1;
    snprintf(ld->kernels[ld->n_kernels], AC_KERNEL_NAME_LEN, "%s", name);
    return ld->n_kernels++;
}

static int remember_kernel(loader *ld, size_t at, const char *name)
{
    int k = kernel_index(ld, name);
    if (k < 0)
        return bad(ld, "more kernels than a baseline can hold, at", name);
    if (at >= ld->cap_kernel_of) {
        size_t cap = ld->cap_kernel_of ? 2 * ld->cap_kernel_of : 64;
        int *bigger = realloc(ld->kernel_of, cap * sizeof *bigger);
        if (!bigger)
            return ac_fail(ld->err, AC_ERR_ENV, "out of memory");
        ld->kernel_of = bigger;
        ld->cap_kernel_of = cap;
    }
    ld->kernel_of[at] = k;
    return AC_OK;
}

static int read_case(loader *ld, ac_baseline *b, const cJSON *o)
{
    const cJSON *kernel = cJSON_GetObjectItemCaseSensitive(o, "kernel");
    const cJSON *line = cJSON_GetObjectItemCaseSensitive(o, "case");
    const cJSON *verdict = cJSON_GetObjectItemCaseSensitive(o, "verdict");
    if (!cJSON_IsString(kernel) || !cJSON_IsString(line) || !cJSON_IsString(verdict))
        return bad(ld, "a case record needs the strings kernel, case and verdict", NULL);
    baseline_old x = {0};
    int st = read_verdict(ld, verdict->valuestring, cJSON_GetObjectItemCaseSensitive(o, "kind"), &x);
    if (st == AC_OK)
        st = read_outputs(ld, cJSON_GetObjectItemCaseSensitive(o, "outputs"), &x);
    if (st == AC_OK)
        st = remember_kernel(ld, b->n_old, kernel->valuestring);
    if (st == AC_OK && !(x.line = strdup(line->valuestring)))
        st = ac_fail(ld->err, AC_ERR_ENV, "out of memory");
    if (st == AC_OK && (st = baseline_push_old(b, &x, ld->err)) != AC_OK)
        free(x.line);
    return st;
}

static int read_line(loader *ld, ac_baseline *b, const char *text)
{
    if (strspn(text, " \t\r\n") == strlen(text))
        return AC_OK;
    cJSON *o = cJSON_Parse(text);
    int st = AC_OK;
    if (!o)
        st = bad(ld, "not valid JSON (a file of attncheck --json records is expected)", NULL);
    else if (!cJSON_IsObject(o))
        st = bad(ld, "a record must be a JSON object", NULL);
    else if (!cJSON_GetObjectItemCaseSensitive(o, "type")) /* typed records are not cases */
        st = read_case(ld, b, o);
    cJSON_Delete(o);
    return st;
}

/* Keeps the cases of one kernel: `kernel` when the file has it, else the only one. */
static int pick_kernel(loader *ld, ac_baseline *b, const char *kernel)
{
    int keep = ld->n_kernels == 1 ? 0 : -1;
    for (int i = 0; kernel && i < ld->n_kernels; i++)
        if (!strcmp(ld->kernels[i], kernel))
            keep = i;
    if (ld->n_kernels == 0)
        return ac_fail(ld->err, AC_ERR_INPUT, "--baseline %s: no case records", ld->path);
    if (keep < 0) {
        char names[512] = "";
        for (int i = 0, used = 0; i < ld->n_kernels && used < (int)sizeof names; i++)
            used += snprintf(names + used, sizeof names - (size_t)used, "%s%s", i ? ", " : "", ld->kernels[i]);
        return ac_fail(ld->err, AC_ERR_INPUT, "--baseline %s: records of several kernels (%s) and none is %s", ld->path,
                       names, kernel ? kernel : "the kernel under test");
    }
    size_t n = 0;
    for (size_t i = 0; i < b->n_old; i++) {
        if (ld->kernel_of[i] == keep)
            b->old[n++] = b->old[i];
        else
            free(b->old[i].line);
    }
    b->n_old = n;
    snprintf(b->kernel, sizeof b->kernel, "%s", ld->kernels[keep]);
    return AC_OK;
}

static int read_file(loader *ld, ac_baseline *b, FILE *f)
{
    char *text = NULL;
    size_t cap = 0;
    int st = AC_OK;
    while (st == AC_OK && getline(&text, &cap, f) != -1) {
        ld->line_no++;
        st = read_line(ld, b, text);
    }
    free(text);
    return st;
}

int ac_baseline_load(const char *path, const char *kernel, ac_baseline **out, ac_err *err)
{
    *out = NULL;
    FILE *f = fopen(path, "r");
    if (!f)
        return ac_fail(err, AC_ERR_INPUT, "--baseline %s: %s", path, strerror(errno));
    ac_baseline *b = NULL;
    int st = ac_baseline_create(path, NULL, &b, err);
    loader ld = {.path = path, .err = err};
    if (st == AC_OK)
        st = read_file(&ld, b, f);
    fclose(f);
    if (st == AC_OK)
        st = pick_kernel(&ld, b, kernel);
    free(ld.kernel_of);
    if (st != AC_OK) {
        ac_baseline_free(b);
        return st;
    }
    *out = b;
    return AC_OK;
}
