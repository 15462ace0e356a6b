/* harness/case/generate_internal.h — shared by generate.c, generate_long.c, generate_decode.c and
 * gen_variants.c only: the pieces of a draw they share. */
#ifndef ATTNCHECK_GENERATE_INTERNAL_H
#define ATTNCHECK_GENERATE_INTERNAL_H

#include <stdbool.h>

#include "harness/case/case_internal.h"
#include "harness/case/generate.h"

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* One of the n values <= max (uniform), or fallback when none is. */
int gen_pick_le(case_rng *r, const int *vals, int n, int max, int fallback);
/* A head dim inside the kernel's claims (its listed dims, else the default weights). */
int gen_draw_head_dim(case_rng *r, const ac_caps *caps);
/* The largest head dim drawn for a kernel without listed dims: its max_head_dim,
 * at most AC_GEN_HEAD_DIM_TOP (MLA decode's 576 is drawn as a shape of its own). */
#define AC_GEN_HEAD_DIM_TOP 512
int gen_head_dim_top(const ac_caps *caps);
/* A mask kind by the weights w (the claimed and filtered kinds) and its parameters. */
void gen_draw_mask(case_rng *r, const int w[AC_MASK_KIND_COUNT], ac_case *c);
/* Per-sequence lengths in 0..padded: 0 (5%), 1 (10%), padded (25%), else uniform in 1..padded. */
void gen_draw_lens(case_rng *r, int batch, int padded, int *lens);
/* len folded into [min_seqlen, max_seqlen] (unchanged when already inside). */
int gen_fold_length(const ac_gen *g, int len);
/* Whether c keeps the size cap (work and memory); gen_apply_cap shrinks it until it does. */
bool gen_keeps_cap(const ac_gen *g, const ac_case *c);
void gen_apply_cap(const ac_gen *g, ac_case *c);

/* The long profile's lengths, batch, heads, head dim and mask (generate_long.c). */
void gen_long_shape(case_rng *r, const ac_gen *g, const int mw[AC_MASK_KIND_COUNT], ac_case *c);
/* A long-context length in lo..hi: a power of two (+-1), a tile-edge remainder, or uniform. */
int gen_long_length(case_rng *r, int lo, int hi);
/* The decode profile's shape, paging and splits (generate_decode.c). */
void gen_decode_shape(case_rng *r, const ac_gen *g, const int mw[AC_MASK_KIND_COUNT], ac_case *c);

#endif
