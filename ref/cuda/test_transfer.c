/* ref/cuda/test_transfer.c — the GPU reference's downloads with the device
 * faked by memcpy: every chunk lands at its place, through two slots, on any
 * number of workers (suite ref_gpu_transfer). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "gpuref_internal.h"

#define MAX_XFERS 6

/* The fake device: one packed buffer per transfer; a slot may be refilled
 * only after its last chunk was waited for. */
typedef struct {
    const double *dev[MAX_XFERS];
    double *slots[2];
    bool fetched[2]; /* fetched, not yet waited for */
    int fetches, waits;
} fake_device;

static int fake_fetch(void *ctx, int slot, const refg_chunk *c, ac_err *err)
{
    (void)err;
    fake_device *f = ctx;
    cr_assert(!f->fetched[slot], "slot %d refilled before it was waited for", slot);
    memcpy(f->slots[slot], f->dev[c->xfer] + c->e0, c->n * sizeof(double));
    f->fetched[slot] = true;
    f->fetches++;
    return AC_OK;
}

static int fake_wait(void *ctx, int slot, ac_err *err)
{
    (void)err;
    fake_device *f = ctx;
    cr_assert(f->fetched[slot], "wait on slot %d with nothing in it", slot);
    f->fetched[slot] = false;
    f->waits++;
    return AC_OK;
}

static uint64_t rng_state = 0xd0d0;
static double fresh(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (double)((z ^ (z >> 31)) >> 11) * 0x1p-53 + 1.0;
}

/* Slabs as gpuref_groups.cu makes them: a contiguous BHSD slab, an empty one,
 * a BSHD slab (rows of G d, Hq d apart), a big strided one (several scatter
 * tasks per chunk) and an LSE-like row run. */
static const refg_slab slabs[] = {
    {.offset = 5, .pitch = 1000, .width = 1000, .height = 1}, {.offset = 0, .pitch = 0, .width = 0, .height = 0},
    {.offset = 48, .pitch = 96, .width = 24, .height = 37},   {.offset = 7, .pitch = 310, .width = 300, .height = 1000},
    {.offset = 3, .pitch = 77, .width = 77, .height = 1},
};
#define N_SLABS (sizeof slabs / sizeof slabs[0])

static size_t host_elems(const refg_slab *s)
{
    return s->height ? s->offset + (s->height - 1) * s->pitch + s->width : 1;
}

Test(ref_gpu_transfer, every_element_lands_at_its_place_through_two_slots)
{
    const size_t slot_elems[] = {1, 7, 100, 5000, (size_t)1 << 18};
    const int workers[] = {1, 3, 8};
    double *dev[N_SLABS], *host[N_SLABS];
    for (size_t x = 0; x < N_SLABS; x++) {
        size_t n = slabs[x].width * slabs[x].height;
        dev[x] = malloc((n ? n : 1) * sizeof(double));
        host[x] = malloc(host_elems(&slabs[x]) * sizeof(double));
        cr_assert(dev[x] && host[x]);
        for (size_t e = 0; e < n; e++)
            dev[x][e] = fresh();
    }
    for (size_t si = 0; si < sizeof slot_elems / sizeof slot_elems[0]; si++)
        for (int w = 0; w < 3; w++) {
            fake_device f;
            memset(&f, 0, sizeof f);
            refg_xfer xf[N_SLABS];
            f.slots[0] = malloc(slot_elems[si] * sizeof(double));
            f.slots[1] = malloc(slot_elems[si] * sizeof(double));
            size_t total = 0;
            for (size_t x = 0; x < N_SLABS; x++) {
                for (size_t e = 0; e < host_elems(&slabs[x]); e++)
                    host[x][e] = -1.0; /* never a device value (those are in [1, 2)) */
                f.dev[x] = dev[x];
                xf[x] = (refg_xfer){host[x], slabs[x]};
                total += (slabs[x].width * slabs[x].height + slot_elems[si] - 1) / slot_elems[si];
            }
            refg_pipe pipe = {{f.slots[0], f.slots[1]}, slot_elems[si], fake_fetch, fake_wait, &f};
            ac_err err = {{0}};
            cr_assert_eq(refg_download(xf, (int)N_SLABS, &pipe, workers[w], &err), AC_OK, "%s", err.msg);
            cr_assert_eq(f.fetches, (int)total, "%zu-element slots: %d chunks fetched, %zu expected", slot_elems[si],
                         f.fetches, total);
            cr_assert_eq(f.waits, f.fetches);
            for (size_t x = 0; x < N_SLABS; x++) {
                const refg_slab *s = &slabs[x];
                size_t placed = 0;
                for (size_t e = 0; e < host_elems(s); e++) {
                    size_t rel = e - s->offset, row = rel / (s->pitch ? s->pitch : 1),
                           col = rel % (s->pitch ? s->pitch : 1);
                    bool inside = s->height && e >= s->offset && row < s->height && col < s->width;
                    double want = inside ? dev[x][row * s->width + col] : -1.0;
                    placed += inside;
                    cr_assert_eq(host[x][e], want, "slot %zu, %d workers: transfer %zu host element %zu: %g, want %g",
                                 slot_elems[si], workers[w], x, e, host[x][e], want);
                }
                cr_assert_eq(placed, s->width * s->height);
            }
            free(f.slots[0]), free(f.slots[1]);
        }
    for (size_t x = 0; x < N_SLABS; x++)
        free(dev[x]), free(host[x]);
}

static int failing_wait(void *ctx, int slot, ac_err *err)
{
    (void)ctx, (void)slot;
    return ac_fail(err, AC_ERR_ENV, "GPU reference: cudaEventSynchronize failed: faked");
}

Test(ref_gpu_transfer, a_device_error_stops_the_download_with_its_status)
{
    double dev[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, host[10] = {0}, a[4], b[4];
    fake_device f = {.dev = {dev}, .slots = {a, b}};
    refg_xfer xf = {host, {0, 10, 10, 1}};
    refg_pipe pipe = {{a, b}, 4, fake_fetch, failing_wait, &f};
    ac_err err = {{0}};
    cr_assert_eq(refg_download(&xf, 1, &pipe, 2, &err), AC_ERR_ENV);
    cr_assert(strstr(err.msg, "cudaEventSynchronize") != NULL, "%s", err.msg);
    for (int e = 0; e < 10; e++)
        cr_assert_eq(host[e], 0.0, "element %d written after the error", e);
}
