/* harness/cli/main.c — the `attncheck` command line.
 *
 *   attncheck fuzz | run | list | prove | check | reference | bench [options]
 *
 * Options are parsed by one table for every subcommand (options.c); this file
 * dispatches and runs run, list and prove (fuzz: fuzz.c, merge: merge.c,
 * check and reference: check.c, bench: kernels/cuda/bench.cu).  Exit status
 * (the AC_* codes): 0 all passed, 1 an accuracy failure, 2 bad usage or
 * input, 3 environment (a requested kernel cannot run here).  Only this file ends the process: everything below
 * returns a status. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attncheck_config.h"
#include "harness/campaign/campaign.h"
#include "harness/campaign/corpus.h"
#include "harness/campaign/prove.h"
#include "harness/cli/cli.h"
#include "harness/files/files.h"
#include "harness/report/summary.h"
#include "harness/verdict/baseline.h"
#include "harness/verdict/budget.h"

/* prove's defaults (fuzz's are in fuzz.c). */
#define DEFAULT_PROVE_CASES 2000
#define DEFAULT_PROVE_CLEAN 1000
#define DEFAULT_PROVE_BASELINE_CASES 1000 /* prove --baseline: the goal is <= 200 cases per mutant */

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

/* Errors outrank failures: a run that could not be judged is not a pass. */
static int exit_status(const ac_summary *s)
{
    if (s->worst_status != AC_OK)
        return s->worst_status;
    return s->failed > 0 ? AC_FAIL_ACCURACY : AC_OK;
}

/* ---- run: replay case lines --------------------------------------------------- */

typedef struct {
    const ac_kernel *k;
    const ac_budgets *b;
    ac_run_opts o;
    ac_report *rep;
    ac_summary s;
    long skipped, next_index;
    bool quiet;
    struct ac_baseline *base; /* --baseline: every result is paired */
} replay;

static void replay_one(replay *r, const ac_case *cs, const char *where)
{
    ac_result res;
    ac_err err = {{0}};
    int st = ac_run_case(r->k, cs, r->b, &r->o, &res, &err);
    res.index = r->next_index++; /* its place in the corpus */
    ac_report_add(r->rep, r->k->name, &res, NULL);
    if (r->base)
        ac_cli_baseline_observe(r->base, &res);
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

/* The {"type":"campaign"} record of run and prove (fuzz.c writes fuzz's); a
 * replay has no seed. */
static void summary_record(ac_report *rep, const char *cmd, const char *kernel, const uint64_t *seed,
                           const ac_summary *s)
{
    bool prove = !strcmp(cmd, "prove");
    ac_report_field f[] = {
        {"subcommand", AC_FIELD_STRING, cmd, 0},
        {prove ? "base" : "kernel", AC_FIELD_STRING, kernel, 0},
        {"cases", AC_FIELD_NUMBER, NULL, (double)s->cases},
        {"passed", AC_FIELD_NUMBER, NULL, (double)s->passed},
        {"failed", AC_FIELD_NUMBER, NULL, (double)s->failed},
        {"errors", AC_FIELD_NUMBER, NULL, (double)s->errors},
        {"seconds", AC_FIELD_NUMBER, NULL, s->seconds},
        {"cases_per_s", AC_FIELD_NUMBER, NULL, s->seconds > 0 ? (double)s->cases / s->seconds : 0},
        {"seed", AC_FIELD_NUMBER, NULL, seed ? (double)*seed : 0},
    };
    ac_report_record(rep, "campaign", f, sizeof f / sizeof f[0] - (seed ? 0 : 1));
}

static int collect_cases(const ac_cli *c, struct ac_baseline *base, ac_corpus *l)
{
    ac_err err = {{0}};
    int st;
    if (base && !c->case_line && !c->path) { /* run --baseline OLD: replay the old run's lines */
        for (size_t i = 0, n = ac_baseline_size(base); i < n; i++) {
            char where[AC_CORPUS_WHERE_MAX];
            snprintf(where, sizeof where, "%.200s case", c->baseline);
            if ((st = ac_corpus_add_line(l, ac_baseline_line(base, i), where, (long)i + 1, &err)) != AC_OK) {
                fprintf(stderr, "attncheck run: --baseline %s\n", err.msg);
                return st;
            }
        }
        return AC_OK;
    }
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
    ac_err err = {{0}};
    struct ac_baseline *base = NULL;
    int st = ac_cli_baseline_load(c, k->name, &base, &err);
    if (st != AC_OK)
        fprintf(stderr, "attncheck run: %s\n", err.msg);
    if (st == AC_OK)
        st = collect_cases(c, base, &l);
    *completed = st == AC_OK;
    if (st == AC_OK) {
        replay r = {.k = k, .b = b, .o = ac_cli_run_opts(c), .rep = rep, .quiet = c->quiet, .base = base};
        double t0 = ac_now_seconds();
        for (size_t i = 0; i < l.n; i++)
            replay_one(&r, &l.cases[i], l.where[i]);
        r.s.seconds = ac_now_seconds() - t0;
        ac_summary_print(stdout, k->name, &r.s);
        summary_record(rep, "run", k->name, NULL, &r.s);
        if (r.skipped)
            printf("%ld cases skipped: outside %s's capabilities\n", r.skipped, k->name);
        st = exit_status(&r.s);
    }
    ac_corpus_free(&l);
    st = ac_cli_baseline_finish(c, base, st == AC_OK || st == AC_FAIL_ACCURACY ? rep : NULL, st, &err);
    if (st >= AC_ERR_INPUT && err.msg[0])
        fprintf(stderr, "attncheck run: %s\n", err.msg);
    return st;
}

/* ---- list ------------------------------------------------------------------------ */

static void print_caps(const ac_caps *cp, ac_device dev)
{
    printf(" dtypes=");
    for (int t = 0, first = 1; t < AC_DTYPE_COUNT; t++)
        if (cp->dtypes & (1u << t))
            printf("%s%s", first ? "" : ",", ac_dtype_name((ac_dtype)t)), first = 0;
    if (cp->dtypes & AC_DTYPES_FP8) /* fp8: the format P is rounded to before P V, the case's p= */
        printf(" p=%s", ac_dtype_name(cp->fp8_p == AC_F32 ? AC_E4M3 : cp->fp8_p));
    if ((cp->dtypes & AC_DTYPES_FP8) && cp->fp8_acc_bits > 0) /* the fp8 products' accumulator, the case's acc= */
        printf(" acc=e8m%d", cp->fp8_acc_bits);
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
    for (int l = 0, first = 1; l < AC_LAYOUT_COUNT; l++)
        if (cp->layouts & (1u << l))
            printf("%s%s", first ? " layouts=" : ",", ac_layout_name((ac_layout)l)), first = 0;
    printf("%s%s%s", cp->gqa ? " gqa" : "", cp->varlen ? " varlen" : "", cp->backward ? " backward" : "");
    for (int v = 0, first = 1; v < AC_VARIANT_COUNT; v++) /* ref/variants.h */
        if (cp->variants & ac_variant_bit((ac_variant)v))
            printf("%s%s", first ? " variants=" : ",", ac_variant_name((ac_variant)v)), first = 0;
    if (cp->max_seqlen)
        printf(" max-seqlen=%d", cp->max_seqlen);
    if (cp->v_from_k) /* reads V as K's first d_v channels: run only on v=k cases */
        printf(" v=k");
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
    o.mutant_cases = c->cases ? c->cases : c->prove_baseline ? DEFAULT_PROVE_BASELINE_CASES : DEFAULT_PROVE_CASES;
    o.clean_cases = c->clean_cases >= 0 ? c->clean_cases : DEFAULT_PROVE_CLEAN;
    o.max_seqlen = c->max_seqlen;
    o.shrink_steps = c->shrink_steps;
    o.run = ac_cli_run_opts(c);
    o.progress = !c->quiet && isatty(STDERR_FILENO);
    int md = ac_report_format_index("--markdown"); /* prove's Markdown is its detection table */
    o.markdown_path = md >= 0 ? c->report_path[md] : NULL;
    o.out = stdout;
    o.baseline = c->prove_baseline;
    ac_summary totals;
    o.totals = &totals;
    ac_err err = {{0}};
    int st = ac_prove(&o, b, rep, &err);
    *completed = st == AC_OK || st == AC_FAIL_ACCURACY; /* ac_prove's errors stop it */
    if (st >= AC_ERR_INPUT)
        fprintf(stderr, "attncheck prove: %s\n", err.msg);
    else
        summary_record(rep, "prove", o.base, &o.seed, &totals);
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

/* fuzz, run and prove: budgets, a kernel, the outputs checked, a report, the command; list; merge. */
static int run_command(const ac_cli *c, ac_err *err)
{
    if (c->cmd == AC_CMD_LIST)
        return cmd_list();
    if (c->cmd == AC_CMD_MERGE)
        return ac_cmd_merge(c, err);
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
    static ac_cli named; /* the command line with the kernel it resolved to, for the environment record */
    named = *c;
    named.kernel = k ? k->name : c->kernel;
    if (st == AC_OK && c->worker_fd < 0) /* a --jobs worker writes no report: its parent does */
        st = ac_cli_open_report(&named, c->cmd == AC_CMD_PROVE, &rep, err);
    if (st != AC_OK)
        return st;
    bool completed = false;
    if (c->cmd == AC_CMD_FUZZ) {
        st = ac_cmd_fuzz(c, k, &b, rep, &completed); /* a campaign that ran reports (SIGTERM, errors too) */
    } else if (c->cmd == AC_CMD_RUN)
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
    if (!strcmp(argv[1], "__worker")) /* the kernel worker this attncheck spawned (harness/run/worker.h) */
        return ac_worker_main(argc - 1, argv + 1);
    if (!strcmp(argv[1], "check"))
        return ac_cmd_check(argc - 1, argv + 1);
    if (!strcmp(argv[1], "reference"))
        return ac_cmd_reference(argc - 1, argv + 1);
    if (!strcmp(argv[1], "gen"))
        return ac_cmd_gen(argc - 1, argv + 1);
    if (!strcmp(argv[1], "report"))
        return ac_cmd_report(argc - 1, argv + 1);
    if (!strcmp(argv[1], "bench"))
        return ac_cuda_bench(argc - 1, argv + 1);
    return ac_cli_main(argc - 1, argv + 1, run_command);
}
