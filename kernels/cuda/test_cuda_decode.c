/* kernels/cuda/test_cuda_decode.c — attncheck-test-cuda's decode cases (issue
 * 16): cuda-decode on fresh random inputs in a paged KV cache built as the
 * harness builds one (ref/paged.c's layout): a shuffled block table, odd
 * sequences sharing a prefix of whole pages with sequence 0, spare pages, and
 * every slot no sequence uses (the tail of a last page, the spare pages, the
 * table's entries past a sequence's last page name a spare page) NaN; key
 * lengths 0, 1 and random side by side; split counts from auto to more splits
 * than key tiles.  Against the fp64 reference of the contiguous twin
 * (ac_paged_gather) with the harness's error scale (scaled O <= 4, LSE within
 * 1e-3, no NaN or unwritten element), poisoned outputs.  The four mutants
 * must fail the same gate.  cuda-decode-fp8 takes the same cases on e4m3/e5m2
 * codes of normal(0, 64) values times factors in [2^-7, 2^-5) per tensor or
 * (batch, kv head) (test_cuda_fp8.c's regime; the reference reads code *
 * factor; with factors per head no page is shared, as the harness draws them),
 * its mutant (V's factor twice) must fail, and descale=block(N) is refused.
 * cuda-decode-mla takes MLA decode's shape (d 576 with d_v 512, or 576; V the
 * first d_v channels of K's rows, bits and widenings alike: v=k) on the same
 * caches; its two mutants (V from the rows' last channels, the rotary channels
 * left out of the scores) must fail. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_cuda_support.h"

typedef struct {
    const char *kernel;
    ac_dtype t;
    int b, hq, hkv, nq, nk, d;
    ac_layout layout;
    int mask; /* test_cuda_main.c's mask_kind: 0 none, 1 causal-tl, 2 causal-br, 3 window-br, 4 dense */
    int page; /* P keys a page, 0: contiguous K, V */
    int splits; /* num_splits, 0: auto */
    bool expect_fail;
    ac_dtype out; /* fp8 t: O's dtype */
    int descale; /* fp8 t: AC_DESCALE_TENSOR (0) or AC_DESCALE_HEAD */
    int dv; /* d_v (0: d); a kernel reading V from K (cuda-decode-mla) gets V = K's first d_v channels (v=k) */
} dec_case;

/* The case's inputs: host bits, their widenings, the table and the lengths. */
typedef struct {
    ac_problem p, twin; /* the kernel's (paged or not) and the reference's (contiguous) */
    int *lens_k, *table;
    uint8_t *mask;
    void *q, *k, *v; /* dtype bits as the kernel reads them */
    double *qd, *kd, *vd; /* the twin's widenings (fp8: code * factor) */
    float *fq, *fk, *fv; /* fp8: the descale factors */
} dec_inputs;

/* Key lengths: nk, 0, 1, then random 1..nk (sequence 0 always full). */
static void dec_lengths(const dec_case *dc, int *lens)
{
    for (int b = 0; b < dc->b; b++)
        lens[b] = b == 0 ? dc->nk : b == 1 ? 0 : b == 2 ? 1 : 1 + (int)(acdt_urand() * dc->nk);
}

/* A shuffled table over ceil(nk_b / P) pages a sequence, odd sequences taking
 * half of sequence 0's whole pages as their prefix, 1 + a quarter spare pages;
 * entries past a sequence's last page name a spare page.  Returns num_pages. */
static int dec_table(const dec_case *dc, const int *lens, int pages_per_seq, int *table)
{
    const bool share = !ac_dtype_is_fp8(dc->t) || dc->descale == AC_DESCALE_TENSOR; /* one factor for a page */
    const int P = dc->page;
    int used = 0;
    for (int b = 0; b < dc->b; b++)
        used += (lens[b] + P - 1) / P;
    const int spare = 1 + used / 4, n_pages = used + spare;
    int *perm = malloc((size_t)n_pages * sizeof *perm);
    for (int x = 0; x < n_pages; x++)
        perm[x] = x;
    for (int x = n_pages - 1; x > 0; x--) {
        int y = (int)(acdt_urand() * (x + 1)), tmp = perm[x];
        perm[x] = perm[y], perm[y] = tmp;
    }
    int next = 0;
    for (int b = 0; b < dc->b; b++) {
        const int mine = (lens[b] + P - 1) / P;
        const int shared = share && b % 2 == 1 ? (lens[b] / P < lens[0] / P ? lens[b] / P : lens[0] / P) / 2 : 0;
        for (int x = 0; x < pages_per_seq; x++)
            table[b * pages_per_seq + x] = x < shared ? table[x] : x < mine ? perm[next++] : perm[used + x % spare];
    }
    free(perm);
    return n_pages;
}

/* fp8: factors in [2^-7, 2^-5) (test_cuda_fp8.c's), else null. */
static float *dec_factors(const ac_problem *p, ac_dtype t, ac_tensor_kind kind)
{
    if (!ac_dtype_is_fp8(t))
        return NULL;
    const size_t nf = ac_descale_count(p, kind);
    float *f = malloc(nf * sizeof *f);
    for (size_t x = 0; x < nf; x++)
        f[x] = (float)ldexp(1.0 + acdt_urand(), -7 + (int)(acdt_urand() * 2));
    return f;
}

/* Values normal(0,1) in t where a sequence's row lives (K, V: its keys; Q: its
 * query rows), NaN elsewhere (padding, unused slots, spare pages); fp8: codes of
 * normal(0, 64) values, widened as code * factor. */
static void dec_fill(const ac_problem *p, ac_dtype t, ac_tensor_kind kind, const float *factors, void **bits,
                     double **wide)
{
    const size_t n = ac_tensor_elems(p, kind);
    const bool q_side = kind == AC_TENSOR_Q, fp8 = ac_dtype_is_fp8(t);
    const int heads = q_side ? p->heads_q : p->heads_kv;
    double *x = malloc(n * sizeof *x);
    for (size_t e = 0; e < n; e++)
        x[e] = q_side ? (fp8 ? 64.0 : 1.0) * acdt_nrand() : NAN;
    for (int b = 0; b < p->batch && !q_side; b++) /* a shared page is written by each sequence: the last one's */
        for (int h = 0; h < heads; h++)
            for (int j = 0; j < ac_seqlen_k_of(p, b); j++)
                for (int c = 0; c < ac_tensor_dim(p, kind); c++)
                    x[ac_tensor_index(p, kind, b, h, j, c)] = (fp8 ? 64.0 : 1.0) * acdt_nrand();
    *bits = malloc(n * ac_dtype_size(t));
    ac_store(t, x, n, *bits);
    ac_load(t, *bits, n, x);
    /* each stored element times its factor once: a shared page is reached from every sequence that
     * holds it (one factor for them all: pages are shared only with descale=tensor) */
    bool *scaled = fp8 ? calloc(n, sizeof *scaled) : NULL;
    for (int b = 0; b < p->batch && fp8; b++)
        for (int h = 0; h < heads; h++)
            for (int j = 0; j < (q_side ? ac_stored_rows(p, b, true) : ac_seqlen_k_of(p, b)); j++)
                for (int c = 0; c < ac_tensor_dim(p, kind); c++) {
                    const size_t at = ac_tensor_index(p, kind, b, h, j, c);
                    if (!scaled[at])
                        x[at] *= (double)factors[ac_descale_index(p, kind, b, h, j)], scaled[at] = true;
                }
    free(scaled);
    *wide = x;
}

static int dec_build(const dec_case *dc, dec_inputs *in, ac_err *err)
{
    memset(in, 0, sizeof *in);
    ac_problem *p = &in->p;
    *p = ac_problem_dense(dc->b, dc->hq, dc->hkv, dc->nq, dc->nk, dc->d);
    p->layout = dc->layout;
    p->num_splits = dc->splits;
    p->head_dim_v = dc->dv;
    const ac_kernel *k = acdt_find_kernel(dc->kernel);
    p->v_from_k = k && k->caps.v_from_k;
    if (ac_dtype_is_fp8(dc->t)) {
        p->fp8_out = dc->out;
        p->fp8_p = AC_F16;
        p->descale_rows = dc->descale;
    }
    acdt_set_mask(p, dc->mask, &in->mask);
    in->lens_k = malloc((size_t)dc->b * sizeof(int));
    dec_lengths(dc, in->lens_k);
    p->seqlens_k = in->lens_k;
    if (dc->page > 0) {
        const int pages_per_seq = (dc->nk + dc->page - 1) / dc->page;
        in->table = malloc((size_t)dc->b * pages_per_seq * sizeof(int));
        p->page_size = dc->page;
        p->pages_per_seq = pages_per_seq;
        p->num_pages = dec_table(dc, in->lens_k, pages_per_seq, in->table);
        p->block_table = in->table;
    }
    p->descale_q = in->fq = dec_factors(p, dc->t, AC_TENSOR_Q);
    p->descale_k = in->fk = dec_factors(p, dc->t, AC_TENSOR_K);
    p->descale_v = in->fv = dec_factors(p, dc->t, AC_TENSOR_V);
    if (ac_problem_validate(p, 0, err) != AC_OK)
        return AC_ERR_INPUT;
    in->twin = ac_problem_unpaged(p);
    dec_fill(p, dc->t, AC_TENSOR_Q, in->fq, &in->q, &in->qd);
    double *kw, *vw;
    dec_fill(p, dc->t, AC_TENSOR_K, in->fk, &in->k, &kw);
    dec_fill(p, dc->t, AC_TENSOR_V, in->fv, &in->v, &vw);
    if (p->v_from_k) { /* v=k: V's rows are K's first d_v channels, bits and widenings alike */
        ac_copy_k_channels_to_v(p, ac_dtype_size(dc->t), in->k, in->v, 0);
        ac_copy_k_channels_to_v(p, sizeof(double), kw, vw, 0);
    }
    if (dc->page == 0) {
        in->kd = kw, in->vd = vw;
        return AC_OK;
    }
    in->kd = malloc(ac_kv_elems(&in->twin) * sizeof(double));
    in->vd = malloc(ac_v_elems(&in->twin) * sizeof(double));
    ac_paged_gather(p, AC_TENSOR_K, kw, in->kd);
    ac_paged_gather(p, AC_TENSOR_V, vw, in->vd);
    free(kw), free(vw);
    return AC_OK;
}

static void dec_free_inputs(dec_inputs *in)
{
    void *all[] = {in->lens_k, in->table, in->mask, in->q,  in->k,  in->v,
                   in->qd,     in->kd,    in->vd,   in->fq, in->fk, in->fv};
    for (size_t x = 0; x < sizeof all / sizeof all[0]; x++)
        free(all[x]);
}

/* The max scaled O error and LSE's absolute one, NaN/unwritten/special-value misses in n_bad. */
/* One run of the case; *splits and *cluster: the split count and merge its plan took (acd_decode_plan_path). */
static int dec_run(const dec_case *dc, double *o_scaled, double *lse_abs, size_t *n_bad, char *worst, size_t wl,
                   int *splits, int *cluster)
{
    const ac_kernel *k = acdt_find_kernel(dc->kernel);
    if (!k)
        return fprintf(stderr, "no kernel %s\n", dc->kernel), 3;
    dec_inputs in;
    ac_err err;
    if (dec_build(dc, &in, &err) != AC_OK)
        return fprintf(stderr, "bad case: %s\n", err.msg), 2;
    const ac_problem *p = &in.p;
    if (acd_decode_plan_path(p, dc->t, splits, cluster, &err) != AC_OK)
        return fprintf(stderr, "%s plan: %s\n", k->name, err.msg), 3;
    const ac_dtype ot = ac_dtype_is_fp8(dc->t) ? dc->out : dc->t;
    const size_t es = ac_dtype_size(dc->t), os = ac_dtype_size(ot), no_el = ac_o_elems(p), nl = ac_lse_elems(p);
    void *Qd = acdt_to_device(in.q, ac_q_elems(p) * es), *Kd = acdt_to_device(in.k, ac_kv_elems(p) * es);
    void *Vd = acdt_to_device(in.v, ac_v_elems(p) * es);
    void *Od = acdt_to_device(NULL, no_el * os), *Ld = acdt_to_device(NULL, nl * sizeof(float));
    ac_fwd_args fa = {.q = Qd, .k = Kd, .v = Vd, .o = Od, .lse = Ld};
    int st = k->forward(k, p, dc->t, &fa, &err);
    if (st != AC_OK)
        return fprintf(stderr, "%s forward: %s\n", k->name, err.msg), st;
    void *o = acdt_from_device(Od, no_el * os);
    float *lse = acdt_from_device(Ld, nl * sizeof(float));
    double *ro = malloc(no_el * sizeof(double)), *rl = malloc(nl * sizeof(double)), *eo = malloc(no_el * 8);
    if (ref_forward_fp64(&in.twin, in.qd, in.kd, in.vd, ro, rl, &err) != AC_OK ||
        ref_error_scales(&in.twin, dc->t, in.qd, in.kd, in.vd, ro, rl, NULL, eo, NULL, NULL, NULL, &err) != AC_OK)
        return fprintf(stderr, "ref: %s\n", err.msg), 3;
    *n_bad = 0;
    *o_scaled = acdt_scaled_max(p, ot, AC_TENSOR_O, o, ro, eo, n_bad, worst, wl);
    *lse_abs = acdt_lse_max(p, lse, rl, n_bad);
    ac_dev_free(Qd), ac_dev_free(Kd), ac_dev_free(Vd), ac_dev_free(Od), ac_dev_free(Ld);
    free(o), free(lse), free(ro), free(rl), free(eo);
    dec_free_inputs(&in);
    return AC_OK;
}

static const char *const dec_mask_name[] = {"none", "causal-tl", "causal-br", "window-br", "dense"};

/* cuda-decode-fp8 refuses factors per block of rows (its caps claim so; its forward), status AC_ERR_INPUT. */
static int dec_fp8_block_refused(void)
{
    const ac_kernel *k = acdt_find_kernel("cuda-decode-fp8");
    dec_case dc = {"cuda-decode-fp8", AC_E4M3, 2, 4, 2, 1, 300, 64, AC_LAYOUT_BSHD, 2, 16, 4, false, AC_BF16, 64, 0};
    dec_inputs in;
    ac_err err;
    if (!k || dec_build(&dc, &in, &err) != AC_OK)
        return printf("cuda-decode-fp8 block(64): no kernel or bad case\n"), 1;
    int caps = k->caps.fp8_no_block_descale ? AC_ERR_INPUT : AC_OK; /* registry.c refuses on it (not linked here) */
    ac_fwd_args fa = {0};
    int fwd = k->forward(k, &in.p, dc.t, &fa, &err); /* refused before any device memory is touched */
    bool ok = caps == AC_ERR_INPUT && fwd == AC_ERR_INPUT && strstr(err.msg, "block(64)") != NULL;
    printf("%-38s descale=block(64) refused: caps %d, forward %d (%s) %s\n", k->name, caps, fwd, err.msg,
           ok ? "ok" : "FAIL");
    dec_free_inputs(&in);
    return !ok;
}

/* Returns the number of failures; only: a kernel name prefix or NULL (all). */
int acdt_decode_tests(bool small, const char *only)
{
    const ac_dtype BF = AC_BF16, F16 = AC_F16, E4 = AC_E4M3, E5 = AC_E5M2;
    const ac_layout H = AC_LAYOUT_BHSD, S = AC_LAYOUT_BSHD;
    const int T = AC_DESCALE_TENSOR, HD = AC_DESCALE_HEAD;
    const char *K = "cuda-decode", *F8 = "cuda-decode-fp8", *M = "cuda-decode-mla";
    const dec_case cases[] = {
        /* GQA 8:1 as served, page 16, auto splits; lengths nk, 0, 1, random */
        {K, BF, 4, 32, 4, 1, 1000, 128, S, 2, 16, 0, false, 0, 0, 0},
        /* speculative rows, page 128 (one page holds whole tiles), three splits */
        {K, F16, 3, 8, 2, 5, 777, 128, H, 2, 128, 3, false, 0, 0, 0},
        /* group 16 x 16 rows: 16 row blocks; page 1: a page per key */
        {K, BF, 5, 16, 1, 16, 300, 64, S, 0, 1, 7, false, 0, 0, 0},
        /* more splits than key tiles: most splits empty; page 256 > nk */
        {K, F16, 3, 4, 4, 3, 129, 64, H, 2, 256, 300, false, 0, 0, 0},
        /* paged, a window: the visible keys start inside a split (past its start), whose CTA reads its first
         * page ids again (the ones read beside the length were its start's) */
        {K, BF, 3, 8, 2, 2, 2000, 128, S, 3, 16, 4, false, 0, 0, 0},
        /* contiguous K, V with a split hint, a window */
        {K, BF, 3, 8, 8, 2, 200, 128, S, 3, 0, 2, false, 0, 0, 0},
        /* a page size that is not a power of two, a dense mask (fully masked rows) */
        {K, F16, 3, 4, 2, 7, 150, 128, H, 4, 3, 4, false, 0, 0, 0},
        /* causal top-left: row i sees keys 0..i only */
        {K, BF, 3, 8, 1, 2, 2000, 128, H, 1, 32, 0, false, 0, 0, 0},
        /* nq > nk with causal-br: the first rows see no key (O = 0, LSE = -inf) */
        {K, BF, 3, 4, 2, 9, 4, 128, S, 2, 2, 3, false, 0, 0, 0},
        /* one key, one page */
        {K, F16, 3, 2, 1, 1, 1, 64, H, 2, 16, 0, false, 0, 0, 0},
        /* merged in clusters: two row blocks of 16 (group 8 x Nq 4), five splits; a partial block of 9 rows */
        {K, F16, 2, 8, 1, 4, 900, 128, H, 2, 16, 5, false, 0, 0, 0},
        {K, BF, 3, 6, 2, 3, 500, 64, S, 0, 16, 6, false, 0, 0, 0},
        /* long: auto picks many splits over 16k keys */
        {K, BF, 3, 32, 4, 1, 16461, 128, S, 2, 16, 0, false, 0, 0, 0},
        {"cuda-decode-mutant-combine-no-rescale", BF, 3, 8, 2, 2, 700, 128, S, 2, 16, 4, true, 0, 0, 0},
        {"cuda-decode-mutant-empty-split-nan", F16, 3, 4, 2, 1, 200, 64, H, 2, 16, 16, true, 0, 0, 0},
        /* 200 keys over 8 splits: splits 4-7 empty, in one cluster */
        {"cuda-decode-mutant-empty-split-nan", BF, 3, 4, 2, 1, 200, 128, S, 2, 16, 8, true, 0, 0, 0},
        {"cuda-decode-mutant-split-off-by-one", F16, 1, 4, 1, 1, 70, 64, H, 0, 0, 2, true, 0, 0, 0},
        {"cuda-decode-mutant-split-off-by-one", F16, 1, 8, 2, 1, 130, 128, S, 2, 16, 2, true, 0, 0, 0},
        {"cuda-decode-mutant-last-page-slots", BF, 3, 8, 2, 1, 300, 128, S, 2, 16, 0, true, 0, 0, 0},
        /* cuda-decode-fp8: GQA 8:1 page 16, e4m3 and e5m2, factors per tensor (pages shared) and per head */
        {F8, E4, 4, 32, 4, 1, 1000, 128, S, 2, 16, 0, false, BF, T, 0},
        {F8, E5, 4, 32, 4, 1, 1000, 128, H, 2, 16, 0, false, F16, HD, 0},
        /* speculative rows Nq = 4, page 3 (tiles span pages), d = 64, a dense mask */
        {F8, E4, 3, 8, 2, 4, 333, 64, H, 4, 3, 3, false, F16, HD, 0},
        {F8, E5, 3, 8, 1, 4, 500, 128, S, 1, 3, 0, false, BF, T, 0},
        /* contiguous K, V, a window; more splits than key tiles */
        {F8, E4, 3, 8, 8, 2, 200, 128, S, 3, 0, 2, false, BF, HD, 0},
        {F8, E5, 3, 4, 4, 3, 129, 64, H, 2, 0, 300, false, BF, T, 0},
        {F8, E4, 3, 4, 2, 3, 129, 64, S, 2, 16, 300, false, F16, HD, 0},
        /* long, auto splits */
        {F8, E4, 3, 32, 4, 1, 9000, 128, S, 2, 16, 0, false, BF, HD, 0},
        /* V's factor (2^-7..2^-5) twice: O off by that factor */
        {"cuda-decode-fp8-mutant-v-descale-twice", E4, 3, 8, 2, 1, 300, 128, S, 2, 16, 0, true, BF, HD, 0},
        {"cuda-decode-fp8-mutant-v-descale-twice", E5, 2, 4, 4, 2, 100, 64, H, 0, 0, 3, true, F16, T, 0},
        /* cuda-decode-mla: d 576 / d_v 512, one KV head; 16 query heads (DeepSeek-V3 over 8 GPUs), page 16 */
        {M, BF, 4, 16, 1, 1, 1000, 576, S, 2, 16, 0, false, 0, 0, 512},
        /* 128 query heads: 8 row blocks; page 64, three splits */
        {M, F16, 3, 128, 1, 1, 300, 576, H, 2, 64, 3, false, 0, 0, 512},
        /* speculative rows Nq = 4 (64 packed rows), a page per key */
        {M, BF, 3, 16, 1, 4, 200, 576, S, 2, 1, 0, false, 0, 0, 512},
        /* d_v = 576 (V the whole row), GQA 4:1 over two KV heads, page 3 (tiles span pages), a dense mask */
        {M, F16, 3, 8, 2, 2, 150, 576, H, 4, 3, 4, false, 0, 0, 0},
        /* contiguous K, a window; causal top-left; more splits than key tiles */
        {M, BF, 3, 16, 1, 1, 700, 576, S, 3, 0, 2, false, 0, 0, 512},
        {M, BF, 2, 16, 1, 3, 500, 576, H, 1, 32, 0, false, 0, 0, 512},
        {M, F16, 3, 16, 1, 1, 129, 576, S, 2, 16, 300, false, 0, 0, 512},
        /* long, auto splits */
        {M, BF, 2, 128, 1, 1, 8000, 576, S, 2, 64, 0, false, 0, 0, 512},
        /* V from the row's last 512 channels; the 64 rotary channels left out of the scores */
        {"cuda-decode-mla-mutant-rope-first", BF, 3, 16, 1, 1, 300, 576, S, 2, 16, 0, true, 0, 0, 512},
        {"cuda-decode-mla-mutant-rope-dropped", F16, 3, 16, 1, 1, 300, 576, H, 2, 16, 2, true, 0, 0, 512},
    };
    int failures = 0, merged_in_cluster = 0, ran_decode = 0;
    for (size_t x = 0; x < sizeof cases / sizeof cases[0]; x++) {
        dec_case dc = cases[x];
        if (only && strncmp(only, dc.kernel, strlen(only)) != 0) /* a prefix: the kernel and its mutants */
            continue;
        if (only && strcmp(only, "cuda-decode") == 0 && (ac_dtype_is_fp8(dc.t) || dc.d == 576)) /* not -fp8, -mla */
            continue;
        if (small && dc.nk > 600) /* for compute-sanitizer: short caches */
            dc.nk = 600;
        /* A case whose split CTAs merge in clusters runs again through the combine kernel (ACD_DEC_NO_CLUSTER). */
        for (int pass = 0; pass < 2; pass++) {
            double o_scaled = 0.0, lse_abs = 0.0;
            size_t n_bad = 0;
            char worst[256] = "";
            int splits = 0, cluster = 0;
            if (pass == 1)
                setenv("ACD_DEC_NO_CLUSTER", "1", 1);
            int st = dec_run(&dc, &o_scaled, &lse_abs, &n_bad, worst, sizeof worst, &splits, &cluster);
            unsetenv("ACD_DEC_NO_CLUSTER");
            if (st != AC_OK) {
                printf("%s: status %d\n", dc.kernel, st);
                failures++;
                break;
            }
            if (pass == 1 && cluster) {
                printf("%s: ACD_DEC_NO_CLUSTER=1 still merged in clusters\n", dc.kernel);
                failures++;
            }
            bool bad = n_bad > 0 || o_scaled > 4.0 || lse_abs > 1e-3;
            bool ok = bad == dc.expect_fail;
            const char *merge = cluster ? "cluster" : splits > 1 ? "combine" : "one split";
            failures += !ok;
            ran_decode += dc.d != 576;
            merged_in_cluster += cluster;
            printf("%-38s %-4s%s%-4s %-9s %-4s %d %d %d %d %d %d/%d page=%d splits=%d (%d, %s)  O %9.3g  LSE %9.3g  "
                   "bad %zu %s\n",
                   dc.kernel, ac_dtype_name(dc.t), ac_dtype_is_fp8(dc.t) ? ">" : " ",
                   ac_dtype_is_fp8(dc.t) ? ac_dtype_name(dc.out) : "", dec_mask_name[dc.mask],
                   ac_layout_name(dc.layout), dc.b, dc.hq, dc.hkv, dc.nq, dc.nk, dc.d, dc.dv ? dc.dv : dc.d, dc.page,
                   dc.splits, splits, merge, o_scaled, lse_abs, n_bad,
                   ok ? (dc.expect_fail ? "caught" : "ok") : "FAIL");
            if (!ok && !dc.expect_fail)
                printf("    worst O: %s\n", worst);
            fflush(stdout);
            if (!cluster)
                break;
        }
    }
    /* Hopper (which runs the kernels' sm_90 code; later GPUs JIT the compute_80 PTX, which has no cluster
     * merge) merges one-wave grids of 2-8 splits in clusters: a run of cuda-decode's cases where none did
     * would test the combine kernel alone and call it both. */
    int major = 0;
    if (ran_decode > 0 && merged_in_cluster == 0 &&
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) == cudaSuccess && major == 9) {
        printf("no cuda-decode case merged in a cluster on this compute capability %d device: FAIL\n", major);
        failures++;
    }
    if (!only || strstr(only, "fp8"))
        failures += dec_fp8_block_refused();
    return failures;
}
