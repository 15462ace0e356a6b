/* ref/cuda/test_plan.c — the GPU reference's memory plan, and the tier's
 * answer in a build without CUDA (suite ref_gpu_plan). */
#include <criterion/criterion.h>
#include <string.h>

#include "../ref_gpu.h"
#include "attncheck_config.h"

static ac_problem causal(int heads, int n)
{
    ac_problem p = ac_problem_dense(1, heads, heads, n, n, 128);
    p.windowed = true;
    p.window_right = 0;
    p.align = AC_ALIGN_BOTTOM_RIGHT;
    return p;
}

static ref_gpu_plan_t plan_of(const ac_problem *p, size_t limit, int rows)
{
    ref_gpu_plan_t plan;
    ac_err err = {{0}};
    cr_assert_eq(ref_gpu_plan(p, AC_BF16, true, true, true, limit, rows, &plan, &err), AC_OK, "%s", err.msg);
    return plan;
}

#define GIB ((size_t)1 << 30)

Test(ref_gpu_plan, issue_shapes_fit_an_h100)
{
    /* The issue's long shapes, with the backward, scales and naive: under the
     * ~78 GiB of an H100 with room to spare. */
    ac_problem long_seq = causal(8, 131072), wide = causal(16, 32768);
    ref_gpu_plan_t a = plan_of(&long_seq, 0, 0), b = plan_of(&wide, 0, 0);
    cr_assert_lt(a.total_bytes, 40 * GIB, "N = 131072: %zu bytes", a.total_bytes);
    cr_assert_lt(b.total_bytes, 40 * GIB, "N = 32768: %zu bytes", b.total_bytes);
    /* S of a block stays within 2^27 entries; causal blocks within a sixteenth of the rows */
    cr_assert_eq(a.block_rows, 1024);
    cr_assert_eq(a.block_cols, 131072);
    cr_assert_eq(b.block_rows, 2048);
    ac_problem short_seq = causal(16, 8192), open = ac_problem_dense(1, 16, 16, 8192, 8192, 128);
    cr_assert_eq(plan_of(&short_seq, 0, 0).block_rows, 512);
    cr_assert_eq(plan_of(&open, 0, 0).block_rows, 8192, "no mask: one block per head");
}

static size_t group_bytes_for(int heads_q, int heads_kv, int batch)
{
    ac_problem p = causal(heads_q, 4096);
    p.heads_kv = heads_kv;
    p.batch = batch;
    return plan_of(&p, 0, 0).group_bytes;
}

Test(ref_gpu_plan, group_memory_grows_with_the_group_not_the_batch)
{
    cr_assert_eq(group_bytes_for(8, 8, 32), group_bytes_for(8, 8, 1), "per (batch, KV head) group");
    cr_assert_eq(group_bytes_for(8, 8, 1), group_bytes_for(1, 1, 1), "MHA: one query head per group");
    size_t g2 = group_bytes_for(8, 4, 1), g4 = group_bytes_for(8, 2, 1), g8 = group_bytes_for(8, 1, 1);
    cr_assert_eq(g8 - g4, 2 * (g4 - g2), "linear in the group's query heads");
    cr_assert_gt(g2, group_bytes_for(8, 8, 1));
}

Test(ref_gpu_plan, a_limit_shrinks_the_block_and_is_kept)
{
    ac_problem p = causal(4, 16384);
    ref_gpu_plan_t free_plan = plan_of(&p, 0, 0);
    size_t limit = free_plan.group_bytes + free_plan.block_bytes / 5;
    ref_gpu_plan_t tight = plan_of(&p, limit, 0);
    cr_assert_lt(tight.block_rows, free_plan.block_rows);
    cr_assert_geq(tight.block_rows, 1);
    cr_assert_leq(tight.total_bytes, limit);
    cr_assert_eq(tight.group_bytes, free_plan.group_bytes);
}

Test(ref_gpu_plan, forced_rows_are_used_and_capped_at_the_length)
{
    ac_problem p = ac_problem_dense(2, 2, 1, 37, 50, 16);
    cr_assert_eq(plan_of(&p, 0, 5).block_rows, 5);
    cr_assert_eq(plan_of(&p, 0, 1000).block_rows, 37);
}

Test(ref_gpu_plan, a_finite_window_bounds_the_block_width)
{
    ac_problem p = ac_problem_dense(1, 1, 1, 4096, 4096, 64);
    p.windowed = true;
    p.window_left = 100;
    p.window_right = 20;
    ref_gpu_plan_t plan = plan_of(&p, 0, 64);
    cr_assert_eq(plan.block_cols, 64 + 100 + 20);
}

Test(ref_gpu_plan, too_little_memory_is_an_environment_error_naming_the_need)
{
    ac_problem p = causal(8, 131072);
    ref_gpu_plan_t plan;
    ac_err err = {{0}};
    cr_assert_eq(ref_gpu_plan(&p, AC_BF16, true, true, true, (size_t)100 << 20, 0, &plan, &err), AC_ERR_ENV);
    cr_assert(strstr(err.msg, "device memory") != NULL, "%s", err.msg);
    cr_assert(strstr(err.msg, "nq=131072") != NULL, "%s", err.msg);
}

Test(ref_gpu_plan, a_forward_needs_less_than_a_backward)
{
    ac_problem p = causal(2, 2048);
    ref_gpu_plan_t fwd, bwd;
    ac_err err = {{0}};
    cr_assert_eq(ref_gpu_plan(&p, AC_F16, false, false, false, 0, 256, &fwd, &err), AC_OK);
    cr_assert_eq(ref_gpu_plan(&p, AC_F16, true, true, true, 0, 256, &bwd, &err), AC_OK);
    cr_assert_lt(fwd.group_bytes, bwd.group_bytes);
    cr_assert_lt(fwd.block_bytes, bwd.block_bytes);
    cr_assert_str_eq(ref_gpu_stage_name(REF_GPU_STAGE_NAIVE_BWD), "naive-bwd");
}

#if !ATTNCHECK_HAVE_CUDA
Test(ref_gpu_plan, without_cuda_the_tier_is_an_environment_error)
{
    ac_err err = {{0}};
    cr_assert_eq(ref_gpu_available(&err), AC_ERR_ENV);
    cr_assert(strstr(err.msg, "built without CUDA") != NULL, "%s", err.msg);
    ac_problem p = ac_problem_dense(1, 1, 1, 4, 4, 8);
    uint16_t bits[32] = {0};
    double o[32], lse[4];
    ref_gpu_outputs out = {.o = o, .lse = lse};
    ref_gpu_stats stats;
    memset(&err, 0, sizeof err);
    cr_assert_eq(ref_gpu_reference(&p, AC_BF16, bits, bits, bits, NULL, NULL, &out, &stats, &err), AC_ERR_ENV);
    cr_assert(strstr(err.msg, "built without CUDA") != NULL, "%s", err.msg);
    cr_assert_eq(stats.total_seconds, 0.0);
}
#endif
