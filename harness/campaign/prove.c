/* harness/campaign/prove.c — `attncheck prove`: detection power.
 *
 * A verification harness is only as good as the bugs it catches.  The proof
 * fuzzes the correct base kernel (it must pass every case) and each planted-bug
 * mutant of its family with the same seed, and records for every mutant whether
 * it was caught, after how many cases and how long, the failure kind and the
 * shrunk minimal case.  The table it prints is the README's "detection power"
 * section. */
#include <stdio.h>
#include <string.h>

#include "harness/campaign/campaign.h"
#include "harness/campaign/prove.h"
#include "harness/files/files.h"

#define PROVE_MAX_MUTANTS 64

typedef struct {
    const ac_kernel *k;
    bool caught;
    int status; /* AC_OK, or the error that stopped its campaign */
    ac_summary s;
} mutant_row;

/* "cpu-flash" -> "cpu-": mutants of a family share the prefix up to the first '-'. */
static void family_prefix(const char *base, char *out, size_t len)
{
    const char *dash = strchr(base, '-');
    size_t n = dash ? (size_t)(dash - base + 1) : strlen(base);
    if (n >= len)
        n = len - 1;
    memcpy(out, base, n);
    out[n] = '\0';
}

static size_t find_mutants(const char *base, const ac_kernel **out, size_t max)
{
    char prefix[AC_KERNEL_NAME_LEN];
    family_prefix(base, prefix, sizeof prefix);
    size_t n = 0;
    for (size_t i = 0; i < ac_kernel_count() && n < max; i++) {
        const ac_kernel *k = ac_kernel_at(i);
        if (strstr(k->name, "mutant") && strncmp(k->name, prefix, strlen(prefix)) == 0)
            out[n++] = k;
    }
    return n;
}

static ac_campaign_opts campaign_opts(const ac_prove_opts *o, long cases, bool stop_first)
{
    ac_campaign_opts c;
    memset(&c, 0, sizeof c);
    c.seed = o->seed;
    c.max_cases = cases;
    c.max_seqlen = o->max_seqlen;
    c.stop_first = stop_first;
    c.shrink_steps = o->shrink_steps;
    c.run = o->run;
    c.progress = o->progress;
    c.out = NULL; /* the table says it all */
    return c;
}

static void print_table(FILE *f, bool markdown, const mutant_row *rows, size_t n)
{
    if (markdown)
        fputs("| mutant | caught | cases to first catch | seconds | failure kind | minimal case |\n"
              "| --- | --- | ---: | ---: | --- | --- |\n",
              f);
    else
        fprintf(f, "%-44s %-6s %8s %8s  %-22s %s\n", "mutant", "caught", "cases", "seconds", "kind", "minimal case");
    for (size_t i = 0; i < n; i++) {
        const mutant_row *r = &rows[i];
        const char *caught = r->caught ? "yes" : "no";
        long cases = r->caught ? r->s.first_fail_case : r->s.cases;
        double secs = r->caught ? r->s.first_fail_seconds : r->s.seconds;
        const char *kind = r->caught ? r->s.first_kind : r->status != AC_OK ? "error" : "-";
        const char *line = r->caught ? r->s.first_minimal : "-";
        if (markdown)
            fprintf(f, "| `%s` | %s | %ld | %.2f | `%s` | `%s` |\n", r->k->name, caught, cases, secs, kind, line);
        else
            fprintf(f, "%-44s %-6s %8ld %8.2f  %-22s %s\n", r->k->name, caught, cases, secs, kind, line);
    }
}

typedef struct {
    const ac_prove_opts *o;
    const ac_summary *base;
    const mutant_row *rows;
    size_t n;
} markdown_ctx;

static void fill_markdown(FILE *f, const void *ctx)
{
    const markdown_ctx *m = ctx;
    fprintf(f, "Base `%s`: %ld cases, %ld failures (seed %llu). Each mutant: seed %llu, at most %ld cases.\n\n",
            m->o->base, m->base->cases, m->base->failed + m->base->errors, (unsigned long long)m->o->seed,
            (unsigned long long)m->o->seed, m->o->mutant_cases);
    print_table(f, true, m->rows, m->n);
}

static int write_markdown(const ac_prove_opts *o, const ac_summary *base_s, const mutant_row *rows, size_t n,
                          ac_err *err)
{
    markdown_ctx m = {o, base_s, rows, n};
    return ac_write_doc(o->markdown_path, fill_markdown, &m, err);
}

static int run_mutants(const ac_prove_opts *o, const ac_budgets *b, struct ac_report *rep, mutant_row *rows, size_t n,
                       ac_err *err)
{
    ac_campaign_opts c = campaign_opts(o, o->mutant_cases, true);
    for (size_t i = 0; i < n; i++) {
        mutant_row *r = &rows[i];
        if (!ac_kernel_is_available(r->k, NULL)) {
            r->status = AC_ERR_ENV;
            continue;
        }
        r->status = ac_campaign(r->k, b, &c, rep, &r->s, err);
        if (r->status == AC_ERR_ENV)
            return AC_ERR_ENV;
        r->caught = r->s.failed > 0;
        if (o->out)
            fprintf(o->out, "  %-44s %s\n", r->k->name, r->caught ? "caught" : "NOT caught");
    }
    return AC_OK;
}

/* The correct kernel's campaign: it must pass every case. */
static int run_base(const ac_prove_opts *o, const ac_kernel *base, const ac_budgets *b, ac_report *rep,
                    size_t n_mutants, ac_summary *s, bool *clean, ac_err *err)
{
    ac_campaign_opts bc = campaign_opts(o, o->clean_cases, false);
    bc.out = o->out; /* a failure of the correct kernel is printed in full */
    int st = ac_campaign(base, b, &bc, rep, s, err);
    *clean = s->failed == 0 && s->errors == 0;
    if (st == AC_OK && o->out)
        fprintf(o->out, "base %s: %ld cases, %ld failures, %ld errors in %.1f s: %s\nmutants (%zu):\n", base->name,
                s->cases, s->failed, s->errors, s->seconds, *clean ? "clean" : "NOT CLEAN", n_mutants);
    return st;
}

static void add_totals(ac_summary *t, const ac_summary *base, const mutant_row *rows, size_t n)
{
    if (!t)
        return;
    memset(t, 0, sizeof *t);
    for (size_t i = 0; i <= n; i++) {
        const ac_summary *s = i == n ? base : &rows[i].s;
        t->cases += s->cases, t->passed += s->passed, t->failed += s->failed, t->errors += s->errors;
        t->seconds += s->seconds;
    }
}

int ac_prove(const ac_prove_opts *o, const ac_budgets *b, struct ac_report *rep, ac_err *err)
{
    if (o->baseline)
        return ac_prove_baseline(o, b, rep, err);
    const ac_kernel *base = ac_kernel_find(o->base);
    if (!base)
        return ac_fail(err, AC_ERR_INPUT, "--base: no kernel named '%s' (see attncheck list)", o->base);
    if (!ac_kernel_is_available(base, err))
        return AC_ERR_ENV;
    static mutant_row rows[PROVE_MAX_MUTANTS];
    const ac_kernel *mutants[PROVE_MAX_MUTANTS];
    size_t n = find_mutants(o->base, mutants, PROVE_MAX_MUTANTS);
    if (n == 0)
        return ac_fail(err, AC_ERR_INPUT, "no mutants of '%s' are registered", o->base);
    memset(rows, 0, sizeof rows);
    for (size_t i = 0; i < n; i++)
        rows[i].k = mutants[i];
    ac_summary base_s;
    bool base_ok, all_caught = true;
    int st = run_base(o, base, b, rep, n, &base_s, &base_ok, err);
    if (st == AC_OK)
        st = run_mutants(o, b, rep, rows, n, err);
    if (st != AC_OK)
        return st;
    for (size_t i = 0; i < n; i++)
        all_caught &= rows[i].caught;
    add_totals(o->totals, &base_s, rows, n);
    if (o->out) {
        fputc('\n', o->out);
        print_table(o->out, false, rows, n);
        fprintf(o->out, "\n%s\n",
                base_ok && all_caught ? "PROVED: base clean, every mutant caught" : "NOT PROVED: see the rows above");
    }
    if (o->markdown_path && (st = write_markdown(o, &base_s, rows, n, err)) != AC_OK)
        return st;
    return base_ok && all_caught ? 0 : 1;
}
