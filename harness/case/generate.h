/* harness/case/generate.h — the generator: a campaign seed expands to an
 * endless, reproducible stream of case lines inside a kernel's claims.
 * Case k is a pure function of (campaign seed, k, caps, filters, profile,
 * size cap); the weights of every choice are listed in generate.c (the
 * default profile) and generate_long.c (--profile long). */
#ifndef ATTNCHECK_GENERATE_H
#define ATTNCHECK_GENERATE_H

#include <stdbool.h>
#include <stdint.h>

#include "harness/case/case.h"
#include "kernels/kernel.h"

/* What the lengths, heads and shapes are weighted toward. */
typedef enum {
    AC_PROFILE_DEFAULT = 0, /* small shapes, edges, every input distribution */
    AC_PROFILE_LONG, /* 2k..128k contexts: powers of two and +-1, tile-edge remainders,
                             * GQA, decode-like Nq << Nk, tensors crossing 2^31 elements */
    AC_PROFILE_DECODE, /* serving decode: Nq 1..16, Nk 1..128k, batches of very unequal lengths,
                             * GQA packing, paged KV caches and split-KV (generate_decode.c) */
} ac_profile;
/* "default" / "long" -> AC_OK, else AC_ERR_INPUT naming the choices. */
int ac_profile_parse(const char *name, ac_profile *out, ac_err *err);
const char *ac_profile_name(ac_profile p);

/* The size cap: a drawn case that breaks it is made smaller (b = 1, one KV
 * head, then smaller d, then shorter lengths) until it keeps it.  The caller
 * sets it from the reference tier it will use (harness/run/reference.h,
 * ac_reference_gen_cap): on the CPU tier the work cap keeps a case's CPU time
 * bounded and `fits` its memory within the host budget; on the GPU tier
 * `fits` alone (the device plan and the host arrays). */
typedef struct {
    double max_work; /* b*hq*nq*nk*d at most; 0 = the default max(2^22, 16 N^2); < 0 = no work cap */
    bool (*fits)(const ac_case *c, const void *ctx); /* memory; NULL = anything fits */
    const void *ctx;
} ac_gen_cap;

typedef struct {
    uint64_t campaign_seed;
    uint64_t index; /* cases drawn so far */
    ac_caps caps; /* only cases inside these are drawn */
    unsigned dtype_filter; /* bit per ac_dtype; 0 = all the kernel claims */
    unsigned mask_filter; /* bit (1u << ac_mask_kind) per kind; 0 = all the kernel claims */
    int min_seqlen; /* floor on the drawn nq, nk (the long profile's decode-like nq excepted); 0 = 1 */
    int max_seqlen; /* cap on nq, nk (keeps CPU kernels in budget); 0 = default */
    ac_profile profile;
    ac_gen_cap cap;
} ac_gen;
/* max_seqlen 0 means AC_GEN_DEFAULT_MAX_SEQLEN (sized for CPU kernels: cpu-flash with backward
 * runs ~2 000 cases a minute on 2 cores), or AC_GEN_LONG_MAX_SEQLEN with the long profile;
 * caps.max_seqlen, when set, caps it further.  AC_GEN_MAX_SEQLEN is the most the options take. */
#define AC_GEN_DEFAULT_MAX_SEQLEN 512
#define AC_GEN_LONG_MIN_SEQLEN 2048
#define AC_GEN_LONG_MAX_SEQLEN 131072
#define AC_GEN_MAX_SEQLEN 131072

void ac_gen_init(ac_gen *g, uint64_t campaign_seed, const ac_caps *caps);
/* The next case of the stream: a pure function of (campaign_seed, index, caps, filters).
 * AC_ERR_INPUT when caps and filters leave nothing to draw (no dtype, mask or layout,
 * or min_seqlen above the cap). */
int ac_gen_next(ac_gen *g, ac_case *c, ac_err *err);
/* Case `index` of the stream alone (ac_gen_next without advancing g->index). */
int ac_gen_case_at(const ac_gen *g, uint64_t index, ac_case *c, ac_err *err);
/* The effective cap on nq and nk for this generator, and its floor. */
int ac_gen_max_seqlen(const ac_gen *g);
int ac_gen_min_seqlen(const ac_gen *g);
/* The work cap in force: b*hq*nq*nk*d at most (+inf when there is none). */
double ac_gen_max_work(const ac_gen *g);

#endif
