/* harness/campaign/test_shrink.c — the shrinker on synthetic failure predicates (no
 * kernel runs: the predicate is the failure), the failure corpus writer and
 * the corpus reader. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness/harness.h"

/* A big case with every knob turned away from the default. */
static ac_case big_case(void)
{
    ac_case c = ac_case_default();
    c.seed = 9;
    c.batch = 4;
    c.heads_q = 16;
    c.heads_kv = 4;
    c.seqlen_q = 300;
    c.seqlen_k = 700;
    c.head_dim = 96;
    c.dtype = AC_BF16;
    c.layout = AC_LAYOUT_BSHD;
    ac_case_set_mask(&c, AC_MASK_CAUSAL_BR);
    c.dist = AC_DIST_OUTLIERS;
    c.dist_a = 2;
    c.dist_b = 0.01;
    c.scale_auto = false;
    c.scale = 0.5;
    cr_assert_eq(ac_case_validate(&c, NULL), AC_OK, "the starting case must be valid");
    return c;
}

typedef struct {
    int calls;
} counter;

/* "fails iff nk >= 37 and the mask is causal bottom-right" */
static bool nk37_causal_br(const ac_case *c, void *ctx)
{
    ((counter *)ctx)->calls++;
    return c->seqlen_k >= 37 && c->mask == AC_MASK_CAUSAL_BR;
}

Test(harness_shrink, reaches_exact_minimum_of_monotone_predicate)
{
    ac_case start = big_case(), min;
    counter n = {0};
    int calls = ac_shrink(&start, nk37_causal_br, &n, 1000, &min);
    ac_case def = ac_case_default();
    cr_assert_eq(calls, n.calls, "returns the number of predicate calls");
    cr_assert_eq(min.seqlen_k, 37, "nk shrinks to the threshold exactly, got %d", min.seqlen_k);
    cr_assert_eq(min.seqlen_q, 1);
    cr_assert_eq(min.batch, 1);
    cr_assert_eq(min.heads_q, 1);
    cr_assert_eq(min.heads_kv, 1);
    cr_assert_eq(min.head_dim, 1);
    cr_assert_eq(min.mask, AC_MASK_CAUSAL_BR, "the alignment is kept: the failure needs it");
    cr_assert_eq(min.dist, def.dist);
    cr_assert_eq(min.dist_a, def.dist_a);
    cr_assert_eq(min.dist_b, def.dist_b);
    cr_assert_eq(min.layout, def.layout);
    cr_assert(min.scale_auto);
    cr_assert_eq(min.seed, 1);
    cr_assert_eq(min.dtype, AC_BF16, "the dtype is never changed");
    cr_assert_lt(calls, 250, "greedy shrinking stays cheap: %d calls", calls);
}

/* The GQA head-mapping bug needs hkv >= 2 and a real group. */
static bool needs_gqa_two_kv(const ac_case *c, void *ctx)
{
    (void)ctx;
    return c->heads_kv >= 2 && c->heads_q > c->heads_kv;
}

Test(harness_shrink, heads_keep_gqa_divisibility)
{
    ac_case start = big_case(), min;
    ac_shrink(&start, needs_gqa_two_kv, NULL, 1000, &min);
    cr_assert_eq(min.heads_kv, 2, "got hkv=%d", min.heads_kv);
    cr_assert_eq(min.heads_q, 4, "got hq=%d", min.heads_q);
}

static bool any_mask(const ac_case *c, void *ctx)
{
    (void)ctx;
    return c->mask != AC_MASK_NONE;
}

Test(harness_shrink, window_simplifies_to_causal_with_default_alignment)
{
    ac_case start = big_case(), min;
    start.mask = AC_MASK_WINDOW_BR;
    start.window_left = 5;
    start.window_right = 3;
    cr_assert_eq(ac_case_validate(&start, NULL), AC_OK);
    ac_shrink(&start, any_mask, NULL, 1000, &min);
    cr_assert_eq(min.mask, AC_MASK_CAUSAL_TL, "window-br -> causal-br -> causal-tl: an alignment the failure "
                 "does not need is dropped");
}

static bool zero_length_key_sequence(const ac_case *c, void *ctx)
{
    (void)ctx;
    for (int b = 0; b < c->n_seqlens_k; b++)
        if (c->seqlens_k[b] == 0)
            return true;
    return false;
}

Test(harness_shrink, batch_keeps_the_sequence_that_fails)
{
    ac_case start = big_case(), min;
    start.batch = 3;
    start.mask = AC_MASK_NONE;
    start.n_seqlens_q = 3;
    start.n_seqlens_k = 3;
    int lq[3] = {100, 300, 7}, lk[3] = {500, 0, 700};
    memcpy(start.seqlens_q, lq, sizeof lq);
    memcpy(start.seqlens_k, lk, sizeof lk);
    cr_assert_eq(ac_case_validate(&start, NULL), AC_OK);
    ac_shrink(&start, zero_length_key_sequence, NULL, 1000, &min);
    cr_assert_eq(min.batch, 1);
    cr_assert_eq(min.n_seqlens_k, 1);
    cr_assert_eq(min.seqlens_k[0], 0, "the zero-length sequence is the one kept");
    cr_assert_eq(min.n_seqlens_q, 0, "query lengths the failure does not need are dropped");
    cr_assert_eq(min.seqlen_k, 1);
}

static bool always(const ac_case *c, void *ctx)
{
    (void)c;
    ((counter *)ctx)->calls++;
    return true;
}

Test(harness_shrink, stops_after_max_steps)
{
    ac_case start = big_case(), min;
    counter n = {0};
    int calls = ac_shrink(&start, always, &n, 5, &min);
    cr_assert_eq(calls, 5);
    cr_assert_eq(n.calls, 5);
}

static bool never(const ac_case *c, void *ctx)
{
    (void)c;
    (void)ctx;
    return false;
}

Test(harness_shrink, nothing_kept_returns_the_original)
{
    ac_case start = big_case(), min;
    ac_shrink(&start, never, NULL, 1000, &min);
    char a[AC_CASE_LINE_MAX], b[AC_CASE_LINE_MAX];
    ac_case_format(&start, a, sizeof a);
    ac_case_format(&min, b, sizeof b);
    cr_assert_str_eq(a, b);
}

/* ---- the failure corpus ---------------------------------------------------- */

static char *make_tmpdir(void)
{
    static char dir[64];
    snprintf(dir, sizeof dir, "/tmp/ac-shrink-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    return dir;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    static char buf[1 << 17];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.' || strncmp(e->d_name, ".tmp-", 5) == 0;
    closedir(d);
    return n;
}

Test(harness_shrink, save_failure_appends_atomically)
{
    char *dir = make_tmpdir();
    char path[256];
    snprintf(path, sizeof path, "%s/cpu-flash.cases", dir);
    FILE *f = fopen(path, "w");
    fputs("# hand-written\nv1 seed=1", f); /* no final newline: the writer adds one */
    fclose(f);
    ac_err err;
    cr_assert_eq(ac_save_failure(dir, "cpu-flash", "O:scaled 12 > 4\nat row 3", "LINE-A", &err), AC_OK, "%s",
                 err.msg);
    cr_assert_eq(ac_save_failure(dir, "cpu-flash", "dK:scaled", "LINE-B", &err), AC_OK, "%s", err.msg);
    char *text = slurp(path);
    cr_assert(strncmp(text, "# hand-written\nv1 seed=1\n# 20", 29) == 0, "existing lines kept, got:\n%s", text);
    cr_assert_not_null(strstr(text, " cpu-flash: O:scaled 12 > 4 at row 3\nLINE-A\n"), "got:\n%s", text);
    char *b = strstr(text, "LINE-B\n");
    cr_assert(b && strstr(text, "LINE-A") < b, "appended in order");
    cr_assert_eq(count_entries(dir), 1, "only the corpus file remains (no temp files)");
    struct stat sb;
    stat(path, &sb);
    cr_assert_eq(sb.st_mode & 0777, 0644);
    unlink(path);
    rmdir(dir);
}

Test(harness_shrink, save_failure_creates_the_directory_and_sanitises_names)
{
    char *dir = make_tmpdir();
    char sub[256], path[300];
    snprintf(sub, sizeof sub, "%s/new", dir);
    ac_err err;
    cr_assert_eq(ac_save_failure(sub, "../evil/k", "why", "LINE", &err), AC_OK, "%s", err.msg);
    snprintf(path, sizeof path, "%s/_._evil_k.cases", sub);
    cr_assert_str_eq(strstr(slurp(path), "LINE"), "LINE\n");
    unlink(path);
    rmdir(sub);
    rmdir(dir);
}

/* ---- reading a corpus ------------------------------------------------------- */

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

Test(harness_shrink, corpus_reads_dir_in_sorted_order_skipping_comments)
{
    char *dir = make_tmpdir();
    char a[256], b[256], other[256];
    snprintf(a, sizeof a, "%s/a.cases", dir);
    snprintf(b, sizeof b, "%s/b.cases", dir);
    snprintf(other, sizeof other, "%s/notes.txt", dir);
    ac_case c1 = ac_case_default(), c2 = ac_case_default();
    c1.seqlen_q = 3;
    c2.seqlen_k = 5;
    char l1[AC_CASE_LINE_MAX], l2[AC_CASE_LINE_MAX], text[3000];
    ac_case_format(&c1, l1, sizeof l1);
    ac_case_format(&c2, l2, sizeof l2);
    snprintf(text, sizeof text, "# why c2\n%s\n", l2);
    write_file(b, text);
    snprintf(text, sizeof text, "\n# why c1\n  %s\n", l1);
    write_file(a, text);
    write_file(other, "garbage\n");
    ac_corpus l = {0};
    ac_err err;
    cr_assert_eq(ac_corpus_load(&l, dir, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(l.n, 2);
    cr_assert_eq(l.cases[0].seqlen_q, 3, "a.cases first");
    cr_assert_eq(l.cases[1].seqlen_k, 5);
    char want[300];
    snprintf(want, sizeof want, "%s:3", a);
    cr_assert_str_eq(l.where[0], want);
    ac_corpus_free(&l);
    unlink(a), unlink(b), unlink(other);
    rmdir(dir);
}

Test(harness_shrink, corpus_names_file_and_line_of_a_bad_line)
{
    char *dir = make_tmpdir();
    char a[256];
    snprintf(a, sizeof a, "%s/a.cases", dir);
    char l1[AC_CASE_LINE_MAX], text[3000];
    ac_case c = ac_case_default();
    ac_case_format(&c, l1, sizeof l1);
    snprintf(text, sizeof text, "# ok\n%s\nv1 seed=1 b=zz\n", l1);
    write_file(a, text);
    ac_corpus l = {0};
    ac_err err;
    cr_assert_eq(ac_corpus_load(&l, a, &err), AC_ERR_INPUT);
    char want[300];
    snprintf(want, sizeof want, "%s:3: ", a);
    cr_assert(strncmp(err.msg, want, strlen(want)) == 0, "got: %s", err.msg);
    ac_corpus_free(&l);
    unlink(a);
    rmdir(dir);
}

/* ---- the runner and the shrinker on a real (double) kernel ------------------
 * A kernel double defined here: the fp64 reference rounded to the dtype, with a
 * planted bug chosen by ctx.  Lets the runner be tested whatever kernels exist. */

typedef enum { DBL_CORRECT, DBL_SKIP_LAST_ROW, DBL_DEVICE_FAULT, DBL_SCALE_BIAS } dbl_mode;

static int dbl_forward(const ac_kernel *self, const ac_problem *p, ac_dtype t, const ac_fwd_args *a, ac_err *err)
{
    dbl_mode mode = *(const dbl_mode *)self->ctx;
    if (mode == DBL_DEVICE_FAULT)
        return ac_fail(err, AC_ERR_ENV, "double: simulated device fault");
    size_t nq = ac_q_elems(p), nkv = ac_kv_elems(p), nl = ac_lse_elems(p);
    double *q = malloc(nq * 8), *k = malloc(nkv * 8), *v = malloc(nkv * 8), *o = malloc(nq * 8), *l = malloc(nl * 8);
    ac_load(t, a->q, nq, q);
    ac_load(t, a->k, nkv, k);
    ac_load(t, a->v, nkv, v);
    int st = ref_forward_fp64(p, q, k, v, o, l, err);
    if (mode == DBL_SCALE_BIAS)
        for (size_t i = 0; i < nq; i++)
            o[i] *= 1.0 + 1.0 / 64; /* a bias many ulps wide everywhere */
    /* the last query row of every (b, h) is left unwritten in DBL_SKIP_LAST_ROW */
    for (int b = 0; b < p->batch; b++)
        for (int h = 0; h < p->heads_q; h++)
            for (int i = 0; i < p->seqlen_q; i++) {
                if (mode == DBL_SKIP_LAST_ROW && i == p->seqlen_q - 1)
                    continue;
                for (int c = 0; c < p->head_dim; c++) {
                    size_t at = ac_q_index(p, b, h, i, c);
                    ac_store(t, &o[at], 1, (char *)a->o + at * ac_dtype_size(t));
                }
                size_t li = ac_lse_index(p, b, h, i);
                a->lse[li] = (float)l[li];
            }
    free(q), free(k), free(v), free(o), free(l);
    return st;
}

static const dbl_mode modes[] = {DBL_CORRECT, DBL_SKIP_LAST_ROW, DBL_DEVICE_FAULT, DBL_SCALE_BIAS};

static ac_kernel double_kernel(dbl_mode mode)
{
    ac_kernel k = {.name = "double", .description = "fp64 reference rounded, with a planted bug"};
    k.caps.dtypes = (1u << AC_F32) | (1u << AC_F16) | (1u << AC_BF16);
    k.caps.max_head_dim = AC_MAX_HEAD_DIM;
    k.caps.masks = AC_MASKCAP_ALL;
    k.caps.layouts = 3;
    k.caps.gqa = k.caps.varlen = true;
    k.device = AC_DEV_CPU;
    k.memory = AC_MEM_HOST;
    k.forward = dbl_forward;
    k.ctx = &modes[mode];
    return k;
}

static ac_budgets budgets(void)
{
    ac_budgets b;
    ac_err err;
    cr_assert_eq(ac_budgets_load(ac_budgets_default_path(), &b, &err), AC_OK, "%s", err.msg);
    return b;
}

static ac_case small_case(void)
{
    ac_case c = ac_case_default();
    c.seed = 5;
    c.batch = 2;
    c.heads_q = 4;
    c.heads_kv = 2;
    c.seqlen_q = 20;
    c.seqlen_k = 33;
    return c;
}

Test(harness_run, correct_kernel_passes_with_every_forward_output_compared)
{
    ac_kernel k = double_kernel(DBL_CORRECT);
    ac_budgets b = budgets();
    ac_case c = small_case();
    ac_run_opts o = {.backward = true, .cert_rows = 1};
    ac_result r;
    ac_err err;
    cr_assert_eq(ac_run_case(&k, &c, &b, &o, &r, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(r.verdict, AC_VERDICT_PASS, "%s", r.why);
    cr_assert(r.m[AC_OUT_O].present && r.m[AC_OUT_LSE].present);
    cr_assert(!r.m[AC_OUT_DQ].present, "no backward on a forward-only kernel");
    cr_assert_eq(r.m[AC_OUT_O].n_compared, (size_t)2 * 4 * 20 * 16);
    cr_assert_eq(r.cert.rows_checked, 1);
    char line[AC_CASE_LINE_MAX];
    ac_case_format(&c, line, sizeof line);
    cr_assert_str_eq(r.line, line);
    cr_assert_gt(r.seconds, 0);
}

Test(harness_run, unwritten_rows_are_caught_through_the_poison)
{
    ac_kernel k = double_kernel(DBL_SKIP_LAST_ROW);
    ac_budgets b = budgets();
    ac_case c = small_case();
    ac_run_opts o = {.backward = false};
    ac_result r;
    ac_err err;
    cr_assert_eq(ac_run_case(&k, &c, &b, &o, &r, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(r.verdict, AC_VERDICT_FAIL);
    /* one row of d elements per (b, h) */
    cr_assert_eq(r.m[AC_OUT_O].n_unwritten, (size_t)2 * 4 * 16);
    cr_assert_eq(r.m[AC_OUT_O].first_special.row, 19);
    cr_assert_str_eq(r.kind, "O:unwritten");
}

Test(harness_run, device_fault_is_an_environment_error_not_a_verdict)
{
    ac_kernel k = double_kernel(DBL_DEVICE_FAULT);
    ac_budgets b = budgets();
    ac_case c = small_case();
    ac_run_opts o = {.backward = false};
    ac_result r;
    ac_err err;
    cr_assert_eq(ac_run_case(&k, &c, &b, &o, &r, &err), AC_ERR_ENV);
    cr_assert_eq(r.verdict, AC_VERDICT_ERROR);
    cr_assert_eq(r.status, AC_ERR_ENV);
    cr_assert_not_null(strstr(r.why, "simulated device fault"));
}

Test(harness_run, case_outside_caps_is_unsupported_not_run)
{
    ac_kernel k = double_kernel(DBL_CORRECT);
    k.caps.dtypes = 1u << AC_F32;
    ac_budgets b = budgets();
    ac_case c = small_case(); /* f16 */
    ac_run_opts o = {.backward = false};
    ac_result r;
    ac_err err;
    cr_assert_eq(ac_run_case(&k, &c, &b, &o, &r, &err), AC_ERR_INPUT);
    cr_assert(r.unsupported);
    cr_assert_eq(r.verdict, AC_VERDICT_ERROR);
}

Test(harness_run, a_real_failure_shrinks_to_a_small_case_of_the_same_kind)
{
    ac_kernel k = double_kernel(DBL_SCALE_BIAS);
    ac_budgets b = budgets();
    ac_case c = small_case();
    ac_case_set_mask(&c, AC_MASK_CAUSAL_BR);
    ac_run_opts o = {.backward = false};
    ac_result r;
    ac_err err;
    cr_assert_eq(ac_run_case(&k, &c, &b, &o, &r, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(r.verdict, AC_VERDICT_FAIL);
    ac_case min;
    ac_shrink_failure(&k, &b, &o, &c, r.kind, 300, &min);
    cr_assert_eq(min.batch, 1);
    cr_assert_eq(min.heads_q, 1);
    cr_assert_eq(min.mask, AC_MASK_NONE, "a bias everywhere needs no mask");
    cr_assert_leq(min.seqlen_q * min.seqlen_k, 16, "got nq=%d nk=%d", min.seqlen_q, min.seqlen_k);
    ac_result again;
    cr_assert_eq(ac_run_case(&k, &min, &b, &o, &again, &err), AC_OK);
    cr_assert_str_eq(again.kind, r.kind, "the minimal case fails the same way");
}

Test(harness_run, campaign_json_is_identical_for_the_same_seed)
{
    ac_kernel k = double_kernel(DBL_CORRECT);
    ac_budgets b = budgets();
    char *dir = make_tmpdir();
    char pa[128], pb[128];
    snprintf(pa, sizeof pa, "%s/a.json", dir);
    snprintf(pb, sizeof pb, "%s/b.json", dir);
    for (int i = 0; i < 2; i++) {
        ac_report *rep;
        ac_err err;
        cr_assert_eq(ac_report_open(&rep, &err), AC_OK);
        cr_assert_eq(ac_report_want(rep, "--json", i ? pb : pa, &err), AC_OK);
        ac_campaign_opts o = {.seed = 11, .max_cases = 5, .max_seqlen = 24, .run = {.cert_rows = 1}};
        ac_summary s;
        cr_assert_eq(ac_campaign(&k, &b, &o, rep, &s, &err), AC_OK, "%s", err.msg);
        cr_assert_eq(s.cases, 5);
        cr_assert_eq(s.passed, 5);
        cr_assert_eq(ac_report_close(rep, &err), AC_OK);
    }
    char *a = strdup(slurp(pa)), *bb = strdup(slurp(pb));
    cr_assert_gt(strlen(a), 100);
    cr_assert_str_eq(a, bb);
    free(a), free(bb);
    unlink(pa), unlink(pb);
    rmdir(dir);
}
