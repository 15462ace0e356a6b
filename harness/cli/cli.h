/* harness/cli/cli.h — the command line: one option table (options.c) for
 * every subcommand, the same spellings everywhere ("--opt value" and
 * "--opt=value"; masks in the case line's words), and the subcommands that
 * live outside main.c.
 *
 * Exit statuses are the AC_* codes: 0 all passed, 1 an accuracy failure,
 * 2 bad usage or input, 3 environment.  --help prints the subcommand's usage
 * on stdout and exits 0: the parser says so with AC_CLI_HELP, a value no exit
 * status takes. */
#ifndef ATTNCHECK_CLI_H
#define ATTNCHECK_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "harness/case/case.h"
#include "harness/report/report.h"
#include "harness/verdict/budget.h"
#include "kernels/kernel.h"
#include "ref/ref.h"

typedef enum {
    AC_CMD_FUZZ = 1u << 0,
    AC_CMD_RUN = 1u << 1,
    AC_CMD_LIST = 1u << 2,
    AC_CMD_PROVE = 1u << 3,
    AC_CMD_CHECK = 1u << 4,
    AC_CMD_REFERENCE = 1u << 5,
    AC_CMD_GEN = 1u << 6,
    AC_CMD_MERGE = 1u << 7,
} ac_cmd;

#define AC_CLI_HELP (-1) /* ac_cli_parse: --help asked for; print ac_cli_usage, exit 0 */
#define AC_DEFAULT_SEED 1
#define AC_DEFAULT_FUZZ_CASES 300 /* sized to finish well under a minute on 2 CPU cores with cpu-flash */
#define AC_DEFAULT_CERT_ROWS 2 /* MPFR-certified rows per case, every subcommand */
#define AC_MAX_CERT_ROWS 1000
#define AC_DEFAULT_SHRINK_STEPS 200
#define AC_MAX_PLUGINS 16
#define AC_MAX_EXEC 16 /* --exec / --exec-persistent kernels */
#define AC_MAX_MERGE_FILES 4096

/* Everything a command line can say; each subcommand reads its own options. */
typedef struct {
    ac_cmd cmd;
    const char *cmd_name;
    const char *path; /* run FILE|DIR; check, reference PATH */
    /* reports: the file per format of report/report.h's table (NULL: not asked for) */
    const char *report_path[AC_REPORT_MAX_FORMATS];
    const char *budgets;
    const char *plugins[AC_MAX_PLUGINS];
    int n_plugins;
    bool quiet;
    /* --exec CMD / --exec-persistent CMD: external kernels; the i-th --caps and
     * --exec-name go with the i-th command (one --caps serves them all) */
    const char *exec_cmd[AC_MAX_EXEC], *exec_caps[AC_MAX_EXEC], *exec_name[AC_MAX_EXEC];
    bool exec_persistent[AC_MAX_EXEC];
    int n_exec, n_exec_caps, n_exec_name;
    double exec_timeout; /* seconds per call; 0: the default */
    /* fuzz, run, prove */
    const char *kernel, *save_dir, *case_line, *base;
    uint64_t seed;
    long cases, clean_cases; /* 0 / -1: not given */
    double seconds;
    unsigned dtypes; /* --dtype LIST: bit per ac_dtype (0: all) */
    unsigned masks; /* fuzz --mask LIST: bit per ac_mask_kind (0: all) */
    int max_seqlen, cert_rows, shrink_steps;
    bool stop_first, no_backward;
    const char *baseline; /* fuzz, run, check --baseline OLD.jsonl */
    bool prove_baseline; /* prove --baseline: the precision family */
    bool in_process; /* --in-process: the kernel runs in attncheck's own process */
    double kernel_timeout_s; /* --kernel-timeout S: per kernel call (0: scaled from the FLOPs) */
    /* scale: fuzz --jobs, --shard, --profile, --min-seqlen; every subcommand --reference, --mem-budget */
    int jobs; /* 0: not given (the machine's, ac_default_jobs) */
    int shard_index, shard_count; /* --shard I/N; count 0: not given (the Slurm array's, else all) */
    int worker_fd; /* --worker FD (internal, a --jobs worker): -1 when not one */
    double deadline; /* --deadline T (internal): a worker's end of the time budget */
    int min_seqlen;
    const char *profile, *reference; /* NULL: default, auto */
    double mem_budget_gib; /* 0: not given (AC_DEFAULT_MEM_BUDGET) */
    int argc; /* the subcommand's argv (argv[0] its name): --jobs reruns it */
    char **argv;
    /* merge FILE.jsonl... */
    const char *paths[AC_MAX_MERGE_FILES];
    int n_paths;
    /* check, reference: the raw values, read against the files' shapes */
    const char *dtype, *mask, *mask_file, *out, *layout, *seqlens_q, *seqlens_k, *scale, *lse_base;
    /* check, reference: the variants (harness/cli/check_variants.c) */
    const char *softcap, *sinks, *alibi, *bias, *sink_tokens, *dropout_p, *dropout_mask;
    const char *cu_seqlens_q, *cu_seqlens_k; /* --layout thd */
    const char *block_table; /* --block-table FILE: a paged KV cache (check_paged.c) */
    int page_size; /* --page-size P; 0: not given */
    const char *descale_q, *descale_k, *descale_v, *descale_block; /* fp8 inputs (harness/cli/check_fp8.c) */
    const char *fp8_acc; /* fp8 inputs: --fp8-acc f32|e8mB, the fp8 products' accumulator (check_fp8.c) */
    bool v_from_k; /* --v-from-k (or problem.json's "v_from_k"): v is k's first d_v channels, checked */
} ac_cli;

/* Parses the options of subcommand argv[0] ("fuzz", "check", ...) from
 * argv[1..argc).  AC_OK; AC_CLI_HELP; or AC_ERR_INPUT with a message naming the
 * option (an unknown subcommand, option or value, a retired spelling). */
int ac_cli_parse(int argc, char **argv, ac_cli *c, ac_err *err);
/* `attncheck CMD --help`, from the option table. */
void ac_cli_usage(FILE *f, const ac_cli *c);
/* `attncheck --help`: the subcommands and the exit statuses. */
void ac_cli_overview(FILE *f);

/* A subcommand end to end: parse argv (argv[0] its name), answer --help,
 * load the plugins, run(c), print "attncheck CMD: message" for an error.
 * Returns the exit status. */
int ac_cli_main(int argc, char **argv, int (*run)(const ac_cli *c, ac_err *err));

/* Loads the --plugin libraries and registers the --exec kernels; AC_OK or the
 * status with err naming the file or command.  Without --kernel (--base for
 * prove), the first --exec kernel is the one run. */
int ac_cli_load_plugins(ac_cli *c, ac_err *err);
/* A report with every format the command line asked for (skip_markdown: prove
 * writes its own table there); *rep is NULL on failure. */
int ac_cli_open_report(const ac_cli *c, bool skip_markdown, ac_report **rep, ac_err *err);

/* baseline_cli.c: --baseline OLD.jsonl for fuzz, run and check (verdict/baseline.h). */
struct ac_baseline;
/* Loads c->baseline (NULL when not given: *b = NULL, AC_OK), the records of `kernel`. */
int ac_cli_baseline_load(const ac_cli *c, const char *kernel, struct ac_baseline **b, ac_err *err);
/* fuzz --baseline: the old run's case lines (the first --cases of them), parsed, for
 * ac_campaign_opts.replay; *cases is malloc'd.  AC_ERR_INPUT names FILE and the line. */
int ac_cli_baseline_cases(const ac_cli *c, struct ac_baseline *b, ac_case **cases, size_t *n, ac_err *err);
/* An ac_campaign_opts.observe that pairs each result (ctx: the ac_baseline). */
bool ac_cli_baseline_observe(void *ctx, const ac_result *r);
/* Evaluates with the budgets' regression-ratio and regression-p, prints the
 * table on stdout, adds it to rep (may be NULL), frees b.  Returns status, or
 * AC_FAIL_ACCURACY for a regression when status is AC_OK, or an error. */
int ac_cli_baseline_finish(const ac_cli *c, struct ac_baseline *b, ac_report *rep, int status, ac_err *err);

/* report.c: `attncheck report FILE.jsonl... --html OUT.html` runs reports/html_report.py. */
int ac_cmd_report(int argc, char **argv);
/* The run options of every subcommand from the command line (options.c):
 * backward, certified rows, the kernel worker (--in-process) and --kernel-timeout. */
ac_run_opts ac_cli_run_opts(const ac_cli *c);

/* The {"type":"environment"} record of a report (environment.c): what produced
 * it (command, commit, version, budgets file and its SHA-256, seed, reference
 * tier, certified rows, host, date, GPU and driver, and the campaign's options);
 * kernel: the kernel under test (NULL: the command line's). */
void ac_cli_environment(const ac_cli *c, const char *kernel, ac_report *rep);
/* The shard of this campaign: --shard, else a Slurm job array's task when the
 * array is exactly 0..N-1 (SLURM_ARRAY_TASK_MIN 0, step 1, max N-1), else all
 * (0/1).  AC_ERR_INPUT, asking for --shard, for another array (fuzz.c). */
int ac_cli_shard(const ac_cli *c, int *index, int *count, ac_err *err);
/* fuzz.c: `attncheck fuzz` (the parent, or a --jobs worker); merge.c: `attncheck merge`. */
/* *ran: the campaign ran (its reports are written even when some cases ended in errors). */
int ac_cmd_fuzz(const ac_cli *c, const ac_kernel *k, const ac_budgets *b, ac_report *rep, bool *ran);
int ac_cmd_merge(const ac_cli *c, ac_err *err);

/* check.c: `attncheck check PATH [options]`, `attncheck reference PATH --out ...`.
 * argv[0] is the subcommand's name; each returns an exit status. */
int ac_cmd_check(int argc, char **argv);
int ac_cmd_reference(int argc, char **argv);
/* gen.c: `attncheck gen --case LINE --out DIR`: a case's inputs as files. */
int ac_cmd_gen(int argc, char **argv);

#endif
