/* ref/paged.c — the paged KV cache: where key j of sequence b lives, the
 * contiguous twin the reference tiers read, and the checks of the paged
 * fields and num_splits.
 *
 * The reference reads K and V through the block table once: the inputs'
 * paged widenings are gathered into the twin's contiguous layout
 * (ac_paged_gather) and every fp64 stage, the error scales, the naive
 * baseline and the MPFR certification run unchanged on the twin.  Q, O and
 * LSE are indexed alike in both, so the comparator needs nothing new. */
#include <math.h>
#include <stdlib.h>

#include "ref.h"
#include "variants_internal.h"

bool ac_problem_paged(const ac_problem *p) { return p->page_size > 0; }

ac_problem ac_problem_unpaged(const ac_problem *p)
{
    ac_problem twin = *p;
    twin.page_size = 0, twin.num_pages = 0, twin.pages_per_seq = 0, twin.block_table = NULL;
    return twin;
}

size_t ac_paged_row(const ac_problem *p, int b, int j)
{
    int page = p->block_table[(size_t)b * p->pages_per_seq + j / p->page_size];
    return (size_t)page * p->page_size + (size_t)(j % p->page_size);
}

void ac_paged_gather(const ac_problem *p, ac_tensor_kind kind, const double *paged, double *contig)
{
    ac_problem twin = ac_problem_unpaged(p);
    int cols = ac_tensor_dim(p, kind);
    for (int b = 0; b < p->batch; b++) {
        int nk = ac_seqlen_k_of(p, b);
        for (int h = 0; h < p->heads_kv; h++)
            for (int j = 0; j < p->seqlen_k; j++)
                for (int c = 0; c < cols; c++)
                    contig[ac_tensor_index(&twin, kind, b, h, j, c)] =
                        j < nk ? paged[ac_tensor_index(p, kind, b, h, j, c)] : NAN;
    }
}

void ac_paged_scatter(const ac_problem *p, ac_tensor_kind kind, const double *contig, double *paged)
{
    ac_problem twin = ac_problem_unpaged(p);
    int cols = ac_tensor_dim(p, kind);
    for (int b = 0; b < p->batch; b++)
        for (int h = 0; h < p->heads_kv; h++)
            for (int j = 0; j < ac_seqlen_k_of(p, b); j++)
                for (int c = 0; c < cols; c++)
                    paged[ac_tensor_index(p, kind, b, h, j, c)] = contig[ac_tensor_index(&twin, kind, b, h, j, c)];
}

static int validate_table(const ac_problem *p, ac_err *err)
{
    if (!p->block_table)
        return ac_fail(err, AC_ERR_INPUT, "block_table: a paged problem needs one");
    if (!p->seqlens_k)
        return ac_fail(err, AC_ERR_INPUT, "seqlens_k: a paged problem needs one length per sequence");
    for (int b = 0; b < p->batch; b++) {
        long long room = (long long)p->pages_per_seq * p->page_size;
        if (p->seqlens_k[b] > room)
            return ac_fail(err, AC_ERR_INPUT,
                           "block_table: row %d has %d pages of %d keys, too short for "
                           "seqlens_k[%d]=%d",
                           b, p->pages_per_seq, p->page_size, b, p->seqlens_k[b]);
        int used = (p->seqlens_k[b] + p->page_size - 1) / p->page_size;
        for (int x = 0; x < used; x++) {
            int page = p->block_table[(size_t)b * p->pages_per_seq + x];
            if (page < 0 || page >= p->num_pages)
                return ac_fail(err, AC_ERR_INPUT, "block_table[%d][%d]=%d: page id out of range 0..%d", b, x, page,
                               p->num_pages - 1);
        }
    }
    return AC_OK;
}

int ref_paged_validate(const ac_problem *p, ac_err *err)
{
    if (p->num_splits < 0)
        return ac_fail(err, AC_ERR_INPUT, "num_splits: must be >= 1 (0: auto), got %d", p->num_splits);
    if (p->page_size == 0 && !p->block_table)
        return AC_OK;
    if (p->page_size < 1)
        return ac_fail(err, AC_ERR_INPUT, "page_size: must be >= 1 with a block table, got %d", p->page_size);
    if (p->layout == AC_LAYOUT_THD)
        return ac_fail(err, AC_ERR_INPUT, "page_size: a paged KV cache takes layout bhsd or bshd, not thd");
    if (p->num_pages < 1)
        return ac_fail(err, AC_ERR_INPUT, "num_pages: must be >= 1, got %d", p->num_pages);
    if (p->pages_per_seq < 1)
        return ac_fail(err, AC_ERR_INPUT, "pages_per_seq: must be >= 1, got %d", p->pages_per_seq);
    return validate_table(p, err);
}
