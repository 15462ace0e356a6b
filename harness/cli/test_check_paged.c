/* harness/cli/test_check_paged.c — `attncheck check` and `reference` on a paged
 * KV cache (suite harness_check_paged): a gen directory of a paged case is
 * checked with the table it carries, the same files through --block-table and
 * --page-size, and bad tables and sizes exit 2 naming what is wrong. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness/cli/check_internal.h"
#include "harness/files/test_files_support.h"
#include "harness/harness.h"

TestSuite(harness_check_paged, .init = make_dir, .fini = remove_dir);

#define LINE \
    "v1 seed=5 b=3 hq=4 hkv=2 nq=2 nk=40 d=8 dtype=bf16 mask=causal-br seqlens-k=40,1,17 layout=bshd " \
    "dist=normal(0,1) scale=auto kv=paged(8) splits=2"

static void gen_case(void)
{
    char *gen[] = {"gen", "--case", LINE, "--out", (char *)path_of("case"), NULL};
    cr_assert_eq(ac_cmd_gen(5, gen), AC_OK);
    cr_assert_eq(access(path_of("case/block_table.npy"), F_OK), 0);
    cr_assert_neq(access(path_of("case/do.npy"), F_OK), 0, "forward only: no dO");
}

static int check_kernel(const char *kernel)
{
    char *argv[] = {"check", (char *)path_of("case"), "--kernel", (char *)kernel, "--in-process", NULL};
    return ac_cmd_check(5, argv);
}

Test(harness_check_paged, a_gen_directory_is_checked_with_its_table)
{
    gen_case();
    cr_assert_eq(check_kernel("cpu-flash"), AC_OK);
    cr_assert_eq(check_kernel("ref-fp64"), AC_OK);
    cr_assert_eq(check_kernel("cpu-flash-mutant-last-page-slots"), AC_FAIL_ACCURACY, "the NaN slots are read");
    char *ref[] = {"reference", (char *)path_of("case"), "--out", (char *)path_of("ref"), NULL};
    cr_assert_eq(ac_cmd_reference(4, ref), AC_OK);
    cr_assert_eq(access(path_of("ref/o.npy"), F_OK), 0);
}

/* The files of the gen directory without its problem.json, the options spelled out. */
static int make_inputs(const char *table, int page_size, ac_inputs *in, ac_err *err)
{
    ac_cli o;
    memset(&o, 0, sizeof o);
    o.path = path_of("case");
    o.dtype = "bf16", o.layout = "bshd", o.mask = "causal-br", o.seqlens_k = "40,1,17";
    o.block_table = table, o.page_size = page_size;
    tensor_files f;
    int st = ac_check_read_files(o.path, &f, err);
    if (st == AC_OK)
        st = ac_check_make_inputs(&o, &f, in, err);
    ac_check_files_free(&f);
    return st;
}

static void write_table(const char *name, int rows, int cols, const int32_t *ids)
{
    ac_tensor t = {
        .dtype = AC_TF_I32, .ndim = 2, .shape = {rows, cols}, .data = (void *)ids, .n_elems = (size_t)rows * cols};
    ac_err err = {{0}};
    cr_assert_eq(ac_npy_write(path_of(name), &t, &err), AC_OK, "%s", err.msg);
}

Test(harness_check_paged, the_options_give_the_same_problem_and_bad_tables_are_named)
{
    gen_case();
    cr_assert_eq(unlink(path_of("case/problem.json")), 0);
    ac_case c;
    ac_inputs want, got;
    ac_err err = {{0}};
    cr_assert_eq(ac_case_parse(LINE, &c, &err), AC_OK);
    cr_assert_eq(ac_inputs_make(&c, &want, &err), AC_OK);
    cr_assert_eq(make_inputs(path_of("case/block_table.npy"), 8, &got, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(got.p.page_size, 8);
    cr_assert_eq(got.p.num_pages, want.p.num_pages);
    cr_assert_eq(got.p.pages_per_seq, 5);
    cr_assert_eq(got.p.seqlen_k, 40, "5 pages of 8");
    cr_assert(memcmp(got.p.block_table, want.p.block_table, 15 * sizeof(int)) == 0);
    for (int b = 0; b < 3; b++) /* the keys in use, read through either table, agree */
        for (int j = 0; j < want.p.seqlens_k[b]; j++)
            cr_assert_eq(got.kd[ac_kv_index(&got.p, b, 1, j, 3)], want.kd[ac_kv_index(&want.p, b, 1, j, 3)]);
    ac_inputs_free(&got);

    int32_t ids[15];
    memcpy(ids, want.p.block_table, sizeof ids);
    ids[1] = 99;
    write_table("bad.npy", 3, 5, ids);
    cr_assert_eq(make_inputs(path_of("bad.npy"), 8, &got, &err), AC_ERR_INPUT);
    cr_assert(strstr(err.msg, "block_table[0][1]=99: page id out of range"), "%s", err.msg);
    ac_inputs_free(&got);

    write_table("short.npy", 3, 2, ids); /* 2 pages of 8 < 40 keys */
    cr_assert_eq(make_inputs(path_of("short.npy"), 8, &got, &err), AC_ERR_INPUT);
    cr_assert(strstr(err.msg, "--seqlens-k"), "the lengths past the grid of 16 keys: %s", err.msg);
    ac_inputs_free(&got);

    cr_assert_eq(make_inputs(path_of("case/block_table.npy"), 16, &got, &err), AC_ERR_INPUT);
    cr_assert(strstr(err.msg, "k holds pages of 8 keys, --page-size says 16"), "%s", err.msg);
    ac_inputs_free(&got);

    cr_assert_eq(make_inputs(path_of("case/block_table.npy"), 0, &got, &err), AC_ERR_INPUT);
    cr_assert(strstr(err.msg, "--block-table and --page-size: a paged KV cache needs both"), "%s", err.msg);
    ac_inputs_free(&got);

    ac_cli cli;
    char *zero[] = {"check", (char *)path_of("case"), "--page-size", "0", NULL};
    cr_assert_eq(ac_cli_parse(4, zero, &cli, &err), AC_ERR_INPUT);
    cr_assert(strstr(err.msg, "--page-size"), "%s", err.msg);
    ac_inputs_free(&want);
}

/* MLA decode's latent cache: problem.json's "v_from_k" lets a kernel that reads V from K run on the
 * files (its mutant fails); a v.npy that is not k.npy's first d_v channels is refused, exit 2, naming
 * the element. */
Test(harness_check_paged, a_v_from_k_directory_is_checked_and_a_v_apart_from_k_refused)
{
    char *gen[] = {"gen",
                   "--case",
                   "v1 seed=6 b=2 hq=16 hkv=1 nq=2 nk=70 d=576 dtype=bf16 mask=causal-br seqlens-k=70,9 layout=bshd "
                   "dist=normal(0,1) scale=auto dv=512 v=k kv=paged(16)",
                   "--out",
                   (char *)path_of("case"),
                   NULL};
    cr_assert_eq(ac_cmd_gen(5, gen), AC_OK);
    cr_assert_eq(check_kernel("cpu-flash-mla"), AC_OK);
    cr_assert_eq(check_kernel("cpu-flash-mla-mutant-rope-first"), AC_FAIL_ACCURACY);
    ac_tensor v;
    ac_err err = {{0}};
    cr_assert_eq(ac_npy_read(path_of("case/v.npy"), "v", &v, &err), AC_OK, "%s", err.msg);
    int32_t first_page;
    ac_tensor bt;
    cr_assert_eq(ac_npy_read(path_of("case/block_table.npy"), "block_table", &bt, &err), AC_OK, "%s", err.msg);
    memcpy(&first_page, bt.data, sizeof first_page);
    ac_tensor_free(&bt);
    uint16_t *bits = v.data; /* sequence 0, key 3, channel 7 lives in its first page, row 3 */
    bits[((size_t)first_page * 16 + 3) * 512 + 7] ^= 0x40;
    cr_assert_eq(ac_npy_write(path_of("case/v.npy"), &v, &err), AC_OK, "%s", err.msg);
    ac_tensor_free(&v);
    cr_assert_eq(check_kernel("cpu-flash"), AC_ERR_INPUT, "problem.json says v_from_k; v.npy no longer is");
    ac_case_options co;
    bool found = false;
    cr_assert_eq(ac_case_dir_options(path_of("case"), &co, &found, &err), AC_OK, "%s", err.msg);
    cr_assert(found && co.v_from_k);
    ac_cli o; /* the same files through the options, for the message */
    memset(&o, 0, sizeof o);
    o.path = path_of("case");
    o.dtype = "bf16", o.layout = "bshd", o.mask = "causal-br", o.seqlens_k = "70,9";
    o.block_table = co.block_table_file, o.page_size = 16, o.v_from_k = true;
    tensor_files f;
    ac_inputs in;
    cr_assert_eq(ac_check_read_files(o.path, &f, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(ac_check_make_inputs(&o, &f, &in, &err), AC_ERR_INPUT);
    cr_assert(strstr(err.msg, "v is not k's first 512 channels: b=0 h=0 key=3 channel 7 differs"), "%s", err.msg);
    ac_check_files_free(&f);
    ac_inputs_free(&in);
}
