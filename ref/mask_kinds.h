/* ref/mask_kinds.h — the mask kinds: one table every component derives from.
 *
 * One row per kind a case line can name.  From it come the case's mask kind
 * (ac_mask_kind), the capability bits a kernel claims (AC_MASKCAP_*, in
 * kernels/kernel.h), the spellings of case lines, of `--mask` in fuzz and
 * check and of `attncheck list`, and the message for a kernel lacking one.
 * What a kind means for the problem is ref.h's visibility rule (and
 * ac_problem_masks below); how a case line writes its parameters, how the
 * generator draws them and how the shrinker simplifies them is one row of
 * harness/case/masks.c.  docs/DESIGN.md, "Adding a mask kind", lists the rest.
 *
 * Columns:
 *   ID           AC_MASK_<ID>, and AC_MASKCAP_<ID> in kernels/kernel.h
 *   spelling     in case lines ("mask=window-br(8,0)"), --mask, attncheck list
 *   bit          the capability bit (1u << bit): the plugin ABI's ATTNCHECK_MASK_*
 *                values, never renumbered; the two windows share one
 *   alignment    of the window the kind describes (AC_ALIGN_*)
 *   claimed with another kind a kernel must also claim to get this one: a window
 *                comes in the alignments claimed for causal (itself otherwise)
 *   what         for "kernel 'k' does not support ..."
 */
#ifndef ATTNCHECK_MASK_KINDS_H
#define ATTNCHECK_MASK_KINDS_H

#include "ref.h"

/*  X(ID,        spelling,    bit, alignment,             claimed with, what) */
#define AC_MASK_KINDS(X) \
    X(NONE, "none", 0, AC_ALIGN_TOP_LEFT, NONE, "an unmasked problem") \
    X(CAUSAL_TL, "causal-tl", 1, AC_ALIGN_TOP_LEFT, CAUSAL_TL, "a causal mask aligned top-left") \
    X(CAUSAL_BR, "causal-br", 2, AC_ALIGN_BOTTOM_RIGHT, CAUSAL_BR, "a causal mask aligned bottom-right") \
    X(WINDOW_TL, "window-tl", 3, AC_ALIGN_TOP_LEFT, CAUSAL_TL, "a sliding window aligned top-left") \
    X(WINDOW_BR, "window-br", 3, AC_ALIGN_BOTTOM_RIGHT, CAUSAL_BR, "a sliding window aligned bottom-right") \
    X(DENSE, "dense", 4, AC_ALIGN_TOP_LEFT, DENSE, "a dense boolean mask")

typedef enum {
#define AC_MASK_ENUM_(id, spelling, bit, align, with, what) AC_MASK_##id,
    AC_MASK_KINDS(AC_MASK_ENUM_)
#undef AC_MASK_ENUM_
        AC_MASK_KIND_COUNT
} ac_mask_kind;

const char *ac_mask_name(ac_mask_kind k); /* "causal-br"; "?" out of range */
const char *ac_mask_what(ac_mask_kind k); /* "a causal mask aligned bottom-right" */
ac_align ac_mask_align(ac_mask_kind k);
unsigned ac_mask_bit(ac_mask_kind k); /* its capability bit, 1u << bit */
unsigned ac_mask_needs(ac_mask_kind k); /* the bits a kernel claims to get it */
/* The kind spelled name[0..len) (len: strlen when the name ends there); AC_OK or AC_ERR_INPUT. */
int ac_mask_from_name(const char *name, size_t len, ac_mask_kind *out);
/* "none, causal-tl, causal-br, window-tl, window-br, dense": for messages. */
const char *ac_mask_names(void);

/* The kinds problem p uses, a bit (1u << ac_mask_kind) each: its window
 * (causal is the window (inf, 0)) in its alignment, its dense mask, or none. */
unsigned ac_problem_masks(const ac_problem *p);

#endif
