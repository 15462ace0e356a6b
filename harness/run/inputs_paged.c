/* harness/run/inputs_paged.c — kv=paged(P): the case's K and V moved into a
 * paged KV cache, as a serving engine holds them.
 *
 * The contiguous K, V are drawn first, exactly as for the same line without
 * kv= (so the reference's gathered twin holds the very values an unpaged
 * case would have, prefix sharing aside).  Then, from the case seed's own
 * stream (INPUTS_STREAM_PAGES):
 *   - each sequence b needs ceil(nk_b / P) pages; a sequence after the first
 *     shares, half the time, a prefix of whole pages with an earlier one
 *     (its keys there are made equal to that sequence's, prefix caching), when
 *     the distribution is normal, uniform or outliers (the others' structure,
 *     dominant's planted key, is per sequence) and, for fp8, the descale is
 *     per tensor (may_share);
 *   - spare pages (1 + a quarter of those used) that no entry in use names;
 *   - the page ids shuffled (Fisher-Yates), and table entries past a
 *     sequence's last page pointing at a spare page;
 * kv=paged(P,contig): pages in order, none shared, none spare (entries past
 * the last page: 0).  Every slot no sequence uses, the tail of a last page
 * and the spare pages, is NaN in the bits and the widenings, so a kernel
 * reading one poisons its output. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness/run/inputs_internal.h"
#include "ref/rng.h"

typedef struct {
    int share_from[AC_CASE_MAX_BATCH]; /* the earlier sequence whose prefix b shares, or -1 */
    int shared_pages[AC_CASE_MAX_BATCH];
    int used_pages, spare_pages, pages_per_seq;
} page_plan;

static int below(uint64_t *state, int n) { return n <= 1 ? 0 : (int)(ac_splitmix64(state) % (uint64_t)n); }

/* Whether sequences may share prefix pages: the distribution's structure is not
 * per sequence, and a key's value does not depend on its sequence.  fp8 with
 * descale=head or block(N) gives each (sequence, kv head) factors of its own,
 * so one shared page would hold two values (sequence a's code x a's factor is
 * not b's); a serving engine with prefix caching scales per tensor or per page. */
static bool may_share(const ac_case *c)
{
    bool dist = c->dist == AC_DIST_NORMAL || c->dist == AC_DIST_UNIFORM || c->dist == AC_DIST_OUTLIERS;
    return dist && (!ac_dtype_is_fp8(c->dtype) || c->descale_rows == AC_DESCALE_TENSOR);
}

static void plan_pages(const ac_inputs *in, uint64_t *state, page_plan *pl)
{
    const ac_problem *p = &in->p;
    int P = in->c.kv_page_size;
    bool shuffle = !in->c.kv_contig;
    memset(pl, 0, sizeof *pl);
    pl->pages_per_seq = (p->seqlen_k + P - 1) / P;
    for (int b = 0; b < p->batch; b++) {
        int full_b = p->seqlens_k[b] / P, need = (p->seqlens_k[b] + P - 1) / P;
        pl->share_from[b] = -1;
        if (shuffle && may_share(&in->c) && b > 0 && below(state, 2) == 0) {
            int a = below(state, b), full_a = p->seqlens_k[a] / P;
            int most = full_a < full_b ? full_a : full_b;
            if (most > 0) {
                pl->share_from[b] = a;
                pl->shared_pages[b] = 1 + below(state, most);
            }
        }
        pl->used_pages += need - pl->shared_pages[b];
    }
    pl->spare_pages = shuffle ? 1 + pl->used_pages / 4 : 0;
    if (pl->used_pages + pl->spare_pages == 0)
        pl->spare_pages = 1; /* every sequence empty: the cache still has a page */
}

/* Sequence b's shared prefix made equal to sequence a's, in K and V, bits and widenings. */
static void copy_prefix(ac_inputs *in, int a, int b, int keys)
{
    const ac_problem *p = &in->p;
    ac_dtype t = in->c.dtype;
    ac_tensor_kind kinds[2] = {AC_TENSOR_K, AC_TENSOR_V};
    void *bits[2] = {in->k, in->v};
    double *wide[2] = {in->kd, in->vd};
    for (int x = 0; x < 2; x++)
        for (int h = 0; h < p->heads_kv; h++)
            for (int j = 0; j < keys; j++)
                for (int c = 0; c < ac_tensor_dim(p, kinds[x]); c++) {
                    size_t from = ac_tensor_index(p, kinds[x], a, h, j, c),
                           to = ac_tensor_index(p, kinds[x], b, h, j, c);
                    ac_bits_put(t, bits[x], to, ac_bits_get(t, bits[x], from));
                    wide[x][to] = wide[x][from];
                }
}

/* The table: ids 0.. in order, then permuted unless contig. */
static bool fill_table(const ac_inputs *in, uint64_t *state, const page_plan *pl, int *table)
{
    const ac_problem *p = &in->p;
    int total = pl->used_pages + pl->spare_pages, next = 0, P = in->c.kv_page_size;
    int *perm = malloc(sizeof(int) * (size_t)total);
    if (!perm)
        return false;
    for (int x = 0; x < total; x++)
        perm[x] = x;
    for (int x = total - 1; x > 0 && !in->c.kv_contig; x--) {
        int y = below(state, x + 1), tmp = perm[x];
        perm[x] = perm[y], perm[y] = tmp;
    }
    int filler = pl->spare_pages > 0 ? perm[total - 1] : 0; /* a spare page: NaN */
    for (int b = 0; b < p->batch; b++) {
        int *row = table + (size_t)b * pl->pages_per_seq, need = (p->seqlens_k[b] + P - 1) / P;
        for (int e = 0; e < pl->pages_per_seq; e++)
            row[e] = e < pl->shared_pages[b] ? table[(size_t)pl->share_from[b] * pl->pages_per_seq + e]
                : e < need                   ? perm[next++]
                                             : filler;
    }
    free(perm);
    return true;
}

/* One K-like tensor moved into pages: NaN everywhere, then the slots in use. */
static int move_to_pages(const ac_inputs *in, const ac_problem *paged, ac_tensor_kind kind, void **bits, double **wide)
{
    ac_dtype t = in->c.dtype;
    size_t n = ac_tensor_elems(paged, kind), es = ac_dtype_size(t);
    void *pb = malloc(n * es + 1);
    double *pw = malloc(n * sizeof(double) + 1);
    if (!pb || !pw) {
        free(pb), free(pw);
        return AC_ERR_ENV;
    }
    uint32_t nan_bits = ac_narrow(t, NAN);
    for (size_t x = 0; x < n; x++) {
        ac_bits_put(t, pb, x, nan_bits);
        pw[x] = NAN;
    }
    const ac_problem *p = &in->p;
    for (int b = 0; b < p->batch; b++)
        for (int h = 0; h < p->heads_kv; h++)
            for (int j = 0; j < p->seqlens_k[b]; j++)
                for (int c = 0; c < ac_tensor_dim(p, kind); c++) {
                    size_t from = ac_tensor_index(p, kind, b, h, j, c), to = ac_tensor_index(paged, kind, b, h, j, c);
                    ac_bits_put(t, pb, to, ac_bits_get(t, *bits, from));
                    pw[to] = (*wide)[from];
                }
    free(*bits), free(*wide);
    *bits = pb, *wide = pw;
    return AC_OK;
}

static int page_lengths(ac_inputs *in, ac_err *err)
{
    if (in->p.seqlens_k)
        return AC_OK;
    if (!(in->seqlens_k = malloc(sizeof(int) * (size_t)in->p.batch)))
        return ac_fail(err, AC_ERR_ENV, "inputs: out of memory");
    for (int b = 0; b < in->p.batch; b++)
        in->seqlens_k[b] = in->p.seqlen_k;
    in->p.seqlens_k = in->seqlens_k;
    return AC_OK;
}

int ac_inputs_page(ac_inputs *in, ac_err *err)
{
    in->p.num_splits = in->c.num_splits;
    if (in->c.kv_page_size == 0)
        return AC_OK;
    int st = page_lengths(in, err);
    if (st != AC_OK)
        return st;
    uint64_t state = inputs_stream(in->c.seed, INPUTS_STREAM_PAGES);
    page_plan pl;
    plan_pages(in, &state, &pl);
    for (int b = 0; b < in->p.batch; b++)
        if (pl.share_from[b] >= 0)
            copy_prefix(in, pl.share_from[b], b, pl.shared_pages[b] * in->c.kv_page_size);
    if (!(in->block_table = malloc(sizeof(int) * (size_t)in->p.batch * pl.pages_per_seq)) ||
        !fill_table(in, &state, &pl, in->block_table))
        return ac_fail(err, AC_ERR_ENV, "inputs: out of memory for the block table");
    ac_problem paged = in->p;
    paged.page_size = in->c.kv_page_size;
    paged.num_pages = pl.used_pages + pl.spare_pages;
    paged.pages_per_seq = pl.pages_per_seq;
    paged.block_table = in->block_table;
    if (move_to_pages(in, &paged, AC_TENSOR_K, &in->k, &in->kd) != AC_OK ||
        move_to_pages(in, &paged, AC_TENSOR_V, &in->v, &in->vd) != AC_OK)
        return ac_fail(err, AC_ERR_ENV, "inputs: out of memory for the KV pages (%d pages of %d keys)", paged.num_pages,
                       paged.page_size);
    in->p = paged;
    return ac_problem_validate(&in->p, 0, err);
}

int ac_inputs_unpaged(const ac_inputs *in, ac_inputs *view, ac_err *err)
{
    *view = *in;
    if (!ac_problem_paged(&in->p))
        return AC_OK;
    view->p = ac_problem_unpaged(&in->p);
    size_t nk = ac_kv_elems(&view->p), nv = ac_v_elems(&view->p);
    view->kd = malloc(nk * sizeof(double) + 1), view->vd = malloc(nv * sizeof(double) + 1);
    if (!view->kd || !view->vd) {
        free(view->kd), free(view->vd);
        view->kd = in->kd, view->vd = in->vd;
        return ac_fail(err, AC_ERR_ENV, "inputs: out of memory gathering the paged K and V (%zu elements)", nk);
    }
    ac_paged_gather(&in->p, AC_TENSOR_K, in->kd, view->kd);
    ac_paged_gather(&in->p, AC_TENSOR_V, in->vd, view->vd);
    return AC_OK;
}

void ac_inputs_unpaged_free(const ac_inputs *in, ac_inputs *view)
{
    if (view->kd != in->kd)
        free(view->kd);
    if (view->vd != in->vd)
        free(view->vd);
    view->kd = in->kd, view->vd = in->vd;
}
