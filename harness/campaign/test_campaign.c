/* harness/campaign/test_campaign.c — the loop and the collector in this
 * process: a shard runs its residue of the stream; outcomes that arrive out of
 * order are reported in case-index order, past the indices of a worker that
 * ended; a time budget never starts a case it cannot finish, even on a kernel
 * slower than any prior; a failure already in the corpus is not saved again.
 * Suite harness_campaign. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness/files/test_tmpdir.h"
#include "harness/harness.h"

/* A test's files live in its folders (ac_test_tmpdir), removed after it even when it fails. */
TestSuite(harness_campaign, .fini = ac_test_tmpdirs_remove);

static ac_budgets budgets(void)
{
    ac_budgets b;
    ac_err err;
    cr_assert_eq(ac_budgets_load(ac_budgets_default_path(), &b, &err), AC_OK, "%s", err.msg);
    return b;
}

/* ---- a sink that keeps what it is sent -------------------------------------------- */

#define KEEP_MAX 512
typedef struct {
    long index[KEEP_MAX];
    double found_at[KEEP_MAX], seconds[KEEP_MAX];
    int n;
} kept;

static bool keep(void *ctx, const ac_outcome *oc)
{
    kept *k = ctx;
    cr_assert_lt(k->n, KEEP_MAX);
    k->index[k->n] = oc->r.index;
    k->found_at[k->n] = oc->found_at;
    k->seconds[k->n++] = oc->r.seconds;
    return true;
}

Test(harness_campaign, a_shard_runs_the_indices_of_its_residue)
{
    const ac_kernel *k = ac_kernel_find("cpu-flash");
    ac_budgets b = budgets();
    ac_campaign_opts o = {
        .seed = 3, .max_cases = 11, .max_seqlen = 16, .shard_index = 1, .shard_count = 3, .run = {.cert_rows = 0}};
    static kept got;
    memset(&got, 0, sizeof got);
    ac_outcome_sink sink = {keep, &got};
    ac_loop_end end;
    ac_campaign_loop(k, &b, &o, &sink, &end);
    cr_assert_eq(end.status, AC_OK, "%s", end.err.msg);
    long want[] = {1, 4, 7, 10};
    cr_assert_eq(got.n, 4);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(got.index[i], want[i]);
    cr_assert_eq(end.cases, 4);
    cr_assert_str_eq(end.stopped, "", "a case budget run to its end stops for no reason");
}

/* ---- the collector's order ---------------------------------------------------------------- */

static ac_outcome outcome(long index)
{
    ac_outcome oc;
    memset(&oc, 0, sizeof oc);
    oc.r.index = index;
    oc.r.verdict = AC_VERDICT_PASS;
    oc.r.dtype = AC_F16;
    snprintf(oc.r.line, sizeof oc.r.line, "case-%ld", index);
    return oc;
}

static char *indices_in_json(const char *path)
{
    static char seen[512];
    seen[0] = '\0';
    FILE *f = fopen(path, "r");
    char line[1 << 14];
    while (f && fgets(line, sizeof line, f)) {
        const char *at = strstr(line, "\"index\":");
        if (at)
            snprintf(seen + strlen(seen), sizeof seen - strlen(seen), "%ld ", atol(at + 8));
    }
    if (f)
        fclose(f);
    return seen;
}

Test(harness_campaign, outcomes_in_any_order_are_reported_in_index_order)
{
    char path[128];
    snprintf(path, sizeof path, "%s/collect.jsonl", ac_test_tmpdir("ac-collect"));
    ac_report *rep;
    ac_err err;
    cr_assert_eq(ac_report_open(&rep, &err), AC_OK);
    cr_assert_eq(ac_report_want(rep, "--json", path, &err), AC_OK);
    ac_campaign_opts o = {.max_cases = 0};
    ac_collector *c = ac_collector_open("k", &o, rep);
    /* two workers: A runs 0, 2, 4, ...; B runs 1, 3, ... and ends after 3 */
    long order[] = {2, 4, 0, 6, 1, 8, 3};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        ac_outcome oc = outcome(order[i]);
        cr_assert(ac_collector_add(c, &oc));
    }
    cr_assert_eq(ac_collector_waiting(c), 2, "6 and 8 wait for 5");
    ac_collector_worker_done(c, 1, 2);
    cr_assert_eq(ac_collector_waiting(c), 0, "5 will not come: B has ended");
    ac_outcome late = outcome(10);
    ac_collector_add(c, &late);
    cr_assert_eq(ac_collector_waiting(c), 0, "and 9 neither");
    ac_summary s;
    cr_assert_eq(ac_collector_finish(c, &s, &err), AC_OK);
    cr_assert_eq(s.cases, 8);
    cr_assert_eq(s.passed, 8);
    ac_collector_free(c);
    cr_assert_eq(ac_report_close(rep, &err), AC_OK);
    cr_assert_str_eq(indices_in_json(path), "0 1 2 3 4 6 8 10 ");
}

/* ---- a time budget on a slow kernel ---------------------------------------------------------- */

/* The fp64 reference rounded to the dtype, then a sleep of 30 ns per visible
 * (query, key) pair and head times d + 12: about ten times what the reference
 * tier's prior says a case costs, so the loop must learn the kernel's rate. */
static int slow_forward(const ac_kernel *self, const ac_problem *p, ac_dtype t, const ac_fwd_args *a, ac_err *err)
{
    (void)self;
    int st = ac_kernel_ref_fp64.forward(&ac_kernel_ref_fp64, p, t, a, err);
    double pairs = 0;
    for (int i = 0; i < p->seqlen_q; i++) {
        int lo, hi;
        ac_visible_range(p, 0, i, &lo, &hi);
        pairs += hi > lo ? hi - lo : 0;
    }
    double units = (double)p->batch * p->heads_q * pairs * (p->head_dim + 12);
    double secs = 30e-9 * units;
    struct timespec ts = {(time_t)secs, (long)((secs - (double)(time_t)secs) * 1e9)};
    nanosleep(&ts, NULL);
    return st;
}

Test(harness_campaign, a_time_budget_never_starts_a_case_it_cannot_finish)
{
    ac_kernel slow = ac_kernel_ref_fp64;
    slow.name = "slow";
    slow.forward = slow_forward;
    slow.backward = NULL;
    slow.caps.backward = false;
    slow.caps.max_head_dim = 32;
    ac_budgets b = budgets();
    const double budget_s = 2.0;
    ac_campaign_opts o = {
        .seed = 6, .max_seconds = budget_s, .max_seqlen = 160, .tier_cap = true, .run = {.cert_rows = 0}};
    static kept got;
    memset(&got, 0, sizeof got);
    ac_outcome_sink sink = {keep, &got};
    ac_loop_end end;
    ac_campaign_loop(&slow, &b, &o, &sink, &end);
    cr_assert_eq(end.status, AC_OK, "%s", end.err.msg);
    /* several cases: about 165 alone on a 2-core machine, 85 under ASan+UBSan alone, 4 (of a 1.2 s budget)
     * under ASan+UBSan beside the suite's other tests on a slow day (a fresh-clone CI run, 2026-11-29);
     * giving up early is the last assertion's business */
    cr_assert_geq(got.n, 3, "it ran cases: %d", got.n);
    double longest = 0;
    for (int i = 0; i < got.n; i++) {
        cr_assert_leq(got.found_at[i], budget_s, "case %ld ended at %.3f s, past the %.1f s budget", got.index[i],
                      got.found_at[i], budget_s);
        longest = got.seconds[i] > longest ? got.seconds[i] : longest;
    }
    cr_assert_gt(longest, 0.05, "some cases were slow enough to matter: %.3f s", longest);
    cr_assert(!strncmp(end.stopped, "time: ", 6) && strstr(end.stopped, " not started"),
              "it says what it left out: '%s'", end.stopped);
    cr_assert_gt(got.found_at[got.n - 1], budget_s / 3, "and did not give up early: last case at %.3f s",
                 got.found_at[got.n - 1]);
}

/* ---- --save-failures ------------------------------------------------------------------------ */

Test(harness_campaign, a_failure_already_in_the_corpus_is_not_saved_again)
{
    const char *dir = ac_test_tmpdir("ac-save");
    ac_err err;
    cr_assert_eq(ac_save_failure(dir, "k", "first", "v1 LINE-A", &err), AC_OK);
    cr_assert_eq(ac_save_failure(dir, "k", "again", "v1 LINE-A", &err), AC_OK);
    cr_assert_eq(ac_save_failure(dir, "k", "other", "v1 LINE-B", &err), AC_OK);
    char path[128], text[4096];
    snprintf(path, sizeof path, "%s/k.cases", dir);
    FILE *f = fopen(path, "r");
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    const char *a = strstr(text, "\nv1 LINE-A\n");
    cr_assert_not_null(a, "%s", text);
    cr_assert_null(strstr(a + 1, "\nv1 LINE-A\n"), "LINE-A once:\n%s", text);
    cr_assert_null(strstr(text, "again"), "its comment not added either:\n%s", text);
    cr_assert_not_null(strstr(text, "\nv1 LINE-B\n"), "a new line is appended:\n%s", text);
}
