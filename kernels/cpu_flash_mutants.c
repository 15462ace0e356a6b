/* kernels/cpu_flash_mutants.c — planted bugs: cpu-flash (64x64 tiles) with one
 * deviation each, every one a way real fused attention kernels have gone wrong.
 * The deviation itself sits in cpu_flash.c behind `cp->mut == CF_MUT_X`; here
 * are only the names and what each bug is.  They claim exactly what cpu-flash
 * claims: the harness, not the capability list, must catch them. */
#include "cpu_flash_internal.h"

#define MUTANT(ID, SUFFIX, WHAT) \
    { \
        .name = "cpu-flash-mutant-" SUFFIX, .description = "mutant of cpu-flash: " WHAT, .caps = CF_CAPS, \
        .device = AC_DEV_CPU, .memory = AC_MEM_HOST, .available = NULL, .forward = cf_forward, \
        .backward = cf_backward, .ctx = &mutant_params[ID], \
    }

#define PARAMS(ID) [ID] = {.block_q = 64, .block_k = 64, .mut = ID}

static const cpu_flash_params mutant_params[CF_MUT_COUNT] = {
    PARAMS(CF_MUT_NO_RESCALE_L),
    PARAMS(CF_MUT_NO_RESCALE_O),
    PARAMS(CF_MUT_NO_MAX_SUBTRACTION),
    PARAMS(CF_MUT_PER_TILE_NORMALISE),
    PARAMS(CF_MUT_CAUSAL_OFF_BY_ONE),
    PARAMS(CF_MUT_CAUSAL_TL_FOR_BR),
    PARAMS(CF_MUT_WINDOW_EDGE),
    PARAMS(CF_MUT_LAST_KV_UNMASKED),
    PARAMS(CF_MUT_LAST_Q_UNWRITTEN),
    PARAMS(CF_MUT_GQA_HEAD_MOD),
    PARAMS(CF_MUT_MASKED_ROW_NAN),
    PARAMS(CF_MUT_O_ACCUM_IN_DTYPE),
    PARAMS(CF_MUT_LSE_LOG2),
    PARAMS(CF_MUT_LSE_WITHOUT_MAX),
    PARAMS(CF_MUT_BWD_DELTA_WRONG_ROW),
    PARAMS(CF_MUT_BWD_NO_GQA_SUM),
    PARAMS(CF_MUT_BWD_SCALE_TWICE),
    PARAMS(CF_MUT_BWD_NO_SCALE),
    PARAMS(CF_MUT_SOFTCAP_BEFORE_SCALE),
    PARAMS(CF_MUT_SINK_NOT_IN_LSE),
    PARAMS(CF_MUT_DV_WITH_DQK_STRIDE),
    PARAMS(CF_MUT_CU_SEQLENS_LATE),
    PARAMS(CF_MUT_ALIBI_TOP_LEFT),
    PARAMS(CF_MUT_BIAS_WRONG_AXIS),
    PARAMS(CF_MUT_SINK_TOKENS_OFF_BY_ONE),
    PARAMS(CF_MUT_DROPOUT_NO_RESCALE),
    PARAMS(CF_MUT_COMBINE_NO_RESCALE),
    PARAMS(CF_MUT_EMPTY_SPLIT_NAN),
    PARAMS(CF_MUT_SPLIT_OFF_BY_ONE),
    PARAMS(CF_MUT_PAGE_SIZE_WRONG),
    PARAMS(CF_MUT_LAST_PAGE_SLOTS),
    PARAMS(CF_MUT_LATER_SEQ_UNWRITTEN),
};

static const ac_kernel mutants[] = {
    MUTANT(CF_MUT_NO_RESCALE_L, "no-rescale-l",
           "the running denominator l is not rescaled by exp(m_old - m_new) when a later tile raises the max"),
    MUTANT(CF_MUT_NO_RESCALE_O, "no-rescale-o",
           "the un-normalised accumulator O is not rescaled by exp(m_old - m_new) when a later tile raises the max"),
    MUTANT(CF_MUT_NO_MAX_SUBTRACTION, "no-max-subtraction",
           "P = exp(S) without subtracting the running max: overflows (Inf, NaN) for large scores"),
    MUTANT(CF_MUT_PER_TILE_NORMALISE, "per-tile-normalise",
           "O divided by l after every tile, and the next tile rescales it by exp(m_old - m_new) only, "
           "forgetting the old l"),
    MUTANT(CF_MUT_CAUSAL_OFF_BY_ONE, "causal-off-by-one",
           "the causal (right) mask edge is off by one: key c + right + 1 is visible (col <= row + 1)"),
    MUTANT(CF_MUT_CAUSAL_TL_FOR_BR, "causal-tl-for-br",
           "top-left causal/window alignment used where bottom-right was asked (wrong only when Nq != Nk)"),
    MUTANT(CF_MUT_WINDOW_EDGE, "window-edge-off-by-one",
           "the sliding window's left edge is off by one: key c - left is hidden"),
    MUTANT(CF_MUT_LAST_KV_UNMASKED, "last-kv-tile-unmasked",
           "keys past the sequence end in the last partial K/V tile are not masked (padding, or zeros, "
           "enter the softmax)"),
    MUTANT(CF_MUT_LAST_Q_UNWRITTEN, "last-q-tile-unwritten",
           "the grid has nq / Br Q tiles (floor): the last partial Q tile's O and LSE are never written"),
    MUTANT(CF_MUT_GQA_HEAD_MOD, "gqa-head-mod",
           "GQA head mapping h % Hkv instead of h / (Hq / Hkv): query heads read another group's K/V"),
    MUTANT(CF_MUT_MASKED_ROW_NAN, "masked-row-nan",
           "no -inf guard on the running max: exp(-inf - -inf) makes fully masked rows NaN instead of 0"),
    MUTANT(CF_MUT_O_ACCUM_IN_DTYPE, "o-accum-in-dtype",
           "the PV product accumulated in the input dtype (f16/bf16) instead of f32"),
    MUTANT(CF_MUT_LSE_LOG2, "lse-log2",
           "LSE written in log2 units (m log2(e) + log2 l): O right, LSE and the backward wrong"),
    MUTANT(CF_MUT_LSE_WITHOUT_MAX, "lse-without-max",
           "LSE written as log(l), the running max left out: O right, LSE and the backward wrong"),
    MUTANT(CF_MUT_BWD_DELTA_WRONG_ROW, "bwd-delta-wrong-row",
           "backward: D_i = rowsum(dO_i * O_{i+1}), the next row's O"),
    MUTANT(CF_MUT_BWD_NO_GQA_SUM, "bwd-no-gqa-sum",
           "backward: dK, dV of a kv head overwritten by each query head of its GQA group instead of summed"),
    MUTANT(CF_MUT_BWD_SCALE_TWICE, "bwd-scale-twice", "backward: the softmax scale applied twice to dQ and dK"),
    MUTANT(CF_MUT_BWD_NO_SCALE, "bwd-no-scale", "backward: the softmax scale never applied to dQ and dK"),
    /* the variants' */
    MUTANT(CF_MUT_SOFTCAP_BEFORE_SCALE, "softcap-before-scale",
           "softcap: c tanh(QK^T / c) times the scale, the cap applied before the scale instead of after"),
    MUTANT(CF_MUT_SINK_NOT_IN_LSE, "sink-not-in-lse",
           "sinks: O normalised with the sink in the denominator, LSE written without it"),
    MUTANT(CF_MUT_DV_WITH_DQK_STRIDE, "dv-with-dqk-stride",
           "d_v != d_qk: V's rows addressed with d_qk's stride, as if V had Q's and K's head dim"),
    MUTANT(CF_MUT_CU_SEQLENS_LATE, "cu-seqlens-late",
           "packed THD: K and V of sequence b read from cu_seqlens_k[b + 1], one sequence late"),
    MUTANT(CF_MUT_ALIBI_TOP_LEFT, "alibi-top-left",
           "ALiBi's distance top-left aligned, |i - j| instead of |i + nk - nq - j| (wrong only when nq != nk)"),
    MUTANT(CF_MUT_BIAS_WRONG_AXIS, "bias-wrong-axis",
           "the bias broadcast over the wrong axis: batch b reads the bias's head row b mod its heads, head h "
           "its batch row h mod its batches (right only for a (1, 1) bias or b = h = 0)"),
    MUTANT(CF_MUT_SINK_TOKENS_OFF_BY_ONE, "sink-tokens-off-by-one",
           "sink tokens: the first k + 1 keys kept visible past the window's left edge instead of k"),
    MUTANT(CF_MUT_DROPOUT_NO_RESCALE, "dropout-no-rescale",
           "dropout: the kept P not rescaled by 1 / (1 - p) (O and the gradients shrink by 1 - p)"),
    MUTANT(CF_MUT_COMBINE_NO_RESCALE, "combine-no-rescale",
           "split-KV: the combine sums the splits' partial O and l without rescaling each to the common max"),
    MUTANT(CF_MUT_EMPTY_SPLIT_NAN, "empty-split-nan",
           "split-KV: an empty split's partial normalised anyway, its -inf LSE turned to NaN (0/0, -inf - -inf)"),
    MUTANT(CF_MUT_SPLIT_OFF_BY_ONE, "split-off-by-one",
           "split-KV: each split boundary off by one key (the next split's first key counted twice)"),
    MUTANT(CF_MUT_PAGE_SIZE_WRONG, "page-size-wrong",
           "paged KV: the page index computed with the wrong page size (entry j / 2P, slot j % P)"),
    MUTANT(CF_MUT_LAST_PAGE_SLOTS, "last-page-slots",
           "paged KV: whole pages read, the last page's unused slots past nk not masked"),
    MUTANT(CF_MUT_LATER_SEQ_UNWRITTEN, "later-seq-unwritten",
           "decode: the grid one sequence short, the last sequence's output rows never written"),
};

size_t cf_mutant_kernels(const ac_kernel **out, size_t max)
{
    size_t n = 0;
    for (; n < sizeof mutants / sizeof mutants[0] && n < max; n++)
        out[n] = &mutants[n];
    return n;
}
