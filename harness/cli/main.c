/* harness/cli/main.c — the `attncheck` command line.
 *
 *   attncheck fuzz | run | list | prove | check | reference | bench [options]
 *
 * Options are parsed by one table for every subcommand (options.c); this file
 * dispatches and runs fuzz, run, list and prove (check and reference: check.c,
 * bench: kernels/cuda/bench.cu).  Exit status (the AC_* codes): 0 all passed,
 * 1 an accuracy failure, 2 bad usage or input, 3 environment (a requested
 * kernel cannot run here).  Only this file ends the process: everything below
 * returns a status. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "attncheck_config.h"
#include "harness/campaign/campaign.h"
#include "harness/campaign/corpus.h"
#include "harness/campaign/prove.h"
#include "harness/cli/cli.h"
#include "harness/files/files.h"
#include "harness/report/summary.h"
#include "harness/verdict/budget.h"

/* The default campaign: sized to finish well under a minute on 2 CPU cores
 * with cpu-flash (see the README for the measured cases/s). */
#define DEFAULT_FUZZ_CASES 300
#define DEFAULT_PROVE_CASES 2000
#define DEFAULT_PROVE_CLEAN 1000

/* --kernel NAME, or the best kernel that can run here. */
static int pick_kernel(const ac_cli *c, const ac_kernel **out, ac_err *err)
{
    static const char *const best[] = {"cuda-flash", "cpu-flash", "ref-fp64"};
    if (!c->kernel) {
        for (size_t i = 0; i < sizeof best / sizeof best[0]; i++)
            if ((*out = ac_kernel_find(best[i])) && ac_kernel_is_available(*out, NULL))
                return AC_OK;
        return ac_fail(err, AC_ERR_ENV, "no kernel can run here (see attncheck list)");
    }
    const ac_kernel *k = ac_kernel_find(c->kernel);
    if (!k && !ATTNCHECK_HAVE_CUDA && strncmp(c->kernel, "cuda-", 5) == 0) /* the environment, not the user */
        return ac_fail(err, AC_ERR_ENV, "kernel %s cannot run here: built without CUDA", c->kernel);
    if (!k)
        return ac_fail(err, AC_ERR_INPUT, "--kernel: no kernel named '%s' (see attncheck list)", c->kernel);
    ac_err why = {{0}};
    if (!ac_kernel_is_available(k, &why))
        return ac_fail(err, AC_ERR_ENV, "kernel %s cannot run here: %s", k->name, why.msg);
    *out = k;
    return AC_OK;
}

static ac_run_opts run_opts(const ac_cli *c)
{
    ac_run_opts o = {.backward = !c->no_backward, .cert_rows = c->cert_rows};
    return o;
}

/* Errors outrank failures: a run that could not be judged is not a pass. */
static int exit_status(const ac_summary *s)
{
    if (s->worst_status != AC_OK)
        return s->worst_status;
    return s->failed > 0 ? AC_FAIL_ACCURACY : AC_OK;
}

/* ---- fuzz ---------------------------------------------------------------------- */

/* Each command says whether it ran to its end (*completed): only then are the
 * reports written; a run stopped by a bad line, file or option leaves any
 * existing report exactly as it was. */
static int cmd_fuzz(const ac_cli *c, const ac_kernel *k, const ac_budgets *b, ac_report *rep, bool *completed)
{
    ac_campaign_opts o = {0};
    o.seed = c->seed;
    o.max_cases = c->seconds > 0 && !c->cases ? 0 : c->cases ? c->cases : DEFAULT_FUZZ_CASES;
    o.max_seconds = c->seconds;
    o.dtype_filter = c->dtypes;
    o.mask_filter = c->masks;
    o.max_seqlen = c->max_seqlen;
    o.stop_first = c->stop_first;
    o.shrink_steps = c->shrink_steps;
    o.save_dir = c->save_dir;
    o.run = run_opts(c);
    o.progress = !c->quiet && isatty(STDERR_FILENO);
    o.out = stdout;
    if (!c->quiet)
        printf("attncheck fuzz: kernel %s, seed %llu, %s\n", k->name, (unsigned long long)c->seed,
               o.max_cases ? "case budget" : "time budget");
    ac_summary s;
    ac_err err = {{0}};
    int st = ac_campaign(k, b, &o, rep, &s, &err);
    *completed = st == AC_OK;
    ac_summary_print(stdout, k->name, &s);
    if (st != AC_OK) {
        fprintf(stderr, "attncheck fuzz: %s\n", err.msg);
        return st;
    }
    return exit_status(&s);
}

/* ---- run: replay case lines --------------------------------------------------- */

typedef struct {
    const ac_kernel *k;
    const ac_budgets *b;
    ac_run_opts o;
    ac_report *rep;
    ac_summary s;
    long skipped;
    bool quiet;
} replay;

static void replay_one(replay *r, const ac_case *cs, const char *where)
{
    ac_result res;
    ac_err err = {{0}};
    int st = ac_run_case(r->k, cs, r->b, &r->o, &res, &err);
    ac_report_add(r->rep, r->k->name, &res, NULL);
    if (res.unsupported) {
        r->skipped++;
        if (!r->quiet)
            printf("SKIP  %s  (%s: %s)\n", res.line, r->k->name, res.why);
        return;
    }
    ac_summary_add(&r->s, &res);
    if (st != AC_OK)
        printf("ERROR %s  %s\n      %s\n", where, res.why, res.line);
    else if (res.verdict == AC_VERDICT_FAIL)
        printf("FAIL  %s  [%s] %s\n      %s\n", where, res.kind, res.why, res.line);
    else if (!r->quiet)
        printf("PASS  %s\n", res.line);
}

static int collect_cases(const ac_cli *c, ac_corpus *l)
{
    ac_err err = {{0}};
    int st;
    if (c->case_line && c->path) {
        fprintf(stderr, "attncheck run: give FILE|DIR or --case, not both\n");
        return AC_ERR_INPUT;
    }
    if (c->case_line)
        st = ac_corpus_add_line(l, c->case_line, "--case", 1, &err);
    else if (!c->path)
        st = ac_fail(&err, AC_ERR_INPUT, "attncheck run: give FILE, DIR or --case 'LINE' (see attncheck run --help)");
    else
        st = ac_corpus_load(l, c->path, &err);
    if (st != AC_OK)
        fprintf(stderr, "%s\n", err.msg);
    return st;
}

static int cmd_run(const ac_cli *c, const ac_kernel *k, const ac_budgets *b, ac_report *rep, bool *completed)
{
    ac_corpus l = {0};
    int st = collect_cases(c, &l);
    *completed = st == AC_OK;
    if (st == AC_OK) {
        replay r = {.k = k, .b = b, .o = run_opts(c), .rep = rep, .quiet = c->quiet};
        double t0 = ac_now_seconds();
        for (size_t i = 0; i < l.n; i++)
            replay_one(&r, &l.cases[i], l.where[i]);
        r.s.seconds = ac_now_seconds() - t0;
        ac_summary_print(stdout, k->name, &r.s);
        if (r.skipped)
            printf("%ld cases skipped: outside %s's capabilities\n", r.skipped, k->name);
        st = exit_status(&r.s);
    }
    ac_corpus_free(&l);
    return st;
}

/* ---- list ------------------------------------------------------------------------ */

static void print_caps(const ac_caps *cp, ac_device dev)
{
    printf(" dtypes=");
    for (int t = 0, first = 1; t < AC_DTYPE_COUNT; t++)
        if (cp->dtypes & (1u << t))
            printf("%s%s", first ? "" : ",", ac_dtype_name((ac_dtype)t)), first = 0;
    if (cp->n_head_dims == 0)
        printf(" d=1..%d", cp->max_head_dim);
    else
        for (int i = 0; i < cp->n_head_dims; i++)
            printf("%s%d", i ? "," : " d=", cp->head_dims[i]);
    printf(" masks=");
    for (int m = 0, first = 1; m < AC_MASK_KIND_COUNT; m++) {
        unsigned needs = ac_mask_needs((ac_mask_kind)m);
        if ((cp->masks & needs) == needs)
            printf("%s%s", first ? "" : ",", ac_mask_name((ac_mask_kind)m)), first = 0;
    }
    printf(" layouts=%s%s%s", cp->layouts & 1u ? "bhsd" : "", cp->layouts == 3u ? "," : "",
           cp->layouts & 2u ? "bshd" : "");
    printf("%s%s%s", cp->gqa ? " gqa" : "", cp->varlen ? " varlen" : "", cp->backward ? " backward" : "");
    if (cp->max_seqlen)
        printf(" max-seqlen=%d", cp->max_seqlen);
    printf(" device=%s", dev == AC_DEV_CUDA ? "cuda" : "cpu");
}

static int cmd_list(void)
{
    for (size_t i = 0; i < ac_kernel_count(); i++) {
        const ac_kernel *k = ac_kernel_at(i);
        ac_err why = {{0}};
        printf("%s", k->name);
        print_caps(&k->caps, k->device);
        if (ac_kernel_is_available(k, &why))
            printf("  available\n");
        else
            printf("  unavailable: %s\n", why.msg);
    }
    return AC_OK;
}

/* ---- prove ------------------------------------------------------------------------ */

static int cmd_prove(const ac_cli *c, const ac_budgets *b, ac_report *rep, bool *completed)
{
    ac_prove_opts o = {0};
    o.base = c->base ? c->base : "cpu-flash";
    o.seed = c->seed;
    o.mutant_cases = c->cases ? c->cases : DEFAULT_PROVE_CASES;
    o.clean_cases = c->clean_cases >= 0 ? c->clean_cases : DEFAULT_PROVE_CLEAN;
    o.max_seqlen = c->max_seqlen;
    o.shrink_steps = c->shrink_steps;
    o.run = run_opts(c);
    o.progress = !c->quiet && isatty(STDERR_FILENO);
    int md = ac_report_format_index("--markdown"); /* prove's Markdown is its detection table */
    o.markdown_path = md >= 0 ? c->report_path[md] : NULL;
    o.out = stdout;
    ac_err err = {{0}};
    int st = ac_prove(&o, b, rep, &err);
    *completed = st == AC_OK || st == AC_FAIL_ACCURACY; /* ac_prove's errors stop it */
    if (st >= AC_ERR_INPUT)
        fprintf(stderr, "attncheck prove: %s\n", err.msg);
    return st;
}

/* ---- main ------------------------------------------------------------------------- */

static int load_budgets(const ac_cli *c, ac_budgets *b, ac_err *err)
{
    const char *path = c->budgets ? c->budgets : ac_budgets_default_path();
    ac_err why = {{0}};
    int st = ac_budgets_load(path, b, &why);
    return st == AC_OK ? AC_OK : ac_fail(err, st, "budgets %s: %s", path, why.msg);
}

/* Every file the run will write, checked before it starts (the reports are
 * checked as they are opened): an unwritable path is exit 2 at once. */
static int check_outputs(const ac_cli *c, ac_err *err)
{
    if (c->cmd == AC_CMD_FUZZ && c->save_dir)
        return ac_save_failures_check(c->save_dir, err);
    int md = ac_report_format_index("--markdown");
    if (c->cmd == AC_CMD_PROVE && md >= 0 && c->report_path[md])
        return ac_check_writable(c->report_path[md], "--markdown", err);
    return AC_OK;
}

/* fuzz, run and prove: budgets, a kernel, the outputs checked, a report, the command; list. */
static int run_command(const ac_cli *c, ac_err *err)
{
    if (c->cmd == AC_CMD_LIST)
        return cmd_list();
    if (c->cases && c->seconds > 0)
        return ac_fail(err, AC_ERR_INPUT, "give --cases or --time, not both");
    ac_budgets b;
    int st = load_budgets(c, &b, err);
    const ac_kernel *k = NULL;
    if (st == AC_OK && c->cmd != AC_CMD_PROVE)
        st = pick_kernel(c, &k, err);
    if (st == AC_OK)
        st = check_outputs(c, err);
    ac_report *rep = NULL;
    if (st == AC_OK)
        st = ac_cli_open_report(c, c->cmd == AC_CMD_PROVE, &rep, err);
    if (st != AC_OK)
        return st;
    bool completed = false;
    if (c->cmd == AC_CMD_FUZZ)
        st = cmd_fuzz(c, k, &b, rep, &completed);
    else if (c->cmd == AC_CMD_RUN)
        st = cmd_run(c, k, &b, rep, &completed);
    else
        st = cmd_prove(c, &b, rep, &completed);
    if (!completed) {
        ac_report_discard(rep);
        return st;
    }
    ac_err why = {{0}};
    int wst = ac_report_close(rep, &why);
    if (wst != AC_OK)
        fprintf(stderr, "attncheck %s: writing a report: %s\n", c->cmd_name, why.msg);
    return st >= AC_ERR_INPUT || wst == AC_OK ? st : wst; /* errors outrank failures; the first error wins */
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        ac_cli_overview(argc < 2 ? stderr : stdout);
        return argc < 2 ? AC_ERR_INPUT : AC_OK;
    }
    if (!strcmp(argv[1], "check"))
        return ac_cmd_check(argc - 1, argv + 1);
    if (!strcmp(argv[1], "reference"))
        return ac_cmd_reference(argc - 1, argv + 1);
    if (!strcmp(argv[1], "bench"))
        return ac_cuda_bench(argc - 1, argv + 1);
    return ac_cli_main(argc - 1, argv + 1, run_command);
}
