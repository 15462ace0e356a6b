/* harness/cli/fuzz.c — `attncheck fuzz`: the campaign's options from the
 * command line, its shard (--shard, or a Slurm job array's task), its workers
 * (--jobs), SIGTERM and SIGINT (the cases that finished are reported and the
 * summary printed), the header, the summary, the distinct failures and the
 * {"type":"campaign"} record.  A --jobs worker (--worker FD) runs the same
 * loop over its shard and streams its cases to the parent instead. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness/campaign/campaign.h"
#include "harness/cli/cli.h"
#include "harness/run/reference.h"

/* ---- the shard --------------------------------------------------------------------- */

static bool env_long(const char *name, long *out)
{
    const char *v = getenv(name);
    char *end;
    if (!v || !*v)
        return false;
    *out = strtol(v, &end, 10);
    return *end == '\0';
}

int ac_cli_shard(const ac_cli *c, int *index, int *count, ac_err *err)
{
    *index = 0, *count = 1;
    if (c->shard_count > 0) {
        *index = c->shard_index, *count = c->shard_count;
        return AC_OK;
    }
    long id = 0, n = 0, min = -1, max = -1, step = 1;
    if (!env_long("SLURM_ARRAY_TASK_ID", &id))
        return AC_OK; /* not a job array: the whole stream */
    bool have = env_long("SLURM_ARRAY_TASK_COUNT", &n) && env_long("SLURM_ARRAY_TASK_MIN", &min) &&
        env_long("SLURM_ARRAY_TASK_MAX", &max);
    if (getenv("SLURM_ARRAY_TASK_STEP") && !env_long("SLURM_ARRAY_TASK_STEP", &step))
        have = false;
    if (!have || min != 0 || step != 1 || max != n - 1 || id < 0 || id >= n)
        return ac_fail(err, AC_ERR_INPUT,
                       "this Slurm job array is not 0..N-1 (SLURM_ARRAY_TASK_ID=%s MIN=%s MAX=%s STEP=%s COUNT=%s), "
                       "so its task is not a shard: pass --shard I/N (e.g. --shard $SLURM_ARRAY_TASK_ID/N)",
                       getenv("SLURM_ARRAY_TASK_ID"),
                       getenv("SLURM_ARRAY_TASK_MIN") ? getenv("SLURM_ARRAY_TASK_MIN") : "unset",
                       getenv("SLURM_ARRAY_TASK_MAX") ? getenv("SLURM_ARRAY_TASK_MAX") : "unset",
                       getenv("SLURM_ARRAY_TASK_STEP") ? getenv("SLURM_ARRAY_TASK_STEP") : "unset",
                       getenv("SLURM_ARRAY_TASK_COUNT") ? getenv("SLURM_ARRAY_TASK_COUNT") : "unset");
    *index = (int)id, *count = (int)n;
    return AC_OK;
}

/* ---- signals ------------------------------------------------------------------------ */

static volatile sig_atomic_t stop_requested;

static void on_stop_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

/* SIGTERM (Slurm's time limit, kill) and SIGINT end the campaign after the
 * cases in flight; the reports and the summary still come. */
static void catch_stop_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
}

/* ---- the campaign ------------------------------------------------------------------- */

static int fuzz_opts(const ac_cli *c, ac_campaign_opts *o, ac_err *err)
{
    memset(o, 0, sizeof *o);
    o->seed = c->seed;
    o->max_cases = c->seconds > 0 && !c->cases ? 0 : c->cases ? c->cases : AC_DEFAULT_FUZZ_CASES;
    o->max_seconds = c->seconds;
    o->deadline = c->deadline;
    o->dtype_filter = c->dtypes;
    o->mask_filter = c->masks;
    o->min_seqlen = c->min_seqlen;
    o->max_seqlen = c->max_seqlen;
    if (c->profile && ac_profile_parse(c->profile, &o->profile, err) != AC_OK)
        return AC_ERR_INPUT;
    o->tier_cap = true;
    o->stop_first = c->stop_first;
    o->shrink_steps = c->shrink_steps;
    o->save_dir = c->save_dir;
    o->run = ac_cli_run_opts(c); /* backward, certification, the kernel worker and its deadline */
    o->progress = !c->quiet && isatty(STDERR_FILENO);
    o->out = stdout;
    o->stop = &stop_requested;
    return ac_cli_shard(c, &o->shard_index, &o->shard_count, err);
}

static void print_header(const ac_cli *c, const ac_kernel *k, const ac_campaign_opts *o, int jobs)
{
    char budget[96], shard[48] = "";
    if (o->replay)
        snprintf(budget, sizeof budget, "the %zu case lines of --baseline", o->n_replay);
    else if (o->max_cases)
        snprintf(budget, sizeof budget, "case budget %ld (cases 0..%ld)", o->max_cases, o->max_cases - 1);
    else
        snprintf(budget, sizeof budget, "time budget %g s", o->max_seconds);
    if (o->shard_count > 1)
        snprintf(shard, sizeof shard, ", shard %d/%d", o->shard_index, o->shard_count);
    printf("attncheck fuzz: kernel %s, seed %llu, %s%s, profile %s, reference %s, %d job%s\n", k->name,
           (unsigned long long)c->seed, budget, shard, ac_profile_name(o->profile),
           c->reference ? c->reference : "auto", jobs, jobs == 1 ? "" : "s");
    fflush(stdout);
}

static void campaign_record(const ac_cli *c, const ac_kernel *k, const ac_campaign_result *res, ac_report *rep)
{
    const ac_summary *s = &res->s;
    ac_report_field f[] = {
        {"subcommand", AC_FIELD_STRING, "fuzz", 0},
        {"kernel", AC_FIELD_STRING, k->name, 0},
        {"seed", AC_FIELD_NUMBER, NULL, (double)c->seed},
        {"cases", AC_FIELD_NUMBER, NULL, (double)s->cases},
        {"passed", AC_FIELD_NUMBER, NULL, (double)s->passed},
        {"failed", AC_FIELD_NUMBER, NULL, (double)s->failed},
        {"errors", AC_FIELD_NUMBER, NULL, (double)s->errors},
        {"distinct_failures", AC_FIELD_NUMBER, NULL, (double)res->failures.n},
        {"seconds", AC_FIELD_NUMBER, NULL, s->seconds},
        {"cases_per_s", AC_FIELD_NUMBER, NULL, s->seconds > 0 ? (double)s->cases / s->seconds : 0},
        {"jobs", AC_FIELD_NUMBER, NULL, res->jobs},
        {"stopped", AC_FIELD_STRING, res->stopped, 0},
    };
    ac_report_record(rep, "campaign", f, sizeof f / sizeof f[0] - (res->stopped[0] ? 0 : 1));
}

/* Errors outrank failures: a run that could not be judged is not a pass. */
static int exit_status(const ac_summary *s)
{
    if (s->worst_status != AC_OK)
        return s->worst_status;
    return s->failed > 0 ? AC_FAIL_ACCURACY : AC_OK;
}

int ac_cmd_fuzz(const ac_cli *c, const ac_kernel *k, const ac_budgets *b, ac_report *rep, bool *ran)
{
    *ran = false;
    ac_campaign_opts o;
    ac_err err = {{0}};
    catch_stop_signals();
    if (fuzz_opts(c, &o, &err) != AC_OK) {
        fprintf(stderr, "attncheck fuzz: %s\n", err.msg);
        return AC_ERR_INPUT;
    }
    struct ac_baseline *base = NULL; /* --baseline: the old run's lines instead of the generator's */
    ac_case *replay = NULL;
    int st = ac_cli_baseline_load(c, k->name, &base, &err);
    if (st == AC_OK && base && (st = ac_cli_baseline_cases(c, base, &replay, &o.n_replay, &err)) == AC_OK)
        o.replay = replay, o.max_cases = 0;
    if (st != AC_OK) {
        fprintf(stderr, "attncheck fuzz: %s\n", err.msg);
        ac_cli_baseline_finish(c, base, NULL, st, &err);
        return st;
    }
    if (c->worker_fd >= 0) { /* a --jobs worker: its shard of the lines; no header, reports or summary */
        st = ac_campaign_worker(k, b, &o, c->worker_fd);
        free(replay);
        return st;
    }
    if (base) /* the pairs are made where every outcome arrives: the collector */
        o.observe = ac_cli_baseline_observe, o.observe_ctx = base;
    int jobs = ac_campaign_jobs(&o, c->jobs > 0 ? c->jobs : ac_default_jobs(&o));
    if (!c->quiet)
        print_header(c, k, &o, jobs);
    ac_campaign_result res;
    st = ac_fuzz_campaign(k, b, &o, jobs, c->argc, c->argv, rep, &res, &err);
    *ran = true; /* its cases are reported, whatever the status: errors in some cases, a device fault */
    free(replay);
    if (res.stopped[0])
        printf("stopped early: %s\n", res.stopped);
    ac_summary_print(stdout, k->name, &res.s);
    ac_failure_set_print(stdout, &res.failures);
    campaign_record(c, k, &res, rep);
    ac_failure_set_free(&res.failures);
    if (st != AC_OK) {
        fprintf(stderr, "attncheck fuzz: %s\n", err.msg);
        return ac_cli_baseline_finish(c, base, NULL, st, &err);
    }
    st = ac_cli_baseline_finish(c, base, rep, exit_status(&res.s), &err);
    if (st >= AC_ERR_INPUT && err.msg[0])
        fprintf(stderr, "attncheck fuzz: %s\n", err.msg);
    return st;
}
