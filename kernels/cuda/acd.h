/* kernels/cuda/acd.h — private to kernels/cuda: the C entry points of the CUDA
 * kernels and the checked-call macro.  Shared by the C host files (descriptors,
 * device memory, test program) and the .cu files. */
#ifndef ATTNCHECK_ACD_H
#define ATTNCHECK_ACD_H

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif
#include "family.h" /* the kernels, their claims and the mutant ids */

/* A failed cudart call becomes AC_ERR_ENV naming the call, file and line. */
#define ACD_CHECK(err, call) \
    do { \
        cudaError_t acd_e_ = (call); \
        if (acd_e_ != cudaSuccess) \
            return ac_fail((err), AC_ERR_ENV, "%s failed: %s (%s:%d)", #call, cudaGetErrorString(acd_e_), __FILE__, \
                           __LINE__); \
    } while (0)

/* After a launch: a bad configuration shows at once, a fault at the next sync. */
#define ACD_CHECK_LAUNCH(err, name) \
    do { \
        cudaError_t acd_e_ = cudaGetLastError(); \
        if (acd_e_ != cudaSuccess) \
            return ac_fail((err), AC_ERR_ENV, "launch of %s failed: %s (%s:%d)", (name), cudaGetErrorString(acd_e_), \
                           __FILE__, __LINE__); \
    } while (0)

/* Entry points: device pointers in a, problem arrays (mask, seqlens) on the host.
 * Each synchronises before returning, so a device fault is reported here. */
int acd_flash_forward(const ac_problem *p, ac_dtype t, const ac_fwd_args *a, int mutant, ac_err *err);
int acd_flash_backward(const ac_problem *p, ac_dtype t, const ac_bwd_args *a, ac_err *err);
/* cuda-flash-fp8 (flash_fp8.cu): fp8 Q, K, V (t), descales on the host, O in p->fp8_out. */
int acd_flash_fp8_forward(const ac_problem *p, ac_dtype t, const ac_fwd_args *a, int mutant, ac_err *err);
/* `attncheck bench --fp8` (bench_fp8.cu): fp8 vs bf16 forward TFLOP/s at d = 128. */
int acd_bench_fp8(bool quick, ac_err *err);
/* cuda-decode (decode.cu): paged split-KV decode, block table and lengths on the host. */
int acd_decode_forward(const ac_problem *p, ac_dtype t, const ac_fwd_args *a, int mutant, ac_err *err);
/* cuda-decode-fp8: the same kernels on e4m3/e5m2 Q, K, V (descales per tensor or (batch, kv head)). */
int acd_decode_fp8_forward(const ac_problem *p, ac_dtype t, const ac_fwd_args *a, int mutant, ac_err *err);
/* cuda-decode-mla (decode_mla.cu): MLA decode, d 576 / d_v 512 (or 576), V read as K's first d_v channels. */
int acd_decode_mla_forward(const ac_problem *p, ac_dtype t, const ac_fwd_args *a, int mutant, ac_err *err);
/* Its split count: p->num_splits clamped (ACD_DEC_MAX_SPLITS, the workspace), or with 0 chosen from the
 * shape for `slots` resident CTAs of row_blocks packed-row blocks; no device needed. */
int acd_decode_splits(const ac_problem *p, int row_blocks, int slots);
/* Whether the split kernel's S CTAs of a row block merge in a cluster (no combine kernel): 1 < S <= 8 and
 * all `ctas` of the grid resident at once as clusters of S (max_clusters of them fit); no device needed. */
int acd_decode_cluster_fits(int splits, long long ctas, int max_clusters);
/* The split count and merge cuda-decode(-fp8, -mla: d 576) would use on this device for p (*cluster 1: the
 * split CTAs merge in clusters; 0: the combine kernel, or S = 1); a plan prepared and released. */
int acd_decode_plan_path(const ac_problem *p, ac_dtype t, int *splits, int *cluster, ac_err *err);
/* Split s's keys [*k0, *k1) of a sequence of n_keys keys in a batch whose longest sequence has `longest`,
 * cut into `splits` (decode.cuh's rule, host code). */
void acd_decode_split_keys(int n_keys, int longest, int splits, int s, int mutant, int *k0, int *k1);
/* `attncheck bench --decode` (bench_decode.cu): time and HBM bandwidth of cuda-decode at d = 128, GQA 8:1;
 * fp8 (`--decode --fp8`): cuda-decode-fp8's on an e4m3 KV cache. */
int acd_bench_decode(bool quick, bool fp8, ac_err *err);
/* `attncheck bench --decode --mla`: cuda-decode-mla's table (d 576 / d_v 512, 16 and 128 query heads, one KV head). */
int acd_bench_decode_mla(bool quick, ac_err *err);
int acd_naive_forward(const ac_problem *p, ac_dtype t, const ac_fwd_args *a, ac_err *err);

/* The kernel family each dispatcher last launched (dispatch_path.c), so a test
 * can tell which path ran, not only that the outputs were right: both paths
 * pass the correctness tests, so a dispatch change that drops a shape to the
 * fallback would otherwise go unseen (attncheck-test-cuda --dispatch). */
typedef enum { ACD_DISPATCH_FWD, ACD_DISPATCH_BWD, ACD_DISPATCH_FP8, ACD_DISPATCH_KINDS } acd_path_kind;
#define ACD_PATH_WGMMA "wgmma" /* flash_fwd_sm90.cu, flash_bwd_sm90.cu (Hopper) */
#define ACD_PATH_MMA_SYNC "mma.sync" /* flash_fwd.cu's fwd_tc, flash_bwd.cu's tiles */
#define ACD_PATH_CUDA_CORES "cuda-cores" /* flash_f32.cu: f32, and head dims without tensor-core tiles */
#define ACD_PATH_FP8_WGMMA "fp8-wgmma" /* flash_fp8_sm90.cu (Hopper) */
#define ACD_PATH_FP8_CUDA_CORES "fp8-cuda-cores" /* flash_fp8.cu's one row per thread */
/* name: one of the ACD_PATH_* strings (kept, not copied); NULL clears the record. */
void acd_note_path(acd_path_kind kind, const char *name);
/* The last name noted for kind, "none" when cleared or never noted. */
const char *acd_last_path(acd_path_kind kind);

/* Device workspace the kernels allocate, for the memory figures of `attncheck bench`. */
size_t acd_workspace_peak(void);
void acd_workspace_reset_peak(void);
int acd_ws_alloc(void **dev, size_t bytes, ac_err *err);
void acd_ws_free(void *dev, size_t bytes);

#ifdef __cplusplus
}
#endif
#endif
