/* harness/case/generate.h — the generator: a campaign seed expands to an
 * endless, reproducible stream of case lines inside a kernel's claims.
 * Case k is a pure function of (campaign seed, k, caps, filters); the weights
 * of every choice are listed in generate.c. */
#ifndef ATTNCHECK_GENERATE_H
#define ATTNCHECK_GENERATE_H

#include <stdint.h>

#include "harness/case/case.h"
#include "kernels/kernel.h"

typedef struct {
    uint64_t campaign_seed;
    uint64_t index;           /* cases drawn so far */
    ac_caps caps;             /* only cases inside these are drawn */
    unsigned dtype_filter;    /* bit per ac_dtype; 0 = all the kernel claims */
    unsigned mask_filter;     /* bit (1u << ac_mask_kind) per kind; 0 = all the kernel claims */
    int max_seqlen;           /* cap on nq, nk (keeps CPU kernels in budget); 0 = default */
} ac_gen;
/* max_seqlen 0 means AC_GEN_DEFAULT_MAX_SEQLEN (sized for CPU kernels: cpu-flash with backward
 * runs ~2 000 cases a minute on 2 cores); CUDA campaigns raise it (4096+).  caps.max_seqlen, when set,
 * caps it further. */
#define AC_GEN_DEFAULT_MAX_SEQLEN 512

void ac_gen_init(ac_gen *g, uint64_t campaign_seed, const ac_caps *caps);
/* The next case of the stream: a pure function of (campaign_seed, index, caps, filters).
 * AC_ERR_INPUT when caps and filters leave nothing to draw (no dtype, mask or layout). */
int ac_gen_next(ac_gen *g, ac_case *c, ac_err *err);
/* Case `index` of the stream alone (ac_gen_next without advancing g->index). */
int ac_gen_case_at(const ac_gen *g, uint64_t index, ac_case *c, ac_err *err);
/* The effective cap on nq and nk for this generator. */
int ac_gen_max_seqlen(const ac_gen *g);

#endif
