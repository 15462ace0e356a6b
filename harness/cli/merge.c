/* harness/cli/merge.c — `attncheck merge FILE.jsonl... [--json F] [--junit F]
 * [--markdown F]`: the --json of a sharded campaign's shards (fuzz --shard I/N,
 * a Slurm job array) made one report, whose printed summary, distinct failures
 * and reports are those the unsharded campaign gives: the case records are
 * read back into results (report/record.h) and fed, sorted by case index, to
 * the same summary, failure list and writers.
 *
 * Refused (exit 2, nothing written): a line that is not a record, a case record
 * without an index, the same index twice, shards of different campaigns (their
 * environment records disagree on the seed, the kernel or anything else that
 * changes the stream or the verdicts) or case records of different kernels.
 * Indices missing from a campaign with a case budget (a shard that did not run
 * or was stopped early) are named and the rest is merged: exit 3. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/cli/cli.h"
#include "harness/files/files.h"
#include "harness/report/failures.h"
#include "harness/report/record.h"
#include "harness/report/summary.h"

/* Environment keys whose values must agree between shards of one campaign. */
static const char *const same_campaign_keys[] = {
    "subcommand", "kernel", "seed",     "case_budget", "time_budget", "profile",      "min_seqlen",     "max_seqlen",
    "dtypes",     "masks",  "backward", "cert_rows",   "reference",   "shrink_steps", "budgets_sha256",
};
#define N_KEYS (sizeof same_campaign_keys / sizeof same_campaign_keys[0])

typedef struct {
    long index;
    int file;
    char *line; /* into the file's text */
    long line_no;
} entry;

typedef struct {
    const ac_cli *c;
    char **text; /* each file's contents */
    entry *e;
    size_t n, cap;
    char kernel[AC_KERNEL_NAME_LEN];
    int kernel_file;
    ac_record env; /* the first environment record, for the merged one */
    int env_file;
    bool have_env;
    double seconds; /* the longest shard's */
    long case_budget; /* from the environment (0: none) */
    ac_err *err;
} merge_state;

/* ---- reading ----------------------------------------------------------------------- */

#define KEPT (-1) /* check_environment: the first one, kept for the merged record */

static int check_environment(merge_state *m, int file, ac_record *env)
{
    char a[256], b[256];
    if (!m->have_env) {
        m->env = *env, m->env_file = file, m->have_env = true;
        const char *budget = ac_record_value(env, "case_budget", a, sizeof a);
        m->case_budget = budget ? atol(budget) : 0;
        return KEPT;
    }
    for (size_t k = 0; k < N_KEYS; k++) {
        const char *x = ac_record_value(&m->env, same_campaign_keys[k], a, sizeof a);
        const char *y = ac_record_value(env, same_campaign_keys[k], b, sizeof b);
        if ((x || y) && (!x || !y || strcmp(x, y)))
            return ac_fail(m->err, AC_ERR_INPUT,
                           "%s and %s are not shards of one campaign: %s is %s in one, %s in "
                           "the other",
                           m->c->paths[m->env_file], m->c->paths[file], same_campaign_keys[k], x ? x : "absent",
                           y ? y : "absent");
    }
    return AC_OK;
}

static int add_case(merge_state *m, int file, const ac_record *rec, char *line, long line_no)
{
    const char *path = m->c->paths[file];
    if (!rec->has_index)
        return ac_fail(m->err, AC_ERR_INPUT,
                       "%s:%ld: a case record without \"index\" (from an attncheck before "
                       "merge existed): cannot be merged",
                       path, line_no);
    if (!m->kernel[0]) {
        snprintf(m->kernel, sizeof m->kernel, "%s", rec->kernel);
        m->kernel_file = file;
    } else if (strcmp(m->kernel, rec->kernel)) {
        return ac_fail(m->err, AC_ERR_INPUT, "kernels mixed: %s has %s, %s:%ld has %s", m->c->paths[m->kernel_file],
                       m->kernel, path, line_no, rec->kernel);
    }
    if (m->n == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 1024;
        entry *e = realloc(m->e, cap * sizeof *e);
        if (!e)
            return ac_fail(m->err, AC_ERR_ENV, "out of memory");
        m->e = e, m->cap = cap;
    }
    m->e[m->n++] = (entry){rec->res.index, file, line, line_no};
    return AC_OK;
}

static int read_line(merge_state *m, int file, char *line, long line_no)
{
    static ac_record rec;
    ac_err why = {{0}};
    int st = ac_record_parse(line, &rec, &why);
    if (st != AC_OK) {
        ac_record_free(&rec);
        return ac_fail(m->err, st, "%s:%ld: %s", m->c->paths[file], line_no, why.msg);
    }
    if (rec.type == AC_RECORD_CASE) {
        st = add_case(m, file, &rec, line, line_no);
    } else if (rec.type == AC_RECORD_ENVIRONMENT) {
        st = check_environment(m, file, &rec);
        if (st == KEPT)
            return AC_OK; /* rec's JSON now belongs to m->env */
    } else if (rec.type == AC_RECORD_CAMPAIGN) {
        char v[64];
        const char *s = ac_record_value(&rec, "seconds", v, sizeof v);
        if (s && atof(s) > m->seconds)
            m->seconds = atof(s);
    } else {
        fprintf(stderr, "attncheck merge: %s:%ld: skipped a record of type \"%s\"\n", m->c->paths[file], line_no,
                rec.type_name);
    }
    ac_record_free(&rec);
    return st;
}

static int read_file(merge_state *m, int file)
{
    size_t len;
    int st = ac_read_file(m->c->paths[file], &m->text[file], &len, m->err);
    if (st != AC_OK)
        return st;
    if (!m->text[file])
        return ac_fail(m->err, AC_ERR_INPUT, "%s: no such file", m->c->paths[file]);
    char *text = realloc(m->text[file], len + 1);
    if (!text)
        return ac_fail(m->err, AC_ERR_ENV, "out of memory");
    text[len] = '\0';
    m->text[file] = text;
    long line_no = 0;
    for (char *save = NULL, *line = strtok_r(text, "\n", &save); line && st == AC_OK;
         line = strtok_r(NULL, "\n", &save)) {
        line_no++; /* blank lines vanish in strtok: numbers count records */
        if (line[strspn(line, " \t\r")])
            st = read_line(m, file, line, line_no);
    }
    return st;
}

/* ---- checking ---------------------------------------------------------------------- */

static int by_index(const void *a, const void *b)
{
    const entry *x = a, *y = b;
    return x->index < y->index ? -1 : x->index > y->index;
}

static int check_duplicates(merge_state *m)
{
    for (size_t i = 1; i < m->n; i++)
        if (m->e[i].index == m->e[i - 1].index)
            return ac_fail(m->err, AC_ERR_INPUT,
                           "case %ld is in %s:%ld and in %s:%ld: a shard merged twice, or "
                           "shards of different splits",
                           m->e[i].index, m->c->paths[m->e[i - 1].file], m->e[i - 1].line_no, m->c->paths[m->e[i].file],
                           m->e[i].line_no);
    return AC_OK;
}

/* Names the indices below the case budget that no file holds; how many. */
static long report_missing(const merge_state *m)
{
    if (m->case_budget <= 0)
        return 0;
    long missing = 0;
    size_t at = 0;
    char list[512] = "";
    for (long k = 0; k < m->case_budget; k++) {
        while (at < m->n && m->e[at].index < k)
            at++;
        if (at < m->n && m->e[at].index == k)
            continue;
        size_t used = strlen(list);
        if (missing++ < 12 && used + 24 < sizeof list)
            snprintf(list + used, sizeof list - used, "%s%ld", used ? ", " : "", k);
    }
    if (missing)
        fprintf(stderr,
                "attncheck merge: MISSING %ld of the %ld cases of the campaign's budget: %s%s (a shard "
                "that did not run or stopped early; merged the rest)\n",
                missing, m->case_budget, list, missing > 12 ? ", ..." : "");
    return missing;
}

/* ---- writing ------------------------------------------------------------------------- */

static void merged_environment(merge_state *m, ac_report *rep)
{
    if (!m->have_env)
        return;
    ac_report_field f[64];
    size_t n = ac_record_fields(&m->env, f, 62);
    char files[32];
    snprintf(files, sizeof files, "%d", m->c->n_paths);
    for (size_t i = 0; i < n; i++)
        if (!strcmp(f[i].key, "shard"))
            f[i] = (ac_report_field){"shard", AC_FIELD_STRING, "merged", 0};
    f[n++] = (ac_report_field){"merged_from", AC_FIELD_NUMBER, NULL, m->c->n_paths};
    ac_report_record(rep, "environment", f, n);
}

static void merged_campaign(const merge_state *m, const ac_summary *s, long missing, ac_report *rep)
{
    ac_report_field f[] = {
        {"subcommand", AC_FIELD_STRING, "merge", 0},
        {"kernel", AC_FIELD_STRING, m->kernel, 0},
        {"cases", AC_FIELD_NUMBER, NULL, (double)s->cases},
        {"passed", AC_FIELD_NUMBER, NULL, (double)s->passed},
        {"failed", AC_FIELD_NUMBER, NULL, (double)s->failed},
        {"errors", AC_FIELD_NUMBER, NULL, (double)s->errors},
        {"seconds", AC_FIELD_NUMBER, NULL, s->seconds},
        {"cases_per_s", AC_FIELD_NUMBER, NULL, s->seconds > 0 ? (double)s->cases / s->seconds : 0},
        {"files", AC_FIELD_NUMBER, NULL, m->c->n_paths},
        {"missing", AC_FIELD_NUMBER, NULL, (double)missing},
    };
    ac_report_record(rep, "campaign", f, sizeof f / sizeof f[0]);
}

/* Every case in index order into the summary, the failure list and the reports. */
static int replay(merge_state *m, ac_report *rep, ac_summary *s, ac_failure_set *fs)
{
    static ac_record rec;
    for (size_t i = 0; i < m->n; i++) {
        ac_err why = {{0}};
        if (ac_record_parse(m->e[i].line, &rec, &why) != AC_OK) { /* read once already: cannot fail */
            ac_record_free(&rec);
            return ac_fail(m->err, AC_ERR_INPUT, "%s:%ld: %s", m->c->paths[m->e[i].file], m->e[i].line_no, why.msg);
        }
        const char *minimal = rec.has_minimal ? rec.minimal : NULL;
        bool is_new;
        if (!rec.res.unsupported)
            ac_summary_add(s, &rec.res);
        if (rec.res.status == AC_OK && rec.res.verdict == AC_VERDICT_FAIL)
            ac_failure_set_add(fs, rec.kernel, &rec.res, minimal, &is_new);
        ac_report_add_raw(rep, rec.kernel, &rec.res, minimal, m->e[i].line); /* JSON: the shard's own record */
        ac_record_free(&rec);
    }
    return AC_OK;
}

static int write_merged(merge_state *m, ac_report *rep)
{
    static ac_summary s;
    ac_failure_set fs = {0};
    memset(&s, 0, sizeof s);
    merged_environment(m, rep);
    int st = replay(m, rep, &s, &fs);
    long missing = st == AC_OK ? report_missing(m) : 0;
    s.seconds = m->seconds;
    if (st == AC_OK) {
        printf("attncheck merge: %d files, %zu cases (indices %ld..%ld)\n", m->c->n_paths, m->n,
               m->n ? m->e[0].index : 0, m->n ? m->e[m->n - 1].index : -1);
        ac_summary_print(stdout, m->kernel[0] ? m->kernel : "(no cases)", &s);
        ac_failure_set_print(stdout, &fs);
        merged_campaign(m, &s, missing, rep);
    }
    ac_failure_set_free(&fs);
    if (st != AC_OK)
        return st;
    if (s.worst_status != AC_OK || missing)
        return missing ? AC_ERR_ENV : s.worst_status;
    return s.failed > 0 ? AC_FAIL_ACCURACY : AC_OK;
}

int ac_cmd_merge(const ac_cli *c, ac_err *err)
{
    if (c->n_paths == 0)
        return ac_fail(err, AC_ERR_INPUT, "give the shards' JSON Lines files (see attncheck merge --help)");
    merge_state m = {.c = c, .err = err};
    m.text = calloc((size_t)c->n_paths, sizeof *m.text);
    int st = m.text ? AC_OK : ac_fail(err, AC_ERR_ENV, "out of memory");
    for (int f = 0; f < c->n_paths && st == AC_OK; f++)
        st = read_file(&m, f);
    if (st == AC_OK) {
        qsort(m.e, m.n, sizeof *m.e, by_index);
        st = check_duplicates(&m);
    }
    ac_report *rep = NULL;
    if (st == AC_OK)
        st = ac_cli_open_report(c, false, &rep, err);
    int result = st == AC_OK ? write_merged(&m, rep) : st;
    if (rep) {
        ac_err why = {{0}};
        int wst = ac_report_close(rep, &why);
        if (wst != AC_OK && result < AC_ERR_INPUT)
            result = ac_fail(err, wst, "writing a report: %s", why.msg);
    }
    for (int f = 0; m.text && f < c->n_paths; f++)
        free(m.text[f]);
    free(m.text);
    free(m.e);
    if (m.have_env)
        ac_record_free(&m.env);
    return result;
}
