/* harness/run/call.c — one entry (forward or backward) of a kernel on an arena
 * (arena.h), in whichever process runs it: this one with --in-process, the
 * worker otherwise.
 *
 * Host-memory kernels get pointers into the arena.  AC_MEM_CUDA kernels get
 * device copies: every tensor and output the entry uses is staged as one allocation of
 * its block (an output with both guard zones, their canaries included),
 * uploaded, and after the call and a synchronisation downloaded back whole,
 * inputs too, so the caller's guard and input checks see what the device
 * holds.  A fault the kernel caused on the device (illegal or misaligned
 * address, trap, assert, illegal instruction: ac_dev_sync_kernel) outranks
 * whatever the kernel returned, since kernels report a sticky fault from
 * their own synchronisation as an environment error. */
#include <string.h>

#include "harness/run/arena.h"
#include "harness/run/call.h"

static void *host_at(const ac_arena_layout *l, uint8_t *base, ac_buf b)
{
    return l->bytes[b] ? base + l->off[b] : NULL;
}

static int invoke(const ac_kernel *k, ac_entry e, const ac_problem *p, ac_dtype t, void *const at[AC_BUF_COUNT],
                  ac_err *err)
{
    if (e == AC_ENTRY_FORWARD) {
        ac_fwd_args a = {.q = at[AC_BUF_Q],
                         .k = at[AC_BUF_K],
                         .v = at[AC_BUF_V],
                         .o = at[AC_BUF_O],
                         .lse = at[AC_BUF_LSE],
                         .dropout_mask = at[AC_BUF_DROPOUT]};
        return k->forward(k, p, t, &a, err);
    }
    ac_bwd_args a = {.q = at[AC_BUF_Q],
                     .k = at[AC_BUF_K],
                     .v = at[AC_BUF_V],
                     .o = at[AC_BUF_O],
                     .d_o = at[AC_BUF_DO],
                     .lse = at[AC_BUF_LSE],
                     .dq = at[AC_BUF_DQ],
                     .dk = at[AC_BUF_DK],
                     .dv = at[AC_BUF_DV],
                     .dsink = at[AC_BUF_DSINK],
                     .dbias = at[AC_BUF_DBIAS]};
    return k->backward(k, p, t, &a, err);
}

/* ---- device staging ----------------------------------------------------------- */

/* The problem's arrays (lengths, mask, cu_seqlens, sinks, slopes, bias) stay
 * in host memory (kernel.h, ref.h: every array of ac_problem is host memory);
 * the tensors and every output, the dropout mask and dSink, dBias included,
 * are staged. */
static bool staged(const ac_arena_layout *l, ac_entry e, ac_buf b)
{
    bool problem_array = b >= AC_BUF_SEQLENS_Q && b < AC_BUF_FIRST_OUTPUT;
    return l->bytes[b] && ac_entry_uses(e, b) && !problem_array;
}

static uint64_t guard_of(ac_buf b) { return ac_buf_is_output(b) ? AC_GUARD_BYTES : 0; }

typedef struct {
    void *block[AC_BUF_COUNT]; /* device allocations, guards included */
} dev_blocks;

static void dev_release(dev_blocks *d)
{
    for (int b = 0; b < AC_BUF_COUNT; b++)
        if (d->block[b])
            ac_dev_free(d->block[b]);
    memset(d, 0, sizeof *d);
}

static int dev_stage_all(const ac_arena_layout *l, ac_entry e, uint8_t *base, dev_blocks *d, void *at[AC_BUF_COUNT],
                         ac_err *err)
{
    for (int b = 0; b < AC_BUF_COUNT; b++) {
        if (!staged(l, e, (ac_buf)b))
            continue;
        uint64_t g = guard_of((ac_buf)b), bytes = l->bytes[b] + 2 * g;
        int st = ac_dev_alloc(&d->block[b], bytes, err);
        if (st == AC_OK)
            st = ac_dev_upload(d->block[b], base + l->off[b] - g, bytes, err);
        if (st != AC_OK)
            return st;
        at[b] = (uint8_t *)d->block[b] + g;
    }
    return AC_OK;
}

static int dev_download_all(const ac_arena_layout *l, uint8_t *base, const dev_blocks *d, ac_err *err)
{
    for (int b = 0; b < AC_BUF_COUNT; b++) {
        if (!d->block[b])
            continue;
        uint64_t g = guard_of((ac_buf)b);
        int st = ac_dev_download(base + l->off[b] - g, d->block[b], l->bytes[b] + 2 * g, err);
        if (st != AC_OK)
            return st;
    }
    return AC_OK;
}

static int call_device(const ac_kernel *k, ac_entry e, const ac_problem *p, const ac_arena_layout *l, uint8_t *base,
                       ac_err *err)
{
    void *at[AC_BUF_COUNT] = {0};
    dev_blocks d = {{0}};
    int st = dev_stage_all(l, e, base, &d, at, err);
    if (st == AC_OK) {
        int kst = invoke(k, e, p, (ac_dtype)l->dtype, at, err);
        ac_err sync_err = {{0}};
        int sst = ac_dev_sync_kernel(&sync_err);
        if (kst == AC_KERNEL_FAULT) /* the kernel's own words (a plugin's device fault names its entry) */
            st = kst;
        else if (sst == AC_KERNEL_FAULT)
            st = ac_fail(err, sst, "%s, after %s", sync_err.msg, ac_entry_name(e));
        else if (kst != AC_OK || sst == AC_OK)
            st = kst;
        else
            *err = sync_err, st = sst;
        if (sst == AC_OK) { /* outputs and guards come back even when the kernel gave up: a scribble still shows */
            ac_err dl_err = {{0}};
            int dst = dev_download_all(l, base, &d, &dl_err);
            if (st == AC_OK && dst != AC_OK)
                *err = dl_err, st = dst;
        }
    }
    dev_release(&d);
    return st;
}

int ac_call_entry(const ac_kernel *k, ac_entry e, const ac_problem *p, const ac_arena_layout *l, uint8_t *base,
                  ac_err *err)
{
    ac_problem q = ac_arena_problem(p, l, base);
    if (k->memory == AC_MEM_CUDA)
        return call_device(k, e, &q, l, base, err);
    void *at[AC_BUF_COUNT];
    for (int b = 0; b < AC_BUF_COUNT; b++)
        at[b] = ac_entry_uses(e, (ac_buf)b) ? host_at(l, base, (ac_buf)b) : NULL;
    return invoke(k, e, &q, (ac_dtype)l->dtype, at, err);
}
