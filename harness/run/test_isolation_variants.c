/* harness/run/test_isolation_variants.c — the variants through the kernel
 * worker (suite harness_isolation_variants): their arrays reach the kernel in
 * the worker and are checked unchanged after the call, their outputs (the
 * dropout keep mask, dSink, dBias) sit between guard zones, and a variant case
 * gives byte-identical metrics isolated and in-process.  The hostile ABI 2
 * plugins of plugins/hostile_plugin.c each claim the variant they abuse. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "harness/harness.h"
#include "harness/run/test_worker_support.h"
#include "plugins/plugin_paths.h"

TestSuite(harness_isolation_variants, .init = use_attncheck_as_worker);

static const ac_run_opts isolated = {.backward = true, .isolate = true, .kernel_timeout_s = 5.0};

static ac_result run(const ac_kernel *k, const char *text, const ac_run_opts *o)
{
    ac_budgets b;
    ac_case c;
    ac_result r;
    ac_err err = {{0}};
    cr_assert_eq(ac_budgets_load(ac_budgets_default_path(), &b, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(ac_case_parse(text, &c, &err), AC_OK, "%s: %s", text, err.msg);
    cr_assert_eq(ac_run_case(k, &c, &b, o, &r, &err), AC_OK, "%s: %s", k->name, err.msg);
    return r;
}

/* ---- hostile plugins abusing a variant ------------------------------------------------ */

typedef struct {
    const char *path, *line, *kind, *says;
} hostile;

#define PLAIN "v1 seed=2 b=2 hq=2 hkv=2 nq=24 nk=80 d=16 dtype=f32 mask=none layout=bhsd"

static const hostile hostiles[] = {
    {AC_HOSTILE_PLUGIN_DSINK_PAST, PLAIN " sinks=normal(0,1)", "kernel:out-of-bounds-write",
     "backward wrote past the end of dSink: elements end+0 to end+15 (dSink holds 2 f32 elements"},
    {AC_HOSTILE_PLUGIN_DBIAS_PAST, PLAIN " bias=normal(0,1):1h:f32", "kernel:out-of-bounds-write",
     "backward wrote past the end of dBias: elements end+0 to end+15 (dBias holds 3840 f32 elements"},
    {AC_HOSTILE_PLUGIN_DROPOUT_PAST, PLAIN " dropout=0.5", "kernel:out-of-bounds-write",
     "forward wrote past the end of dropout_mask: elements end+0 to end+7 (dropout_mask holds 960 byte elements"},
    {AC_HOSTILE_PLUGIN_MODIFY_SINKS, PLAIN " sinks=normal(0,1)", "kernel:input-modified",
     "forward changed 1 element of sinks, the first at element 0 (h=0)"},
    {AC_HOSTILE_PLUGIN_MODIFY_BIAS, PLAIN " bias=normal(0,1):bh:f32", "kernel:input-modified",
     "forward changed 1 element of bias, the first at element 0 (b=0 h=0 i=0 j=0 of the broadcast shape)"},
};

/* hostiles[i]: FAIL of its kind naming the buffer and the elements, isolated and in this process alike. */
static void fails_its_own_way(int i)
{
    const hostile *h = &hostiles[i];
    const ac_kernel *k = NULL;
    ac_err err = {{0}};
    cr_assert_eq(ac_plugin_load(h->path, &k, &err), AC_OK, "%s", err.msg);
    ac_result r = run(k, h->line, &isolated);
    cr_assert_eq(r.verdict, AC_VERDICT_FAIL, "%s: %s", k->name, r.why);
    cr_assert_eq(r.status, AC_OK, "a verdict, not an error");
    cr_assert_str_eq(r.kind, h->kind, "%s: %s", k->name, r.why);
    cr_assert(strstr(r.why, h->says) != NULL, "'%s' not in: %s", h->says, r.why);
    cr_assert(strstr(r.why, h->path) != NULL, "the plugin's file is named: %s", r.why);
    ac_run_opts here = isolated;
    here.isolate = false;
    ac_result again = run(k, h->line, &here);
    cr_assert_str_eq(again.kind, r.kind);
    cr_assert_str_eq(again.why, r.why, "the same message in this process");
}

Test(harness_isolation_variants, 16_floats_past_dsink_are_an_out_of_bounds_write) { fails_its_own_way(0); }
Test(harness_isolation_variants, 16_entries_past_dbias_are_an_out_of_bounds_write) { fails_its_own_way(1); }
Test(harness_isolation_variants, 8_bytes_past_the_dropout_mask_are_an_out_of_bounds_write) { fails_its_own_way(2); }
Test(harness_isolation_variants, a_changed_sink_logit_is_input_modified) { fails_its_own_way(3); }
Test(harness_isolation_variants, a_changed_bias_entry_is_input_modified) { fails_its_own_way(4); }

/* ---- a correct kernel: the same metrics wherever it runs ------------------------------ */

Test(harness_isolation_variants, variant_cases_give_identical_metrics_isolated_and_in_process)
{
    const ac_kernel *k = ac_kernel_find("cpu-flash");
    static const char *const lines[] = {
        /* THD with d_v, softcap, sinks, (B, Hq) slopes, an f32 (B, Hq) bias and dropout at once */
        ("v1 seed=5 b=3 hq=4 hkv=2 nq=20 nk=33 d=16 dv=8 dtype=f16 mask=causal-br seqlens-q=20,3,11 "
         "seqlens-k=33,0,17 layout=thd softcap=5 sinks=normal(0,1) alibi=paper:bh bias=normal(0,1):bh:f32 "
         "dropout=0.1"),
        /* sink tokens past a window, a per-head dense mask, a bf16 bias broadcast over the batch */
        ("v1 seed=6 b=2 hq=2 hkv=1 nq=40 nk=70 d=8 dtype=bf16 mask=window-br(9,2) sinktokens=4 layout=bshd "
         "bias=normal(-2,1):1h:inf(0.2)"),
        "v1 seed=7 b=2 hq=4 hkv=4 nq=31 nk=31 d=24 dtype=f32 mask=dense(0.6) maskdims=bh sinks=over(4) dv=40",
    };
    ac_run_opts here = isolated;
    here.isolate = false;
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        ac_result a = run(k, lines[i], &isolated), b = run(k, lines[i], &here);
        cr_assert_eq(a.verdict, AC_VERDICT_PASS, "%s: %s", lines[i], a.why);
        cr_assert_eq(b.verdict, AC_VERDICT_PASS, "%s: %s", lines[i], b.why);
        cr_assert(a.has_backward && b.has_backward);
        for (int o = 0; o < AC_OUT_COUNT; o++) {
            cr_assert_eq(a.m[o].present, b.m[o].present, "%s: %s", lines[i], ac_output_name((ac_output)o));
            cr_assert_eq(memcmp(&a.m[o], &b.m[o], sizeof a.m[o]), 0, "%s: %s differs", lines[i],
                         ac_output_name((ac_output)o));
        }
    }
}

/* The parameter gradients were compared at all: present, every element measured. */
Test(harness_isolation_variants, dsink_and_dbias_come_back_from_the_worker)
{
    const ac_kernel *k = ac_kernel_find("cpu-flash");
    ac_result r =
        run(k, "v1 seed=8 b=2 hq=3 hkv=1 nq=17 nk=19 d=8 dtype=f16 sinks=normal(0,1) bias=normal(0,1):b1", &isolated);
    cr_assert_eq(r.verdict, AC_VERDICT_PASS, "%s", r.why);
    cr_assert(r.m[AC_OUT_DSINK].present && r.m[AC_OUT_DBIAS].present);
    cr_assert_eq(r.m[AC_OUT_DSINK].n_compared, 3);
    cr_assert_eq(r.m[AC_OUT_DSINK].n_measured, 3, "every dSink written (none unwritten, none special)");
    cr_assert_eq(r.m[AC_OUT_DBIAS].n_compared, (size_t)2 * 17 * 19);
    cr_assert_eq(r.m[AC_OUT_DBIAS].n_unwritten, 0);
}
