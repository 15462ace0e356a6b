/* harness/run/arena.h — one case's kernel buffers in one block of memory, with
 * guard zones; internal to harness/run/ (run.c, call.c, worker*.c, plugin.c).
 *
 * The block ("arena") holds the inputs the kernel reads (Q, K, V, dO, the
 * sequence lengths, the dense mask, and the variants' arrays: THD's
 * cu_seqlens, the sinks, the ALiBi slopes, the bias; a paged cache's block
 * table, K and V then being its pages) and the outputs it writes
 * (O, LSE, the dropout keep mask, dQ, dK, dV, and the variants' parameter
 * gradients dSink, dBias), each output between two guard zones of
 * AC_GUARD_BYTES canary bytes:
 *
 *   Q K V dO seqlens_q seqlens_k mask cu_seqlens_q cu_seqlens_k sinks alibi bias block_table descale_q descale_k descale_v
 *   | G O G | G LSE G | G dropout_mask G | G dQ G | G dK G | G dV G | G dSink G | G dBias G
 *
 * Sizes come from the problem (ac_tensor_elems: V, O, dO, dV with d_v
 * columns; THD's packed rows and its (Hq, total_q) LSE); a buffer the case
 * does not use has 0 bytes and is absent.
 * It is the same layout in this process (--in-process: a private block), in
 * the worker (a memfd both processes map) and on the device (every buffer is
 * staged as one allocation of its block, guards included, and downloaded
 * back whole), so one check serves all three: after a call, a changed canary
 * byte is an out-of-bounds write named by buffer and element offset, and an
 * input that differs from the parent's own copy (ac_inputs) was modified. */
#ifndef ATTNCHECK_ARENA_H
#define ATTNCHECK_ARENA_H

#include <stdbool.h>
#include <stdint.h>

#include "harness/run/inputs.h"
#include "kernels/kernel.h"

typedef enum {
    AC_BUF_Q,
    AC_BUF_K,
    AC_BUF_V,
    AC_BUF_DO,
    AC_BUF_SEQLENS_Q,
    AC_BUF_SEQLENS_K,
    AC_BUF_MASK,
    AC_BUF_CU_SEQLENS_Q,
    AC_BUF_CU_SEQLENS_K,
    AC_BUF_SINKS,
    AC_BUF_ALIBI,
    AC_BUF_BIAS,
    AC_BUF_BLOCK_TABLE,
    AC_BUF_DESCALE_Q,
    AC_BUF_DESCALE_K,
    AC_BUF_DESCALE_V, /* fp8's f32 descale factors */
    AC_BUF_O,
    AC_BUF_LSE,
    AC_BUF_DROPOUT,
    AC_BUF_DQ,
    AC_BUF_DK,
    AC_BUF_DV,
    AC_BUF_DSINK,
    AC_BUF_DBIAS,
    AC_BUF_COUNT,
    AC_BUF_FIRST_OUTPUT = AC_BUF_O,
} ac_buf;

/* The dropout keep mask's poison: every byte this (half the pairs kept, the
 * same pattern everywhere, so a mask the kernel never wrote cannot pass the
 * checks of harness/run/dropout.h and the outputs judged under it). */
#define AC_DROPOUT_POISON 0xA5

/* Canary bytes on each side of every output: 64 f32 past O, 16 past LSE and
 * a stray write just before a buffer all land in them.  A multiple of 256, so
 * a device buffer inside its staged block keeps cudaMalloc's alignment. */
#define AC_GUARD_BYTES 4096

typedef enum { AC_ENTRY_FORWARD = 0, AC_ENTRY_BACKWARD = 1 } ac_entry;

typedef struct {
    uint64_t off[AC_BUF_COUNT]; /* byte offset of the buffer itself (outputs: inside their guards) */
    uint64_t bytes[AC_BUF_COUNT]; /* 0: absent (no dO without backward, no lengths, no mask) */
    uint64_t total; /* bytes of the whole arena */
    int32_t dtype; /* ac_dtype of the inputs */
    int32_t out_dtype; /* ac_dtype of O, dQ, dK, dV */
    int32_t bias_dtype; /* ac_dtype of the bias and dBias */
} ac_arena_layout;

const char *ac_buf_name(ac_buf b); /* "Q", ..., "LSE", "dV", "dSink", "dBias" */
bool ac_buf_is_output(ac_buf b);
/* Does the entry hand buffer b to the kernel?  (forward: Q K V, lengths, mask,
 * the variants' arrays, O LSE dropout_mask; backward: all of those but the
 * dropout mask (it draws again from the seed), dO, dQ dK dV dSink dBias; O
 * and LSE are its inputs) */
bool ac_entry_uses(ac_entry e, ac_buf b);
/* Does the entry write b?  (forward: O, LSE, dropout_mask; backward: dQ, dK, dV, dSink, dBias) */
bool ac_entry_writes(ac_entry e, ac_buf b);
const char *ac_entry_name(ac_entry e); /* "forward", "backward" */

/* Where everything of this case goes; backward: room for dO, dQ, dK, dV (and dSink, dBias). */
void ac_arena_plan(const ac_inputs *in, bool backward, ac_arena_layout *l);
/* Copies the inputs (Q, K, V, dO, lengths, mask, the variants' arrays) into the arena. */
void ac_arena_put_inputs(const ac_arena_layout *l, const ac_inputs *in, uint8_t *base);
/* Before entry e: poisons the outputs it writes and fills their guards. */
void ac_arena_arm(const ac_arena_layout *l, ac_entry e, uint8_t *base);
/* The problem as the kernel sees it: in->p with its lengths, mask and variant
 * arrays in the arena, dropout_keep NULL (the reference's input, not the kernel's). */
ac_problem ac_arena_problem(const ac_problem *p, const ac_arena_layout *l, uint8_t *base);
/* Every array pointer of p set to NULL: the problem as the worker's request
 * carries it (its scalars travel as they are; its arrays are in the arena). */
void ac_problem_strip_arrays(ac_problem *p);

/* After entry e: AC_OK, or AC_KERNEL_FAULT with "out-of-bounds-write: ..."
 * (a guard of an output it writes changed: which buffer, which elements) or
 * "input-modified: ..." (an input differs from in's copy, or for the backward
 * from the forward's O and LSE in fwd_o/fwd_lse: which tensor, which element). */
int ac_arena_check(const ac_arena_layout *l, ac_entry e, const uint8_t *base, const ac_inputs *in, const void *fwd_o,
                   const float *fwd_lse, ac_err *err);

/* ---- canaries (also plugin.c's errbuf guard) ---- */
void ac_canary_fill(uint8_t *buf, size_t n);
/* First and last byte that differs from the canary, or false when none does. */
bool ac_canary_damage(const uint8_t *buf, size_t n, size_t *first, size_t *last);

#endif
