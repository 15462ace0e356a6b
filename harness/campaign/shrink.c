/* harness/campaign/shrink.c — the shrinker.
 *
 * ac_shrink is Hypothesis-style greedy shrinking over case lines: a list of
 * edits, each proposing candidates from simplest to least simple; the first
 * candidate that is a valid case and still fails (the predicate) replaces the
 * current case and the same edit is tried again; passes over all edits repeat
 * until one keeps nothing.
 *
 * Every candidate an edit proposes is strictly smaller than the current case
 * in that edit's own field (batch, (hq, hq/hkv), nq, nk, d, mask rank, ...)
 * and leaves the fields of the other edits alone, so the process terminates
 * even without max_steps.  Integer fields are tried as 1, a ladder of
 * common values, n/2, then n - n/4, n - n/8, ..., n - 1: for a monotone
 * predicate ("fails iff nk >= 37") that reaches the exact threshold in
 * O(log n) accepted steps. */
#include <string.h>

#include "harness/campaign/shrink.h"

/* An edit writes candidate i of cur into cand: 1 = a candidate, 0 = none at
 * this i (try the next), -1 = no more candidates. */
typedef int (*edit_fn)(const ac_case *cur, int i, ac_case *cand);

/* ---- integer ladders ------------------------------------------------------- */

/* Candidate i for shrinking n: ladder values below n ascending, then n/2,
 * then n - n/4, n - n/8, ..., n - 1.  0 when candidate i is not below n. */
static int int_candidate(int n, const int *ladder, int n_ladder, int i)
{
    if (i < n_ladder)
        return ladder[i] < n ? ladder[i] : 0;
    i -= n_ladder;
    if (i == 0)
        return n / 2 >= 1 ? n / 2 : 0;
    /* i = 1: n - n/4, i = 2: n - n/8, ...; the last of these is n - 1 (n >= 4) */
    if (i >= 30)
        return -1;
    int step = n >> (i + 1);
    if (step >= 1)
        return n - step;
    return i == 1 && n - 1 > n / 2 ? n - 1 : -1; /* n = 3: 2 */
}

static const int seqlen_ladder[] = {1};
static const int dim_ladder[] = {1, 2, 4, 8, 16, 32, 64, 96, 128, 160, 192, 224, 256};

/* ---- the edits ----------------------------------------------------------- */

/* batch -> 1 keeping sequence i (only distinct with seqlens), then halve, -1. */
static int edit_batch(const ac_case *cur, int i, ac_case *cand)
{
    int nb = cur->batch;
    if (nb <= 1)
        return -1;
    *cand = *cur;
    bool has_lens = cur->n_seqlens_q > 0 || cur->n_seqlens_k > 0;
    int keep_from = 0, new_b;
    if (i < nb) {
        if (i > 0 && !has_lens)
            return 0;
        keep_from = i;
        new_b = 1;
    } else {
        int v = int_candidate(nb, NULL, 0, i - nb);
        if (v <= 0)
            return v;
        new_b = v;
    }
    cand->batch = new_b;
    if (cur->n_seqlens_q > 0) {
        cand->n_seqlens_q = new_b;
        memmove(cand->seqlens_q, cur->seqlens_q + keep_from, sizeof(int) * (size_t)new_b);
    }
    if (cur->n_seqlens_k > 0) {
        cand->n_seqlens_k = new_b;
        memmove(cand->seqlens_k, cur->seqlens_k + keep_from, sizeof(int) * (size_t)new_b);
    }
    return 1;
}

static int edit_drop_seqlens(const ac_case *cur, int i, ac_case *cand)
{
    *cand = *cur;
    switch (i) {
    case 0: /* both */
        if (cur->n_seqlens_q == 0 || cur->n_seqlens_k == 0)
            return 0;
        cand->n_seqlens_q = cand->n_seqlens_k = 0;
        return 1;
    case 1:
        if (cur->n_seqlens_q == 0)
            return 0;
        cand->n_seqlens_q = 0;
        return 1;
    case 2:
        if (cur->n_seqlens_k == 0)
            return 0;
        cand->n_seqlens_k = 0;
        return 1;
    default:
        return -1;
    }
}

/* Heads: every candidate lowers hq, or keeps hq and lowers the group size. */
static int edit_heads(const ac_case *cur, int i, ac_case *cand)
{
    int hq = cur->heads_q, hkv = cur->heads_kv;
    int group = hkv > 0 ? hq / hkv : 1;
    *cand = *cur;
    switch (i) {
    case 0:
        cand->heads_q = 1, cand->heads_kv = 1;
        break; /* one head */
    case 1:
        cand->heads_q = group, cand->heads_kv = 1;
        break; /* one KV head, same ratio */
    case 2: /* halve both */
        if (hq % 2 || hkv % 2)
            return 0;
        cand->heads_q = hq / 2, cand->heads_kv = hkv / 2;
        break;
    case 3: /* halve the group */
        if ((hq / 2) % hkv || hq / 2 < hkv)
            return 0;
        cand->heads_q = hq / 2;
        break;
    case 4:
        cand->heads_kv = hq;
        break; /* no GQA */
    default:
        return -1;
    }
    bool smaller = cand->heads_q < hq || (cand->heads_q == hq && cand->heads_q / cand->heads_kv < group);
    return smaller && cand->heads_q % cand->heads_kv == 0 ? 1 : 0;
}

static void clamp_lens(int *lens, int n, int max)
{
    for (int b = 0; b < n; b++)
        if (lens[b] > max)
            lens[b] = max;
}

static int edit_seqlen_q(const ac_case *cur, int i, ac_case *cand)
{
    int v = int_candidate(cur->seqlen_q, seqlen_ladder, 1, i);
    if (v <= 0)
        return v;
    *cand = *cur;
    cand->seqlen_q = v;
    clamp_lens(cand->seqlens_q, cand->n_seqlens_q, v);
    return 1;
}

static int edit_seqlen_k(const ac_case *cur, int i, ac_case *cand)
{
    int v = int_candidate(cur->seqlen_k, seqlen_ladder, 1, i);
    if (v <= 0)
        return v;
    *cand = *cur;
    cand->seqlen_k = v;
    clamp_lens(cand->seqlens_k, cand->n_seqlens_k, v);
    return 1;
}

/* Smaller head dims: the predicate says which ones the kernel supports. */
static int edit_head_dim(const ac_case *cur, int i, ac_case *cand)
{
    int v = int_candidate(cur->head_dim, dim_ladder, (int)(sizeof dim_ladder / sizeof dim_ladder[0]), i);
    if (v <= 0)
        return v;
    *cand = *cur;
    cand->head_dim = v;
    return 1;
}

/* Mask rank none < causal < window (harness/case/masks.c says which kind is
 * one rank down); every candidate lowers it. */
static int edit_mask(const ac_case *cur, int i, ac_case *cand)
{
    *cand = *cur;
    if (i == 0) {
        if (cur->mask == AC_MASK_NONE)
            return -1;
        ac_case_set_mask(cand, AC_MASK_NONE);
        cand->masked_rows = 0;
        return 1;
    }
    ac_mask_kind simpler = ac_case_mask_simpler(cur->mask);
    if (i == 1 && simpler != AC_MASK_NONE) {
        ac_case_set_mask(cand, simpler);
        return 1;
    }
    return -1;
}

/* Fewer fully masked rows; the alignment back to top-left when it does not matter. */
static int edit_mask_details(const ac_case *cur, int i, ac_case *cand)
{
    ac_mask_kind top_left = ac_case_mask_top_left(cur->mask);
    *cand = *cur;
    switch (i) {
    case 0:
        if (cur->masked_rows == 0)
            return 0;
        cand->masked_rows = 0;
        return 1;
    case 1:
        if (top_left == cur->mask)
            return 0;
        ac_case_set_mask(cand, top_left);
        return 1;
    default:
        return -1;
    }
}

static int edit_dist(const ac_case *cur, int i, ac_case *cand)
{
    ac_case def = ac_case_default();
    if (i > 0 || (cur->dist == def.dist && cur->dist_a == def.dist_a && cur->dist_b == def.dist_b))
        return -1;
    *cand = *cur;
    cand->dist = def.dist;
    cand->dist_a = def.dist_a;
    cand->dist_b = def.dist_b;
    return 1;
}

static int edit_layout_scale(const ac_case *cur, int i, ac_case *cand)
{
    ac_case def = ac_case_default();
    *cand = *cur;
    switch (i) {
    case 0:
        if (cur->layout == def.layout)
            return 0;
        cand->layout = def.layout;
        return 1;
    case 1:
        if (cur->scale_auto)
            return 0;
        cand->scale_auto = true;
        return 1;
    default:
        return -1;
    }
}

/* Seeds 1, 2, ... below the current one: small seeds read better in a fixture. */
#define SHRINK_MAX_SEED 8
static int edit_seed(const ac_case *cur, int i, ac_case *cand)
{
    uint64_t s = (uint64_t)i + 1;
    if (s > SHRINK_MAX_SEED || s >= cur->seed)
        return -1;
    *cand = *cur;
    cand->seed = s;
    return 1;
}

/* The variants (ref/variants.h): each dropped (0 = off), then simplified
 * (sinks to normal(0,1)); every candidate turns one off or moves it to its
 * simplest form, so the variants in use only fall. */
/* The bias: dropped; else one (1, 1) shape, no -inf entries, normal(0,1), the
 * inputs' dtype; then a dense mask's dimensions (1, 1). */
static int edit_bias(const ac_case *cur, int i, ac_case *cand)
{
    if (i == 5) {
        if (!cur->mask_per_batch && !cur->mask_per_head)
            return 0;
        cand->mask_per_batch = cand->mask_per_head = false;
        return 1;
    }
    if (i == 8 || i == 9) { /* dropout: dropped, else p = 0.5 */
        if (cur->dropout == 0.0 || (i == 9 && cur->dropout == 0.5))
            return 0;
        cand->dropout = i == 8 ? 0.0 : 0.5;
        return 1;
    }
    if (i == 6 || i == 7) { /* sink tokens: dropped, else one */
        if (cur->sink_tokens == 0 || (i == 7 && cur->sink_tokens == 1))
            return 0;
        cand->sink_tokens = i == 6 ? 0 : 1;
        return 1;
    }
    if (i > 4)
        return -1;
    if (cur->bias == AC_BIAS_NONE)
        return 0;
    if (i == 0)
        cand->bias = AC_BIAS_NONE, cand->bias_a = cand->bias_b = cand->bias_inf = 0.0;
    if (i == 0 || i == 1)
        cand->bias_per_batch = cand->bias_per_head = false;
    if (i == 0 || i == 2)
        cand->bias_inf = 0.0;
    if (i == 3)
        cand->bias_a = 0.0, cand->bias_b = 1.0;
    if (i == 0 || i == 4)
        cand->bias_f32 = false;
    return 1;
}

static int edit_variants(const ac_case *cur, int i, ac_case *cand)
{
    *cand = *cur;
    bool plain_sinks = cur->sinks == AC_SINKS_NORMAL && cur->sinks_a == 0.0 && cur->sinks_b == 1.0;
    switch (i) {
    case 0:
        if (cur->softcap == 0.0)
            return 0;
        cand->softcap = 0.0;
        return 1;
    case 1:
        if (cur->sinks == AC_SINKS_NONE)
            return 0;
        cand->sinks = AC_SINKS_NONE, cand->sinks_a = cand->sinks_b = 0.0;
        return 1;
    case 2:
        if (cur->sinks == AC_SINKS_NONE || plain_sinks)
            return 0;
        cand->sinks = AC_SINKS_NORMAL, cand->sinks_a = 0.0, cand->sinks_b = 1.0;
        return 1;
    case 3:
        if (cur->head_dim_v == 0)
            return 0;
        cand->head_dim_v = 0;
        return 1;
    case 4:
        if (cur->alibi == AC_ALIBI_NONE)
            return 0;
        cand->alibi = AC_ALIBI_NONE, cand->alibi_a = cand->alibi_b = 0.0, cand->alibi_bh = false;
        return 1;
    case 5: /* the paper's slopes, one per head */
        if (cur->alibi == AC_ALIBI_NONE || (cur->alibi == AC_ALIBI_PAPER && !cur->alibi_bh))
            return 0;
        cand->alibi = AC_ALIBI_PAPER, cand->alibi_a = cand->alibi_b = 0.0, cand->alibi_bh = false;
        return 1;
    default:
        return edit_bias(cur, i - 6, cand);
    }
}

/* The paged KV cache and the splits, simplest first: no paging; the table in
 * order (no shared or spare pages); fewer, larger pages (P doubled, up to nk);
 * one split in a paged case (from S >= 2 or auto), no split hint in a
 * contiguous one (only downhill: a case never gains a field it did not need);
 * then V drawn apart from K (v=k dropped). */
static int edit_paged(const ac_case *cur, int i, ac_case *cand)
{
    *cand = *cur;
    switch (i) {
    case 0:
        if (cur->kv_page_size == 0)
            return 0;
        cand->kv_page_size = 0, cand->kv_contig = false;
        return 1;
    case 1:
        if (cur->kv_page_size == 0 || cur->kv_contig)
            return 0;
        cand->kv_contig = true;
        return 1;
    case 2:
        if (cur->kv_page_size == 0 || cur->kv_page_size >= cur->seqlen_k ||
            2 * cur->kv_page_size > AC_CASE_MAX_PAGE_SIZE)
            return 0;
        cand->kv_page_size = 2 * cur->kv_page_size;
        return 1;
    case 3: /* paged: one split; contiguous: no hint (its decode path is the split's) */
        if (cur->kv_page_size == 0 ? cur->num_splits == 0 : cur->num_splits == 1)
            return 0;
        cand->num_splits = cur->kv_page_size == 0 ? 0 : 1;
        return 1;
    case 4: /* V its own tensor again (a kernel reading V from K refuses the candidate) */
        if (!cur->v_from_k)
            return 0;
        cand->v_from_k = false;
        return 1;
    default:
        return -1;
    }
}

/* fp8 (issue 17): one descale factor per tensor, then O in bf16 — the simpler
 * recipe, for the same kernel (P's format is the kernel's: never edited). */
static int edit_fp8(const ac_case *cur, int i, ac_case *cand)
{
    if (i > 1)
        return -1;
    if (!ac_dtype_is_fp8(cur->dtype) || (i == 0 && cur->descale_rows == AC_DESCALE_TENSOR) ||
        (i == 1 && cur->out_dtype == AC_BF16))
        return 0;
    *cand = *cur;
    if (i == 0)
        cand->descale_rows = AC_DESCALE_TENSOR;
    else
        cand->out_dtype = AC_BF16;
    return 1;
}

static const edit_fn edits[] = {
    edit_batch,        edit_drop_seqlens, edit_heads,        edit_seqlen_q, edit_seqlen_k, edit_head_dim, edit_mask,
    edit_mask_details, edit_dist,         edit_layout_scale, edit_variants, edit_paged,    edit_fp8,      edit_seed,
};

/* ---- the greedy loop ------------------------------------------------------- */

typedef struct {
    ac_still_fails pred;
    void *ctx;
    int calls, max_steps;
} shrink_state;

static bool same_case(const ac_case *a, const ac_case *b)
{
    char la[AC_CASE_LINE_MAX], lb[AC_CASE_LINE_MAX];
    if (ac_case_format(a, la, sizeof la) < 0 || ac_case_format(b, lb, sizeof lb) < 0)
        return false;
    return strcmp(la, lb) == 0;
}

/* Applies edit e to cur as long as one of its candidates still fails. */
static bool apply_edit(edit_fn e, ac_case *cur, shrink_state *s)
{
    bool kept_any = false;
    for (int i = 0; s->calls < s->max_steps; i++) {
        ac_case cand;
        int r = e(cur, i, &cand);
        if (r < 0)
            break;
        if (r == 0 || same_case(&cand, cur) || ac_case_validate(&cand, NULL) != AC_OK)
            continue;
        s->calls++;
        if (s->pred(&cand, s->ctx)) {
            *cur = cand;
            kept_any = true;
            i = -1; /* restart this edit from its simplest candidate */
        }
    }
    return kept_any;
}

int ac_shrink(const ac_case *failing, ac_still_fails pred, void *ctx, int max_steps, ac_case *minimal)
{
    shrink_state s = {.pred = pred, .ctx = ctx, .calls = 0, .max_steps = max_steps > 0 ? max_steps : 1 << 30};
    ac_case cur = *failing;
    bool changed = true;
    while (changed && s.calls < s.max_steps) {
        changed = false;
        for (size_t e = 0; e < sizeof edits / sizeof edits[0]; e++)
            changed |= apply_edit(edits[e], &cur, &s);
    }
    *minimal = cur;
    return s.calls;
}
