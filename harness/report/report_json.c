/* harness/report/report_json.c — --json FILE: JSON Lines, one object per case:
 * kernel, case index, case line, dtype, verdict, kind, why, certification, the
 * reference tier (and its GPU spot check), every metric of every output, and
 * the minimal line of a failure; first an {"type":"environment"} record, last
 * a {"type":"campaign"} one (ac_report_record).  Case records carry no
 * timings: the same seed and options give byte-identical case records.
 * Numbers are printed in the shortest form that reads back exactly (non-finite
 * ones as strings), so `attncheck merge` reads back exactly what was measured. */
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

/* The shortest of %.15g, %.16g, %.17g that reads back to exactly x (cJSON's
 * own printing accepts a 1-ulp difference, and merge must read back the very
 * values measured); non-finite numbers as strings. */
static void add_number(cJSON *o, const char *key, double x)
{
    if (!isfinite(x)) {
        cJSON_AddStringToObject(o, key, isnan(x) ? "nan" : x > 0 ? "inf" : "-inf");
        return;
    }
    char text[32];
    for (int digits = 15; digits <= 17; digits++) {
        snprintf(text, sizeof text, "%.*g", digits, x);
        if (strtod(text, NULL) == x)
            break;
    }
    cJSON_AddRawToObject(o, key, text);
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

/* The classes of one output that failed (ac_metrics.failed), in the gate's order. */
static cJSON *failed_json(const ac_metrics *m)
{
    cJSON *a = cJSON_CreateArray();
    for (int k = 0; k < AC_SPECIAL_COUNT; k++)
        if (m->failed & (1u << k))
            cJSON_AddItemToArray(a, cJSON_CreateString(ac_special_name((ac_special)k)));
    if (m->failed & AC_FAILED_SCALED)
        cJSON_AddItemToArray(a, cJSON_CreateString("scaled"));
    if (m->failed & AC_FAILED_VS_NAIVE)
        cJSON_AddItemToArray(a, cJSON_CreateString("vs-naive-mean"));
    return a;
}

/* Where a failing output's elements over budget are: per head, per row (the first rows). */
static cJSON *over_json(const ac_metrics *m)
{
    cJSON *o = cJSON_CreateObject();
    add_number(o, "elements", (double)m->n_over);
    int heads = m->n_heads < AC_DIAG_MAX_HEADS ? m->n_heads : AC_DIAG_MAX_HEADS;
    cJSON *h = cJSON_AddArrayToObject(o, "per_head");
    for (int i = 0; i < heads; i++)
        cJSON_AddItemToArray(h, cJSON_CreateNumber((double)m->over_per_head[i]));
    add_number(o, "rows_over", m->n_rows_over);
    add_number(o, "first_row", m->first_row_over);
    add_number(o, "last_row", m->last_row_over);
    cJSON *r = cJSON_AddArrayToObject(o, "per_row"); /* [row, count], the first AC_DIAG_MAX_ROWS rows over */
    for (int i = 0; i < m->n_rows_listed; i++) {
        double pair[2] = {m->rows_over[i].row, (double)m->rows_over[i].n};
        cJSON_AddItemToArray(r, cJSON_CreateDoubleArray(pair, 2));
    }
    return o;
}

/* What the gate and the diagnosis say of one output: budgets, failed classes, the worst element's
 * values, where the elements over budget are, the hint.  Beside "outputs", whose values stay numbers. */
static cJSON *diagnosis_json(const ac_metrics *m)
{
    cJSON *o = cJSON_CreateObject();
    add_number(o, "budget_scaled", m->budget_scaled);
    add_number(o, "budget_vs_naive_mean", m->budget_vs_naive_mean);
    cJSON_AddBoolToObject(o, "vs_naive_applies", m->vs_naive_applies);
    cJSON *w = cJSON_AddObjectToObject(o, "at_max_scaled_values");
    add_number(w, "expected", m->worst_ref);
    add_number(w, "actual", m->worst_got);
    add_number(w, "escale", m->worst_escale);
    cJSON *sp = cJSON_AddObjectToObject(o, "first_special_values");
    add_number(sp, "expected", m->special_ref);
    add_number(sp, "actual", m->special_got);
    cJSON_AddItemToObject(o, "failed", failed_json(m));
    if (m->failed)
        cJSON_AddItemToObject(o, "over_budget", over_json(m));
    add_text(o, "hint", m->hint);
    return o;
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
    add_number(o, "rmse", m->rmse);
    cJSON_AddBoolToObject(o, "has_naive", m->has_naive);
    add_number(o, "naive_max_abs", m->naive_max_abs);
    add_number(o, "naive_mean_abs", m->naive_mean_abs);
    add_number(o, "naive_rmse", m->naive_rmse);
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
    add_number(o, "n_measured", (double)m->n_measured);
    return o;
}

/* The tier that computed the reference (absent when none ran) and its spot check. */
static void add_reference(cJSON *o, const ac_ref_info *ref, bool none_ran)
{
    if (none_ran)
        return;
    cJSON *r = cJSON_AddObjectToObject(o, "reference");
    cJSON_AddStringToObject(r, "tier", ac_ref_tier_name(ref->tier));
    if (!ref->spot_checked)
        return;
    cJSON *sc = cJSON_AddObjectToObject(r, "spot_check");
    cJSON_AddBoolToObject(sc, "agrees", ref->spot_agrees);
    add_number(sc, "units", ref->spot_units);
    cJSON_AddStringToObject(sc, "output", ref->spot_output);
    add_number(sc, "rows", (double)ref->spot_rows);
    add_number(sc, "keys", (double)ref->spot_keys);
}

static void json_line(json_state *js, cJSON *o)
{
    char *text = cJSON_PrintUnformatted(o);
    if (text) {
        fputs(text, js->f);
        fputc('\n', js->f);
        cJSON_free(text);
    }
    cJSON_Delete(o);
}

static void json_record(void *state, const char *type, const ac_report_field *fields, size_t n)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", type);
    for (size_t i = 0; i < n; i++) {
        const ac_report_field *f = &fields[i];
        if (f->type == AC_FIELD_STRING && f->s)
            add_text(o, f->key, f->s);
        else if (f->type == AC_FIELD_NUMBER)
            add_number(o, f->key, f->x);
        else if (f->type == AC_FIELD_BOOL)
            cJSON_AddBoolToObject(o, f->key, f->x != 0);
    }
    json_line(state, o);
}

static void json_write(void *state, const char *kernel, const ac_result *res, const char *minimal_line)
{
    json_state *js = state;
    cJSON *o = cJSON_CreateObject();
    add_text(o, "kernel", kernel);
    add_number(o, "index", (double)res->index);
    add_text(o, "case", res->line);
    cJSON_AddStringToObject(o, "dtype", ac_dtype_name(res->dtype));
    cJSON_AddStringToObject(o, "verdict", report_verdict_name(res));
    add_number(o, "status", res->status);
    add_text(o, "kind", res->kind);
    add_text(o, "why", res->why);
    cJSON *cert = cJSON_AddObjectToObject(o, "certification");
    add_number(cert, "rows_checked", (double)res->cert.rows_checked);
    cJSON_AddBoolToObject(cert, "certified", res->cert.certified);
    add_number(cert, "max_ulp_o", res->cert.max_ulp_o);
    add_number(cert, "max_abs_lse", res->cert.max_abs_lse);
    cJSON *fails = cJSON_AddArrayToObject(o, "failures"); /* every OUTPUT:class, forward first; kind is the first */
    for (int k = 0; k < AC_OUT_COUNT; k++) {
        cJSON *classes = res->m[k].present ? failed_json(&res->m[k]) : cJSON_CreateArray(), *c;
        cJSON_ArrayForEach(c, classes)
        {
            char kind[AC_KIND_LEN];
            snprintf(kind, sizeof kind, "%s:%s", ac_output_name((ac_output)k), c->valuestring);
            cJSON_AddItemToArray(fails, cJSON_CreateString(kind));
        }
        cJSON_Delete(classes);
    }
    add_reference(o, &res->ref, res->unsupported || res->status != AC_OK);
    cJSON *outs = cJSON_AddObjectToObject(o, "outputs");
    for (int k = 0; k < AC_OUT_COUNT; k++)
        if (res->m[k].present)
            cJSON_AddItemToObject(outs, ac_output_name((ac_output)k), metrics_json(&res->m[k]));
    cJSON *diag = cJSON_AddObjectToObject(o, "diagnosis");
    for (int k = 0; k < AC_OUT_COUNT; k++)
        if (res->m[k].present)
            cJSON_AddItemToObject(diag, ac_output_name((ac_output)k), diagnosis_json(&res->m[k]));
    if (res->verdict == AC_VERDICT_FAIL && minimal_line)
        add_text(o, "minimal", minimal_line);
    json_line(js, o);
}

static void json_write_check(void *state, const ac_report_check *c)
{
    json_state *js = state;
    fputs(c->json, js->f);
    fputc('\n', js->f);
}

static void json_write_raw(void *state, const char *text)
{
    json_state *js = state;
    fputs(text, js->f);
    fputc('\n', js->f);
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

const ac_report_format ac_report_json = {"--json",    "FILE  JSON Lines, one object per case",
                                         json_open,   json_write,
                                         json_close,  json_write_check,
                                         json_record, json_write_raw};
