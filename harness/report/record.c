/* harness/report/record.c — JSON Lines records read back into what wrote
 * them (report_json.c is the other half: a key added there is read here). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "harness/report/record.h"

/* ---- values ---------------------------------------------------------------------- */

/* A number as report_json.c writes it: a JSON number, or "nan", "inf", "-inf". */
static bool number_of(const cJSON *item, double *x)
{
    if (cJSON_IsNumber(item)) {
        *x = item->valuedouble;
        return true;
    }
    if (!cJSON_IsString(item))
        return false;
    const char *s = item->valuestring;
    if (!strcmp(s, "nan"))
        *x = NAN;
    else if (!strcmp(s, "inf"))
        *x = INFINITY;
    else if (!strcmp(s, "-inf"))
        *x = -INFINITY;
    else
        return false;
    return true;
}

typedef struct {
    const char *where; /* "outputs.O" ... for messages */
    ac_err *err;
    int status;
} reader;

static double num(reader *rd, const cJSON *o, const char *key)
{
    double x = 0;
    if (rd->status == AC_OK && !number_of(cJSON_GetObjectItemCaseSensitive(o, key), &x))
        rd->status = ac_fail(rd->err, AC_ERR_INPUT, "%s%s%s: not a number", rd->where, *rd->where ? "." : "", key);
    return x;
}

static size_t count(reader *rd, const cJSON *o, const char *key)
{
    double x = num(rd, o, key);
    return x >= 0 && isfinite(x) ? (size_t)x : 0;
}

static bool flag(reader *rd, const cJSON *o, const char *key)
{
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(o, key);
    if (rd->status == AC_OK && !cJSON_IsBool(b))
        rd->status = ac_fail(rd->err, AC_ERR_INPUT, "%s%s%s: not a boolean", rd->where, *rd->where ? "." : "", key);
    return cJSON_IsTrue(b);
}

static void text(reader *rd, const cJSON *o, const char *key, char *out, size_t len)
{
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsString(s))
        snprintf(out, len, "%s", s->valuestring);
    else if (rd->status == AC_OK)
        rd->status = ac_fail(rd->err, AC_ERR_INPUT, "%s%s%s: not a string", rd->where, *rd->where ? "." : "", key);
}

static ac_where where_of(reader *rd, const cJSON *o, const char *key)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, key);
    int v[4] = {-1, -1, -1, -1};
    if (cJSON_IsArray(a) && cJSON_GetArraySize(a) == 4)
        for (int i = 0; i < 4; i++)
            v[i] = (int)cJSON_GetArrayItem(a, i)->valuedouble;
    else if (rd->status == AC_OK)
        rd->status = ac_fail(rd->err, AC_ERR_INPUT, "%s.%s: not an array of 4 numbers", rd->where, key);
    return (ac_where){v[0], v[1], v[2], v[3]};
}

/* ---- a case record ------------------------------------------------------------- */

static void read_metrics(reader *rd, const cJSON *o, ac_metrics *m)
{
    m->present = true;
    m->n_compared = count(rd, o, "n_compared");
    m->n_mean = count(rd, o, "n_mean");
    m->max_ulp = num(rd, o, "max_ulp");
    m->mean_ulp = num(rd, o, "mean_ulp");
    m->at_max_ulp = where_of(rd, o, "at_max_ulp");
    m->max_scaled = num(rd, o, "max_scaled");
    m->at_max_scaled = where_of(rd, o, "at_max_scaled");
    m->max_abs = num(rd, o, "max_abs");
    m->mean_abs = num(rd, o, "mean_abs");
    m->has_naive = flag(rd, o, "has_naive");
    m->naive_max_abs = num(rd, o, "naive_max_abs");
    m->naive_mean_abs = num(rd, o, "naive_mean_abs");
    /* rmse, naive_rmse: since fp8 (issue 17); older records lack them and read 0 */
    const cJSON *rmse = cJSON_GetObjectItemCaseSensitive(o, "rmse"),
                *naive_rmse = cJSON_GetObjectItemCaseSensitive(o, "naive_rmse");
    m->rmse = cJSON_IsNumber(rmse) ? rmse->valuedouble : 0.0;
    m->naive_rmse = cJSON_IsNumber(naive_rmse) ? naive_rmse->valuedouble : 0.0;
    m->vs_naive_max = num(rd, o, "vs_naive_max");
    m->vs_naive_mean = num(rd, o, "vs_naive_mean");
    m->mean_escale = num(rd, o, "mean_escale");
    m->n_unexpected_nan = count(rd, o, "unexpected_nan");
    m->n_overflow = count(rd, o, "overflow");
    m->n_lost_special = count(rd, o, "lost_special");
    m->n_wrong_zero = count(rd, o, "wrong_zero");
    m->n_unwritten = count(rd, o, "unwritten");
    m->first_special = where_of(rd, o, "first_special");
    m->masked_rows = count(rd, o, "masked_rows");
    m->masked_rows_zero = count(rd, o, "masked_rows_zero");
    m->masked_rows_nan = count(rd, o, "masked_rows_nan");
    m->masked_rows_lse_posinf = count(rd, o, "masked_rows_lse_posinf");
    m->n_measured = count(rd, o, "n_measured");
}

/* What the summary reads of an output's "diagnosis" (its gated budgets); a
 * record without one (an older attncheck) leaves them 0, as a run without the
 * gate would. */
static void read_diagnosis(reader *rd, const cJSON *o, ac_metrics *m)
{
    m->budget_scaled = num(rd, o, "budget_scaled");
    m->budget_vs_naive_mean = num(rd, o, "budget_vs_naive_mean");
    m->vs_naive_applies = flag(rd, o, "vs_naive_applies");
}

static void read_diagnoses(reader *rd, const cJSON *diag, ac_result *r)
{
    for (int k = 0; k < AC_OUT_COUNT && rd->status == AC_OK; k++) {
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(diag, ac_output_name((ac_output)k));
        char where[32];
        snprintf(where, sizeof where, "diagnosis.%s", ac_output_name((ac_output)k));
        reader sub = {where, rd->err, AC_OK};
        if (o && r->m[k].present)
            read_diagnosis(&sub, o, &r->m[k]);
        rd->status = sub.status;
    }
}

static void read_outputs(reader *rd, const cJSON *outs, ac_result *r)
{
    for (int k = 0; k < AC_OUT_COUNT && rd->status == AC_OK; k++) {
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(outs, ac_output_name((ac_output)k));
        char where[32];
        snprintf(where, sizeof where, "outputs.%s", ac_output_name((ac_output)k));
        reader sub = {where, rd->err, AC_OK};
        if (o)
            read_metrics(&sub, o, &r->m[k]);
        rd->status = sub.status;
    }
    r->has_backward = r->m[AC_OUT_DQ].present || r->m[AC_OUT_DK].present || r->m[AC_OUT_DV].present;
}

static void read_verdict(reader *rd, const cJSON *o, ac_result *r)
{
    char verdict[16] = "";
    text(rd, o, "verdict", verdict, sizeof verdict);
    r->unsupported = !strcmp(verdict, "skipped");
    r->verdict = !strcmp(verdict, "pass") ? AC_VERDICT_PASS
        : !strcmp(verdict, "fail")        ? AC_VERDICT_FAIL
                                          : AC_VERDICT_ERROR;
    if (rd->status == AC_OK && !r->unsupported && r->verdict == AC_VERDICT_ERROR && strcmp(verdict, "error"))
        rd->status = ac_fail(rd->err, AC_ERR_INPUT, "verdict: '%s' is not pass, fail, error or skipped", verdict);
    r->status = (int)num(rd, o, "status");
    text(rd, o, "kind", r->kind, sizeof r->kind);
    text(rd, o, "why", r->why, sizeof r->why);
}

static void read_certification(reader *rd, const cJSON *o, ac_result *r)
{
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(o, "certification");
    reader sub = {"certification", rd->err, rd->status};
    r->cert.rows_checked = count(&sub, c, "rows_checked");
    r->cert.certified = flag(&sub, c, "certified");
    r->cert.max_ulp_o = num(&sub, c, "max_ulp_o");
    r->cert.max_abs_lse = num(&sub, c, "max_abs_lse");
    rd->status = sub.status;
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(o, "reference");
    const cJSON *tier = cJSON_GetObjectItemCaseSensitive(ref, "tier");
    if (cJSON_IsString(tier) && ac_ref_tier_parse(tier->valuestring, &r->ref.tier, NULL) != AC_OK)
        r->ref.tier = AC_REF_CPU;
    const cJSON *sc = cJSON_GetObjectItemCaseSensitive(ref, "spot_check");
    if (!sc)
        return;
    reader spot = {"reference.spot_check", rd->err, rd->status};
    r->ref.spot_checked = true;
    r->ref.spot_agrees = flag(&spot, sc, "agrees");
    r->ref.spot_units = num(&spot, sc, "units");
    text(&spot, sc, "output", r->ref.spot_output, sizeof r->ref.spot_output);
    r->ref.spot_rows = count(&spot, sc, "rows");
    r->ref.spot_keys = count(&spot, sc, "keys");
    rd->status = spot.status;
}

/* The dtype: the "dtype" key, else the case line's (records of older versions). */
static void read_dtype(reader *rd, const cJSON *o, ac_result *r)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "dtype");
    if (cJSON_IsString(t) && ac_dtype_parse(t->valuestring, &r->dtype) == AC_OK)
        return;
    ac_case c;
    if (ac_case_parse(r->line, &c, NULL) == AC_OK)
        r->dtype = c.dtype;
    else if (rd->status == AC_OK)
        rd->status = ac_fail(rd->err, AC_ERR_INPUT, "dtype: missing, and the case line names none");
}

static int read_case(const cJSON *o, ac_record *rec, ac_err *err)
{
    reader rd = {"", err, AC_OK};
    ac_result *r = &rec->res;
    text(&rd, o, "kernel", rec->kernel, sizeof rec->kernel);
    text(&rd, o, "case", r->line, sizeof r->line);
    const cJSON *index = cJSON_GetObjectItemCaseSensitive(o, "index");
    rec->has_index = cJSON_IsNumber(index) && index->valuedouble >= 0;
    r->index = rec->has_index ? (long)index->valuedouble : -1;
    read_verdict(&rd, o, r);
    if (rd.status == AC_OK)
        read_dtype(&rd, o, r);
    if (rd.status == AC_OK)
        read_certification(&rd, o, r);
    const cJSON *outs = cJSON_GetObjectItemCaseSensitive(o, "outputs");
    if (rd.status == AC_OK && cJSON_IsObject(outs))
        read_outputs(&rd, outs, r);
    const cJSON *diag = cJSON_GetObjectItemCaseSensitive(o, "diagnosis");
    if (rd.status == AC_OK && cJSON_IsObject(diag))
        read_diagnoses(&rd, diag, r);
    const cJSON *minimal = cJSON_GetObjectItemCaseSensitive(o, "minimal");
    if ((rec->has_minimal = cJSON_IsString(minimal)))
        snprintf(rec->minimal, sizeof rec->minimal, "%s", minimal->valuestring);
    return rd.status;
}

/* ---- records ----------------------------------------------------------------------- */

int ac_record_parse(const char *line, ac_record *rec, ac_err *err)
{
    memset(rec, 0, sizeof *rec);
    cJSON *o = cJSON_Parse(line);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return ac_fail(err, AC_ERR_INPUT, "not a JSON object");
    }
    rec->json = o;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(o, "type");
    if (!type)
        return read_case(o, rec, err);
    if (!cJSON_IsString(type))
        return ac_fail(err, AC_ERR_INPUT, "type: not a string");
    snprintf(rec->type_name, sizeof rec->type_name, "%s", type->valuestring);
    rec->type = !strcmp(type->valuestring, "environment") ? AC_RECORD_ENVIRONMENT
        : !strcmp(type->valuestring, "campaign")          ? AC_RECORD_CAMPAIGN
                                                          : AC_RECORD_OTHER;
    return AC_OK;
}

void ac_record_free(ac_record *rec)
{
    cJSON_Delete(rec->json);
    rec->json = NULL;
}

const char *ac_record_value(const ac_record *rec, const char *key, char *buf, size_t len)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(rec->json, key);
    char *s = v ? cJSON_PrintUnformatted(v) : NULL;
    if (!s)
        return NULL;
    snprintf(buf, len, "%s", s);
    cJSON_free(s);
    return buf;
}

size_t ac_record_fields(const ac_record *rec, ac_report_field *out, size_t max)
{
    size_t n = 0;
    const cJSON *o = rec->json, *v;
    cJSON_ArrayForEach(v, o)
    {
        if (n == max || !strcmp(v->string, "type"))
            continue;
        if (cJSON_IsString(v))
            out[n++] = (ac_report_field){v->string, AC_FIELD_STRING, v->valuestring, 0};
        else if (cJSON_IsNumber(v))
            out[n++] = (ac_report_field){v->string, AC_FIELD_NUMBER, NULL, v->valuedouble};
        else if (cJSON_IsBool(v))
            out[n++] = (ac_report_field){v->string, AC_FIELD_BOOL, NULL, cJSON_IsTrue(v)};
    }
    return n;
}
