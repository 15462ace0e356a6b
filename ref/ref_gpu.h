/* ref/ref_gpu.h — the GPU reference tier: the fp64 reference (forward and
 * backward), the error scales and the same-dtype naive baseline of one case,
 * computed on a CUDA device, and the CPU spot check that certifies them.
 *
 * What it computes is exactly what harness/reference.c's ac_reference holds
 * (ref.h's ref_forward_fp64, ref_backward_fp64, ref_error_scales,
 * ref_naive_forward/_backward, and ref_lse_error_scale), in the same
 * host layouts, so a caller fills an ac_reference from either tier:
 *   fp64 O, LSE, dQ, dK, dV, D: S = scale Q K^T and the products through cuBLAS
 *     DGEMM, softmax, masks and row sums in fp64 kernels of this tier;
 *   the error scales E (ref/scales.c's formulas: tau, rho, G, g, r, R) through
 *     DGEMMs on absolute values, and e_lse = 1 + |LSE| + (d + 2) |scale| G_max;
 *   the naive baseline (ref/naive.c's contract) through f32 GEMM kernels of
 *     this tier (no tensor cores, no TF32), with S, P, dP, dS and the outputs
 *     rounded to the dtype between the products.  Its f32 summation order is
 *     ref/naive.c's scalar one: every product rounded, then added, in order over
 *     c (S, dP, D), over j (l, O, dQ), over the rows of every head of a GQA group
 *     (dK, dV); expf/logf are the f32 roundings of fp64 exp/log.  So the device
 *     reproduces the scalar CPU naive bit for bit except where glibc's expf or
 *     logf round the other way (rare).  Any f32 order is a valid naive; this one
 *     keeps the vs-naive ratios the same on either tier.  The cost is GEMMs
 *     without split-K or FMA, slower than cuBLAS SGEMM (the bench prints both).
 *
 * Work goes per (batch, KV head): the group's Q rows (every query head of the
 * group), K, V and dO are copied to the device as the dtype's bit patterns
 * (2 bytes an element for f16/bf16, a quarter of doubles' traffic) and widened
 * there exactly; then per query head, in blocks of query rows, one block of S
 * (rows x the block's visible key range) and its companions are resident at a
 * time.  Device memory is ref_gpu_plan's formula: O(group tensors + block),
 * never O(B H N^2).  Only the key range a block can see is computed (causal and
 * window masks cost what they keep).
 *
 * Certification stays on the CPU: ref_gpu_spot_check recomputes sampled rows
 * and keys in fp64 and says whether the device agrees to AC_CERT_MAX_ULP.
 */
#ifndef ATTNCHECK_REF_GPU_H
#define ATTNCHECK_REF_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" { /* the device code is C++ */
#endif

#include "ref.h"

/* AC_OK when a CUDA device usable by this tier is present (compute capability
 * >= 8.0, the build's PTX floor), else AC_ERR_ENV with why: "built without
 * CUDA", "no CUDA device", the driver's message, ... */
int ref_gpu_available(ac_err *why);

/* Whether this tier computes problem p: AC_OK, or AC_ERR_INPUT naming what it
 * does not implement — every variant (ref/variants.h) and the THD layout, for
 * now — so a caller choosing a tier (--reference auto) runs the CPU tier for
 * them.  ref_gpu_reference, ref_gpu_plan and ref_gpu_spot_check refuse such a
 * problem with the same message.  Built in every build (ref/cuda/plan.c). */
int ref_gpu_supports(const ac_problem *p, ac_err *why);

/* Pays the tier's fixed costs ahead of the first ref_gpu_reference, so that a
 * thread of the caller's can pay them while the inputs are drawn: the CUDA
 * context, a stream, a cuBLAS handle and its first DGEMM (cuBLAS loads its
 * kernels at first use), and the two pinned staging slots of the downloads.
 * The context it makes waits for the first thread that calls
 * ref_gpu_reference without one of its own (contexts stay one per thread).
 * Does nothing when one already waits.  AC_ERR_ENV as ref_gpu_available. */
int ref_gpu_warm_up(ac_err *err);

/* Host arrays the tier writes, shaped and laid out as ac_reference's (ref.h:
 * Q-like and K-like in the problem's layout, LSE-like (B, Hq, Nq)).  Padding
 * rows and keys get what the CPU tier gives them (0; LSE -inf).
 *   o, lse              required;
 *   e_o, e_lse          the forward scales: both or neither;
 *   naive_o, naive_lse  the naive forward: both or neither;
 * and with the backward (d_o given): dq, dk, dv, delta required; e_dq, e_dk,
 * e_dv when e_o is set; naive_dq, naive_dk, naive_dv when naive_o is set. */
typedef struct {
    double *o, *lse, *dq, *dk, *dv, *delta;
    double *e_o, *e_lse, *e_dq, *e_dk, *e_dv;
    double *naive_o, *naive_lse, *naive_dq, *naive_dk, *naive_dv;
} ref_gpu_outputs;

typedef struct {
    int block_rows; /* query rows per block; 0 = ref_gpu_plan's choice (tests force small ones) */
    size_t device_mem_limit; /* bytes the call may allocate; 0 = the device's free memory less a margin */
    bool timing; /* synchronise at stage edges and fill ref_gpu_stats.seconds */
    size_t download_chunk_elems; /* doubles per download chunk; 0 = a staging slot's (8 Mi); tests
                                    force small ones so every output crosses chunk edges */
} ref_gpu_opts;

typedef enum {
    REF_GPU_STAGE_UPLOAD = 0, /* host -> device copies and the widening kernels */
    REF_GPU_STAGE_FORWARD, /* S, |Q||K|^T, softmax rows (P, LSE, g, e_lse), O = P V */
    REF_GPU_STAGE_BACKWARD, /* D, dP, |dO||V|^T, dS rows (and the scale weights), dQ, dK, dV */
    REF_GPU_STAGE_SCALES, /* the four DGEMMs that turn weights into E_O, E_dQ, E_dK, E_dV */
    REF_GPU_STAGE_NAIVE_FWD, /* naive S, softmax, O (SGEMM + rounding kernels) */
    REF_GPU_STAGE_NAIVE_BWD, /* naive dP, dS, dQ, dK, dV */
    REF_GPU_STAGE_DOWNLOAD, /* group epilogues and device -> host copies */
    REF_GPU_STAGE_COUNT
} ref_gpu_stage;
const char *ref_gpu_stage_name(ref_gpu_stage s); /* "upload", "forward", ... */

typedef struct {
    double seconds[REF_GPU_STAGE_COUNT]; /* with opts.timing, else 0 */
    double total_seconds; /* wall time of the call */
    double flops_attention; /* fp64 GEMM flops of the reference proper: S, PV (+ dP, dQ, dK, dV) */
    double flops_scales; /* fp64 GEMM flops of the error scales (|Q||K|^T, |dO||V|^T, four E products) */
    double flops_naive; /* f32 GEMM flops of the naive baseline */
    size_t device_bytes; /* peak device memory the call allocated */
    int block_rows; /* the block height used */
    long blocks; /* (query head, row block) pairs that had visible keys */
    char device[128]; /* the device's name */
} ref_gpu_stats;

/* The reference of one case on the device.  q, k, v, d_o: the inputs in dtype
 * t as bit patterns (uint32_t for f32, uint16_t for f16/bf16, as ac_inputs
 * holds them), laid out as p says; d_o NULL runs the forward only.  opts and
 * stats may be NULL.  AC_ERR_INPUT on a bad problem or a missing output array;
 * AC_ERR_ENV on anything the device says (no device, out of memory, a fault),
 * with the failing CUDA/cuBLAS call named.  Unlike the CPU tier there is no
 * host-memory budget: ac_problem_validate runs without one, and the device
 * memory is checked against the plan. */
int ref_gpu_reference(const ac_problem *p, ac_dtype t, const void *q, const void *k, const void *v, const void *d_o,
                      const ref_gpu_opts *opts, const ref_gpu_outputs *out, ref_gpu_stats *stats, ac_err *err);

/* ---- the memory plan (pure arithmetic; also in builds without CUDA) ------
 * Per (batch, KV head) group of G = Hq / Hkv query heads (Nq, Nk the padded
 * lengths, d the head dim, s the dtype's bytes), a full call (backward,
 * scales, naive) keeps resident
 *   group: 88 G Nq d + 96 Nk d + 32 G Nq bytes + staging
 *     (f64 Q, dO, |Q|, |dO|, O, dQ, E_O, E_dQ, naive O, naive dQ; f32 Q, dO;
 *      f64 K, V, |K|, |V|, dK, dV, E_dK, E_dV, naive dK, dV; f32 K, V and the
 *      naive's dK, dV sums; LSE, D, E_lse, naive LSE; staging: the largest
 *      tensor's bit patterns, plus 8 G Nq d for the BSHD permutation)
 *   block: 48 R C + R (4 d + 32) bytes [+ R C with a dense mask]
 *     (f64 S/P, |Q||K|^T, weights, dP/dS, |dO||V|^T; f32 naive S/P, dP/dS)
 * and less without the backward, scales or naive.  C = Nk, or R + left + right
 * for a window with both sides finite.  R is the largest height with R C <=
 * 2^27 (1 GiB per f64 buffer) that fits the limit, capped at max(64, Nq/16)
 * for causal and window masks (a block computes the rectangle over its key
 * range: taller ones compute more masked pairs).  Batch and head counts do
 * not enter: groups run one after another.  bf16, d = 128, causal: N = 131072
 * at G = 1 needs 8.9 GiB (R = 1024), N = 32768 3.7 GiB (R = 2048). */
typedef struct {
    int block_rows, block_cols; /* R, C */
    size_t group_bytes, block_bytes, total_bytes;
} ref_gpu_plan_t;

/* backward, scales, naive: what the call computes.  mem_limit: bytes available
 * (0 = no limit); block_rows > 0 forces R.  AC_ERR_ENV, naming the bytes, when
 * even a block of one row does not fit. */
int ref_gpu_plan(const ac_problem *p, ac_dtype t, bool backward, bool scales, bool naive, size_t mem_limit,
                 int block_rows, ref_gpu_plan_t *plan, ac_err *err);

/* ---- CPU spot check: is the device's reference right? ----------------------
 * Recomputes in fp64 on the CPU, from the exact widenings q, k, v, d_o (d_o may
 * be NULL: forward only), n_rows sampled query rows (O, LSE, and with the
 * backward D and dQ; each row's own LSE and D) and n_keys sampled key rows (dK,
 * dV, using the device's LSE, D and O for P, dS and Dhat, as the device did),
 * and compares every element with got's.  Sampling is uniform over rows i <
 * nq_b (keys j < nk_b) with seed; asking for at least as many as there are
 * checks them all.  The disagreement of an element x (the CPU value) is
 *   |got - x| / max(ulp_t(x), u_t A)
 * with A the absolute-value shadow of x's sum (O: sum_j P|V|; dQ: |scale| sum_j
 * P (dPhat + Dhat) |K|; dK, dV alike over the rows; D: Dhat = sum |dO||O|; LSE:
 * u_f32 (1 + |LSE| + |scale| max_j sum_c |Q||K|) in place of u_t A), so that the
 * cancellation of a sum does not count against fp64 rounding.  NaN, Inf, and a
 * nonzero where x is an exact zero of a masked row read +inf unless got is the
 * same.  agrees: every disagreement <= AC_CERT_MAX_ULP (1/64). */
typedef enum {
    REF_GPU_CHECK_O = 0,
    REF_GPU_CHECK_LSE,
    REF_GPU_CHECK_DQ,
    REF_GPU_CHECK_DK,
    REF_GPU_CHECK_DV,
    REF_GPU_CHECK_DELTA,
    REF_GPU_CHECK_COUNT
} ref_gpu_check_output;
const char *ref_gpu_check_name(ref_gpu_check_output o); /* "O", "LSE", "dQ", "dK", "dV", "D" */

typedef struct {
    double units; /* the disagreement above; 0 when nothing was compared */
    int b, h, row, col; /* h: query head (O, LSE, dQ, D) or KV head (dK, dV); col -1 for LSE, D */
    double got, want, unit; /* the device value, the CPU value, the denominator */
} ref_gpu_disagreement;

typedef struct {
    ref_gpu_disagreement worst[REF_GPU_CHECK_COUNT];
    size_t rows_checked, keys_checked;
    ref_gpu_check_output worst_output; /* the output of the largest disagreement */
    bool agrees;
} ref_gpu_check;

int ref_gpu_spot_check(const ac_problem *p, ac_dtype t, const double *q, const double *k, const double *v,
                       const double *d_o, const ref_gpu_outputs *got, size_t n_rows, size_t n_keys, uint64_t seed,
                       ref_gpu_check *chk, ac_err *err);

#ifdef __cplusplus
}
#endif
#endif
