/* harness/case/gen_variants.h — internal to harness/case/: the generator's
 * draws of the variants (gen_variants.c), called by generate.c once the
 * plain case is drawn. */
#ifndef ATTNCHECK_GEN_VARIANTS_H
#define ATTNCHECK_GEN_VARIANTS_H

#include "harness/case/case_internal.h"
#include "kernels/kernel.h"

/* Adds to case c (sizes, mask and scale already drawn) the variants of case
 * `index` of the campaign: only those caps claim, from a random stream of
 * their own, so the plain part of every case is what it was before variants
 * existed (a kernel claiming none gets exactly the old stream). */
void case_variants_draw(uint64_t campaign_seed, uint64_t index, const ac_caps *caps, ac_case *c);
/* A paged KV cache for c (page size, table order, lengths), and a split count:
 * the default profile's draws (12% of a paging kernel's cases) and the decode
 * profile's (generate_decode.c). */
void gen_draw_paging(case_rng *r, ac_case *c);
int gen_draw_splits(case_rng *r, const ac_case *c);
/* After the work cap (which may halve d): a d_v no longer one of the
 * kernel's (d_qk, d_v) pairs is dropped. */
void case_variants_after_cap(const ac_caps *caps, ac_case *c);
/* Whether c uses a variant or the THD layout: what the GPU reference tier
 * does not compute (ref_gpu_supports), so the generator's size cap stays the
 * CPU tier's for it. */
bool case_variants_any(const ac_case *c);
/* The decode profile: 15% of the cases of a kernel that takes d_qk = 576 with d_v = 512 (GQA) become
 * MLA decode's shape (one KV head, 16-128 query heads), V half the time K's first 512 channels (v=k),
 * from a stream of its own. */
void case_mla_draw(uint64_t campaign_seed, uint64_t index, const ac_caps *caps, ac_case *c);
/* A kernel that reads V from K (caps v_from_k): every case v=k, its d_v at most d (after the size cap). */
void case_vk_apply(const ac_caps *caps, ac_case *c);
/* fp8 dtypes (gen_fp8.c): out, descale, the kernel's declared p, from a stream of their own. */
void case_fp8_draw(uint64_t campaign_seed, uint64_t index, const ac_caps *caps, ac_case *c);

#endif
