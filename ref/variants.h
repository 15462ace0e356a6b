/* ref/variants.h — the attention variants: one table every component derives from.
 *
 * A variant changes what attention computes beyond the mask: the score
 * modifiers (softcap, ALiBi, an additive bias), learnable sinks in the softmax
 * denominator, sink tokens kept visible under a window, d_v != d_qk, dropout.
 * (The packed THD layout is a layout, AC_LAYOUT_THD, claimed with the layout
 * bits.)  Each row gives the capability bit a kernel claims (AC_VAR_<ID>, the
 * plugin ABI's ATTNCHECK_VARIANT_* values, never renumbered), its name in
 * `attncheck list` and messages, and what it is.  The semantics are ref.h's
 * (the problem's fields) and docs/DESIGN.md's "Variants"; the case line's
 * fields live in harness/case/case.c, the generator's draws in
 * harness/case/gen_variants.c.
 *
 * A problem uses a variant when its field is set (ac_problem_variants); a
 * kernel gets a problem only if it claims every variant the problem uses
 * (kernels/registry.c), so a kernel that claims none sees the problems it saw
 * before variants existed. */
#ifndef ATTNCHECK_VARIANTS_H
#define ATTNCHECK_VARIANTS_H

#include "ref.h"

/*  X(ID,      name,      bit, what) */
#define AC_VARIANTS(X) \
    X(SOFTCAP, "softcap", 0, "a softcap (S' = c tanh(S / c))") \
    X(SINKS, "sinks", 1, "learnable sinks (a logit per head in the softmax denominator, and dSink)") \
    X(DV, "dv", 2, "a value head dim d_v other than d_qk") \
    X(ALIBI, "alibi", 3, "ALiBi (S' -= slope |i + nk - nq - j|, slopes (Hq) or (B, Hq))") \
    X(BIAS, "bias", 4, "an additive bias (1|B, 1|Hq, Nq, Nk), f32 or the dtype, and dBias") \
    X(SINK_TOKENS, "sink-tokens", 5, "sink tokens (the first k keys visible past a window's left edge)") \
    X(DROPOUT, "dropout", 6, "dropout on P (keep / (1 - p)); the kernel returns its keep mask") \
    X(PAGED, "paged", 7, "a paged KV cache (pages of page_size keys read through a block table)") \
    X(SPLIT, "split", 8, "split-KV with num_splits >= 2 key ranges and a combine step")

typedef enum {
#define AC_VARIANT_ENUM_(id, name, bit, what) AC_VARIANT_##id,
    AC_VARIANTS(AC_VARIANT_ENUM_)
#undef AC_VARIANT_ENUM_
        AC_VARIANT_COUNT
} ac_variant;

/* The capability bits: AC_VAR_<ID> = 1u << bit; AC_VAR_ALL is every bit of the table. */
enum {
#define AC_VAR_BIT_(id, name, bit, what) AC_VAR_##id = 1u << (bit),
    AC_VARIANTS(AC_VAR_BIT_)
#undef AC_VAR_BIT_
#define AC_VAR_OR_(id, name, bit, what) | (1u << (bit))
        AC_VAR_ALL = 0 AC_VARIANTS(AC_VAR_OR_),
#undef AC_VAR_OR_
};

const char *ac_variant_name(ac_variant v); /* "softcap"; "?" out of range */
const char *ac_variant_what(ac_variant v); /* "a softcap (S' = c tanh(S / c))" */
unsigned ac_variant_bit(ac_variant v); /* AC_VAR_<ID> */
/* "softcap, ...": every name, for messages. */
const char *ac_variant_names(void);

/* The variants problem p uses, as AC_VAR_* bits. */
unsigned ac_problem_variants(const ac_problem *p);

#endif
