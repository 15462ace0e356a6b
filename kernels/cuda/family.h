/* kernels/cuda/family.h — the CUDA kernel family in one table: names, roles,
 * capabilities and planted bugs.  kernels/cuda/descriptors.c turns each row into
 * a kernel with CUDA entry points; kernels/cuda_none.c (a build without CUDA)
 * turns the same rows into kernels that say "built without CUDA", so
 * `attncheck list` shows the same kernels and claims in either build.
 * Plain C, no CUDA header: both builds include it. */
#ifndef ATTNCHECK_ACD_FAMILY_H
#define ATTNCHECK_ACD_FAMILY_H

#include "../kernel.h"

/* Planted bugs of the fused forward (cuda-flash mutants). */
enum {
    ACD_MUT_NONE = 0,
    ACD_MUT_RACE = 1, /* no barrier before a K/V stage is overwritten */
    ACD_MUT_CAUSAL_SKIP = 2, /* causal/window tile range ends one tile early */
    ACD_MUT_TAIL_UNMASKED = 3, /* keys past the sequence end not masked */
    /* cuda-flash-fp8's (flash_fp8.cu) */
    ACD_MUT_FP8_P_CLAMP = 10, /* P~ scaled by 4096, not onto 448: the largest weights saturate at 448 */
    ACD_MUT_FP8_V_DESCALE_TWICE = 11, /* V's descale applied to the partial sums twice */
    /* cuda-decode's (decode.cu) */
    ACD_MUT_DEC_NO_RESCALE = 20, /* the combine weighs every non-empty split alike, not 2^(LSE_s - LSE) */
    ACD_MUT_DEC_EMPTY_SPLIT_NAN = 21, /* an empty split's partial normalised as 0 / 0 and -inf - -inf: NaN */
    ACD_MUT_DEC_SPLIT_OFF_BY_ONE = 22, /* every split but the last runs one key into the next */
    ACD_MUT_DEC_LAST_PAGE_SLOTS = 23, /* the last page's unused slots read and not masked */
    /* cuda-decode-fp8's (decode.cu): V's descale applied twice reuses ACD_MUT_FP8_V_DESCALE_TWICE */
    /* cuda-decode-mla's (decode_mla.cu) */
    ACD_MUT_MLA_ROPE_FIRST = 24, /* V read from the cache row's last d_v channels (a rope-first layout assumed) */
    ACD_MUT_MLA_NO_ROPE = 25, /* the scores summed over the first 512 channels only: the rotary part dropped */
};

#define ACD_DTYPES ((1u << AC_F32) | (1u << AC_F16) | (1u << AC_BF16))
#define ACD_LAYOUTS ((1u << AC_LAYOUT_BHSD) | (1u << AC_LAYOUT_BSHD))
/* cuda-flash also reads packed THD sequences (cu_seqlens; common.cuh's acd_q_base). */
#define ACD_FLASH_LAYOUTS (ACD_LAYOUTS | (1u << AC_LAYOUT_THD))
/* The variants cuda-flash implements, forward and backward: on every path
 * (wgmma, mma.sync, CUDA cores) the score modifiers softcap, ALiBi and an
 * additive bias with dBias (softmax.cuh's acd_score_mod; dBias by f32 atomics,
 * bwd_dbias_convert) and learnable sinks (the forward's join_sink, the
 * backward's bwd_dsink); d_v != d_qk for the (d_qk, d_v) pairs of
 * ACD_DV_PAIRS, DeepSeek MLA's 192/128 and two more, with tensor-core tiles
 * for f16/bf16 (acd_tc_head_dims: the tiles templated on D_QK and D_V): on
 * Hopper the forward of 192/128 and 256/128 on wgmma, everything else on
 * mma.sync (128/96's forward, every d_v != d_qk backward); f32 on the CUDA
 * cores (flash_f32.cu), the fallback for any other pair. */
#define ACD_FLASH_VARIANTS (AC_VAR_SOFTCAP | AC_VAR_ALIBI | AC_VAR_SINKS | AC_VAR_DV | AC_VAR_BIAS)
#define ACD_DV_PAIRS .dv_pairs = {{192, 128}, {128, 96}, {256, 128}}, .n_dv_pairs = 3

/* Tensor-core tiles are instantiated for d = 32, 64, 96 and 128 with d_v = d
 * and for the d_v != d_qk pairs above (flash_fwd.cu, flash_bwd.cu,
 * flash_fwd_sm90.cu; acd_tc_head_dims); d = 192 and 256 with d_v = d, and f32
 * at every d, run the CUDA-core kernels of flash_f32.cu.  One list serves
 * every dtype. */
#define ACD_CAPS_FLASH(bwd) \
    { \
        .dtypes = ACD_DTYPES, .head_dims = {32, 64, 96, 128, 192, 256}, .n_head_dims = 6, .max_head_dim = 256, \
        .masks = AC_MASKCAP_ALL, .layouts = ACD_FLASH_LAYOUTS, .gqa = true, .varlen = true, .backward = (bwd), \
        .max_seqlen = 0, .variants = ACD_FLASH_VARIANTS, ACD_DV_PAIRS, \
    }

/* The roles a row can have; each build maps a role to its entry points.
 *   flash   the fused forward and backward
 *   mutant  the fused forward with the row's planted bug; no backward
 *   naive   three kernels with S and P in device memory; forward only, and
 *           S (B Hq Nq Nk floats) caps the sequence length */
#define ACD_CAPS_flash ACD_CAPS_FLASH(true)
#define ACD_CAPS_mutant ACD_CAPS_FLASH(false)
#define ACD_CAPS_naive \
    { \
        .dtypes = ACD_DTYPES, .n_head_dims = 0, .max_head_dim = 256, .masks = AC_MASKCAP_ALL, .layouts = ACD_LAYOUTS, \
        .gqa = true, .varlen = true, .backward = false, .max_seqlen = 16384, \
    }

/* X(id, name, role, mutant, description), in the order `attncheck list` shows them. */
#define ACD_FAMILY(X) \
    X(cuda_flash, "cuda-flash", flash, ACD_MUT_NONE, \
      "FlashAttention-2 on tensor cores (mma.sync m16n8k16, f32 accumulate; f32 on CUDA cores), fused forward " \
      "and backward") \
    X(cuda_naive, "cuda-naive", naive, ACD_MUT_NONE, \
      "three kernels: S = QK^T (cuBLAS, f32), masked softmax, O = PV (cuBLAS); S and P in device memory") \
    X(cuda_race, "cuda-flash-mutant-race", mutant, ACD_MUT_RACE, \
      "mutant: no __syncthreads before the next K/V tile overwrites the stage warps still read (a race)") \
    X(cuda_skip, "cuda-flash-mutant-causal-skip", mutant, ACD_MUT_CAUSAL_SKIP, \
      "mutant: the causal/window tile range stops one K/V tile early (the diagonal tile is skipped)") \
    X(cuda_tail, "cuda-flash-mutant-tail-unmasked", mutant, ACD_MUT_TAIL_UNMASKED, \
      "mutant: keys past the sequence end in the last partial K/V tile are not masked")

/* cuda-flash-fp8 (issue 17, flash_fp8.cu, flash_fp8_sm90.cu): e4m3/e5m2 Q, K, V
 * with f32 descale factors (per tensor, per (batch, kv head), per block of
 * rows), O in bf16 or f16, P rounded to e4m3 by the row-max recipe; forward
 * only, d = 64, 128 and 256, every mask kind, GQA, varlen seqlens (BHSD, BSHD).  It
 * declares its products accumulated in e8m13 (ref.h, AC_FP8_ACC_HOPPER): its wgmma path
 * does; the CUDA-core path, more exact, stays inside that contract.  A table of
 * its own: a build without CUDA (kernels/cuda_none.c) does not list these rows yet. */
#define ACD_CAPS_fp8 \
    { \
        .dtypes = AC_DTYPES_FP8, .head_dims = {64, 128, 256}, .n_head_dims = 3, .max_head_dim = 256, \
        .masks = AC_MASKCAP_ALL, .layouts = ACD_LAYOUTS, .gqa = true, .varlen = true, .backward = false, \
        .max_seqlen = 0, .variants = 0, .fp8_p = AC_E4M3, .fp8_acc_bits = AC_FP8_ACC_HOPPER, \
    }
#define ACD_FP8_FAMILY(X) \
    X(cuda_flash_fp8, "cuda-flash-fp8", fp8, ACD_MUT_NONE, \
      "fp8 forward (e4m3/e5m2, f32 descales), P scaled onto 448 by the row max and rounded to e4m3: on Hopper " \
      "at d = 64, 128, 256 fp8 wgmma (QK^T and PV in the tensor cores' e8m13, declared acc=e8m13; V transposed " \
      "by a pre-pass), " \
      "elsewhere (THD, other GPUs) one row per thread on CUDA cores (S in f32)") \
    X(cuda_fp8_clamp, "cuda-flash-fp8-mutant-p-clamp-448", fp8, ACD_MUT_FP8_P_CLAMP, \
      "mutant: P scaled by 4096 instead of onto 448 by the row max: the largest weights saturate at e4m3's 448") \
    X(cuda_fp8_vtwice, "cuda-flash-fp8-mutant-v-descale-twice", fp8, ACD_MUT_FP8_V_DESCALE_TWICE, \
      "mutant: V's descale factor applied twice")

/* cuda-decode (issue 16, decode.cu): paged split-KV decode, f16/bf16, d = 64
 * and 128, a paged KV cache (any page size) or contiguous K/V, GQA packed per
 * CTA, every mask kind, varlen lengths incl. 0 and 1, num_splits (hint or
 * auto) with its own combine kernel; forward only.  A table of its own, listed
 * by both builds. */
#define ACD_CAPS_decode \
    { \
        .dtypes = (1u << AC_F16) | (1u << AC_BF16), .head_dims = {64, 128}, .n_head_dims = 2, .max_head_dim = 128, \
        .masks = AC_MASKCAP_ALL, .layouts = ACD_LAYOUTS, .gqa = true, .varlen = true, .backward = false, \
        .max_seqlen = 0, .variants = AC_VAR_PAGED | AC_VAR_SPLIT, \
    }
/* cuda-decode-fp8 (decode.cu's split kernel on an fp8 KV cache): e4m3/e5m2 Q,
 * K, V with f32 descales per tensor or per (batch, kv head) (block(N) is
 * refused: fp8_no_block_descale), O in bf16 or f16, d = 64 and 128, paged or
 * contiguous, GQA, every mask kind, varlen, split-KV; forward only.  The codes
 * are widened exactly to f16 for mma.sync (f32 accumulate: exact products, so
 * acc = f32) and P is rounded to f16, unscaled. */
#define ACD_CAPS_decode_fp8 \
    { \
        .dtypes = AC_DTYPES_FP8, .head_dims = {64, 128}, .n_head_dims = 2, .max_head_dim = 128, \
        .masks = AC_MASKCAP_ALL, .layouts = ACD_LAYOUTS, .gqa = true, .varlen = true, .backward = false, \
        .max_seqlen = 0, .variants = AC_VAR_PAGED | AC_VAR_SPLIT, .fp8_p = AC_F16, .fp8_acc_bits = 0, \
        .fp8_no_block_descale = true, \
    }
/* cuda-decode-mla (decode_mla.cu, MLA decode as DeepSeek-V2/V3 serve it):
 * f16/bf16, d = 576 with d_v = 512 (or 576), V read as K's first d_v channels
 * (v_from_k: given only v=k problems), any GQA group (MLA's is Hq:1), paged or
 * contiguous, every mask kind, varlen, split-KV with cuda-decode's combine;
 * forward only. */
#define ACD_CAPS_decode_mla \
    { \
        .dtypes = (1u << AC_F16) | (1u << AC_BF16), .head_dims = {576}, .n_head_dims = 1, .max_head_dim = 576, \
        .masks = AC_MASKCAP_ALL, .layouts = ACD_LAYOUTS, .gqa = true, .varlen = true, .backward = false, \
        .max_seqlen = 0, .variants = AC_VAR_PAGED | AC_VAR_SPLIT | AC_VAR_DV, .dv_pairs = {{576, 512}}, \
        .n_dv_pairs = 1, .v_from_k = true, \
    }
#define ACD_DECODE_FAMILY(X) \
    X(cuda_decode, "cuda-decode", decode, ACD_MUT_NONE, \
      "paged split-KV decode: a CTA per (sequence, KV head, 16 packed GQA rows, split), each warp streaming its " \
      "16-key tiles through a cp.async pipeline (mma.sync, f32 online softmax), then a combine kernel") \
    X(cuda_dec_norescale, "cuda-decode-mutant-combine-no-rescale", decode, ACD_MUT_DEC_NO_RESCALE, \
      "mutant: the combine weighs the splits' partial O alike instead of rescaling them to the common max") \
    X(cuda_dec_emptynan, "cuda-decode-mutant-empty-split-nan", decode, ACD_MUT_DEC_EMPTY_SPLIT_NAN, \
      "mutant: an empty split writes O_s = 0/0 and LSE_s = -inf - -inf (NaN) instead of 0 and -inf") \
    X(cuda_dec_offbyone, "cuda-decode-mutant-split-off-by-one", decode, ACD_MUT_DEC_SPLIT_OFF_BY_ONE, \
      "mutant: every split but the last runs one key past its boundary (that key counted twice)") \
    X(cuda_dec_lastpage, "cuda-decode-mutant-last-page-slots", decode, ACD_MUT_DEC_LAST_PAGE_SLOTS, \
      "mutant: the last page's unused slots are read and not masked") \
    X(cuda_decode_fp8, "cuda-decode-fp8", decode_fp8, ACD_MUT_NONE, \
      "cuda-decode on an fp8 KV cache (e4m3/e5m2, f32 descales per tensor or (batch, kv head)): K/V tiles copied " \
      "as fp8 bytes, widened exactly to f16 for mma.sync (f32 accumulate), P rounded to f16; O in bf16/f16") \
    X(cuda_dec_fp8_vtwice, "cuda-decode-fp8-mutant-v-descale-twice", decode_fp8, ACD_MUT_FP8_V_DESCALE_TWICE, \
      "mutant: V's descale factor applied twice in the epilogue") \
    X(cuda_decode_mla, "cuda-decode-mla", decode_mla, ACD_MUT_NONE, \
      "MLA decode (d 576, d_v 512, V read from K's latent rows): a CTA per (sequence, KV head, 16 packed rows, " \
      "split), its 4 warps sharing 32-key tiles, Q K^T cut by channels across the warps, P V by O's columns") \
    X(cuda_dec_mla_ropefirst, "cuda-decode-mla-mutant-rope-first", decode_mla, ACD_MUT_MLA_ROPE_FIRST, \
      "mutant: V read from the cache row's last d_v channels, as if the rotary channels came first") \
    X(cuda_dec_mla_norope, "cuda-decode-mla-mutant-rope-dropped", decode_mla, ACD_MUT_MLA_NO_ROPE, \
      "mutant: the scores summed over the first 512 channels only (the 64 rotary channels dropped)")

#endif
