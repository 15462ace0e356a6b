/* harness/report/report_json.c — --json FILE: JSON Lines, one object per case:
 * kernel, case line, verdict, kind, why, certification, every metric of every
 * output, and the minimal line of a failure.  No timings: the same seed and
 * options give byte-identical output (cJSON prints numbers in the shortest
 * round-tripping form; non-finite ones as strings). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <cjson/cJSON.h>

#include "harness/files/files.h"
#include "harness/report/report.h"
#include "harness/report/report_internal.h"

typedef struct {
    char *body;
    size_t len;
    FILE *f; /* open_memstream on body */
} json_state;

static void *json_open(void)
{
    json_state *js = calloc(1, sizeof *js);
    if (js && !(js->f = open_memstream(&js->body, &js->len))) {
        free(js);
        js = NULL;
    }
    return js;
}

static void add_number(cJSON *o, const char *key, double x)
{
    if (isfinite(x))
        cJSON_AddNumberToObject(o, key, x);
    else
        cJSON_AddStringToObject(o, key, isnan(x) ? "nan" : x > 0 ? "inf" : "-inf");
}

/* Text as valid UTF-8 whatever bytes a plugin or a path put in it (cJSON copies bytes as they are). */
static void add_text(cJSON *o, const char *key, const char *s)
{
    char *clean = report_utf8_clean(s ? s : "");
    cJSON_AddStringToObject(o, key, clean ? clean : "(out of memory)");
    free(clean);
}

static void add_where(cJSON *o, const char *key, ac_where w)
{
    int v[4] = {w.b, w.h, w.row, w.col};
    cJSON_AddItemToObject(o, key, cJSON_CreateIntArray(v, 4));
}

static cJSON *metrics_json(const ac_metrics *m)
{
    cJSON *o = cJSON_CreateObject();
    add_number(o, "n_compared", (double)m->n_compared);
    add_number(o, "n_mean", (double)m->n_mean);
    add_number(o, "max_ulp", m->max_ulp);
    add_number(o, "mean_ulp", m->mean_ulp);
    add_where(o, "at_max_ulp", m->at_max_ulp);
    add_number(o, "max_scaled", m->max_scaled);
    add_where(o, "at_max_scaled", m->at_max_scaled);
    add_number(o, "max_abs", m->max_abs);
    add_number(o, "mean_abs", m->mean_abs);
    cJSON_AddBoolToObject(o, "has_naive", m->has_naive);
    add_number(o, "naive_max_abs", m->naive_max_abs);
    add_number(o, "naive_mean_abs", m->naive_mean_abs);
    add_number(o, "vs_naive_max", m->vs_naive_max);
    add_number(o, "vs_naive_mean", m->vs_naive_mean);
    add_number(o, "mean_escale", m->mean_escale);
    add_number(o, "unexpected_nan", (double)m->n_unexpected_nan);
    add_number(o, "overflow", (double)m->n_overflow);
    add_number(o, "lost_special", (double)m->n_lost_special);
    add_number(o, "wrong_zero", (double)m->n_wrong_zero);
    add_number(o, "unwritten", (double)m->n_unwritten);
    add_where(o, "first_special", m->first_special);
    add_number(o, "masked_rows", (double)m->masked_rows);
    add_number(o, "masked_rows_zero", (double)m->masked_rows_zero);
    add_number(o, "masked_rows_nan", (double)m->masked_rows_nan);
    add_number(o, "masked_rows_lse_posinf", (double)m->masked_rows_lse_posinf);
    return o;
}

static void json_write(void *state, const char *kernel, const ac_result *res, const char *minimal_line)
{
    json_state *js = state;
    cJSON *o = cJSON_CreateObject();
    add_text(o, "kernel", kernel);
    add_text(o, "case", res->line);
    cJSON_AddStringToObject(o, "verdict", report_verdict_name(res));
    add_number(o, "status", res->status);
    add_text(o, "kind", res->kind);
    add_text(o, "why", res->why);
    cJSON *cert = cJSON_AddObjectToObject(o, "certification");
    add_number(cert, "rows_checked", (double)res->cert.rows_checked);
    cJSON_AddBoolToObject(cert, "certified", res->cert.certified);
    add_number(cert, "max_ulp_o", res->cert.max_ulp_o);
    add_number(cert, "max_abs_lse", res->cert.max_abs_lse);
    cJSON *outs = cJSON_AddObjectToObject(o, "outputs");
    for (int k = 0; k < AC_OUT_COUNT; k++)
        if (res->m[k].present)
            cJSON_AddItemToObject(outs, ac_output_name((ac_output)k), metrics_json(&res->m[k]));
    if (res->verdict == AC_VERDICT_FAIL && minimal_line)
        add_text(o, "minimal", minimal_line);
    char *text = cJSON_PrintUnformatted(o);
    if (text) {
        fputs(text, js->f);
        fputc('\n', js->f);
        cJSON_free(text);
    }
    cJSON_Delete(o);
}

static int json_close(void *state, const char *path, ac_err *err)
{
    json_state *js = state;
    fclose(js->f); /* flushes the memstream so its buffer is complete */
    int st = path ? ac_write_atomic(path, js->body ? js->body : "", js->len, err) : AC_OK;
    free(js->body);
    free(js);
    return st;
}

const ac_report_format ac_report_json = {"--json", "FILE  JSON Lines, one object per case", json_open, json_write,
                                         json_close};
