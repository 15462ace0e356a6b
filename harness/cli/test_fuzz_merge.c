/* harness/cli/test_fuzz_merge.c — the built `attncheck`, run as a campaign at
 * scale runs it: shards merged equal the unsharded run (records, printed
 * summary, Markdown), --jobs does not change the results, a Slurm job array's
 * task is a shard only when the array is 0..N-1, merge refuses what is not one
 * campaign and names missing cases, a time budget and SIGTERM end with the
 * summary and the reports, and the reference tier is in every record.  Suites harness_fuzz, harness_merge. */
#include <criterion/criterion.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "attncheck_config.h"
#include "harness/cli/test_cli_support.h"
#include "harness/files/test_tmpdir.h"

static const char *dir; /* the current test's temp dir, removed by its .fini */

static void make_dir(void) { dir = ac_test_tmpdir("ac-scale"); }

static char out[1 << 16];

/* A path in the test's folder (16 at a time: a command line names many). */
static const char *in_dir(const char *name)
{
    static char p[16][128];
    static int turn;
    turn = (turn + 1) % 16;
    snprintf(p[turn], sizeof p[turn], "%s/%s", dir, name);
    return p[turn];
}

/* Runs `[ENV] attncheck ARGS` (shell syntax); its exit status, its stdout and stderr in out. */
static int run(const char *env, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int run(const char *env, const char *fmt, ...)
{
    char args[4096], cmd[PATH_MAX + 8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "env -u SLURM_ARRAY_TASK_ID %s '%s' %s 2>&1", env ? env : "", cli_bin_path(), args);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    cr_assert(WIFEXITED(st), "%s did not exit", cmd);
    return WEXITSTATUS(st);
}

/* The case records of a JSON Lines file (the environment and campaign
 * records, with dates and timings, left out). */
static char *case_records(const char *path)
{
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s", path);
    char *all = calloc(1, 1 << 22), line[1 << 14];
    size_t used = 0;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "{\"type\"", 7))
            used += (size_t)snprintf(all + used, (1 << 22) - used, "%s", line);
    fclose(f);
    return all;
}

/* The printed summary from its "KERNEL: N cases," line on, the time removed. */
static char *summary_block(const char *text)
{
    const char *at = strstr(text, " cases, ");
    cr_assert_not_null(at, "no summary in:\n%s", text);
    while (at > text && at[-1] != '\n')
        at--;
    char *copy = strdup(at), *in = strstr(copy, " in "), *rate = in ? strstr(in, "cases/s)") : NULL;
    cr_assert_not_null(rate);
    memmove(in, rate + 8, strlen(rate + 8) + 1);
    return copy;
}

/* A small campaign of a mutant: failures, shrinking, distinct minimal lines. */
#define CAMPAIGN \
    "fuzz --kernel cpu-flash-mutant-gqa-head-mod --seed 4 --cases 24 --max-seqlen 40 --shrink-steps 30 --quiet"

Test(harness_merge, shards_merged_equal_the_unsharded_run, .init = make_dir, .fini = ac_test_tmpdirs_remove)
{
    cr_assert_eq(run(NULL, CAMPAIGN " --jobs 1 --json %s --markdown %s", in_dir("u.jsonl"), in_dir("u.md")), 1);
    char *unsharded = strdup(out);
    for (int i = 0; i < 3; i++) {
        char name[16];
        snprintf(name, sizeof name, "s%d.jsonl", i);
        int st = run(NULL, CAMPAIGN " --jobs 1 --shard %d/3 --json %s", i, in_dir(name));
        cr_assert(st == 0 || st == 1, "shard %d: exit %d\n%s", i, st, out);
    }
    int st = run(NULL, "merge %s %s %s --json %s --markdown %s", in_dir("s2.jsonl"), in_dir("s0.jsonl"),
                 in_dir("s1.jsonl"), in_dir("m.jsonl"), in_dir("m.md"));
    cr_assert_eq(st, 1, "merge exits as the campaign did (failures): %d\n%s", st, out);
    char *u = case_records(in_dir("u.jsonl")), *m = case_records(in_dir("m.jsonl"));
    cr_assert_gt(strlen(u), 1000);
    cr_assert_str_eq(m, u, "the merged records are the unsharded run's, in its order");
    char *su = summary_block(unsharded), *sm = summary_block(out);
    cr_assert_not_null(strstr(su, "distinct failures: "), "the mutant fails:\n%s", su);
    cr_assert_str_eq(sm, su, "the summary and the distinct failures");
    char *mu = cli_slurp(in_dir("u.md")), *mm = cli_slurp(in_dir("m.md"));
    cr_assert_str_eq(mm, mu, "the Markdown, byte for byte");
    free(unsharded), free(u), free(m), free(su), free(sm), free(mu), free(mm);
}

Test(harness_fuzz, jobs_do_not_change_the_records_or_the_summary, .init = make_dir, .fini = ac_test_tmpdirs_remove)
{
    cr_assert_eq(run(NULL, CAMPAIGN " --jobs 1 --json %s", in_dir("j1.jsonl")), 1, "%s", out);
    char *s1 = summary_block(out);
    cr_assert_eq(run(NULL, CAMPAIGN " --jobs 3 --json %s", in_dir("j3.jsonl")), 1, "%s", out);
    char *s3 = summary_block(out);
    char *r1 = case_records(in_dir("j1.jsonl")), *r3 = case_records(in_dir("j3.jsonl"));
    cr_assert_str_eq(r3, r1, "--jobs 3 writes --jobs 1's records, in case-index order");
    cr_assert_str_eq(s3, s1);
    char *j3 = cli_slurp(in_dir("j3.jsonl"));
    cr_assert_not_null(strstr(j3, "\"jobs\":3"), "the campaign record says how many workers ran");
    free(s1), free(s3), free(r1), free(r3), free(j3);
}

#define SMALL "fuzz --kernel cpu-flash --seed 2 --cases 12 --max-seqlen 24 --quiet --jobs 1"

Test(harness_fuzz, a_slurm_array_task_is_a_shard_and_another_array_is_refused, .init = make_dir,
     .fini = ac_test_tmpdirs_remove)
{
    cr_assert_eq(run(NULL, SMALL " --shard 1/3 --json %s", in_dir("flag.jsonl")), 0, "%s", out);
    const char *array = "SLURM_ARRAY_TASK_ID=1 SLURM_ARRAY_TASK_COUNT=3 SLURM_ARRAY_TASK_MIN=0 "
                        "SLURM_ARRAY_TASK_MAX=2 SLURM_ARRAY_TASK_STEP=1";
    cr_assert_eq(run(array, SMALL " --json %s", in_dir("env.jsonl")), 0, "%s", out);
    char *a = case_records(in_dir("flag.jsonl")), *b = case_records(in_dir("env.jsonl"));
    cr_assert_str_eq(b, a, "task 1 of a 0..2 array runs shard 1/3");
    cr_assert_not_null(strstr(a, "\"index\":1,"), "shard 1/3 holds case 1");
    cr_assert_null(strstr(a, "\"index\":2,"), "and not case 2");
    const char *shifted = "SLURM_ARRAY_TASK_ID=2 SLURM_ARRAY_TASK_COUNT=3 SLURM_ARRAY_TASK_MIN=1 "
                          "SLURM_ARRAY_TASK_MAX=3 SLURM_ARRAY_TASK_STEP=1";
    cr_assert_eq(run(shifted, SMALL), 2, "an array 1..3 is not a shard:\n%s", out);
    cr_assert_not_null(strstr(out, "pass --shard I/N"), "%s", out);
    const char *stepped = "SLURM_ARRAY_TASK_ID=2 SLURM_ARRAY_TASK_COUNT=2 SLURM_ARRAY_TASK_MIN=0 "
                          "SLURM_ARRAY_TASK_MAX=2 SLURM_ARRAY_TASK_STEP=2";
    cr_assert_eq(run(stepped, SMALL), 2, "0,2 is not a shard either:\n%s", out);
    cr_assert_eq(run(shifted, SMALL " --shard 0/2"), 0, "--shard wins over the environment:\n%s", out);
    free(a), free(b);
}

Test(harness_merge, what_is_not_one_campaign_is_refused_and_missing_cases_named, .init = make_dir,
     .fini = ac_test_tmpdirs_remove)
{
    for (int i = 0; i < 2; i++) {
        char name[16];
        snprintf(name, sizeof name, "s%d.jsonl", i);
        cr_assert_eq(run(NULL, SMALL " --shard %d/2 --json %s", i, in_dir(name)), 0, "%s", out);
    }
    cr_assert_eq(run(NULL, "merge %s %s %s", in_dir("s0.jsonl"), in_dir("s1.jsonl"), in_dir("s0.jsonl")), 2);
    cr_assert_not_null(strstr(out, "case 0 is in "), "a duplicate is named:\n%s", out);
    cr_assert_eq(run(NULL, "merge %s --json %s", in_dir("s0.jsonl"), in_dir("half.jsonl")), 3);
    cr_assert_not_null(strstr(out, "MISSING 6 of the 12 cases"), "%s", out);
    cr_assert_not_null(strstr(out, ": 1, 3, 5, 7, 9, 11 "), "the missing indices are named:\n%s", out);
    cr_assert_not_null(strstr(out, "6 cases"), "and the rest merged:\n%s", out);
    char *half = cli_slurp(in_dir("half.jsonl"));
    cr_assert_not_null(strstr(half, "\"missing\":6"), "the campaign record counts them");
    free(half);
    cr_assert_eq(run(NULL,
                     "fuzz --kernel cpu-flash --seed 3 --cases 12 --max-seqlen 24 --quiet --jobs 1 "
                     "--shard 1/2 --json %s",
                     in_dir("seed3.jsonl")),
                 0);
    cr_assert_eq(run(NULL, "merge %s %s", in_dir("s0.jsonl"), in_dir("seed3.jsonl")), 2);
    cr_assert_not_null(strstr(out, "seed is 2 in one, 3 in the other"), "%s", out);
    cr_assert_eq(run(NULL,
                     "fuzz --kernel cpu-flash-128x64 --seed 2 --cases 12 --max-seqlen 24 --quiet --jobs 1 "
                     "--shard 1/2 --json %s",
                     in_dir("other.jsonl")),
                 0);
    cr_assert_eq(run(NULL, "merge %s %s", in_dir("s0.jsonl"), in_dir("other.jsonl")), 2);
    cr_assert_not_null(strstr(out, "kernel is \"cpu-flash\" in one, \"cpu-flash-128x64\""), "%s", out);
    cr_assert_eq(run(NULL, "merge"), 2, "no file is bad usage");
}

Test(harness_fuzz, a_time_budget_ends_with_the_summary_and_the_tier_is_in_every_record, .init = make_dir,
     .fini = ac_test_tmpdirs_remove)
{
    int st = run(NULL, "fuzz --kernel cpu-flash --time 0.8 --max-seqlen 1024 --jobs 2 --json %s", in_dir("t.jsonl"));
    cr_assert_eq(st, 0, "%s", out);
    cr_assert_not_null(strstr(out, "time budget 0.8 s"), "the header names the budget:\n%s", out);
    cr_assert_not_null(strstr(out, "cpu-flash: "), "the summary is printed:\n%s", out);
    char *json = cli_slurp(in_dir("t.jsonl"));
    const char *camp = strstr(json, "{\"type\":\"campaign\"");
    cr_assert_not_null(camp);
    double seconds = atof(strstr(camp, "\"seconds\":") + 10);
    cr_assert_leq(seconds, 0.8 + 0.3, "no case started that would end past the budget: %g s", seconds);
    int cases = 0, cpu = 0;
    for (const char *at = json; (at = strstr(at, "\"index\":")); at++)
        cases++;
    for (const char *at = json; (at = strstr(at, "\"reference\":{\"tier\":\"cpu\"}")); at++)
        cpu++;
    cr_assert_gt(cases, 0);
    cr_assert_eq(cpu, cases, "auto without a GPU (or below its size) is the cpu tier, in every record");
    free(json);
}

Test(harness_fuzz, the_header_names_the_case_budget_and_a_missing_gpu_tier_is_an_environment_error)
{
    cr_assert_eq(run(NULL, "fuzz --kernel cpu-flash --cases 3 --max-seqlen 16 --jobs 1"), 0, "%s", out);
    cr_assert_not_null(strstr(out, "case budget 3 (cases 0..2)"), "%s", out);
    if (!ATTNCHECK_HAVE_CUDA) {
        cr_assert_eq(run(NULL, "fuzz --kernel cpu-flash --cases 3 --reference gpu"), 3, "%s", out);
        cr_assert_not_null(strstr(out, "--reference gpu: built without CUDA"), "%s", out);
    }
    cr_assert_eq(run(NULL, "fuzz --reference fpga"), 2);
    cr_assert_not_null(strstr(out, "auto, cpu, gpu"), "%s", out);
}

/* Starts `attncheck ARGS > OUT 2>&1`, sends SIGTERM after `after_s`, waits; its exit status. */
static int run_then_term(const char *args, const char *out_path, double after_s)
{
    char cmd[PATH_MAX + 4096];
    snprintf(cmd, sizeof cmd, "exec '%s' %s >'%s' 2>&1", cli_bin_path(), args, out_path);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    struct timespec ts = {(time_t)after_s, (long)((after_s - (double)(time_t)after_s) * 1e9)};
    nanosleep(&ts, NULL);
    kill(pid, SIGTERM);
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st), "it exits, not killed by the signal");
    return WEXITSTATUS(st);
}

Test(harness_fuzz, sigterm_ends_the_campaign_with_its_reports_and_summary, .init = make_dir,
     .fini = ac_test_tmpdirs_remove)
{
    for (int jobs = 1; jobs <= 2; jobs++) {
        char args[1024], log[64], json[64];
        snprintf(log, sizeof log, "term%d.txt", jobs);
        snprintf(json, sizeof json, "term%d.jsonl", jobs);
        snprintf(args, sizeof args, "fuzz --kernel cpu-flash --cases 1000000 --jobs %d --quiet --json '%s'", jobs,
                 in_dir(json));
        int st = run_then_term(args, in_dir(log), 0.7);
        cr_assert_eq(st, 0, "--jobs %d: exit %d", jobs, st);
        char *text = cli_slurp(in_dir(log)), *records = cli_slurp(in_dir(json));
        cr_assert_not_null(strstr(text, "stopped early: signal"), "--jobs %d says why:\n%s", jobs, text);
        cr_assert_not_null(strstr(text, "cpu-flash: "), "and prints its summary:\n%s", text);
        int cases = 0;
        for (const char *at = records; (at = strstr(at, "\"index\":")); at++)
            cases++;
        cr_assert_gt(cases, 0, "--jobs %d: the cases that finished are in the report", jobs);
        char want[64];
        snprintf(want, sizeof want, "\"cases\":%d,", cases);
        cr_assert_not_null(strstr(records, want), "the campaign record counts them (%d):\n%.300s", cases,
                           strstr(records, "{\"type\":\"campaign\""));
        free(text), free(records);
    }
}
