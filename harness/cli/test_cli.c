/* harness/cli/test_cli.c — the built `attncheck` binary, run as a user runs it:
 * exit statuses 0/1/2/3 and the messages that go with them.
 *
 * The binary is $ATTNCHECK_BIN, else harness/attncheck beside this test
 * binary (both live in the build directory). */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "attncheck_config.h"
#include "harness/cli/test_cli_support.h"
#include "harness/files/test_tmpdir.h"
#include "harness/harness.h"

static const char *source_dir(void)
{
    const char *env = getenv("ATTNCHECK_SOURCE_DIR");
    return env && *env ? env : ATTNCHECK_SOURCE_DIR;
}

static char out[1 << 16];

Test(harness_cli, help_exits_zero_and_names_the_subcommands)
{
    cr_assert_eq(cli_run("--help", out, sizeof out), 0, "%s", out);
    cr_assert_not_null(strstr(out, "fuzz"));
    cr_assert_not_null(strstr(out, "prove"));
    cr_assert_eq(cli_run("fuzz --help", out, sizeof out), 0, "%s", out);
    cr_assert_not_null(strstr(out, "--save-failures"));
}

Test(harness_cli, list_names_every_kernel_with_availability)
{
    cr_assert_eq(cli_run("list", out, sizeof out), 0, "%s", out);
    for (size_t i = 0; i < ac_kernel_count(); i++) {
        const char *name = ac_kernel_at(i)->name;
        char want[256];
        snprintf(want, sizeof want, "%s dtypes=", name);
        cr_assert_not_null(strstr(out, want), "%s missing from:\n%s", name, out);
    }
    cr_assert_not_null(strstr(out, "ref-fp64 "));
    cr_assert_not_null(strstr(out, "  available\n"));
}

Test(harness_cli, list_offers_only_its_own_options)
{
    cr_assert_eq(cli_run("list --help", out, sizeof out), 0, "%s", out);
    cr_assert_not_null(strstr(out, "--plugin"), "%s", out);
    cr_assert_null(strstr(out, "--json"), "list writes no reports:\n%s", out);
    cr_assert_eq(cli_run("list --json /dev/null", out, sizeof out), 2, "%s", out);
    cr_assert_not_null(strstr(out, "unknown option '--json'"), "%s", out);
}

Test(harness_cli, fixtures_pass_on_ref_fp64)
{
    char args[1024];
    snprintf(args, sizeof args, "run '%s/fixtures' --kernel ref-fp64 --quiet", source_dir());
    int st = cli_run(args, out, sizeof out);
    cr_assert_eq(st, 0, "exit %d:\n%s", st, out);
    cr_assert_not_null(strstr(out, "0 failed, 0 errors"), "%s", out);
}

Test(harness_cli, malformed_case_exits_2_naming_the_field)
{
    int st = cli_run("run --case 'v1 seed=1 b=1 hq=1 hkv=1 nq=banana nk=4 d=8 dtype=f16' --kernel ref-fp64", out,
                     sizeof out);
    cr_assert_eq(st, 2, "exit %d:\n%s", st, out);
    cr_assert_not_null(strstr(out, "--case:1: "), "%s", out);
    cr_assert_not_null(strstr(out, "nq"), "the message names the field: %s", out);
}

Test(harness_cli, unknown_option_exits_2)
{
    cr_assert_eq(cli_run("fuzz --frobnicate", out, sizeof out), 2);
    cr_assert_not_null(strstr(out, "unknown option '--frobnicate'"), "%s", out);
    cr_assert_eq(cli_run("fuzz --cases 12x", out, sizeof out), 2, "numbers are parsed strictly");
    cr_assert_eq(cli_run("fuzz --cases -3", out, sizeof out), 2);
    cr_assert_eq(cli_run("frobnicate", out, sizeof out), 2);
    cr_assert_eq(cli_run("fuzz --kernel no-such-kernel", out, sizeof out), 2);
}

Test(harness_cli, cuda_kernel_without_gpu_exits_3)
{
    if (ac_cuda_present(NULL))
        cr_skip_test("a GPU is present here");
    int st = cli_run("fuzz --kernel cuda-flash --cases 1", out, sizeof out);
    cr_assert_eq(st, 3, "exit %d:\n%s", st, out);
    cr_assert_not_null(strstr(out, "cuda-flash"), "%s", out);
}

/* A mutant visible on short sequences (--max-seqlen 64 is one K/V tile, where a
 * missing rescale is no bug at all): the causal mask off by one.  Its absence
 * is a failure: a registry that lost its mutants would prove nothing. */
Test(harness_cli, a_mutant_exits_1_with_a_minimal_line)
{
    const char *m = "cpu-flash-mutant-causal-off-by-one";
    cr_assert_not_null(ac_kernel_find(m), "%s is not registered", m);
    char args[512];
    snprintf(args, sizeof args, "fuzz --kernel %s --cases 300 --stop-first --max-seqlen 64 --quiet", m);
    int st = cli_run(args, out, sizeof out);
    cr_assert_eq(st, 1, "exit %d:\n%s", st, out);
    cr_assert_not_null(strstr(out, "  minimal:  v1 "), "%s", out);
}

Test(harness_cli, same_seed_gives_identical_json, .fini = ac_test_tmpdirs_remove)
{
    char a[128], b[128], args[512];
    const char *dir = ac_test_tmpdir("ac-cli");
    snprintf(a, sizeof a, "%s/a.json", dir);
    snprintf(b, sizeof b, "%s/b.json", dir);
    for (int i = 0; i < 2; i++) {
        snprintf(args, sizeof args, "fuzz --kernel ref-fp64 --seed 7 --cases 6 --max-seqlen 32 --quiet --json %s",
                 i ? b : a);
        int st = cli_run(args, out, sizeof out);
        cr_assert_eq(st, 0, "exit %d:\n%s", st, out);
    }
    /* the case records are the same bytes; the first and last records (the
     * environment's date, the campaign's seconds) are allowed to differ */
    char cmd[512];
    snprintf(cmd, sizeof cmd, "bash -c 'cmp -s <(grep -v ^.\\\"type %s) <(grep -v ^.\\\"type %s)'", a, b);
    cr_assert_eq(system(cmd), 0, "the two JSON files' case records differ");
    FILE *f = fopen(a, "r");
    int lines = 0, cases = 0;
    char line[1 << 14];
    while (fgets(line, sizeof line, f)) {
        lines++;
        cases += strstr(line, "\"type\"") == NULL;
        if (lines == 1)
            cr_assert_not_null(strstr(line, "{\"type\":\"environment\""), "first: %s", line);
    }
    fclose(f);
    cr_assert_eq(cases, 6, "one record per case");
    cr_assert_eq(lines, 8, "and the environment and campaign records");
    cr_assert_not_null(strstr(line, "{\"type\":\"campaign\""), "last: %s", line);
}

/* ---- the one option table (harness/cli/options.c) ------------------------------- */

Test(harness_cli, every_subcommand_takes_opt_equals_value_and_opt_space_value)
{
    char *fuzz_a[] = {"fuzz", "--seed=7", "--cases", "5", "--cert-rows=3", NULL};
    char *check_a[] = {"check", "case", "--layout=bshd", "--cert-rows", "3", "--mask=window-br(8,0)", NULL};
    ac_cli c;
    ac_err err = {{0}};
    cr_assert_eq(ac_cli_parse(5, fuzz_a, &c, &err), AC_OK, "%s", err.msg);
    cr_assert(c.cmd == AC_CMD_FUZZ && c.seed == 7 && c.cases == 5 && c.cert_rows == 3);
    cr_assert_eq(ac_cli_parse(6, check_a, &c, &err), AC_OK, "%s", err.msg);
    cr_assert(c.cmd == AC_CMD_CHECK && c.cert_rows == 3);
    cr_assert_str_eq(c.path, "case");
    cr_assert_str_eq(c.layout, "bshd");
    cr_assert_str_eq(c.mask, "window-br(8,0)", "the value after the first '=' is kept whole");
}

Test(harness_cli, defaults_are_one_set_for_every_subcommand)
{
    const char *const cmds[] = {"fuzz", "run", "prove", "check"}; /* reference certifies nothing */
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char *argv[] = {(char *)cmds[i], NULL};
        ac_cli c;
        cr_assert_eq(ac_cli_parse(1, argv, &c, NULL), AC_OK, "%s", cmds[i]);
        cr_assert_eq(c.cert_rows, AC_DEFAULT_CERT_ROWS, "%s", cmds[i]);
        char *too_many[] = {(char *)cmds[i], "--cert-rows", "1001", NULL};
        ac_err err = {{0}};
        cr_assert_eq(ac_cli_parse(3, too_many, &c, &err), AC_ERR_INPUT, "%s accepted 1001 rows", cmds[i]);
        cr_assert(strstr(err.msg, "0..1000") != NULL, "%s: %s", cmds[i], err.msg);
    }
}

Test(harness_cli, help_is_its_own_status_not_an_accuracy_failure)
{
    char *argv[] = {"check", "--help", NULL};
    ac_cli c;
    cr_assert_eq(ac_cli_parse(2, argv, &c, NULL), AC_CLI_HELP);
    cr_assert_neq(AC_CLI_HELP, AC_FAIL_ACCURACY);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(cli_run(i ? "reference --help" : "check --help", out, sizeof out), 0, "%s", out);
        cr_assert_not_null(strstr(out, "--mask-file"), "%s", out);
        cr_assert_not_null(strstr(out, "--mask KIND"), "%s", out);
    }
}

Test(harness_cli, retired_mask_spellings_exit_2_naming_the_new_one)
{
    cr_assert_eq(cli_run("check case --causal tl", out, sizeof out), 2, "%s", out);
    cr_assert_not_null(strstr(out, "--mask causal-tl"), "%s", out);
    cr_assert_eq(cli_run("reference case --window 128,0 --out x", out, sizeof out), 2, "%s", out);
    cr_assert_not_null(strstr(out, "--mask window-br(L,R)"), "%s", out);
    cr_assert_eq(cli_run("check case --mask case/mask.npy", out, sizeof out), 2, "%s", out);
    cr_assert_not_null(strstr(out, "--mask-file"), "a file given to --mask points at --mask-file: %s", out);
    cr_assert_eq(cli_run("fuzz --mask causal-tl,window --cases 1 --causal", out, sizeof out), 2, "%s", out);
    cr_assert_not_null(strstr(out, "unknown option '--causal'"), "fuzz never had --causal: %s", out);
}

Test(harness_cli, report_options_come_from_the_report_table)
{
    for (size_t i = 0; i < ac_report_format_count(); i++) {
        const char *flag = ac_report_format_at(i)->flag;
        char *argv[] = {"run", (char *)flag, "/tmp/x", NULL};
        ac_cli c;
        ac_err err = {{0}};
        cr_assert_eq(ac_cli_parse(3, argv, &c, &err), AC_OK, "%s: %s", flag, err.msg);
        cr_assert_str_eq(c.report_path[i], "/tmp/x");
    }
}

/* ---- what issue 19 asked of the command line ------------------------------------- */

Test(harness_cli, exec_and_gen_options_take_opt_equals_value_too)
{
    char *fuzz_a[] = {"fuzz",
                      "--exec=python3 k.py {in} {out}",
                      "--caps=k.json",
                      "--exec-name=mine",
                      "--exec-persistent",
                      "python3 k.py --serve",
                      "--caps",
                      "k2.json",
                      "--exec-timeout=2.5",
                      NULL};
    char *gen_a[] = {"gen", "--case=v1 seed=1 b=1 hq=1 hkv=1 nq=1 nk=1 d=1 dtype=f16", "--out=dir", NULL};
    ac_cli c;
    ac_err err = {{0}};
    cr_assert_eq(ac_cli_parse(9, fuzz_a, &c, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(c.n_exec, 2);
    cr_assert_str_eq(c.exec_cmd[0], "python3 k.py {in} {out}", "the value after the first '=' is kept whole");
    cr_assert(!c.exec_persistent[0] && c.exec_persistent[1]);
    cr_assert_str_eq(c.exec_caps[1], "k2.json");
    cr_assert_str_eq(c.exec_name[0], "mine");
    cr_assert_float_eq(c.exec_timeout, 2.5, 0.0);
    cr_assert_eq(ac_cli_parse(3, gen_a, &c, &err), AC_OK, "%s", err.msg);
    cr_assert(c.cmd == AC_CMD_GEN);
    cr_assert_str_eq(c.out, "dir");
    cr_assert_str_eq(c.case_line, "v1 seed=1 b=1 hq=1 hkv=1 nq=1 nk=1 d=1 dtype=f16");
    cr_assert_eq(cli_run("gen --out /tmp", out, sizeof out), 2, "%s", out);
    cr_assert_not_null(strstr(out, "attncheck gen: --case 'LINE' is required"), "%s", out);
}

Test(harness_cli, an_exec_kernel_is_listed_from_its_caps_file)
{
    char args[1024];
    snprintf(args, sizeof args,
             "list --exec-persistent 'python3 k.py --serve' --caps '%s/plugins/numpy_attention.caps.json'",
             source_dir());
    cr_assert_eq(cli_run(args, out, sizeof out), 0, "%s", out);
    cr_assert_not_null(strstr(out,
                              "numpy-attention dtypes=f32,f16,bf16 d=1..256 masks=none,causal-tl,causal-br,"
                              "window-tl,window-br,dense layouts=bhsd,bshd gqa varlen backward max-seqlen=256 "
                              "device=cpu  available"),
                       "%s", out);
    cr_assert_eq(cli_run("fuzz --caps k.json", out, sizeof out), 2, "%s", out);
    cr_assert_not_null(strstr(out, "--caps, --exec-name and --exec-timeout go with --exec"), "%s", out);
}

/* The README says which head dims cuda-flash takes; `list` (from kernels/cuda/family.h) must agree. */
Test(harness_cli, list_and_the_readme_agree_on_the_cuda_head_dims)
{
    cr_assert_eq(cli_run("list", out, sizeof out), 0, "%s", out);
    const char *line = strstr(out, "\ncuda-flash dtypes=");
    cr_assert_not_null(line, "%s", out);
    const char *d = strstr(line, " d=");
    cr_assert_not_null(d);
    char readme_form[128] = "d ∈ {";
    for (const char *s = d + 3; *s && *s != ' '; s++) /* "32,64,96,128,256" -> "32, 64, 96, 128, 256" */
        snprintf(readme_form + strlen(readme_form), sizeof readme_form - strlen(readme_form), *s == ',' ? ", " : "%c",
                 *s);
    strcat(readme_form, "}");
    char path[1024], *text = NULL;
    size_t len;
    snprintf(path, sizeof path, "%s/README.md", source_dir());
    cr_assert_eq(ac_read_file(path, &text, &len, NULL), AC_OK);
    cr_assert_not_null(text);
    char *row = strstr(text, "| `cuda-flash` |");
    cr_assert_not_null(row, "README has no cuda-flash row");
    char *end = strchr(row, '\n');
    *end = '\0';
    cr_assert_not_null(strstr(row, readme_form), "README's cuda-flash row does not say '%s'", readme_form);
    free(text);
}

/* ---- attncheck report and --baseline ----------------------------------------------- */

Test(harness_cli, report_without_its_script_says_where_it_looked_and_exits_3)
{
    cr_assert_eq(cli_run("report --help", out, sizeof out), 0, "%s", out);
    cr_assert_not_null(strstr(out, "--baseline OLD.jsonl"), "%s", out);
    cr_assert_eq(cli_run("report x.jsonl", out, sizeof out), 2, "%s", out);
    cr_assert_not_null(strstr(out, "attncheck report: --html OUT.html is required"), "%s", out);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "report x.jsonl --html /tmp/attncheck-no.html");
    setenv("ATTNCHECK_SOURCE_DIR", "/nonexistent-attncheck", 1);
    cr_assert_eq(cli_run(cmd, out, sizeof out), 3, "%s", out);
    cr_assert_not_null(strstr(out, "attncheck report: /nonexistent-attncheck/reports/html_report.py not found"), "%s",
                       out);
}

Test(harness_cli, report_passes_the_script_exit_status_through)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "report /nonexistent/in.jsonl --html /tmp/attncheck-test-report.html");
    setenv("ATTNCHECK_SOURCE_DIR", source_dir(), 1);
    cr_assert_eq(cli_run(cmd, out, sizeof out), 2, "%s", out); /* the script's "no such file" */
    cr_assert_not_null(strstr(out, "html_report: /nonexistent/in.jsonl: no such file"), "%s", out);
}

Test(harness_cli, baseline_that_cannot_be_read_exits_2_naming_it)
{
    cr_assert_eq(cli_run("fuzz --kernel cpu-flash --cases 1 --baseline /nonexistent/old.jsonl", out, sizeof out), 2,
                 "%s", out);
    cr_assert_not_null(strstr(out, "--baseline /nonexistent/old.jsonl: No such file or directory"), "%s", out);
    cr_assert_eq(cli_run("prove --baseline x.jsonl", out, sizeof out), 2, "%s", out); /* a flag for prove */
    cr_assert_not_null(strstr(out, "unexpected argument 'x.jsonl'"), "%s", out);
}

/* A campaign that ran writes its reports even when cases ended in errors (here
 * every case is over a tiny --mem-budget): the errors are in the records, the
 * exit status is 2.  Found on the H100: a long-profile campaign whose one case
 * could not be made lost the JSON of all the others. */
Test(harness_cli, a_campaign_with_errors_still_writes_its_reports, .fini = ac_test_tmpdirs_remove)
{
    char path[128], args[512];
    snprintf(path, sizeof path, "%s/errors.jsonl", ac_test_tmpdir("ac-cli"));
    snprintf(args, sizeof args, "fuzz --kernel cpu-flash --cases 4 --mem-budget 0.0001 --quiet --json %s", path);
    cr_assert_eq(cli_run(args, out, sizeof out), 2, "%s", out);
    char *text = NULL;
    size_t len = 0;
    ac_err err = {{0}};
    cr_assert_eq(ac_read_file(path, &text, &len, &err), AC_OK, "%s", err.msg);
    cr_assert_not_null(text, "no report written");
    size_t errors = 0;
    for (const char *at = text; (at = strstr(at, "\"verdict\":\"error\"")) != NULL; at++)
        errors++;
    cr_assert_eq(errors, 4, "%s", text);
    cr_assert_not_null(strstr(text, "{\"type\":\"campaign\""), "%s", text);
    free(text);
}
