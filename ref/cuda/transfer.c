/* ref/cuda/transfer.c — the GPU reference's downloads, device-side free: a
 * group's outputs come down chunk by chunk through two pinned staging slots,
 * and each chunk is scattered from its slot to its places in the caller's
 * host arrays by worker threads (ref/parallel.h).
 *
 * Why: a device-to-host copy into pageable memory goes through the driver's
 * own small staging buffer at a few GB/s, and into freshly allocated host
 * arrays it also takes every first-touch page fault on the one thread that
 * called it (gigabytes at N = 32768).  Into pinned memory the copy runs at the
 * link's rate; the scatter then runs on every core, which faults the pages in
 * parallel, while the device fills the other slot with the next chunk.
 *
 * Plain C with the device behind two callbacks (fetch a chunk into a slot,
 * wait for it), so the chunking, the double buffering and the scatter are
 * tested on any machine (test_transfer.c); gpuref_groups.cu supplies the CUDA
 * callbacks. */
#include <string.h>

#include "../parallel.h"
#include "gpuref_internal.h"

void refg_scatter(double *host, const refg_slab *s, size_t e0, const double *src, size_t n)
{
    while (n > 0) {
        size_t row = e0 / s->width, col = e0 % s->width;
        size_t run = s->width - col < n ? s->width - col : n;
        memcpy(host + s->offset + row * s->pitch + col, src, run * sizeof(double));
        src += run, e0 += run, n -= run;
    }
}

/* One chunk's scatter in REFG_SCATTER_PIECE pieces, one task each. */
typedef struct {
    double *host;
    const refg_slab *s;
    size_t e0, n;
    const double *src;
} scatter_job;

#define REFG_SCATTER_PIECE ((size_t)1 << 17) /* elements: 1 MiB a task */

static void scatter_task(void *ctx, size_t task, int worker)
{
    (void)worker;
    const scatter_job *j = ctx;
    size_t at = task * REFG_SCATTER_PIECE, n = j->n - at < REFG_SCATTER_PIECE ? j->n - at : REFG_SCATTER_PIECE;
    refg_scatter(j->host, j->s, j->e0 + at, j->src + at, n);
}

void refg_scatter_parallel(double *host, const refg_slab *s, size_t e0, const double *src, size_t n, int workers)
{
    scatter_job j = {host, s, e0, n, src};
    ref_parallel_for(workers, (n + REFG_SCATTER_PIECE - 1) / REFG_SCATTER_PIECE, scatter_task, &j);
}

/* The chunk after c (c->n == 0: the first), or false past the last transfer. */
static bool next_chunk(const refg_xfer *x, int n_xfers, size_t chunk_elems, refg_chunk *c)
{
    size_t e0 = c->e0 + c->n;
    int i = c->xfer;
    while (i < n_xfers && e0 >= x[i].s.width * x[i].s.height)
        i++, e0 = 0;
    if (i >= n_xfers)
        return false;
    size_t left = x[i].s.width * x[i].s.height - e0;
    *c = (refg_chunk){i, e0, left < chunk_elems ? left : chunk_elems};
    return true;
}

int refg_download(const refg_xfer *x, int n_xfers, const refg_pipe *pipe, int workers, ac_err *err)
{
    refg_chunk in_slot[2], c = {0, 0, 0};
    bool busy[2] = {false, false};
    if (next_chunk(x, n_xfers, pipe->slot_elems, &c)) {
        in_slot[0] = c, busy[0] = true;
        int st = pipe->fetch(pipe->ctx, 0, &c, err);
        if (st != AC_OK)
            return st;
    }
    for (int k = 0; busy[k]; k ^= 1) {
        /* the other slot was scattered in the previous round: refill it first, so
         * the device copies the next chunk while this one is scattered */
        if (next_chunk(x, n_xfers, pipe->slot_elems, &c)) {
            in_slot[k ^ 1] = c, busy[k ^ 1] = true;
            int st = pipe->fetch(pipe->ctx, k ^ 1, &c, err);
            if (st != AC_OK)
                return st;
        }
        int st = pipe->wait(pipe->ctx, k, err);
        if (st != AC_OK)
            return st;
        const refg_chunk *d = &in_slot[k];
        refg_scatter_parallel(x[d->xfer].host, &x[d->xfer].s, d->e0, pipe->slots[k], d->n, workers);
        busy[k] = false;
    }
    return AC_OK;
}
