/* harness/cli/test_cli_hostile.c — the attncheck binary against kernels that
 * misbehave on purpose (plugins/hostile_plugin.c; suite harness_cli_hostile):
 * for each, `fuzz --cases 20` exits 1 (never 0, never 3), prints the kind and
 * the plugin's file, counts all 20 cases, and still writes its JSON, JUnit
 * and Markdown reports; a crash above 64 keys shrinks to nk=65; `run` and
 * `check --kernel` give the same verdicts.
 *
 * The binary is $ATTNCHECK_BIN, else harness/attncheck (a build tree) or attncheck
 * (a bundle) beside this test binary. */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness/files/test_files_support.h"
#include "harness/harness.h"
#include "plugins/plugin_paths.h"

static const char *bin(void)
{
    static char path[PATH_MAX + 32];
    const char *env = getenv("ATTNCHECK_BIN");
    if (env && *env)
        return env;
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    cr_assert_gt(n, 0);
    self[n] = '\0';
    *strrchr(self, '/') = '\0';
    snprintf(path, sizeof path, "%s/harness/attncheck", self); /* a build tree */
    if (access(path, X_OK) != 0)
        snprintf(path, sizeof path, "%s/attncheck", self); /* a bundle (ci/make-bundle.sh) */
    return path;
}

static char out[1 << 17];

/* attncheck ARGS (shell syntax); its stdout and stderr in out; its exit status. */
static int attncheck(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int attncheck(const char *fmt, ...)
{
    char args[8192], cmd[PATH_MAX + 8300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", bin(), args);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    int status = pclose(p);
    cr_assert(WIFEXITED(status), "attncheck %s did not exit normally", args);
    return WEXITSTATUS(status);
}

static long count_of(const char *text, const char *needle)
{
    long n = 0;
    for (const char *s = strstr(text, needle); s; s = strstr(s + 1, needle))
        n++;
    return n;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s was not written", path);
    static char text[1 << 17];
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    return text;
}

TestSuite(harness_cli_hostile, .init = make_dir, .fini = remove_dir);

/* fuzz --cases 20 on the plugin: every case a FAIL of kind, the campaign whole, the reports written. */
static void campaign_fails_every_case(const char *so, const char *name, const char *kind, const char *extra)
{
    int st = attncheck("fuzz --plugin '%s' --kernel %s --seed 5 --cases 20 --shrink-steps 0 --quiet %s "
                       "--json '%s' --junit '%s' --markdown '%s'",
                       so, name, extra, path_of("r.jsonl"), path_of("r.xml"), path_of("r.md"));
    cr_assert_eq(st, 1, "exit %d, not 1:\n%s", st, out);
    char summary[128], fail_line[256], named[PATH_MAX + 64];
    snprintf(summary, sizeof summary, "%s: 20 cases, 0 passed, 20 failed, 0 errors", name);
    snprintf(fail_line, sizeof fail_line, "FAIL %s [%s] ", name, kind);
    snprintf(named, sizeof named, "kernel %s (plugin %s): ", name, so);
    cr_assert(strstr(out, summary) != NULL, "no '%s' in:\n%s", summary, out);
    cr_assert_eq(count_of(out, fail_line), 20, "20 failures of kind %s:\n%s", kind, out);
    cr_assert_eq(count_of(out, named), 20, "each names the plugin:\n%s", out);
    char json_kind[128];
    snprintf(json_kind, sizeof json_kind, "\"kind\":\"%s\"", kind);
    cr_assert_eq(count_of(slurp(path_of("r.jsonl")), json_kind), 20);
    char junit[128];
    snprintf(junit, sizeof junit, "type=\"%s\"", kind);
    cr_assert_eq(count_of(slurp(path_of("r.xml")), junit), 20);
    cr_assert(strstr(slurp(path_of("r.md")), "0 passed, 20 failed, 0 errors") != NULL);
}

Test(harness_cli_hostile, segfault)
{
    campaign_fails_every_case(AC_HOSTILE_PLUGIN_SEGV, "hostile-segv", "kernel:crash", "");
}
Test(harness_cli_hostile, abort)
{
    campaign_fails_every_case(AC_HOSTILE_PLUGIN_ABORT, "hostile-abort", "kernel:crash", "");
}
Test(harness_cli_hostile, exit_0_is_no_pass)
{
    campaign_fails_every_case(AC_HOSTILE_PLUGIN_EXIT0, "hostile-exit0", "kernel:exited", "");
}
Test(harness_cli_hostile, exit_3_is_no_environment_error)
{
    campaign_fails_every_case(AC_HOSTILE_PLUGIN_EXIT3, "hostile-exit3", "kernel:exited", "");
}
Test(harness_cli_hostile, hang)
{
    campaign_fails_every_case(AC_HOSTILE_PLUGIN_HANG, "hostile-hang", "kernel:timeout", "--kernel-timeout 0.02");
}
Test(harness_cli_hostile, past_o)
{
    campaign_fails_every_case(AC_HOSTILE_PLUGIN_O_PAST, "hostile-o-past", "kernel:out-of-bounds-write", "");
    cr_assert(strstr(out, "wrote past the end of O: elements end+0 to end+63") != NULL, "%s", out);
}
Test(harness_cli_hostile, past_lse)
{
    campaign_fails_every_case(AC_HOSTILE_PLUGIN_LSE_PAST, "hostile-lse-past", "kernel:out-of-bounds-write", "");
    cr_assert(strstr(out, "wrote past the end of LSE: elements end+0 to end+15") != NULL, "%s", out);
}
Test(harness_cli_hostile, before_o)
{
    campaign_fails_every_case(AC_HOSTILE_PLUGIN_O_BEFORE, "hostile-o-before", "kernel:out-of-bounds-write", "");
    cr_assert(strstr(out, "wrote before the start of O: elements start-8 to start-1") != NULL, "%s", out);
}
Test(harness_cli_hostile, modified_q)
{
    campaign_fails_every_case(AC_HOSTILE_PLUGIN_MODIFY_Q, "hostile-modify-q", "kernel:input-modified", "");
    cr_assert(strstr(out, "changed 1 element of Q, the first at element 0") != NULL, "%s", out);
}
Test(harness_cli_hostile, errbuf_overflow)
{
    campaign_fails_every_case(AC_HOSTILE_PLUGIN_ERRBUF, "hostile-errbuf", "kernel:out-of-bounds-write", "");
    cr_assert(strstr(out, "wrote past the end of errbuf: bytes end+0 to end+255 (errbuf_len is 512)") != NULL, "%s",
              out);
}
Test(harness_cli_hostile, scribbles_are_caught_in_process_too)
{
    campaign_fails_every_case(AC_HOSTILE_PLUGIN_O_PAST, "hostile-o-past", "kernel:out-of-bounds-write", "--in-process");
}

Test(harness_cli_hostile, a_crash_above_64_keys_shrinks_to_nk_65_and_the_rest_pass)
{
    int st = attncheck("fuzz --plugin '%s' --kernel hostile-crash-nk64 --seed 5 --cases 20 --quiet",
                       AC_HOSTILE_PLUGIN_CRASH_NK64);
    cr_assert_eq(st, 1, "%s", out);
    const char *summary = strstr(out, "hostile-crash-nk64: 20 cases, ");
    cr_assert_not_null(summary, "%s", out);
    long passed = -1, fails = -1, errors = -1;
    cr_assert_eq(
        sscanf(summary, "hostile-crash-nk64: 20 cases, %ld passed, %ld failed, %ld errors", &passed, &fails, &errors),
        3, "%s", out);
    cr_assert(fails > 0 && errors == 0 && passed + fails == 20, "the campaign must go on after a crash:\n%s", out);
    /* every failure is the one crash, shrunk to the 65 keys it needs: one distinct failure, counted fails times */
    char distinct[256];
    snprintf(distinct, sizeof distinct,
             "  %ldx hostile-crash-nk64 [kernel:crash] v1 seed=1 b=1 hq=1 hkv=1 nq=1 nk=65 "
             "d=1 dtype=f32 mask=none layout=bhsd dist=normal(0,1) scale=auto",
             fails);
    cr_assert_not_null(strstr(out, distinct), "no '%s' in:\n%s", distinct, out);
    cr_assert_eq(count_of(out, "FAIL hostile-crash-nk64 [kernel:crash] "), 1, "printed once:\n%s", out);
}

Test(harness_cli_hostile, run_replays_a_crash_as_a_failure)
{
    int st = attncheck("run --plugin '%s' --kernel hostile-crash-nk64 --case 'v1 seed=1 b=1 hq=1 hkv=1 nq=1 nk=65 "
                       "d=1 dtype=f32'",
                       AC_HOSTILE_PLUGIN_CRASH_NK64);
    cr_assert_eq(st, 1, "%s", out);
    cr_assert(strstr(out, "FAIL  --case:1  [kernel:crash] crash: kernel hostile-crash-nk64") != NULL, "%s", out);
    st = attncheck("run --plugin '%s' --kernel hostile-crash-nk64 --case 'v1 seed=1 b=1 hq=1 hkv=1 nq=1 nk=64 "
                   "d=1 dtype=f32'",
                   AC_HOSTILE_PLUGIN_CRASH_NK64);
    cr_assert_eq(st, 0, "64 keys are fine:\n%s", out);
}

/* A case directory of q, k, v (f32, bhsd) for check --kernel. */
static void write_case(void)
{
    ac_case c;
    ac_inputs in;
    ac_err err = {{0}};
    cr_assert_eq(ac_case_parse("v1 seed=3 b=1 hq=2 hkv=2 nq=24 nk=80 d=16 dtype=f32", &c, &err), AC_OK);
    cr_assert_eq(ac_inputs_make(&c, &in, &err), AC_OK, "%s", err.msg);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", path_of("case"));
    cr_assert_eq(system(cmd), 0);
    const char *names[3] = {"q", "k", "v"};
    void *data[3] = {in.q, in.k, in.v};
    for (int i = 0; i < 3; i++) {
        ac_tensor t = {.dtype = AC_TF_F32, .ndim = 4, .shape = {1, 2, i ? 80 : 24, 16}, .data = data[i]};
        t.n_elems = (size_t)2 * (i ? 80 : 24) * 16;
        char file[32];
        snprintf(file, sizeof file, "case/%s.npy", names[i]);
        cr_assert_eq(ac_npy_write(path_of(file), &t, &err), AC_OK, "%s", err.msg);
    }
    ac_inputs_free(&in);
}

Test(harness_cli_hostile, check_runs_the_kernel_isolated_too)
{
    write_case();
    int st = attncheck("check '%s' --plugin '%s' --kernel hostile-segv --json '%s'", path_of("case"),
                       AC_HOSTILE_PLUGIN_SEGV, path_of("c.jsonl"));
    cr_assert_eq(st, 1, "%s", out);
    cr_assert(strstr(out, "hostile-segv: FAIL [kernel:crash]: crash: kernel hostile-segv (plugin ") != NULL, "%s", out);
    cr_assert(strstr(slurp(path_of("c.jsonl")), "\"kind\":\"kernel:crash\"") != NULL);
    st = attncheck("check '%s' --plugin '%s' --kernel hostile-lse-past --in-process", path_of("case"),
                   AC_HOSTILE_PLUGIN_LSE_PAST);
    cr_assert_eq(st, 1, "%s", out);
    cr_assert(strstr(out, "[kernel:out-of-bounds-write]") != NULL, "%s", out);
    st = attncheck("check '%s' --plugin '%s' --kernel hostile-crash-nk64", path_of("case"),
                   AC_HOSTILE_PLUGIN_CRASH_NK64);
    cr_assert_eq(st, 1, "nk = 80 crashes it:\n%s", out);
    st = attncheck("check '%s' --kernel ref-fp64", path_of("case"));
    cr_assert_eq(st, 0, "a correct kernel passes:\n%s", out);
    cr_assert(strstr(out, "PASS") != NULL, "%s", out);
}

Test(harness_cli_hostile, isolation_options_are_in_the_help_and_checked)
{
    cr_assert_eq(attncheck("fuzz --help"), 0);
    cr_assert(strstr(out, "--in-process") && strstr(out, "--kernel-timeout S"), "%s", out);
    cr_assert_eq(attncheck("check --help"), 0);
    cr_assert(strstr(out, "--in-process") && strstr(out, "--kernel-timeout S"), "%s", out);
    cr_assert_eq(attncheck("fuzz --kernel cpu-flash --cases 1 --kernel-timeout 0"), 2, "%s", out);
    cr_assert(strstr(out, "--kernel-timeout: '0' is not a positive number of seconds") != NULL, "%s", out);
}
