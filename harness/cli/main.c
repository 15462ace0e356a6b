/* harness/cli/main.c — the `attncheck` command line.
 *
 *   attncheck fuzz | run | list | prove | check | reference | bench [options]
 *
 * Exit status (the AC_* codes): 0 all passed, 1 an accuracy failure, 2 bad
 * usage or input, 3 environment (a requested kernel cannot run here).  Only this
 * file calls exit-like paths: everything below returns a status. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attncheck_config.h"
#include "harness/harness.h"

/* The default campaign: sized to finish well under a minute on 2 CPU cores
 * with cpu-flash (see the README for the measured cases/s). */
#define DEFAULT_FUZZ_CASES 300
#define DEFAULT_SEED 1
#define DEFAULT_CERT_ROWS 2
#define DEFAULT_SHRINK_STEPS 200
#define DEFAULT_PROVE_CASES 2000
#define DEFAULT_PROVE_CLEAN 1000
#define MAX_PLUGINS 16

enum { C_FUZZ = 1, C_RUN = 2, C_LIST = 4, C_PROVE = 8, C_ALL = 15, C_CASES = C_FUZZ | C_RUN | C_PROVE };

typedef struct {
    const char *name;
    bool has_arg;
    unsigned cmds;
    const char *help;
} opt_spec;

static const opt_spec specs[] = {
    {"--kernel", true, C_FUZZ | C_RUN, "NAME  kernel under test (default: the best available)"},
    {"--seed", true, C_FUZZ | C_PROVE, "N  campaign seed (default 1)"},
    {"--cases", true, C_FUZZ | C_PROVE, "N  number of cases (prove: per mutant)"},
    {"--time", true, C_FUZZ, "SECONDS  run for this long instead of a case count"},
    {"--dtype", true, C_FUZZ, "LIST  f32,f16,bf16"},
    {"--mask", true, C_FUZZ, "LIST  mask kinds (none,causal-tl,causal-br,window-tl,window-br,dense; causal, window: both alignments)"},
    {"--max-seqlen", true, C_FUZZ | C_PROVE, "N  cap on nq and nk"},
    {"--stop-first", false, C_FUZZ, "  stop at the first failure"},
    {"--save-failures", true, C_FUZZ, "DIR  append minimal failing lines to DIR/<kernel>.cases"},
    {"--shrink-steps", true, C_FUZZ | C_PROVE, "N  runs allowed to shrink one failure (0 = no shrinking)"},
    {"--no-backward", false, C_FUZZ | C_RUN | C_PROVE, "  forward only"},
    {"--cert-rows", true, C_FUZZ | C_RUN | C_PROVE, "N  MPFR-certified rows per case (default 2)"},
    {"--case", true, C_RUN, "'LINE'  replay this one case line"},
    {"--clean-cases", true, C_PROVE, "N  cases the base kernel must pass"},
    {"--base", true, C_PROVE, "NAME  the correct kernel whose mutants are proved (default cpu-flash)"},
    {"--json", true, C_CASES, "FILE  JSON Lines, one object per case"},
    {"--junit", true, C_CASES, "FILE  JUnit XML"},
    {"--markdown", true, C_CASES, "FILE  Markdown summary (prove: the detection table)"},
    {"--budgets", true, C_CASES, "FILE  budgets file (default: the repository's budgets.txt)"},
    {"--plugin", true, C_ALL, "PATH.so  load a kernel plugin (repeatable)"},
    {"--quiet", false, C_CASES, "  print failures and the summary only"},
    {"--help", false, C_ALL, "  this text"},
};

typedef struct {
    unsigned cmd;
    const char *cmd_name;
    const char *json, *junit, *markdown, *budgets;
    const char *plugins[MAX_PLUGINS];
    int n_plugins;
    bool quiet, help;
    const char *kernel, *save_dir, *case_line, *path, *base;
    uint64_t seed;
    long cases, clean_cases;
    double seconds;
    unsigned dtypes, masks;
    int max_seqlen, cert_rows, shrink_steps;
    bool stop_first, no_backward;
} cli;

/* ---- strict numbers ------------------------------------------------------- */

static int parse_long(const char *opt, const char *s, long min, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < min) {
        fprintf(stderr, "attncheck: %s: '%s' is not an integer >= %ld\n", opt, s, min);
        return AC_ERR_INPUT;
    }
    *out = v;
    return AC_OK;
}

static int parse_int(const char *opt, const char *s, long min, int *out)
{
    long v = 0;
    int st = parse_long(opt, s, min, &v);
    if (st != AC_OK)
        return st;
    if (v > 1L << 30) {
        fprintf(stderr, "attncheck: %s: %s is too large\n", opt, s);
        return AC_ERR_INPUT;
    }
    *out = (int)v;
    return AC_OK;
}

static int parse_seed(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (!*s || *s == '-' || *end || errno) {
        fprintf(stderr, "attncheck: --seed: '%s' is not an unsigned integer\n", s);
        return AC_ERR_INPUT;
    }
    *out = v;
    return AC_OK;
}

static int parse_seconds(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !isfinite(v) || v <= 0) {
        fprintf(stderr, "attncheck: --time: '%s' is not a positive number of seconds\n", s);
        return AC_ERR_INPUT;
    }
    *out = v;
    return AC_OK;
}

/* ---- lists ------------------------------------------------------------------ */

static int parse_dtypes(const char *list, unsigned *out)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", list);
    *out = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        ac_dtype t;
        if (ac_dtype_parse(tok, &t) != AC_OK) {
            fprintf(stderr, "attncheck: --dtype: unknown dtype '%s' (f32, f16, bf16)\n", tok);
            return AC_ERR_INPUT;
        }
        *out |= 1u << t;
    }
    return *out ? AC_OK : (fprintf(stderr, "attncheck: --dtype: empty list\n"), AC_ERR_INPUT);
}

static int parse_masks(const char *list, unsigned *out)
{
    ac_err err = {{0}};
    int st = ac_mask_filter_parse(list, out, &err);
    if (st != AC_OK)
        fprintf(stderr, "attncheck: %s\n", err.msg);
    return st;
}

/* ---- options ---------------------------------------------------------------- */

static int apply_option(cli *c, const char *name, const char *v)
{
    if (!strcmp(name, "--json")) c->json = v;
    else if (!strcmp(name, "--junit")) c->junit = v;
    else if (!strcmp(name, "--markdown")) c->markdown = v;
    else if (!strcmp(name, "--budgets")) c->budgets = v;
    else if (!strcmp(name, "--quiet")) c->quiet = true;
    else if (!strcmp(name, "--help")) c->help = true;
    else if (!strcmp(name, "--kernel")) c->kernel = v;
    else if (!strcmp(name, "--save-failures")) c->save_dir = v;
    else if (!strcmp(name, "--case")) c->case_line = v;
    else if (!strcmp(name, "--base")) c->base = v;
    else if (!strcmp(name, "--stop-first")) c->stop_first = true;
    else if (!strcmp(name, "--no-backward")) c->no_backward = true;
    else if (!strcmp(name, "--seed")) return parse_seed(v, &c->seed);
    else if (!strcmp(name, "--cases")) return parse_long(name, v, 1, &c->cases);
    else if (!strcmp(name, "--clean-cases")) return parse_long(name, v, 0, &c->clean_cases);
    else if (!strcmp(name, "--time")) return parse_seconds(v, &c->seconds);
    else if (!strcmp(name, "--dtype")) return parse_dtypes(v, &c->dtypes);
    else if (!strcmp(name, "--mask")) return parse_masks(v, &c->masks);
    else if (!strcmp(name, "--max-seqlen")) return parse_int(name, v, 1, &c->max_seqlen);
    else if (!strcmp(name, "--cert-rows")) return parse_int(name, v, 0, &c->cert_rows);
    else if (!strcmp(name, "--shrink-steps")) return parse_int(name, v, 0, &c->shrink_steps);
    else if (!strcmp(name, "--plugin")) {
        if (c->n_plugins == MAX_PLUGINS) {
            fprintf(stderr, "attncheck: at most %d --plugin options\n", MAX_PLUGINS);
            return AC_ERR_INPUT;
        }
        c->plugins[c->n_plugins++] = v;
    }
    return AC_OK;
}

static const opt_spec *find_spec(const char *name, size_t len)
{
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++)
        if (strlen(specs[i].name) == len && strncmp(specs[i].name, name, len) == 0)
            return &specs[i];
    return NULL;
}

/* Accepts "--opt value" and "--opt=value"; one positional (run's FILE|DIR). */
static int parse_args(cli *c, int argc, char **argv)
{
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0) {
            if (c->cmd == C_RUN && !c->path) {
                c->path = a;
                continue;
            }
            fprintf(stderr, "attncheck %s: unexpected argument '%s' (see attncheck %s --help)\n", c->cmd_name, a,
                    c->cmd_name);
            return AC_ERR_INPUT;
        }
        const char *eq = strchr(a, '=');
        const opt_spec *s = find_spec(a, eq ? (size_t)(eq - a) : strlen(a));
        if (!s || !(s->cmds & c->cmd)) {
            fprintf(stderr, "attncheck %s: unknown option '%s' (see attncheck %s --help)\n", c->cmd_name, a,
                    c->cmd_name);
            return AC_ERR_INPUT;
        }
        const char *v = NULL;
        if (s->has_arg) {
            if (eq)
                v = eq + 1;
            else if (i + 1 < argc)
                v = argv[++i];
            else {
                fprintf(stderr, "attncheck %s: %s needs a value\n", c->cmd_name, s->name);
                return AC_ERR_INPUT;
            }
        } else if (eq) {
            fprintf(stderr, "attncheck %s: %s takes no value\n", c->cmd_name, s->name);
            return AC_ERR_INPUT;
        }
        int st = apply_option(c, s->name, v);
        if (st != AC_OK)
            return st;
    }
    return AC_OK;
}

static void usage(FILE *f)
{
    fputs("usage: attncheck SUBCOMMAND [options]\n\n"
          "  fuzz       fuzz a kernel against the reference (default: the best kernel here)\n"
          "  run        replay case lines: run FILE|DIR|--case 'LINE'\n"
          "  list       every kernel, its capabilities and whether it can run here\n"
          "  prove      detection power: every mutant of a kernel family must be caught\n"
          "  check      check a kernel's saved tensors (attncheck check --help)\n"
          "  reference  write reference outputs for saved inputs (attncheck reference --help)\n"
          "  bench      GPU benchmark tables\n\n"
          "Exit status: 0 all passed, 1 accuracy failure, 2 bad usage or input, 3 environment.\n"
          "attncheck SUBCOMMAND --help lists its options.\n",
          f);
}

static void subcommand_help(const cli *c)
{
    printf("usage: attncheck %s%s [options]\n\noptions:\n", c->cmd_name, c->cmd == C_RUN ? " FILE|DIR" : "");
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++)
        if (specs[i].cmds & c->cmd)
            printf("  %s %s\n", specs[i].name, specs[i].help);
}

/* ---- shared setup ------------------------------------------------------------ */

static int load_plugins(const cli *c)
{
    for (int i = 0; i < c->n_plugins; i++) {
        const ac_kernel *k;
        ac_err err = {{0}};
        int st = ac_plugin_load(c->plugins[i], &k, &err);
        if (st != AC_OK) {
            fprintf(stderr, "attncheck: --plugin %s: %s\n", c->plugins[i], err.msg);
            return st;
        }
    }
    return AC_OK;
}

static int load_budgets(const cli *c, ac_budgets *b)
{
    ac_err err = {{0}};
    const char *path = c->budgets ? c->budgets : ac_budgets_default_path();
    int st = ac_budgets_load(path, b, &err);
    if (st != AC_OK)
        fprintf(stderr, "attncheck: budgets %s: %s\n", path, err.msg);
    return st;
}

/* --kernel NAME, or the best kernel that can run here. */
static int pick_kernel(const cli *c, const ac_kernel **out)
{
    if (c->kernel) {
        const ac_kernel *k = ac_kernel_find(c->kernel);
        if (!k && !ATTNCHECK_HAVE_CUDA && strncmp(c->kernel, "cuda-", 5) == 0) {
            /* a GPU kernel asked of a build (or machine) without CUDA: the environment, not the user */
            fprintf(stderr, "attncheck: kernel %s cannot run here: built without CUDA\n", c->kernel);
            return AC_ERR_ENV;
        }
        if (!k) {
            fprintf(stderr, "attncheck: --kernel: no kernel named '%s' (see attncheck list)\n", c->kernel);
            return AC_ERR_INPUT;
        }
        ac_err why = {{0}};
        if (!ac_kernel_is_available(k, &why)) {
            fprintf(stderr, "attncheck: kernel %s cannot run here: %s\n", k->name, why.msg);
            return AC_ERR_ENV;
        }
        *out = k;
        return AC_OK;
    }
    static const char *const best[] = {"cuda-flash", "cpu-flash", "ref-fp64"};
    for (size_t i = 0; i < sizeof best / sizeof best[0]; i++) {
        const ac_kernel *k = ac_kernel_find(best[i]);
        if (k && ac_kernel_is_available(k, NULL)) {
            *out = k;
            return AC_OK;
        }
    }
    fprintf(stderr, "attncheck: no kernel can run here (see attncheck list)\n");
    return AC_ERR_ENV;
}

static ac_run_opts run_opts(const cli *c)
{
    ac_run_opts o = {.backward = !c->no_backward, .cert_rows = c->cert_rows};
    return o;
}

static int open_report(const cli *c, bool with_markdown, ac_report **rep)
{
    ac_err err = {{0}};
    const char *paths[] = {c->json, c->junit, with_markdown ? c->markdown : NULL};
    const char *flags[] = {"--json", "--junit", "--markdown"};
    int st = ac_report_open(rep, &err);
    for (int i = 0; st == AC_OK && i < 3; i++)
        if (paths[i])
            st = ac_report_want(*rep, flags[i], paths[i], &err);
    if (st != AC_OK)
        fprintf(stderr, "attncheck: %s\n", err.msg);
    return st;
}

static int close_report(ac_report *rep)
{
    ac_err err = {{0}};
    int st = ac_report_close(rep, &err);
    if (st != AC_OK)
        fprintf(stderr, "attncheck: writing a report: %s\n", err.msg);
    return st;
}

/* Errors outrank failures: a run that could not be judged is not a pass. */
static int exit_status(const ac_summary *s)
{
    if (s->worst_status != AC_OK)
        return s->worst_status;
    return s->failed > 0 ? AC_FAIL_ACCURACY : AC_OK;
}

/* ---- fuzz ---------------------------------------------------------------------- */

static int cmd_fuzz(const cli *c, const ac_kernel *k, const ac_budgets *b, ac_report *rep)
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

static int collect_cases(const cli *c, ac_corpus *l)
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

static int cmd_run(const cli *c, const ac_kernel *k, const ac_budgets *b, ac_report *rep)
{
    ac_corpus l = {0};
    int st = collect_cases(c, &l);
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

static int cmd_prove(const cli *c, const ac_budgets *b, ac_report *rep)
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
    o.markdown_path = c->markdown;
    o.out = stdout;
    ac_err err = {{0}};
    int st = ac_prove(&o, b, rep, &err);
    if (st >= AC_ERR_INPUT)
        fprintf(stderr, "attncheck prove: %s\n", err.msg);
    return st;
}

/* ---- main ------------------------------------------------------------------------- */

static int dispatch(cli *c)
{
    int st = load_plugins(c);
    if (st != AC_OK)
        return st;
    if (c->cmd == C_LIST)
        return cmd_list();
    ac_budgets b;
    if ((st = load_budgets(c, &b)) != AC_OK)
        return st;
    const ac_kernel *k = NULL;
    if (c->cmd != C_PROVE && (st = pick_kernel(c, &k)) != AC_OK)
        return st;
    ac_report *rep = NULL;
    if ((st = open_report(c, c->cmd != C_PROVE, &rep)) != AC_OK)
        return st;
    if (c->cmd == C_FUZZ)
        st = cmd_fuzz(c, k, &b, rep);
    else if (c->cmd == C_RUN)
        st = cmd_run(c, k, &b, rep);
    else
        st = cmd_prove(c, &b, rep);
    int wst = close_report(rep);
    return st != AC_OK ? st : wst;
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        unsigned cmd;
    } cmds[] = {{"fuzz", C_FUZZ}, {"run", C_RUN}, {"list", C_LIST}, {"prove", C_PROVE}};
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? AC_ERR_INPUT : AC_OK;
    }
    if (!strcmp(argv[1], "check"))
        return ac_cmd_check(argc - 1, argv + 1);
    if (!strcmp(argv[1], "reference"))
        return ac_cmd_reference(argc - 1, argv + 1);
    if (!strcmp(argv[1], "bench"))
        return ac_cuda_bench(argc - 1, argv + 1);
    cli c = {.seed = DEFAULT_SEED, .cert_rows = DEFAULT_CERT_ROWS, .shrink_steps = DEFAULT_SHRINK_STEPS,
             .clean_cases = -1};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (!strcmp(argv[1], cmds[i].name))
            c.cmd = cmds[i].cmd, c.cmd_name = cmds[i].name;
    if (!c.cmd) {
        fprintf(stderr, "attncheck: unknown subcommand '%s'\n", argv[1]);
        usage(stderr);
        return AC_ERR_INPUT;
    }
    int st = parse_args(&c, argc - 2, argv + 2);
    if (st != AC_OK)
        return st;
    if (c.help) {
        subcommand_help(&c);
        return AC_OK;
    }
    if (c.cases && c.seconds > 0) {
        fprintf(stderr, "attncheck fuzz: give --cases or --time, not both\n");
        return AC_ERR_INPUT;
    }
    return dispatch(&c);
}
