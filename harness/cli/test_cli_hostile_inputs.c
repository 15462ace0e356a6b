/* harness/cli/test_cli_hostile_inputs.c — the `attncheck` binary against hostile
 * paths, files and options (suite harness_cli_hostile_inputs; issue 13): every
 * reproducer of the adversarial pass, each now refused with exit 2 and a
 * message, leaving what it must not touch as it was. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness/cli/test_cli_support.h"
#include "harness/files/test_files_support.h"
#include "harness/harness.h"

TestSuite(harness_cli_hostile_inputs, .init = make_dir, .fini = remove_dir);

static char out[1 << 16];
#define GOOD_LINE "'v1 seed=1 b=1 hq=1 hkv=1 nq=4 nk=4 d=8 dtype=f16'"

/* Runs attncheck with args (printf-style) from the test's temp dir. */
static int attncheck(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int attncheck(const char *fmt, ...)
{
    char args[4096], here[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    cr_assert_not_null(getcwd(here, sizeof here));
    cr_assert_eq(chdir(dir), 0);
    int st = cli_run(args, out, sizeof out);
    cr_assert_eq(chdir(here), 0);
    return st;
}

static void put(const char *name, const char *text)
{
    FILE *f = fopen(path_of(name), "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

/* The file's text, or NULL when it does not exist. */
static char *text_of(const char *name)
{
    char *data;
    size_t len;
    ac_err err = {{0}};
    cr_assert_eq(ac_read_file(path_of(name), &data, &len, &err), AC_OK, "%s", err.msg);
    return data;
}

static void assert_text(const char *name, const char *want)
{
    char *got = text_of(name);
    cr_assert(got && !strcmp(got, want), "%s changed: '%s'", name, got ? got : "(gone)");
    free(got);
}

static void assert_says(const char *want)
{
    cr_assert_not_null(strstr(out, want), "output lacks '%s':\n%s", want, out);
}

Test(harness_cli_hostile_inputs, a_run_stopped_with_exit_2_leaves_existing_reports_as_they_were)
{
    const char *runs[] = {"run --case 'v1 bad'", "run nosuch.cases", "prove --base nosuch --cases 1",
                          "run --case " GOOD_LINE " --budgets nosuch.txt", "fuzz --kernel nosuch --cases 1"};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        put("old.json", "OLD-JSON\n");
        put("old.xml", "OLD-XML\n");
        cr_assert_eq(attncheck("%s --json old.json --junit old.xml --markdown new.md", runs[i]), 2, "%s:\n%s", runs[i],
                     out);
        assert_text("old.json", "OLD-JSON\n");
        assert_text("old.xml", "OLD-XML\n");
        cr_assert_neq(access(path_of("new.md"), F_OK), 0, "%s wrote a Markdown report", runs[i]);
    }
    /* a run that completes does write them */
    cr_assert_eq(attncheck("run --case " GOOD_LINE " --json old.json --markdown new.md"), 0, "%s", out);
    char *json = text_of("old.json");
    cr_assert(json && strstr(json, "\"verdict\":\"pass\""), "%s", json);
    free(json);
}

Test(harness_cli_hostile_inputs, unwritable_outputs_exit_2_before_any_case_runs)
{
    cr_assert_eq(mkdir(path_of("sub"), 0755), 0);
    put("plain", "x\n");
    const char *opts[] = {"--json no/such/r.json", "--json /dev/full", "--junit sub",
                          "--json r.json --junit r.xml --markdown r.json"};
    const char *says[] = {"--json", "/dev/full: is a character device", "--junit sub: is a directory",
                          "name the same file"};
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++) {
        cr_assert_eq(attncheck("run --case " GOOD_LINE " %s", opts[i]), 2, "%s:\n%s", opts[i], out);
        assert_says(says[i]);
        cr_assert_null(strstr(out, "cases,"), "a case ran before the check:\n%s", out);
    }
    struct stat st;
    cr_assert(stat("/dev/full", &st) == 0 && S_ISCHR(st.st_mode), "/dev/full is still a device");
    cr_assert_eq(attncheck("fuzz --cases 1 --save-failures plain"), 2, "%s", out);
    assert_says("--save-failures plain: is a regular file, not a folder");
    cr_assert_null(strstr(out, "cases,"), "%s", out);
    cr_assert_eq(attncheck("fuzz --cases 1 --save-failures no/such"), 2, "%s", out);
    assert_says("cannot create the folder");
    cr_assert_eq(attncheck("prove --cases 1 --clean-cases 1 --markdown no/such/p.md"), 2, "%s", out);
    cr_assert_null(strstr(out, "base cpu-flash"), "prove ran before the check:\n%s", out);
}

Test(harness_cli_hostile_inputs, devices_fifos_and_folders_as_inputs_are_refused_at_once, .timeout = 30)
{
    cr_assert_eq(mkfifo(path_of("fifo.cases"), 0600), 0);
    cr_assert_eq(attncheck("run /dev/zero"), 2, "%s", out);
    assert_says("/dev/zero: is a character device");
    cr_assert_eq(attncheck("run fifo.cases"), 2, "%s", out);
    assert_says("is a FIFO");
    cr_assert_eq(attncheck("run --case " GOOD_LINE " --budgets /dev/zero"), 2, "%s", out);
    assert_says("/dev/zero: is a character device");
    cr_assert_eq(attncheck("run --case " GOOD_LINE " --budgets fifo.cases"), 2, "%s", out);
    cr_assert_eq(attncheck("check fifo.cases"), 2, "%s", out);
    assert_says("is a FIFO");
    cr_assert_eq(attncheck("list --plugin ./fifo.cases"), 2, "%s", out); /* dlopen would block on it */
    assert_says("cannot load: ./fifo.cases: is a FIFO, not a regular file");
    cr_assert_eq(attncheck("list --plugin /dev/zero"), 2, "%s", out);
    assert_says("/dev/zero: is a character device");
}

Test(harness_cli_hostile_inputs, numbers_on_the_command_line_are_read_strictly)
{
    const char *bad[] = {"fuzz --seed ' -1'",    "fuzz --seed=-1",          "fuzz --seed 0x10",      "fuzz --cases +5",
                         "fuzz --cases ' 5'",    "fuzz --time inf",         "fuzz --time 1e400",     "fuzz --time 0x10",
                         "fuzz --cert-rows 1.0", "fuzz --max-seqlen '64 '", "prove --clean-cases -0"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(attncheck("%s", bad[i]), 2, "%s accepted:\n%s", bad[i], out);
        cr_assert_null(strstr(out, "cases,"), "%s ran:\n%s", bad[i], out);
    }
    cr_assert_eq(attncheck("fuzz --seed ' -1'"), 2);
    assert_says("--seed: ' -1' is not an unsigned 64-bit integer");
    cr_assert_eq(attncheck("fuzz --seed 18446744073709551615 --cases 1 --no-backward --quiet"), 0, "%s", out);
}

Test(harness_cli_hostile_inputs, list_takes_no_report_option_as_the_readme_says)
{
    cr_assert_eq(attncheck("list --json kernels.json"), 2, "%s", out);
    assert_says("unknown option '--json'");
    cr_assert_neq(access(path_of("kernels.json"), F_OK), 0);
}

/* ---- check and reference on files this test writes -------------------------- */

static void put_inputs(const char *folder, const char *line)
{
    ac_case c;
    ac_inputs in;
    ac_err err = {{0}};
    cr_assert_eq(ac_case_parse(line, &c, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(ac_inputs_make(&c, &in, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(mkdir(folder, 0755), 0, "%s", folder);
    const char *names[3] = {"q", "k", "v"};
    const void *data[3] = {in.q, in.k, in.v};
    for (int i = 0; i < 3; i++) {
        bool q_like = i == 0;
        ac_tensor t = {.dtype = AC_TF_F32,
                       .ndim = 4,
                       .shape = {in.p.batch, q_like ? in.p.heads_q : in.p.heads_kv,
                                 q_like ? in.p.seqlen_q : in.p.seqlen_k, in.p.head_dim},
                       .data = (void *)data[i]};
        t.n_elems = q_like ? ac_q_elems(&in.p) : ac_kv_elems(&in.p);
        char file[4200];
        snprintf(file, sizeof file, "%s/%s.npy", folder, names[i]);
        cr_assert_eq(ac_npy_write(file, &t, &err), AC_OK, "%s", err.msg);
    }
    ac_inputs_free(&in);
}

#define F32_LINE "v1 seed=3 b=1 hq=2 hkv=1 nq=5 nk=7 d=4 dtype=f32"

Test(harness_cli_hostile_inputs, reference_never_writes_over_its_inputs)
{
    put_inputs(path_of("case"), F32_LINE);
    char *q_before = text_of("case/q.npy");
    cr_assert_eq(attncheck("reference case --out case"), 2, "%s", out);
    assert_says("is the input folder");
    cr_assert_eq(attncheck("reference case --out ./case/"), 2, "%s", out);
    cr_assert_neq(access(path_of("case/o.npy"), F_OK), 0, "o.npy written into the inputs");
    /* a trap: --out's o.npy is a link to an input */
    cr_assert_eq(mkdir(path_of("trap"), 0755), 0);
    cr_assert_eq(symlink("../case/q.npy", path_of("trap/o.npy")), 0);
    cr_assert_eq(attncheck("reference case --out trap"), 2, "%s", out);
    assert_says("would overwrite the input");
    char *q_after = text_of("case/q.npy");
    cr_assert(q_before && q_after && !memcmp(q_before, q_after, 100), "q.npy changed");
    free(q_before), free(q_after);
    /* the inputs as one .safetensors file, written over itself (directly and through a link) */
    cr_assert_eq(attncheck("reference case --out ref"), 0, "%s", out);
    cr_assert_eq(chmod(path_of("ref/o.npy"), 0600), 0);
    cr_assert_eq(attncheck("reference case --out ref"), 0, "%s", out);
    struct stat st;
    cr_assert(stat(path_of("ref/o.npy"), &st) == 0 && (st.st_mode & 0777) == 0600, "reference --out keeps the mode");
    ac_tensor_set set;
    ac_tensor ts[3];
    ac_err err = {{0}};
    const char *names[3] = {"q", "k", "v"};
    const ac_tensor *ptr[3];
    for (int i = 0; i < 3; i++) {
        char file[64];
        snprintf(file, sizeof file, "case/%s.npy", names[i]);
        cr_assert_eq(ac_npy_read(path_of(file), names[i], &ts[i], &err), AC_OK, "%s", err.msg);
        ptr[i] = &ts[i];
    }
    cr_assert_eq(ac_safetensors_write(path_of("in.safetensors"), ptr, 3, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(symlink("in.safetensors", path_of("alias.safetensors")), 0);
    cr_assert_eq(attncheck("reference in.safetensors --out in.safetensors"), 2, "%s", out);
    assert_says("would overwrite the input");
    cr_assert_eq(attncheck("reference in.safetensors --out alias.safetensors"), 2, "%s", out);
    cr_assert_eq(ac_safetensors_read(path_of("in.safetensors"), &set, &err), AC_OK, "the inputs survive: %s", err.msg);
    cr_assert_eq(set.n, 3);
    ac_tensor_set_free(&set);
    for (int i = 0; i < 3; i++)
        ac_tensor_free(&ts[i]);
    cr_assert_null(strstr(out, "reference: reference:"), "%s", out);
}

/* A path is any bytes: the reports it lands in (check's label and line hold
 * it) must still parse as JSON Lines, XML and UTF-8, checked by Python's own
 * strict readers. */
Test(harness_cli_hostile_inputs, reports_stay_well_formed_whatever_a_path_puts_in_them)
{
    char bad[256];
    snprintf(bad, sizeof bad, "%s/bad\xff\xfe\xc3(\x01<&\">", dir);
    put_inputs(bad, F32_LINE);
    cr_assert_eq(setenv("AC_BAD_PATH", bad, 1), 0);
    int st = attncheck("check \"$AC_BAD_PATH\" --kernel cpu-flash --json r.json --junit r.xml --markdown r.md");
    cr_assert(st == 0 || st == 1, "status %d:\n%s", st, out);
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && python3 -c 'import json, sys, xml.dom.minidom as m\n"
             "rows = [r for r in (json.loads(l) for l in open(\"r.json\", encoding=\"utf-8\")) if \"type\" not in r]\n"
             "assert \"\\\\xFF\\\\xFE\\\\xC3(\\x01<&\\\"\" in rows[0][\"case\"], rows[0][\"case\"]\n"
             "m.parse(\"r.xml\"); open(\"r.md\", encoding=\"utf-8\").read()'",
             dir);
    cr_assert_eq(system(cmd), 0, "a report is not well-formed (see above)");
}
