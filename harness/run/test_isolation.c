/* harness/run/test_isolation.c — kernels in a worker process (suite
 * harness_isolation): each hostile plugin of plugins/hostile_plugin.c ends
 * as a FAIL of its own kind naming the plugin, a campaign of 20 cases goes
 * on and counts them all, a crash shrinks to its threshold, the worker
 * persists across cases and is replaced after a failure, and a correct kernel
 * gives the same result isolated and in-process.
 *
 * The worker is `attncheck __worker`: this test binary is not attncheck, so
 * the suite points $ATTNCHECK_WORKER_EXE at it (test_worker_support.h). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/harness.h"
#include "harness/run/test_worker_support.h"
#include "harness/run/worker.h"
#include "plugins/plugin_paths.h"

TestSuite(harness_isolation, .init = use_attncheck_as_worker);

static const ac_kernel *load(const char *path)
{
    const ac_kernel *k = NULL;
    ac_err err = {{0}};
    cr_assert_eq(ac_plugin_load(path, &k, &err), AC_OK, "%s", err.msg);
    return k;
}

static ac_budgets budgets(void)
{
    ac_budgets b;
    ac_err err = {{0}};
    cr_assert_eq(ac_budgets_load(ac_budgets_default_path(), &b, &err), AC_OK, "%s", err.msg);
    return b;
}

static ac_case line(const char *text)
{
    ac_case c;
    ac_err err = {{0}};
    cr_assert_eq(ac_case_parse(text, &c, &err), AC_OK, "%s", err.msg);
    return c;
}

static const ac_run_opts isolated = {.backward = true, .isolate = true, .kernel_timeout_s = 0.2};
static const char *const small = "v1 seed=2 b=2 hq=2 hkv=2 nq=24 nk=80 d=16 dtype=f32 mask=none layout=bhsd";

static ac_result run(const ac_kernel *k, const char *text, const ac_run_opts *o)
{
    ac_budgets b = budgets();
    ac_case c = line(text);
    ac_result r;
    ac_err err = {{0}};
    cr_assert_eq(ac_run_case(k, &c, &b, o, &r, &err), AC_OK, "%s: %s", k->name, err.msg);
    return r;
}

/* ---- each hostile kernel, its own kind ------------------------------------------ */

typedef struct {
    const char *path, *kind, *says;
    bool in_process_too; /* it survives in this process: the check works there as well */
} hostile;

static const hostile hostiles[] = {
    {AC_HOSTILE_PLUGIN_SEGV, "kernel:crash", "forward killed the worker process with SIGSEGV", false},
    {AC_HOSTILE_PLUGIN_ABORT, "kernel:crash", "with SIGABRT", false},
    {AC_HOSTILE_PLUGIN_EXIT0, "kernel:exited", "exited with status 0 during forward", false},
    {AC_HOSTILE_PLUGIN_EXIT3, "kernel:exited", "exited with status 3 during forward", false},
    {AC_HOSTILE_PLUGIN_HANG, "kernel:timeout", "forward ran past its deadline of 0.2 s", false},
    {AC_HOSTILE_PLUGIN_O_PAST, "kernel:out-of-bounds-write",
     "forward wrote past the end of O: elements end+0 to end+63 (O holds 1536 f32", true},
    {AC_HOSTILE_PLUGIN_LSE_PAST, "kernel:out-of-bounds-write",
     "forward wrote past the end of LSE: elements end+0 to end+15 (LSE holds 96 f32", true},
    {AC_HOSTILE_PLUGIN_O_BEFORE, "kernel:out-of-bounds-write",
     "forward wrote before the start of O: elements "
     "start-8 to start-1",
     true},
    {AC_HOSTILE_PLUGIN_MODIFY_Q, "kernel:input-modified",
     "forward changed 1 element of Q, the first at element 0 (b=0 h=0 i=0 c=0)", true},
    {AC_HOSTILE_PLUGIN_ERRBUF, "kernel:out-of-bounds-write",
     "forward wrote past the end of errbuf: bytes end+0 to end+255 (errbuf_len is 512)", true},
    {AC_HOSTILE_PLUGIN_CRASH_NK64, "kernel:crash", "SIGSEGV", false},
};

/* hostiles[i] on one case: FAIL of its kind, a why naming the class, the kernel and its file. */
static void fails_its_own_way(int i)
{
    const hostile *h = &hostiles[i];
    const ac_kernel *k = load(h->path);
    ac_result r = run(k, small, &isolated);
    cr_assert_eq(r.verdict, AC_VERDICT_FAIL, "%s: %s", k->name, r.why);
    cr_assert_eq(r.status, AC_OK, "a verdict, not an error");
    cr_assert_str_eq(r.kind, h->kind, "%s: %s", k->name, r.why);
    char named[600];
    snprintf(named, sizeof named, "%s: kernel %s (plugin %s): ", h->kind + strlen("kernel:"), k->name, h->path);
    cr_assert_eq(strncmp(r.why, named, strlen(named)), 0, "why does not start with '%s': %s", named, r.why);
    cr_assert(strstr(r.why, h->says) != NULL, "'%s' not in: %s", h->says, r.why);
    cr_assert(!r.m[AC_OUT_O].present, "no metrics for a kernel that misbehaved");
    if (!h->in_process_too)
        return;
    ac_run_opts here = isolated;
    here.isolate = false;
    ac_result again = run(k, small, &here);
    cr_assert_str_eq(again.kind, r.kind);
    cr_assert_str_eq(again.why, r.why, "the same message in this process");
}

Test(harness_isolation, a_segfault_is_kernel_crash) { fails_its_own_way(0); }
Test(harness_isolation, an_abort_is_kernel_crash) { fails_its_own_way(1); }
Test(harness_isolation, exit_0_is_kernel_exited_not_a_pass) { fails_its_own_way(2); }
Test(harness_isolation, exit_3_is_kernel_exited_not_an_environment_error) { fails_its_own_way(3); }
Test(harness_isolation, a_hang_is_kernel_timeout) { fails_its_own_way(4); }
Test(harness_isolation, 64_floats_past_o_are_an_out_of_bounds_write) { fails_its_own_way(5); }
Test(harness_isolation, 16_floats_past_lse_are_an_out_of_bounds_write) { fails_its_own_way(6); }
Test(harness_isolation, floats_before_o_are_an_out_of_bounds_write) { fails_its_own_way(7); }
Test(harness_isolation, a_changed_q_is_input_modified) { fails_its_own_way(8); }
Test(harness_isolation, 768_bytes_into_errbuf_are_an_out_of_bounds_write) { fails_its_own_way(9); }
Test(harness_isolation, a_crash_above_64_keys_is_kernel_crash) { fails_its_own_way(10); }

/* ---- the campaign goes on ----------------------------------------------------------- */

Test(harness_isolation, a_campaign_of_20_crashing_cases_counts_every_one_and_reports_them)
{
    const ac_kernel *k = load(AC_HOSTILE_PLUGIN_SEGV);
    ac_budgets b = budgets();
    ac_campaign_opts o = {.seed = 4, .max_cases = 20, .run = isolated};
    ac_report *rep = NULL;
    ac_err err = {{0}};
    cr_assert_eq(ac_report_open(&rep, &err), AC_OK);
    ac_summary s;
    cr_assert_eq(ac_campaign(k, &b, &o, rep, &s, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(s.cases, 20);
    cr_assert_eq(s.failed, 20);
    cr_assert_eq(s.errors, 0);
    cr_assert_eq(s.worst_status, AC_OK);
    cr_assert_str_eq(s.first_kind, "kernel:crash");
    ac_report_close(rep, NULL);
}

Test(harness_isolation, a_crash_above_64_keys_shrinks_to_nk_65)
{
    const ac_kernel *k = load(AC_HOSTILE_PLUGIN_CRASH_NK64);
    ac_budgets b = budgets();
    ac_case c = line("v1 seed=9 b=3 hq=4 hkv=4 nq=77 nk=301 d=48 dtype=f32 mask=none layout=bhsd dist=normal(0,2)");
    ac_case minimal;
    int runs = ac_shrink_failure(k, &b, &isolated, &c, "kernel:crash", 200, &minimal);
    cr_assert_gt(runs, 0);
    char text[AC_CASE_LINE_MAX];
    ac_case_format(&minimal, text, sizeof text);
    cr_assert_str_eq(text,
                     "v1 seed=1 b=1 hq=1 hkv=1 nq=1 nk=65 d=1 dtype=f32 mask=none layout=bhsd "
                     "dist=normal(0,1) scale=auto");
    cr_assert_eq(run(k, "v1 seed=1 b=1 hq=1 hkv=1 nq=1 nk=64 d=1 dtype=f32", &isolated).verdict, AC_VERDICT_PASS);
}

/* ---- the worker's life ---------------------------------------------------------------- */

Test(harness_isolation, the_worker_persists_across_cases_and_is_replaced_after_a_failure)
{
    const ac_kernel *k = load(AC_HOSTILE_PLUGIN_CRASH_NK64);
    cr_assert_eq(run(k, small, &isolated).verdict, AC_VERDICT_FAIL); /* nk = 80: crash */
    cr_assert_eq(ac_worker_pid(), 0, "a crashed worker is gone");
    const char *fine = "v1 seed=3 b=1 hq=2 hkv=2 nq=30 nk=40 d=8 dtype=f32";
    cr_assert_eq(run(k, fine, &isolated).verdict, AC_VERDICT_PASS);
    long first = ac_worker_pid();
    cr_assert_gt(first, 0);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(run(k, fine, &isolated).verdict, AC_VERDICT_PASS);
    cr_assert_eq(ac_worker_pid(), first, "one worker for every passing case");
    const ac_kernel *cpu = ac_kernel_find("cpu-flash"); /* built-in kernels run in the same worker */
    cr_assert_eq(run(cpu, "v1 seed=4 b=1 hq=2 hkv=1 nq=33 nk=20 d=8 dtype=bf16 mask=causal-br", &isolated).verdict,
                 AC_VERDICT_PASS);
    cr_assert_eq(ac_worker_pid(), first);
    cr_assert_eq(run(k, small, &isolated).verdict, AC_VERDICT_FAIL);
    cr_assert_eq(run(k, fine, &isolated).verdict, AC_VERDICT_PASS);
    cr_assert_neq(ac_worker_pid(), first, "a fresh worker after the crash");
}

Test(harness_isolation, a_hang_is_cut_at_its_deadline)
{
    const ac_kernel *k = load(AC_HOSTILE_PLUGIN_HANG);
    ac_run_opts o = isolated;
    o.kernel_timeout_s = 0.05;
    double t0 = ac_now_seconds();
    ac_result r = run(k, small, &o);
    double took = ac_now_seconds() - t0;
    cr_assert_str_eq(r.kind, "kernel:timeout");
    cr_assert(strstr(r.why, "deadline of 0.05 s") != NULL, "%s", r.why);
    cr_assert_lt(took, 2.0, "the hang took %g s to be cut", took);
}

Test(harness_isolation, isolated_and_in_process_give_identical_results)
{
    const ac_kernel *k = ac_kernel_find("cpu-flash");
    static const char *const lines[] = {
        "v1 seed=11 b=2 hq=4 hkv=2 nq=33 nk=70 d=16 dtype=f16 mask=causal-br layout=bhsd",
        ("v1 seed=12 b=3 hq=2 hkv=1 nq=65 nk=40 d=32 dtype=bf16 mask=window-tl(5,3) seqlens-q=65,0,7 "
         "seqlens-k=1,40,33 layout=bshd"),
        "v1 seed=13 b=1 hq=2 hkv=2 nq=20 nk=129 d=8 dtype=f32 mask=dense(0.5) maskrows=0.2",
    };
    ac_run_opts here = isolated;
    here.isolate = false;
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        ac_result a = run(k, lines[i], &isolated), b = run(k, lines[i], &here);
        cr_assert_eq(a.verdict, AC_VERDICT_PASS, "%s: %s", lines[i], a.why);
        cr_assert(a.has_backward && b.has_backward);
        for (int o = 0; o < AC_OUT_COUNT; o++) {
            cr_assert_eq(a.m[o].n_compared, b.m[o].n_compared);
            cr_assert_eq(memcmp(&a.m[o].max_scaled, &b.m[o].max_scaled, sizeof(double)), 0, "%s output %d", lines[i],
                         o);
            cr_assert_eq(memcmp(&a.m[o].vs_naive_mean, &b.m[o].vs_naive_mean, sizeof(double)), 0);
        }
    }
}

/* ---- what the worker cannot do is the environment's ---------------------------------- */

static int fwd_unregistered(const ac_kernel *self, const ac_problem *p, ac_dtype t, const ac_fwd_args *a, ac_err *e)
{
    (void)self, (void)p, (void)t, (void)a;
    return ac_fail(e, AC_ERR_ENV, "never called");
}

Test(harness_isolation, a_kernel_the_worker_cannot_find_is_an_environment_error)
{
    ac_kernel k = {.name = "only-in-this-process", .forward = fwd_unregistered};
    k.caps = ac_kernel_find("cpu-flash")->caps;
    ac_budgets b = budgets();
    ac_case c = line(small);
    ac_result r;
    ac_err err = {{0}};
    cr_assert_eq(ac_run_case(&k, &c, &b, &isolated, &r, &err), AC_ERR_ENV);
    cr_assert(strstr(r.why, "the worker has no kernel named 'only-in-this-process'") != NULL, "%s", r.why);
}

Test(harness_isolation, a_worker_program_that_cannot_start_is_an_environment_error)
{
    setenv("ATTNCHECK_WORKER_EXE", "/nonexistent/attncheck", 1);
    ac_budgets b = budgets();
    ac_case c = line(small);
    ac_result r;
    ac_err err = {{0}};
    cr_assert_eq(ac_run_case(ac_kernel_find("cpu-flash"), &c, &b, &isolated, &r, &err), AC_ERR_ENV);
    cr_assert(strstr(r.why, "cannot start the kernel worker /nonexistent/attncheck") != NULL, "%s", r.why);
    setenv("ATTNCHECK_WORKER_EXE", "/bin/true", 1); /* starts, but is no worker */
    cr_assert_eq(ac_run_case(ac_kernel_find("cpu-flash"), &c, &b, &isolated, &r, &err), AC_ERR_ENV);
    cr_assert(strstr(r.why, "did not start") != NULL, "%s", r.why);
}
