/* harness/exec/test_exec.c — external-process kernels (suite harness_exec):
 * caps files refused naming the field, case directories written and read
 * back exactly, every way a command can misbehave turned into the kernel
 * fault that names it, and the numpy example judged pass in both modes.
 *
 * The commands are shell one-liners, except the numpy kernel
 * (plugins/numpy_attention.py), which needs a python3 with numpy:
 * $ATTNCHECK_PYTHON, else python3, else /usr/bin/python3 (ci/install-deps.sh
 * installs python3-numpy). */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attncheck_config.h"
#include "harness/exec/exec.h"
#include "harness/files/test_files_support.h"
#include "harness/harness.h"

static const char *source_dir(void)
{
    const char *env = getenv("ATTNCHECK_SOURCE_DIR");
    return env && *env ? env : ATTNCHECK_SOURCE_DIR;
}

/* A python3 that imports numpy. */
static const char *python(void)
{
    static char found[512];
    const char *env = getenv("ATTNCHECK_PYTHON");
    const char *candidates[] = {env && *env ? env : "python3", "python3", "/usr/bin/python3"};
    for (size_t i = 0; i < 3 && !found[0]; i++) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "%s -c 'import numpy' >/dev/null 2>&1", candidates[i]);
        if (system(cmd) == 0)
            snprintf(found, sizeof found, "%s", candidates[i]);
    }
    cr_assert(found[0], "no python3 with numpy (apt-get install python3-numpy, or set ATTNCHECK_PYTHON)");
    return found;
}

/* A caps file claiming everything, named name; returns its path. */
static const char *caps_file(const char *name)
{
    const char *path = path_of("caps.json");
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fprintf(f,
            "{\"name\": \"%s\", \"dtypes\": [\"f32\", \"f16\", \"bf16\"], \"max_head_dim\": 256, \"masks\": "
            "[\"none\", \"causal-tl\", \"causal-br\", \"window-tl\", \"window-br\", \"dense\"], \"layouts\": "
            "[\"bhsd\", \"bshd\"], \"gqa\": true, \"varlen\": true, \"backward\": true}",
            name);
    fclose(f);
    return path;
}

static const ac_kernel *exec_kernel(const char *name, const char *command, ac_exec_mode mode, double timeout_s)
{
    ac_exec_spec s = {.command = command, .mode = mode, .caps_path = caps_file(name), .timeout_s = timeout_s};
    const ac_kernel *k = NULL;
    ac_err err = {{0}};
    cr_assert_eq(ac_exec_register(&s, &k, &err), AC_OK, "%s", err.msg);
    return k;
}

typedef struct {
    ac_inputs in;
    void *o;
    float *lse;
} call;

static void call_make(call *c, const char *line)
{
    ac_case cs;
    ac_err err = {{0}};
    cr_assert_eq(ac_case_parse(line, &cs, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(ac_inputs_make(&cs, &c->in, &err), AC_OK, "%s", err.msg);
    c->o = malloc(ac_q_elems(&c->in.p) * 4);
    c->lse = malloc(ac_lse_elems(&c->in.p) * sizeof(float));
}

static void call_free(call *c)
{
    ac_inputs_free(&c->in);
    free(c->o);
    free(c->lse);
}

static int forward(const ac_kernel *k, call *c, ac_err *err)
{
    ac_fwd_args a = {.q = c->in.q, .k = c->in.k, .v = c->in.v, .o = c->o, .lse = c->lse};
    return k->forward(k, &c->in.p, c->in.c.dtype, &a, err);
}

#define LINE_F16 \
    "v1 seed=3 b=1 hq=2 hkv=1 nq=5 nk=7 d=4 dtype=f16 mask=causal-br layout=bhsd dist=normal(0,1) scale=auto"

/* The case directory's problem.json as text (free it). */
static char *problem_json_text(void)
{
    char *json = NULL;
    size_t len = 0;
    ac_err err = {{0}};
    cr_assert_eq(ac_read_file(path_of("problem.json"), &json, &len, &err), AC_OK, "%s", err.msg);
    return json;
}

/* A caps file's claims, which must parse. */
static ac_caps caps_claimed(const char *claims)
{
    ac_caps caps;
    char name[64];
    ac_err err = {{0}};
    cr_assert_eq(ac_exec_caps_parse(claims, strlen(claims), "caps", &caps, name, sizeof name, &err), AC_OK, "%s",
                 err.msg);
    return caps;
}

TestSuite(harness_exec, .init = make_dir, .fini = remove_dir);

/* ---- caps files ------------------------------------------------------------------------ */

typedef struct {
    char json[200], names[80]; /* a caps file, and what its message must name */
} bad_caps;

ParameterizedTestParameters(harness_exec, bad_caps_files_are_refused_naming_the_field)
{
    static bad_caps cases[] = {
        {"{\"dtypes\": [\"f16\"], \"max_head_dim\": 64, \"masks\": [\"none\"], \"layouts\": [\"bhsd\"], "
         "\"dtype\": 1}",
         "unknown field \"dtype\""},
        {"{\"dtypes\": [\"f8\"], \"max_head_dim\": 64, \"masks\": [\"none\"], \"layouts\": [\"bhsd\"]}",
         "\"dtypes\" has an unknown entry 'f8'"},
        {"{\"dtypes\": [\"f16\"], \"max_head_dim\": 64, \"masks\": [\"window-br\"], \"layouts\": [\"bhsd\"]}",
         "\"masks\" lists window-br without causal-br"},
        {"{\"dtypes\": [\"f16\"], \"max_head_dim\": 64, \"masks\": [\"causal-tl\", \"causal-br\", \"window-tl\"], "
         "\"layouts\": [\"bhsd\"]}",
         "\"masks\" implies window-br"},
        {"{\"dtypes\": [\"f16\"], \"head_dims\": [64], \"max_head_dim\": 64, \"masks\": [\"none\"], "
         "\"layouts\": [\"bhsd\"]}",
         "give \"head_dims\" (a list) or \"max_head_dim\", one of them"},
        {"{\"dtypes\": [\"f16\"], \"head_dims\": [0], \"masks\": [\"none\"], \"layouts\": [\"bhsd\"]}",
         "\"head_dims\" must be a whole number in 1..1024"},
        {"{\"dtypes\": [\"f16\"], \"max_head_dim\": 64, \"masks\": [\"none\"], \"layouts\": [\"bhsd\"], "
         "\"gqa\": \"yes\"}",
         "\"gqa\" must be true or false"},
        {"{\"name\": \"a b\", \"dtypes\": [\"f16\"], \"max_head_dim\": 64, \"masks\": [\"none\"], "
         "\"layouts\": [\"bhsd\"]}",
         "\"name\" must be 1-63 characters"},
        {"{\"dtypes\": [], \"max_head_dim\": 64, \"masks\": [\"none\"], \"layouts\": [\"bhsd\"]}",
         "\"dtypes\" must be a non-empty list"},
        {"[1, 2]", "expected a JSON object"},
        {"{\"dtypes\": [\"f16\"],", "not valid JSON"},
    };
    return cr_make_param_array(bad_caps, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(bad_caps *c, harness_exec, bad_caps_files_are_refused_naming_the_field)
{
    ac_caps caps;
    char name[64];
    ac_err err = {{0}};
    cr_assert_eq(ac_exec_caps_parse(c->json, strlen(c->json), "k.json", &caps, name, sizeof name, &err), AC_ERR_INPUT);
    cr_assert(strstr(err.msg, c->names) != NULL, "'%s' does not say '%s'", err.msg, c->names);
    cr_assert(strncmp(err.msg, "k.json: ", 8) == 0, "%s", err.msg);
}

Test(harness_exec, the_shipped_caps_file_claims_what_it_says)
{
    char path[512];
    snprintf(path, sizeof path, "%s/plugins/numpy_attention.caps.json", source_dir());
    ac_caps c;
    char name[64];
    ac_err err = {{0}};
    cr_assert_eq(ac_exec_caps_load(path, &c, name, sizeof name, &err), AC_OK, "%s", err.msg);
    cr_assert_str_eq(name, "numpy-attention");
    cr_assert_eq(c.dtypes, 7u);
    cr_assert_eq(c.n_head_dims, 0);
    cr_assert_eq(c.max_head_dim, 256);
    cr_assert_eq(c.masks, (unsigned)AC_MASKCAP_ALL);
    cr_assert_eq(c.layouts, 3u);
    cr_assert(c.gqa && c.varlen && c.backward);
    cr_assert_eq(c.max_seqlen, 256);
}

/* ---- case directories --------------------------------------------------------------------- */

Test(harness_exec, a_case_directory_holds_the_exact_inputs_and_the_problem)
{
    call c;
    call_make(&c,
              "v1 seed=9 b=2 hq=4 hkv=2 nq=6 nk=9 d=8 dtype=bf16 mask=window-br(3,inf) seqlens-k=9,4 "
              "layout=bshd dist=normal(0,2) scale=0.3");
    ac_case_files cf = {.p = &c.in.p,
                        .dtype = AC_BF16,
                        .case_line = "LINE",
                        .q = c.in.q,
                        .k = c.in.k,
                        .v = c.in.v,
                        .out_dir = "/somewhere"};
    ac_err err = {{0}};
    cr_assert_eq(ac_case_dir_write(dir, &cf, &err), AC_OK, "%s", err.msg);
    ac_tensor k;
    cr_assert_eq(ac_npy_read(path_of("k.npy"), "k", &k, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(k.dtype, AC_TF_U16, "bf16 travels as <u2 bits");
    int64_t bshd[4] = {2, 9, 2, 8};
    cr_assert_arr_eq(k.shape, bshd, sizeof bshd);
    cr_assert_arr_eq(k.data, c.in.k, ac_kv_elems(&c.in.p) * 2, "the very bits of the inputs");
    ac_tensor_free(&k);
    ac_case_options o;
    bool found;
    cr_assert_eq(ac_case_dir_options(dir, &o, &found, &err), AC_OK, "%s", err.msg);
    cr_assert(found);
    cr_assert_str_eq(o.dtype, "bf16");
    cr_assert_str_eq(o.layout, "bshd");
    cr_assert_str_eq(o.mask, "window-br(3,inf)");
    cr_assert_str_eq(o.seqlens_q, "");
    cr_assert_str_eq(o.seqlens_k, "9,4");
    cr_assert_str_eq(o.case_line, "LINE");
    cr_assert_eq(strtod(o.scale, NULL), c.in.p.scale, "the scale reads back to the same double");
    cr_assert_eq(c.in.p.scale, (double)0.3f);
    call_free(&c);
}

/* A paged case: k.npy and v.npy are the pages, block_table.npy the table, and
 * problem.json says so; a caps file claims paging with "paged". */
Test(harness_exec, a_paged_case_directory_holds_the_pages_and_the_block_table)
{
    call c;
    call_make(&c,
              "v1 seed=9 b=2 hq=4 hkv=2 nq=2 nk=40 d=8 dtype=bf16 mask=causal-br seqlens-k=40,3 "
              "layout=bshd dist=normal(0,2) scale=auto kv=paged(8) splits=3");
    ac_case_files cf = {.p = &c.in.p,
                        .dtype = AC_BF16,
                        .case_line = "LINE",
                        .q = c.in.q,
                        .k = c.in.k,
                        .v = c.in.v,
                        .out_dir = "/somewhere"};
    ac_err err = {{0}};
    cr_assert_eq(ac_case_dir_write(dir, &cf, &err), AC_OK, "%s", err.msg);
    ac_tensor k, bt;
    cr_assert_eq(ac_npy_read(path_of("k.npy"), "k", &k, &err), AC_OK, "%s", err.msg);
    int64_t pages[4] = {c.in.p.num_pages, 8, 2, 8};
    cr_assert_arr_eq(k.shape, pages, sizeof pages);
    cr_assert_arr_eq(k.data, c.in.k, ac_kv_elems(&c.in.p) * 2, "the very bits of the pages");
    cr_assert_eq(ac_npy_read(path_of("block_table.npy"), "block_table", &bt, &err), AC_OK, "%s", err.msg);
    int64_t table[2] = {2, 5};
    cr_assert_eq(bt.dtype, AC_TF_I32);
    cr_assert_arr_eq(bt.shape, table, sizeof table);
    cr_assert_arr_eq(bt.data, c.in.p.block_table, 10 * sizeof(int));
    ac_tensor_free(&k), ac_tensor_free(&bt);
    char *json = problem_json_text();
    cr_assert(strstr(json, "\"page_size\":\t8") && strstr(json, "\"num_splits\":\t3") &&
                  strstr(json, "\"block_table\":\t\"block_table.npy\""),
              "%s", json);
    free(json);
    ac_caps caps = caps_claimed("{\"dtypes\": [\"bf16\"], \"max_head_dim\": 64, \"masks\": [\"none\"], "
                                "\"layouts\": [\"bhsd\"], \"paged\": true, \"split\": true}");
    cr_assert_eq(caps.variants, (unsigned)(AC_VAR_PAGED | AC_VAR_SPLIT));
    char name[64];
    const char *bad = "{\"dtypes\": [\"bf16\"], \"max_head_dim\": 64, \"masks\": [\"none\"], "
                      "\"layouts\": [\"bhsd\"], \"paged\": 1}";
    cr_assert_eq(ac_exec_caps_parse(bad, strlen(bad), "caps", &caps, name, sizeof name, &err), AC_ERR_INPUT);
    cr_assert(strstr(err.msg, "\"paged\" must be true or false"), "%s", err.msg);
    call_free(&c);
}

/* MLA decode: v=k and d_v in problem.json, v.npy with d_v columns equal to
 * K's first ones; a caps file claims "dv" and "v_from_k". */
Test(harness_exec, an_mla_case_directory_says_v_is_k_and_its_d_v)
{
    call c;
    call_make(&c,
              "v1 seed=9 b=2 hq=16 hkv=1 nq=1 nk=40 d=576 dtype=bf16 mask=causal-br layout=bshd "
              "dist=normal(0,1) scale=auto dv=512 v=k kv=paged(16)");
    ac_case_files cf = {
        .p = &c.in.p, .dtype = AC_BF16, .case_line = "LINE", .q = c.in.q, .k = c.in.k, .v = c.in.v, .out_dir = "/x"};
    ac_err err = {{0}};
    cr_assert_eq(ac_case_dir_write(dir, &cf, &err), AC_OK, "%s", err.msg);
    ac_tensor v;
    cr_assert_eq(ac_npy_read(path_of("v.npy"), "v", &v, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(v.shape[3], 512);
    ac_tensor_free(&v);
    char *json = problem_json_text();
    cr_assert(strstr(json, "\"head_dim\":\t576") && strstr(json, "\"head_dim_v\":\t512") &&
                  strstr(json, "\"v_from_k\":\ttrue"),
              "%s", json);
    free(json);
    ac_caps caps = caps_claimed("{\"dtypes\": [\"bf16\"], \"head_dims\": [576], \"masks\": [\"causal-br\"], "
                                "\"layouts\": [\"bshd\"], \"gqa\": true, \"paged\": true, \"dv\": true, "
                                "\"v_from_k\": true}");
    cr_assert_eq(caps.variants, (unsigned)(AC_VAR_PAGED | AC_VAR_DV));
    cr_assert(caps.v_from_k);
    call_free(&c);
    /* contiguous V of d_v columns: v.npy holds exactly V's elements (d's count over-read the buffer before) */
    call_make(&c,
              "v1 seed=9 b=2 hq=4 hkv=2 nq=3 nk=9 d=24 dtype=f16 mask=none layout=bhsd dist=normal(0,1) "
              "scale=auto dv=8");
    cf = (ac_case_files){.p = &c.in.p, .dtype = AC_F16, .case_line = "LINE", .q = c.in.q, .k = c.in.k, .v = c.in.v};
    cr_assert_eq(ac_case_dir_write(dir, &cf, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(ac_npy_read(path_of("v.npy"), "v", &v, &err), AC_OK, "%s", err.msg);
    int64_t v_shape[4] = {2, 2, 9, 8};
    cr_assert_arr_eq(v.shape, v_shape, sizeof v_shape);
    cr_assert_arr_eq(v.data, c.in.v, 2 * 2 * 9 * 8 * 2);
    ac_tensor_free(&v);
    call_free(&c);
}

/* fp8: the codes as |u1 bytes, the factors as f32 arrays of their counts,
 * the output dtype and P's format in problem.json. */
Test(harness_exec, an_fp8_case_directory_holds_codes_descales_and_the_recipe)
{
    call c;
    call_make(&c, "v1 seed=9 b=2 hq=4 hkv=2 nq=6 nk=70 d=8 dtype=e4m3 out=f16 descale=block(32) p=e4m3");
    ac_case_files cf = {.p = &c.in.p,
                        .dtype = AC_E4M3,
                        .case_line = "LINE",
                        .q = c.in.q,
                        .k = c.in.k,
                        .v = c.in.v,
                        .out_dir = "/somewhere"};
    ac_err err = {{0}};
    cr_assert_eq(ac_case_dir_write(dir, &cf, &err), AC_OK, "%s", err.msg);
    ac_tensor v, dk;
    cr_assert_eq(ac_npy_read(path_of("v.npy"), "v", &v, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(v.dtype, AC_TF_U8, "fp8 travels as |u1 codes");
    cr_assert_arr_eq(v.data, c.in.v, ac_kv_elems(&c.in.p), "the very codes of the inputs");
    cr_assert_eq(ac_npy_read(path_of("descale_k.npy"), "descale_k", &dk, &err), AC_OK, "%s", err.msg);
    cr_assert(dk.dtype == AC_TF_F32 && dk.ndim == 3 && dk.shape[0] == 2 && dk.shape[1] == 2 && dk.shape[2] == 3,
              "(b, kv head, 3 blocks of 32)");
    cr_assert_arr_eq(dk.data, c.in.descale_k, dk.n_elems * sizeof(float));
    ac_tensor_free(&v);
    ac_tensor_free(&dk);
    char *json = problem_json_text();
    cr_assert(strstr(json, "\"out_dtype\":\t\"f16\"") && strstr(json, "\"p_dtype\":\t\"e4m3\"") &&
                  strstr(json, "\"descale\":\t32"),
              "%s", json);
    free(json);
    call_free(&c);
}

/* ---- what a command can do wrong --------------------------------------------------------------- */

typedef struct {
    char command[100]; /* one-shot, with {in} {out} */
    int status;
    char starts[40]; /* the message's beginning: the fault's class */
    char contains[80];
} misbehaviour;

ParameterizedTestParameters(harness_exec, each_misbehaviour_is_the_fault_that_names_it)
{
    static misbehaviour cases[] = {
        {"kill -SEGV $$ # {in}", AC_KERNEL_FAULT, "crash: ", "signal 11"},
        {"echo 'ValueError: d=4 not tiled' >&2; exit 3 # {in}", AC_KERNEL_FAULT,
         "exited: ", "exit status 3; last line of its output: ValueError: d=4 not tiled"},
        {"true {in} {out}", AC_KERNEL_FAULT, "missing-o: ", "wrote no o.npy"},
        {"printf junk > {out}/o.npy # {in}", AC_KERNEL_FAULT, "malformed-o: ", "o.npy"},
        {"cp {in}/k.npy {out}/o.npy", AC_KERNEL_FAULT, "malformed-o: ",
         "holds f16 (1, 1, 7, 4), expected f16 "
         "(1, 2, 5, 4)"},
        {"cp {in}/q.npy {out}/o.npy && cp {in}/q.npy {out}/lse.npy", AC_KERNEL_FAULT,
         "malformed-lse: ", "expected f32 (1, 2, 5)"},
        {"no-such-kernel-command-xyz {in}", AC_ERR_INPUT, "--exec: the shell could not run", "exit status 127"},
    };
    return cr_make_param_array(misbehaviour, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(misbehaviour *m, harness_exec, each_misbehaviour_is_the_fault_that_names_it)
{
    char name[32];
    static int serial;
    snprintf(name, sizeof name, "bad-%d-%d", (int)getpid(), serial++);
    const ac_kernel *k = exec_kernel(name, m->command, AC_EXEC_ONESHOT, 10.0);
    call c;
    call_make(&c, LINE_F16);
    ac_err err = {{0}};
    cr_assert_eq(forward(k, &c, &err), m->status, "%s", err.msg);
    cr_assert(strncmp(err.msg, m->starts, strlen(m->starts)) == 0, "'%s' does not start with '%s'", err.msg, m->starts);
    cr_assert(strstr(err.msg, m->contains) != NULL, "'%s' does not say '%s'", err.msg, m->contains);
    call_free(&c);
}

Test(harness_exec, a_command_past_its_deadline_is_killed_and_a_timeout)
{
    const ac_kernel *k = exec_kernel("sleeper", "sleep 30 # {in}", AC_EXEC_ONESHOT, 0.3);
    call c;
    call_make(&c, LINE_F16);
    ac_err err = {{0}};
    double t0 = ac_now_seconds();
    cr_assert_eq(forward(k, &c, &err), AC_KERNEL_FAULT, "%s", err.msg);
    double took = ac_now_seconds() - t0;
    cr_assert(strncmp(err.msg, "timeout: ", 9) == 0, "%s", err.msg);
    cr_assert(strstr(err.msg, "within 0.3 s") != NULL, "%s", err.msg);
    cr_assert(took >= 0.3 && took < 5.0, "took %.2f s", took);
    call_free(&c);
}

Test(harness_exec, a_spec_without_its_placeholders_or_caps_is_refused)
{
    ac_err err = {{0}};
    const ac_kernel *k;
    ac_exec_spec s = {.command = "python3 k.py", .mode = AC_EXEC_ONESHOT, .caps_path = caps_file("x1")};
    cr_assert_eq(ac_exec_register(&s, &k, &err), AC_ERR_INPUT);
    cr_assert(strstr(err.msg, "needs {in}") != NULL, "%s", err.msg);
    s = (ac_exec_spec){.command = "python3 k.py {in}", .mode = AC_EXEC_PERSISTENT, .caps_path = caps_file("x2")};
    cr_assert_eq(ac_exec_register(&s, &k, &err), AC_ERR_INPUT);
    cr_assert(strstr(err.msg, "no {in} or {out}") != NULL, "%s", err.msg);
    s = (ac_exec_spec){.command = "python3 k.py {in}", .mode = AC_EXEC_ONESHOT};
    cr_assert_eq(ac_exec_register(&s, &k, &err), AC_ERR_INPUT);
    cr_assert(strstr(err.msg, "needs --caps FILE") != NULL, "%s", err.msg);
}

/* ---- persistent processes ------------------------------------------------------------------------- */

Test(harness_exec, a_persistent_error_answer_is_a_fault_and_the_process_stays)
{
    const ac_kernel *k = exec_kernel("answers-error", "while read d; do echo 'error CUDA out of memory'; done",
                                     AC_EXEC_PERSISTENT, 10.0);
    call c;
    call_make(&c, LINE_F16);
    ac_err err = {{0}};
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(forward(k, &c, &err), AC_KERNEL_FAULT, "%s", err.msg);
        cr_assert_str_eq(err.msg, "error: CUDA out of memory");
    }
    cr_assert_eq(ac_exec_starts(k), 1, "an answer, even an error, keeps the process");
    call_free(&c);
}

Test(harness_exec, a_dead_or_silent_persistent_process_is_a_fault_and_is_restarted)
{
    const ac_kernel *dies =
        exec_kernel("dies", "read d; echo 'Segmentation fault' >&2; exit 9", AC_EXEC_PERSISTENT, 10.0);
    const ac_kernel *silent = exec_kernel("silent", "read d; sleep 30", AC_EXEC_PERSISTENT, 0.3);
    call c;
    call_make(&c, LINE_F16);
    ac_err err = {{0}};
    for (int i = 1; i <= 2; i++) {
        cr_assert_eq(forward(dies, &c, &err), AC_KERNEL_FAULT, "%s", err.msg);
        cr_assert(strstr(err.msg,
                         "exited: the persistent process ended with exit status 9 without answering; "
                         "last line of its output: Segmentation fault") == err.msg,
                  "%s", err.msg);
        cr_assert_eq(ac_exec_starts(dies), i, "restarted for every call");
        cr_assert_eq(forward(silent, &c, &err), AC_KERNEL_FAULT, "%s", err.msg);
        cr_assert(strncmp(err.msg, "timeout: no answer within 0.3 s", 31) == 0, "%s", err.msg);
        cr_assert_eq(ac_exec_starts(silent), i);
    }
    call_free(&c);
}

/* ---- the numpy example, in both modes ----------------------------------------------------------------- */

static void passes_three_cases(const ac_kernel *k)
{
    static const char *const lines[] = {
        "v1 seed=4 b=2 hq=4 hkv=2 nq=9 nk=13 d=8 dtype=f16 mask=causal-br layout=bshd dist=normal(0,1) scale=auto",
        "v1 seed=5 b=1 hq=2 hkv=2 nq=17 nk=5 d=16 dtype=bf16 mask=dense(0.5) maskrows=0.25 layout=bhsd "
        "dist=normal(0,3) scale=auto",
        "v1 seed=6 b=2 hq=3 hkv=1 nq=8 nk=8 d=32 dtype=f32 mask=window-tl(2,1) seqlens-q=8,3 seqlens-k=5,8 "
        "layout=bhsd dist=outliers(1,0.01) scale=0.5",
    };
    ac_budgets b;
    ac_err err = {{0}};
    cr_assert_eq(ac_budgets_load(ac_budgets_default_path(), &b, &err), AC_OK, "%s", err.msg);
    ac_run_opts o = {.backward = true};
    for (size_t i = 0; i < 3; i++) {
        ac_case cs;
        ac_result r;
        cr_assert_eq(ac_case_parse(lines[i], &cs, &err), AC_OK, "%s", err.msg);
        cr_assert_eq(ac_run_case(k, &cs, &b, &o, &r, &err), AC_OK, "%s: %s", lines[i], err.msg);
        cr_assert_eq(r.verdict, AC_VERDICT_PASS, "%s: [%s] %s", lines[i], r.kind, r.why);
        cr_assert(r.has_backward && r.m[AC_OUT_DV].present);
    }
}

Test(harness_exec, the_numpy_example_passes_one_shot_and_persistent, .timeout = 60)
{
    char one[1024], served[1024];
    snprintf(one, sizeof one, "%s '%s/plugins/numpy_attention.py' {in} {out}", python(), source_dir());
    snprintf(served, sizeof served,
             "echo 'a line the protocol skips'; exec %s '%s/plugins/numpy_attention.py' "
             "--serve",
             python(), source_dir());
    passes_three_cases(exec_kernel("numpy-one-shot", one, AC_EXEC_ONESHOT, 30.0));
    const ac_kernel *k = exec_kernel("numpy-served", served, AC_EXEC_PERSISTENT, 30.0);
    passes_three_cases(k);
    cr_assert_eq(ac_exec_starts(k), 1, "one process served every call");
}
