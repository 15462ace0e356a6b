/* harness/verdict/budget.c — the budgets file.
 *
 * The budgets live in one versioned, reviewed file (budgets.txt at the
 * repository root, format in budget.h and in the file itself) so a change of
 * tolerance shows up in review.  The gate (gate.c) applies them. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attncheck_config.h"
#include "harness/case/case.h"
#include "harness/verdict/budget.h"

#define DEFAULT_GROWTH_LENGTH 64.0
#define DEFAULT_REGRESSION_RATIO 1.05 /* = AC_DEFAULT_REGRESSION_RATIO (verdict/baseline.h) */
#define DEFAULT_REGRESSION_P 1e-3

enum { METRIC_SCALED = 0, METRIC_VS_NAIVE_MEAN = 1, METRIC_COUNT };
static const char *const metric_names[METRIC_COUNT] = {"scaled", "vs-naive-mean"};

const char *ac_budgets_default_path(void)
{
    const char *env = getenv("ATTNCHECK_BUDGETS");
    return env && *env ? env : ATTNCHECK_SOURCE_DIR "/budgets.txt";
}

/* ---- parsing -------------------------------------------------------------- */

typedef struct {
    const char *path;
    int line_no;
    bool have_version;
    int seen_on[AC_DTYPE_COUNT][AC_OUT_COUNT][METRIC_COUNT]; /* line number, 0 = not yet */
    ac_budgets *b;
    ac_err *err;
} parser;

static int parse_fail(parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int parse_fail(parser *ps, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ac_fail(ps->err, AC_ERR_INPUT, "%s:%d: %s", ps->path, ps->line_no, msg);
}

/* A positive decimal, read as strictly as a case line's numbers (case.h). */
static bool parse_number(const char *s, double *out)
{
    double v;
    if (!ac_read_decimal(s, &v) || v <= 0.0)
        return false;
    *out = v;
    return true;
}

static bool parse_output(const char *s, ac_output *out)
{
    for (int o = 0; o < AC_OUT_COUNT; o++)
        if (strcmp(s, ac_output_name((ac_output)o)) == 0) {
            *out = (ac_output)o;
            return true;
        }
    return false;
}

static bool parse_metric(const char *s, int *out)
{
    for (int k = 0; k < METRIC_COUNT; k++)
        if (strcmp(s, metric_names[k]) == 0) {
            *out = k;
            return true;
        }
    return false;
}

static int parse_directive(parser *ps, char **tok, int ntok)
{
    if (strcmp(tok[0], "version") == 0) {
        if (ntok != 2 || strcmp(tok[1], "1") != 0)
            return parse_fail(ps, "unsupported version line (this attncheck reads 'version 1')");
        ps->have_version = true;
        ps->b->version = 1;
        return AC_OK;
    }
    if (!ps->have_version)
        return parse_fail(ps, "the first line must be 'version 1', got '%s'", tok[0]);
    if (strcmp(tok[0], "regression-ratio") == 0) {
        if (ntok != 2 || !parse_number(tok[1], &ps->b->regression_ratio) || ps->b->regression_ratio <= 1.0)
            return parse_fail(ps, "regression-ratio needs one number > 1");
        return AC_OK;
    }
    if (strcmp(tok[0], "regression-p") == 0) {
        if (ntok != 2 || !parse_number(tok[1], &ps->b->regression_p) || ps->b->regression_p >= 1.0)
            return parse_fail(ps, "regression-p needs one number in (0, 1)");
        return AC_OK;
    }
    if (strncmp(tok[0], "regression-", 11) == 0)
        return parse_fail(ps, "unknown directive '%s' (regression-ratio, regression-p)", tok[0]);
    if (ntok != 2 || !parse_number(tok[1], &ps->b->growth_length))
        return parse_fail(ps, "growth-length needs one positive number");
    return AC_OK;
}

static int parse_value(parser *ps, int metric, char **tok, int ntok, ac_dtype t, ac_output o)
{
    ac_budgets *b = ps->b;
    if (metric == METRIC_VS_NAIVE_MEAN) {
        if (ntok != 4)
            return parse_fail(ps, "field 5: a vs-naive-mean line takes no option, got '%s'", tok[4]);
        if (strcmp(tok[3], "off") == 0)
            b->max_vs_naive_mean[t][o] = 0.0;
        else if (!parse_number(tok[3], &b->max_vs_naive_mean[t][o]))
            return parse_fail(ps, "field 4 (value): '%s' is not a positive number or 'off'", tok[3]);
        return AC_OK;
    }
    if (!parse_number(tok[3], &b->max_scaled[t][o]))
        return parse_fail(ps, "field 4 (value): '%s' is not a positive number", tok[3]);
    if (ntok == 5 && strcmp(tok[4], "grows") != 0)
        return parse_fail(ps, "field 5: expected 'grows' or nothing, got '%s'", tok[4]);
    b->scaled_grows[t][o] = ntok == 5;
    return AC_OK;
}

/* DTYPE OUTPUT METRIC VALUE [grows] */
static int parse_entry(parser *ps, char **tok, int ntok)
{
    ac_dtype t;
    ac_output o;
    int metric;
    char names[64];
    ac_dtype_list(names, sizeof names);
    if (!ps->have_version)
        return parse_fail(ps, "the first line must be 'version 1', got '%s'", tok[0]);
    if (ac_dtype_parse(tok[0], &t) != AC_OK)
        return parse_fail(ps, "field 1 (dtype): unknown dtype '%s' (%s)", tok[0], names);
    if (ntok < 4 || ntok > 5)
        return parse_fail(ps, "expected 'DTYPE OUTPUT METRIC VALUE [grows]', got %d fields", ntok);
    if (!parse_output(tok[1], &o))
        return parse_fail(ps, "field 2 (output): unknown output '%s' (O, LSE, dQ, dK, dV)", tok[1]);
    if (!parse_metric(tok[2], &metric))
        return parse_fail(ps, "field 3 (metric): unknown metric '%s' (scaled, vs-naive-mean)", tok[2]);
    int *seen = &ps->seen_on[t][o][metric];
    if (*seen)
        return parse_fail(ps, "%s %s %s given twice (first on line %d)", tok[0], tok[1], tok[2], *seen);
    *seen = ps->line_no;
    return parse_value(ps, metric, tok, ntok, t, o);
}

static int parse_line(parser *ps, char *line)
{
    char *hash = strchr(line, '#');
    if (hash)
        *hash = '\0';
    char *tok[8], *save = NULL;
    int ntok = 0;
    for (char *s = strtok_r(line, " \t\r\n", &save); s; s = strtok_r(NULL, " \t\r\n", &save)) {
        if (ntok == 8)
            return parse_fail(ps, "too many fields");
        tok[ntok++] = s;
    }
    if (ntok == 0)
        return AC_OK;
    if (strcmp(tok[0], "version") == 0 || strcmp(tok[0], "growth-length") == 0 ||
        strncmp(tok[0], "regression-", 11) == 0)
        return parse_directive(ps, tok, ntok);
    return parse_entry(ps, tok, ntok);
}

static int check_complete(parser *ps)
{
    if (!ps->have_version)
        return ac_fail(ps->err, AC_ERR_INPUT, "%s: empty budgets file (no 'version 1' line)", ps->path);
    for (int t = 0; t < AC_DTYPE_COUNT; t++)
        for (int o = 0; o < AC_OUT_COUNT; o++)
            for (int k = 0; k < METRIC_COUNT; k++)
                if (!ps->seen_on[t][o][k])
                    return ac_fail(ps->err, AC_ERR_INPUT,
                                   "%s: no '%s %s %s' line (every dtype and output needs a scaled "
                                   "and a vs-naive-mean budget)",
                                   ps->path, ac_dtype_name((ac_dtype)t), ac_output_name((ac_output)o), metric_names[k]);
    return AC_OK;
}

int ac_budgets_parse(const char *text, size_t len, const char *path, ac_budgets *b, ac_err *err)
{
    memset(b, 0, sizeof *b);
    b->growth_length = DEFAULT_GROWTH_LENGTH;
    b->regression_ratio = DEFAULT_REGRESSION_RATIO;
    b->regression_p = DEFAULT_REGRESSION_P;
    snprintf(b->source, sizeof b->source, "%s", path);
    parser ps = {.path = path, .b = b, .err = err};
    char line[AC_BUDGETS_LINE_MAX];
    for (size_t at = 0; at < len;) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t n = nl ? (size_t)(nl - (text + at)) : len - at;
        ps.line_no++;
        if (memchr(text + at, '\0', n))
            return parse_fail(&ps, "a NUL byte in the line (not a text file?)");
        if (n >= sizeof line)
            return parse_fail(&ps, "line longer than %zu characters", sizeof line - 1);
        memcpy(line, text + at, n);
        line[n] = '\0';
        int st = parse_line(&ps, line);
        if (st != AC_OK)
            return st;
        at += n + 1;
    }
    return check_complete(&ps);
}

int ac_budgets_load(const char *path, ac_budgets *b, ac_err *err)
{
    memset(b, 0, sizeof *b);
    char *text;
    size_t len;
    ac_err why = {{0}};
    int st = ac_read_file_max(path, AC_BUDGETS_FILE_MAX, &text, &len, &why);
    if (st == AC_OK && !text)
        return ac_fail(err, AC_ERR_INPUT, "budgets: cannot open %s: %s", path, strerror(ENOENT));
    if (st != AC_OK)
        return ac_fail(err, st, "budgets: %s", why.msg);
    st = ac_budgets_parse(text, len, path, b, err);
    free(text);
    return st;
}

/* ---- budgets for one problem ---------------------------------------------- */

double ac_budget_growth(const ac_budgets *b, const ac_problem *p, ac_dtype t, ac_output o)
{
    if (!b->scaled_grows[t][o])
        return 1.0;
    int len = p->seqlen_q > p->seqlen_k ? p->seqlen_q : p->seqlen_k;
    if (p->head_dim > len)
        len = p->head_dim;
    double g = sqrt((double)len / b->growth_length);
    return g > 1.0 ? g : 1.0;
}

double ac_budget_max_scaled(const ac_budgets *b, const ac_problem *p, ac_dtype t, ac_output o)
{
    return b->max_scaled[t][o] * ac_budget_growth(b, p, t, o);
}
